"""PyTriton's `Triton` and `TritonConfig`, over Tessera's server running in this process.

The server runs in-process (no tritonserver binary, no Python stub processes, no ZMQ proxy) and
starts when `TritonLifecyclePolicy` says: entering the `with` block by default, else `run()`. A
bound callable is called from the server's threads with the batch Tessera's dynamic batcher
formed; inputs are numpy views of the request's bytes. docs/pytriton.md has the details.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
from typing import Any, Callable, List, Optional, Sequence, Union

import numpy as np

import tessera
from tessera._wire import deserialize_bytes, serialize_bytes
from tessera.pytriton.decorators import TritonContext, _outputs_dict, _rows_error, _set_context, batch_inner
from tessera.pytriton.exceptions import (
    PyTritonUnrecoverableError,
    PyTritonValidationError,
)
from tessera.pytriton.model_config import (
    NUMPY_OF_PROTOCOL,
    ModelConfig,
    Tensor,
    is_bytes_dtype,
    to_triton_config,
    triton_types,
)
from tessera.pytriton.proxy_types import Request

LOGGER = logging.getLogger("tessera.pytriton")


@dataclasses.dataclass
class TritonConfig:
    """PyTriton's TritonConfig. The fields Tessera has flags for are passed on; the others are
    refused when set (see `_UNSUPPORTED`). Every field can come from `PYTRITON_TRITON_CONFIG_<NAME>`."""

    model_repository: Optional[str] = None
    id: Optional[str] = None
    log_verbose: Optional[int] = None
    log_file: Optional[str] = None
    exit_timeout_secs: Optional[int] = None
    exit_on_error: Optional[bool] = None
    strict_readiness: Optional[bool] = None
    allow_http: Optional[bool] = None
    http_address: Optional[str] = None
    http_port: Optional[int] = None
    http_header_forward_pattern: Optional[str] = None
    http_thread_count: Optional[int] = None
    allow_grpc: Optional[bool] = None
    grpc_address: Optional[str] = None
    grpc_port: Optional[int] = None
    grpc_header_forward_pattern: Optional[str] = None
    grpc_infer_allocation_pool_size: Optional[int] = None
    grpc_use_ssl: Optional[bool] = None
    grpc_use_ssl_mutual: Optional[bool] = None
    grpc_server_cert: Optional[str] = None
    grpc_server_key: Optional[str] = None
    grpc_root_cert: Optional[str] = None
    grpc_infer_response_compression_level: Optional[str] = None
    grpc_keepalive_time: Optional[int] = None
    grpc_keepalive_timeout: Optional[int] = None
    grpc_keepalive_permit_without_calls: Optional[bool] = None
    grpc_http2_max_pings_without_data: Optional[int] = None
    grpc_http2_min_recv_ping_interval_without_data: Optional[int] = None
    grpc_http2_max_ping_strikes: Optional[int] = None
    allow_metrics: Optional[bool] = None
    allow_gpu_metrics: Optional[bool] = None
    allow_cpu_metrics: Optional[bool] = None
    metrics_interval_ms: Optional[int] = None
    metrics_port: Optional[int] = None
    metrics_address: Optional[str] = None
    allow_sagemaker: Optional[bool] = None
    sagemaker_port: Optional[int] = None
    sagemaker_safe_port_range: Optional[str] = None
    sagemaker_thread_count: Optional[int] = None
    allow_vertex_ai: Optional[bool] = None
    vertex_ai_port: Optional[int] = None
    vertex_ai_thread_count: Optional[int] = None
    vertex_ai_default_model: Optional[str] = None
    metrics_config: Optional[List[str]] = None
    trace_config: Optional[List[str]] = None
    cache_config: Optional[List[str]] = None
    cache_directory: Optional[str] = None
    buffer_manager_thread_count: Optional[int] = None
    backend_directory: Optional[str] = None
    repoagent_directory: Optional[str] = None

    @classmethod
    def from_env(cls) -> "TritonConfig":
        """Fields from `PYTRITON_TRITON_CONFIG_<FIELD>` environment variables; a list field from
        `<FIELD>_0`, `<FIELD>_1`, ... (as PyTriton), or `<FIELD>` as its only element."""
        prefix = "PYTRITON_TRITON_CONFIG_"
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict = {}
        indexed: dict = {}
        for name, raw in os.environ.items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix):].lower()
            base, _, index = key.rpartition("_")
            if index.isdigit() and "List" in str(fields.get(base, dataclasses.field()).type):
                indexed.setdefault(base, []).append((int(index), raw))
                continue
            field = fields.get(key)
            if field is None:
                LOGGER.warning("ignoring %s: TritonConfig has no field %s", name, key)
                continue
            kind = str(field.type)
            if "bool" in kind:
                values[key] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif "int" in kind:
                values[key] = int(raw)
            elif "List" in kind:
                # One value is one element: cache and trace settings contain commas themselves.
                values[key] = [raw]
            else:
                values[key] = raw
        for key, items in indexed.items():
            values[key] = [v for _, v in sorted(items)]
        return cls(**values)

    def merged_over(self, base: "TritonConfig") -> "TritonConfig":
        """This config's fields, falling back to `base`'s where unset (PyTriton layers explicit
        fields over the environment's)."""
        return dataclasses.replace(base, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                                            if getattr(self, f.name) is not None})

    def to_flags(self) -> List[str]:
        flags: List[str] = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if field.name in _UNSUPPORTED:
                raise PyTritonValidationError(
                    f"TritonConfig.{field.name} is not supported by Tessera: {_UNSUPPORTED[field.name]}")
            flag = "--" + field.name.replace("_", "-")
            if isinstance(value, list):
                for v in value:
                    flags += [flag, str(v)]
            elif isinstance(value, bool):
                flags += [flag, "true" if value else "false"]
            else:
                flags += [flag, str(value)]
        return flags


_UNSUPPORTED = {
    "log_file": "Tessera logs to stderr (redirect it, or use Python logging)",
    "grpc_infer_allocation_pool_size": "there is no allocation pool to size",
    "grpc_use_ssl": "TLS is not implemented yet",
    "grpc_use_ssl_mutual": "TLS is not implemented yet",
    "grpc_server_cert": "TLS is not implemented yet",
    "grpc_server_key": "TLS is not implemented yet",
    "grpc_root_cert": "TLS is not implemented yet",
    "grpc_keepalive_permit_without_calls": "not configurable in Tessera",
    "grpc_http2_max_pings_without_data": "not configurable in Tessera",
    "grpc_http2_min_recv_ping_interval_without_data": "not configurable in Tessera",
    "grpc_http2_max_ping_strikes": "not configurable in Tessera",
    "allow_sagemaker": "the SageMaker door is not implemented",
    "sagemaker_port": "the SageMaker door is not implemented",
    "sagemaker_safe_port_range": "the SageMaker door is not implemented",
    "sagemaker_thread_count": "the SageMaker door is not implemented",
    "allow_vertex_ai": "the Vertex AI door is not implemented",
    "vertex_ai_port": "the Vertex AI door is not implemented",
    "vertex_ai_thread_count": "the Vertex AI door is not implemented",
    "vertex_ai_default_model": "the Vertex AI door is not implemented",
    "buffer_manager_thread_count": "there is no buffer manager",
    "repoagent_directory": "repository agents are not implemented",
}


def _input_array(datatype: str, shape: List[int], data: Any) -> np.ndarray:
    dtype = NUMPY_OF_PROTOCOL.get(datatype)
    if dtype is not None:
        # A read-only view of the request's bytes: no copy.
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if datatype == "BYTES":
        return deserialize_bytes(data, shape)
    raise PyTritonValidationError(f"datatype {datatype} has no numpy equivalent")


class _BoundModel:
    def __init__(self, triton: "Triton", name: str, version: int, infer_funcs: List[Callable],
                 inputs: Sequence[Tensor], outputs: Sequence[Tensor], config: ModelConfig, strict: bool):
        self.triton = triton
        self.name = name
        self.version = version
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.config = config
        self.strict = strict
        self.output_specs = {t.name: t for t in outputs}
        # Per output: (is BYTES, numpy dtype, protocol datatype), computed once.
        self._output_types = {
            t.name: (True, None, "BYTES") if is_bytes_dtype(t.dtype) else (False, np.dtype(t.dtype),
                                                                          triton_types(t.dtype)[1])
            for t in outputs
        }
        # One callable per instance: instance threads take them from this pool. With a single
        # instance the scheduler runs one batch at a time, so it is called without the pool.
        self._only = infer_funcs[0] if len(infer_funcs) == 1 else None
        self._free = list(infer_funcs)
        # Callables whose outermost decorator is @batch, with no BYTES output, can take the whole
        # batch at once (execute_batched): the function @batch wraps, per callable.
        inner = {id(f): batch_inner(f) for f in infer_funcs}
        eligible = (not config.decoupled and all(inner.values())
                    and not any(is_bytes_dtype(t.dtype) for t in outputs))
        self._batch_inner = inner if eligible else None
        self._lock = threading.Condition()
        self.triton_config = to_triton_config(name, inputs, outputs, config, len(infer_funcs))

    def server_args(self) -> tuple:
        """What `tessera.Server` takes for this model: (name, version, config JSON, execute,
        execute_batched or None)."""
        function = self.execute_stream if self.config.decoupled else self.execute
        batched = self.execute_batched if self._batch_inner else None
        return self.name, self.version, json.dumps(self.triton_config), function, batched

    def _take(self) -> Callable:
        with self._lock:
            while not self._free:
                self._lock.wait()
            return self._free.pop()

    def _give(self, func: Callable) -> None:
        with self._lock:
            self._free.append(func)
            self._lock.notify()

    @staticmethod
    def _requests(batch: list) -> List[Request]:
        return [Request({name: _input_array(dt, shape, buf) for name, dt, shape, buf in inputs}, parameters,
                        requested)
                for inputs, requested, parameters in batch]

    def execute_stream(self, batch: list):
        """Decoupled models: the callable is a generator yielding, each time, a list with one
        response dict per request (None: no response for that request this time). Yields
        (request index, encoded response or error message) for the server to stream."""
        try:
            requests = self._requests(batch)
        except Exception as e:  # noqa: BLE001 - becomes the requests' error
            yield from ((i, str(e)) for i in range(len(batch)))
            return
        func = self._only if self._only is not None else self._take()
        try:
            for item in func(requests):
                if not isinstance(item, (list, tuple)) or len(item) != len(requests):
                    message = (f"model {self.name} yielded {type(item).__name__}; a decoupled model yields a list "
                               f"with one dict (or None) per request")
                    yield from ((i, message) for i in range(len(requests)))
                    return
                for i, (result, request) in enumerate(zip(item, requests)):
                    if result is not None:
                        yield i, self._encode(result, request)
        except PyTritonUnrecoverableError as e:
            self.triton._stop_soon()
            yield from ((i, f"Unrecoverable error in model {self.name}: {e}") for i in range(len(requests)))
        except Exception as e:  # noqa: BLE001 - a failing callable fails its requests only
            LOGGER.error("model %s failed", self.name, exc_info=True)
            yield from ((i, f"{type(e).__name__}: {e}") for i in range(len(requests)))
        finally:
            if self._only is None:
                self._give(func)

    def execute(self, batch: list) -> list:
        """Called by the server: `batch` is a list of (inputs, requested outputs, parameters)."""
        try:
            requests = self._requests(batch)
        except Exception as e:  # noqa: BLE001 - becomes the requests' error
            return [str(e)] * len(batch)
        func = self._only if self._only is not None else self._take()
        try:
            results = func(requests)
        except PyTritonUnrecoverableError as e:
            LOGGER.error("model %s raised PyTritonUnrecoverableError: stopping the server", self.name)
            self.triton._stop_soon()
            return [f"Unrecoverable error in model {self.name}: {e}"] * len(batch)
        except Exception as e:  # noqa: BLE001 - a failing callable fails its requests only
            LOGGER.error("model %s failed", self.name, exc_info=True)
            return [f"{type(e).__name__}: {e}"] * len(batch)
        finally:
            if self._only is None:
                self._give(func)
        if not isinstance(results, (list, tuple)) or len(results) != len(requests):
            n = len(results) if isinstance(results, (list, tuple)) else type(results).__name__
            return [f"model {self.name} returned {n} results for {len(requests)} requests "
                    f"(it must return a list with one dict per request)"] * len(batch)
        return [self._encode(result, request) for result, request in zip(results, requests)]

    def execute_batched(self, inputs: list, total: int, wanted: Optional[list]) -> Any:
        """The server's path for `@batch` callables: `inputs` are the batch's inputs already
        concatenated (`(name, datatype, shape, buffer)`, read-only views as for one request), the
        function `@batch` wraps is called once, and each output is returned for the whole batch
        (the server splits it per request). `wanted`: the outputs some request asked for (None:
        all). An error message (str) fails every request."""
        try:
            data = {name: _input_array(dt, shape, buf) for name, dt, shape, buf in inputs}
        except Exception as e:  # noqa: BLE001 - becomes the requests' error
            return str(e)
        func = self._only if self._only is not None else self._take()
        try:
            outputs = _outputs_dict(self._batch_inner[id(func)](**data), func)
        except PyTritonUnrecoverableError as e:
            LOGGER.error("model %s raised PyTritonUnrecoverableError: stopping the server", self.name)
            self.triton._stop_soon()
            return f"Unrecoverable error in model {self.name}: {e}"
        except Exception as e:  # noqa: BLE001 - a failing callable fails its requests only
            LOGGER.error("model %s failed", self.name, exc_info=True)
            return f"{type(e).__name__}: {e}"
        finally:
            if self._only is None:
                self._give(func)
        encoded = []
        for name, (_, expected, protocol) in self._output_types.items():
            if wanted is not None and name not in wanted:
                continue
            value = outputs.get(name)
            if value is None:
                return f"model {self.name} did not return output {name}"
            value = np.asarray(value)
            if value.ndim == 0 or value.shape[0] != total:
                return str(_rows_error(name, value, total))
            item = self._tensor(name, value, expected, protocol)
            if isinstance(item, str):
                return item
            encoded.append(item)
        return encoded

    def _tensor(self, name: str, value: np.ndarray, expected: np.dtype, protocol: str) -> Any:
        """An output as the server takes it, `(name, datatype, shape, bytes)`, converted to the
        bound dtype (refused instead with `strict`); or the error message."""
        if value.dtype != expected:
            if self.strict:
                return (f"output {name} of model {self.name} has dtype {value.dtype}, "
                        f"the model configuration says {expected}")
            value = value.astype(expected)
        if self.strict:
            dims = list(self.output_specs[name].shape)
            shape = list(value.shape[1:]) if self.config.batching else list(value.shape)
            if len(shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, shape)):
                return f"output {name} of model {self.name} has shape {value.shape}, expected {tuple(dims)}"
        # tobytes() gives C order whatever the array's layout.
        return name, protocol, list(value.shape), value.tobytes()

    def _encode(self, result: Any, request: Request) -> Any:
        if not isinstance(result, dict):
            return f"model {self.name} returned {type(result).__name__} for a request; expected a dict of arrays"
        encoded = []
        for name in request.requested_output_names or self.output_specs:
            types = self._output_types.get(name)
            if types is None:
                return f"unexpected output {name} for model {self.name}"
            value = result.get(name)
            if value is None:
                return f"model {self.name} did not return output {name}"
            value = np.asarray(value)
            is_bytes, expected, protocol = types
            if is_bytes:
                if value.dtype.kind not in ("O", "S", "U"):
                    return f"output {name} of model {self.name} must be bytes, got {value.dtype}"
                encoded.append((name, "BYTES", list(value.shape), serialize_bytes(value)))
                continue
            item = self._tensor(name, value, expected, protocol)
            if isinstance(item, str):
                return item
            encoded.append(item)
        return encoded


@dataclasses.dataclass
class TritonLifecyclePolicy:
    """PyTriton's lifecycle policy. `launch_triton_on_startup` (the default): the server starts
    when the `with` block is entered, and `bind()` serves a model at once; otherwise it starts
    in `run()`/`serve()` with every model bound so far. `local_model_store` is accepted and has
    no effect: bound models are never written to a model store."""

    launch_triton_on_startup: bool = True
    local_model_store: bool = False


DefaultTritonLifecyclePolicy = TritonLifecyclePolicy()

# PyTriton's endpoint names (Triton's restricted-API categories) and its default protection.
VALID_TRITON_ENDPOINTS = {"health", "metadata", "inference", "shared-memory", "model-config", "model-repository",
                          "statistics", "trace", "logging"}
DEFAULT_PROTECTED_ENDPOINTS = ["shared-memory", "model-repository", "statistics", "trace", "logging"]
TRITON_ACCESS_HEADER = "triton-access-token"


@dataclasses.dataclass
class TritonSecurityConfig:
    """PyTriton's token-based restriction: the `restricted_endpoints` (default: shared-memory,
    model-repository, statistics, trace, logging; `[]`: none) need the `triton-access-token`
    header equal to `access_token` (generated when not given). Passed to Tessera as Triton's
    `--http-restricted-api` and `--grpc-restricted-protocol`."""

    access_token: Optional[str] = None
    restricted_endpoints: Optional[List[str]] = None

    def __post_init__(self):
        if self.restricted_endpoints is None:
            self.restricted_endpoints = list(DEFAULT_PROTECTED_ENDPOINTS)
        # Triton refuses a category listed twice; a repeated name means the same here.
        self.restricted_endpoints = list(dict.fromkeys(self.restricted_endpoints))
        if self.access_token == "" and self.restricted_endpoints:
            raise PyTritonValidationError("access_token is empty: restricted endpoints need a token "
                                          "(leave it None to generate one)")
        invalid = set(self.restricted_endpoints) - VALID_TRITON_ENDPOINTS
        if invalid:
            raise PyTritonValidationError(
                f"Invalid endpoint names: {', '.join(sorted(invalid))}. "
                f"Valid endpoints are: {', '.join(sorted(VALID_TRITON_ENDPOINTS))}")
        if self.access_token is None and self.restricted_endpoints:
            # secrets.token_urlsafe(32), without importing secrets (hmac, random: import time).
            self.access_token = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()

    def to_flags(self) -> List[str]:
        if not (self.access_token and self.restricted_endpoints):
            return []
        value = f"{','.join(self.restricted_endpoints)}:{TRITON_ACCESS_HEADER}={self.access_token}"
        return ["--http-restricted-api", value, "--grpc-restricted-protocol", value]


class Triton:
    """PyTriton's Triton: bind callables and serve them, in this process. See
    `TritonLifecyclePolicy` for when the server starts."""

    def __init__(self, *, config: Optional[TritonConfig] = None, workspace: Any = None,
                 triton_lifecycle_policy: Optional[TritonLifecyclePolicy] = None,
                 security_config: Optional[TritonSecurityConfig] = None):
        # Explicit fields over PYTRITON_TRITON_CONFIG_* ones, as PyTriton.
        self._config = (config or TritonConfig()).merged_over(TritonConfig.from_env())
        self._config.to_flags()  # refuses unsupported fields now rather than at start
        self._policy = triton_lifecycle_policy or DefaultTritonLifecyclePolicy
        self._security = security_config or TritonSecurityConfig()
        self._workspace = _Workspace(workspace, self._policy.local_model_store)
        self._server: Optional[tessera.Server] = None
        self._models: List[_BoundModel] = []
        self._stop_event = threading.Event()

    def __enter__(self) -> "Triton":
        if self._policy.launch_triton_on_startup:
            self._start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def get_access_token(self) -> Optional[str]:
        """The token that restricted endpoints need in the `triton-access-token` header."""
        return self._security.access_token

    def bind(self, model_name: str, infer_func: Union[Callable, Sequence[Callable]], inputs: Sequence[Tensor],
             outputs: Sequence[Tensor], model_version: int = 1, config: Optional[ModelConfig] = None,
             strict: bool = False, trace_config: Any = None) -> None:
        if trace_config is not None:
            raise PyTritonValidationError("bind(trace_config=...) is not supported by Tessera: it has no "
                                          "OpenTelemetry tracing of Python callables")
        if not isinstance(model_version, int) or model_version < 1:
            raise PyTritonValidationError(f"model_version must be a positive integer, got {model_version!r}")
        config = config or ModelConfig()
        funcs = list(infer_func) if isinstance(infer_func, (list, tuple)) else [infer_func]
        if not funcs or not all(callable(f) for f in funcs):
            raise PyTritonValidationError("infer_func must be a callable or a list of callables")
        if any(m.name == model_name and m.version == model_version for m in self._models):
            raise PyTritonValidationError(f"model {model_name} version {model_version} is already bound")
        # PyTriton names unnamed tensors by position, from 1.
        inputs = [t if t.name else dataclasses.replace(t, name=f"INPUT_{i}") for i, t in enumerate(inputs, 1)]
        outputs = [t if t.name else dataclasses.replace(t, name=f"OUTPUT_{i}") for i, t in enumerate(outputs, 1)]
        model = _BoundModel(self, model_name, model_version, funcs, inputs, outputs, config, strict)
        for f in funcs:
            _attach_context(f, model)
        if self._server is not None:
            self._server.bind(model.server_args())
        self._models.append(model)
        self._workspace.store(model)

    def _start(self) -> None:
        if self._server is not None:
            return
        flags = self._config.to_flags() + self._security.to_flags()
        # Models bound so far are served before the repository loads, so its ensembles can use them.
        # A repository ensemble may use models bound after the start: it waits for them.
        self._server = tessera.Server(flags, [m.server_args() for m in self._models], wait_for_bound=True)

    def run(self) -> None:
        """Starts the server in this process (if it is not running) and returns at once."""
        self._start()

    def serve(self, monitoring_period_s: float = 1.0) -> None:
        """Runs until SIGINT/SIGTERM or `stop()`."""
        self.run()
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_: self._stop_event.set())
        try:
            while not self._stop_event.wait(monitoring_period_s):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()

    def _stop_soon(self) -> None:
        """From a model function: the doors close now (is_alive() turns False, serve() returns);
        the server is torn down by stop(), on the thread that owns it."""
        self._stop_event.set()
        server = self._server
        if server is not None:
            server.request_stop()

    def stop(self) -> bool:
        self._stop_event.set()
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        self._workspace.clean()
        return True

    def is_alive(self) -> bool:
        return self._server is not None and self._server.is_alive()

    @property
    def http_port(self) -> Optional[int]:
        return self._server.http_port if self._server else None

    @property
    def grpc_port(self) -> Optional[int]:
        return self._server.grpc_port if self._server else None

    @property
    def metrics_port(self) -> Optional[int]:
        return self._server.metrics_port if self._server else None


class _Workspace:
    """PyTriton's workspace. A given path is created and kept; with `local_model_store` each
    bound model's config.pbtxt is written to `<workspace>/model-store/<model>/`, as PyTriton
    writes it (in a temporary workspace, removed at stop, when no path is given). Tessera needs
    neither sockets nor a model store there: bound models are served from memory."""

    def __init__(self, workspace: Any, local_model_store: bool):
        self._temporary = workspace is None and local_model_store
        if workspace is None and not local_model_store:
            self.path = None
            return
        if self._temporary:
            self.path = tempfile.mkdtemp(prefix="workspace_")
        else:
            self.path = os.fspath(getattr(workspace, "path", workspace))
            os.makedirs(self.path, exist_ok=True)
        self.model_store = os.path.join(self.path, "model-store") if local_model_store else None
        if self.model_store:
            os.makedirs(self.model_store, exist_ok=True)

    def store(self, model: "_BoundModel") -> None:
        if self.path is None or self.model_store is None:
            return
        from google.protobuf import json_format, text_format
        from tritonclient.grpc import model_config_pb2

        config = json_format.ParseDict(model.triton_config, model_config_pb2.ModelConfig())
        directory = os.path.join(self.model_store, model.name)
        os.makedirs(os.path.join(directory, str(model.version)), exist_ok=True)
        with open(os.path.join(directory, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(text_format.MessageToString(config))

    def clean(self) -> None:
        if self._temporary and self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


def _attach_context(func: Callable, model: _BoundModel) -> None:
    """What `@triton_context` reads: the model's configuration."""
    _set_context(func, TritonContext(model_config=model))


class RemoteTriton:
    """PyTriton's remote mode (binding models into a Triton server another process runs) is
    refused: Tessera serves a callable only inside the process that runs the server, with no
    proxy process or socket between them (docs/pytriton.md)."""

    def __init__(self, url: str, workspace: Any = None, triton_lifecycle_policy: Any = None,
                 access_token: Optional[str] = None):
        raise PyTritonValidationError(
            "RemoteTriton is not supported by Tessera: callables are served only by the server running in their "
            "own process. Bind them with Triton(...) in that process, or serve a model repository.")
