"""triton_python_backend_utils for Tessera's Wasm Python guests: the names of Triton's module.

In a guest built with numpy (the build bundles it when the model's code imports numpy), the
dtype helpers return and take numpy types exactly as Triton's do (`triton_string_to_numpy(
"TYPE_FP32")` is `np.float32`) and Tensor takes and gives numpy arrays. In a guest without
numpy they deal in KServe datatype names ("FP32", "BYTES", ...), which Tensor accepts as its
`datatype`, and Tensor.as_list() / tolist() / as_array() / to_bytes() stand in for as_numpy().
"""

from tessera_guest import (  # noqa: F401
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    Logger,
    LogLevel,
    Metric,
    MetricFamily,
    MetricKind,
    ResponseSender,
    Span,
    Tensor,
    TritonError,
    TritonModelException,
    get_input_config_by_name,
    get_input_tensor_by_name,
    get_output_config_by_name,
    get_output_tensor_by_name,
    using_decoupled_model_transaction_policy,
)
from tessera_guest import _dtypes
from tessera_guest._autocomplete import ModelConfig  # noqa: F401
from tessera_guest._loading import get_model_dir, is_model_ready, load_model, unload_model  # noqa: F401

from tessera_guest import _numpy
from tessera_guest._numpy import np

_CONFIG_TYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                 "FP16", "FP32", "FP64", "STRING", "BF16")

if np is not None:
    # Triton's own table (BF16 has no numpy type: float32 stands in, see tessera_guest._numpy)
    TRITON_STRING_TO_NUMPY = {
        "TYPE_BOOL": bool, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16,
        "TYPE_UINT32": np.uint32, "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8,
        "TYPE_INT16": np.int16, "TYPE_INT32": np.int32, "TYPE_INT64": np.int64,
        "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
        "TYPE_STRING": np.object_, "TYPE_BF16": np.float32,
    }
    _NUMPY_OF_CODE = {1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64,
                      6: np.int8, 7: np.int16, 8: np.int32, 9: np.int64, 10: np.float16,
                      11: np.float32, 12: np.float64, 13: np.object_, 14: np.float32}
else:
    # config type names map to the datatype names that Tensor(..., datatype) accepts, so that
    # `Tensor(name, values, self.output0_dtype)` ports unchanged
    TRITON_STRING_TO_NUMPY = {"TYPE_" + t: ("BYTES" if t == "STRING" else t) for t in _CONFIG_TYPES}
    _NUMPY_OF_CODE = None


def triton_string_to_numpy(triton_type_string):
    """"TYPE_FP32" -> np.float32 (with numpy), else "FP32" (a datatype name Tensor accepts)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type):
    """TRITONSERVER_DataType code -> np.float32 (with numpy) or "FP32" (11 -> either)."""
    if _NUMPY_OF_CODE is not None:
        return _NUMPY_OF_CODE.get(int(data_type))
    return _dtypes.normalize(int(data_type))


def numpy_to_triton_type(data_type):
    """A numpy type or dtype, or a datatype name or alias ("float32") -> TRITONSERVER_DataType
    code (np.float32 -> 11)."""
    return _dtypes.TRITON_CODES[_dtypes.normalize(data_type)]


def serialize_byte_tensor(input_tensor):
    """BYTES elements -> the serialized buffer (<u32 LE length><bytes> each): from an np.object_
    or np.bytes_ array, a 0-d np.object_ array holding the bytes (as Triton's); from a (nested)
    list of bytes/str, or a Tensor, bytes."""
    if isinstance(input_tensor, Tensor):
        return input_tensor.to_bytes()
    if np is not None and isinstance(input_tensor, np.ndarray):
        if input_tensor.size == 0:
            return np.empty([0], dtype=np.object_)
        if input_tensor.dtype.kind not in "OSU":
            raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
        return np.asarray(_dtypes.encode_bytes(input_tensor.ravel().tolist()), dtype=np.object_)
    flat, _ = _dtypes.flatten(input_tensor)
    return _dtypes.encode_bytes(flat)


def deserialize_bytes_tensor(encoded_tensor):
    """A serialized BYTES buffer -> its elements: an np.object_ array of bytes (with numpy, as
    Triton's), else a flat list of bytes objects."""
    if np is not None and isinstance(encoded_tensor, np.ndarray):
        encoded_tensor = encoded_tensor.item() if encoded_tensor.dtype == np.object_ else encoded_tensor.tobytes()
    elements = _dtypes.decode_bytes(bytes(encoded_tensor))
    return elements if np is None else _numpy.object_array(elements)
