"""The GPU suite: KIND_GPU placement (TorchScript on CUDA, ONNX Runtime's CUDA provider or its clear
refusal), CUDA shared memory round trips with tritonclient, GPU metrics, and a Wasm BLS guest
calling a GPU model. Skipped, with the reason, where there is no GPU.

CUDA IPC handles come from torch (`untyped_storage()._share_cuda_()`), so the suite needs no
cuda-python; on the GPU machine run it with that machine's torch (docs/gpu.md says how)."""

from __future__ import annotations

import base64
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import requests

from tessera_testlib import REPO_ROOT, quickstart_repo, wait_model_ready

if not Path("/dev/nvidiactl").exists():
    pytest.skip("no NVIDIA GPU on this machine (/dev/nvidiactl is absent)", allow_module_level=True)

torch = pytest.importorskip("torch", reason="the GPU suite allocates CUDA IPC memory with torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import gen_torch_models  # noqa: E402

FP32x4 = "data_type: TYPE_FP32 dims: [ 4 ]"
X = np.arange(8, dtype=np.float32).reshape(2, 4)
Y = np.full((2, 4), 10, dtype=np.float32)


def torch_model(repo: Path, name: str, model: str, config: str) -> None:
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    gen_torch_models.write_model(d / "1" / "model.pt", model)
    (d / "config.pbtxt").write_text(f'name: "{name}"\n{config}\n')


ADD_SUB = (f'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
           f'input [ {{ name: "INPUT__0" {FP32x4} }}, {{ name: "INPUT__1" {FP32x4} }} ]\n'
           f'output [ {{ name: "OUTPUT__0" {FP32x4} }}, {{ name: "OUTPUT__1" {FP32x4} }} ]\n')


@pytest.fixture
def gpu_repo(repo):
    torch_model(repo, "add_sub_gpu", "add_sub", ADD_SUB + "instance_group [ { kind: KIND_GPU gpus: [ 0 ] count: 2 } ]")
    torch_model(repo, "add_sub_auto", "add_sub", ADD_SUB)
    torch_model(repo, "fanout_target", "double",
                'backend: "pytorch"\nmax_batch_size: 0\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                'instance_group [ { kind: KIND_GPU } ]')
    # The Wasm BLS guest: 4 parallel calls to fanout_target (here the GPU model), on a GPU instance.
    shutil.copytree(quickstart_repo() / "bls_fanout", repo / "bls_fanout")
    cfg = repo / "bls_fanout" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"fanout_target,add_sub,simple"', '"fanout_target"')
                   + "\ninstance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n")
    onnx = repo / "onnx_gpu"
    shutil.copytree(quickstart_repo() / "add_sub", onnx)
    cfg = onnx / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "add_sub"', 'name: "onnx_gpu"')
                   + "\ninstance_group [ { kind: KIND_GPU } ]\n")
    return repo


@pytest.fixture
def gpu_server(server_factory, gpu_repo):
    srv = server_factory(gpu_repo, ["--exit-on-error", "false", "--strict-readiness", "false"])
    for m in ("add_sub_gpu", "add_sub_auto", "fanout_target", "bls_fanout"):
        wait_model_ready(srv, m)
    return srv


def test_kind_gpu_places_torchscript_instances_on_cuda(gpu_server):
    srv = gpu_server
    config = requests.get(srv.http("/v2/models/add_sub_gpu/config")).json()
    assert config["instance_group"][0]["kind"] == "KIND_GPU" and config["instance_group"][0]["gpus"] == [0]
    auto = requests.get(srv.http("/v2/models/add_sub_auto/config")).json()
    assert auto["instance_group"][0]["kind"] == "KIND_GPU", "KIND_AUTO picks the GPUs when there are any"
    client = httpclient.InferenceServerClient(srv.url)
    inputs = []
    for name, value in (("INPUT__0", X), ("INPUT__1", Y)):
        i = httpclient.InferInput(name, list(value.shape), "FP32")
        i.set_data_from_numpy(value)
        inputs.append(i)
    result = client.infer("add_sub_gpu", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), X + Y)
    assert "device=Cuda(0)" in srv.log_text()


def test_onnx_on_gpu_uses_the_cuda_provider_or_refuses_clearly(gpu_server):
    client = httpclient.InferenceServerClient(gpu_server.url)
    try:
        client.load_model("onnx_gpu")
    except InferenceServerException as e:
        # The CPU onnxruntime wheel: never a silent CPU fallback.
        assert "no CUDA execution provider" in e.message(), e.message()
        return
    config = requests.get(gpu_server.http("/v2/models/onnx_gpu/config")).json()
    assert config["instance_group"][0]["kind"] == "KIND_GPU"


def ipc_region(t):
    """(base64 cudaIpcMemHandle_t, byte offset of the tensor in its allocation) for a CUDA tensor."""
    shared = t.untyped_storage()._share_cuda_()
    handle, offset = shared[1], shared[3]
    return base64.b64encode(handle), offset


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_shared_memory_round_trip(gpu_server, protocol):
    srv = gpu_server
    mod = httpclient if protocol == "http" else grpcclient
    client = (httpclient.InferenceServerClient(srv.url) if protocol == "http"
              else grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}"))
    inputs_gpu = torch.from_numpy(np.concatenate([X, Y])).cuda().contiguous()  # one allocation, 2 tensors
    outputs_gpu = torch.zeros((2, 2, 4), dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    in_handle, in_offset = ipc_region(inputs_gpu)
    out_handle, out_offset = ipc_region(outputs_gpu)
    size = X.nbytes
    client.unregister_cuda_shared_memory()
    client.register_cuda_shared_memory("in", in_handle, 0, in_offset + 2 * size)
    client.register_cuda_shared_memory("out", out_handle, 0, out_offset + 2 * size)
    status = client.get_cuda_shared_memory_status()
    names = ({r["name"] for r in status} if protocol == "http" else set(status.regions))
    assert names == {"in", "out"}
    inputs, outputs = [], []
    for k, name in enumerate(("INPUT__0", "INPUT__1")):
        i = mod.InferInput(name, [2, 4], "FP32")
        i.set_shared_memory("in", size, offset=in_offset + k * size)
        inputs.append(i)
    for k, name in enumerate(("OUTPUT__0", "OUTPUT__1")):
        o = mod.InferRequestedOutput(name)
        o.set_shared_memory("out", size, offset=out_offset + k * size)
        outputs.append(o)
    client.infer("add_sub_gpu", inputs, outputs=outputs)
    torch.cuda.synchronize()
    got = outputs_gpu.cpu().numpy()
    np.testing.assert_array_equal(got[0], X + Y)
    np.testing.assert_array_equal(got[1], X - Y)
    client.unregister_cuda_shared_memory("in")
    client.unregister_cuda_shared_memory()
    assert not (client.get_cuda_shared_memory_status() if protocol == "http"
                else client.get_cuda_shared_memory_status().regions)


def test_gpu_metrics_have_triton_names_and_uuids(gpu_server):
    text = requests.get(f"http://127.0.0.1:{gpu_server.metrics_port}/metrics").text
    for name in ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                 "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"):
        assert re.search(name + r'\{gpu_uuid="GPU-[0-9a-f]{8}-[0-9a-f-]+"\} [0-9.e+]+', text), f"{name}:\n{text}"
    total = re.search(r'nv_gpu_memory_total_bytes\{[^}]*\} ([0-9.e+]+)', text)
    assert float(total.group(1)) == pytest.approx(torch.cuda.get_device_properties(0).total_memory, rel=0.05)


def test_wasm_bls_guest_calls_a_gpu_model(gpu_server):
    config = requests.get(gpu_server.http("/v2/models/bls_fanout/config")).json()
    assert config["instance_group"][0]["kind"] == "KIND_GPU"
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{gpu_server.grpc_port}")
    x = np.arange(16, dtype=np.float32)
    i = grpcclient.InferInput("INPUT0", [16], "FP32")
    i.set_data_from_numpy(x)
    result = client.infer("bls_fanout", [i])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 8 * x)  # 4 calls of 2 * x
    stats = requests.get(gpu_server.http("/v2/models/fanout_target/stats")).json()["model_stats"][0]
    assert stats["inference_count"] == 4
