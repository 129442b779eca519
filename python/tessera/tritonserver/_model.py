"""`Model`: one model (and version) of an in-process server, as Triton's module has it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from tessera._tessera import TesseraError
from tessera.tritonserver._enums import ModelBatchFlag, ModelTxnPropertyFlag
from tessera.tritonserver._errors import InvalidArgumentError, from_native, translated
from tessera.tritonserver._request import InferenceRequest, to_native
from tessera.tritonserver._response import AsyncResponseIterator, QueuedResponseIterator, ResponseIterator

if TYPE_CHECKING:
    from tessera.tritonserver._server import Server


class Model:
    def __init__(self, server: "Server", name: str, version: int = -1, state: Optional[str] = None,
                 reason: Optional[str] = None):
        if server._door is None:
            raise InvalidArgumentError("Server not started")
        self._server = server
        self.name = name
        self.version = version
        self.state = state
        self.reason = reason

    def _at(self, name: str, version: int) -> "Model":
        """This model as a response names it (its version resolved), even once the server has
        stopped: a request in flight at `stop()` still gets its response."""
        model = Model.__new__(Model)
        model.__dict__.update(self.__dict__, name=name, version=version)
        return model

    def __str__(self) -> str:
        return str({"name": self.name, "version": self.version, "state": self.state})

    __repr__ = __str__

    def _door(self):
        door = self._server._door
        if door is None:
            raise InvalidArgumentError("Server not started")
        return door

    def _version(self) -> Optional[int]:
        return None if self.version is None or self.version < 0 else int(self.version)

    # --- inference -------------------------------------------------------------------------------

    def create_request(self, **kwargs: Any) -> InferenceRequest:
        kwargs.pop("model", None)
        return InferenceRequest(model=self, **kwargs)

    def _request(self, inference_request: Optional[InferenceRequest], kwargs: dict) -> InferenceRequest:
        if inference_request is None:
            return InferenceRequest(model=self, **kwargs)
        if kwargs:
            raise InvalidArgumentError("pass either an InferenceRequest or its fields, not both")
        return inference_request

    def infer(self, inference_request: Optional[InferenceRequest] = None, raise_on_error: bool = True,
              **kwargs: Any) -> ResponseIterator:
        """Runs the request now (blocking this thread, without the GIL, until its first response)
        and returns an iterator over its responses."""
        request = self._request(inference_request, kwargs)
        native = to_native(request)
        if request.response_queue is not None:
            iterator = QueuedResponseIterator(self, request.request_id, raise_on_error, request.response_queue)
            return self._submit(native, iterator)
        try:
            first, rest = self._door().infer(native)
        except TesseraError as e:
            raise from_native(e) from None
        return ResponseIterator(self, request.request_id, first, rest, raise_on_error)

    def async_infer(self, inference_request: Optional[InferenceRequest] = None, raise_on_error: bool = True,
                    **kwargs: Any) -> AsyncResponseIterator:
        """Submits the request and returns at once; `async for` reads its responses. (A plain
        method, as in Triton: do not await it.)"""
        request = self._request(inference_request, kwargs)
        native = to_native(request)
        iterator = AsyncResponseIterator(self, request.request_id, raise_on_error, request.response_queue)
        return self._submit(native, iterator)

    def _submit(self, native: Any, iterator: Any) -> Any:
        """Starts a request whose responses the server delivers to `iterator` from its threads."""
        with translated():
            iterator._cancel = self._door().infer_async(native, iterator._deliver)
        # Ended with UnavailableError if the server stops before the request does.
        self._server._delivering.add(iterator)
        return iterator

    # --- metadata --------------------------------------------------------------------------------

    def metadata(self) -> dict:
        with translated():
            return json.loads(self._door().model_metadata(self.name, self._version()))

    def config(self, config_version: int = 1) -> dict:
        if config_version != 1:
            raise InvalidArgumentError(f"model config version {config_version} is not supported (only 1)")
        with translated():
            return json.loads(self._door().model_config(self.name, self._version()))

    def ready(self) -> bool:
        return self._door().model_ready(self.name, self._version())

    def batch_properties(self) -> ModelBatchFlag:
        return ModelBatchFlag.FIRST_DIM if self.config().get("max_batch_size", 0) > 0 else ModelBatchFlag.UNKNOWN

    def transaction_properties(self) -> ModelTxnPropertyFlag:
        with translated():
            decoupled = self._door().is_decoupled(self.name, self._version())
        return ModelTxnPropertyFlag.DECOUPLED if decoupled else ModelTxnPropertyFlag.ONE_TO_ONE

    def statistics(self) -> dict:
        with translated():
            return json.loads(self._door().statistics(self.name, self._version()))

