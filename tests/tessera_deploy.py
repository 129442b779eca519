"""What the deployment tests share: reading the manifests (Helm chart, KServe, ModelMesh), running a
manifest's container as written against the real binary, the probes it declares, a v2 inference
over HTTP and gRPC, and ModelMesh's Triton adapter as the server sees it."""

from __future__ import annotations

import base64
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
