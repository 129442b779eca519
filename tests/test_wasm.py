"""WebAssembly guests end to end: the example guests through tritonclient, guest faults and
the sandbox limits, BLS allow-lists, decoupled guests. (The sandbox's grants and hot swap, with a
Python probe guest built here, are in test_wasm_sandbox.py.)

Servers:
- the shared quickstart server (`server`): add_sub_rust, add_sub_python, tokenizer -> text_scorer,
  bls_router, repeat (decoupled), next to the ONNX models they are compared with or call;
- function-scoped servers on tmp repositories holding the sandbox-test guest `faulty`
  (example-guests/faulty, built into target/guests/faulty by scripts/build-guests.sh), with a
  private --wasm-cache-dir.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import (
    GuestBuild,
    assert_error,
    copy_faulty,
    copy_model,
    index_entries,
    model_ready,
    post_infer,
    repository_index,
    sse_events,
    wait_model_ready,
    write_atomic,
)

QUICKSTART_WASM = ("add_sub_rust", "add_sub_python", "tokenizer", "bls_router", "repeat")
# Compiling the Python guest (~18 MB) takes ~6-30 s on a loaded 2-core machine, and servers only
# answer /health/live once their startup models are loaded.
PYTHON_GUEST_DEADLINE = 150.0


@pytest.fixture
def qs(server):
    """The shared quickstart server with its WebAssembly models ready."""
    for m in QUICKSTART_WASM + ("text_scorer",):
        wait_model_ready(server, m, deadline=PYTHON_GUEST_DEADLINE)
    return server


@pytest.fixture
def client(qs):
    c = httpclient.InferenceServerClient(qs.url, network_timeout=60.0)
    yield c
    c.close()


def infer_inputs(arrays: dict[str, np.ndarray], datatypes: dict[str, str], binary: bool):
    inputs = []
    for name, arr in arrays.items():
        i = httpclient.InferInput(name, list(arr.shape), datatypes[name])
        i.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(i)
    return inputs


def as_bytes(values) -> list[bytes]:
    """A BYTES output as bytes (tritonclient gives bytes from binary outputs, str from JSON ones)."""
    return [v if isinstance(v, bytes) else str(v).encode() for v in values]


def requested(names, binary: bool):
    return [httpclient.InferRequestedOutput(n, binary_data=binary) for n in names]


# ---------------------------------------------------------------------------------------------
# 1. The example guests through tritonclient.http
# ---------------------------------------------------------------------------------------------

def add_sub_infer(client, model: str, a: np.ndarray, b: np.ndarray, binary: bool,
                  outputs=("OUTPUT0", "OUTPUT1")) -> dict[str, np.ndarray]:
    inputs = infer_inputs({"INPUT0": a, "INPUT1": b}, {"INPUT0": "FP32", "INPUT1": "FP32"}, binary)
    result = client.infer(model, inputs, outputs=requested(outputs, binary))
    response = result.get_response()
    assert response["model_name"] == model, response
    got = {o["name"] for o in response["outputs"]}
    assert got == set(outputs), f"{model} returned outputs {sorted(got)}, asked for {sorted(outputs)}"
    return {n: result.as_numpy(n) for n in outputs}


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("model", ["add_sub_rust", "add_sub_python"])
def test_add_sub_guest_matches_onnx(client, model, binary, batch):
    rng = np.random.default_rng(batch)
    a = rng.standard_normal((batch, 16)).astype(np.float32)
    b = rng.standard_normal((batch, 16)).astype(np.float32)
    onnx = add_sub_infer(client, "add_sub", a, b, binary)
    guest = add_sub_infer(client, model, a, b, binary)
    for name, expect in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
        got = guest[name]
        assert got.dtype == np.float32 and got.shape == (batch, 16), f"{name}: {got.dtype} {got.shape}"
        # float32 sums are exact IEEE results: the guest must agree with ONNX Runtime to the bit
        np.testing.assert_array_equal(got, onnx[name], err_msg=f"{model} {name} differs from add_sub")
        np.testing.assert_array_equal(got, expect, err_msg=f"{model} {name}")


@pytest.mark.parametrize("model", ["add_sub_rust", "add_sub_python"])
def test_add_sub_guest_requested_output_only(client, model):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    got = add_sub_infer(client, model, a, b, binary=True, outputs=("OUTPUT1",))
    np.testing.assert_array_equal(got["OUTPUT1"], a - b)


# The tokenizer's documented scheme (example-guests/tokenizer/src/lib.rs).
CLS, SEP = 101, 102
VOCAB = {"hello": 7592, ",": 1010, "world": 2088, "!": 999, "this": 2023, "movie": 3185, "is": 2003,
         "very": 2200, "good": 2204, ".": 1012}


def fnv1a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


ZEBRA = 20_000 + fnv1a(b"zebra") % 10_000  # a word outside the vocabulary: hashed into 20000..29999
TOKENIZER_CASES = [
    ("Hello, world!", ["hello", ",", "world", "!"]),
    ("This movie is VERY good.", ["this", "movie", "is", "very", "good", "."]),
    ("", []),
    ("zebra " * 20, ["zebra"] * 14),  # truncated: [CLS] + 14 tokens + [SEP]
]


def expected_ids(tokens: list[str]) -> list[int]:
    ids = [CLS] + [VOCAB.get(t, ZEBRA) for t in tokens] + [SEP]
    return ids + [0] * (16 - len(ids))


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tokenizer_feeds_text_scorer(client, binary):
    texts = np.array([[t.encode()] for t, _ in TOKENIZER_CASES], dtype=np.object_)
    inputs = infer_inputs({"TEXT": texts}, {"TEXT": "BYTES"}, binary)
    result = client.infer("tokenizer", inputs, outputs=requested(["INPUT_IDS", "ATTENTION_MASK"], binary))
    ids, mask = result.as_numpy("INPUT_IDS"), result.as_numpy("ATTENTION_MASK")
    n = len(TOKENIZER_CASES)
    assert ids.dtype == np.int64 and ids.shape == (n, 16), (ids.dtype, ids.shape)
    assert mask.dtype == np.int64 and mask.shape == (n, 16), (mask.dtype, mask.shape)
    for row, (text, tokens) in enumerate(TOKENIZER_CASES):
        used = len(tokens) + 2
        assert ids[row, 0] == CLS, f"{text!r}: first id {ids[row, 0]}, expected [CLS]=101"
        assert ids[row, used - 1] == SEP, f"{text!r}: ids {ids[row].tolist()}, expected [SEP]=102 at {used - 1}"
        assert ids[row].tolist() == expected_ids(tokens), f"{text!r}: ids {ids[row].tolist()}"
        assert mask[row].tolist() == [1] * used + [0] * (16 - used), f"{text!r}: mask {mask[row].tolist()}"

    # The tokenizer's outputs are text_scorer's inputs, as they come.
    scorer_in = infer_inputs({"INPUT_IDS": ids, "ATTENTION_MASK": mask},
                             {"INPUT_IDS": "INT64", "ATTENTION_MASK": "INT64"}, binary)
    scored = client.infer("text_scorer", scorer_in, outputs=requested(["TOKEN_COUNT", "ID_SUM"], binary))
    count, id_sum = scored.as_numpy("TOKEN_COUNT"), scored.as_numpy("ID_SUM")
    assert count.shape == (n, 1) and id_sum.shape == (n, 1), (count.shape, id_sum.shape)
    assert count[:, 0].tolist() == [float(len(t) + 2) for _, t in TOKENIZER_CASES]
    assert count[:, 0].tolist() == mask.sum(axis=1).astype(np.float32).tolist()
    assert id_sum[:, 0].tolist() == (ids * mask).sum(axis=1).tolist()
    assert id_sum[0, 0] == CLS + 7592 + 1010 + 2088 + 999 + SEP


# bls_router: classifier logits are [x0, x1, x2, x3, 0.5]; an even argmax goes to add_sub (2 * x
# tiled to 16), an odd one to simple (INT32: 2 * round(x) tiled to 16).
@pytest.mark.parametrize(
    "x,route,expect",
    [
        ([4.0, 3.0, 2.0, 1.0], b"add_sub", [8.0, 6.0, 4.0, 2.0] * 4),
        ([-1.2, 7.4, 2.6, 0.0], b"simple", [-2.0, 14.0, 6.0, 0.0] * 4),
    ],
    ids=["even-class-add_sub", "odd-class-simple"],
)
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_bls_router_routes(client, x, route, expect, binary):
    inputs = infer_inputs({"INPUT0": np.array(x, dtype=np.float32)}, {"INPUT0": "FP32"}, binary)
    result = client.infer("bls_router", inputs, outputs=requested(["ROUTED_OUTPUT", "ROUTE"], binary))
    assert as_bytes(result.as_numpy("ROUTE").tolist()) == [route], result.get_response()
    routed = result.as_numpy("ROUTED_OUTPUT")
    assert routed.dtype == np.float32 and routed.shape == (16,), (routed.dtype, routed.shape)
    assert routed.tolist() == expect


def generate_stream(srv, model: str, body: dict, timeout: float = 30) -> tuple[requests.Response, list[dict]]:
    with requests.post(srv.http(f"/v2/models/{model}/generate_stream"), json=body, stream=True,
                       timeout=timeout) as r:
        if r.status_code != 200:
            return r, []
        assert r.headers.get("content-type", "").startswith("text/event-stream"), r.headers
        return r, sse_events(r)


@pytest.mark.parametrize("values", [[5, 6, 7], list(range(100, 60, -1))], ids=["3", "40"])
def test_repeat_generate_stream(qs, values):
    r, events = generate_stream(qs, "repeat", {"IN": values})
    assert r.status_code == 200, r.text
    assert [e.get("error") for e in events if "error" in e] == []
    assert len(events) == len(values), events
    assert [e["OUT"] for e in events] == values
    assert [e["IDX"] for e in events] == list(range(len(values)))
    assert {e["model_name"] for e in events} == {"repeat"}


def test_repeat_empty_input_sends_no_responses(qs):
    r, events = generate_stream(qs, "repeat", {"IN": []})
    assert r.status_code == 200, r.text
    assert events == []


def test_repeat_plain_infer_is_rejected(client):
    inp = httpclient.InferInput("IN", [3], "INT32")
    inp.set_data_from_numpy(np.array([5, 6, 7], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("repeat", [inp])
    # Triton's answer (501), given before the body is read.
    assert e.value.status() == "501", e.value
    assert e.value.message() == "HTTP end point doesn't support models with decoupled transaction policy"
    assert client.is_model_ready("repeat")


# ---------------------------------------------------------------------------------------------
# 2 & 5. Guest faults, BLS allow-lists (the `faulty` guest, on a server of the test's own)
# ---------------------------------------------------------------------------------------------

# mode -> (HTTP status, words the error must contain, at least one of these words)
FAULTS = {
    "panic": (500, ("faulty", "panic requested"), ()),
    "trap": (500, ("faulty",), ("trap",)),
    "loop": (500, ("time limit", "max_execute_ms"), ()),
    "oom": (500, ("memory limit", "max_memory_bytes"), ()),
    "bls_forbidden": (400, ("allowed_models", "'simple'"), ()),
    "bad_dtype": (500, ("OUTPUT0", "INT32", "FP32"), ()),
    "bad_shape": (500, ("OUTPUT0", "shape"), ()),
    "missing_output": (500, ("OUTPUT0",), ("did not produce", "missing", "no output")),
    "wrong_count": (500, ("faulty", "2 responses", "1 request"), ()),
    "wrong_count_zero": (500, ("faulty", "0 responses", "1 request"), ()),
}
LOOP_BOUND_S = 5.0  # faulty's max_execute_ms is 500


@pytest.fixture
def fault_server(server_factory, tmp_path, wasm_cache):
    """faulty next to the models it may (repeat) or may not (simple) call, add_sub, and bls_router
    with the models it is allowed to call."""
    repo = tmp_path / "repo"
    for m in ("add_sub", "simple", "classifier", "repeat", "bls_router"):
        copy_model(repo, m)
    copy_faulty(repo)
    srv = server_factory(repo, ["--wasm-cache-dir", str(wasm_cache)])
    for m in ("faulty", "add_sub", "bls_router", "repeat"):
        wait_model_ready(srv, m)
    return srv


def faulty_infer(srv, mode: str, values=(1.5, -2.0, 3.25), request_id: str | None = None, timeout=30):
    body = {"inputs": [
        {"name": "MODE", "shape": [1], "datatype": "BYTES", "data": [mode]},
        {"name": "INPUT0", "shape": [len(values)], "datatype": "FP32", "data": list(values)},
    ]}
    if request_id:
        body["id"] = request_id
    return post_infer(srv, "faulty", body, timeout=timeout)


def outputs_of(r: requests.Response) -> dict[str, dict]:
    assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:1000]}"
    return {o["name"]: o for o in r.json()["outputs"]}


def assert_faulty_ok(srv, values=(4.0, 5.5, -6.0)) -> None:
    out = outputs_of(faulty_infer(srv, "ok", values))["OUTPUT0"]
    assert out["data"] == list(values) and out["shape"] == [len(values)], out


def assert_add_sub_serves(srv) -> None:
    a, b = list(range(16)), [0.5] * 16
    r = post_infer(srv, "add_sub", {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": b},
    ]})
    assert outputs_of(r)["OUTPUT0"]["data"] == [x + y for x, y in zip(a, b)]


@pytest.mark.parametrize("mode", list(FAULTS))
def test_guest_fault_fails_only_that_request(fault_server, mode):
    srv = fault_server
    assert_faulty_ok(srv)
    status, needles, any_of = FAULTS[mode]
    started = time.monotonic()
    r = faulty_infer(srv, mode, request_id=f"fault-{mode}")
    elapsed = time.monotonic() - started
    assert_error(r, status, *needles, any_of=any_of)
    if mode == "loop":
        assert elapsed < LOOP_BOUND_S, f"a guest stuck in a loop held the request for {elapsed:.1f}s"
    # The model recovers for the very next request, stays ready, and other models are unaffected.
    assert_faulty_ok(srv)
    assert model_ready(srv, "faulty"), "faulty is no longer ready after a guest fault"
    assert_add_sub_serves(srv)
    srv.assert_alive()


def test_trap_message_names_the_trap(fault_server):
    r = faulty_infer(fault_server, "trap")
    assert_error(r, 500, "unreachable")


def test_guest_faults_in_a_row(fault_server):
    """Every fault, one after another on one instance, then the model still answers correctly."""
    srv = fault_server
    for mode, (status, needles, any_of) in FAULTS.items():
        assert_error(faulty_infer(srv, mode), status, *needles, any_of=any_of)
    assert_faulty_ok(srv)
    assert model_ready(srv, "faulty")


def test_fault_does_not_disturb_concurrent_requests(fault_server):
    """While faulty spins until its time limit, add_sub keeps answering."""
    srv = fault_server
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", faulty_infer(srv, "loop")), daemon=True)
    t.start()
    try:
        for _ in range(5):
            assert_add_sub_serves(srv)
    finally:
        t.join(timeout=30)
    assert not t.is_alive(), "the looping request never returned"
    assert_error(box["r"], 500, "time limit")
    assert_faulty_ok(srv)


def test_bls_allow_list(fault_server):
    """faulty may call only `repeat`; bls_router may call classifier, add_sub and simple."""
    srv = fault_server
    # refused: simple is served here, but not on faulty's allow-list
    assert_error(faulty_infer(srv, "bls_forbidden"), 400, "allowed_models", "'simple'")
    # allowed: a streaming BLS call to the decoupled repeat model (IN = [1, 2, 3])
    assert outputs_of(faulty_infer(srv, "bls_stream"))["OUTPUT0"]["data"] == [1.0, 2.0, 3.0]
    # allowed, in the same server: bls_router calling classifier then add_sub or simple
    c = httpclient.InferenceServerClient(srv.url, network_timeout=60.0)
    try:
        for x, route, expect in (([4.0, 3.0, 2.0, 1.0], b"add_sub", [8.0, 6.0, 4.0, 2.0] * 4),
                                 ([-1.2, 7.4, 2.6, 0.0], b"simple", [-2.0, 14.0, 6.0, 0.0] * 4)):
            result = c.infer("bls_router", infer_inputs({"INPUT0": np.array(x, dtype=np.float32)},
                                                        {"INPUT0": "FP32"}, True))
            assert as_bytes(result.as_numpy("ROUTE").tolist()) == [route]
            assert result.as_numpy("ROUTED_OUTPUT").tolist() == expect
    finally:
        c.close()
    # the refusal did not break the caller either
    assert_faulty_ok(srv)


def test_failing_initialize_makes_only_that_model_unavailable(server_factory, tmp_path, wasm_cache):
    repo = tmp_path / "repo"
    copy_model(repo, "add_sub")
    copy_faulty(repo)
    copy_faulty(repo, "init_fails", 'parameters { key: "fail_initialize" value: { string_value: "1" } }\n')
    copy_faulty(repo, "init_panics", 'parameters { key: "panic_initialize" value: { string_value: "1" } }\n')
    srv = server_factory(repo, ["--exit-on-error=false", "--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "faulty")
    wait_model_ready(srv, "add_sub")
    index = repository_index(srv)
    for model, words in (("init_fails", ("initialize", "fail_initialize is set")),
                         ("init_panics", ("initialize", "panic_initialize is set"))):
        entries = index_entries(index, model)
        assert entries and all(e.get("state") == "UNAVAILABLE" for e in entries), entries
        reason = " ".join(e.get("reason", "") for e in entries)
        for w in words:
            assert w in reason, f"{model}: the index reason does not mention {w!r}: {reason!r}"
        assert not model_ready(srv, model)
        r = post_infer(srv, model, {"inputs": [
            {"name": "MODE", "shape": [1], "datatype": "BYTES", "data": ["ok"]},
            {"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.0]},
        ]})
        assert r.status_code >= 400, f"{model} served a request: {r.text}"
        assert model in r.text, r.text
    assert [e.get("state") for e in index_entries(index, "faulty")] == ["READY"]
    assert_faulty_ok(srv)
    assert_add_sub_serves(srv)


def test_failed_reload_keeps_the_old_guest_serving(server_factory, tmp_path, wasm_cache):
    repo = tmp_path / "repo"
    copy_faulty(repo)
    srv = server_factory(repo, ["--model-control-mode", "explicit", "--load-model", "faulty",
                                "--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "faulty")
    assert_faulty_ok(srv)
    write_atomic(repo / "faulty" / "1" / "model.wasm", b"this is not a WebAssembly component")
    c = httpclient.InferenceServerClient(srv.url, network_timeout=60.0)
    try:
        with pytest.raises(InferenceServerException) as e:
            c.load_model("faulty")
        assert "not a valid WebAssembly component" in e.value.message(), e.value
    finally:
        c.close()
    assert model_ready(srv, "faulty"), "the failed reload made the working faulty model unavailable"
    assert_faulty_ok(srv)


def test_decoupled_guest_failure_ends_the_stream_with_the_error(server_factory, tmp_path, wasm_cache):
    # A decoupled model's trap (or a malformed execute result) must reach the streaming caller as an
    # error event, not as a silently empty stream; and the next stream works.
    repo = tmp_path / "repo"
    copy_faulty(repo, "faulty_stream", "model_transaction_policy { decoupled: true }\n")
    srv = server_factory(repo, ["--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "faulty_stream")
    r, events = generate_stream(srv, "faulty_stream", {"MODE": ["panic"], "INPUT0": [1.0]})
    assert r.status_code == 200
    assert len(events) == 1 and "error" in events[0], events
    assert "trapped" in events[0]["error"], events
    # `ok` returns a result list from execute, which a decoupled model must not do.
    r, events = generate_stream(srv, "faulty_stream", {"MODE": ["ok"], "INPUT0": [1.0]})
    assert len(events) == 1 and "response senders" in events[0].get("error", ""), events
    assert model_ready(srv, "faulty_stream")


PY_STREAM_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N").as_list()[0]
            if n < 0:
                raise pb_utils.TritonModelException("N is negative: %d" % n)
            sender = request.get_response_sender()
            for i in range(n):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", [i * 10], "INT32")]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_decoupled_python_guest_streams_and_its_exception_ends_the_stream(server_factory, tmp_path, wasm_cache):
    # Python guests are called through execute-by-value: a decoupled one answers none per request
    # (its responses went through the sender); when execute raises, the SDK answers the error,
    # which reaches the streaming caller as the stream's end; the model serves on.
    src = tmp_path / "src" / "model.py"
    src.parent.mkdir()
    src.write_text(PY_STREAM_MODEL)
    repo = tmp_path / "repo"
    (repo / "py_stream" / "1").mkdir(parents=True)
    GuestBuild(src, repo / "py_stream" / "1" / "model.wasm", tmp_path / "logs").wait()
    (repo / "py_stream" / "config.pbtxt").write_text(
        'name: "py_stream"\nbackend: "wasm"\nmax_batch_size: 0\n'
        'input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "model_transaction_policy { decoupled: true }\n")
    srv = server_factory(repo, ["--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "py_stream")
    r, events = generate_stream(srv, "py_stream", {"N": [3]})
    assert r.status_code == 200, r.text
    assert [e.get("OUT") for e in events] == [0, 10, 20], events
    r, events = generate_stream(srv, "py_stream", {"N": [-1]})
    assert len(events) == 1 and "N is negative: -1" in events[0].get("error", ""), events
    r, events = generate_stream(srv, "py_stream", {"N": [1]})
    assert [e.get("OUT") for e in events] == [0], events


def test_client_that_gives_up_mid_execution_does_not_cost_the_model_its_instance(fault_server):
    # faulty has one instance; a caller that disconnects while it runs (here: while it loops until
    # its 500 ms limit) must not leave the model without an instance.
    with pytest.raises(requests.exceptions.Timeout):
        faulty_infer(fault_server, "loop", timeout=0.2)
    for _ in range(3):
        r = faulty_infer(fault_server, "ok", timeout=30)
        assert r.status_code == 200, r.text
    assert model_ready(fault_server, "faulty")
