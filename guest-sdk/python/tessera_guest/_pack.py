"""The tensor pack of `execute-by-value` (wit/model.wit; the host's side is
host/src/backend/wasm/pack.rs): a request's inputs, or a response's outputs, as one byte string.

componentize-py converts every value that crosses the component boundary on its own, taking and
releasing the interpreter's lock around each, so a request of two small inputs as tuples crossed
as about twenty values; a pack is one. All integers little-endian:

    pack   := header-size:u32 header data
    header := count:u32 entry{count}
    entry  := name-size:u32 name:utf-8 datatype:u8 rank:u32 dim:s64{rank} byte-size:u32
    data   := the bytes of each entry in the pack, in entry order, back to back

Requests to one model mostly share a header (the same names, datatypes and shapes), so the header
is parsed once and found again by its bytes; likewise each output's entry by what it encodes.
"""

import struct

# The `data-type` enum's cases in order: a pack's `datatype` byte is an index into this.
NAMES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
         "FP16", "BF16", "FP32", "FP64", "BYTES")
INDEX = {name: i for i, name in enumerate(NAMES)}

NOT_IN_PACK = 0xFFFFFFFF

_U32 = struct.Struct("<I")
_TYPE_RANK = struct.Struct("<BI")
_u32_at = _U32.unpack_from
_u32 = _U32.pack
_CACHED = 256  # parsed headers and packed entries kept, each (cleared when full)

_headers = {}  # header bytes -> entries: ((name, datatype, shape tuple, start, end), ...)
_entries = {}  # (name, datatype, shape tuple, byte size) -> that entry's bytes


def entries(pack):
    """The entries of a pack (bytes): (name, datatype name, shape tuple, start, end) each, where
    pack[start:end] are its bytes, or start and end None for an input that came without them."""
    size = _u32_at(pack)[0]
    header = pack[4:4 + size]
    found = _headers.get(header)
    if found is None:
        found = _parse(header, 4 + size)
        if len(_headers) >= _CACHED:
            _headers.clear()
        _headers[header] = found
    return found


def _parse(header, at):
    count = _u32_at(header)[0]
    pos = 4
    out = []
    for _ in range(count):
        n = _u32_at(header, pos)[0]
        name = header[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        datatype, rank = _TYPE_RANK.unpack_from(header, pos)
        pos += 5
        shape = struct.unpack_from("<%dq" % rank, header, pos)
        pos += 8 * rank
        size = _u32_at(header, pos)[0]
        pos += 4
        if size == NOT_IN_PACK:
            out.append((name, NAMES[datatype], shape, None, None))
        else:
            out.append((name, NAMES[datatype], shape, at, at + size))
            at += size
    return tuple(out)


def entry(name, datatype, shape, size):
    """The header entry of one tensor (datatype a name such as "FP32", shape a sequence)."""
    key = (name, datatype, tuple(shape), size)
    found = _entries.get(key)
    if found is None:
        encoded = name.encode()
        found = (_u32(len(encoded)) + encoded + _TYPE_RANK.pack(INDEX[datatype], len(key[2]))
                 + struct.pack("<%dq" % len(key[2]), *key[2]) + _u32(size))
        if len(_entries) >= _CACHED:
            _entries.clear()
        _entries[key] = found
    return found


def join(header_entries, datas):
    """A pack of these entries (from `entry`) and their bytes, as a latin-1 string (each
    character one byte): how `execute-by-value` answers carry it."""
    header = _u32(len(header_entries)) + b"".join(header_entries)
    return (_u32(len(header)) + header + b"".join(datas)).decode("latin-1")
