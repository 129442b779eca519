"""A tiny stand-in for the Tessera host, on the `wasmtime` PyPI package, to run guest components
of world tessera:model/model without the server: it implements every import of wit/model.wit
(tensors, requests, response senders, log, BLS infer / infer-stream to Python callables) and gives
WASI with no grants (no files, no network, no environment; stdout/stderr discarded).

    host = MockHost("model.wasm", bls={"other": lambda inputs, outputs, params: [...]})
    host.initialize({"name": "m", "output": [...]})
    results = host.execute([Req(inputs=[T("INPUT0", "FP32", [4], b"...")])])

Test tool only: it counts host calls and tensor copies so tests can check that handles move no
bytes.
"""

import struct
from dataclasses import dataclass, field

import wasmtime
from wasmtime import component as cm

TENSOR, REQUEST, SENDER, STREAM, PENDING, FAMILY, METRIC, SPAN, BUCKET = 1, 2, 3, 4, 5, 6, 7, 8, 9
_DT = ["bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "fp16",
       "bf16", "fp32", "fp64", "bytes"]
_ITEM = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
         "UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8}
_CODES = ["unknown", "internal", "not-found", "invalid-arg", "unavailable", "unsupported",
          "already-exists", "cancelled"]


@dataclass
class T:
    name: str
    datatype: str  # KServe name, e.g. "FP32"
    shape: list
    data: bytes

    def values(self):
        if self.datatype == "BYTES":
            out, off = [], 0
            while off < len(self.data):
                (n,) = struct.unpack_from("<I", self.data, off)
                out.append(self.data[off + 4:off + 4 + n])
                off += 4 + n
            return out
        fmt = {"FP32": "f", "FP64": "d", "INT32": "i", "INT64": "q", "UINT8": "B", "INT8": "b",
               "BOOL": "?", "INT16": "h", "UINT16": "H", "UINT32": "I", "UINT64": "Q",
               "FP16": "e"}[self.datatype]
        return list(struct.unpack("<%d%s" % (len(self.data) // _ITEM[self.datatype], fmt), self.data))


def f32(name, values, shape=None):
    return T(name, "FP32", list(shape or [len(values)]), struct.pack("<%df" % len(values), *values))


@dataclass
class Req:
    inputs: list
    outputs: list = field(default_factory=list)
    params: dict = field(default_factory=dict)
    id: str = ""
    sent: list = field(default_factory=list)  # ("ok", [T]) / ("err", code, msg), final flag
    # response parameters: set-response-parameters' last, and those of each send-with-parameters
    response_params: dict = field(default_factory=dict)
    sent_params: list = field(default_factory=list)


def _param_values(params):
    """{key: value} of a list of WIT `parameter` records (a variant value's payload)."""
    return {p.key: getattr(p.value, "payload", p.value) for p in params}


# The host's limit on infer-async calls of one instance (host/src/backend/wasm/bls.rs).
MAX_IN_FLIGHT = 64


class _Pending(list):
    """A pending-infer: a one-slot list holding the call's result until `get` takes it."""


class GuestError(Exception):
    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def pack(tensors, max_bytes=None, budget=None):
    """A tensor pack (wit/model.wit, `execute-by-value`) of `tensors`: each with its bytes if
    it has at most `max_bytes` (None: any) while `budget` (a one-item list of bytes left) lasts.
    Written here from the WIT text, not shared with the SDK, so each checks the other."""
    header, data = [struct.pack("<I", len(tensors))], []
    for t in tensors:
        name = t.name.encode()
        carried = (max_bytes is None or len(t.data) <= max_bytes) and (budget is None or len(t.data) <= budget[0])
        if carried and budget is not None:
            budget[0] -= len(t.data)
        header.append(struct.pack("<I", len(name)) + name
                      + struct.pack("<BI%dq" % len(t.shape), _DT.index(t.datatype.lower()), len(t.shape), *t.shape)
                      + struct.pack("<I", len(t.data) if carried else 0xFFFFFFFF))
        if carried:
            data.append(t.data)
    header = b"".join(header)
    return struct.pack("<I", len(header)) + header + b"".join(data)


def unpack(blob):
    """The tensors (T) of a pack, or a message saying why it is malformed (as the host refuses
    it)."""
    try:
        (size,) = struct.unpack_from("<I", blob)
        (count,) = struct.unpack_from("<I", blob, 4)
        pos, entries = 8, []
        for _ in range(count):
            (n,) = struct.unpack_from("<I", blob, pos)
            name = blob[pos + 4:pos + 4 + n].decode()
            pos += 4 + n
            dt, rank = struct.unpack_from("<BI", blob, pos)
            pos += 5
            shape = list(struct.unpack_from("<%dq" % rank, blob, pos))
            pos += 8 * rank
            (nbytes,) = struct.unpack_from("<I", blob, pos)
            pos += 4
            entries.append((name, _DT[dt].upper(), shape, nbytes))
        if pos != 4 + size:
            return "entries end at %d, header-size says %d" % (pos, 4 + size)
        out = []
        for name, dt, shape, nbytes in entries:
            out.append(T(name, dt, shape, blob[pos:pos + nbytes]))
            pos += nbytes
        if pos != len(blob):
            return "%d bytes of data, %d follow the header" % (pos - 4 - size, len(blob) - 4 - size)
        return out
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        return str(e)


def _rec(**fields):
    r = cm.Record()
    for k, v in fields.items():
        setattr(r, k, v)
    return r


_COMPONENTS = {}


class MockHost:
    def __init__(self, wasm_path, bls=None, bls_stream=None, engine=None):
        self.engine = engine or wasmtime.Engine()
        key = (id(self.engine), str(wasm_path))
        if key not in _COMPONENTS:  # compiling a Python guest takes seconds: once per engine
            _COMPONENTS[key] = cm.Component.from_file(self.engine, wasm_path)
        self.component = _COMPONENTS[key]
        self.bls = bls or {}
        self.bls_stream = bls_stream or {}
        self.logs = []
        self.calls = {}
        self.bytes_to_guest = 0
        self.bytes_from_guest = 0
        self.bls_calls = []
        self.metrics = {}  # (family, ((label, value), ...)) -> value, or a list of observations
        self.spans = []  # [name, parent index or None, {attributes}, [events], ended]
        self.decoupled = False  # set it to answer set-outputs as the host does a decoupled model
        self._call_requests = []
        self._pending = []  # execute-by-value's requests until request.at takes them
        self._given = []
        self._given_tensors = []
        # `ok` results with no handle: empty lists, which componentize-py 0.25.1 leaks 16 bytes
        # of guest memory for (its cabi_realloc allocates for a zero size; nothing frees it)
        self.empty_results = 0
        self.answered_by_value = 0  # execute-by-value answers that held outputs
        self.async_calls = 0
        self.max_in_flight = 0
        self._objs = {}
        self._next = 1
        linker = cm.Linker(self.engine)
        linker.add_wasip2()
        with linker.root() as root:
            with root.add_instance("tessera:model/types@0.1.0") as types:
                self._define_types(types)
            with root.add_instance("tessera:model/host@0.1.0") as host:
                self._define_host(host)
            with root.add_instance("tessera:model/telemetry@0.1.0") as telemetry:
                self._define_telemetry(telemetry)
            # The standard interfaces every Python guest imports (componentize-py imports the
            # whole world): a model granted nothing, as the server's default.
            with root.add_instance("wasi:config/store@0.2.0-rc.1") as config:
                self._define_config(config)
            with root.add_instance("wasi:keyvalue/store@0.2.0-draft") as keyvalue:
                self._define_keyvalue(keyvalue)
            with root.add_instance("wasi:keyvalue/atomics@0.2.0-draft") as atomics:
                atomics.add_func("increment", lambda store, bucket, key, delta: cm.Variant("access-denied"))
        self.linker = linker
        self.store = wasmtime.Store(self.engine)
        self.store.set_wasi(wasmtime.WasiConfig())
        self.instance = linker.instantiate(self.store, self.component)
        self._f = {n: self.instance.get_func(self.store, n)
                   for n in ("initialize", "execute", "execute-by-value", "finalize")}

    # -- object table ------------------------------------------------------------------------
    def _put(self, obj):
        rep = self._next
        self._next += 1
        self._objs[rep] = obj
        return rep

    def _own(self, obj, ty):
        return cm.ResourceHost.own(self._put(obj), ty)

    def _get(self, res):
        if isinstance(res, cm.ResourceAny):
            res = res.to_host(self.store)
        return self._objs[res.rep]

    def _take(self, res):
        if isinstance(res, cm.ResourceAny):
            res = res.to_host(self.store)
        return self._objs.pop(res.rep)

    def live_objects(self):
        return dict(self._objs)

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def _wrap(self, name, fn):
        def f(store, *args):
            self._count(name)
            return fn(*args)
        return f

    def _drop(self, store, rep):
        self._count("drop")
        self._objs.pop(rep, None)

    # -- tessera:model/types ------------------------------------------------------------------
    def _define_types(self, li):
        for name, ty in (("tensor", TENSOR), ("request", REQUEST), ("response-sender", SENDER)):
            li.add_resource(name, cm.ResourceType.host(ty), self._drop)

        def create(name, dt, shape, data):
            dtn = dt.upper()
            if dtn != "BYTES":
                n = 1
                for d in shape:
                    n *= d
                if n * _ITEM[dtn] != len(data):
                    return _rec(code="invalid-arg", message="%d bytes do not fit %s %s" % (len(data), dtn, shape))
            self.bytes_from_guest += len(data)
            return self._own(T(name, dtn, list(shape), bytes(data)), TENSOR)

        def data(h):
            t = self._get(h)
            self.bytes_to_guest += len(t.data)
            return t.data

        def read(h):
            t = self._get(h)
            self.bytes_to_guest += len(t.data)
            return _rec(datatype=t.datatype.lower(), shape=list(t.shape), data=t.data)

        def with_name(h, name):
            t = self._get(h)
            return self._own(T(name, t.datatype, t.shape, t.data), TENSOR)

        def create_latin1(name, dt, shape, text):
            return create(name, dt, shape, text.encode("latin-1"))

        self._create_latin1 = create_latin1

        w = self._wrap
        li.add_func("[static]tensor.create", w("tensor.create", create))
        li.add_func("[static]tensor.create-latin1", w("tensor.create-latin1", create_latin1))
        li.add_func("[method]tensor.name", w("tensor.name", lambda h: self._get(h).name))
        li.add_func("[method]tensor.datatype", w("tensor.datatype", lambda h: self._get(h).datatype.lower()))
        li.add_func("[method]tensor.shape", w("tensor.shape", lambda h: list(self._get(h).shape)))
        li.add_func("[method]tensor.byte-size", w("tensor.byte-size", lambda h: len(self._get(h).data)))
        li.add_func("[method]tensor.data", w("tensor.data", data))
        li.add_func("[method]tensor.read", w("tensor.read", read))
        li.add_func("[method]tensor.with-name", w("tensor.with-name", with_name))

        def req_input(h, name):
            r = self._get(h)
            t = next((t for t in r.inputs if t.name == name), None)
            return None if t is None else self._own(t, TENSOR)

        def params(h):
            out = []
            for k, v in self._get(h).params.items():
                out.append(_rec(key=k, value=v))
            return out

        def read_inputs(handles, max_bytes):
            return self._input_rows([self._get(h) for h in handles], max_bytes)

        def batch(call, handles, lists):
            # The host's rules for a call over a batch's requests: lists of one length, each
            # request once (guest bugs: they trap).
            if len(handles) != len(lists):
                raise wasmtime.WasmtimeError("%s: lists of different lengths" % call)
            reqs = [self._get(h) for h in handles]
            if len({id(r) for r in reqs}) != len(reqs):
                raise wasmtime.WasmtimeError("%s: the same request handle was passed twice" % call)
            return reqs

        def position(req):
            # (position in the current execute call, None) or (None, the error record): outputs
            # go only to the current call's requests, and not a decoupled model's.
            if self.decoupled:
                return None, _rec(code="unsupported", message="decoupled")
            at = next((i for i, r in enumerate(self._call_requests) if r is req), None)
            if at is None:
                return None, _rec(code="invalid-arg", message="not one of the current execute call's")
            return at, None

        def set_outputs(handles, outputs):
            # ... and bytes that fit.
            results = []
            for req, given in zip(batch("request.set-outputs", handles, outputs), outputs):
                at, refused = position(req)
                if refused is not None:
                    results.append(refused)
                    continue
                tensors = []
                for name, dt, shape, text in given:
                    t = create(name, dt, shape, text.encode("latin-1"))
                    if not isinstance(t, cm.ResourceHost):
                        tensors = t
                        break
                    tensors.append(self._take(t))
                if not isinstance(tensors, list):
                    results.append(tensors)
                    continue
                self._given[at].extend(tensors)
                results.append(None)
            return results

        def give_tensors(handles, tensors):
            # As set-outputs, for handles: each moves to the host whatever becomes of its request.
            results = []
            for req, given in zip(batch("request.give-tensors", handles, tensors), tensors):
                moved = [self._take(t) for t in given]
                at, refused = position(req)
                if refused is None:
                    self._given_tensors[at].extend(moved)
                results.append(refused)
            return results

        def at(position):
            if position >= len(self._pending) or self._pending[position] is None:
                return None
            req, self._pending[position] = self._pending[position], None
            return self._own(req, REQUEST)

        li.add_func("[static]request.at", w("request.at", at))
        li.add_func("[static]request.read-inputs", w("request.read-inputs", read_inputs))
        li.add_func("[static]request.give-tensors", w("request.give-tensors", give_tensors))
        li.add_func("[static]request.set-outputs", w("request.set-outputs", set_outputs))
        li.add_func("[method]request.id", w("request.id", lambda h: self._get(h).id))
        li.add_func("[method]request.is-cancelled", w("request.is-cancelled", lambda h: bool(self._get(h)) and False))
        li.add_func("[method]request.input", w("request.input", req_input))
        li.add_func("[method]request.inputs", w("request.inputs",
                                                lambda h: [self._own(t, TENSOR) for t in self._get(h).inputs]))
        li.add_func("[method]request.requested-outputs", w("request.requested-outputs",
                                                            lambda h: list(self._get(h).outputs)))
        li.add_func("[method]request.parameters", w("request.parameters", params))
        li.add_func("[method]request.sender", w("request.sender", lambda h: self._own(["open", self._get(h)], SENDER)))

        def set_response_parameters(h, params):
            self._get(h).response_params = _param_values(params)
            return None

        li.add_func("[method]request.set-response-parameters",
                    w("request.set-response-parameters", set_response_parameters))

        def send(h, outputs, final):
            s = self._get(h)
            tensors = [self._take(o) for o in outputs]
            if s[0] != "open":
                return _rec(code="unavailable", message="final response already sent")
            s[1].sent.append((("ok", tensors), final))
            if final:
                s[0] = "closed"
            return None

        def send_error(h, err, final):
            s = self._get(h)
            if s[0] != "open":
                return _rec(code="unavailable", message="final response already sent")
            s[1].sent.append((("err", err.code, err.message), final))
            if final:
                s[0] = "closed"
            return None

        def send_with_parameters(h, outputs, params, final):
            s = self._get(h)  # a borrowed handle is read once
            tensors = [self._take(o) for o in outputs]
            if s[0] != "open":
                return _rec(code="unavailable", message="final response already sent")
            s[1].sent.append((("ok", tensors), final))
            s[1].sent_params.append(_param_values(params))
            if final:
                s[0] = "closed"
            return None

        li.add_func("[method]response-sender.send", w("response-sender.send", send))
        li.add_func("[method]response-sender.send-with-parameters",
                    w("response-sender.send-with-parameters", send_with_parameters))
        li.add_func("[method]response-sender.send-error", w("response-sender.send-error", send_error))
        li.add_func("[method]response-sender.is-cancelled",
                    w("response-sender.is-cancelled", lambda h: bool(self._get(h)) and False))

    # -- tessera:model/host -------------------------------------------------------------------
    def _define_host(self, li):
        li.add_resource("response-stream", cm.ResourceType.host(STREAM), self._drop)
        li.add_resource("pending-infer", cm.ResourceType.host(PENDING), self._drop)

        def log(level, message):
            self.logs.append((level, message))

        def call(table, model, version, inputs, outputs, params):
            ins = [self._get(i) for i in inputs]
            self.bls_calls.append((model, version, [t.name for t in ins], list(outputs),
                                   {p.key: p.value for p in params}))
            fn = table.get(model)
            if fn is None:
                raise KeyError(model)
            return fn(ins, list(outputs), {p.key: p.value for p in params})

        def infer(model, version, inputs, outputs, params):
            try:
                result = call(self.bls, model, version, inputs, outputs, params)
            except KeyError:
                return _rec(code="not-found", message="no model '%s'" % model)
            except GuestError as e:
                return _rec(code=e.code, message=e.message)
            return [self._own(t, TENSOR) for t in result]

        def infer_stream(model, version, inputs, outputs, params):
            try:
                result = call(self.bls_stream, model, version, inputs, outputs, params)
            except KeyError:
                return _rec(code="not-found", message="no model '%s'" % model)
            return self._own(iter(list(result)), STREAM)

        def nxt(h):
            it = self._get(h)
            item = next(it, None)
            if item is None:
                return None
            if isinstance(item, GuestError):
                return _rec(code=item.code, message=item.message)
            return [self._own(t, TENSOR) for t in item]

        # Parallel BLS: the mock runs the call at once; `get` hands the result out once. As the
        # host, it refuses more than MAX_IN_FLIGHT live handles.
        def infer_async(model, version, inputs, outputs, params):
            live = sum(isinstance(o, _Pending) for o in self._objs.values())
            self.max_in_flight = max(self.max_in_flight, live + 1)
            if live >= MAX_IN_FLIGHT:
                return _rec(code="unavailable", message="%d BLS calls in flight" % live)
            self.async_calls += 1
            return self._own(_Pending([infer(model, version, inputs, outputs, params)]), PENDING)

        def ready(h):
            self._get(h)  # a borrowed handle must be looked at before the call returns
            return True

        def get(h):
            slot = self._get(h)
            if not slot:
                return _rec(code="invalid-arg", message="the result of this BLS call was already taken")
            return slot.pop()

        def wait_any(calls):
            for c in calls:  # a borrowed handle must be looked at before the call returns
                self._get(c)
            return 0 if calls else None

        # Adoption (a decoupled model's `async def execute`): the mock offers no requests, so a
        # coroutine runs alone, as for a model that is not decoupled.
        def wait(calls, timeout_ns):
            for c in calls:
                self._get(c)
            return _rec(finished=0 if calls else None, requests=False, expired=None, **{"waited-ns": 0})

        def adopt(close):
            return None

        def finish(position, answer):
            pass

        w = self._wrap
        li.add_func("wait", w("wait", wait))
        li.add_func("adopt", w("adopt", adopt))
        li.add_func("finish", w("finish", finish))
        li.add_func("infer-async", w("infer-async", infer_async))
        li.add_func("wait-any", w("wait-any", wait_any))
        li.add_func("[method]pending-infer.ready", w("pending-infer.ready", ready))
        li.add_func("[method]pending-infer.get", w("pending-infer.get", get))
        li.add_func("log", w("log", log))
        li.add_func("infer", w("infer", infer))
        li.add_func("infer-stream", w("infer-stream", infer_stream))
        li.add_func("[method]response-stream.next", w("response-stream.next", nxt))

    # -- wasi:config, wasi:keyvalue ------------------------------------------------------------
    def _define_config(self, li):
        """`self.config_values`: what `get` and `get-all` read (nothing unless a test sets it)."""
        self.config_values = {}
        li.add_func("get", lambda store, key: self.config_values.get(key))
        li.add_func("get-all", lambda store: list(self.config_values.items()))

    def _define_keyvalue(self, li):
        """No store is granted: `open` fails with access-denied, so no bucket ever exists."""
        li.add_resource("bucket", cm.ResourceType.host(BUCKET), self._drop)
        denied = cm.Variant("access-denied")
        li.add_func("open", lambda store, identifier: denied)
        for method in ("get", "set", "delete", "exists", "list-keys"):
            li.add_func(f"[method]bucket.{method}", lambda store, *args: denied)

    # -- tessera:model/telemetry --------------------------------------------------------------
    def _define_telemetry(self, li):
        """Families, series and spans kept in `self.metrics` and `self.spans` (no kind checks
        beyond the host's basic ones: the server's tests check its messages)."""
        for name, ty in (("metric-family", FAMILY), ("metric", METRIC), ("span", SPAN)):
            li.add_resource(name, cm.ResourceType.host(ty), self._drop)

        def create(name, description, kind):
            if name.startswith(("nv_", "tessera_")):
                return _rec(code="invalid-arg", message="names beginning with 'nv_' or 'tessera_' are the server's")
            return self._own((name, kind), FAMILY)

        def metric(h, labels, buckets):
            name, _kind = self._get(h)
            key = (name, tuple(sorted(labels)))
            self.metrics.setdefault(key, [] if buckets is not None else 0.0)
            return self._own(key, METRIC)

        def increment(h, value):
            key = self._get(h)
            self.metrics[key] += value
            return None

        def set_(h, value):
            self.metrics[self._get(h)] = value
            return None

        def observe(h, value):
            self.metrics[self._get(h)].append(value)
            return None

        def value(h):
            return self.metrics[self._get(h)]

        def start(name, parent):
            parent_index = self._get(parent) if parent is not None else None
            self.spans.append([name, parent_index, {}, [], False])
            return self._own(len(self.spans) - 1, SPAN)

        def recording(h):
            self._get(h)
            return True

        def attribute(h, key, value):
            self.spans[self._get(h)][2][key] = value.value

        def event(h, name, attributes):
            self.spans[self._get(h)][3].append((name, {k: v.value for k, v in attributes}))

        def end(h):
            self.spans[self._get(h)][4] = True

        w = self._wrap
        li.add_func("[static]metric-family.create", w("metric-family.create", create))
        li.add_func("[method]metric-family.metric", w("metric-family.metric", metric))
        li.add_func("[method]metric.increment", w("metric.increment", increment))
        li.add_func("[method]metric.set", w("metric.set", set_))
        li.add_func("[method]metric.observe", w("metric.observe", observe))
        li.add_func("[method]metric.value", w("metric.value", value))
        li.add_func("[static]span.start", w("span.start", start))
        li.add_func("[method]span.is-recording", w("span.is-recording", recording))
        li.add_func("[method]span.set-attribute", w("span.set-attribute", attribute))
        li.add_func("[method]span.add-event", w("span.add-event", event))
        li.add_func("[method]span.end", w("span.end", end))

    def _input_rows(self, reqs, max_bytes):
        """Each request's inputs as `input-data` records, as request.read-inputs returns them."""
        out = []
        budget = 1 << 20  # the host's READ_INPUTS_MAX_TOTAL
        for req in reqs:
            row = []
            for t in req.inputs:
                data = None
                if len(t.data) <= max_bytes and len(t.data) <= budget:
                    data = t.data
                    budget -= len(t.data)
                    self.bytes_to_guest += len(t.data)
                row.append(_rec(name=t.name, datatype=t.datatype.lower(), shape=list(t.shape), data=data))
            out.append(row)
        return out

    # -- exports -------------------------------------------------------------------------------
    def _call(self, name, *args):
        f = self._f[name]
        out = f(self.store, *args)
        f.post_return(self.store)
        return out

    def initialize(self, config, name="m", version="1", json_text=None):
        import json
        args = _rec(**{
            "model-config": json_text if json_text is not None else json.dumps(config),
            "model-name": name, "model-version": version, "model-repository": "/models/" + name,
            "model-instance-kind": "CPU", "model-instance-name": name + "_0",
            "model-instance-device-id": "0",
        })
        err = self._call("initialize", args)
        if err is not None:
            raise GuestError(err.code, err.message)

    def execute(self, requests, export=None):
        """One result per request: a list of T, or a GuestError. Calls `execute-by-value` when
        the component exports it, as the host does, unless `export` names the export."""
        export = export or ("execute-by-value" if self._f["execute-by-value"] else "execute")
        self._call_requests = list(requests)
        self._given = [[] for _ in requests]
        self._given_tensors = [[] for _ in requests]
        if export == "execute-by-value":
            # each request as a pack of its inputs, up to 4 KiB each with their bytes while the
            # call's 1 MiB lasts, and no handle until the guest asks (request.at)
            budget = [1 << 20]
            packs = [pack(r.inputs, 4096, budget) for r in requests]
            self.bytes_to_guest += (1 << 20) - budget[0]
            self._pending = list(requests)
            args = (packs,)
        else:
            args = ([self._own(r, REQUEST) for r in requests],)
        try:
            results = self._call(export, *args)
        finally:
            given = [a + b for a, b in zip(self._given, self._given_tensors)]
            self._given, self._given_tensors, self._call_requests, self._pending = [], [], [], []
        out = []
        for i, r in enumerate(results):
            had = given[i] if i < len(given) else []
            if export == "execute-by-value":
                out.append(self._answered(r, had))
            elif isinstance(r, list):
                if not r:
                    self.empty_results += 1
                out.append(had + [self._take(h) for h in r])
            else:
                out.append(GuestError(r.code, r.message))
        return out

    def _answered(self, answer, given):
        """A request's outputs (or GuestError) from its execute-by-value answer, which
        wasmtime-py gives as the case's payload: a string (`outputs`, a pack), None (`given`) or
        a record (`error`)."""
        if answer is None:
            return list(given)
        if not isinstance(answer, str):
            return GuestError(answer.code, answer.message)
        unpacked = unpack(answer.encode("latin-1"))
        if isinstance(unpacked, str):
            return GuestError("invalid-arg", "malformed tensor pack: " + unpacked)
        if not unpacked:  # the SDK answers `given` instead
            self.empty_results += 1
        outputs = list(given)
        for o in unpacked:
            t = self._create_latin1(o.name, o.datatype.lower(), o.shape, o.data.decode("latin-1"))
            if not isinstance(t, cm.ResourceHost):  # the host checks each output and fails the request
                return GuestError(t.code, t.message)
            outputs.append(self._take(t))
        self.answered_by_value += 1
        return outputs

    def finalize(self):
        self._call("finalize")
