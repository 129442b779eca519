"""pb_utils.Tensor: numpy arrays in guests built with numpy, lists, array.array and bytes in all.

A Tensor is either *local* (data the guest made: a flat list and/or raw bytes in guest memory) or
a *host* tensor (a handle to bytes that live in the Tessera host: request inputs, BLS outputs).
Host tensors stay handles until `as_list()` / `to_bytes()` asks for the data; handing one to an
InferenceResponse, a response sender or a BLS request moves no bytes.
"""

import array
import struct
from math import prod as _prod

from . import _dtypes
from . import _host
from . import _numpy
from ._errors import TritonModelException

_PACK = _dtypes.PACK
_UNPACK = _dtypes.UNPACK
_NP_TYPES = _numpy.ARRAY_TYPES  # () in a guest built without numpy
_NDARRAY = _NP_TYPES[0] if _NP_TYPES else None


def _host_call(fn, *args):
    """Calls a host function, turning a WIT `error` into TritonModelException."""
    try:
        return fn(*args)
    except _host.Err as e:
        err = e.value
        raise TritonModelException(getattr(err, "message", str(err)),
                                   _host.error_code(err) if hasattr(err, "code") else 1) from None


def assembled(cls, name, dtype, shape, raw, handle=None):
    """A `cls` tensor with every slot set as given, without `__init__`'s conversions and checks
    (the caller's): what `from_bytes` and `_from_handle` make, and a request's input that came
    with its bytes (`InferenceRequest._prefetch`, where a Python guest makes one per input)."""
    t = cls.__new__(cls)
    t._name = name
    t._dtype = dtype
    t._shape = shape
    t._raw = raw
    t._handle = handle
    t._handle_name = None if handle is None else name
    t._explicit_dtype = True
    t._explicit_shape = True
    t._array = None
    return t


class Tensor:
    """A named tensor, as in triton_python_backend_utils.

    Tensor(name, data, datatype=None, shape=None) where data is
      - a list / tuple, flat or nested (nesting gives the shape, like numpy);
      - an array.array (its typecode gives the datatype: 'f' FP32, 'd' FP64, 'i' INT32, 'q' INT64 ...);
      - bytes / bytearray / memoryview: the raw little-endian buffer (datatype defaults to UINT8;
        with datatype BYTES a bytes value is one element instead, see Tensor.from_bytes for raw
        serialized BYTES);
      - another Tensor: the same data under `name` (no copy; a host tensor stays a handle);
      - a scalar (bool / int / float / bytes / str): a rank-0 tensor, like numpy;
      - a numpy array or numpy scalar, in guests built with numpy (Triton's Tensor(name, array)):
        its dtype gives the datatype (np.object_ / bytes_ / str_ -> BYTES) and its shape the shape.
    datatype: "FP32", "TYPE_FP32", "float32", a TRITONSERVER_DataType code, or what
    triton_string_to_numpy() returns, or a numpy dtype. When omitted it is inferred like numpy (Python float ->
    FP64, int -> INT64, bool -> BOOL, bytes/str -> BYTES); for a model output whose datatype was
    inferred, the glue converts to the datatype the model config declares for that output.
    """

    __slots__ = ("_name", "_dtype", "_shape", "_raw", "_handle", "_handle_name",
                 "_explicit_dtype", "_explicit_shape", "_array")

    def __init__(self, name, data, datatype=None, shape=None, dtype=None):
        if datatype is None:
            datatype = dtype
        self._name = str(name)
        self._handle = None
        self._handle_name = None
        self._raw = None
        self._array = None  # as_numpy()'s array, made once (Triton's as_numpy gives one array)
        self._explicit_dtype = datatype is not None
        self._explicit_shape = shape is not None
        cls = data.__class__
        if cls is _NDARRAY and shape is None:
            # Tensor(name, ndarray), the common case of numpy models, first: one dict lookup
            # for the datatype and one copy of the bytes (see _numpy.encode_array)
            self._dtype, self._shape, self._raw = _numpy.encode_array(data, datatype)
            self._explicit_shape = True
            return
        dt = _dtypes.normalize(datatype)

        if (cls is list or cls is tuple) and not (data and isinstance(data[0], (list, tuple))):
            # a flat list, the common case, first: no flattening, no copy, and (each call costs
            # a Python guest a fraction of a microsecond) the cached packer found inline
            n = len(data)
            self._dtype = dt = dt or _dtypes.infer(data)
            self._shape = [n] if shape is None else [int(d) for d in shape]
            if _prod(self._shape) != n:
                raise ValueError("Tensor %r: %d elements do not fit shape %s"
                                 % (self._name, n, self._shape))
            pack = _PACK.get((dt, n))
            if pack is not None:
                try:
                    self._raw = pack(*data)
                    return
                except (struct.error, OverflowError, TypeError):
                    pass  # encode's other paths convert or say why
            self._raw = _dtypes.encode(dt, data)
            return

        if cls in _NP_TYPES or (_NP_TYPES and isinstance(data, _NP_TYPES)):
            self._dtype, self._shape, self._raw = _numpy.encode(data, dt)
            # numpy picks a dtype where the model may not have (np.array([0]) is int64): unless
            # given, it yields to the config's datatype for a declared output (see _conform)
            self._explicit_shape = True
            if shape is not None:
                self._shape = [int(d) for d in shape]
                self._check_count()
            return

        if isinstance(data, Tensor):
            src = data
            if dt is not None and dt != src.datatype():
                self._dtype = dt
                self._raw = _dtypes.encode(dt, src.as_list())
            else:
                self._dtype = src._dtype
                self._raw = src._raw
                self._handle = src._handle
                self._handle_name = src._handle_name if src._handle is not None else None
                if src._handle is not None and self._handle_name is None:
                    self._handle_name = src.name()
                self._explicit_dtype = self._explicit_dtype or src._explicit_dtype
            self._explicit_shape = self._explicit_shape or src._explicit_shape
            if shape is None:
                self._shape = None if src._shape is None else list(src._shape)
                if self._shape is None and self._handle is None:
                    self._shape = src.shape()
                return
            self._shape = [int(d) for d in shape]
            if self._handle is not None and self._shape != src.shape():
                # a host tensor has its own shape: another shape means new bytes
                self._dtype = src.datatype()
                self._raw = src.to_bytes()
                self._handle = None
                self._handle_name = None
            self._check_count()
            return

        if isinstance(data, (bytes, bytearray, memoryview)) and dt != "BYTES":
            self._dtype = dt or "UINT8"
            self._raw = bytes(data)
            size = _dtypes.ITEMSIZE[self._dtype]
            if len(self._raw) % size:
                raise ValueError("%d bytes is not a whole number of %s elements"
                                 % (len(self._raw), self._dtype))
            self._shape = [len(self._raw) // size] if shape is None else [int(d) for d in shape]
            self._check_count()
            return

        if isinstance(data, array.array):
            src_dt = _dtypes.from_array_code(data.typecode)
            self._dtype = dt or src_dt
            if self._dtype == src_dt and _dtypes._LITTLE:
                self._raw = data.tobytes()
            else:
                self._raw = _dtypes.encode(self._dtype, data.tolist())
            self._shape = [len(data)] if shape is None else [int(d) for d in shape]
            self._check_count()
            return

        if data is None:
            raise TypeError("Tensor %r: data is None" % self._name)
        flat, inferred_shape = _dtypes.flatten(data)
        self._dtype = dt or _dtypes.infer(flat)
        self._shape = inferred_shape if shape is None else [int(d) for d in shape]
        if _dtypes.element_count(self._shape) != len(flat):
            raise ValueError("Tensor %r: %d elements do not fit shape %s"
                             % (self._name, len(flat), self._shape))
        # encoded now, like numpy converts on construction: bad values fail here, and
        # as_list() gives back exactly what the bytes hold
        self._raw = _dtypes.encode(self._dtype, flat)

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def from_list(cls, name, values, datatype="FP32", shape=None):
        """A tensor of `datatype` from a flat or nested list; shape defaults to the nesting."""
        return cls(name, values, datatype=datatype, shape=shape)

    @classmethod
    def from_bytes(cls, name, raw, datatype, shape):
        """A tensor over raw bytes in the wire layout (for BYTES: serialized <u32 len><bytes>...)."""
        t = assembled(cls, str(name), _dtypes.normalize(datatype), [int(d) for d in shape], bytes(raw))
        t._check_count()
        return t

    @classmethod
    def _from_handle(cls, handle, name=None):
        return assembled(cls, name, None, None, None, handle)

    @staticmethod
    def from_dlpack(name, capsule):
        """Triton's from_dlpack, for what a guest can hold: a pb_utils.Tensor (any datatype, BF16
        too: the same data under `name`, no copy), what its to_dlpack() gave, or a numpy array
        (numpy guests). A guest has no other DLPack producer (no torch, no GPU)."""
        if isinstance(capsule, _DLPackCapsule):
            capsule = capsule.tensor
        if isinstance(capsule, Tensor):
            return Tensor(name, capsule)
        if _NP_TYPES and isinstance(capsule, _NP_TYPES):
            return Tensor(name, capsule)
        raise TypeError("from_dlpack inside a Wasm guest takes a pb_utils.Tensor, what its to_dlpack() "
                        "returned or a numpy array (there is no torch or GPU), got %s" % type(capsule).__name__)

    # -- triton_python_backend_utils API -------------------------------------------------------
    def name(self):
        if self._name is None:
            self._name = self._handle_name = self._handle.name()
        return self._name

    def datatype(self):
        """The KServe datatype name, e.g. "FP32"."""
        if self._dtype is None:
            self._dtype = _host.datatype_name(self._handle.datatype())
        return self._dtype

    def triton_dtype(self):
        """The TRITONSERVER_DataType code, as Triton's Tensor.triton_dtype() (FP32 -> 11)."""
        return _dtypes.TRITON_CODES[self.datatype()]

    def shape(self):
        if self._shape is None:
            self._shape = list(self._handle.shape())
        return list(self._shape)

    def byte_size(self):
        if self._raw is not None:
            return len(self._raw)
        if self._handle is not None:
            return int(self._handle.byte_size())
        return len(self.to_bytes())

    def element_count(self):
        return _dtypes.element_count(self.shape())

    def as_list(self):
        """The elements as a flat Python list (BYTES elements are bytes objects)."""
        raw = self._raw
        if raw is None:
            raw = self.to_bytes()  # first: it learns the datatype in the same host call
        unpack = _UNPACK.get((self._dtype, len(raw)))
        if unpack is not None:  # a small numeric tensor of a size seen before
            return list(unpack(raw))
        return _dtypes.decode(self.datatype(), raw)

    def tolist(self):
        """The elements as nested lists of the tensor's shape (numpy's tolist())."""
        return _dtypes.unflatten(self.as_list(), self.shape())

    def as_array(self):
        """An array.array of the elements, for the datatypes array supports (not BOOL, FP16,
        BF16, BYTES): cheaper than as_list() for large numeric tensors."""
        raw = self.to_bytes()
        dt = self.datatype()
        arr = _dtypes.to_array(dt, raw)
        if arr is None:
            raise TypeError("as_array(): %s has no array.array typecode; use as_list()" % dt)
        return arr

    def to_bytes(self):
        """The raw bytes in the wire layout (copied from the host on first use)."""
        if self._raw is None:
            if self._dtype is None or self._shape is None:
                # datatype, shape and bytes in one host call: each call into the host costs
                # several µs of interpreter time
                read = self._handle.read()
                self._dtype = _host.datatype_name(read.datatype)
                self._shape = list(read.shape)
                self._raw = bytes(read.data)
            else:
                self._raw = bytes(self._handle.data())
        return self._raw

    def as_numpy(self):
        """The tensor as a numpy array of its shape: a read-only view over its bytes, without a
        copy, for the fixed-size datatypes; BYTES as an np.object_ array of bytes (as Triton
        gives); BF16 as float32."""
        if _numpy.np is None:
            raise NotImplementedError(
                "this guest was built without numpy: numpy is bundled into a Python guest when its "
                "model code imports it (`import numpy as np` in model.py); otherwise use "
                "Tensor.as_list() (flat list), .tolist() (nested), .as_array() (array.array) or "
                ".to_bytes(), and .shape()")
        array = self._array
        if array is None:
            raw = self._raw
            if raw is None or self._dtype is None or self._shape is None:
                raw = self.to_bytes()  # first: it learns the datatype and shape in one host call
                self.datatype()
                self.shape()
            array = self._array = _numpy.decode(self._dtype, self._shape, raw)
        return array

    def to_dlpack(self):
        """A stand-in for a DLPack capsule that Tensor.from_dlpack takes back (any datatype);
        no library in a guest reads DLPack capsules."""
        return _DLPackCapsule(self)

    def is_cpu(self):
        return True

    def with_name(self, name):
        """The same data under another name; a host tensor stays a handle (no copy)."""
        return Tensor(name, self)

    def reshape(self, shape):
        """The same elements with another shape (copies a host tensor's bytes)."""
        return Tensor(self.name(), self, shape=shape)

    def __len__(self):
        s = self.shape()
        return s[0] if s else 1

    def __repr__(self):
        where = "host" if self._handle is not None else "local"
        return "Tensor(name=%r, datatype=%s, shape=%s, %s)" % (
            self.name(), self.datatype(), self.shape(), where)

    # -- glue internals ------------------------------------------------------------------------
    def _check_count(self):
        dt = self._dtype
        shape = self._shape
        if any(d < 0 for d in shape):
            raise ValueError("Tensor %r: negative dimension in shape %s" % (self._name, shape))
        n = _dtypes.element_count(shape)
        if self._raw is not None and dt != "BYTES":
            have = len(self._raw) // _dtypes.ITEMSIZE[dt]
        else:
            return
        if have != n:
            raise ValueError("Tensor %r: %d elements do not fit shape %s" % (self._name, have, shape))

    def _conform(self, datatype, dims):
        """For an output the model config declares: convert an inferred datatype to `datatype`
        and give a flat list's inferred shape the config's `dims` (-1 may match one dim)."""
        if self._handle is not None:
            return
        self._array = None  # the bytes or shape may change
        if datatype and not self._explicit_dtype and datatype != self._dtype:
            if _numpy.np is not None and "BYTES" not in (datatype, self._dtype):
                array = _numpy.decode(self._dtype, self._shape, self._raw)
                self._raw = _numpy.encode(array, datatype)[2]  # as astype(): numpy's casting
            else:
                self._raw = _dtypes.encode(datatype, self.as_list())
            self._dtype = datatype
            self._explicit_dtype = True
        if dims is not None and not self._explicit_shape and len(self._shape) <= 1:
            n = _dtypes.element_count(self._shape)
            wild = [i for i, d in enumerate(dims) if d < 0]
            known = _dtypes.element_count([d for d in dims if d >= 0])
            if not wild and known == n:
                self._shape = list(dims)
            elif len(wild) == 1 and known > 0 and n % known == 0:
                shape = list(dims)
                shape[wild[0]] = n // known
                self._shape = shape

    def _create_handle(self):
        # The bytes cross as a latin-1 string: componentize-py frees a string argument after the
        # call but never the buffer it lowers a bytes (list<u8>) argument into, which leaked
        # every output's size in guest memory.
        _host.require()
        return _host_call(_host.wit_types.Tensor.create_latin1, self._name,
                          _host.wit_datatype(self._dtype), self._shape,
                          self.to_bytes().decode("latin-1"))

    def _lower_owned(self):
        """An owned host handle to give away (response, response sender): a new handle to the
        same host bytes for a host tensor, a freshly created one for a local tensor."""
        if self._handle is not None:
            return self._handle.with_name(self.name())
        return self._create_handle()

    def _lower_borrowed(self):
        """A host handle that stays this tensor's (BLS inputs are borrowed)."""
        if self._handle is None:
            self._handle = self._create_handle()
            self._handle_name = self._name
        elif self._handle_name != self.name():
            self._handle = self._handle.with_name(self._name)
            self._handle_name = self._name
        return self._handle


class _DLPackCapsule:
    """What Tensor.to_dlpack() returns in a guest: the tensor, for Tensor.from_dlpack."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __repr__(self):
        return "<dltensor stand-in for %r>" % (self.tensor,)
