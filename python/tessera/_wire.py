"""Triton's tensor forms, shared by `tessera.pytriton` and `tessera.tritonserver`: the protocol
datatype of each numpy dtype, and BYTES serialisation (each element a 4-byte little-endian
length, then its bytes; `str` elements are UTF-8 encoded)."""

from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np

# Protocol datatype -> numpy dtype, for every datatype with a fixed-size numpy equivalent.
NUMPY_OF_PROTOCOL = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}


def serialize_bytes(array: np.ndarray) -> bytes:
    """The elements of `array` (C order) in Triton's BYTES form."""
    parts = []
    for item in array.reshape(-1):
        if not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes(buffer: Any, shape: Sequence[int]) -> np.ndarray:
    """Triton's BYTES form back to an object array of `bytes` in `shape`."""
    view = memoryview(buffer).cast("B")
    items, offset = [], 0
    while offset + 4 <= len(view):
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        items.append(bytes(view[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(tuple(shape))
