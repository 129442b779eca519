"""A Python guest built with numpy (scripts/build-numpy-wasi.sh, bundled by
scripts/build-python-guest.sh because its model.py imports numpy), run on mock_host.MockHost.

    .venv/bin/python -m pytest guest-sdk/python/tests/test_numpy_guest.py

The first run builds numpy for the guest (3-4 minutes of CPU, then cached).
"""

import struct
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

wasmtime = pytest.importorskip("wasmtime")
from mock_host import GuestError, MockHost, Req, T, f32  # noqa: E402
from test_guest_sdk import build, bytes_tensor  # noqa: E402

pytestmark = pytest.mark.timeout(900)

CONFIG = {
    "name": "numpy_probe", "max_batch_size": 0,
    "output": [{"name": "INV", "data_type": "TYPE_FP32", "dims": [2, 2]}],
}


@pytest.fixture(scope="module")
def numpy_wasm(tmp_path_factory):
    return build(HERE / "models" / "numpy_probe", tmp_path_factory.mktemp("numpy_probe") / "model.wasm")


@pytest.fixture(scope="module")
def engine():
    return wasmtime.Engine()


def inner(inputs, outputs, params):
    x = next(t for t in inputs if t.name == "X").values()
    k = next(t for t in inputs if t.name == "K").values()[0]
    return [f32("Y", [v * k for v in x])]


@pytest.fixture
def guest(numpy_wasm, engine):
    host = MockHost(numpy_wasm, bls={"inner": inner}, engine=engine)
    host.initialize(CONFIG, name="numpy_probe")
    return host


def req(op, *inputs):
    return Req(list(inputs), params={"op": op})


def test_numpy_is_bundled_only_into_guests_that_use_it(numpy_wasm):
    plain = HERE.parents[2] / "model-repos" / "quickstart" / "add_sub_python" / "1" / "model.wasm"
    if not plain.is_file():
        pytest.skip("the quickstart's add_sub_python guest is not built (scripts/build-guests.sh)")
    assert numpy_wasm.stat().st_size > plain.stat().st_size + 8_000_000
    assert b"numpy/_core" in numpy_wasm.read_bytes() and b"numpy/_core" not in plain.read_bytes()


@pytest.mark.parametrize("dt,fmt,values", [
    ("BOOL", "?", [True, False, True]),
    ("UINT8", "B", [0, 255, 7]), ("INT8", "b", [-128, 127, 0]),
    ("UINT16", "H", [0, 65535]), ("INT16", "h", [-32768, 32767]),
    ("UINT32", "I", [0, 2**32 - 1]), ("INT32", "i", [-2**31, 2**31 - 1]),
    ("UINT64", "Q", [0, 2**64 - 1]), ("INT64", "q", [-2**63, 2**63 - 1]),
    ("FP16", "e", [1.5, -2.0, 65504.0]), ("FP32", "f", [1.25, -3.5]), ("FP64", "d", [1e300, -2.5]),
])
def test_every_datatype_goes_through_numpy_and_back(guest, dt, fmt, values):
    t = T("V", dt, [1, len(values)], struct.pack("<%d%s" % (len(values), fmt), *values))
    (outs,) = guest.execute([req("roundtrip", t)])
    assert not isinstance(outs, GuestError), outs
    assert (outs[0].datatype, outs[0].shape, outs[0].data) == (dt, [1, len(values)], t.data)


def test_bf16_and_bytes_go_through_numpy_and_back(guest):
    bf = T("B", "BF16", [3], struct.pack("<3H", 0x3FC0, 0xC000, 0x0000))  # 1.5, -2.0, 0.0
    by = bytes_tensor("S", [b"", b"hello", bytes(range(256))], [3])
    (outs,) = guest.execute([req("roundtrip", bf, by)])
    assert not isinstance(outs, GuestError), outs
    assert {t.name: (t.datatype, t.data) for t in outs} == {"OUT_B": ("BF16", bf.data), "OUT_S": ("BYTES", by.data)}


def test_as_numpy_is_a_read_only_view(guest):
    (outs,) = guest.execute([req("view", f32("X", [1.0, 2.0]))])
    assert outs[0].datatype == "BOOL" and outs[0].data == b"\x00"


def test_lazily_imported_numpy_modules_work_and_compute(guest):
    (outs,) = guest.execute([req("math", f32("X", [4.0, 7.0, 2.0, 6.0]))])
    assert not isinstance(outs, GuestError), outs
    by = {t.name: t for t in outs}
    assert by["INV"].datatype == "FP32"  # the config's dtype, through triton_string_to_numpy
    inv = by["INV"].values()
    assert [round(v, 4) for v in inv] == [0.6, -0.7, -0.2, 0.4]
    assert [round(v, 6) for v in by["FFT"].values()] == [19.0, 2.236068, 7.0, 2.236068]
    assert by["RANDOM"].datatype == "INT64" and all(0 <= v < 10 for v in by["RANDOM"].values())
    assert by["MASKED_SUM"].values() == [13.0]
    assert by["WORDS"].values() == [b"A", b"B"]
    assert by["UNIQUE"].values() == [1, 2, 3]


def test_bytes_are_object_arrays_of_bytes(guest):
    (outs,) = guest.execute([req("strings", bytes_tensor("TEXT", [b"ab", "é".encode()], [1, 2]))])
    assert outs[0].datatype == "BYTES" and outs[0].shape == [1, 2]
    assert outs[0].values() == [b"AB!", "É!".encode()]


def test_bls_carries_arrays_both_ways(guest):
    (outs,) = guest.execute([req("bls", f32("X", [1.0, 2.5]))])
    assert not isinstance(outs, GuestError), outs
    assert outs[0].values() == [3.0, 6.0]


def test_a_cxx_exception_in_numpy_fails_that_call_with_a_clear_message(guest):
    with pytest.raises(Exception) as failed:
        guest.execute([req("cxx_exception", f32("X", [1.0]))])
    text = str(failed.value)
    assert "tessera_numpy_cxx_exception" in text, text


def test_a_thread_started_in_execute_sends_its_responses_before_the_call_returns(numpy_wasm, engine):
    guest = MockHost(numpy_wasm, engine=engine)
    guest.initialize(dict(CONFIG, model_transaction_policy={"decoupled": True}), name="numpy_probe")
    guest.decoupled = True
    n = T("N", "INT32", [1], struct.pack("<i", 3))
    request = req("threaded", n)
    results = guest.execute([request])
    sent = request.sent
    assert [(kind[0], final) for kind, final in sent] == [("ok", False)] * 3 + [("ok", True)], sent
    assert [s[0][1][0].values() for s in sent[:3]] == [[0], [1], [2]]
    assert results == [[]]
