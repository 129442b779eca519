"""The enums of Triton's `tritonserver` module, with Triton's member names and values."""

from __future__ import annotations

import enum

import numpy as np

from tessera._wire import NUMPY_OF_PROTOCOL


class DataType(enum.IntEnum):
    INVALID = 0
    BOOL = 1
    UINT8 = 2
    UINT16 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FP16 = 10
    FP32 = 11
    FP64 = 12
    BYTES = 13
    BF16 = 14


class MemoryType(enum.IntEnum):
    CPU = 0
    CPU_PINNED = 1
    GPU = 2


class ModelControlMode(enum.IntEnum):
    NONE = 0
    POLL = 1
    EXPLICIT = 2


class RateLimitMode(enum.IntEnum):
    OFF = 0
    EXEC_COUNT = 1


class InstanceGroupKind(enum.IntEnum):
    AUTO = 0
    CPU = 1
    GPU = 2
    MODEL = 3


class LogFormat(enum.IntEnum):
    DEFAULT = 0
    ISO8601 = 1


class LogLevel(enum.IntEnum):
    INFO = 0
    WARN = 1
    ERROR = 2
    VERBOSE = 3


class MetricFormat(enum.IntEnum):
    PROMETHEUS = 0


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1


class ModelBatchFlag(enum.IntFlag):
    UNKNOWN = 1
    FIRST_DIM = 2


class ModelTxnPropertyFlag(enum.IntFlag):
    ONE_TO_ONE = 1
    DECOUPLED = 2


class RequestFlag(enum.IntFlag):
    """`InferenceRequest.flags` (Triton's `TRITONSERVER_RequestFlag`)."""

    SEQUENCE_START = 1
    SEQUENCE_END = 2


class DLDeviceType:
    """DLPack device types (plain ints, as in Triton's module)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16


NUMPY_OF = {DataType[name]: dtype for name, dtype in NUMPY_OF_PROTOCOL.items()}
TRITON_OF = {dtype.type: data_type for data_type, dtype in NUMPY_OF.items()}
TRITON_OF.update({np.bytes_: DataType.BYTES, np.str_: DataType.BYTES, np.object_: DataType.BYTES})
