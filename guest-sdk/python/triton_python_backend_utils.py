"""triton_python_backend_utils for Tessera's Wasm Python guests.

The same names as Triton's module, without numpy (there is no numpy inside a Wasm guest):
Tensor.as_numpy() is replaced by as_list() / tolist() / as_array() / to_bytes(), and the
"numpy dtype" helpers deal in KServe datatype names ("FP32", "BYTES", ...), which Tensor accepts
as its `datatype`.
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
    ResponseSender,
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

# Triton maps config type names to numpy dtypes; here they map to the datatype names that
# Tensor(..., datatype) accepts, so `Tensor(name, values, self.output0_dtype)` ports unchanged.
TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_UINT16": "UINT16", "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64", "TYPE_INT8": "INT8", "TYPE_INT16": "INT16", "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64", "TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES", "TYPE_BF16": "BF16",
}


def triton_string_to_numpy(triton_type_string):
    """"TYPE_FP32" -> "FP32" (a datatype name Tensor accepts; no numpy here)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type):
    """TRITONSERVER_DataType code -> datatype name (11 -> "FP32")."""
    return _dtypes.normalize(int(data_type))


def numpy_to_triton_type(data_type):
    """datatype name (or alias such as "float32") -> TRITONSERVER_DataType code."""
    return _dtypes.TRITON_CODES[_dtypes.normalize(data_type)]


def serialize_byte_tensor(input_tensor):
    """A flat list (or nested lists) of bytes/str -> the serialized BYTES buffer (bytes)."""
    if isinstance(input_tensor, Tensor):
        return input_tensor.to_bytes()
    flat, _ = _dtypes.flatten(input_tensor)
    return _dtypes.encode_bytes(flat)


def deserialize_bytes_tensor(encoded_tensor):
    """A serialized BYTES buffer -> a flat list of bytes objects."""
    return _dtypes.decode_bytes(bytes(encoded_tensor))
