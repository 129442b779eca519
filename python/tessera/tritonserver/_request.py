"""`InferenceRequest`, and its translation into what the native in-process door takes."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from tessera.tritonserver._enums import TRITON_OF, MemoryType, RequestFlag
from tessera.tritonserver._errors import InvalidArgumentError
from tessera.tritonserver._tensor import Tensor

if TYPE_CHECKING:
    from tessera.tritonserver._model import Model

# Numeric numpy types by their protocol name (BYTES goes through Tensor's serialisation).
_NAME_OF = {t: d.name for t, d in TRITON_OF.items() if d.name != "BYTES"}
# Triton looks parameter values up by their exact type.
_PARAMETER_TYPES = (str, int, float, bool)


@dataclasses.dataclass
class InferenceRequest:
    """Triton's `InferenceRequest`. `inputs` take numpy arrays, lists (through `numpy.array`),
    `Tensor`s and host DLPack objects."""

    model: "Model"
    request_id: Optional[str] = None
    flags: int = 0
    correlation_id: Optional[Union[int, str]] = None
    priority: int = 0
    timeout: int = 0
    inputs: dict = dataclasses.field(default_factory=dict)
    parameters: dict = dataclasses.field(default_factory=dict)
    output_memory_type: Optional[Any] = None
    response_queue: Optional[Any] = None


class _NativeRequest:
    """The fields `tessera._tessera.Door.infer` reads."""

    __slots__ = ("model", "version", "id", "inputs", "outputs", "parameters")

    def __init__(self, model, version, id, inputs, parameters):
        self.model = model
        self.version = version
        self.id = id
        self.inputs = inputs
        self.outputs = []
        self.parameters = parameters


def _check_memory_type(memory_type: Any) -> None:
    if memory_type is None:
        return
    if isinstance(memory_type, str) and memory_type.lower() in ("cpu", "cpu_pinned"):
        return
    if memory_type in (MemoryType.CPU, MemoryType.CPU_PINNED):
        return
    if isinstance(memory_type, tuple) and memory_type and memory_type[0] in (MemoryType.CPU, MemoryType.CPU_PINNED):
        return
    raise InvalidArgumentError(
        f"Memory type {memory_type} not supported: Tessera's in-process API returns outputs in host memory"
    )


def to_native(request: InferenceRequest) -> _NativeRequest:
    """Converts inputs and parameters (raising Triton's errors for what cannot be)."""
    if request.response_queue is not None and not hasattr(request.response_queue, "put_nowait"):
        raise InvalidArgumentError("response_queue must be a queue.SimpleQueue or an asyncio.Queue")
    _check_memory_type(request.output_memory_type)
    inputs = []
    for name, value in request.inputs.items():
        if type(value) is np.ndarray and value.flags.c_contiguous:
            # The common case, without a Tensor in between.
            datatype = _NAME_OF.get(value.dtype.type)
            if datatype is not None:
                inputs.append((name, datatype, value.shape, value))
                continue
        tensor = value if isinstance(value, Tensor) else Tensor._from_object(value)
        raw = tensor._raw
        if isinstance(raw, np.ndarray) and not raw.flags.c_contiguous:
            raw = np.ascontiguousarray(raw)
        inputs.append((name, tensor.data_type.name, [int(d) for d in tensor.shape], raw))
    parameters = {}
    for key, value in request.parameters.items():
        if type(value) not in _PARAMETER_TYPES:
            raise InvalidArgumentError(f"Unsupported Value. Can't convert {type(value)} to Request Parameter")
        parameters[key] = value
    if request.correlation_id is not None:
        parameters["sequence_id"] = request.correlation_id
    if request.flags:
        parameters["sequence_start"] = bool(request.flags & RequestFlag.SEQUENCE_START)
        parameters["sequence_end"] = bool(request.flags & RequestFlag.SEQUENCE_END)
    if request.priority:
        parameters["priority"] = int(request.priority)
    if request.timeout:
        parameters["timeout"] = int(request.timeout)
    version = request.model.version
    return _NativeRequest(
        request.model.name, None if version is None or version < 0 else int(version), request.request_id, inputs,
        parameters,
    )
