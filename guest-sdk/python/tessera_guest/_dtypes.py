"""Datatypes and the byte layout of tensor data (KServe v2 / Triton).

Data is raw little-endian and row-major. BYTES elements are each a 4-byte little-endian length
followed by that many bytes. Pure Python (``array`` and ``struct`` only), for guests with or
without numpy (``_numpy`` converts arrays).
"""

import array
import struct
import sys

# KServe v2 datatype names, in the order of the WIT `data-type` enum.
DATATYPES = (
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "BF16", "FP32", "FP64", "BYTES",
)

_NAMES = frozenset(DATATYPES)

# TRITONSERVER_DataType codes (what Triton's Tensor.triton_dtype() returns).
TRITON_CODES = {
    "BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5, "INT8": 6, "INT16": 7,
    "INT32": 8, "INT64": 9, "FP16": 10, "FP32": 11, "FP64": 12, "BYTES": 13, "BF16": 14,
}
_FROM_CODE = {v: k for k, v in TRITON_CODES.items()}

# Bytes per element; BYTES is variable-sized.
ITEMSIZE = {
    "BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
    "UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8,
}

_INT_RANGES = {
    "UINT8": (0, 0xFF), "UINT16": (0, 0xFFFF), "UINT32": (0, 0xFFFFFFFF),
    "UINT64": (0, 0xFFFFFFFFFFFFFFFF), "INT8": (-0x80, 0x7F), "INT16": (-0x8000, 0x7FFF),
    "INT32": (-0x80000000, 0x7FFFFFFF), "INT64": (-0x8000000000000000, 0x7FFFFFFFFFFFFFFF),
}


def _array_code(signed, size):
    for code in ("bhilq" if signed else "BHILQ"):
        if array.array(code).itemsize == size:
            return code
    return None


# array.array typecodes per datatype, chosen by item size (C `long` is 4 bytes on wasm32).
ARRAY_CODES = {"FP32": "f", "FP64": "d"}
for _dt, (_lo, _hi) in _INT_RANGES.items():
    _code = _array_code(_lo < 0, ITEMSIZE[_dt])
    if _code is not None:
        ARRAY_CODES[_dt] = _code
_FROM_ARRAY_CODE = {}
for _dt, _code in ARRAY_CODES.items():
    _FROM_ARRAY_CODE[_code] = _dt
for _code in "bhilqBHILQ":
    _sz = array.array(_code).itemsize
    _dt = ("INT" if _code.islower() else "UINT") + str(_sz * 8)
    _FROM_ARRAY_CODE.setdefault(_code, _dt)

_LITTLE = sys.byteorder == "little"

# Names accepted wherever a datatype is expected, besides the KServe names themselves.
_ALIASES = {
    "BOOLEAN": "BOOL", "STRING": "BYTES", "OBJECT": "BYTES", "OBJECT_": "BYTES", "STR": "BYTES",
    "FLOAT16": "FP16", "HALF": "FP16", "FLOAT32": "FP32", "FLOAT": "FP32", "SINGLE": "FP32",
    "FLOAT64": "FP64", "DOUBLE": "FP64", "BFLOAT16": "BF16", "BOOL_": "BOOL",
}


def normalize(datatype):
    """The KServe name ("FP32") for any accepted spelling of a datatype, or None for None.

    Accepts "FP32", Triton config names ("TYPE_FP32", "TYPE_STRING"), numpy-style names
    ("float32", "int64", "object", "bytes", "bool"), TRITONSERVER_DataType codes (11), and the
    Python types bool, int (INT64), float (FP64), bytes and str (BYTES).
    """
    if datatype.__class__ is str and datatype in _NAMES:  # the common case, first
        return datatype
    if datatype is None:
        return None
    if _is_numpy_dtype(datatype):  # np.float32, np.dtype("f4"), np.object_, ...
        from . import _numpy

        return _numpy.datatype_of(datatype)
    if isinstance(datatype, type):
        if datatype is bool:
            return "BOOL"
        if datatype is int:
            return "INT64"
        if datatype is float:
            return "FP64"
        if datatype in (bytes, str, bytearray, object):
            return "BYTES"
        raise TypeError("unsupported datatype %r" % (datatype,))
    if isinstance(datatype, int) and not isinstance(datatype, bool):
        try:
            return _FROM_CODE[datatype]
        except KeyError:
            raise ValueError("unknown TRITONSERVER_DataType code %d" % datatype) from None
    if hasattr(datatype, "name") and not isinstance(datatype, str):  # a WIT DataType enum value
        datatype = datatype.name
    if not isinstance(datatype, str):
        raise TypeError("unsupported datatype %r" % (datatype,))
    name = datatype.strip().upper()
    if name.startswith("TYPE_"):
        name = name[5:]
    if name in ITEMSIZE or name == "BYTES":
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    if name.startswith("UINT") and ("UINT" + name[4:]) in ITEMSIZE:
        return name
    if name.startswith("INT") and name in ITEMSIZE:
        return name
    raise ValueError("unknown datatype %r" % (datatype,))


def _is_numpy_dtype(datatype):
    """A numpy dtype (np.dtype("f4")) or scalar type (np.float32), in a guest that has numpy."""
    if isinstance(datatype, type):
        module = datatype.__module__
        return module == "numpy" or module.startswith("numpy.")
    return type(datatype).__module__ == "numpy.dtypes"


def from_array_code(code):
    """The datatype of an array.array typecode ('f' -> FP32, 'q' -> INT64, ...)."""
    if code == "f":
        return "FP32"
    if code == "d":
        return "FP64"
    try:
        return _FROM_ARRAY_CODE[code]
    except KeyError:
        raise TypeError("array.array typecode %r has no tensor datatype" % code) from None


def infer(values):
    """The datatype numpy would pick for a flat list of Python scalars (float -> FP64, int -> INT64)."""
    if not values:
        return "FP32"
    kind = "BOOL"
    for v in values:
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            if kind == "BOOL":
                kind = "INT64"
        elif isinstance(v, float):
            kind = "FP64"
        elif isinstance(v, (bytes, bytearray, str)):
            return "BYTES"
        else:
            raise TypeError("cannot infer a tensor datatype from %r (%s)" % (v, type(v).__name__))
    return kind


def flatten(data):
    """(flat list, shape) of a scalar or a (nested) list/tuple; ragged nesting is an error."""
    if not isinstance(data, (list, tuple)):
        return [data], []
    shape = []
    probe = data
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    if len(shape) == 1:
        return list(data), shape
    flat = []

    def walk(x, depth):
        if len(x) != shape[depth]:
            raise ValueError("ragged nested list: expected %d elements at depth %d, got %d"
                             % (shape[depth], depth, len(x)))
        if depth == len(shape) - 1:
            for v in x:
                if isinstance(v, (list, tuple)):
                    raise ValueError("ragged nested list: too deep at depth %d" % depth)
            flat.extend(x)
        else:
            for v in x:
                if not isinstance(v, (list, tuple)):
                    raise ValueError("ragged nested list: scalar at depth %d" % depth)
                walk(v, depth + 1)

    walk(data, 0)
    return flat, shape


def element_count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _bf16_bits(x):
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF):  # NaN
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


# Packers for small numeric tensors, by (array code, element count): a cached struct.Struct packs
# a short list about twice as fast as building an array.array (no per-element argument parsing).
# struct's standard sizes ("<"), which are not array's native ones ("l" is 4 or 8 bytes).
_STRUCT_CODES = {"FP32": "f", "FP64": "d", "INT8": "b", "INT16": "h", "INT32": "i", "INT64": "q",
                 "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q"}
_STRUCTS = {}
_PACKER_MAX_ELEMENTS = 256
_PACKERS_MAX = 64

# The cached structs' bound methods by datatype name and size, so that the hot paths
# (Tensor(name, flat_list, ...), Tensor.as_list) find theirs with one dict lookup and no call:
# PACK by (datatype, element count), UNPACK by (datatype, byte count).
PACK = {}
UNPACK = {}


def _struct_for(datatype, n):
    """The cached struct.Struct for n elements of `datatype`, or None (not a fixed-size numeric
    type struct knows, more than _PACKER_MAX_ELEMENTS elements, or the cache is full)."""
    code = _STRUCT_CODES.get(datatype)
    if code is None or n > _PACKER_MAX_ELEMENTS:
        return None
    st = _STRUCTS.get((code, n))
    if st is None and len(_STRUCTS) < _PACKERS_MAX:
        st = _STRUCTS[(code, n)] = struct.Struct("<%d%s" % (n, code))
        PACK[(datatype, n)] = st.pack
        UNPACK[(datatype, st.size)] = st.unpack
    return st


def encode(datatype, values):
    """Raw tensor bytes for a flat list of Python values."""
    st = _struct_for(datatype, len(values))
    if st is not None:
        try:
            return st.pack(*values)
        except (struct.error, OverflowError, TypeError):
            pass  # floats into an integer type, values out of range: the array path says why
    if datatype == "BYTES":
        return encode_bytes(values)
    if datatype == "BOOL":
        return bytes(1 if v else 0 for v in values)
    if datatype == "FP16":
        return struct.pack("<%de" % len(values), *values)
    if datatype == "BF16":
        return struct.pack("<%dH" % len(values), *[_bf16_bits(float(v)) for v in values])
    code = ARRAY_CODES.get(datatype)
    if code is None:
        raise ValueError("unknown datatype %r" % (datatype,))
    try:
        arr = array.array(code, values)
    except TypeError:
        # floats into an integer type, or bools/ints mixed in: convert like numpy's astype
        if datatype in ("FP32", "FP64"):
            arr = array.array(code, [float(v) for v in values])
        else:
            arr = array.array(code, [int(v) for v in values])
    except OverflowError:
        lo, hi = _INT_RANGES[datatype]
        bad = next(v for v in values if not lo <= v <= hi)
        raise OverflowError("value %r does not fit %s" % (bad, datatype)) from None
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def decode(datatype, raw):
    """A flat list of Python values from raw tensor bytes (BYTES elements come back as bytes)."""
    code = ARRAY_CODES.get(datatype)
    if code is not None and _LITTLE:  # the numeric types, first
        size = ITEMSIZE[datatype]
        if not len(raw) % size:
            _struct_for(datatype, len(raw) // size)  # Tensor.as_list's fast path from now on
        arr = array.array(code)
        if len(raw) % arr.itemsize:
            raise ValueError("%d bytes is not a whole number of %s elements" % (len(raw), datatype))
        arr.frombytes(raw)
        return arr.tolist()
    if datatype == "BYTES":
        return decode_bytes(raw)
    if datatype == "BOOL":
        return [b != 0 for b in raw]
    size = ITEMSIZE[datatype]
    if len(raw) % size:
        raise ValueError("%d bytes is not a whole number of %s elements" % (len(raw), datatype))
    n = len(raw) // size
    if datatype == "FP16":
        return list(struct.unpack("<%de" % n, raw))
    if datatype == "BF16":
        return list(struct.unpack("<%df" % n, b"".join(
            b"\x00\x00" + bytes(raw[i:i + 2]) for i in range(0, len(raw), 2))))
    arr = array.array(ARRAY_CODES[datatype])
    arr.frombytes(raw)
    if not _LITTLE:
        arr.byteswap()
    return arr.tolist()


def to_array(datatype, raw):
    """An array.array over raw bytes for the numeric datatypes that array supports, else None."""
    code = ARRAY_CODES.get(datatype)
    if code is None:
        return None
    arr = array.array(code)
    arr.frombytes(raw)
    if not _LITTLE:
        arr.byteswap()
    return arr


def encode_bytes(values):
    """Triton's serialize_byte_tensor for a flat list: each element is <u32 LE length><bytes>."""
    parts = []
    pack = struct.Struct("<I").pack
    for v in values:
        if isinstance(v, (bytes, bytearray, memoryview)):
            b = bytes(v)
        else:
            b = str(v).encode("utf-8")  # like Triton's object arrays of str / numbers
        parts.append(pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def decode_bytes(raw):
    """Triton's deserialize_bytes_tensor: a flat list of bytes objects."""
    out = []
    offset = 0
    n = len(raw)
    mv = memoryview(raw)
    unpack = struct.Struct("<I").unpack_from
    while offset < n:
        if offset + 4 > n:
            raise ValueError("truncated BYTES element length at offset %d" % offset)
        (length,) = unpack(raw, offset)
        offset += 4
        if offset + length > n:
            raise ValueError("BYTES element at offset %d runs past the end (%d > %d)"
                             % (offset - 4, offset + length, n))
        out.append(bytes(mv[offset:offset + length]))
        offset += length
    return out


def unflatten(flat, shape):
    """Nested lists of `shape` from a flat list (numpy's tolist())."""
    if not shape:
        return flat[0] if flat else None
    if len(shape) == 1:
        return list(flat)
    step = element_count(shape[1:])
    return [unflatten(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
