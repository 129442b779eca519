"""Triton's in-process Python API (`import tritonserver`) on Tessera: change the import to
`import tessera.tritonserver as tritonserver` and the same code runs a Tessera server inside this
process. docs/tritonserver.md says what is supported and what is refused.
"""

from tessera.tritonserver._enums import DataType as DataType
from tessera.tritonserver._enums import DLDeviceType as DLDeviceType
from tessera.tritonserver._enums import InstanceGroupKind as InstanceGroupKind
from tessera.tritonserver._enums import LogFormat as LogFormat
from tessera.tritonserver._enums import LogLevel as LogLevel
from tessera.tritonserver._enums import MemoryType as MemoryType
from tessera.tritonserver._enums import MetricFormat as MetricFormat
from tessera.tritonserver._enums import MetricKind as MetricKind
from tessera.tritonserver._enums import ModelBatchFlag as ModelBatchFlag
from tessera.tritonserver._enums import ModelControlMode as ModelControlMode
from tessera.tritonserver._enums import ModelTxnPropertyFlag as ModelTxnPropertyFlag
from tessera.tritonserver._enums import RateLimitMode as RateLimitMode
from tessera.tritonserver._enums import RequestFlag as RequestFlag
from tessera.tritonserver._errors import AlreadyExistsError as AlreadyExistsError
from tessera.tritonserver._errors import InternalError as InternalError
from tessera.tritonserver._errors import InvalidArgumentError as InvalidArgumentError
from tessera.tritonserver._errors import NotFoundError as NotFoundError
from tessera.tritonserver._errors import TritonError as TritonError
from tessera.tritonserver._errors import UnavailableError as UnavailableError
from tessera.tritonserver._errors import UnknownError as UnknownError
from tessera.tritonserver._errors import UnsupportedError as UnsupportedError
from tessera.tritonserver._model import Model as Model
from tessera.tritonserver._request import InferenceRequest as InferenceRequest
from tessera.tritonserver._response import AsyncResponseIterator as AsyncResponseIterator
from tessera.tritonserver._response import InferenceResponse as InferenceResponse
from tessera.tritonserver._response import ResponseIterator as ResponseIterator
from tessera.tritonserver._server import Metric as Metric
from tessera.tritonserver._server import MetricFamily as MetricFamily
from tessera.tritonserver._server import ModelLoadDeviceLimit as ModelLoadDeviceLimit
from tessera.tritonserver._server import Options as Options
from tessera.tritonserver._server import RateLimiterResource as RateLimiterResource
from tessera.tritonserver._server import Server as Server
from tessera.tritonserver._tensor import MemoryBuffer as MemoryBuffer
from tessera.tritonserver._tensor import Tensor as Tensor

__all__: list = []
from tessera.tritonserver import _api as _api
