"""The only module that touches the bindings componentize-py generates for wit/model.wit.

Inside a component `wit_world` exists; under plain CPython (unit tests, editors) it does not, and
everything that needs the host raises HostUnavailable while local tensors keep working.
"""

import json

try:
    from wit_world.imports import host as wit_host
    from wit_world.imports import telemetry as wit_telemetry
    from wit_world.imports import types as wit_types
    from componentize_py_types import Err, Ok
    AVAILABLE = True
except ImportError:  # plain CPython
    wit_host = None
    wit_telemetry = None
    wit_types = None
    AVAILABLE = False

    class Ok:  # minimal stand-ins with the same shape as componentize_py_types
        def __init__(self, value):
            self.value = value

    class Err(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value


if AVAILABLE:
    import componentize_py_runtime

    from . import _enums, _handles

    _handles.install(_handles.resource_classes(wit_host, wit_types),
                     getattr(componentize_py_runtime, "drop_resource", None))
    _enums.install(_enums.enum_classes(wit_host, wit_types))


class HostUnavailable(RuntimeError):
    pass


def require():
    if not AVAILABLE:
        raise HostUnavailable(
            "the Tessera host is only reachable inside a component built by componentize-py "
            "(scripts/build-python-guest.sh)")


_DT_CACHE = {}


def wit_datatype(name):
    """The WIT DataType enum value of a KServe datatype name."""
    dt = _DT_CACHE.get(name)
    if dt is None:
        require()
        dt = _DT_CACHE[name] = wit_types.DataType[name]
    return dt


def datatype_name(dt):
    """The KServe name ("FP32") of a WIT `data-type` enum member: its `_name_`, a plain attribute
    (Enum's `.name` is a property implemented in Python, several times slower in a guest)."""
    return dt._name_


_CODE_NAMES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
               "ALREADY_EXISTS", "CANCELLED")


def wit_error(code, message):
    """A WIT `error` record from a TritonError code (0..7) and a message."""
    require()
    if not 0 <= code < len(_CODE_NAMES):
        code = 0
    return wit_types.Error(wit_types.ErrorCode[_CODE_NAMES[code]], str(message))


def error_code(wit_err):
    """The TritonError code (0..7) of a WIT `error` record."""
    return int(wit_err.code.value)


# Inputs up to this size come with `request.read-inputs`: one host call for a whole batch instead
# of two per input (a Python guest's host call costs ~2-4 µs, more than copying a few KiB), at
# the price of copying inputs the model may only pass on. Larger ones stay host handles, and so
# do all once the call has copied 1 MiB (the host's cap).
PREFETCH_MAX_BYTES = 4096


def read_inputs(requests):
    """The inputs of each request (`input-data` records), small ones with their bytes."""
    return wit_types.Request.read_inputs(requests, PREFETCH_MAX_BYTES)


def create_output(data):
    """A host tensor handle from an `output-data` tuple; raises Err."""
    return wit_types.Tensor.create_latin1(*data)


def set_outputs(requests, outputs):
    """Gives each of `requests` (host request handles of this execute call) its list of
    `output-data` tuples; one Ok/Err per request."""
    return wit_types.Request.set_outputs(requests, outputs)


if AVAILABLE:
    # `answer.outputs(pack)` is made as `object.__new__(ANSWER_OUTPUTS)` plus its `value`
    # (app._answers): the dataclass's `__init__` is an interpreted call per request.
    ANSWER_OUTPUTS = wit_types.Answer_Outputs
    answer_error = wit_types.Answer_Error
    ANSWER_GIVEN = wit_types.Answer_Given()  # no fields: one object serves every answer
else:
    ANSWER_OUTPUTS = answer_error = ANSWER_GIVEN = None


def request_at(position):
    """The handle of the request at `position` of the current execute-by-value call (None if
    the host has none to give)."""
    return wit_types.Request.at(position)


def give_tensors(requests, tensors):
    """Moves to each of `requests` its list of host tensor handles (outputs the guest holds as
    handles, for execute-by-value); one Ok/Err per request."""
    return wit_types.Request.give_tensors(requests, tensors)


def param_value(key, value):
    """A WIT `param-value` from a bool, int, float or str."""
    if isinstance(value, bool):
        return wit_types.ParamValue_Bool(value)
    if isinstance(value, int):
        return wit_types.ParamValue_Int(value)
    if isinstance(value, float):
        return wit_types.ParamValue_Double(value)
    if isinstance(value, str):
        return wit_types.ParamValue_String(value)
    raise TypeError("parameter %r: expected bool, int, float or str, got %s" % (key, type(value).__name__))


def parameters_to_wit(params):
    """A list of WIT `parameter` records from a dict (or a JSON object string)."""
    if not params:
        return []
    require()
    if isinstance(params, str):
        params = json.loads(params)
    return [wit_types.Parameter(str(key), param_value(key, value)) for key, value in params.items()]


def parameters_from_wit(params):
    return {p.key: p.value.value for p in params}
