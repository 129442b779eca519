"""TorchScript backend (`platform: "pytorch_libtorch"` / `backend: "pytorch"`) and the GPU paths as
seen on a machine without a GPU: KIND_GPU refused, no GPU metrics, CUDA shared memory answering as
Triton does. Real server, real libtorch, real tritonclient over HTTP and gRPC on 127.0.0.1.

Model files are TorchScript archives written by scripts/gen_torch_models.py (no `import torch`).
The GPU-only suite is tests/gpu/."""

from __future__ import annotations

import base64
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import REPO_ROOT, wait_model_ready

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import gen_torch_models  # noqa: E402

FP32x4 = "data_type: TYPE_FP32 dims: [ 4 ]"


def has_gpu() -> bool:
    return Path("/dev/nvidiactl").exists()


def write_torch_model(repo: Path, name: str, model: str | None, config: str) -> Path:
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    if model is not None:
        gen_torch_models.write_model(d / "1" / "model.pt", model)
    (d / "config.pbtxt").write_text(f'name: "{name}"\n{config}\n')
    return d


def add_sub_config(inputs=("INPUT__0", "INPUT__1"), outputs=("OUTPUT__0", "OUTPUT__1"), *,
                   max_batch_size: int = 8, extra: str = "", header: str = 'platform: "pytorch_libtorch"') -> str:
    ins = ", ".join(f'{{ name: "{n}" {FP32x4} }}' for n in inputs)
    outs = ", ".join(f'{{ name: "{n}" {FP32x4} }}' for n in outputs)
    return f"{header}\nmax_batch_size: {max_batch_size}\ninput [ {ins} ]\noutput [ {outs} ]\n{extra}"


def infer_http(srv, model: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(srv.url)
    inputs = []
    for name, value in feeds.items():
        dtype = httpclient.np_to_triton_dtype(value.dtype)
        i = httpclient.InferInput(name, list(value.shape), dtype)
        i.set_data_from_numpy(value, binary_data=True)
        inputs.append(i)
    result = client.infer(model, inputs, outputs=[httpclient.InferRequestedOutput(o, binary_data=True)
                                                  for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


def infer_grpc(srv, model: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    inputs = []
    for name, value in feeds.items():
        dtype = grpcclient.np_to_triton_dtype(value.dtype)
        i = grpcclient.InferInput(name, list(value.shape), dtype)
        i.set_data_from_numpy(value)
        inputs.append(i)
    result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


def load_error(srv, model: str) -> str:
    client = httpclient.InferenceServerClient(srv.url)
    with pytest.raises(InferenceServerException) as ei:
        client.load_model(model)
    return ei.value.message()


X = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
Y = np.array([[10, 20, 30, 40], [0.5, 0.25, -1, -2]], dtype=np.float32)


@pytest.fixture
def naming_server(server_factory, repo):
    write_torch_model(repo, "by_index", "add_sub", add_sub_config())
    write_torch_model(repo, "by_index_swapped", "add_sub",
                      add_sub_config(("INPUT__1", "INPUT__0"), ("OUTPUT__1", "OUTPUT__0")))
    write_torch_model(repo, "by_argument", "add_sub",
                      add_sub_config(("y", "x"), ("sum", "diff"), header='backend: "pytorch"'))
    write_torch_model(repo, "by_order", "add_sub", add_sub_config(("first", "second"), ("plus", "minus")))
    srv = server_factory(repo)
    for m in ("by_index", "by_index_swapped", "by_argument", "by_order"):
        wait_model_ready(srv, m)
    return srv


@pytest.mark.parametrize("infer", [infer_http, infer_grpc], ids=["http", "grpc"])
def test_inputs_and_outputs_bind_by_triton_naming_conventions(naming_server, infer):
    srv = naming_server
    # <name>__<index>: positions of forward(x, y) and of the returned (x + y, x - y).
    out = infer(srv, "by_index", {"INPUT__0": X, "INPUT__1": Y}, ["OUTPUT__0", "OUTPUT__1"])
    np.testing.assert_array_equal(out["OUTPUT__0"], X + Y)
    np.testing.assert_array_equal(out["OUTPUT__1"], X - Y)
    # The index, not the config order, decides.
    out = infer(srv, "by_index_swapped", {"INPUT__0": X, "INPUT__1": Y}, ["OUTPUT__1", "OUTPUT__0"])
    np.testing.assert_array_equal(out["OUTPUT__1"], X - Y)
    # forward()'s argument names, in any config order.
    out = infer(srv, "by_argument", {"x": X, "y": Y}, ["sum", "diff"])
    np.testing.assert_array_equal(out["sum"], X + Y)
    np.testing.assert_array_equal(out["diff"], X - Y)
    # Neither: the config's order.
    out = infer(srv, "by_order", {"first": X, "second": Y}, ["minus"])
    np.testing.assert_array_equal(out["minus"], X - Y)


def test_metadata_and_statistics(naming_server):
    srv = naming_server
    meta = requests.get(srv.http("/v2/models/by_index")).json()
    assert meta["platform"] == "pytorch_libtorch"
    assert [i["name"] for i in meta["inputs"]] == ["INPUT__0", "INPUT__1"]
    assert [o["shape"] for o in meta["outputs"]] == [[-1, 4], [-1, 4]]
    infer_http(srv, "by_index", {"INPUT__0": X, "INPUT__1": Y}, ["OUTPUT__0"])
    stats = requests.get(srv.http("/v2/models/by_index/stats")).json()["model_stats"][0]
    assert stats["inference_count"] == 2 and stats["execution_count"] == 1
    assert stats["inference_stats"]["compute_infer"]["count"] == 1
    metrics = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics").text
    assert 'nv_inference_count{model="by_index",version="1"} 2' in metrics


def test_request_errors_are_clear(naming_server):
    srv = naming_server
    client = httpclient.InferenceServerClient(srv.url)
    bad = httpclient.InferInput("INPUT__0", [1, 4], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 4), dtype=np.int32))
    other = httpclient.InferInput("INPUT__1", [1, 4], "FP32")
    other.set_data_from_numpy(np.zeros((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException) as ei:
        client.infer("by_index", [bad, other])
    assert "INT32" in ei.value.message() and "INPUT__0" in ei.value.message()
    wrong_shape = httpclient.InferInput("INPUT__0", [1, 5], "FP32")
    wrong_shape.set_data_from_numpy(np.zeros((1, 5), dtype=np.float32))
    with pytest.raises(InferenceServerException) as ei:
        client.infer("by_index", [wrong_shape, other])
    assert "INPUT__0" in ei.value.message() and "shape" in ei.value.message()


def test_dynamic_batching_merges_rows_into_one_forward(server_factory, repo):
    extra = "dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 8 ] }"
    write_torch_model(repo, "batched", "add_sub", add_sub_config(extra=extra))
    srv = server_factory(repo)
    wait_model_ready(srv, "batched")
    rows = [np.full((1, 4), i, dtype=np.float32) for i in range(8)]

    def one(i):
        return i, infer_http(srv, "batched", {"INPUT__0": rows[i], "INPUT__1": rows[i] * 10},
                             ["OUTPUT__0", "OUTPUT__1"])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    for i, out in results:
        np.testing.assert_array_equal(out["OUTPUT__0"], rows[i] * 11, err_msg=f"request {i} got another's rows")
        np.testing.assert_array_equal(out["OUTPUT__1"], rows[i] * -9)
    stats = requests.get(srv.http("/v2/models/batched/stats")).json()["model_stats"][0]
    assert stats["inference_count"] == 8
    assert stats["execution_count"] < 8, f"8 concurrent requests ran as {stats['execution_count']} forward() calls"
    assert any(b["batch_size"] > 1 for b in stats["batch_stats"])


ALL_TYPES = {
    "b": np.bool_, "u8": np.uint8, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
}
CONFIG_TYPES = {
    np.bool_: "TYPE_BOOL", np.uint8: "TYPE_UINT8", np.int8: "TYPE_INT8", np.int16: "TYPE_INT16",
    np.int32: "TYPE_INT32", np.int64: "TYPE_INT64", np.float16: "TYPE_FP16", np.float32: "TYPE_FP32",
    np.float64: "TYPE_FP64", ml_dtypes.bfloat16: "TYPE_BF16",
}


@pytest.mark.parametrize("infer", [infer_http, infer_grpc], ids=["http", "grpc"])
def test_every_torchscript_datatype_round_trips(server_factory, repo, infer):
    def config_type(_name, t):
        return CONFIG_TYPES[t]

    ins = ", ".join(f'{{ name: "{n}" data_type: {config_type(n, t)} dims: [ 3 ] }}' for n, t in ALL_TYPES.items())
    outs = ", ".join(f'{{ name: "OUTPUT__{i}" data_type: {config_type(n, t)} dims: [ 3 ] }}'
                     for i, (n, t) in enumerate(ALL_TYPES.items()))
    write_torch_model(repo, "all_types", "all_types",
                      f'backend: "pytorch"\nmax_batch_size: 4\ninput [ {ins} ]\noutput [ {outs} ]')
    srv = server_factory(repo)
    wait_model_ready(srv, "all_types")
    feeds = {}
    for n, t in ALL_TYPES.items():
        feeds[n] = np.array([[True, False, True]]) if t is np.bool_ else np.array([[0, 1, 2]], dtype=t)
    feeds["bf16"] = np.array([[0.5, 1.5, -3.0]], dtype=ml_dtypes.bfloat16)
    out = infer(srv, "all_types", feeds, [f"OUTPUT__{i}" for i in range(len(ALL_TYPES))])
    for i, (n, t) in enumerate(ALL_TYPES.items()):
        got = out[f"OUTPUT__{i}"]
        want = np.logical_not(feeds[n]) if t is np.bool_ else feeds[n] + 1
        np.testing.assert_array_equal(got, want, err_msg=n)
        assert got.dtype == want.dtype, (n, got.dtype)


@pytest.fixture
def explicit(server_factory, repo):
    def start():
        return server_factory(repo, ["--model-control-mode", "explicit"])
    return start


def test_load_errors_say_what_is_wrong(explicit, repo):
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.pt").write_bytes(b"this is not a TorchScript archive")
    (repo / "broken" / "config.pbtxt").write_text(f'name: "broken"\n{add_sub_config()}')
    write_torch_model(repo, "one_input", "add_sub", add_sub_config(inputs=("INPUT__0",)))
    write_torch_model(repo, "strings", "add_sub",
                      'platform: "pytorch_libtorch"\nmax_batch_size: 0\n'
                      'input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ 1 ] }, '
                      f'{{ name: "INPUT__1" {FP32x4} }} ]\noutput [ {{ name: "OUTPUT__0" {FP32x4} }} ]')
    write_torch_model(repo, "uint32", "add_sub",
                      add_sub_config().replace('"INPUT__0" data_type: TYPE_FP32', '"INPUT__0" data_type: TYPE_UINT32'))
    write_torch_model(repo, "no_file", None, add_sub_config())
    write_torch_model(repo, "sharing", "add_sub", add_sub_config(
        extra='parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }'))
    write_torch_model(repo, "bad_threads", "add_sub", add_sub_config(
        extra='parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "many" } }'))
    write_torch_model(repo, "tuned", "add_sub", add_sub_config(extra="""
        parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }
        parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }
        parameters { key: "ENABLE_TENSOR_FUSER" value: { string_value: "false" } }
        parameters { key: "ENABLE_JIT_PROFILING" value: { string_value: "false" } }
        instance_group [ { kind: KIND_CPU count: 2 } ]
        model_warmup [ { name: "zeros" batch_size: 2
          inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
          inputs { key: "INPUT__1" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]"""))
    srv = explicit()
    assert "failed to load model 'broken'" in load_error(srv, "broken")
    assert "configuration expects 1 inputs, model provides 2" in load_error(srv, "one_input")
    msg = load_error(srv, "strings")
    assert "TYPE_STRING" in msg and "does not support string" in msg, msg
    assert "unsupported datatype TYPE_UINT32 for input 'INPUT__0'" in load_error(srv, "uint32")
    assert "model.pt" in load_error(srv, "no_file")
    assert "parameter 'ENABLE_WEIGHT_SHARING' is not supported" in load_error(srv, "sharing")
    assert "INTRA_OP_THREAD_COUNT" in load_error(srv, "bad_threads")
    # Parameters Tessera honours, two instances and warmup: loads and serves.
    httpclient.InferenceServerClient(srv.url).load_model("tuned")
    out = infer_grpc(srv, "tuned", {"INPUT__0": X, "INPUT__1": Y}, ["OUTPUT__0"])
    np.testing.assert_array_equal(out["OUTPUT__0"], X + Y)
    config = requests.get(srv.http("/v2/models/tuned/config")).json()
    assert config["instance_group"][0]["count"] == 2
    srv.assert_alive()


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU (tests/gpu covers KIND_GPU there)")
def test_kind_gpu_is_a_clear_load_error_without_a_gpu(explicit, repo):
    write_torch_model(repo, "torch_gpu", "add_sub",
                      add_sub_config(extra="instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]"))
    onnx_dir = repo / "onnx_gpu"
    (onnx_dir / "1").mkdir(parents=True)
    src = REPO_ROOT / "model-repos" / "quickstart" / "add_sub"
    (onnx_dir / "1" / "model.onnx").write_bytes((src / "1" / "model.onnx").read_bytes())
    config = (src / "config.pbtxt").read_text().replace('name: "add_sub"', 'name: "onnx_gpu"')
    (onnx_dir / "config.pbtxt").write_text(config + "\ninstance_group [ { kind: KIND_GPU } ]\n")
    write_torch_model(repo, "torch_auto", "add_sub",
                      add_sub_config(extra="instance_group [ { kind: KIND_AUTO } ]"))
    srv = explicit()
    for model in ("torch_gpu", "onnx_gpu"):
        msg = load_error(srv, model)
        assert f"of model '{model}' specifies KIND_GPU but no GPU is available to this server" in msg, msg
    # KIND_AUTO falls to CPU; nothing else changes.
    httpclient.InferenceServerClient(srv.url).load_model("torch_auto")
    config = requests.get(srv.http("/v2/models/torch_auto/config")).json()
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    np.testing.assert_array_equal(infer_http(srv, "torch_auto", {"INPUT__0": X, "INPUT__1": Y},
                                             ["OUTPUT__1"])["OUTPUT__1"], X - Y)


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU")
def test_no_gpu_metrics_without_a_gpu(server):
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    assert "nv_inference_count" in text
    assert "nv_gpu_" not in text and "nv_energy_consumption" not in text


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU (tests/gpu registers real CUDA regions)")
def test_cuda_shared_memory_answers_as_triton_does_without_a_gpu(server):
    # What the reference Triton 2.51 (a GPU build) answers on this GPU-less machine, plus the reason.
    expected = "failed to register shared memory region: invalid args (no CUDA-capable device is detected)"
    # What tritonclient's cuda_shared_memory.get_raw_handle() returns: a base64 cudaIpcMemHandle_t.
    raw_handle = base64.b64encode(b"\0" * 64)
    http = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as ei:
        http.register_cuda_shared_memory("gpu_in", raw_handle, 0, 64)
    assert ei.value.message() == expected
    assert ei.value.status() == "400"
    assert http.get_cuda_shared_memory_status() == []
    with pytest.raises(InferenceServerException) as ei:
        http.get_cuda_shared_memory_status("gpu_in")
    assert "Unable to find cuda shared memory region: 'gpu_in'" in ei.value.message()
    http.unregister_cuda_shared_memory("gpu_in")
    http.unregister_cuda_shared_memory()

    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    with pytest.raises(InferenceServerException) as ei:
        grpc.register_cuda_shared_memory("gpu_in", raw_handle, 0, 64)
    assert ei.value.message() == expected
    assert ei.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert len(grpc.get_cuda_shared_memory_status().regions) == 0
    grpc.unregister_cuda_shared_memory()
    # A system region and a CUDA region share one name space, as in Triton.
    assert http.get_system_shared_memory_status() == []


def test_quickstart_torch_pipeline_answers_like_the_onnx_one(server):
    wait_model_ready(server, "text_pipeline_torch")
    wait_model_ready(server, "linear_classifier")
    text = np.array([[b"hello world foo"], [b"tessera"], [b""]], dtype=object)
    answers = []
    for model in ("text_pipeline", "text_pipeline_torch"):
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        i = grpcclient.InferInput("TEXT", [3, 1], "BYTES")
        i.set_data_from_numpy(text)
        r = client.infer(model, [i])
        answers.append({o: r.as_numpy(o).tolist() for o in ("TOKEN_COUNT", "MEAN_ID", "LABEL")})
    assert answers[0] == answers[1]
    features = np.array([[1, 2, 3, 4], [0, 0, 0, 0]], dtype=np.float32)
    probs = infer_http(server, "linear_classifier", {"features": features}, ["PROBABILITIES"])["PROBABILITIES"]
    assert probs.shape == (2, 3)
    np.testing.assert_allclose(probs.sum(axis=1), [1, 1], rtol=1e-6)
    # Row 2 is softmax(bias) = softmax([0.1, -0.1, 0]).
    bias = np.array([0.1, -0.1, 0.0])
    np.testing.assert_allclose(probs[1], np.exp(bias) / np.exp(bias).sum(), rtol=1e-5)
