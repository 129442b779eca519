"""Guests in JavaScript, C and C++, and the standard wasi:nn interface, end to end.

- The example guests in model-repos/quickstart (built by scripts/build-guests.sh): add_sub_js,
  bls_add_sub_js (BLS: exec, execAsync, a decoupled stream), repeat_js (decoupled), add_sub_c,
  bls_add_sub_c, add_sub_cpp, and nn_classify (a Rust guest built for WASI whose inference goes
  through wasi:nn to the served ONNX image_classifier), through tritonclient over HTTP and gRPC.
- Test guests built here with `tessera guest build` (tests/guests/): a JavaScript probe (errors,
  logging, handles released under a stream of 1 MiB requests) and a C probe that uses libc stdio
  (the WASI preview1 adapter, the filesystem grant).
- wasi:nn's errors: a model not in `allowed_models`, an unknown model or version, an output type
  wasi:nn has none for (a BOOL model made here with the onnx package), `name:version`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tessera_testlib import (
    REPO_ROOT,
    GuestBuild,
    assert_error,
    copy_model,
    grpc_stream_responses,
    post_infer,
    quickstart_repo,
    sse_events,
    start_server,
    tessera_bin,
    wait_model_ready,
    wait_until,
)

TESTS = Path(__file__).resolve().parent
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 0.5, dtype=np.float32)


def add_sub_inputs(module, a=A, b=B):
    i0 = module.InferInput("INPUT0", list(a.shape), "FP32")
    i0.set_data_from_numpy(a)
    i1 = module.InferInput("INPUT1", list(b.shape), "FP32")
    i1.set_data_from_numpy(b)
    return [i0, i1]


def http_client(server) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.url)


def grpc_client(server) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# ---------------------------------------------------------------------------------------------
# The example guests, on the shared quickstart server
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["add_sub_js", "add_sub_c", "add_sub_cpp"])
def test_add_sub_in_every_language_over_both_doors(server, model):
    wait_model_ready(server, model)  # a JavaScript guest compiles for a while at first load
    http = http_client(server).infer(model, add_sub_inputs(httpclient))
    np.testing.assert_array_equal(http.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(http.as_numpy("OUTPUT1"), A - B)
    # A batch of 3 rows over gRPC: each row is its own add/sub.
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    b = np.ones((3, 16), dtype=np.float32)
    grpc = grpc_client(server).infer(model, add_sub_inputs(grpcclient, a, b))
    np.testing.assert_array_equal(grpc.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(grpc.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("model", ["bls_add_sub_c", "bls_add_sub_js"])
def test_bls_guests_call_the_onnx_add_sub_and_are_counted_there(server, model):
    wait_model_ready(server, model)
    client = http_client(server)

    def add_sub_count():
        stats = client.get_inference_statistics("add_sub")["model_stats"][0]
        return stats["inference_stats"]["success"]["count"]

    before = add_sub_count()
    result = client.infer(model, add_sub_inputs(httpclient))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    assert add_sub_count() == before + 1, "the BLS call went through add_sub's scheduler"


def test_javascript_bls_parallel_calls_and_a_decoupled_stream(server):
    wait_model_ready(server, "bls_add_sub_js")
    wait_model_ready(server, "repeat_js")
    client = http_client(server)
    parallel = client.infer("bls_add_sub_js", add_sub_inputs(httpclient), parameters={"mode": "async", "calls": 4})
    np.testing.assert_array_equal(parallel.as_numpy("OUTPUT0"), A + B)
    # "stream": BLS to the decoupled repeat_js with IN = [1, 2, 3]; its three responses land in
    # OUTPUT0[:3].
    streamed = client.infer("bls_add_sub_js", add_sub_inputs(httpclient), parameters={"mode": "stream"})
    assert streamed.as_numpy("OUTPUT0")[0, :4].tolist() == [1.0, 2.0, 3.0, 0.0]


def test_javascript_guest_errors_reach_the_client_with_their_code(server):
    wait_model_ready(server, "bls_add_sub_js")
    r = post_infer(server, "bls_add_sub_js", {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16},
        ],
        "parameters": {"mode": "sideways"},
    })
    assert_error(r, 400, "parameter 'mode' must be", "sideways")


def test_decoupled_javascript_guest_streams_over_http_and_grpc(server):
    wait_model_ready(server, "repeat_js")
    r = requests.post(server.http("/v2/models/repeat_js/generate_stream"), json={"IN": [7, 8, 9]}, stream=True,
                      timeout=30)
    assert r.status_code == 200, r.text
    events = sse_events(r)
    assert [(e["OUT"], e["IDX"]) for e in events] == [(7, 0), (8, 1), (9, 2)]

    inp = grpcclient.InferInput("IN", [4], "INT32")
    inp.set_data_from_numpy(np.array([5, 6, 7, 8], dtype=np.int32))
    got = grpc_stream_responses(f"127.0.0.1:{server.grpc_port}", "repeat_js", [inp], ["OUT", "IDX"])
    assert got == [(5, 0), (6, 1), (7, 2), (8, 3)]


def test_wasi_nn_guest_classifies_through_the_served_onnx_model(server):
    wait_model_ready(server, "nn_classify")
    client = http_client(server)

    def classifier_count():
        stats = client.get_inference_statistics("image_classifier")["model_stats"][0]
        return stats["inference_stats"]["success"]["count"]

    before = classifier_count()
    for channel, expected in enumerate((284, 963, 10)):
        image = np.zeros((1, 3, 224, 224), dtype=np.float32)
        image[0, channel] = 1.0
        inp = httpclient.InferInput("IMAGE", list(image.shape), "FP32")
        inp.set_data_from_numpy(image)
        result = client.infer("nn_classify", [inp])
        ids = result.as_numpy("CLASS_IDS").tolist()
        probabilities = result.as_numpy("PROBABILITIES")
        assert ids == [expected, 0, 1, 2, 3], ids
        assert probabilities[0] > 0.9 and list(probabilities) == sorted(probabilities, reverse=True)
    assert classifier_count() == before + 3, "wasi:nn compute runs through the model's scheduler"


# ---------------------------------------------------------------------------------------------
# wasi:nn's errors and its name:version syntax: nn_classify's wasm with a forwarding config
# ---------------------------------------------------------------------------------------------

def is_greater_onnx() -> bytes:
    """OUTPUT0 BOOL = INPUT0 > INPUT1: an output type wasi:nn has no tensor type for."""
    graph = helper.make_graph(
        [helper.make_node("Greater", ["INPUT0", "INPUT1"], ["OUTPUT0"])],
        "is_greater",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16]) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.BOOL, [1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def nn_forward_config(name: str, graph: str, allowed: str) -> str:
    return f"""
name: "{name}"
backend: "wasm"
max_batch_size: 0
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 1, 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, 16 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1, 16 ] }}
]
parameters {{ key: "allowed_models" value: {{ string_value: "{allowed}" }} }}
parameters {{ key: "graph" value: {{ string_value: "{graph}" }} }}
"""


@pytest.fixture(scope="module")
def nn_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("nn-repo")
    copy_model(repo, "add_sub")
    copy_model(repo, "simple")
    (repo / "is_greater" / "1").mkdir(parents=True)
    (repo / "is_greater" / "1" / "model.onnx").write_bytes(is_greater_onnx())
    (repo / "is_greater" / "config.pbtxt").write_text('name: "is_greater"\nbackend: "onnxruntime"\n')
    wasm = quickstart_repo() / "nn_classify" / "1" / "model.wasm"
    if not wasm.is_file():
        pytest.fail(f"{wasm} is missing: run scripts/build-guests.sh", pytrace=False)
    (repo / "nn_forward" / "1").mkdir(parents=True)
    shutil.copy2(wasm, repo / "nn_forward" / "1" / "model.wasm")
    (repo / "nn_forward" / "config.pbtxt").write_text(nn_forward_config("nn_forward", "add_sub", "add_sub,is_greater,nosuch"))
    srv = start_server(tmp_path_factory.mktemp("nn-server"), [repo], name="nn",
                       ready=("nn_forward", "add_sub", "is_greater", "simple"))
    yield srv
    srv.stop_and_check()


def nn_call(server, graph: str | None = None):
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": list(map(float, range(16)))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16},
        ]
    }
    if graph is not None:
        body["parameters"] = {"graph": graph}
    return post_infer(server, "nn_forward", body)


def test_wasi_nn_forwards_named_tensors_to_a_served_model_by_name_and_version(nn_server):
    for graph in (None, "add_sub", "add_sub:1"):
        r = nn_call(nn_server, graph)
        assert r.status_code == 200, r.text
        outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert outputs["OUTPUT0"] == [float(i) + 2 for i in range(16)], graph
        assert outputs["OUTPUT1"] == [float(i) - 2 for i in range(16)], graph


def test_wasi_nn_load_by_name_obeys_the_allow_list_and_reports_unknown_models(nn_server):
    assert_error(nn_call(nn_server, "simple"), 503, "Security", "not allowed to call model 'simple'",
                 "allowed_models")
    assert_error(nn_call(nn_server, "nosuch"), 503, "NotFound", "nosuch")
    assert_error(nn_call(nn_server, "add_sub:7"), 503, "NotFound", "version 7")
    # The allow-list is checked before existence: an unknown model outside it is a security error.
    assert_error(nn_call(nn_server, "hidden_model"), 503, "Security")


def test_wasi_nn_refuses_output_types_it_has_no_tensor_type_for(nn_server):
    msg = assert_error(nn_call(nn_server, "is_greater"), 500, "UnsupportedOperation", "is_greater", "BOOL",
                       "wasi:nn has no tensor type")
    assert "OUTPUT0" in msg
    # The server and the forwarding model keep working.
    assert nn_call(nn_server, "add_sub").status_code == 200


# ---------------------------------------------------------------------------------------------
# Test guests built here: the JavaScript probe and the C stdio probe
# ---------------------------------------------------------------------------------------------

PROBE_IO = """
input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def built_probes(tmp_path_factory):
    """Both probes, built once per module (the JavaScript one takes ~10 s)."""
    out = tmp_path_factory.mktemp("probes")
    js = GuestBuild(TESTS / "guests" / "js_probe", out / "js_probe.wasm", out)
    c = GuestBuild(TESTS / "guests" / "c_probe", out / "c_probe.wasm", out)
    return {"js": js.wait(), "c": c.wait()}


def probe_repo(root: Path, wasm: Path, name: str, config: str) -> Path:
    (root / name / "1").mkdir(parents=True)
    shutil.copy2(wasm, root / name / "1" / "model.wasm")
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "wasm"\nmax_batch_size: 0\n{config}')
    return root / name


def probe_input(mode: str | None = None, size: int = 16):
    """(the data, its INPUT0, the request parameters asking for `mode`)."""
    data = np.arange(size, dtype=np.uint8)
    inp = httpclient.InferInput("INPUT0", [size], "UINT8")
    inp.set_data_from_numpy(data, binary_data=True)
    return data, inp, ({"mode": mode} if mode else None)


def test_javascript_probe_errors_logs_and_a_failing_initialize(server_factory, tmp_path, built_probes):
    repo = tmp_path / "repo"
    probe_repo(repo, built_probes["js"], "js_probe", PROBE_IO)
    probe_repo(repo, built_probes["js"], "js_refuses", PROBE_IO + 'parameters { key: "fail_init" value: { string_value: "yes" } }\n')
    srv = server_factory(repo, ["--exit-on-error", "false"])
    wait_until(lambda: requests.get(srv.http("/v2/models/js_probe/ready"), timeout=5).status_code == 200, 90,
               "js_probe ready", srv)
    client = http_client(srv)
    for mode in ("echo", "copy", "log"):
        data, inp, params = probe_input(mode)
        out = client.infer("js_probe", [inp], parameters=params).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, data)
    wait_until(lambda: "hello from js_probe" in srv.log_text(), 10, "console.log in the server log", srv)

    def infer_error(mode):
        _, inp, params = probe_input(mode)
        with pytest.raises(Exception) as caught:
            client.infer("js_probe", [inp], parameters=params)
        return str(caught.value)

    assert "boom from js_probe" in infer_error("throw")
    assert "rejected by js_probe" in infer_error("reject")
    assert "execute() returned 2 responses for 1 requests" in infer_error("bad_count")
    # After every failure the model still answers.
    data, inp, params = probe_input("echo")
    np.testing.assert_array_equal(client.infer("js_probe", [inp]).as_numpy("OUTPUT0"), data)
    # initialize's TritonError fails the load with its message.
    index = {e["name"]: e for e in requests.post(srv.http("/v2/repository/index"), json={}, timeout=5).json()}
    assert index["js_refuses"]["state"] == "UNAVAILABLE"
    assert "js_probe refuses to start (fail_init)" in index["js_refuses"]["reason"]


def test_javascript_guest_releases_host_handles_under_a_stream_of_large_requests(server_factory, tmp_path,
                                                                               built_probes):
    repo = tmp_path / "repo"
    probe_repo(repo, built_probes["js"], "js_probe", PROBE_IO)
    srv = server_factory(repo)
    wait_until(lambda: requests.get(srv.http("/v2/models/js_probe/ready"), timeout=5).status_code == 200, 90,
               "js_probe ready", srv)
    client = http_client(srv)
    size = 1 << 20
    payload = np.random.default_rng(7).integers(0, 255, size, dtype=np.uint8)
    inp = httpclient.InferInput("INPUT0", [size], "UINT8")
    inp.set_data_from_numpy(payload, binary_data=True)
    for _ in range(120):  # warm up: the guest's heap grows to ~123 MiB by ~100 copies, then stays
        client.infer("js_probe", [inp], parameters={"mode": "copy"})
    before = rss_bytes(srv.process.pid)
    for i in range(210):
        mode = ("echo", "copy", "bad_output")[i % 3]
        if mode == "bad_output":
            # The response fails after OUTPUT0's handle (the 1 MiB input, renamed) was made.
            with pytest.raises(Exception, match="EXTRA"):
                client.infer("js_probe", [inp], parameters={"mode": mode})
            continue
        out = client.infer("js_probe", [inp], parameters={"mode": mode}).as_numpy("OUTPUT0")
        if i % 50 == 0:
            np.testing.assert_array_equal(out, payload)
    grown = rss_bytes(srv.process.pid) - before
    # Without the SDK releasing each request and tensor, every request kept its 1 MiB input and
    # output in the host (measured: +1.1 MiB per request, ~230 MiB here); with it, flat.
    assert grown < 48 << 20, f"server RSS grew {grown >> 20} MiB over 210 requests of 1 MiB"


def test_c_guest_with_libc_stdio_runs_and_reads_files_only_when_granted(server_factory, tmp_path, built_probes):
    repo = tmp_path / "repo"
    io = PROBE_IO.replace(
        'output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]',
        'output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] },\n'
        '         { name: "GREETING" data_type: TYPE_STRING dims: [ 1 ] } ]',
    )
    granted = probe_repo(repo, built_probes["c"], "c_granted",
                         io + 'parameters { key: "filesystem" value: { string_value: "read-only" } }\n')
    (granted / "1" / "greeting.txt").write_text("hello from the version directory")
    closed = probe_repo(repo, built_probes["c"], "c_closed", io)
    (closed / "1" / "greeting.txt").write_text("must not be readable")
    srv = server_factory(repo)
    client = http_client(srv)
    for model in ("c_granted", "c_closed"):
        wait_until(lambda m=model: requests.get(srv.http(f"/v2/models/{m}/ready"), timeout=5).status_code == 200,
                   60, f"{model} ready", srv)
    data, inp, _ = probe_input()
    granted_result = client.infer("c_granted", [inp])
    np.testing.assert_array_equal(granted_result.as_numpy("OUTPUT0"), data)
    assert granted_result.as_numpy("GREETING")[0] == b"hello from the version directory"
    closed_text = client.infer("c_closed", [inp]).as_numpy("GREETING")[0].decode()
    assert closed_text.startswith("cannot open /model/greeting.txt"), closed_text
    # An empty tensor: the SDK's copies of zero-length lists (which the canonical ABI hands over
    # with a dangling pointer) must not be freed.
    empty = httpclient.InferInput("INPUT0", [0], "UINT8")
    empty.set_data_from_numpy(np.zeros(0, dtype=np.uint8), binary_data=True)
    for _ in range(3):
        assert client.infer("c_closed", [empty]).as_numpy("OUTPUT0").shape == (0,)


def test_decoupled_c_guest_answers_through_its_sender(server_factory, tmp_path, built_probes):
    repo = tmp_path / "repo"
    probe_repo(repo, built_probes["c"], "c_stream", PROBE_IO + "model_transaction_policy { decoupled: true }\n")
    srv = server_factory(repo)
    wait_until(lambda: requests.get(srv.http("/v2/models/c_stream/ready"), timeout=5).status_code == 200, 60,
               "c_stream ready", srv)
    for _ in range(2):  # twice: the first execute must not have broken the instance
        r = requests.post(srv.http("/v2/models/c_stream/generate_stream"),
                          json={"INPUT0": [1, 2, 3]},
                          stream=True, timeout=30)
        assert r.status_code == 200, r.text
        events = sse_events(r)
        assert [e["OUTPUT0"] for e in events] == [[1, 2, 3], [1, 2, 3]], events
    assert "decoupled model returned" not in srv.log_text()


# ---------------------------------------------------------------------------------------------
# `tessera guest build` and `tessera guest bindgen`
# ---------------------------------------------------------------------------------------------

def test_guest_build_reports_javascript_and_c_errors_clearly(tmp_path):
    def build(src: Path):
        return subprocess.run([str(tessera_bin()), "guest", "build", str(src), "-o", str(tmp_path / "out.wasm"),
                               "--root", str(REPO_ROOT)], capture_output=True, text=True, timeout=120)

    js = tmp_path / "broken_js"
    js.mkdir()
    (js / "model.js").write_text("export class TritonPythonModel { execute( }\n")
    r = build(js)
    assert r.returncode != 0 and "componentize-js failed" in r.stderr, r.stderr
    c = tmp_path / "broken_c"
    c.mkdir()
    (c / "model.c").write_text("int oops( {\n")
    r = build(c)
    assert r.returncode != 0 and "compiling" in r.stderr and "model.c" in r.stderr, r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = build(empty)
    assert r.returncode != 0 and "is not a guest" in r.stderr and "model.js" in r.stderr, r.stderr


def test_guest_bindgen_writes_the_c_bindings_of_the_model_nn_world(tmp_path):
    r = subprocess.run([str(tessera_bin()), "guest", "bindgen", "c", str(tmp_path / "b"), "--root", str(REPO_ROOT)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    header = (tmp_path / "b" / "model_nn.h").read_text()
    for name in ("exports_model_nn_execute", "tessera_model_host_infer", "wasi_nn_graph_load_by_name"):
        assert name in header, name
    assert (tmp_path / "b" / "model_nn_component_type.o").stat().st_size > 0
