"""Custom metrics as Triton's python backend has them (`pb_utils.MetricFamily`, `Metric`), and
spans of the guest's own code in request traces (Tessera's `pb_utils.Span`), over WIT interface
`telemetry`.

    family = pb_utils.MetricFamily(name="requests_total", description="...",
                                   kind=pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"route": "a"})
    metric.increment(1)

    with pb_utils.Span("tokenize") as span:
        span.set_attribute("tokens", 12)
        span.add_event("cache-miss", {"key": "abc"})

Every series is labelled by the host with the model's `model` and `version`; a family name that
begins with `nv_` or `tessera_` is refused. Errors raise TritonModelException with Triton's
messages.
"""

import enum

from . import _host
from ._errors import TritonModelException


class MetricKind(enum.IntEnum):
    """pb_utils.MetricKind: what a MetricFamily counts."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


def _call(fn, *args):
    """Calls a host function, turning a WIT `error` into TritonModelException."""
    try:
        return fn(*args)
    except _host.Err as e:
        err = e.value
        raise TritonModelException(err.message, _host.error_code(err)) from None


class Metric:
    """One series of a MetricFamily (made by `MetricFamily.Metric`)."""

    __slots__ = ("_handle",)

    def __init__(self, handle):
        self._handle = handle

    def increment(self, value):
        """Adds `value` (a counter only by a value >= 0; a gauge by any)."""
        _call(self._handle.increment, float(value))

    def set(self, value):
        """Sets a gauge to `value`."""
        _call(self._handle.set, float(value))

    def observe(self, value):
        """Adds `value` to a histogram."""
        _call(self._handle.observe, float(value))

    def value(self):
        """A counter's or gauge's current value."""
        return _call(self._handle.value)


class MetricFamily:
    """pb_utils.MetricFamily(name, description, kind): one metric name on the server's /metrics.

    The same name with the same kind is the same family (the first description stays); another
    kind is refused.
    """

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name, description, kind):
        if name is None or description is None or kind is None:
            raise TypeError("MetricFamily() takes name, description and kind, none of them None")
        try:
            kind = MetricKind(kind)
        except ValueError:
            raise TritonModelException("Unknown metric kind") from None
        _host.require()
        self.name = str(name)
        self.kind = kind
        wit_kind = _host.wit_telemetry.MetricKind(int(kind))
        self._handle = _call(_host.wit_telemetry.MetricFamily.create, self.name, str(description), wit_kind)

    def Metric(self, labels=None, buckets=None):  # noqa: N802 (Triton's name)
        """The family's series with `labels` (a dict of strings); `buckets` (a list of increasing
        upper bounds) for a HISTOGRAM, and only for one."""
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self.kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            buckets = [float(b) for b in buckets]
        elif self.kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        pairs = [(str(k), str(v)) for k, v in (labels or {}).items()]
        return Metric(_call(self._handle.metric, pairs, buckets))


class Span:
    """A span of this model's own code in the trace of the request it executes (for a batch, its
    first traced request): a child of the model's compute span, or of `parent`. When the request
    is not traced it records nothing (`is_recording()` is False) and costs one host call.

    Use it as a context manager, or call `end()`; a span still open when `execute` returns ends
    then. An exception leaving the `with` block is added as an event named `exception`.
    """

    __slots__ = ("_handle",)

    def __init__(self, name, parent=None):
        _host.require()
        parent_handle = parent._handle if parent is not None else None
        self._handle = _host.wit_telemetry.Span.start(str(name), parent_handle)

    def is_recording(self):
        return self._handle.is_recording()

    def set_attribute(self, key, value):
        """`value`: bool, int, float or str."""
        self._handle.set_attribute(str(key), _host.param_value(key, value))

    def add_event(self, name, attributes=None):
        """An event now, with `attributes` (a dict of bool, int, float or str)."""
        pairs = [(str(k), _host.param_value(k, v)) for k, v in (attributes or {}).items()]
        self._handle.add_event(str(name), pairs)

    def end(self):
        self._handle.end()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is not None:
            self.add_event("exception", {"exception.type": kind.__name__, "exception.message": str(value)})
        self.end()
        return False
