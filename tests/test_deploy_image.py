"""The OCI image (scripts/build-image.sh, FROM scratch) runs the deployment manifests' containers
under podman as a kubelet would: read-only root, user 1000, no capabilities and no /dev/shm, every
probe the manifest declares, a v2 inference over HTTP and gRPC, and the preStop hook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tessera_deploy import (
    IMAGE_ARCHIVE,
    IMAGE_SIZE_LIMIT,
    KSERVE_RUNTIME,
    MODELMESH_RUNTIME,
    OPERATOR_SECRETS,
    TritonAdapter,
    assert_infers_grpc,
    assert_infers_http,
    chart_secrets,
    container_env,
    container_ports,
    flag,
    http_get,
    kubelet_expand,
    load_yaml,
    one,
    rendered_chart,
    require_free,
    small_repository,
    wait_probe,
)
from tessera_testlib import (
    QUICKSTART,
    STARTUP_DEADLINE,
    assert_no_panic,
    tail,
    wait_until,
)


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
