"""The deployment files are executable truth (issue 14).

- The Helm chart (deploy/helm/tessera) passes `helm lint --strict`, renders, and its manifests
  validate against the Kubernetes schemas (kubernetes-validate, strict).
- Each container of the rendered chart, the KServe ClusterServingRuntime and the ModelMesh
  ServingRuntime is run as written (its command and args) against the real binary on loopback, with
  a model repository in place of the volume; every probe the manifest declares is checked, a v2
  inference goes over HTTP and gRPC, and for ModelMesh the Triton adapter's gRPC sequence (start-up
  check, load, infer, unload) is played against it.
- The OCI image (scripts/build-image.sh, FROM scratch) runs the same containers under podman with a
  read-only root, user 1000, no capabilities and no /dev/shm.

Nothing here talks to a Kubernetes API server: none runs on this machine (docs/deploy.md says what
is and is not tested).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tessera_testlib import (
    QUICKSTART,
    REPO_ROOT,
    STARTUP_DEADLINE,
    assert_no_panic,
    server_env,
    tail,
    tessera_bin,
    wait_until,
)

HELM = REPO_ROOT / ".tools" / "helm"
CHART = REPO_ROOT / "deploy" / "helm" / "tessera"
ADAPTER_VALUES = REPO_ROOT / "deploy" / "helm" / "prometheus-adapter-values.yaml"
KSERVE_RUNTIME = REPO_ROOT / "deploy" / "kserve" / "cluster-serving-runtime.yaml"
KSERVE_ISVC = REPO_ROOT / "deploy" / "kserve" / "inference-service.yaml"
MODELMESH_RUNTIME = REPO_ROOT / "deploy" / "modelmesh" / "serving-runtime.yaml"
IMAGE_ARCHIVE = REPO_ROOT / "target" / "image" / "tessera.oci.tar"
# The Kubernetes versions the rendered manifests are checked against (oldest supported, newest).
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
IMAGE_SIZE_LIMIT = 150_000_000
# What an operator creates for the KServe and ModelMesh runtimes before applying them (their
# headers say how); the chart makes its own Secret.
OPERATOR_SECRETS = {("tessera-admin-key", "admin-key"): "4f0c2e9b7d51a8e3c6f2b0d9e7a1c5f3b8d2e6a0"}
# The header the restricted categories need in every manifest (gRPC: triton-grpc-protocol-<it>).
ADMIN_HEADER = "admin-key"


# ---------------------------------------------------------------------------------------------
# Reading the manifests
# ---------------------------------------------------------------------------------------------

def helm(*args: str) -> subprocess.CompletedProcess:
    if not HELM.is_file():
        pytest.fail(f"{HELM} is missing: scripts/setup-deploy-tools.sh installs it", pytrace=False)
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=60)


def rendered_chart(*set_values: str) -> list[dict]:
    args = ["template", "tessera", str(CHART)]
    for value in set_values:
        args += ["--set", value]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {[d['kind'] for d in docs]}"
    return found[0]


def load_yaml(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def validate(docs: list[dict], version: str) -> subprocess.CompletedProcess:
    """kubernetes-validate, strict (unknown fields are errors), on the given documents."""
    text = yaml.safe_dump_all(docs)
    exe = Path(sys.executable).parent / "kubernetes-validate"
    return subprocess.run([str(exe), "--strict", "-k", version, "-"], input=text, capture_output=True,
                          text=True, timeout=120)


def assert_valid(docs: list[dict], version: str) -> None:
    out = validate(docs, version)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    # kubernetes-validate only warns about a kind (or removed apiVersion) it has no schema for.
    assert "Couldn't find schema" not in text, text
    assert text.count("passed") == len(docs), text


def as_pod(container: dict, volumes: list[dict] | None = None) -> dict:
    """A runtime's container inside a Pod, so the core schema checks its fields."""
    spec: dict = {"containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runtime-container"}, "spec": spec}


def chart_secrets(docs: list[dict]) -> dict[tuple[str, str], str]:
    """The values of the Secrets a rendered chart makes, by (name, key)."""
    return {(d["metadata"]["name"], key): base64.b64decode(value).decode()
            for d in docs if d["kind"] == "Secret" for key, value in d.get("data", {}).items()}


def container_env(container: dict, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """The environment the kubelet gives a container: its plain values and its secretKeyRefs,
    which must name a Secret that exists (the kubelet does not start the container otherwise)."""
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        ref = entry["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) in secrets, f"{entry['name']}: no Secret {ref['name']} with {ref['key']}"
        env[entry["name"]] = secrets[(ref["name"], ref["key"])]
    return env


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """`$(VAR)` in a command or argument, as the kubelet expands it: `$$` is a `$`, and a name
    not in the environment stays as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


# ---------------------------------------------------------------------------------------------
# Running a manifest's container against the binary
# ---------------------------------------------------------------------------------------------

def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def require_free(*ports: int) -> None:
    busy = [p for p in ports if not port_is_free(p)]
    if busy:
        pytest.fail(f"the manifests' fixed ports {busy} are taken on this machine; free them to run this test",
                    pytrace=False)


class ContainerProcess:
    """A manifest's container run as a local process: its command and args as written (with the
    kubelet's `$(VAR)` expansion), its environment (`secrets` the values of the Secrets it names),
    `tritonserver` on PATH as the binary under that name, each volume's mount path replaced by a
    local directory."""

    def __init__(self, container: dict, mounts: dict[str, Path], work: Path, name: str,
                 secrets: dict[tuple[str, str], str] | None = None):
        self.bin_dir = work / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        link = self.bin_dir / "tritonserver"
        if not link.exists():
            link.symlink_to(tessera_bin())
        # The image's entrypoint runs its arguments (`tritonserver ...`) when there is no command.
        argv = list(container.get("command") or []) + list(container.get("args") or [])

        def local(text: str) -> str:
            # Longest mount path first, so /models/_triton_models style paths map inside /models.
            for path in sorted(mounts, key=len, reverse=True):
                text = text.replace(path, str(mounts[path]))
            return text

        own_env = container_env(container, secrets or {})
        self.argv = [local(kubelet_expand(a, own_env)) for a in argv]
        self.log_path = work / f"{name}.log"
        env = server_env({**own_env, "PATH": f"{self.bin_dir}:{os.environ['PATH']}"})
        with open(self.log_path, "wb") as log:
            log.write(("$ " + shlex.join(self.argv) + "\n").encode())
            log.flush()
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, cwd=str(work))

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def assert_running(self) -> None:
        rc = self.process.poll()
        assert rc is None, f"{self.argv} exited with {rc}:\n{tail(self.log_text())}"

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                raise AssertionError(f"{self.argv} ignored SIGTERM:\n{tail(self.log_text())}")
        assert_no_panic(self.log_text())
        return self.process.returncode


def http_get(port: int, path: str) -> int:
    try:
        return requests.get(f"http://127.0.0.1:{port}{path}", timeout=5).status_code
    except requests.ConnectionError:
        return -1


def probe_passes(probe: dict, ports: dict[str, int], run_exec=None) -> bool:
    """Runs one Kubernetes probe as the kubelet would: httpGet (a named or numbered port) or exec."""
    if "httpGet" in probe:
        port = probe["httpGet"]["port"]
        port = ports[port] if isinstance(port, str) else port
        return 200 <= http_get(port, probe["httpGet"]["path"]) < 400
    if "exec" in probe:
        command = probe["exec"]["command"]
        out = (run_exec or local_exec)(command, probe.get("timeoutSeconds", 1) + 5)
        return out.returncode == 0
    raise AssertionError(f"probe kind not handled: {probe}")


def local_exec(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def wait_probe(probe: dict, ports: dict[str, int], what: str, proc: ContainerProcess | None = None,
               run_exec=None) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE
    while time.monotonic() < deadline:
        if proc is not None:
            proc.assert_running()
        if probe_passes(probe, ports, run_exec):
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} did not pass within {STARTUP_DEADLINE}s: {probe}")


def add_sub_inputs(client_module, batch: int = 1):
    a = np.arange(16, dtype=np.float32).reshape(1, 16).repeat(batch, axis=0)
    b = np.ones((batch, 16), dtype=np.float32)
    inputs = [client_module.InferInput("INPUT0", [batch, 16], "FP32"),
              client_module.InferInput("INPUT1", [batch, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a + b


def assert_infers_http(port: int, model: str = "add_sub") -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    inputs, expected = add_sub_inputs(httpclient)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


def assert_infers_grpc(port: int, model: str = "add_sub", version: str = "") -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    inputs, expected = add_sub_inputs(grpcclient)
    result = client.infer(model, inputs, model_version=version)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


def assert_trace_and_logging_are_the_operators(http_port: int, grpc_port: int, value: str) -> None:
    """The trace-setting APIs (global and per model) and the logging API answer only a request with
    the admin header (HTTP 403, gRPC UNAVAILABLE without it, as Triton answers); inference needs
    none (the callers infer without it)."""
    paths = ["/v2/trace/setting", "/v2/models/add_sub/trace/setting", "/v2/logging"]
    for path in paths:
        url = f"http://127.0.0.1:{http_port}{path}"
        refused = requests.post(url, json={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, timeout=10)
        assert refused.status_code == 403, (path, refused.status_code, refused.text)
        assert f"expecting header '{ADMIN_HEADER}'" in refused.text, refused.text
        assert requests.get(url, timeout=10).status_code == 403, path
        assert requests.get(url, headers={ADMIN_HEADER: "wrong"}, timeout=10).status_code == 403, path
        allowed = requests.get(url, headers={ADMIN_HEADER: value}, timeout=10)
        assert allowed.status_code == 200, (path, allowed.text)
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        calls = [(stub.TraceSetting, service_pb2.TraceSettingRequest()),
                 (stub.TraceSetting, service_pb2.TraceSettingRequest(model_name="add_sub")),
                 (stub.LogSettings, service_pb2.LogSettingsRequest())]
        for call, request in calls:
            with pytest.raises(grpc.RpcError) as refused:
                call(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
            call(request, timeout=10, metadata=((f"triton-grpc-protocol-{ADMIN_HEADER}", value),))


def small_repository(root: Path, model_py: bool = False) -> Path:
    """A model repository with the quickstart's add_sub (ONNX) and add_sub_rust (WebAssembly);
    with `model_py`, also add_sub_py: a Triton model.py (`backend: "python"`) with the component
    built from it beside it as model.wasm, which the image (it has no Python builder) serves."""
    root.mkdir(parents=True, exist_ok=True)
    for model in ("add_sub", "add_sub_rust"):
        shutil.copytree(QUICKSTART / model, root / model)
    if model_py:
        version = root / "add_sub_py" / "1"
        version.mkdir(parents=True)
        shutil.copy(REPO_ROOT / "example-guests" / "add_sub_python" / "model.py", version)
        # scripts/build-guests.sh built the quickstart's add_sub_python from this model.py
        shutil.copy(QUICKSTART / "add_sub_python" / "1" / "model.wasm", version)
        config = (QUICKSTART / "add_sub_python" / "config.pbtxt").read_text()
        config = config.replace('name: "add_sub_python"', 'name: "add_sub_py"').replace(
            'backend: "wasm"', 'backend: "python"')
        assert 'backend: "python"' in config
        (root / "add_sub_py" / "config.pbtxt").write_text(config)
    return root


def container_ports(container: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}


def flag(argv: list[str], name: str, default: int) -> int:
    for a in argv:
        if a.startswith(f"--{name}="):
            return int(a.split("=", 1)[1])
    return default


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


class TritonAdapter:
    """ModelMesh's built-in Triton adapter, as far as the server sees it: the gRPC calls it makes
    and the files it lays out under <models>/_triton_models (absolute symlinks into <models>/<id>)."""

    def __init__(self, models_dir: Path, port: int):
        self.models = models_dir
        self.repo = models_dir / "_triton_models"
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def runtime_status(self) -> str:
        """What it does before reporting READY: ready check, unload everything, clear, metadata."""
        assert self.stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=10).ready
        index = self.stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="", ready=True),
                                          timeout=10)
        for model in index.models:
            self.stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(model_name=model.name),
                                            timeout=30)
        for entry in self.repo.iterdir():
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        return self.stub.ServerMetadata(service_pb2.ServerMetadataRequest(), timeout=10).version

    def place_onnx_file(self, model_id: str, onnx: Path) -> None:
        """A bare .onnx file: <id>/1/model.onnx links to the puller's download; no config.pbtxt."""
        (self.models / model_id).mkdir(parents=True)
        shutil.copy(onnx, self.models / model_id / "mnist.onnx")
        (self.repo / model_id / "1").mkdir(parents=True)
        (self.repo / model_id / "1" / "model.onnx").symlink_to(self.models / model_id / "mnist.onnx")

    def place_onnx_directory(self, model_id: str, onnx: Path) -> None:
        """A directory holding model.onnx: <id>/1/model.onnx links to that directory."""
        download = self.models / model_id / "_model"
        download.mkdir(parents=True)
        shutil.copy(onnx, download / "model.onnx")
        (self.repo / model_id / "1").mkdir(parents=True)
        (self.repo / model_id / "1" / "model.onnx").symlink_to(download)

    def place_triton_layout(self, model_id: str, model_dir: Path) -> None:
        """A Triton model directory: config.pbtxt rewritten without its name, versions linked."""
        download = self.models / model_id / "_model"
        shutil.copytree(model_dir, download)
        (self.repo / model_id).mkdir(parents=True)
        config = "\n".join(line for line in (download / "config.pbtxt").read_text().splitlines()
                           if not line.startswith("name:"))
        (self.repo / model_id / "config.pbtxt").write_text(config + "\n")
        for entry in download.iterdir():
            if entry.name != "config.pbtxt":
                (self.repo / model_id / entry.name).symlink_to(entry)

    def load(self, model_id: str) -> None:
        self.stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name=model_id), timeout=90)

    def unload(self, model_id: str) -> None:
        self.stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(model_name=model_id), timeout=30)
        shutil.rmtree(self.repo / model_id, ignore_errors=True)
        shutil.rmtree(self.models / model_id, ignore_errors=True)

    def ready_models(self) -> set[str]:
        index = self.stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="", ready=True),
                                          timeout=10)
        return {m.name for m in index.models}

    def close(self) -> None:
        self.channel.close()


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


# ---------------------------------------------------------------------------------------------
# The OCI image under podman
# ---------------------------------------------------------------------------------------------

PODMAN = ["podman", "--storage-driver", "vfs"]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"podman {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def image() -> str:
    if not IMAGE_ARCHIVE.is_file():
        pytest.fail(f"{IMAGE_ARCHIVE} is missing: scripts/build-image.sh builds it (scripts/test.sh runs it)",
                    pytrace=False)
    loaded = podman("load", "--quiet", "--input", str(IMAGE_ARCHIVE), timeout=300).stdout
    return loaded.strip().split("Loaded image:")[-1].strip().splitlines()[0].strip()


class PodmanContainer:
    """A manifest's container run from the image the way a kubelet would: its command as the
    entrypoint, its args as the command, the securityContext's restrictions, a volume per mount."""

    def __init__(self, image: str, container: dict, mounts: dict[str, tuple[Path, bool]], name: str,
                 secrets: dict[tuple[str, str], str] | None = None):
        self.name = f"tessera-test-{name}-{os.getpid()}"
        env = container_env(container, secrets or {})
        podman("rm", "--force", "--ignore", self.name, check=False)
        args = [
            "run", "--detach", "--name", self.name, "--runtime", "runc", "--network", "host",
            "--read-only", "--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            # No /dev/shm in the container at all (Kubernetes gives a small one; Tessera needs none).
            "--ipc", "none",
            # This sandbox refuses to raise limits, so podman must be told the ones it has.
            "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
        ]
        for target, (source, read_only) in mounts.items():
            args += ["--volume", f"{source}:{target}:{'ro' if read_only else 'rw'}"]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        if container.get("command"):
            args += ["--entrypoint", json.dumps([kubelet_expand(c, env) for c in container["command"]])]
        args += [image, *(kubelet_expand(a, env) for a in container.get("args", []))]
        podman(*args)

    def logs(self) -> str:
        out = podman("logs", self.name, check=False)
        return out.stdout + out.stderr

    def assert_running(self) -> None:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False).stdout.strip()
        assert state == "true", f"container {self.name} is not running:\n{tail(self.logs())}"

    def exec(self, command: list[str], timeout: float) -> subprocess.CompletedProcess:
        return podman("exec", self.name, *command, timeout=timeout, check=False)

    def stop(self) -> int:
        podman("stop", "--time", "40", self.name, timeout=90)
        rc = int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name).stdout.strip())
        logs = self.logs()
        podman("rm", "--force", self.name, check=False)
        assert_no_panic(logs)
        return rc


def manifest_mounts(volumes: list[dict], container: dict, filled: dict[str, tuple[Path, bool]],
                    work: Path) -> dict[str, tuple[Path, bool]]:
    """The volumes a pod of this manifest would give the container, for podman: the directories
    the test fills (a model repository where the orchestrator puts one) plus, for each of the
    container's volumeMounts, a fresh writable directory for an emptyDir. A mount of any other
    volume kind fails the test: it would need something this test cannot stand in for."""
    by_name = {v["name"]: v for v in volumes}
    mounts = dict(filled)
    for mount in container.get("volumeMounts", []):
        path = mount["mountPath"]
        if path in mounts:
            continue
        volume = by_name.get(mount["name"])
        assert volume is not None, f"volumeMount {mount['name']} names no volume of the manifest"
        assert "emptyDir" in volume, f"volume {mount['name']} at {path} is not an emptyDir: {volume}"
        directory = work / f"emptydir-{mount['name']}"
        directory.mkdir()
        mounts[path] = (directory, bool(mount.get("readOnly", False)))
    return mounts


def run_prestop(run: "PodmanContainer", container: dict) -> None:
    """Runs the container's preStop hook inside the image, as the kubelet would before SIGTERM."""
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    started = time.monotonic()
    result = run.exec(command, 60)
    assert result.returncode == 0, f"preStop {command} failed: {result.stderr}"
    assert time.monotonic() - started >= 4, "the preStop hook waits for the endpoint removal to spread"


def test_image_is_from_scratch_small_and_non_root():
    out = subprocess.run(["skopeo", "inspect", "--raw", f"oci-archive:{IMAGE_ARCHIVE}"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    manifest = json.loads(out.stdout)
    size = sum(layer["size"] for layer in manifest["layers"])
    assert len(manifest["layers"]) == 1, "one layer of our own, no base image"
    assert size < IMAGE_SIZE_LIMIT, f"image is {size / 1e6:.1f} MB"
    out = subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{IMAGE_ARCHIVE}"], capture_output=True,
                         text=True, timeout=120)
    config = json.loads(out.stdout)["config"]
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == ["/opt/tessera/bin/entrypoint"]
    print(f"image: {size / 1e6:.1f} MB compressed")


def test_image_runs_the_chart_container(tmp_path, image):
    container = one(rendered_chart(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = container_ports(container)
    require_free(*ports.values())
    pod = one(rendered_chart(), "Deployment")["spec"]["template"]["spec"]
    repo = small_repository(tmp_path / "repo", model_py=True)
    mounts = manifest_mounts(pod["volumes"], container, {"/models": (repo, True)}, tmp_path)
    run = PodmanContainer(image, container, mounts, "chart", chart_secrets(rendered_chart()))
    try:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            wait_probe(container[probe], ports, probe)
        run.assert_running()
        assert_infers_http(ports["http"])
        assert_infers_grpc(ports["grpc"])
        assert_infers_grpc(ports["grpc"], "add_sub_rust")
        assert_infers_http(ports["http"], "add_sub_py")  # model.py, served from its prebuilt model.wasm
        # Read-only root and no /dev/shm, as promised.
        assert run.exec(["touch", "/opt/x"], 10).returncode != 0
        assert run.exec(["test", "-e", "/dev/shm"], 10).returncode != 0
        assert run.exec(["id", "-u"], 10).stdout.strip() == "1000"
        run_prestop(run, container)
    finally:
        assert run.stop() == 0, "the server exits 0 on the SIGTERM `podman stop` sends"


def test_image_runs_the_kserve_container(tmp_path, image):
    spec = one(load_yaml(KSERVE_RUNTIME), "ClusterServingRuntime")["spec"]
    container = spec["containers"][0]
    http_port, grpc_port = flag(container["args"], "http-port", 8000), container_ports(container)["h2c"]
    require_free(http_port, grpc_port)
    # KServe's storage initializer puts the repository at /mnt/models; the rest is the manifest's.
    repo = small_repository(tmp_path / "mnt-models")
    mounts = manifest_mounts(spec["volumes"], container, {"/mnt/models": (repo, True)}, tmp_path)
    run = PodmanContainer(image, container, mounts, "kserve", OPERATOR_SECRETS)
    try:
        wait_until(lambda: http_get(http_port, "/v2/health/ready") == 200, STARTUP_DEADLINE, "KServe readiness")
        run.assert_running()
        assert_infers_http(http_port)
        assert_infers_grpc(grpc_port)
        run_prestop(run, container)
    finally:
        assert run.stop() == 0


def test_image_runs_the_modelmesh_container_and_its_curl_probe(tmp_path, image):
    spec = one(load_yaml(MODELMESH_RUNTIME), "ServingRuntime")["spec"]
    container = spec["containers"][0]
    require_free(8000, 8001, 8002)
    models = tmp_path / "models"
    models.mkdir()
    os.chmod(models, 0o777)  # an emptyDir the adapter sidecar (another user) writes too
    # ModelMesh adds the /models volume it shares with the adapter; the rest is the manifest's.
    mounts = manifest_mounts(spec["volumes"], container, {"/models": (models, False)}, tmp_path)
    run = PodmanContainer(image, container, mounts, "modelmesh", OPERATOR_SECRETS)
    try:
        wait_probe(container["livenessProbe"], {}, "ModelMesh liveness (curl inside the image)",
                   run_exec=run.exec)
        run.assert_running()
        # The adapter shares /models with the server; inside the container it is at /models.
        adapter = TritonAdapter(models, 8001)
        try:
            assert adapter.runtime_status()
            onnx = QUICKSTART / "add_sub" / "1" / "model.onnx"
            model_id = "add-sub__isvc-1a2b3c4d5e"
            (models / model_id).mkdir()
            shutil.copy(onnx, models / model_id / "model.onnx")
            (adapter.repo / model_id / "1").mkdir(parents=True)
            # The adapter's symlinks are absolute paths as the containers see the shared volume.
            (adapter.repo / model_id / "1" / "model.onnx").symlink_to(f"/models/{model_id}/model.onnx")
            adapter.load(model_id)
            assert_infers_grpc(8001, model_id)
            adapter.unload(model_id)
            assert adapter.ready_models() == set()
        finally:
            adapter.close()
        run_prestop(run, container)
    finally:
        assert run.stop() == 0
