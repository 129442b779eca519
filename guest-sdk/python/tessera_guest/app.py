"""The componentize-py app module: implements the exports of world `tessera:model/model` on top of
the user's `model.py` (class TritonPythonModel, as for Triton's python backend).

componentize-py looks for a class named `WitWorld` in the app module and calls its methods
`initialize(args)`, `execute(requests)` and `finalize()`. This module is imported at *build* time
(componentize-py pre-initializes the interpreter and snapshots it), so the user's module-level
code runs once at build time, not per instance; the host is not reachable then.
"""

import json
import sys
import traceback

# _aio (and asyncio) are imported here, at build time: componentize-py bundles only the modules
# imported while it pre-initializes the guest.
from . import _aio, _api, _autocomplete, _dtypes, _host, _numpy, _pack, _threads
from ._errors import TritonError, TritonModelException

_threads.install()  # threading.Thread runs cooperatively: the guest has no OS threads

if _numpy.np is not None:
    import importlib

    # numpy imports these on first use; only what is imported now, at build time, is in the
    # component, so an attribute such as np.ma or np.char used later must be loaded here
    for _name in ("numpy.ma", "numpy.char", "numpy.strings", "numpy.rec", "numpy.polynomial",
                  "numpy.linalg", "numpy.fft", "numpy.random", "numpy.exceptions", "numpy.dtypes",
                  "numpy.lib.recfunctions", "numpy.lib.stride_tricks", "numpy.lib.scimath",
                  "numpy.matlib", "numpy.typing"):
        try:
            importlib.import_module(_name)
        except ImportError:
            pass

from . import _entry  # noqa: E402

_user_model = _entry.import_model()  # the user's model file, imported as Triton imports it

try:
    from wit_world import WitWorld as _WitWorldProtocol
except ImportError:  # plain CPython
    _WitWorldProtocol = object


class _HostLogStream:
    """sys.stdout / sys.stderr replacement: complete lines go to the host log."""

    def __init__(self, level):
        self._level = level
        self._buf = ""

    def write(self, s):
        s = str(s)
        self._buf += s
        if "\n" in self._buf:
            lines = self._buf.split("\n")
            self._buf = lines.pop()
            for line in lines:
                _api._log(line, self._level)
        return len(s)

    def flush(self):
        if self._buf:
            line, self._buf = self._buf, ""
            _api._log(line, self._level)

    def isatty(self):
        return False

    def writable(self):
        return True


def _error_of(exc, prefix=""):
    """(code, message) of an exception raised by user code."""
    if isinstance(exc, (TritonError, TritonModelException)):
        return exc.code(), prefix + exc.message()
    return TritonError.INTERNAL, "%s%s: %s" % (prefix, type(exc).__name__, exc)


def _log_exception(where):
    _api._log("%s failed:\n%s" % (where, traceback.format_exc().rstrip()), _api.LogLevel.ERROR)


def _output_config(config):
    """{output name: (datatype, dims including the batch dimension)} from the model config."""
    out = {}
    try:
        batched = int(config.get("max_batch_size", 0) or 0) > 0
        for o in config.get("output", []) or []:
            dt = o.get("data_type")
            try:
                dt = _dtypes.normalize(dt) if dt and dt != "TYPE_INVALID" else None
            except (TypeError, ValueError):
                dt = None
            dims = o.get("dims")
            if dims is not None:
                dims = [int(d) for d in dims]
                if batched:
                    dims = [-1] + dims
            out[o.get("name")] = (dt, dims)
    except Exception:  # a config we do not understand only disables conversions
        return {}
    return out


_DT_CACHE = _host._DT_CACHE  # wit_datatype's cache, looked up inline per output


class _State:
    """Per-instance state. componentize-py makes a new WitWorld object for every export call, so
    nothing may live on `self`."""
    model = None
    outputs = {}
    decoupled = False
    # the requests of a call open to adoption (see _run_adopting), by position
    requests = {}


# What _run returns for the responses of a call whose requests all ended through host.finish.
_ENDED = object()


class WitWorld(_WitWorldProtocol):
    def initialize(self, args):
        _entry.set_argv()  # the runtime's start cleared it
        sys.stdout = _HostLogStream(_api.LogLevel.INFO)
        sys.stderr = _HostLogStream(_api.LogLevel.WARNING)
        _api._Model.name = args.model_name
        _api._Model.version = args.model_version
        try:
            config = json.loads(args.model_config) if args.model_config else {}
        except ValueError:
            config = {}
        _State.outputs = _output_config(config)
        policy = config.get("model_transaction_policy") if isinstance(config, dict) else None
        _State.decoupled = bool(isinstance(policy, dict) and policy.get("decoupled"))
        triton_args = {
            "model_config": args.model_config,
            "model_instance_kind": args.model_instance_kind,
            "model_instance_name": args.model_instance_name,
            "model_instance_device_id": args.model_instance_device_id,
            # the model directory as the guest sees it (_entry.GUEST_DIR; the host's own path
            # means nothing inside the sandbox): under `filesystem = read-only`,
            # <model_repository>/<model_version>/<file> opens, as in Triton
            "model_repository": _entry.GUEST_DIR,
            "model_version": args.model_version,
            "model_name": args.model_name,
        }
        try:
            cls = getattr(_user_model, "TritonPythonModel", None)
            if cls is None:
                raise TritonError("model.py defines no class TritonPythonModel", TritonError.NOT_FOUND)
            _State.model = cls()
            init = getattr(_State.model, "initialize", None)
            if init is not None:
                _await_if_coroutine(init(triton_args))
            _threads.run_pending()
        except BaseException as e:  # noqa: BLE001  anything, so that the guest never traps here
            _State.model = None
            _log_exception("initialize")
            code, message = _error_of(e)
            raise _host.Err(_host.wit_error(code, message))

    def execute(self, requests):
        """World `model`'s export; hosts that know `execute-by-value` do not call it."""
        _, responses = _run(requests)
        n = len(requests)
        if responses.__class__ is _host.Err:
            return [responses] * n
        if responses is None:  # decoupled: everything went through the response senders
            return []
        return _lower_responses(requests, responses)

    def execute_by_value(self, requests):
        """The export the host calls (world `model-by-value`): each request comes as a tensor
        pack of its inputs (small ones with their bytes) and no handle, and each answer holds the
        outputs computed, packed."""
        reqs, responses = _run(requests, by_value=True)
        if responses.__class__ is _host.Err:
            error = _host.answer_error(responses.value)
            # a decoupled request that already sent its final response keeps it as its end
            return [_host.ANSWER_GIVEN if r._sender is not None and r._sender._closed else error for r in reqs]
        if responses is _ENDED:  # each request was ended on its own (host.finish)
            return [_host.ANSWER_GIVEN] * len(reqs)
        if responses is None:
            if _State.decoupled:  # each request was answered through its sender
                return [_host.ANSWER_GIVEN] * len(reqs)
            message = ("execute() returned None; a model that is not decoupled returns one "
                       "InferenceResponse per request")
            _api._log(message, _api.LogLevel.ERROR)
            return [_host.answer_error(_host.wit_error(TritonError.INTERNAL, message))] * len(reqs)
        return _answers(reqs, responses)

    def auto_complete_config(self, config):
        """Triton's auto-complete (world `model-by-value`'s `auto-complete-config`): the model
        class's static `auto_complete_config`, on an instance never initialized."""
        try:
            cls = getattr(_user_model, "TritonPythonModel", None)
            if cls is None:
                raise TritonError("model.py defines no class TritonPythonModel", TritonError.NOT_FOUND)
            return _autocomplete.complete(cls, config)
        except BaseException as e:  # noqa: BLE001  anything, so that the guest never traps here
            _log_exception("auto_complete_config")
            code, message = _error_of(e)
            raise _host.Err(_host.wit_error(code, message))

    def finalize(self):
        fin = getattr(_State.model, "finalize", None)
        if fin is None:
            return
        try:
            _threads.run_pending()  # threads still queued from execute(), which finalize may wait for
            _await_if_coroutine(fin())
            _threads.run_pending()
        except BaseException:  # noqa: BLE001
            _log_exception("finalize")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass


def _run(requests, by_value=False):
    """The user's execute() on `requests`: the InferenceRequest objects and its responses, one
    per request (None if it returned None), or an Err for the whole batch. `requests`: host
    handles (`execute`, whose inputs are read with one `request.read-inputs`), or `by_value`,
    tensor packs of each request's inputs."""
    n = len(requests)
    try:
        if by_value:
            _api._Model.call += 1
            from_pack = _api.InferenceRequest._from_pack
            reqs = [from_pack(i, pack) for i, pack in enumerate(requests)]
        else:
            reqs = [_api.InferenceRequest._from_host(r) for r in requests]
            if n and _host.AVAILABLE:
                inputs = [[(d.name, d.datatype, d.shape, d.data) for d in given]
                          for given in _host.read_inputs(requests)]
                for req, given in zip(reqs, inputs):
                    req._prefetch(given)
    except BaseException as e:  # noqa: BLE001  a pack the SDK cannot read: the host's bug
        _log_exception("reading the requests")
        code, message = _error_of(e)
        blank = _api.InferenceRequest.__new__
        return [blank(_api.InferenceRequest) for _ in range(n)], _host.Err(_host.wit_error(code, message))
    try:
        if _State.model is None:
            raise TritonError("execute() before a successful initialize()", TritonError.UNAVAILABLE)
        responses = _State.model.execute(reqs)
        if by_value and _State.decoupled and hasattr(responses, "__await__"):
            ended, responses = _run_adopting(reqs, responses)
            if ended:
                return reqs, _ENDED
        responses = _await_if_coroutine(responses)
        _threads.run_pending()  # threads execute() started, e.g. to send decoupled responses
    except BaseException as e:  # noqa: BLE001
        _log_exception("execute")
        code, message = _error_of(e)
        return reqs, _host.Err(_host.wit_error(code, message))
    if responses is None:
        return reqs, None
    responses = list(responses)
    if len(responses) != n:
        message = ("execute() returned %d responses for %d requests" % (len(responses), n))
        _api._log(message, _api.LogLevel.ERROR)
        return reqs, _host.Err(_host.wit_error(TritonError.INTERNAL, message))
    return reqs, responses


def _run_adopting(reqs, coro):
    """A decoupled model's `async def execute` as Triton runs it: the call's coroutine and one
    `execute([request])` coroutine per request the host hands over while it runs, concurrently
    on one loop (tessera_guest._aio). (True, None) once each request has ended; (False, what
    `coro` returned) when the host offers no requests (then it ran alone)."""
    _State.requests = dict(enumerate(reqs))

    def start(position, pack):
        req = _api.InferenceRequest._from_pack(position, pack)
        _State.requests[position] = req
        return _State.model.execute([req])

    try:
        return _aio.run_adopting(coro, len(reqs), start, _ended)
    finally:
        _State.requests = {}


def _ended(positions, task):
    """Ends the requests at `positions` (host.finish), whose coroutine `task` has finished: with
    its error unless a request's stream already ended (its final response sent)."""
    _threads.run_pending()  # threads it started, e.g. to send its responses
    error = None
    exc = task.exception()
    if exc is not None:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
        _api._log("execute failed:\n" + trace, _api.LogLevel.ERROR)
        error = _error_of(exc)
    elif task.result() is not None:
        error = (TritonError.INTERNAL, "execute() of a decoupled model returned a value; it answers through "
                 "its requests' response senders and returns None")
        _api._log(error[1], _api.LogLevel.ERROR)
    for position in positions:
        req = _State.requests.pop(position, None)
        closed = req is not None and req._sender is not None and req._sender._closed
        if error is None or closed:
            answer = _host.ANSWER_GIVEN
        else:
            answer = _host.answer_error(_host.wit_error(*error))
        _host.wit_host.finish(position, answer)


def _answers(reqs, responses):
    """execute-by-value's answers: each response's computed outputs as one tensor pack (a
    latin-1 string), `given` for one with none. Host tensors passed on (inputs above 4 KiB, BLS
    outputs) go first, the whole batch's in one `request.give-tensors` call, which moves no bytes
    and takes no request that has none. No answer holds an empty list."""
    answers = []
    handed = ([], [], [])  # requests with host tensors to give, those tensors, their positions
    new, outputs, given_only = object.__new__, _host.ANSWER_OUTPUTS, _host.ANSWER_GIVEN
    for i, resp in enumerate(responses):
        lowered = _pack_response(resp)
        if lowered.__class__ is _host.Err:
            answers.append(_host.answer_error(lowered.value))
            continue
        handles, packed = lowered
        if resp._parameters:
            refused = _set_response_parameters(reqs[i]._handle, resp._parameters)
            if refused is not None:
                answers.append(_host.answer_error(refused))
                continue
        if handles:
            try:
                handed[0].append(reqs[i]._handle())
            except BaseException as e:  # noqa: BLE001
                code, message = _error_of(e)
                answers.append(_host.answer_error(_host.wit_error(code, message)))
                continue
            handed[1].append(handles)
            handed[2].append(i)
        if packed is None:
            answers.append(given_only)
            continue
        answer = new(outputs)  # answer.outputs(packed), without the dataclass's interpreted __init__
        answer.value = packed
        answers.append(answer)
    if handed[0]:
        for i, given in zip(handed[2], _host.give_tensors(handed[0], handed[1])):
            if given.__class__ is _host.Err:
                answers[i] = _host.answer_error(given.value)
    return answers


def _pack_response(resp):
    """(host tensor handles, a tensor pack of the computed outputs or None) of one response, or
    its error as an Err."""
    if resp.__class__ is not _api.InferenceResponse and not isinstance(resp, _api.InferenceResponse):
        return _lower_response(resp)  # an Err that says what it is
    if resp._error is not None:
        e = resp._error
        return _host.Err(_host.wit_error(e.code(), e.message()))
    try:
        handles = []
        header = []
        datas = []
        entry = _pack.entry
        for t in resp._outputs:
            if t._handle is not None:  # a host tensor passed on: its own datatype and shape
                handles.append(t._lower_owned())
                continue
            if not (t._explicit_dtype and t._explicit_shape):
                cfg = _State.outputs.get(t._name)
                # a numpy output already of the config's datatype (the common case) needs nothing
                if cfg is not None and (not t._explicit_shape or (cfg[0] and cfg[0] != t._dtype)):
                    t._conform(cfg[0], cfg[1])
            raw = t._raw
            header.append(entry(t._name, t._dtype, t._shape, len(raw)))
            datas.append(raw)
        return handles, (_pack.join(header, datas) if header else None)
    except BaseException as e:  # noqa: BLE001
        _log_exception("building the response")
        code, message = _error_of(e)
        return _host.Err(_host.wit_error(code, message))


def _set_response_parameters(handle, parameters):
    """Gives the request (`handle()` gets its handle) its response's parameters; None, or the
    WIT error when the host refuses them (past its bounds: see wit/model.wit)."""
    try:
        handle().set_response_parameters(_host.parameters_to_wit(parameters))
        return None
    except _host.Err as e:
        return e.value
    except BaseException as e:  # noqa: BLE001
        code, message = _error_of(e)
        return _host.wit_error(code, message)


def _lower_responses(requests, responses):
    """execute()'s results for the host. Outputs the guest computed go to the host by value, the
    whole batch's in one `request.set-outputs` call (a Python guest's host call and each handle
    it gets back cost microseconds), but for one per response, which goes as a handle (see
    _lower_response); host tensors (inputs or BLS outputs passed on) are returned as handles,
    which moves no bytes."""
    results = []
    given_requests = []
    given_outputs = []
    given_at = []
    for i, resp in enumerate(responses):
        lowered = _lower_response(resp)
        if isinstance(lowered, _host.Err):
            results.append(lowered)
            continue
        handles, data = lowered
        if resp._parameters:
            refused = _set_response_parameters(lambda: requests[i], resp._parameters)
            if refused is not None:
                results.append(_host.Err(refused))
                continue
        if data:
            given_requests.append(requests[i])
            given_outputs.append(data)
            given_at.append(i)
        results.append(_host.Ok(handles))
    if given_requests:
        for i, given in zip(given_at, _host.set_outputs(given_requests, given_outputs)):
            if isinstance(given, _host.Err):
                results[i] = given
    return results


def _lower_response(resp):
    """(host tensor handles, `output-data` tuples) of one response for `execute`, or its error
    as an Err. A response of computed outputs only has one as a handle."""
    if not isinstance(resp, _api.InferenceResponse):
        if isinstance(resp, BaseException):
            code, message = _error_of(resp)
            return _host.Err(_host.wit_error(code, message))
        return _host.Err(_host.wit_error(
            TritonError.INTERNAL,
            "execute() must return pb_utils.InferenceResponse objects, got %s"
            % type(resp).__name__))
    if resp.has_error():
        e = resp.error()
        return _host.Err(_host.wit_error(e.code(), e.message()))
    try:
        handles = []
        data = []
        for t in resp._outputs:
            if t._handle is not None:  # a host tensor passed on: its own datatype and shape
                handles.append(t._lower_owned())
                continue
            if not (t._explicit_dtype and t._explicit_shape):
                cfg = _State.outputs.get(t.name())
                if cfg is not None:
                    t._conform(cfg[0], cfg[1])
            # a local tensor always holds its bytes (`_raw`); the tuple is `output-data`, the
            # bytes a latin-1 string (componentize-py frees a string argument, not a bytes one)
            dt = _DT_CACHE.get(t._dtype) or _host.wit_datatype(t._dtype)
            data.append((t._name, dt, t._shape, t._raw.decode("latin-1")))
        if data and not handles:
            # One output goes back as a handle: componentize-py 0.25.1 leaks 16 bytes of guest
            # memory for every empty list it lowers (its cabi_realloc allocates for a zero
            # size, which is never freed), and an `ok` with no handles is an empty list.
            try:
                handles.append(_host.create_output(data.pop()))
            except _host.Err as e:  # the host refused it: this request's error
                return _host.Err(e.value)
        return handles, data
    except BaseException as e:  # noqa: BLE001
        _log_exception("building the response")
        code, message = _error_of(e)
        return _host.Err(_host.wit_error(code, message))


def _await_if_coroutine(value):
    """The result of a user method: `async def` ones (execute, initialize, finalize, as Triton
    allows) run to completion on the guest's asyncio loop (tessera_guest._aio), where
    `asyncio.gather(*[r.async_exec() ...])` runs BLS calls concurrently on the host."""
    if hasattr(value, "__await__"):
        return _aio.run(value)
    return value
