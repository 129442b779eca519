"""Tests of the Python guest SDK: components built by scripts/build-python-guest.sh, run on
mock_host.MockHost (the `wasmtime` PyPI package standing in for the Tessera host).

    .venv/bin/python -m pytest guest-sdk/python/tests

Needs componentize-py and wasmtime (both pinned in tests/requirements.txt). Each build takes
5-20 s; the components are built once per session.
"""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))

wasmtime = pytest.importorskip("wasmtime")
from mock_host import GuestError, MockHost, Req, T, f32  # noqa: E402


def _componentize_py():
    exe = os.environ.get("COMPONENTIZE_PY")
    if exe:
        return exe
    cand = Path(sys.executable).parent / "componentize-py"
    if cand.exists():
        return str(cand)
    pytest.skip("componentize-py is not installed (tests/requirements.txt pins it)")


def build(src, out):
    env = dict(os.environ, COMPONENTIZE_PY=_componentize_py())
    subprocess.run(["bash", str(ROOT / "scripts" / "build-python-guest.sh"), str(src), str(out)],
                   check=True, env=env)
    return out


@pytest.fixture(scope="session")
def engine():
    return wasmtime.Engine()


@pytest.fixture(scope="session")
def probe_wasm(tmp_path_factory):
    return build(HERE / "models" / "sdk_probe", tmp_path_factory.mktemp("probe") / "model.wasm")


@pytest.fixture(scope="session")
def add_sub_wasm(tmp_path_factory):
    return build(ROOT / "example-guests" / "add_sub_python",
                 tmp_path_factory.mktemp("add_sub") / "model.wasm")


ADD_SUB_CONFIG = {
    "name": "add_sub", "backend": "wasm", "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
              {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
               {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]}],
}

PROBE_CONFIG = {
    "name": "probe", "max_batch_size": 0,
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2, -1]}],
}


def inner(inputs, outputs, params):
    """The BLS callee: Y = X * K."""
    x = next(t for t in inputs if t.name == "X").values()
    k = next(t for t in inputs if t.name == "K").values()[0]
    return [f32("Y", [v * k for v in x])]


def repeat(inputs, outputs, params):
    x = inputs[0].values()
    return [[f32("Y", x)], [f32("Y", [v + 1 for v in x])], GuestError("internal", "midway")]


@pytest.fixture
def probe(probe_wasm, engine):
    host = MockHost(probe_wasm, bls={"inner": inner}, bls_stream={"repeat": repeat}, engine=engine)
    host.initialize(PROBE_CONFIG, name="probe")
    return host


def req(op, *inputs, **kw):
    return Req(list(inputs), params={"op": op}, **kw)


def bytes_tensor(name, items, shape=None):
    data = b"".join(struct.pack("<I", len(b)) + b for b in items)
    return T(name, "BYTES", list(shape or [len(items)]), data)


def test_add_sub_example(add_sub_wasm, engine):
    host = MockHost(add_sub_wasm, engine=engine)
    host.initialize(ADD_SUB_CONFIG, name="add_sub")
    a = [float(i) for i in range(16)]
    b = [0.5] * 16
    batch = [Req([f32("INPUT0", a, [1, 16]), f32("INPUT1", b, [1, 16])]) for _ in range(3)]
    def check(results):
        assert len(results) == 3
        for outs in results:
            by = {t.name: t for t in outs}
            assert by["OUTPUT0"].datatype == "FP32" and by["OUTPUT0"].shape == [1, 16]
            assert by["OUTPUT0"].values() == [x + 0.5 for x in a]
            assert by["OUTPUT1"].values() == [x - 0.5 for x in a]

    # execute-by-value, which the host calls: each request's inputs come packed with the call
    # and its outputs go back packed in its answer: no host call at all, and no request handle
    # to make or drop
    check(host.execute(batch))
    assert host.calls == {}
    assert host.answered_by_value == 3
    # `execute`, for hosts without execute-by-value: the same outputs, but one of each
    # response's goes as a handle, since an `ok` with no handle is an empty list, which
    # componentize-py 0.25.1 leaks 16 bytes of guest memory for
    host.calls.clear()
    check(host.execute(batch, export="execute"))
    assert host.calls == {"request.read-inputs": 1, "request.set-outputs": 1,
                          "tensor.create-latin1": 3, "drop": 3}
    assert host.empty_results == 0
    host.finalize()
    assert ("info", "Cleaning up...") in host.logs  # print() goes to the host log
    assert host.live_objects() == {}, "every handle was dropped or returned"


def test_passthrough_moves_no_bytes(probe):
    # above the SDK's prefetch limit (4 KiB) an input stays a host handle: passed on, its bytes
    # never enter the guest
    big = [float(i) for i in range(2000)]
    (outs,) = probe.execute([req("echo", f32("X", big))])
    assert [(t.name, t.values()) for t in outs] == [("OUT_X", big)]
    assert probe.bytes_to_guest == 0 and probe.bytes_from_guest == 0
    assert probe.calls.get("tensor.data", 0) == 0 and probe.calls.get("tensor.read", 0) == 0
    assert probe.live_objects() == {}


def test_small_inputs_come_in_one_call_for_the_batch(probe):
    # a small input arrives with the call (execute-by-value's inputs): reading it asks the host
    # nothing, and passing it on copies its 12 bytes back
    batch = [req("echo", f32("X", [1.0, 2.0, float(i)])) for i in range(3)]
    results = probe.execute(batch)
    assert [[(t.name, t.values()) for t in outs] for outs in results] == [
        [("OUT_X", [1.0, 2.0, float(i)])] for i in range(3)]
    assert [c for c in ("request.read-inputs", "request.input", "request.inputs", "tensor.read",
                        "tensor.data") if c in probe.calls] == []
    assert probe.bytes_to_guest == 36 and probe.bytes_from_guest == 36
    assert probe.live_objects() == {}


@pytest.mark.parametrize("dt,values", [
    ("BOOL", [True, False, True]),
    ("UINT8", [0, 255, 7]), ("INT8", [-128, 127, 0]),
    ("UINT16", [0, 65535]), ("INT16", [-32768, 32767]),
    ("UINT32", [0, 2**32 - 1]), ("INT32", [-2**31, 2**31 - 1]),
    ("UINT64", [0, 2**64 - 1]), ("INT64", [-2**63, 2**63 - 1]),
    ("FP16", [1.5, -2.0, 65504.0]), ("FP32", [1.25, -3.5]), ("FP64", [1e300, -2.5]),
])
def test_roundtrip_every_datatype(probe, dt, values):
    fmt = {"BOOL": "?", "UINT8": "B", "INT8": "b", "UINT16": "H", "INT16": "h", "UINT32": "I",
           "INT32": "i", "UINT64": "Q", "INT64": "q", "FP16": "e", "FP32": "f", "FP64": "d"}[dt]
    t = T("V", dt, [1, len(values)], struct.pack("<%d%s" % (len(values), fmt), *values))
    (outs,) = probe.execute([req("roundtrip", t)])
    assert outs[0].datatype == dt and outs[0].shape == [1, len(values)]
    assert outs[0].data == t.data


def test_roundtrip_bf16_and_bytes(probe):
    bf = T("B", "BF16", [3], struct.pack("<3H", 0x3FC0, 0xC000, 0x0000))  # 1.5, -2.0, 0.0
    by = bytes_tensor("S", [b"", b"hello", bytes(range(256))], [3])
    (outs,) = probe.execute([req("roundtrip", bf, by)])
    assert {t.name: t.data for t in outs} == {"OUT_B": bf.data, "OUT_S": by.data}


def test_nested_tolist(probe):
    t = T("V", "INT32", [2, 3], struct.pack("<6i", *range(6)))
    (outs,) = probe.execute([req("nested", t)])
    assert outs[0].shape == [2, 3] and outs[0].values() == list(range(6))


def test_bytes_elements(probe):
    (outs,) = probe.execute([req("upper", bytes_tensor("TEXT", [b"abc", b"x y"], [1, 2]))])
    assert outs[0].datatype == "BYTES" and outs[0].shape == [1, 2]
    assert outs[0].values() == [b"ABC", b"X Y"]


def test_inferred_output_follows_config(probe):
    (outs,) = probe.execute([req("inferred", f32("INPUT0", [0.0] * 6))])
    assert outs[0].datatype == "FP32"  # inferred FP64 converted to the config's FP32
    assert outs[0].shape == [2, 3]  # config dims [2, -1]


def test_errors(probe):
    results = probe.execute([req("echo", f32("X", [1.0])), req("error")])
    assert isinstance(results[0], list)
    assert isinstance(results[1], GuestError)
    assert (results[1].code, results[1].message) == ("invalid-arg", "bad input")

    results = probe.execute([req("echo"), req("raise")])
    assert all(isinstance(r, GuestError) and r.code == "internal" for r in results)
    assert "ValueError: execute was told to raise" in results[0].message
    assert any("Traceback" in m for lvl, m in probe.logs if lvl == "error")

    results = probe.execute([req("wrong_count"), req("echo")])
    assert all("returned 0 responses for 2 requests" in r.message for r in results)
    # the instance still works
    (outs,) = probe.execute([req("echo", f32("X", [1.0]))])
    assert outs[0].name == "OUT_X"


def test_an_output_the_host_refuses_fails_only_its_request(probe):
    # a batch's computed outputs go back in execute-by-value's answers; the host checks each
    # request's on its own
    results = probe.execute([req("inferred", f32("INPUT0", [0.0] * 2)), req("misfit"),
                             req("roundtrip", f32("X", [1.0]), f32("Y", [2.0]))])
    assert [t.name for t in results[0]] == ["OUTPUT0"]
    assert isinstance(results[1], GuestError) and results[1].code == "invalid-arg"
    assert sorted(t.name for t in results[2]) == ["OUT_X", "OUT_Y"]
    assert "request.set-outputs" not in probe.calls and "tensor.create-latin1" not in probe.calls
    assert probe.live_objects() == {}
    # through `execute` one output of each response goes as a handle, the refused one's included
    probe.calls.clear()
    results = probe.execute([req("inferred", f32("INPUT0", [0.0] * 2)), req("misfit")], export="execute")
    assert [t.name for t in results[0]] == ["OUTPUT0"] and isinstance(results[1], GuestError)
    assert probe.calls.get("request.set-outputs") == 1 and probe.calls.get("tensor.create-latin1") == 2
    assert probe.live_objects() == {}, "the refused response's handle was dropped"


def test_handles_and_computed_outputs_in_one_response(probe):
    big = f32("X", [0.5] * 2048)  # 8 KiB: above the prefetch limit, it stays a host handle
    (outs,) = probe.execute([req("mixed", big)])
    by = {t.name: t for t in outs}
    assert set(by) == {"OUT_X", "COUNT"}
    assert by["OUT_X"].data == big.data and by["COUNT"].values() == [2048]
    assert probe.calls.get("tensor.with-name") == 1
    assert probe.calls.get("request.give-tensors") == 1, "the handle went with request.give-tensors"
    assert "request.set-outputs" not in probe.calls, "COUNT went back in the answer"
    assert probe.bytes_to_guest == 0, "the passed-on input never entered the guest"


def test_request_metadata(probe):
    r = Req([], outputs=["A", "B"], params={"op": "meta", "n": 5, "f": True, "d": 0.5}, id="r-1")
    (outs,) = probe.execute([r])
    info = json.loads(outs[0].values()[0])
    assert info["id"] == "r-1" and info["requested"] == ["A", "B"] and info["model"] == "probe"
    # execute-by-value passes no request handle: the SDK took this one (request.at) when the
    # model first asked for more than its inputs, and once only
    assert probe.calls.get("request.at") == 1
    assert info["params"] == {"op": "meta", "n": 5, "f": True, "d": 0.5}
    assert info["args"] == sorted(["model_config", "model_instance_kind", "model_instance_name",
                                   "model_instance_device_id", "model_repository",
                                   "model_version", "model_name"])


def test_a_request_kept_past_its_call_gets_no_other_requests_handle(probe):
    # execute-by-value passes positions, not handles: a request object kept from an earlier
    # call must not take the handle of the request now at its position
    probe.execute([req("keep")])
    (outs,) = probe.execute([Req([], params={"op": "use_kept"}, id="someone-else")])
    assert "call has returned" in outs[0].values()[0].decode()


def test_logging(probe):
    probe.logs.clear()
    probe.execute([req("log")])
    assert probe.logs == [("verbose", "v"), ("warn", "w"), ("error", "e"), ("info", "i"),
                          ("info", "printed line")]


def test_bls(probe):
    x = f32("INPUT0", [1.0, 2.0])
    (outs,) = probe.execute([req("bls", x)])
    assert outs[0].name == "OUT" and outs[0].values() == [2.0, 4.0]
    model, version, names, outputs, params = probe.bls_calls[-1]
    assert (model, version, names, outputs) == ("inner", None, ["X", "K"], ["Y"])
    assert params == {"mode": "fast", "n": 3, "flag": True, "ratio": 0.5}
    # the callee's output came back as a handle: the only bytes in the guest are the request's
    # small input, which came with request.read-inputs
    assert probe.bytes_to_guest == 8


def test_bls_error(probe):
    (r,) = probe.execute([req("bls_missing")])
    assert isinstance(r, GuestError) and r.code == "not-found" and "nope" in r.message


def test_bls_stream(probe):
    (outs,) = probe.execute([req("bls_stream", f32("INPUT0", [1.0, 2.0]))])
    by = {t.name: t for t in outs}
    assert by["OUT"].values() == [1.0, 2.0, 2.0, 3.0]
    assert by["ERRORS"].values() == [b"midway"]


def test_decoupled(probe_wasm, engine):
    probe = MockHost(probe_wasm, engine=engine)
    probe.initialize(dict(PROBE_CONFIG, model_transaction_policy={"decoupled": True}), name="probe")
    probe.decoupled = True
    r = req("decoupled", f32("INPUT0", [7.0]))
    # execute-by-value answers `given` for the request: it was answered through its sender
    assert probe.execute([r]) == [[]]
    oks = [s for s in r.sent if s[0][0] == "ok"]
    assert len(oks) == 4  # 3 responses and the closing one
    assert all(s[0][1][0].values() == [7.0] for s in oks[:3]) and oks[3][0][1] == []
    assert r.sent[3] == (("err", "unavailable", "partial"), False)
    assert [final for _, final in r.sent] == [False, False, False, False, True]
    assert r.sent_params == [{"i": 0}]  # the first response's parameters, sent with it
    assert probe.bytes_to_guest == 4  # the small input, with the call


def test_response_parameters_go_with_the_response(probe):
    r, plain = req("with_params"), req("echo", f32("INPUT0", [1.0]))
    answers = probe.execute([r, plain])
    assert not any(isinstance(a, GuestError) for a in answers), answers
    assert r.response_params == {"echo": "yes", "n": 2, "flag": True}
    assert plain.response_params == {}  # a response without parameters sets none


def test_a_model_that_is_not_decoupled_must_return_responses(probe):
    # Triton's rule: execute() returning None is an error unless the model is decoupled
    (r,) = probe.execute([req("decoupled", f32("INPUT0", [7.0]))])
    assert isinstance(r, GuestError) and r.code == "internal"
    assert "execute() returned None" in r.message


def test_initialize_failure(probe_wasm, engine):
    host = MockHost(probe_wasm, engine=engine)
    with pytest.raises(GuestError) as e:
        host.initialize(dict(PROBE_CONFIG, parameters={"fail_init": 1}))
    assert e.value.code == "internal" and "initialize was told to fail" in e.value.message
    (r,) = host.execute([req("echo")])
    assert isinstance(r, GuestError) and r.code == "unavailable"


def test_no_handle_leaks(probe):
    for op in ("echo", "roundtrip", "bls", "bls_stream", "upper"):
        inputs = [bytes_tensor("TEXT", [b"a"])] if op == "upper" else [f32("INPUT0", [1.0])]
        probe.execute([req(op, *inputs)])
    assert probe.live_objects() == {}


@pytest.fixture(scope="session")
def async_bls_wasm(tmp_path_factory):
    return build(HERE / "models" / "async_bls", tmp_path_factory.mktemp("async") / "model.wasm")


def test_async_execute(async_bls_wasm, engine):
    host = MockHost(async_bls_wasm, bls={"inner": inner}, engine=engine)
    host.initialize({"name": "async_bls"})  # async initialize; its hour-long sleep is skipped
    (outs, more) = host.execute([Req([f32("INPUT0", [1.0, 2.0])]), Req([f32("INPUT0", [4.0])])])
    assert outs[0].name == "OUT" and outs[0].values() == [3.0, 6.0]
    assert more[0].values() == [12.0]
    assert host.async_calls == 2, "asyncio.gather over async_exec() goes through infer-async"
    host.finalize()
    assert ("info", "finalized") in host.logs, "async finalize ran to its end"


def test_async_fan_out_wider_than_the_host_limit(async_bls_wasm, engine):
    # 100 requests gathered at once: the SDK keeps at most 64 calls in flight (the host refuses
    # more) and starts the rest as earlier ones finish, so every request gets its answer.
    host = MockHost(async_bls_wasm, bls={"inner": inner}, engine=engine)
    host.initialize({"name": "async_bls"})
    results = host.execute([Req([f32("INPUT0", [float(i)])]) for i in range(100)])
    assert [r[0].values() for r in results] == [[3.0 * i] for i in range(100)]
    assert host.async_calls == 100 and host.max_in_flight == 64


def test_large_outputs_do_not_leak(probe_wasm, engine):
    """componentize-py 0.25.1 never frees the buffer it lowers a bytes (list<u8>) argument into,
    so the SDK sends output bytes as latin-1 strings (in execute-by-value's answers, and
    request.set-outputs through `execute`), which it frees: 40 MiB of outputs fit in a 48 MiB
    guest."""
    host = MockHost(probe_wasm, engine=engine)
    host.store.set_limits(memory_size=48 << 20)  # ~22 MiB is the interpreter's own
    host.initialize(PROBE_CONFIG, name="probe")
    n = 256 << 10
    for i in range(160):  # 40 MiB through request.set-outputs
        try:
            (r,) = host.execute([Req([], params={"op": "big", "n": n})])
        except wasmtime.WasmtimeError as e:
            pytest.fail("trapped after %d x %d KiB outputs: %s" % (i, n >> 10, str(e).splitlines()[-1]))
        assert isinstance(r, list), "failed after %d x %d KiB outputs: %s" % (i, n >> 10, r)


def test_prefetched_inputs_do_not_leak(probe_wasm, engine):
    """The input bytes a call hands the guest are freed once read: 24 MiB of 4 KiB inputs
    (the largest the SDK prefetches), passed on as outputs, fit in a 32 MiB guest."""
    host = MockHost(probe_wasm, engine=engine)
    host.store.set_limits(memory_size=32 << 20)  # ~22 MiB is the interpreter's own
    host.initialize(PROBE_CONFIG, name="probe")
    x = f32("X", [0.5] * 1024)
    for i in range(96):  # 96 batches of 64 requests x 4 KiB
        try:
            results = host.execute([req("echo", x) for _ in range(64)])
        except wasmtime.WasmtimeError as e:
            pytest.fail("trapped after %d batches: %s" % (i, str(e).splitlines()[-1]))
        assert all(isinstance(r, list) and r[0].name == "OUT_X" for r in results), results[0]
    assert host.bytes_to_guest == 96 * 64 * 4096, "every input came with the call"
    assert host.live_objects() == {}


def test_a_batch_past_the_prefetch_budget_reads_the_rest_as_handles(probe):
    # a call brings at most 1 MiB of inputs (as request.read-inputs copies): of 300 inputs of
    # 4 KiB the first 256 come with their bytes, the other 44 stay host handles (one
    # request.inputs each, no bytes)
    x = f32("X", [0.25] * 1024)
    results = probe.execute([req("echo", x) for _ in range(300)])
    assert all(outs[0].name == "OUT_X" and outs[0].data == x.data for outs in results)
    assert "request.read-inputs" not in probe.calls
    assert probe.calls.get("request.inputs") == 44
    assert probe.bytes_to_guest == 256 * 4096
    assert probe.live_objects() == {}


def test_a_users_own_finalizer_on_a_resource_still_runs(probe):
    probe.execute([req("user_finalizer")])
    assert ("info", "user finalizer ran") in probe.logs
    assert probe.live_objects() == {}
