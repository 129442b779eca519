"""`InferenceResponse` and the response iterators `Model.infer` / `Model.async_infer` return.

Synchronous: the request runs when `infer()` is called, on the caller's thread where the model
allows (the GIL released meanwhile); a decoupled model's later responses are read one `next()` at
a time, blocking without the GIL. Asynchronous: the server delivers each response to the
iterator from its own threads (`loop.call_soon_threadsafe`): no thread per request, nothing
polled. After the last response, iteration stops; a decoupled stream that ends without a final
response yields one with no outputs and `final=True`, as Triton's final flag does. A stream the
server's `stop()` cuts short (its exit timeout passed) ends with an `UnavailableError` response
(`final=True`), raised when `raise_on_error`, so a reader can tell it from a complete stream.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import queue
import threading
from typing import TYPE_CHECKING, Any, Optional

from tessera.tritonserver._enums import DataType
from tessera.tritonserver._errors import TritonError, UnknownError, from_native
from tessera.tritonserver._tensor import Tensor

if TYPE_CHECKING:
    from tessera.tritonserver._model import Model


@dataclasses.dataclass
class InferenceResponse:
    model: "Model"
    request_id: Optional[str] = None
    parameters: dict = dataclasses.field(default_factory=dict)
    outputs: dict = dataclasses.field(default_factory=dict)
    error: Optional[TritonError] = None
    classification_label: Optional[str] = None
    final: bool = False


_TYPE_OF = {t.name: t for t in DataType}


def response_of(model: "Model", item: Any, request_id: Optional[str], last: bool = True) -> InferenceResponse:
    """An `InferenceResponse` from the native door's tuple, or from its error (`last`: no other
    response follows it)."""
    if isinstance(item, BaseException):
        error = from_native(item)
        return InferenceResponse(model=model, request_id=request_id or "", error=error, final=last)
    name, version, response_id, outputs, parameters, final = item
    tensors = {out_name: Tensor._of(_TYPE_OF[datatype], shape, raw) for out_name, datatype, shape, raw in outputs}
    if version != model.version or name != model.name:
        model = model._at(name, version)
    return InferenceResponse(
        model=model,
        request_id=response_id if response_id is not None else request_id or "",
        parameters=parameters,
        outputs=tensors,
        final=final,
    )


def _end(model: "Model", request_id: Optional[str]) -> InferenceResponse:
    return InferenceResponse(model=model, request_id=request_id or "", final=True)


def _cancelled(model: "Model", request_id: Optional[str]) -> InferenceResponse:
    return InferenceResponse(model=model, request_id=request_id or "", error=UnknownError("Request was cancelled"),
                             final=True)


class ResponseIterator:
    """The responses of one request (`Model.infer`)."""

    def __init__(self, model: "Model", request_id: Optional[str], first: Any, rest: Any, raise_on_error: bool):
        self._model = model
        self._request_id = request_id
        self._first = first
        self._rest = rest
        self._raise = raise_on_error
        self._complete = False
        self._cancelled = False

    def _read(self) -> InferenceResponse:
        if self._cancelled:
            return _cancelled(self._model, self._request_id)
        item, self._first = self._first, None
        if item is None and self._rest is not None:
            item = self._rest.next()
        if item is None:
            return _end(self._model, self._request_id)
        # A model that answers once: its one answer is the last. A stream: its end says so, or
        # the stream itself (an error the server's stop cut it short with is its last answer).
        last = self._rest is None or self._rest.ended()
        return response_of(self._model, item, self._request_id, last=last)

    def __iter__(self) -> "ResponseIterator":
        return self

    def __next__(self) -> InferenceResponse:
        if self._complete:
            raise StopIteration
        response = self._read()
        self._complete = response.final
        if response.final:
            self._rest = None
        if response.error is not None and self._raise:
            raise response.error
        return response

    def cancel(self) -> None:
        """Cancels the request: a decoupled model sees it cancelled; iteration ends."""
        rest, self._rest = self._rest, None
        if rest is not None:
            rest.cancel()
        if not self._complete:
            self._first = None
            self._cancelled = True


class _Delivered:
    """Responses the server delivers from its threads (`Door.infer_async`), in order, each once;
    nothing after the final one."""

    def __init__(self, model: "Model", request_id: Optional[str]):
        self._model = model
        self._request_id = request_id
        self._ended = False
        self._lock = threading.Lock()
        self._cancel = None

    def _response(self, item: Any, last: bool) -> Optional[InferenceResponse]:
        with self._lock:
            if self._ended:
                return None
            response = _end(self._model, self._request_id) if item is None else response_of(
                self._model, item, self._request_id, last)
            self._ended = response.final
            return response

    def _end_now(self, error: BaseException) -> None:
        """Ends the request from this side: `cancel()`, or the server's stop."""
        if self._cancel is not None:
            self._cancel.cancel()
        self._deliver(error, True)


class QueuedResponseIterator(_Delivered, ResponseIterator):
    """`Model.infer(..., response_queue=q)`: the server puts each response into `q` as it comes
    (whether or not anyone iterates, as in Triton) and into this iterator's own queue."""

    def __init__(self, model: "Model", request_id: Optional[str], raise_on_error: bool, response_queue: Any):
        ResponseIterator.__init__(self, model, request_id, None, None, raise_on_error)
        _Delivered.__init__(self, model, request_id)
        self._responses: queue.SimpleQueue = queue.SimpleQueue()
        self._user_queue = response_queue

    def _deliver(self, item: Any, last: bool) -> None:
        response = self._response(item, last)
        if response is not None:
            self._responses.put(response)
            self._user_queue.put_nowait(response)

    def _read(self) -> InferenceResponse:
        return self._responses.get()

    def cancel(self) -> None:
        self._end_now(UnknownError("Request was cancelled"))


class AsyncResponseIterator(_Delivered):
    """The responses of one request (`Model.async_infer`), for `async for`."""

    def __init__(self, model: "Model", request_id: Optional[str], raise_on_error: bool,
                 response_queue: Any = None):
        super().__init__(model, request_id)
        self._raise = raise_on_error
        self._complete = False
        self._items: collections.deque = collections.deque()
        self._waiter: Optional[asyncio.Future] = None
        self._queue = response_queue
        self._queue_loop = asyncio.get_running_loop() if response_queue is not None else None

    def _deliver(self, item: Any, last: bool) -> None:
        """Called by the server (any thread, with the GIL) for each answer."""
        response = self._response(item, last)
        if response is None:
            return
        if self._queue is not None:
            # On the queue's loop, the queue first: a response the iterator yields is already in
            # the caller's queue, so a caller that drains the queue after iterating sees them all.
            self._queue_loop.call_soon_threadsafe(self._publish, response)
        else:
            self._publish(response)

    def _publish(self, response: InferenceResponse) -> None:
        if self._queue is not None:
            self._queue.put_nowait(response)
        with self._lock:
            self._items.append(response)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    def __aiter__(self) -> "AsyncResponseIterator":
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._complete:
            raise StopAsyncIteration
        while True:
            with self._lock:
                if self._items:
                    response = self._items.popleft()
                    break
                waiter = asyncio.get_running_loop().create_future()
                self._waiter = waiter
            await waiter
        self._complete = response.final
        if response.error is not None and self._raise:
            raise response.error
        return response

    def cancel(self) -> None:
        self._end_now(UnknownError("Request was cancelled"))


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
