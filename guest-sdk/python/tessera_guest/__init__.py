"""Tessera's Python guest SDK: the pieces behind the `triton_python_backend_utils` shim and the
glue (`tessera_guest.app`) that componentize-py wraps into a component of world
`tessera:model/model`.

Users import `triton_python_backend_utils as pb_utils` exactly as for Triton's python backend.
"""

from ._api import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    Logger,
    LogLevel,
    ResponseSender,
    get_input_config_by_name,
    get_input_tensor_by_name,
    get_output_config_by_name,
    get_output_tensor_by_name,
    using_decoupled_model_transaction_policy,
)
from ._errors import TritonError, TritonModelException
from ._telemetry import Metric, MetricFamily, MetricKind, Span
from ._tensor import Tensor

__version__ = "0.1.0"
WIT_PACKAGE = "tessera:model@0.1.0"
