"""Triton's own python_backend examples, run unchanged on Tessera.

tests/third_party/python_backend/ holds examples/{add_sub, bls, bls_decoupled, decoupled, auto_complete,
custom_metrics} of
triton-inference-server/python_backend (branch r24.10, Triton 2.51; BSD-3-Clause, its LICENSE
beside them), copied as published. Each model.py and config.pbtxt is laid out in a model
repository as the example's README says, served straight from model.py (the server builds each
into a sandboxed guest at load), and driven by the example's own client.py, which asserts the
results and exits non-zero on a wrong one.

The clients hard-code localhost:8000 (HTTP), localhost:8001 (gRPC) and localhost:8002 (metrics),
so the server listens there: the module fails, saying so, when another process holds those ports.

What is not the published example, and why:
- `pytorch` (called by both bls examples) imports torch, which cannot run in a Wasm guest: it
  stands in as an ONNX model of the same name, inputs and outputs (OUTPUT0 = INPUT0 + INPUT1,
  OUTPUT1 = INPUT0 - INPUT1), with the example's config.pbtxt but for `backend`.
- The server runs with `--python-allowed-models '*'`: Triton lets any Python model call any
  model; Tessera's sandbox allows none unless told.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tessera_deploy import port_is_free  # SO_REUSEADDR: a port the group's last file left in TIME_WAIT is free
from tessera_testlib import build_argv, server_env, tail, TesseraServer, wait_model_ready

EXAMPLES = Path(__file__).resolve().parent / "third_party" / "python_backend" / "examples"

# model name -> (model.py, config.pbtxt or None for auto-complete), as the examples' READMEs lay them out
MODELS = {
    "add_sub": ("add_sub/model.py", "add_sub/config.pbtxt"),
    "bls_sync": ("bls/sync_model.py", "bls/sync_config.pbtxt"),
    "bls_async": ("bls/async_model.py", "bls/async_config.pbtxt"),
    "bls_decoupled_sync": ("bls_decoupled/sync_model.py", "bls_decoupled/sync_config.pbtxt"),
    "bls_decoupled_async": ("bls_decoupled/async_model.py", "bls_decoupled/async_config.pbtxt"),
    "repeat_int32": ("decoupled/repeat_model.py", "decoupled/repeat_config.pbtxt"),
    "square_int32": ("decoupled/square_model.py", "decoupled/square_config.pbtxt"),
    # no config.pbtxt: the models' own auto_complete_config writes it
    "nobatch_auto_complete": ("auto_complete/nobatch_model.py", None),
    "batch_auto_complete": ("auto_complete/batch_model.py", None),
    # pb_utils.MetricFamily: its client reads the counter on /metrics
    "custom_metrics": ("custom_metrics/model.py", "custom_metrics/config.pbtxt"),
}

# Building the Python guests (numpy included) and compiling them takes minutes on a cold cache.
LOAD_DEADLINE = 1200.0
pytestmark = pytest.mark.timeout(1800)


def pytorch_stand_in() -> bytes:
    """The `pytorch` example's model as ONNX: FP32 [4] inputs, OUTPUT0 = sum, OUTPUT1 = difference."""
    def vi(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [4])

    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "pytorch", [vi("INPUT0"), vi("INPUT1")], [vi("OUTPUT0"), vi("OUTPUT1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def lay_out(repo: Path) -> None:
    for name, (model_py, config) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(EXAMPLES / model_py, repo / name / "1" / "model.py")
        if config:
            shutil.copy(EXAMPLES / config, repo / name / "config.pbtxt")
    stand_in = repo / "pytorch"
    (stand_in / "1").mkdir(parents=True)
    (stand_in / "1" / "model.onnx").write_bytes(pytorch_stand_in())
    config = (EXAMPLES / "pytorch" / "config.pbtxt").read_text()
    assert 'backend: "python"' in config
    (stand_in / "config.pbtxt").write_text(config.replace('backend: "python"', 'backend: "onnxruntime"'))


@pytest.fixture(scope="module")
def examples_server(tmp_path_factory, tessera_binary):
    busy = [p for p in (8000, 8001, 8002) if not port_is_free(p)]
    if busy:
        pytest.fail(f"the examples' clients talk to localhost:8000, :8001 and :8002, and port(s) {busy} are taken",
                    pytrace=False)
    root = tmp_path_factory.mktemp("triton-examples")
    repo = root / "models"
    lay_out(repo)
    argv = build_argv(tessera_binary, [repo], 8000, 8001, 8002, ["--python-allowed-models", "*"])
    log_path = root / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=server_env(), cwd=str(root))
    srv = TesseraServer(proc, 8000, 8001, 8002, log_path, argv)
    try:
        srv.wait_live(deadline=LOAD_DEADLINE)
        for name in [*MODELS, "pytorch"]:
            wait_model_ready(srv, name, deadline=LOAD_DEADLINE)
    except BaseException:
        srv.stop()
        raise
    yield srv
    srv.stop_and_check()


def run_client(example: str, client: str) -> str:
    run = subprocess.run([sys.executable, client], cwd=EXAMPLES / example, capture_output=True, text=True,
                         timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, f"{example}/{client} exited with {run.returncode}:\n{tail(out)}"
    return out


@pytest.mark.parametrize(("example", "client", "passed"), [
    ("add_sub", "client.py", "PASS: add_sub"),
    ("bls", "sync_client.py", "PASS: BLS Sync"),
    ("bls", "async_client.py", "PASS: BLS Async"),
    ("bls_decoupled", "sync_client.py", "PASS: BLS Decoupled Sync"),
    ("bls_decoupled", "async_client.py", "PASS: BLS Decoupled Async"),
    ("decoupled", "repeat_client.py", "PASS: repeat_int32"),
    ("decoupled", "square_client.py", "PASS: square_int32"),
    ("auto_complete", "client.py", "PASS: auto_complete"),
    ("custom_metrics", "client.py", "PASS: custom_metrics"),
])
def test_the_published_client_passes(examples_server, example, client, passed):
    out = run_client(example, client)
    assert passed in out, f"{example}/{client} did not say {passed!r}:\n{tail(out)}"
    examples_server.assert_no_new_panic()


def test_bls_to_a_model_that_does_not_exist_fails_that_request_with_triton_words(examples_server):
    """bls/sync_client.py only prints the error of its third request (MODEL_NAME
    'undefined_model'); the README shows what Triton says. The request fails, the others pass."""
    out = run_client("bls", "sync_client.py")
    assert "undefined_model" in out and "not" in out, tail(out)


@pytest.mark.parametrize(("model", "shape"), [("nobatch_auto_complete", [4]), ("batch_auto_complete", [3, 4])])
def test_a_model_configured_by_its_auto_complete_config_serves(examples_server, model, shape):
    """The auto_complete README says the models then serve like add_sub; its client only reads the
    configs, so this asks: the batching one takes a batch of 3 under the max_batch_size it set."""
    import numpy as np
    import tritonclient.http as httpclient

    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    b = np.full(shape, 0.5, dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", shape, "FP32"), httpclient.InferInput("INPUT1", shape, "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    with httpclient.InferenceServerClient("127.0.0.1:8000") as client:
        result = client.infer(model, inputs)
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
    assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)
