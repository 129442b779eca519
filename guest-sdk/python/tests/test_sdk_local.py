"""SDK tests that need no component: codecs and local tensors under plain CPython."""

import json
import array
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton_python_backend_utils as pb_utils  # noqa: E402
from tessera_guest import _dtypes  # noqa: E402


@pytest.mark.parametrize("spelling,name", [
    ("FP32", "FP32"), ("TYPE_FP32", "FP32"), ("float32", "FP32"), (11, "FP32"),
    ("TYPE_STRING", "BYTES"), ("object", "BYTES"), (bytes, "BYTES"), (float, "FP64"),
    (int, "INT64"), (bool, "BOOL"), ("bfloat16", "BF16"), (14, "BF16"), ("uint64", "UINT64"),
])
def test_normalize(spelling, name):
    assert _dtypes.normalize(spelling) == name


def test_normalize_rejects():
    with pytest.raises(ValueError):
        _dtypes.normalize("FP8")


def test_triton_helpers_speak_datatype_names_in_a_guest_without_numpy(monkeypatch):
    import importlib

    from tessera_guest import _numpy

    monkeypatch.setattr(_numpy, "np", None)
    try:
        importlib.reload(pb_utils)
        assert pb_utils.triton_string_to_numpy("TYPE_FP32") == "FP32"
        assert pb_utils.numpy_to_triton_type("float32") == 11
        assert pb_utils.triton_to_numpy_type(13) == "BYTES"
        raw = pb_utils.serialize_byte_tensor([b"ab", "c"])
        assert raw == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
        assert pb_utils.deserialize_bytes_tensor(raw) == [b"ab", b"c"]
    finally:
        monkeypatch.undo()
        importlib.reload(pb_utils)


def test_triton_helpers_speak_numpy_types_with_numpy():
    np = pytest.importorskip("numpy")
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.numpy_to_triton_type(np.float32) == 11 == pb_utils.numpy_to_triton_type("float32")
    assert pb_utils.numpy_to_triton_type(np.dtype("int64")) == 9
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    raw = pb_utils.serialize_byte_tensor(np.array([b"ab", "c"], dtype=np.object_))
    assert raw.dtype == np.object_ and raw.item() == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert pb_utils.deserialize_bytes_tensor(raw).tolist() == [b"ab", b"c"]


def test_triton_config_helpers():
    cfg = {"input": [{"name": "A"}], "output": [{"name": "B"}],
           "model_transaction_policy": {"decoupled": True}}
    assert pb_utils.get_input_config_by_name(cfg, "A") == {"name": "A"}
    assert pb_utils.get_output_config_by_name(cfg, "B") == {"name": "B"}
    assert pb_utils.get_output_config_by_name(cfg, "C") is None
    assert pb_utils.using_decoupled_model_transaction_policy(cfg)
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1


def test_tensor_from_nested_list_infers_like_numpy():
    t = pb_utils.Tensor("X", [[1.0, 2.0], [3.0, 4.0]])
    assert (t.name(), t.datatype(), t.shape(), t.triton_dtype()) == ("X", "FP64", [2, 2], 12)
    assert t.as_list() == [1.0, 2.0, 3.0, 4.0]
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert t.to_bytes() == struct.pack("<4d", 1, 2, 3, 4)
    assert pb_utils.Tensor("I", [1, 2]).datatype() == "INT64"
    assert pb_utils.Tensor("B", [True]).datatype() == "BOOL"
    assert pb_utils.Tensor("S", ["a", b"b"]).datatype() == "BYTES"


def test_tensor_from_list_and_array():
    t = pb_utils.Tensor.from_list("X", [1, 2, 3, 4], shape=[2, 2])
    assert t.datatype() == "FP32" and t.to_bytes() == struct.pack("<4f", 1, 2, 3, 4)
    a = pb_utils.Tensor("A", array.array("i", [1, -2]))
    assert a.datatype() == "INT32" and a.as_list() == [1, -2]
    assert a.as_array().typecode == "i"
    q = pb_utils.Tensor("Q", array.array("q", [5]), "FP32")
    assert q.datatype() == "FP32" and q.as_list() == [5.0]


def test_tensor_from_raw_bytes():
    raw = struct.pack("<3f", 1, 2, 3)
    t = pb_utils.Tensor("R", raw, "FP32")
    assert t.shape() == [3] and t.as_list() == [1.0, 2.0, 3.0]
    assert pb_utils.Tensor("U", b"\x01\x02").datatype() == "UINT8"
    one = pb_utils.Tensor("S", b"hello", "BYTES")  # a BYTES element, not a buffer
    assert one.as_list() == [b"hello"] and one.shape() == []
    ser = pb_utils.Tensor.from_bytes("S", b"\x01\x00\x00\x00x", "BYTES", [1])
    assert ser.as_list() == [b"x"]
    with pytest.raises(ValueError):
        pb_utils.Tensor("R", b"\x00" * 5, "FP32")


def test_tensor_conversions_like_astype():
    assert pb_utils.Tensor("X", [1.7, -1.2], "INT32").as_list() == [1, -1]
    assert pb_utils.Tensor("X", [1, 0, 2], "BOOL").as_list() == [True, False, True]
    with pytest.raises(OverflowError):
        pb_utils.Tensor("X", [256], "UINT8").to_bytes()


@pytest.mark.parametrize("dt,values", [
    ("FP32", [1.5, -0.25, 3.0]), ("FP64", [1e300, -0.0]), ("INT8", [-128, 127]),
    ("INT16", [-32768, 5]), ("INT32", [-2**31, 2**31 - 1]), ("INT64", [-2**63, 7]),
    ("UINT8", [0, 255]), ("UINT16", [65535]), ("UINT32", [2**32 - 1, 0]), ("UINT64", [2**64 - 1]),
])
def test_cached_struct_paths_match_the_array_codec(dt, values):
    # Tensor(name, flat_list) and as_list() use cached struct packers once a size has been seen;
    # their bytes and values must be the array module's, on the first call and on later ones
    code = _dtypes.ARRAY_CODES[dt]
    want = array.array(code, values).tobytes()
    for _ in range(2):
        t = pb_utils.Tensor("X", values, dt)
        assert t.to_bytes() == want
        assert t.as_list() == values == array.array(code, want).tolist()
        assert pb_utils.Tensor.from_bytes("Y", want, dt, [len(values)]).as_list() == values
    assert _dtypes.UNPACK[(dt, len(want))](want) == tuple(values)
    # what the packer refuses still goes the array path's way: converted, or an error that says why
    if dt.startswith("INT") or dt.startswith("UINT"):
        assert pb_utils.Tensor("X", [1.7] * len(values), dt).as_list() == [1] * len(values)
        with pytest.raises(OverflowError, match="does not fit"):
            pb_utils.Tensor("X", [2**64] * len(values), dt)
    elif dt == "FP32":
        assert pb_utils.Tensor("X", [1e40, 1, True], dt).as_list() == [float("inf"), 1.0, 1.0]


@pytest.mark.parametrize("dt,values", [
    ("FP16", [1.5, -0.25]), ("BF16", [1.5, -2.0, 0.0]), ("UINT64", [2**64 - 1]),
    ("INT8", [-128, 127]), ("BYTES", [b"", b"\x00\xff"]),
])
def test_codec_roundtrip(dt, values):
    assert _dtypes.decode(dt, _dtypes.encode(dt, values)) == values


def test_bf16_rounding():
    # 1 + 2^-8 is halfway between two bf16 values: round to even (1.0)
    assert _dtypes.encode("BF16", [1.00390625]) == struct.pack("<H", 0x3F80)
    assert _dtypes.decode("BF16", _dtypes.encode("BF16", [float("nan")]))[0] != 0.0


def test_shape_checks():
    with pytest.raises(ValueError):
        pb_utils.Tensor("X", [[1, 2], [3]])
    with pytest.raises(ValueError):
        pb_utils.Tensor("X", [1, 2, 3], shape=[2, 2])
    with pytest.raises(ValueError):
        _dtypes.decode_bytes(b"\x05\x00\x00\x00ab")


def test_rename_shares_data():
    t = pb_utils.Tensor("A", [1.0, 2.0], "FP32")
    r = pb_utils.Tensor("B", t)
    assert (r.name(), r.datatype(), r.shape(), r.as_list()) == ("B", "FP32", [2], [1.0, 2.0])
    assert t.with_name("C").name() == "C" and t.name() == "A"
    assert t.reshape([1, 2]).shape() == [1, 2]


def test_conform_to_config():
    t = pb_utils.Tensor("O", [0.5] * 6)
    t._conform("FP32", [-1, 3])
    assert (t.datatype(), t.shape()) == ("FP32", [2, 3])
    explicit = pb_utils.Tensor("O", [0.5] * 6, "FP64", shape=[6])
    explicit._conform("FP32", [-1, 3])
    assert (explicit.datatype(), explicit.shape()) == ("FP64", [6])


def test_responses_and_errors():
    err = pb_utils.TritonError("boom", pb_utils.TritonError.NOT_FOUND)
    assert (err.message(), err.code()) == ("boom", 2)
    r = pb_utils.InferenceResponse(error=err)
    assert r.has_error() and r.error() is err and r.output_tensors() == []
    r = pb_utils.InferenceResponse(error="plain text")
    assert r.error().code() == pb_utils.TritonError.INTERNAL
    t = pb_utils.Tensor("X", [1.0])
    r = pb_utils.InferenceResponse([t])
    assert pb_utils.get_output_tensor_by_name(r, "X") is t
    assert pb_utils.get_output_tensor_by_name(r, "Y") is None
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse([[1.0]])


def test_as_numpy_explains_in_a_guest_built_without_numpy(monkeypatch):
    from tessera_guest import _numpy

    monkeypatch.setattr(_numpy, "np", None)
    with pytest.raises(NotImplementedError, match="import numpy as np"):
        pb_utils.Tensor("X", [1.0]).as_numpy()


def test_as_numpy_with_numpy_gives_the_tensor_as_an_array():
    np = pytest.importorskip("numpy")
    t = pb_utils.Tensor("X", [1.0, 2.0, 3.0, 4.0], "FP32", shape=[2, 2])
    a = t.as_numpy()
    assert a.dtype == np.float32 and a.shape == (2, 2) and a.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert not a.flags.writeable, "a view over the tensor's bytes"
    out = pb_utils.Tensor("Y", a * 2)
    assert (out.datatype(), out.shape(), out.as_list()) == ("FP32", [2, 2], [2.0, 4.0, 6.0, 8.0])

    assert t.as_numpy() is a, "as Triton's, as_numpy() gives the tensor's one array"


def test_tensor_from_arrays_of_every_layout_keeps_numpy_values():
    # Tensor(name, ndarray) copies the bytes of a wire-layout dtype at once; any other dtype,
    # byte order or memory layout goes through numpy's conversions
    np = pytest.importorskip("numpy")
    grid = np.arange(6, dtype=np.int32).reshape(2, 3)
    cases = [
        (grid, None, "INT32", [[0, 1, 2], [3, 4, 5]]),
        (grid.T, None, "INT32", [[0, 3], [1, 4], [2, 5]]),  # not C-contiguous
        (grid[:, ::2], None, "INT32", [[0, 2], [3, 5]]),  # strided
        (grid.astype(">i4"), None, "INT32", [[0, 1, 2], [3, 4, 5]]),  # big-endian
        (grid, "FP32", "FP32", [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),  # converted, as astype()
        (grid, np.int64, "INT64", [[0, 1, 2], [3, 4, 5]]),
        (np.array([b"a", b"bc"], dtype=np.object_), None, "BYTES", [b"a", b"bc"]),
    ]
    for array, datatype, want_type, want in cases:
        t = pb_utils.Tensor("X", array, datatype)
        assert (t.datatype(), t.shape(), t.as_numpy().tolist()) == (want_type, list(np.shape(want)), want)


def test_conforming_an_output_renews_its_array():
    np = pytest.importorskip("numpy")
    t = pb_utils.Tensor("Y", np.array([1, 2], dtype=np.int64))
    assert t.as_numpy().dtype == np.int64
    t._conform("FP32", [2])  # what the glue does for an output the config declares FP32
    assert t.as_numpy().dtype == np.float32 and t.as_numpy().tolist() == [1.0, 2.0]

def test_fast_enums_keep_enum_semantics():
    # componentize-py converts WIT enums by calling the class with an int and reading .value;
    # _enums makes both cheaper and must change nothing else
    import enum

    from tessera_guest import _enums

    class Kind(enum.Enum):
        A = 0
        B = 1

    class Other(enum.Enum):
        X = 0

    _enums.install(_enums.enum_classes(sys.modules[__name__]) + [Kind])
    assert type(Kind) is _enums._FastEnumType and type(Other) is enum.EnumType
    assert Kind(1) is Kind.B and Kind(Kind.A) is Kind.A and Kind["B"] is Kind.B
    assert Kind.B.value == 1 and Kind.B.name == "B" and list(Kind) == [Kind.A, Kind.B]
    with pytest.raises(ValueError):
        Kind(2)
    with pytest.raises(ValueError):
        Kind("A")
    assert Other(0) is Other.X and Other.X.value == 0


def test_auto_complete_model_config_fills_and_refuses_contradictions():
    from tessera_guest import _autocomplete

    config = pb_utils.ModelConfig('{"name": "m", "input": [{"name": "A", "data_type": "TYPE_FP32"}]}')
    assert config.as_dict()["output"] == [] and config.as_dict()["max_batch_size"] == 0
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4]})  # fills A's dims
    config.add_output({"name": "B", "data_type": "TYPE_INT32", "dims": [1]})
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": True})
    assert config.as_dict()["input"] == [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}]
    assert config.as_dict()["output"] == [{"name": "B", "data_type": "TYPE_INT32", "dims": [1]}]
    assert config.as_dict()["dynamic_batching"] == {} and config.as_dict()["model_transaction_policy"] == {
        "decoupled": True}
    with pytest.raises(ValueError, match="data_type"):
        config.add_input({"name": "A", "data_type": "TYPE_INT8", "dims": [4]})
    with pytest.raises(ValueError, match="max_batch_size"):
        config.set_max_batch_size(4)
    with pytest.raises(ValueError, match="missing the 'dims'"):
        config.add_output({"name": "C", "data_type": "TYPE_FP32"})

    class Model:
        @staticmethod
        def auto_complete_config(auto_complete_model_config):
            auto_complete_model_config.set_max_batch_size(2)
            return auto_complete_model_config

    assert json.loads(_autocomplete.complete(Model, '{"name": "m"}'))["max_batch_size"] == 2
    assert _autocomplete.complete(object, '{"name": "m"}') == '{"name": "m"}', "no auto_complete_config"


@pytest.mark.parametrize("call", [lambda: pb_utils.load_model(model_name="onnx_model"),
                                  lambda: pb_utils.unload_model(model_name="onnx_model", unload_dependents=True),
                                  lambda: pb_utils.is_model_ready(model_name="onnx_model", model_version="1")])
def test_model_loading_api_is_refused_with_what_to_do_instead(call):
    with pytest.raises(pb_utils.TritonModelException) as refused:
        call()
    assert refused.value.code() == pb_utils.TritonError.UNSUPPORTED
    assert "repository API" in refused.value.message() and "allowed_models" in refused.value.message()


def test_get_model_dir_is_the_guest_path_of_the_version_directory():
    assert pb_utils.get_model_dir() == "/model"
