"""`Tensor` and `MemoryBuffer` as Triton's module has them, over host memory.

A tensor holds its bytes in a Python object with the buffer protocol: a numpy array for inputs,
the response's own buffer for outputs (shared with the server, read-only, no copy). BYTES tensors
hold Triton's serialisation (each element a 4-byte length, then its bytes). Memory is always CPU:
the in-process API takes no device memory (a GPU tensor is refused with UnsupportedError; CUDA
shared memory over HTTP/gRPC is the way in for those).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import numpy as np

from tessera._wire import deserialize_bytes, serialize_bytes
from tessera.tritonserver._enums import NUMPY_OF, TRITON_OF, DataType, DLDeviceType, MemoryType
from tessera.tritonserver._errors import InvalidArgumentError, UnsupportedError


@dataclasses.dataclass
class MemoryBuffer:
    """A range of memory and the object that keeps it alive (`owner`)."""

    data_ptr: int
    memory_type: MemoryType
    memory_type_id: int
    size: int
    owner: Any

    @staticmethod
    def from_dlpack(owner: Any) -> "MemoryBuffer":
        array = _host_array_from_dlpack(owner)
        return MemoryBuffer(array.ctypes.data, MemoryType.CPU, 0, array.nbytes, array)


def _host_array_from_dlpack(obj: Any) -> np.ndarray:
    if not hasattr(obj, "__dlpack__"):
        raise InvalidArgumentError(f"Object does not support DLPack protocol: {type(obj).__name__}")
    device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (DLDeviceType.kDLCPU, 0)
    if int(device[0]) not in (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost):
        raise UnsupportedError(
            f"Unsupported DLPack device {tuple(device)}: Tessera's in-process API takes host memory only "
            "(send GPU tensors through CUDA shared memory over HTTP or gRPC)"
        )
    try:
        array = np.from_dlpack(obj)
    except (BufferError, TypeError, ValueError, RuntimeError) as e:
        raise InvalidArgumentError(f"Object does not support DLPack protocol: {e}") from None
    if not array.flags.c_contiguous:
        raise InvalidArgumentError("Only contiguous tensors are supported (DLPack object is strided)")
    return array


class Tensor:
    """Triton's `Tensor(data_type, shape, memory_buffer)`, with the DLPack protocol."""

    __slots__ = ("data_type", "shape", "_raw", "_memory_buffer")

    def __init__(self, data_type: DataType, shape: Sequence[int], memory_buffer: MemoryBuffer):
        if memory_buffer.memory_type == MemoryType.GPU:
            raise UnsupportedError("GPU memory is not supported by Tessera's in-process API")
        self.data_type = DataType(data_type)
        self.shape = shape
        self._memory_buffer = memory_buffer
        owner = memory_buffer.owner
        if isinstance(owner, np.ndarray) and owner.ctypes.data == memory_buffer.data_ptr:
            self._raw = owner
        else:
            # A pointer and a size: read through ctypes, kept alive by the owner.
            import ctypes

            array_type = ctypes.c_uint8 * memory_buffer.size
            self._raw = np.frombuffer(array_type.from_address(memory_buffer.data_ptr), dtype=np.uint8)

    @classmethod
    def _of(cls, data_type: DataType, shape: Sequence[int], raw: Any) -> "Tensor":
        """A tensor over `raw` (an object with the buffer protocol), without a MemoryBuffer."""
        tensor = cls.__new__(cls)
        tensor.data_type = data_type
        tensor.shape = shape
        tensor._raw = raw
        tensor._memory_buffer = None
        return tensor

    def __repr__(self) -> str:
        return f"Tensor(data_type={self.data_type!r}, shape={list(self.shape)}, memory_type=MemoryType.CPU)"

    @property
    def memory_buffer(self) -> MemoryBuffer:
        if self._memory_buffer is None:
            array = np.frombuffer(self._raw, dtype=np.uint8) if not isinstance(self._raw, np.ndarray) else self._raw
            self._memory_buffer = MemoryBuffer(array.ctypes.data, MemoryType.CPU, 0, array.nbytes, array)
        return self._memory_buffer

    @property
    def data_ptr(self) -> int:
        return self.memory_buffer.data_ptr

    @property
    def memory_type(self) -> MemoryType:
        return MemoryType.CPU

    @property
    def memory_type_id(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return memoryview(self._raw).nbytes

    # --- host arrays ---------------------------------------------------------------------------

    def to_numpy(self) -> np.ndarray:
        """The tensor as a numpy array (Tessera's addition; Triton's is `numpy.from_dlpack`).
        Output tensors are read-only views of the response's bytes; BYTES gives an object array
        of `bytes`."""
        if self.data_type == DataType.BYTES:
            return deserialize_bytes(self._raw, self.shape)
        dtype = NUMPY_OF.get(self.data_type)
        if dtype is None:
            raise UnsupportedError(f"{self.data_type.name} tensors have no numpy dtype")
        if isinstance(self._raw, np.ndarray) and self._raw.dtype == dtype:
            return self._raw.reshape(tuple(self.shape))
        return np.frombuffer(self._raw, dtype=dtype).reshape(tuple(self.shape))

    def to_bytes_array(self) -> np.ndarray:
        if self.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Tensor has data type {self.data_type.name} not BYTES")
        return deserialize_bytes(self._raw, self.shape)

    def to_string_array(self) -> np.ndarray:
        """The elements decoded as UTF-8 (Triton's `astype(str)` fails on anything not ASCII)."""
        elements = self.to_bytes_array()
        return np.array([e.decode("utf-8") for e in elements.reshape(-1)], dtype=str).reshape(elements.shape)

    def to_host(self) -> "Tensor":
        return self

    def to_device(self, device: Any) -> "Tensor":
        if isinstance(device, str) and device.lower() in ("cpu", "cpu_pinned"):
            return self
        if device in (MemoryType.CPU, MemoryType.CPU_PINNED) or (
            isinstance(device, tuple) and device and device[0] in (MemoryType.CPU, MemoryType.CPU_PINNED)
        ):
            return self
        raise UnsupportedError(f"Conversion from CPU to {device} not supported: Tessera's in-process API is host-only")

    # --- DLPack ----------------------------------------------------------------------------------

    def __dlpack__(self, *, stream: Optional[int] = None, **kwargs: Any) -> Any:
        if stream not in (None, 0):
            raise UnsupportedError(f"DLPack stream {stream} is not supported for CPU tensors")
        if self.data_type == DataType.BYTES:
            raise InvalidArgumentError("DLPack does not support BYTES tensors")
        array = self.to_numpy()
        try:
            return array.__dlpack__(stream=None, **kwargs)
        except BufferError:
            # A consumer of DLPack before 1.0 cannot be told the bytes are read-only: it gets a copy.
            return array.copy().__dlpack__(stream=None, **kwargs)

    def __dlpack_device__(self) -> tuple:
        return (DLDeviceType.kDLCPU, 0)

    @staticmethod
    def from_dlpack(obj: Any) -> "Tensor":
        array = _host_array_from_dlpack(obj)
        return Tensor._from_numpy(array)

    @staticmethod
    def from_bytes_array(array: Any) -> "Tensor":
        tensor = Tensor._from_object(array)
        if tensor.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Expected BYTES data, got {tensor.data_type.name}")
        return tensor

    from_string_array = from_bytes_array

    @staticmethod
    def _from_numpy(array: Any) -> "Tensor":
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        data_type = TRITON_OF.get(array.dtype.type)
        if data_type is None:
            raise InvalidArgumentError(f"Unsupported numpy dtype {array.dtype}")
        if data_type == DataType.BYTES:
            return Tensor._of(DataType.BYTES, tuple(array.shape), serialize_bytes(array))
        return Tensor._of(data_type, tuple(array.shape), np.ascontiguousarray(array))

    @staticmethod
    def _from_object(obj: Any) -> "Tensor":
        if isinstance(obj, Tensor):
            return obj
        if type(obj) in (np.ndarray,) or isinstance(obj, np.generic):
            return Tensor._from_numpy(obj)
        if type(obj) is list:
            try:
                array = np.array(obj)
            except Exception as e:  # noqa: BLE001 - numpy's error, given back as Triton's
                raise InvalidArgumentError(f"Input type list not supported: {e}") from None
            return Tensor._from_numpy(array)
        if hasattr(obj, "__dlpack__"):
            return Tensor.from_dlpack(obj)
        raise InvalidArgumentError(f"Input type {type(obj)} not supported. Must be one of numpy.ndarray, list, Tensor")
