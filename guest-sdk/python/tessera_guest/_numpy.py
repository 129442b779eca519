"""numpy arrays <-> tensor bytes, for guests built with numpy.

scripts/build-python-guest.sh bundles numpy (built for wasm32-wasi by scripts/build-numpy-wasi.sh)
into a guest only when the model's code imports it; without it `np` is None here and the SDK
speaks lists, array.array and bytes as before.

Conversions follow Triton's python backend: BYTES tensors are `np.object_` arrays of `bytes`
(serialized as <u32 LE length><bytes> per element; `str` elements are UTF-8 encoded), BOOL is
`np.bool_`. numpy has no bfloat16: a BF16 tensor reads as float32 (a copy), and an array given
with datatype BF16 is rounded to it (round to nearest even).
"""

from . import _dtypes

try:
    import numpy as np
except ImportError:  # a guest built without numpy
    np = None

if np is not None:
    DTYPES = {
        "BOOL": np.dtype(np.bool_), "UINT8": np.dtype("<u1"), "UINT16": np.dtype("<u2"),
        "UINT32": np.dtype("<u4"), "UINT64": np.dtype("<u8"), "INT8": np.dtype("<i1"),
        "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"), "INT64": np.dtype("<i8"),
        "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
        "BYTES": np.dtype(np.object_),
    }
    ARRAY_TYPES = (np.ndarray, np.generic)
    # dtype -> datatype for the dtypes whose bytes are already the wire layout (little-endian);
    # np.dtype("float32") and np.dtype("<f4") are equal and hash alike on a little-endian host
    _WIRE = {dtype: name for name, dtype in DTYPES.items() if name != "BYTES"}
else:
    DTYPES = {}
    ARRAY_TYPES = ()
    _WIRE = {}

_INTS = {1: "INT8", 2: "INT16", 4: "INT32", 8: "INT64"}
_UINTS = {1: "UINT8", 2: "UINT16", 4: "UINT32", 8: "UINT64"}
_FLOATS = {2: "FP16", 4: "FP32", 8: "FP64"}


def datatype_of(dtype):
    """The tensor datatype of a numpy dtype (or anything np.dtype() takes: np.float32, "f4",
    bool, np.object_), as Triton's numpy_to_triton_type maps it."""
    dt = np.dtype(dtype)
    kind = dt.kind
    name = None
    if kind == "b":
        name = "BOOL"
    elif kind == "i":
        name = _INTS.get(dt.itemsize)
    elif kind == "u":
        name = _UINTS.get(dt.itemsize)
    elif kind == "f":
        name = _FLOATS.get(dt.itemsize)
    elif kind in "OSU":
        name = "BYTES"
    if name is None:
        raise TypeError("numpy dtype %s has no tensor datatype" % dt)
    return name


def encode(array, datatype=None):
    """(datatype, shape, raw little-endian row-major bytes) of an array or numpy scalar;
    `datatype` (a KServe name) converts the values to it, as astype() would."""
    array = np.asarray(array)
    dt = datatype or datatype_of(array.dtype)
    shape = list(array.shape)
    if dt == "BYTES":
        return dt, shape, _dtypes.encode_bytes(array.ravel().tolist())
    if dt == "BF16":
        bits = np.ascontiguousarray(array, dtype="<f4").view("<u4").astype(np.uint64)
        nan = np.isnan(array.astype("<f4"))
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
        rounded[nan] = 0x7FC0
        return dt, shape, rounded.tobytes()
    return dt, shape, np.ascontiguousarray(array, dtype=DTYPES[dt]).tobytes()


def encode_array(array, datatype=None):
    """encode() of an np.ndarray: when its dtype is already the wire layout of `datatype` (or of
    no datatype given), its bytes in C order at once (tobytes copies any layout into C order)."""
    dt = _WIRE.get(array.dtype)
    if dt is not None and (datatype is None or datatype == dt):
        return dt, list(array.shape), array.tobytes()
    return encode(array, _dtypes.normalize(datatype))


def decode(datatype, shape, raw):
    """An array of `shape` over raw tensor bytes: a read-only view without a copy for the
    fixed-size datatypes; BYTES as an np.object_ array of bytes; BF16 as float32 (a copy)."""
    if datatype == "BYTES":
        return object_array(_dtypes.decode_bytes(raw)).reshape(shape)
    if datatype == "BF16":
        wide = np.frombuffer(raw, dtype="<u2").astype("<u4") << 16
        return wide.view("<f4").reshape(shape)
    # one call: ndarray over the buffer is frombuffer(...).reshape(shape) at half the cost
    return np.ndarray(shape, DTYPES[datatype], raw)


def object_array(elements):
    """A flat np.object_ array of `elements` (bytes objects stay bytes: np.array would make
    them a fixed-width bytes_ array)."""
    out = np.empty(len(elements), dtype=np.object_)
    out[:] = elements
    return out
