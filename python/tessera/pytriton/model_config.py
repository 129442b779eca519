"""PyTriton's model configuration classes, turned into Triton's ModelConfig (JSON) for Tessera."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, Optional, Sequence, Tuple, Type, Union

import numpy as np

from tessera._wire import NUMPY_OF_PROTOCOL
from tessera.pytriton.exceptions import PyTritonModelConfigError


class DeviceKind(enum.Enum):
    KIND_AUTO = "KIND_AUTO"
    KIND_CPU = "KIND_CPU"
    KIND_GPU = "KIND_GPU"


class TimeoutAction(enum.Enum):
    REJECT = "REJECT"
    DELAY = "DELAY"


@dataclasses.dataclass
class QueuePolicy:
    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    def to_json(self) -> dict:
        return {
            "timeout_action": self.timeout_action.value,
            "default_timeout_microseconds": str(self.default_timeout_microseconds),
            "allow_timeout_override": self.allow_timeout_override,
            "max_queue_size": self.max_queue_size,
        }


@dataclasses.dataclass
class DynamicBatcher:
    max_queue_delay_microseconds: int = 0
    preferred_batch_size: Optional[list] = None
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: Optional[QueuePolicy] = None
    priority_queue_policy: Optional[Dict[int, QueuePolicy]] = None

    def to_json(self) -> dict:
        out: dict = {
            "max_queue_delay_microseconds": str(self.max_queue_delay_microseconds),
            "preserve_ordering": self.preserve_ordering,
            "priority_levels": str(self.priority_levels),
            "default_priority_level": str(self.default_priority_level),
        }
        if self.preferred_batch_size:
            out["preferred_batch_size"] = list(self.preferred_batch_size)
        if self.default_queue_policy is not None:
            out["default_queue_policy"] = self.default_queue_policy.to_json()
        if self.priority_queue_policy:
            out["priority_queue_policy"] = {str(k): v.to_json() for k, v in self.priority_queue_policy.items()}
        return out


@dataclasses.dataclass
class ModelConfig:
    batching: bool = True
    max_batch_size: int = 4
    batcher: DynamicBatcher = dataclasses.field(default_factory=DynamicBatcher)
    response_cache: bool = False
    decoupled: bool = False


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A model input or output: `shape` without the batch dimension when the model batches
    (-1 for a variable dimension); `dtype` a numpy type, or `bytes` / `np.bytes_` / `object` for
    strings."""

    shape: tuple
    dtype: Union[np.dtype, Type[np.dtype], Type[object]]
    name: Optional[str] = None
    optional: Optional[bool] = False


# numpy dtype -> (config data_type, protocol datatype). NUMPY_OF_PROTOCOL is re-exported here.
_TRITON_TYPES = {dtype: (f"TYPE_{proto}", proto) for proto, dtype in NUMPY_OF_PROTOCOL.items()}


def is_bytes_dtype(dtype: Any) -> bool:
    return dtype in (bytes, object, np.bytes_, np.object_, str) or (
        isinstance(dtype, np.dtype) and dtype.kind in ("O", "S", "U"))


def triton_types(dtype: Any) -> Tuple[str, str]:
    """(config data_type, protocol datatype) of a numpy dtype."""
    if is_bytes_dtype(dtype):
        return "TYPE_STRING", "BYTES"
    try:
        return _TRITON_TYPES[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise PyTritonModelConfigError(f"dtype {dtype!r} has no Triton datatype") from None


def to_triton_config(name: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor], config: ModelConfig,
                     instances: int) -> dict:
    """Triton's ModelConfig (JSON form) for a bound callable."""
    if not inputs or not outputs:
        raise PyTritonModelConfigError(f"model {name}: inputs and outputs must both be given")
    if config.batching and config.max_batch_size < 1:
        raise PyTritonModelConfigError(f"model {name}: max_batch_size must be >= 1 when batching is on")

    def tensor(t: Tensor, is_input: bool) -> dict:
        shape = list(t.shape)
        if any((not isinstance(d, (int, np.integer))) or d == 0 or d < -1 for d in shape):
            raise PyTritonModelConfigError(f"tensor {t.name}: invalid shape {t.shape}")
        out = {"name": t.name, "data_type": triton_types(t.dtype)[0], "dims": [int(d) for d in shape] or [1]}
        if is_input and t.optional:
            out["optional"] = True
        return out

    result: dict = {
        "name": name,
        "backend": "callable",
        "max_batch_size": config.max_batch_size if config.batching else 0,
        "input": [tensor(t, True) for t in inputs],
        "output": [tensor(t, False) for t in outputs],
        "instance_group": [{"kind": "KIND_CPU", "count": instances}],
    }
    if config.batching:
        result["dynamic_batching"] = config.batcher.to_json()
    if config.response_cache:
        result["response_cache"] = {"enable": True}
    if config.decoupled:
        result["model_transaction_policy"] = {"decoupled": True}
    return result
