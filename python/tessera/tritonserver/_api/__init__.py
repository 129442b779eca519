"""Triton's module layout under `tritonserver._api` (`_api._response.InferenceResponse`, ...),
which code written for Triton names in type annotations evaluated at import (Triton's own
OpenAI frontend does): the same modules as this package's own."""

from tessera.tritonserver import _model as _model
from tessera.tritonserver import _request as _request
from tessera.tritonserver import _response as _response
from tessera.tritonserver import _server as _server
from tessera.tritonserver import _tensor as _tensor
