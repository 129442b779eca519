"""WebAssembly guests end to end: the example guests through tritonclient, guest faults and the
sandbox limits, the filesystem / clock grants, BLS allow-lists and hot-swapping a guest under load.

Servers:
- the shared quickstart server (`server`): add_sub_rust, add_sub_python, tokenizer -> text_scorer,
  bls_router, repeat (decoupled), next to the ONNX models they are compared with or call;
- function-scoped servers on tmp repositories holding the sandbox-test guest `faulty`
  (example-guests/faulty, built into target/guests/faulty by scripts/build-guests.sh);
- servers for a Python guest built here with `tessera guest build` (the "probe"): it reads or writes
  a path it is given, reads the clocks, and answers a marker string baked in at build time.

Every server started here uses a private --wasm-cache-dir (the probe is ~18 MB compiled and its build
is not reproducible, so it would otherwise add ~35 MB to ~/.cache/tessera/wasm on every run).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import (
    GuestBuild,
    assert_error,
    error_message,
    copy_faulty,
    copy_model,
    index_entries,
    model_ready,
    post_infer,
    repository_index,
    sse_events,
    start_server,
    wait_model_ready,
    wait_until,
    write_atomic,
)

QUICKSTART_WASM = ("add_sub_rust", "add_sub_python", "tokenizer", "bls_router", "repeat")
# Compiling the Python guest (~18 MB) takes ~6-30 s on a loaded 2-core machine, and servers only
# answer /health/live once their startup models are loaded.
PYTHON_GUEST_DEADLINE = 150.0


@pytest.fixture(scope="module")
def wasm_cache(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wasm-cache")
    yield d
    shutil.rmtree(d, ignore_errors=True)  # ~35 MB per compiled Python guest


def link_or_copy(src: Path, dst: Path) -> None:
    """dst as a hard link to src (the Python guest is ~18 MB), atomically replacing what was there."""
    tmp = dst.parent / f".{dst.name}.incoming"
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


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


# ---------------------------------------------------------------------------------------------
# 3 & 4. A Python guest built here: the filesystem and clock grants, and hot swap
# ---------------------------------------------------------------------------------------------

PROBE_MODEL_PY = '''\
# Sandbox probe: OP (read | write | list | time | marker) on ARG; RESULT is "OK:<answer>" or
# "ERR:<exception type>: <message>".
import os
import time

import triton_python_backend_utils as pb_utils

MARKER = "@MARKER@"
HOARD = []
KEPT = []


def probe(op, arg):
    try:
        if op == "read":
            with open(arg, "rb") as f:
                return "OK:" + f.read().decode("utf-8", "replace")
        if op == "write":
            with open(arg, "w") as f:
                f.write("written by a guest")
            return "OK:wrote " + arg
        if op == "list":
            return "OK:" + ",".join(sorted(os.listdir(arg)))
        if op == "time":
            return "OK:%r %r" % (time.time(), time.monotonic())
        if op == "marker":
            return "OK:" + MARKER
        if op == "sleep":
            time.sleep(float(arg))
            return "OK:slept"
        if op == "big":
            return "OK:" + "x" * int(arg)
        if op == "hoard":  # a deliberate leak: keeps arg bytes for the instance's life
            HOARD.append(bytearray(int(arg)))
            return "OK:%d" % len(HOARD)
        if op == "hoard_host":  # keeps a host tensor of arg bytes (a handle) for the instance's life
            t = pb_utils.Tensor("X", bytes(int(arg)), "UINT8")
            t._lower_borrowed()  # the handle a BLS input gets: the bytes now live in the host
            t._raw = None  # and no longer in the guest
            HOARD.append(t)
            return "OK:%d" % len(HOARD)
        return "ERR:unknown op " + op
    except Exception as e:
        return "ERR:%s: %s" % (type(e).__name__, e)


def text(request, name):
    value = pb_utils.get_input_tensor_by_name(request, name).as_list()[0]
    return value.decode() if isinstance(value, bytes) else value


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            op = text(request, "OP")
            if op == "misfit":  # a BYTES element that claims 5 bytes and has 2: the host refuses it
                out = pb_utils.Tensor.from_bytes("RESULT", b"\\x05\\x00\\x00\\x00ab", "BYTES", [1])
            elif op in ("pass", "pass_twice"):  # ARG handed on as RESULT (a handle above 4 KiB)
                out = pb_utils.Tensor("RESULT", pb_utils.get_input_tensor_by_name(request, "ARG"))
                if op == "pass_twice":  # and a computed RESULT too: one name given twice
                    twice = pb_utils.Tensor("RESULT", [b"again"], "BYTES", shape=[1])
                    responses.append(pb_utils.InferenceResponse(output_tensors=[out, twice]))
                    continue
            elif op in ("keep", "kept"):  # keep this request past its call / ask the kept one
                if op == "keep":
                    KEPT.append(request)
                # its host handle (`request.at` takes it during the call; the kept one keeps it)
                answer = "OK:%d" % len(KEPT[-1]._handle().inputs()) if KEPT else "ERR:none kept"
                out = pb_utils.Tensor("RESULT", [answer.encode()], "BYTES", shape=[1])
            else:
                result = probe(op, text(request, "ARG"))
                out = pb_utils.Tensor("RESULT", [result.encode()], "BYTES", shape=[1])
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''


def probe_config(name: str, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "wasm"\nmax_batch_size: 0\n'
        'input [ { name: "OP" data_type: TYPE_STRING dims: [ 1 ] },\n'
        '        { name: "ARG" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        f"{extra}\n"
    )


class PythonGuests:
    """The probe built with MARKER "A" and "B" (two `tessera guest build` runs, in the background)."""

    def __init__(self, root: Path):
        self.root = root
        self.builds: dict[str, GuestBuild] = {}

    def start(self, marker: str) -> None:
        if marker not in self.builds:
            src = self.root / f"probe_{marker}" / "model.py"
            src.parent.mkdir(parents=True)
            src.write_text(PROBE_MODEL_PY.replace("@MARKER@", marker))
            self.builds[marker] = GuestBuild(src, self.root / f"probe_{marker}.wasm", self.root / "logs")

    def get(self, marker: str) -> Path:
        self.start(marker)
        return self.builds[marker].wait()

    def kill(self) -> None:
        for b in self.builds.values():
            b.kill()


@pytest.fixture(scope="module")
def python_guests(tmp_path_factory):
    guests = PythonGuests(tmp_path_factory.mktemp("python-guests"))
    yield guests
    guests.kill()


@pytest.fixture(scope="module", autouse=True)
def _start_python_guest_builds(request):
    """Start both builds with the module's first test when a selected test needs them, so that
    componentize-py runs while the tests above do."""
    if any("python_guests" in item.fixturenames for item in request.session.items):
        guests = request.getfixturevalue("python_guests")
        guests.start("A")
        guests.start("B")


def probe(srv, model: str, op: str, arg: str = "", session=None) -> str:
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": [op]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": [arg]}]}
    r = (session or requests).post(srv.http(f"/v2/models/{model}/infer"), json=body, timeout=30)
    out = outputs_of(r)["RESULT"]
    assert out["datatype"] == "BYTES" and out["shape"] == [1], out
    return out["data"][0]


SANDBOX_MODELS = {
    "no_grants": "",
    "fs_read_only": 'parameters { key: "filesystem" value: { string_value: "read-only" } }',
    "clocks": 'parameters { key: "clocks" value: { string_value: "true" } }',
    "small_memory": 'parameters { key: "max_memory_bytes" value: { string_value: "67108864" } }',
    "short_limit": 'parameters { key: "max_execute_ms" value: { string_value: "500" } }',
}


def secret(model: str) -> str:
    return f"the data file of {model}, 1f3870be"


@pytest.fixture(scope="module")
def sandbox_server(tmp_path_factory, python_guests, wasm_cache, tessera_binary):
    wasm = python_guests.get("A")
    root = tmp_path_factory.mktemp("sandbox")
    repo = root / "repo"
    for name, params in SANDBOX_MODELS.items():
        version_dir = repo / name / "1"
        version_dir.mkdir(parents=True)
        link_or_copy(wasm, version_dir / "model.wasm")
        (version_dir / "data.txt").write_text(secret(name))
        (repo / name / "config.pbtxt").write_text(probe_config(name, params))
    srv = start_server(root / "logs", [repo], ["--wasm-cache-dir", str(wasm_cache)], name="sandbox")
    try:
        for name in SANDBOX_MODELS:
            wait_model_ready(srv, name, deadline=PYTHON_GUEST_DEADLINE)
    except BaseException:
        srv.stop()
        raise
    srv.repo = repo
    yield srv
    srv.stop_and_check()


def host_files() -> list[str]:
    files = [p for p in ("/etc/hostname", "/etc/passwd") if Path(p).is_file()]
    assert files, "no host file to try to read"
    return files


def assert_refused(answer: str, what: str, must_not_contain: str = "") -> None:
    assert answer.startswith("ERR:"), f"the guest could {what}: {answer[:300]!r}"
    if must_not_contain:
        assert must_not_contain not in answer, f"the guest saw the data trying to {what}: {answer!r}"


def test_no_filesystem_without_grant(sandbox_server):
    srv, model = sandbox_server, "no_grants"
    own = srv.repo / model / "1"
    for path in host_files():
        assert_refused(probe(srv, model, "read", path), f"read {path}")
    for path in ("/model/data.txt", str(own / "data.txt"), str(own / "model.wasm")):
        assert_refused(probe(srv, model, "read", path), f"read its own file {path}", "1f3870be")
    for path in ("/", "/model", str(own)):
        assert_refused(probe(srv, model, "list", path), f"list {path}")
    assert_refused(probe(srv, model, "write", "/model/x"), "write /model/x")
    assert sorted(p.name for p in own.iterdir()) == ["data.txt", "model.wasm"]


def test_python_guest_reads_small_and_large_inputs(sandbox_server):
    # The SDK takes a batch's inputs up to 4 KiB in one host call (request.read-inputs) and
    # fetches larger ones as handles: a guest's answer quoting a 10-byte and a 6,000-byte
    # argument shows it read each whole, by either path, through the real host.
    for name in ("a" * 10, "b" * 6000):
        answer = probe(sandbox_server, "no_grants", "list", "/" + name)
        assert answer.startswith("ERR:") and ("/" + name) in answer, answer[:200]


def test_python_guest_output_the_host_refuses_is_the_callers_error(sandbox_server):
    # The host checks every tensor a guest makes: a malformed output fails that request with
    # the host's reason, and the instance serves on.
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["misfit"]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": [""]}]}
    r = requests.post(sandbox_server.http("/v2/models/no_grants/infer"), json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert "invalid BYTES data for output 'RESULT'" in r.json()["error"], r.text
    assert probe(sandbox_server, "no_grants", "marker").startswith("OK:")


def test_python_guest_hands_an_input_on_without_copying_and_names_are_checked(sandbox_server):
    # A 6,000-byte input stays a host handle and goes back as the output through
    # request.give-tensors; a small one comes with the call and goes back by value. An output
    # name given twice (the handle and a computed tensor) fails that request with INVALID_ARG.
    for arg in ("c" * 6000, "small"):
        assert probe(sandbox_server, "no_grants", "pass", arg) == arg
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["pass_twice"]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": ["d" * 6000]}]}
    r = requests.post(sandbox_server.http("/v2/models/no_grants/infer"), json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert "output 'RESULT' given twice for one request" in r.json()["error"], r.text
    assert probe(sandbox_server, "no_grants", "marker").startswith("OK:")


def test_read_only_filesystem_grant(sandbox_server):
    srv, model = sandbox_server, "fs_read_only"
    own = srv.repo / model / "1"
    assert probe(srv, model, "read", "/model/data.txt") == "OK:" + secret(model)
    assert probe(srv, model, "list", "/model") == "OK:data.txt,model.wasm"
    # only the version directory, only at /model
    for path in host_files():
        assert_refused(probe(srv, model, "read", path), f"read {path}")
    assert_refused(probe(srv, model, "read", str(own / "data.txt")), "read its version dir by its host path",
                   "1f3870be")
    assert_refused(probe(srv, model, "read", "/model/../config.pbtxt"), "escape /model", 'backend: "wasm"')
    assert_refused(probe(srv, model, "read", "/model/../../fs_read_only/config.pbtxt"), "escape /model",
                   'backend: "wasm"')
    # read-only: neither a new file nor an overwrite
    assert_refused(probe(srv, model, "write", "/model/x"), "write /model/x")
    assert_refused(probe(srv, model, "write", "/model/data.txt"), "overwrite /model/data.txt")
    assert sorted(p.name for p in own.iterdir()) == ["data.txt", "model.wasm"]
    assert (own / "data.txt").read_text() == secret(model)
    # another model's grant does not extend to this one
    assert_refused(probe(srv, "no_grants", "read", "/model/data.txt"), "read /model without a grant")


def test_clocks_read_zero_without_grant(sandbox_server):
    assert probe(sandbox_server, "no_grants", "time") == "OK:0.0 0.0"
    assert probe(sandbox_server, "fs_read_only", "time") == "OK:0.0 0.0"


def test_clocks_grant(sandbox_server):
    before = time.time()
    answer = probe(sandbox_server, "clocks", "time")
    after = time.time()
    assert answer.startswith("OK:"), answer
    wall, monotonic = (float(v) for v in answer[3:].split())
    assert before - 5 <= wall <= after + 5, f"guest wall clock {wall}, host {before}..{after}"
    assert monotonic > 0, answer
    later = float(probe(sandbox_server, "clocks", "time")[3:].split()[1])
    assert later >= monotonic, f"monotonic clock went back: {monotonic} -> {later}"


def test_a_request_kept_past_its_call_keeps_none_of_the_callers_inputs(sandbox_server):
    """A guest may keep a request object after execute returns; the host then drops the
    request's inputs (the caller's bytes), so keeping requests cannot grow the server."""
    assert probe(sandbox_server, "no_grants", "keep") == "OK:2", "during its call: OP and ARG"
    assert probe(sandbox_server, "no_grants", "kept") == "OK:0", "after its call: none"


def test_a_guest_sleeps_no_longer_than_its_time_limit(sandbox_server):
    """`time.sleep` waits in a host call (wasi:io/poll), where the guest's time limit cannot stop
    it: the host cuts a guest's timers to its execution's deadline. A short sleep is whole; an
    hour's sleep ends with the time-limit error after 500 ms (it held the instance an hour
    before), and the model answers at once again."""
    srv, model = sandbox_server, "short_limit"
    started = time.monotonic()
    assert probe(srv, model, "sleep", "0.05") == "OK:slept"
    assert time.monotonic() - started >= 0.05
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["sleep"]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": ["3600"]}]}
    started = time.monotonic()
    r = requests.post(srv.http(f"/v2/models/{model}/infer"), json=body, timeout=60)
    assert r.status_code == 500, r.text
    assert error_message(r) == f"WebAssembly model '{model}' execute exceeded its time limit of 500 ms (max_execute_ms)"
    assert time.monotonic() - started < 5
    assert probe(srv, model, "marker") == "OK:A"


class Traffic(threading.Thread):
    """Sends marker requests one after another (a bounded number) until stopped; records
    (start time, end time, marker) for each answer and every failure."""

    MAX_REQUESTS = 50_000
    PACE_S = 0.005  # leaves CPU for the server's compile; pacing only, nothing waits on it

    def __init__(self, srv, model: str):
        super().__init__(daemon=True)
        self.srv, self.model = srv, model
        self.stop_event = threading.Event()
        self.answers: list[tuple[float, float, str]] = []
        self.failures: list[str] = []

    def count(self, marker: str | None = None) -> int:
        return sum(1 for _, _, m in self.answers if marker is None or m == marker)

    def run(self) -> None:
        with requests.Session() as session:
            while not self.stop_event.is_set() and len(self.answers) + len(self.failures) < self.MAX_REQUESTS:
                started = time.monotonic()
                try:
                    answer = probe(self.srv, self.model, "marker", session=session)
                    if answer.startswith("OK:"):
                        self.answers.append((started, time.monotonic(), answer[3:]))
                    else:
                        self.failures.append(answer)
                except Exception as e:  # noqa: BLE001 - every failure is reported by the test
                    self.failures.append(repr(e))
                self.stop_event.wait(self.PACE_S)


def test_hot_swap_under_load(server_factory, tmp_path, python_guests, wasm_cache):
    a, b = python_guests.get("A"), python_guests.get("B")
    repo = tmp_path / "repo"
    version_dir = repo / "swap" / "1"
    version_dir.mkdir(parents=True)
    link_or_copy(a, version_dir / "model.wasm")
    (repo / "swap" / "config.pbtxt").write_text(probe_config("swap"))
    srv = server_factory(repo, ["--model-control-mode", "explicit", "--load-model", "swap",
                                "--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "swap", deadline=PYTHON_GUEST_DEADLINE)
    assert probe(srv, "swap", "marker") == "OK:A"

    traffic = Traffic(srv, "swap")
    traffic.start()
    try:
        wait_until(lambda: traffic.count("A") >= 20, 60, "20 requests answered before the swap", srv)
        link_or_copy(b, version_dir / "model.wasm")  # one rename: the server never sees half a file
        c = httpclient.InferenceServerClient(srv.url, network_timeout=PYTHON_GUEST_DEADLINE)
        try:
            load_started = time.monotonic()
            c.load_model("swap")
            load_done = time.monotonic()
            assert c.is_model_ready("swap")
        finally:
            c.close()
        wait_until(lambda: traffic.count("B") >= 20 or not traffic.is_alive(), 60,
                   "20 requests answered after the swap", srv)
    finally:
        traffic.stop_event.set()
        traffic.join(timeout=60)
    assert not traffic.is_alive(), "the traffic thread did not stop"

    assert traffic.failures == [], f"{len(traffic.failures)} requests failed across the swap: {traffic.failures[:5]}"
    markers = [m for _, _, m in traffic.answers]
    assert set(markers) == {"A", "B"}, f"markers seen: {sorted(set(markers))} ({len(markers)} requests)"
    first_b = markers.index("B")
    assert markers[:first_b] == ["A"] * first_b and markers[first_b:] == ["B"] * (len(markers) - first_b), (
        f"A answered after B: A x{first_b}, then {''.join(markers[first_b:first_b + 200])}..."
    )
    late_a = [t for t, _, m in traffic.answers if m == "A" and t > load_done]
    assert not late_a, f"{len(late_a)} requests sent after load_model returned were answered by the old guest"
    during = sum(1 for t, end, _ in traffic.answers if load_started < t and end < load_done)
    assert during > 0 or load_done - load_started < 0.5, (
        f"no request was answered during the {load_done - load_started:.1f}s reload: it blocked traffic"
    )
    assert probe(srv, "swap", "marker") == "OK:B"
    assert [e.get("state") for e in index_entries(repository_index(srv), "swap")] == ["READY"]


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


def test_python_guest_outputs_cost_no_guest_memory_after_the_call(sandbox_server):
    # componentize-py never frees the guest copy of a bytes argument sent to the host; the SDK
    # sends output bytes as a latin-1 string, which it frees. 150 responses of 1 MiB from a 64 MiB
    # guest (the old way, every one leaked: a trap after ~40) need no recycling of the instance.
    before = sandbox_server.log_text().count("recycling a guest instance")
    with requests.Session() as s:
        for i in range(150):
            answer = probe(sandbox_server, "small_memory", "big", str(1 << 20), session=s)
            assert answer.startswith("OK:") and len(answer) == 3 + (1 << 20), f"call {i}: {answer[:200]}"
    assert sandbox_server.log_text().count("recycling a guest instance") == before


def test_a_guest_that_hoards_memory_is_recycled_between_calls(sandbox_server):
    # A guest that keeps 1 MiB per call would trap at its 64 MiB limit after ~40 calls; the host
    # recycles the instance when its memory nears the limit, between calls, so no request fails.
    with requests.Session() as s:
        for i in range(150):
            answer = probe(sandbox_server, "small_memory", "hoard", str(1 << 20), session=s)
            assert answer.startswith("OK:"), f"call {i}: {answer[:200]}"
    assert "recycling a guest instance near its memory limit" in sandbox_server.log_text()


def test_a_guest_that_hoards_host_tensors_is_refused_past_four_times_its_memory(sandbox_server):
    # Handles keep their bytes in the host, out of the guest's memory cap: past 4 x
    # max_memory_bytes (64 MiB here) the host refuses to hold more for it, and the guest gets
    # the host's reason as an exception, instead of the server growing; other models serve on.
    refused = None
    with requests.Session() as s:
        for i in range(140):  # 2 MiB each
            answer = probe(sandbox_server, "small_memory", "hoard_host", str(2 << 20), session=s)
            if not answer.startswith("OK:"):
                refused = (i, answer)
                break
    assert refused is not None, "the host held 280 MiB of tensors for a 64 MiB guest"
    i, answer = refused
    # Each tensor also holds its name and shape (9 bytes): the 128th passes 256 MiB.
    assert i == 127, f"call {i}: {answer[:300]}"
    assert "4 x max_memory_bytes" in answer, answer[:300]
    assert probe(sandbox_server, "no_grants", "marker").startswith("OK:")


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
