"""InferenceRequest / InferenceResponse / response sender / Logger, as in triton_python_backend_utils."""

import json
import sys

from . import _host, _pack
from ._errors import TritonError, TritonModelException
from ._tensor import Tensor, assembled

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class _Model:
    """What the glue learned at initialize(): the served model's name and version."""
    name = ""
    version = ""
    call = 0  # the number of the current execute-by-value call (request.at's positions are its)


def _as_triton_error(err):
    if err is None or isinstance(err, TritonError):
        return err
    if isinstance(err, TritonModelException):
        return TritonError(err.message(), err.code())
    if isinstance(err, BaseException):
        return TritonError("%s: %s" % (type(err).__name__, err))
    return TritonError(str(err))


def _error_from_wit(wit_err):
    return TritonError(wit_err.message, _host.error_code(wit_err))


class InferenceResponse:
    """InferenceResponse(output_tensors=[...], error=None, parameters=None)."""

    __slots__ = ("_outputs", "_error", "_parameters")

    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._outputs = outputs = list(output_tensors) if output_tensors else []
        for t in outputs:
            if t.__class__ is not Tensor and not isinstance(t, Tensor):
                raise TypeError("InferenceResponse output_tensors must be pb_utils.Tensor objects, "
                                "got %s" % type(t).__name__)
        # the common case (no error, no parameters) makes no call: each costs a Python guest
        # a fraction of a microsecond
        self._error = None if error is None else _as_triton_error(error)
        if parameters is None:
            self._parameters = {}
            return
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        self._parameters = _response_parameters(parameters)

    def output_tensors(self):
        return list(self._outputs)

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        """The response parameters as a JSON object string (Triton's format)."""
        return json.dumps(self._parameters)


def _response_parameters(parameters):
    """Triton's check of InferenceResponse(parameters=...) (pb_stub.cc PyParametersToJSON): a dict
    of str keys and bool, int or str values (int64), as a new dict."""
    if not parameters:
        return {}
    if not isinstance(parameters, dict):
        raise TritonModelException("Expect parameters to be a dict, found type %s" % type(parameters))
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException("Expect parameters keys to have type str, found type %s" % type(key))
        # bool first: it is an int subclass
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                "Expect parameters values to have type bool/int/str, found type %s" % type(value))
        if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < (1 << 63):
            raise TritonModelException("parameter %r: the int value is outside int64's range" % key)
    return dict(parameters)


class InferenceResponseSender:
    """A request's response sender (decoupled models): send(response=None, flags=0).

    A thread the model starts to send responses runs when execute() returns (before the host
    gets the call back), or when joined: see tessera_guest._threads.
    """

    __slots__ = ("_request", "_sender", "_closed")

    def __init__(self, host_request):
        self._request = host_request
        self._sender = None
        self._closed = False

    def send(self, response=None, flags=0):
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("send() needs a response or the FINAL flag")
        if self._sender is None:
            self._sender = self._request.sender()
        try:
            if response is None:
                self._sender.send([], True)
            elif response.has_error():
                e = response.error()
                self._sender.send_error(_host.wit_error(e.code(), e.message()), final)
            elif response._parameters:
                params = _host.parameters_to_wit(response._parameters)
                self._sender.send_with_parameters([t._lower_owned() for t in response._outputs], params, final)
            else:
                self._sender.send([t._lower_owned() for t in response._outputs], final)
        except _host.Err as e:
            raise TritonModelException(e.value.message, _host.error_code(e.value)) from None
        if final:
            self._closed = True

    def is_cancelled(self):
        """Whether the request's caller has gone (a cancelled stream): its sends then fail."""
        if self._sender is None:
            self._sender = self._request.sender()
        return bool(self._sender.is_cancelled())


# Triton's name for the class
ResponseSender = InferenceResponseSender


class _ResponseIterator:
    """What exec(decoupled=True) / stream_exec() return: the responses of a decoupled model."""

    def __init__(self, stream=None, error=None):
        self._stream = stream
        self._error = error

    def __iter__(self):
        return self

    def __next__(self):
        if self._error is not None:
            err, self._error = self._error, None
            return InferenceResponse(error=err)
        if self._stream is None:
            raise StopIteration
        item = self._stream.next()
        if item is None:
            self.cancel()
            raise StopIteration
        if isinstance(item, _host.Err):
            return InferenceResponse(error=_error_from_wit(item.value))
        return InferenceResponse(output_tensors=[Tensor._from_handle(h) for h in item.value])

    def cancel(self):
        """Stops listening: drops the host stream (the host may cancel the callee)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.__exit__(None, None, None)
            except Exception:
                pass


class InferenceRequest:
    """A request: either one handed to execute(), or a BLS request built by the model.

    BLS: InferenceRequest(model_name="m", requested_output_names=["OUT"], inputs=[tensors],
    model_version=-1, parameters={...}).exec() -> InferenceResponse (errors in .error());
    .exec(decoupled=True) or .stream_exec() -> iterator of InferenceResponse.
    """

    # What a request handed to execute() starts with (`_from_host` sets only what differs):
    # class attributes, so that making one costs a Python guest two attribute stores, not twelve.
    # All immutable; `__init__` sets every one on the instance.
    _host_request = None  # its handle, once it has one
    _position = None  # an execute-by-value request's position in its batch (request.at)
    _call = 0  # ... and the number of that call (_Model.call)
    _served = False  # handed to execute() (not a BLS request the model built)
    _model_name = None  # for one handed to execute(): the served model's (model_name())
    _model_version = -1
    _inputs = None  # the inputs once all are known (a list of Tensor)
    _requested = None
    _flags = 0
    _correlation_id = 0
    _parameters = None
    _timeout = 0
    _request_id = None
    _by_name = None  # inputs by name, as far as known
    _sender = None

    def __init__(self, model_name=None, requested_output_names=None, inputs=None,
                 model_version=-1, flags=0, correlation_id=0, parameters=None, timeout=0,
                 request_id="", preferred_memory=None, trace=None):
        self._host_request = None
        if isinstance(model_name, (bytes, bytearray)):  # e.g. a BYTES input's element, as_numpy()[0]
            model_name = bytes(model_name).decode("utf-8")
        self._model_name = model_name
        self._model_version = int(model_version) if model_version is not None else -1
        self._inputs = list(inputs) if inputs else []
        for t in self._inputs:
            if not isinstance(t, Tensor):
                raise TypeError("InferenceRequest inputs must be pb_utils.Tensor objects, got %s"
                                % type(t).__name__)
        self._requested = list(requested_output_names) if requested_output_names else []
        self._flags = int(flags)
        self._correlation_id = correlation_id
        if isinstance(parameters, str):
            parameters = json.loads(parameters) if parameters else {}
        self._parameters = dict(parameters) if parameters else {}
        self._timeout = timeout
        self._request_id = request_id
        self._by_name = None
        self._sender = None

    @classmethod
    def _from_host(cls, host_request):
        r = cls.__new__(cls)
        r._host_request = host_request
        r._served = True
        return r

    @classmethod
    def _from_pack(cls, position, pack):
        """The request at `position` of an execute-by-value call, its inputs from its tensor
        pack: no handle until one is needed (`_handle`)."""
        r = cls.__new__(cls)
        r._position = position
        r._call = _Model.call
        r._served = True
        # `_prefetch`'s loop over the pack's entries in place: making its (name, datatype, shape,
        # data) tuples first cost 0.24 µs more per request under native CPython (~0.7 in a guest)
        by_name = {}
        ordered = []
        complete = True
        for name, datatype, shape, start, end in _pack.entries(pack):
            if start is None:  # came without its bytes: fetched as a handle when asked for
                complete = False
                continue
            t = assembled(Tensor, name, datatype, list(shape), pack[start:end])
            if name not in by_name:  # the first of a name, as request.input finds it
                by_name[name] = t
            ordered.append(t)
        r._by_name = by_name
        if complete:  # every input is known: a missing name needs no host call either
            r._inputs = ordered
        return r

    def _handle(self):
        """The host's handle of a request handed to execute(), taken when first needed."""
        h = self._host_request
        if h is None and self._position is not None:
            # a position is only the current call's: a request kept from an earlier call would
            # get another request's handle
            h = None if self._call != _Model.call else _host.request_at(self._position)
            if h is None:
                raise TritonModelException(
                    "this request's execute() call has returned: the host no longer has it")
            self._host_request = h
        return h

    def _prefetch(self, inputs):
        """Takes this request's inputs as the host passed them (`execute-by-value`'s
        `input-tuple`s, or `request.read-inputs`' records made tuples by app.execute): each one
        with its bytes becomes a tensor at once; one above the size limit (no bytes) stays to be
        fetched as a handle when asked for."""
        by_name = {}
        ordered = []
        complete = True
        for name, datatype, shape, data in inputs:
            if data is None:
                complete = False
                continue
            t = assembled(Tensor, name, datatype._name_, shape, data)
            if name not in by_name:  # the first of a name, as request.input finds it
                by_name[name] = t
            ordered.append(t)
        self._by_name = by_name
        if complete:  # every input is known: a missing name needs no host call either
            self._inputs = ordered

    # -- accessors (Triton's names) ------------------------------------------------------------
    def inputs(self):
        if self._inputs is None:
            self._inputs = [Tensor._from_handle(h) for h in self._handle().inputs()]
        return list(self._inputs)

    def _input(self, name):
        """The named input or None; one host call, cached (get_input_tensor_by_name uses it)."""
        if self._by_name is None:
            self._by_name = {}
        elif name in self._by_name:
            return self._by_name[name]
        if not self._served or self._inputs is not None:
            t = next((t for t in self.inputs() if t.name() == name), None)
        else:
            h = self._handle().input(name)
            t = None if h is None else Tensor._from_handle(h, name)
        self._by_name[name] = t
        return t

    def requested_output_names(self):
        if self._requested is None:
            self._requested = list(self._handle().requested_outputs())
        return list(self._requested)

    def request_id(self):
        if self._request_id is None:
            self._request_id = self._handle().id()
        return self._request_id

    def correlation_id(self):
        if self._served:
            self._parameter_dict()  # a sequence's ID comes with the request's parameters
        return self._correlation_id

    def flags(self):
        if self._served:
            self._parameter_dict()  # so do its start and end flags
        return self._flags

    def model_name(self):
        return _Model.name if self._served else self._model_name

    def model_version(self):
        return _Model.version if self._served else self._model_version

    def set_flags(self, flags):
        """A BLS request's flags (Triton's set_flags: e.g. TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)."""
        self._flags = int(flags)

    def timeout(self):
        if self._served:
            self._parameter_dict()  # the client's timeout (µs) comes with the request's parameters
        return self._timeout

    def _parameter_dict(self):
        if self._parameters is None:
            params = _host.parameters_from_wit(self._handle().parameters())
            # The host passes a sequence's fields as parameters; Triton gives them as the
            # request's flags() and correlation_id(), and not among its parameters().
            if "sequence_id" in params or "sequence_start" in params or "sequence_end" in params:
                self._correlation_id = params.pop("sequence_id", 0)
                self._flags = ((TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if params.pop("sequence_start", False) else 0)
                               | (TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if params.pop("sequence_end", False) else 0))
            # Triton consumes `priority` and `timeout` too: the latter is timeout(), in µs
            params.pop("priority", None)
            timeout = params.pop("timeout", 0)
            if isinstance(timeout, int) and not isinstance(timeout, bool):
                self._timeout = timeout
            self._parameters = params
        return self._parameters

    def parameters(self):
        """The request parameters as a JSON object string (Triton's format)."""
        return json.dumps(self._parameter_dict())

    def get_response_sender(self):
        if not self._served:
            raise TritonModelException("a BLS request has no response sender")
        if self._sender is None:
            self._sender = InferenceResponseSender(self._handle())
        return self._sender

    def is_cancelled(self):
        """Whether the caller has gone: seen for a decoupled model's requests (their responses
        have somewhere to go), False for the others and for BLS requests."""
        if not self._served:
            return False
        return bool(self._handle().is_cancelled())

    def set_release_flags(self, flags):
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException("request rescheduling is not supported by Tessera guests")

    # -- BLS -----------------------------------------------------------------------------------
    def _bls_args(self):
        _host.require()
        name, version = self.model_name(), self.model_version()
        if not name:
            raise TritonModelException("InferenceRequest needs a model_name")
        version = None if version is None or version == "" or int(version) < 0 else int(version)
        inputs = [t._lower_borrowed() for t in self.inputs()]
        params = self._parameter_dict()
        if self._correlation_id or self._flags:  # a request of a sequence: the host reads these
            params = dict(params)
            if self._correlation_id:
                params["sequence_id"] = self._correlation_id
            if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                params["sequence_start"] = True
            if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                params["sequence_end"] = True
        params = _host.parameters_to_wit(params)
        return (name, version, inputs, self.requested_output_names(), params)

    def exec(self, decoupled=False):
        """Runs the request on a served model in-process. Returns an InferenceResponse whose
        has_error()/error() report a failure (as Triton's BLS does); with decoupled=True, an
        iterator of InferenceResponse (see stream_exec)."""
        if decoupled:
            return self.stream_exec()
        try:
            outputs = _host.wit_host.infer(*self._bls_args())
        except _host.Err as e:
            return InferenceResponse(error=_error_from_wit(e.value))
        except TritonModelException as e:
            return InferenceResponse(error=TritonError(e.message(), e.code()))
        return InferenceResponse(output_tensors=[Tensor._from_handle(h) for h in outputs])

    def stream_exec(self):
        """BLS to a decoupled model: an iterator over every response it sends, in order (an
        error comes as a response whose has_error() is true)."""
        try:
            stream = _host.wit_host.infer_stream(*self._bls_args())
        except _host.Err as e:
            return _ResponseIterator(error=_error_from_wit(e.value))
        except TritonModelException as e:
            return _ResponseIterator(error=TritonError(e.message(), e.code()))
        return _ResponseIterator(stream)

    def async_exec(self, decoupled=False):
        """Awaitable exec(), as in Triton: `await asyncio.gather(*[r.async_exec() for r in ...])`
        inside `async def execute` runs the calls concurrently on the host. The call starts here,
        not when awaited (beyond 64 calls in flight, as soon as an earlier one finishes). Errors
        come back as an InferenceResponse with has_error(), as from exec(). decoupled=True
        returns (awaitably) the response iterator of stream_exec()."""
        if decoupled:
            return _ready(self.stream_exec())
        loop = _running_host_loop()
        if loop is None:
            # Not under the guest's event loop (e.g. a coroutine driven by hand): run now.
            return _ready(self.exec())
        try:
            args = self._bls_args()
        except TritonModelException as e:
            return _ready(InferenceResponse(error=TritonError(e.message(), e.code())))
        return loop.start_call(lambda: _host.wit_host.infer_async(*args), _response_of)


def _response_of(result):
    """An InferenceResponse from a finished infer-async call (its outputs, or the host's error)."""
    if isinstance(result, _host.Err):
        return InferenceResponse(error=_error_from_wit(result.value))
    return InferenceResponse(output_tensors=[Tensor._from_handle(h) for h in result])


class _ready:
    """An awaitable that is already done (async_exec without a host call in flight)."""

    __slots__ = ("_value",)

    def __init__(self, value):
        self._value = value

    def __await__(self):
        return self._value
        yield  # noqa: unreachable: makes this a generator


def _running_host_loop():
    """The guest's event loop when `async def execute` is running on it, else None."""
    import asyncio  # already loaded by the glue (app.py), at build time

    from . import _aio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop if isinstance(loop, _aio.HostLoop) else None


class LogLevel:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_WIT_LEVEL_NAMES = {LogLevel.INFO: "INFO", LogLevel.WARNING: "WARN", LogLevel.ERROR: "ERROR",
                    LogLevel.VERBOSE: "VERBOSE"}


def _log(message, level):
    message = str(message)
    if _host.AVAILABLE:
        try:
            _host.wit_host.log(_host.wit_host.LogLevel[_WIT_LEVEL_NAMES.get(level, "INFO")],
                               message)
            return
        except Exception:
            pass  # no host yet (build-time pre-initialization): fall through
    stream = getattr(sys, "__stderr__", None) or sys.stderr
    try:
        stream.write("[%s] %s\n" % (_WIT_LEVEL_NAMES.get(level, "INFO"), message))
    except Exception:
        pass


class Logger:
    """pb_utils.Logger: the host's log, tagged by Tessera with the model."""

    @staticmethod
    def log(message, level=LogLevel.INFO):
        _log(message, level)

    @staticmethod
    def log_info(message):
        _log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        _log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        _log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        _log(message, LogLevel.VERBOSE)


# -- module-level helpers of triton_python_backend_utils -------------------------------------

def get_input_tensor_by_name(inference_request, name):
    """The request's input Tensor called `name`, or None."""
    getter = getattr(inference_request, "_input", None)
    if getter is not None:
        return getter(name)
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name):
    """The response's output Tensor called `name`, or None."""
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config, name):
    for props in model_config.get("input", []):
        if props.get("name") == name:
            return props
    return None


def get_output_config_by_name(model_config, name):
    for props in model_config.get("output", []):
        if props.get("name") == name:
            return props
    return None


def using_decoupled_model_transaction_policy(model_config):
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
