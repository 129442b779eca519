"""The deployment files run as written.

- The Helm chart (deploy/helm/tessera) passes `helm lint --strict`, renders, and its manifests
  validate against the Kubernetes schemas (kubernetes-validate, strict).
- Each container of the rendered chart, the KServe ClusterServingRuntime and the ModelMesh
  ServingRuntime is run as written (its command and args) against the real binary on loopback, with
  a model repository in place of the volume; every probe the manifest declares is checked, a v2
  inference goes over HTTP and gRPC, and for ModelMesh the Triton adapter's gRPC sequence (start-up
  check, load, infer, unload) is played against it.
- The OCI image runs the same containers under podman: test_deploy_image.py.

Nothing here talks to a Kubernetes API server: none runs on this machine (docs/deploy.md says what
is and is not tested).
"""

from __future__ import annotations

import shlex

import pytest
import requests
import yaml
from tritonclient.grpc import service_pb2

from tessera_deploy import (
    ADAPTER_VALUES,
    CHART,
    ContainerProcess,
    KSERVE_ISVC,
    KSERVE_RUNTIME,
    KUBERNETES_VERSIONS,
    MODELMESH_RUNTIME,
    OPERATOR_SECRETS,
    TritonAdapter,
    as_pod,
    assert_infers_grpc,
    assert_infers_http,
    assert_trace_and_logging_are_the_operators,
    assert_valid,
    chart_secrets,
    container_env,
    container_ports,
    flag,
    helm,
    http_get,
    load_yaml,
    one,
    rendered_chart,
    require_free,
    small_repository,
    validate,
    wait_probe,
)
from tessera_testlib import (
    QUICKSTART,
    STARTUP_DEADLINE,
    wait_until,
)


# ---------------------------------------------------------------------------------------------
# The Helm chart
# ---------------------------------------------------------------------------------------------

def test_helm_lint_passes_strict():
    out = helm("lint", "--strict", str(CHART))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_chart_validates_against_the_kubernetes_schemas(version):
    docs = rendered_chart()
    assert sorted(d["kind"] for d in docs) == ["Deployment", "HorizontalPodAutoscaler", "Secret", "Service"]
    assert_valid(docs, version)
    # Without autoscaling the Deployment carries the replica count instead.
    fixed = rendered_chart("autoscaling.enabled=false", "replicaCount=3")
    assert sorted(d["kind"] for d in fixed) == ["Deployment", "Secret", "Service"]
    assert one(fixed, "Deployment")["spec"]["replicas"] == 3
    assert_valid(fixed, version)


def test_a_schema_error_in_the_chart_would_be_caught():
    """The validation above can fail: a wrong type and an unknown field are both reported."""
    docs = rendered_chart()
    deployment = one(docs, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "eight thousand"
    assert validate([deployment], KUBERNETES_VERSIONS[-1]).returncode != 0
    deployment = one(rendered_chart(), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGets"] = {}
    assert validate([deployment], KUBERNETES_VERSIONS[-1]).returncode != 0


def test_chart_has_probes_ports_scraping_autoscaling_and_a_locked_down_pod():
    docs = rendered_chart()
    deployment, service, hpa = one(docs, "Deployment"), one(docs, "Service"), one(docs, "HorizontalPodAutoscaler")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, "startup allows 5 minutes of loading"
    assert container_ports(container) == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {
        ("http", 8000), ("grpc", 8001), ("metrics", 8002)}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8002"
    assert annotations["prometheus.io/path"] == "/metrics"
    metric = hpa["spec"]["metrics"][0]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "avg_time_queue_us"
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    security = container["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/models"] == "model-repository"
    # The kubelet must not kill the pod before the server's own drain deadline.
    exit_timeout = flag(container["args"], "exit-timeout-secs", 30)
    prestop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert prestop[-1].startswith("sleep "), prestop
    assert pod["spec"]["terminationGracePeriodSeconds"] > exit_timeout + int(prestop[-1].split()[1])


def test_chart_restricts_trace_and_logging_by_default_with_a_secret_value():
    docs = rendered_chart()
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    rule = "trace,logging:admin-key=$(TESSERA_ADMIN_KEY)"
    assert f"--http-restricted-api={rule}" in container["args"]
    assert f"--grpc-restricted-protocol={rule}" in container["args"]
    secret = one(docs, "Secret")
    ref = container["env"][0]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == (secret["metadata"]["name"], "admin-key")
    value = chart_secrets(docs)[(ref["name"], ref["key"])]
    assert len(value) == 40 and value.isalnum(), "a random value, not one the docs print"
    # The operator's own Secret instead of the chart's.
    own = rendered_chart("restrictedApi.existingSecret=ops-admin")
    assert "Secret" not in {d["kind"] for d in own}
    ref = one(own, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "ops-admin"
    # Opened, as Triton's defaults are: no Secret, no variable, no flags.
    opened = rendered_chart("restrictedApi.categories=null")
    assert "Secret" not in {d["kind"] for d in opened}
    container = one(opened, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "env" not in container
    assert not any("restricted" in a for a in container["args"])


def test_prometheus_adapter_rule_reads_metrics_the_server_exports(tmp_path):
    """The HPA's custom metric is computed from two series; both exist, per model, on /metrics."""
    values = yaml.safe_load(ADAPTER_VALUES.read_text())
    rule = values["rules"]["custom"][0]
    assert rule["name"]["as"] == one(rendered_chart(), "HorizontalPodAutoscaler")["spec"]["metrics"][0][
        "pods"]["metric"]["name"]
    series = {"nv_inference_queue_duration_us", "nv_inference_request_success"}
    assert all(s in rule["metricsQuery"] for s in series)
    deployment = one(rendered_chart(), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    require_free(8000, 8001, 8002)
    proc = ContainerProcess(container, {"/models": small_repository(tmp_path / "repo")}, tmp_path, "chart",
                            chart_secrets(rendered_chart()))
    try:
        wait_probe(container["readinessProbe"], container_ports(container), "readiness", proc)
        assert_infers_http(8000)
        text = requests.get("http://127.0.0.1:8002/metrics", timeout=5).text
        for name in series:
            assert f'{name}{{model="add_sub",version="1"}}' in text, text[:2000]
    finally:
        assert proc.stop() == 0


def test_chart_container_runs_as_written(tmp_path):
    docs = rendered_chart()
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = container_ports(container)
    require_free(*ports.values())
    secrets = chart_secrets(docs)
    proc = ContainerProcess(container, {"/models": small_repository(tmp_path / "repo")}, tmp_path, "chart",
                            secrets)
    try:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            wait_probe(container[probe], ports, probe, proc)
        assert_infers_http(ports["http"])
        assert_infers_grpc(ports["grpc"])
        assert_infers_grpc(ports["grpc"], "add_sub_rust")
        assert_trace_and_logging_are_the_operators(ports["http"], ports["grpc"], next(iter(secrets.values())))
        assert "nv_inference_count" in requests.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5).text
    finally:
        assert proc.stop() == 0


# ---------------------------------------------------------------------------------------------
# KServe
# ---------------------------------------------------------------------------------------------

def assert_runtime_fits_the_default_image(spec: dict, container: dict) -> None:
    """What the default image cannot serve is never picked automatically, the read-only root gets a
    writable /tmp from the manifest itself, and a preStop hook covers the endpoint removal."""
    formats = {f["name"]: f for f in spec["supportedModelFormats"]}
    assert formats["pytorch"]["autoSelect"] is False, "the default image has no TorchScript backend"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
    assert container["lifecycle"]["preStop"]["exec"]["command"]


def test_kserve_runtime_and_inference_service_are_well_formed():
    runtime = one(load_yaml(KSERVE_RUNTIME), "ClusterServingRuntime")
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = runtime["spec"]
    assert {f["name"] for f in spec["supportedModelFormats"]} >= {"triton", "onnx", "pytorch", "wasm"}
    assert all(isinstance(f["version"], str) for f in spec["supportedModelFormats"])
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    assert spec["annotations"]["prometheus.kserve.io/port"] == "8002"
    assert spec["annotations"]["prometheus.kserve.io/path"] == "/metrics"
    container = spec["containers"][0]
    assert container["args"][0] == "tritonserver"
    assert {"--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080"} <= set(container["args"])
    rule = "trace,logging:admin-key=$(TESSERA_ADMIN_KEY)"
    assert {f"--http-restricted-api={rule}", f"--grpc-restricted-protocol={rule}"} <= set(container["args"])
    assert container_env(container, OPERATOR_SECRETS)["TESSERA_ADMIN_KEY"]
    assert container_ports(container) == {"h2c": 9000}
    # The container itself is a valid core Container, and its volumes valid core Volumes.
    assert_valid([as_pod(container, spec["volumes"])], KUBERNETES_VERSIONS[-1])
    assert_runtime_fits_the_default_image(spec, container)
    isvc = one(load_yaml(KSERVE_ISVC), "InferenceService")
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in spec["supportedModelFormats"]}
    assert model["protocolVersion"] in spec["protocolVersions"]


def test_kserve_container_runs_as_written(tmp_path):
    container = one(load_yaml(KSERVE_RUNTIME), "ClusterServingRuntime")["spec"]["containers"][0]
    http_port = flag(container["args"], "http-port", 8000)
    grpc_port = container_ports(container)["h2c"]
    require_free(http_port, grpc_port, 8002)
    # The storage initializer's download of storageUri lands at /mnt/models.
    proc = ContainerProcess(container, {"/mnt/models": small_repository(tmp_path / "mnt-models")}, tmp_path,
                            "kserve", OPERATOR_SECRETS)
    try:
        wait_until(lambda: http_get(http_port, "/v2/health/ready") == 200, STARTUP_DEADLINE, "KServe readiness")
        assert http_get(http_port, "/v2/health/live") == 200
        assert_infers_http(http_port)
        assert_infers_grpc(grpc_port)
        assert_trace_and_logging_are_the_operators(http_port, grpc_port, next(iter(OPERATOR_SECRETS.values())))
        assert http_get(8002, "/metrics") == 200
    finally:
        assert proc.stop() == 0


# ---------------------------------------------------------------------------------------------
# ModelMesh
# ---------------------------------------------------------------------------------------------

def test_modelmesh_runtime_is_well_formed():
    runtime = one(load_yaml(MODELMESH_RUNTIME), "ServingRuntime")
    spec = runtime["spec"]
    assert spec["multiModel"] is True
    assert spec["builtInAdapter"]["serverType"] == "triton"
    assert spec["grpcDataEndpoint"] == f"port:{spec['builtInAdapter']['runtimeManagementPort']}"
    container = spec["containers"][0]
    assert container["command"] == ["/bin/sh"]
    script = container["args"][1]
    for needed in ("--model-control-mode=explicit", "--strict-model-config=false", "--strict-readiness=false",
                   '"--http-restricted-api=trace,logging:admin-key=$TESSERA_ADMIN_KEY"',
                   '"--grpc-restricted-protocol=trace,logging:admin-key=$TESSERA_ADMIN_KEY"'):
        assert needed in script
    assert container_env(container, OPERATOR_SECRETS)["TESSERA_ADMIN_KEY"]
    assert container["livenessProbe"]["exec"]["command"][0] == "curl"
    assert_valid([as_pod(container, spec["volumes"])], KUBERNETES_VERSIONS[-1])
    assert_runtime_fits_the_default_image(spec, container)


def play_modelmesh_cycle(adapter: TritonAdapter, grpc_port: int, leftover: str | None = None) -> None:
    """Start-up status, three layouts loaded and served (ids as ModelMesh makes them), then unloaded."""
    onnx = QUICKSTART / "add_sub" / "1" / "model.onnx"
    if leftover:  # a model from an earlier life of the pod: the status check unloads it
        adapter.place_onnx_file(leftover, onnx)
        adapter.load(leftover)
        assert leftover in adapter.ready_models()
    assert adapter.runtime_status()  # a version string, which ModelMesh records
    assert adapter.ready_models() == set()
    layouts = {
        "add-sub-file__isvc-1a2b3c4d5e": lambda i: adapter.place_onnx_file(i, onnx),
        "add-sub-dir__isvc-0f9e8d7c6b": lambda i: adapter.place_onnx_directory(i, onnx),
        "add-sub-triton__isvc-123456789a": lambda i: adapter.place_triton_layout(i, QUICKSTART / "add_sub"),
    }
    for model_id, place in layouts.items():
        place(model_id)
        adapter.load(model_id)
    assert adapter.ready_models() == set(layouts)
    for model_id in layouts:
        # ModelMesh puts the model id in field 1 and leaves the version empty.
        assert_infers_grpc(grpc_port, model_id, version="")
    for model_id in layouts:
        adapter.unload(model_id)
    assert adapter.ready_models() == set()
    # Unloading a model the server does not have is not an error (the adapter retries unloads).
    adapter.stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(model_name="never-loaded"),
                                       timeout=10)


def test_modelmesh_container_runs_as_written_and_serves_the_adapters_cycle(tmp_path):
    container = one(load_yaml(MODELMESH_RUNTIME), "ServingRuntime")["spec"]["containers"][0]
    require_free(8000, 8001, 8002)
    models = tmp_path / "models"  # the pod's emptyDir, shared with the adapter sidecar
    models.mkdir()
    proc = ContainerProcess(container, {"/models": models}, tmp_path, "modelmesh", OPERATOR_SECRETS)
    adapter = TritonAdapter(models, 8001)
    try:
        # The liveness probe is an exec of curl against localhost:8000, run here as the kubelet would.
        wait_probe(container["livenessProbe"], {}, "ModelMesh liveness", proc)
        assert (models / "_triton_models").is_dir()
        play_modelmesh_cycle(adapter, 8001, leftover="stale__isvc-aaaaaaaaaa")
        # The adapter's calls need no header; tracing and logging do.
        adapter.place_onnx_file("add_sub", QUICKSTART / "add_sub" / "1" / "model.onnx")
        adapter.load("add_sub")
        assert_trace_and_logging_are_the_operators(8000, 8001, next(iter(OPERATOR_SECRETS.values())))
    finally:
        adapter.close()
        assert proc.stop() == 0


# ---------------------------------------------------------------------------------------------
# Every manifest: room for the compiler processes
# ---------------------------------------------------------------------------------------------

# What the server holds beside its compilers (the quickstart repository, loaded: ~0.25 GiB), and
# the smallest cap that compiles a Python guest with numpy (Triton's add_sub example, 42 MB) on
# the few cores a pod gets: it failed at 1024 MiB and compiled at 1536 on two and four compile
# threads (`prlimit --data`, docs/wasm.md). Without numpy 768 MiB was enough.
SERVER_MIB = 256
PYTHON_GUEST_CAP_MIB = 1536


def mebibytes(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    assert quantity[-2:] in units, f"a memory limit in Mi or Gi: {quantity}"
    return int(quantity[:-2]) * units[quantity[-2:]]


def test_every_manifest_caps_its_compilers_to_fit_the_pod_and_the_example_guests():
    """A guest made to blow up the compiler must fail its own load, not get the pod OOM-killed:
    each compile is capped (--wasm-compile-memory-mib), and the caps of the compiles that can run
    at once, plus the server, fit the container's memory limit. And the cap still compiles a
    Python guest with numpy."""
    chart = one(rendered_chart(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    kserve = one(load_yaml(KSERVE_RUNTIME), "ClusterServingRuntime")["spec"]["containers"][0]
    modelmesh = one(load_yaml(MODELMESH_RUNTIME), "ServingRuntime")["spec"]["containers"][0]
    for name, container, argv in [
        ("helm", chart, chart["args"]),
        ("kserve", kserve, kserve["args"]),
        # ModelMesh loads one model per adapter call; its script is one shell string.
        ("modelmesh", modelmesh, shlex.split(modelmesh["args"][1])),
    ]:
        cap = flag(argv, "wasm-compile-memory-mib", 0)
        at_once = flag(argv, "model-load-thread-count", 1)
        limit = mebibytes(container["resources"]["limits"]["memory"])
        assert cap > 0, f"{name}: no compile memory cap"
        assert cap * at_once + SERVER_MIB <= limit, f"{name}: {at_once} x {cap} MiB + the server > {limit} MiB"
        assert cap >= PYTHON_GUEST_CAP_MIB, f"{name}: {cap} MiB does not compile a Python guest with numpy"
