"""`Options` and `Server`: Triton's in-process server, backed by Tessera's server library.

`Server.start()` starts the server in this process with no network door: requests go through
`Model.infer` (see `_model.py`), and HTTP/gRPC/metrics doors start only through
`tessera.tritonfrontend`, as Triton's `tritonfrontend` starts them. Options are turned into the
flags `tessera serve` takes; those Tessera cannot honour raise `UnsupportedError` at `start()`,
naming the field (docs/tritonserver.md lists them).
"""

from __future__ import annotations

import dataclasses
import json
import time
import weakref
from typing import Annotated, Any, Optional, Union

import tessera._tessera as _native
from tessera.tritonserver._enums import (
    InstanceGroupKind,
    LogFormat,
    MetricFormat,
    ModelControlMode,
    RateLimitMode,
)
from tessera.tritonserver._errors import (
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
    translated,
)
from tessera.tritonserver._model import Model

uint = Annotated[int, "unsigned"]


@dataclasses.dataclass(slots=True)
class RateLimiterResource:
    name: str
    count: uint
    device: uint


@dataclasses.dataclass(slots=True)
class ModelLoadDeviceLimit:
    kind: InstanceGroupKind
    device: uint
    fraction: float


@dataclasses.dataclass(slots=True)
class Options:
    """Triton's `tritonserver.Options`, field for field, with Triton's defaults."""

    model_repository: Union[str, list] = dataclasses.field(default_factory=list)
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: list = dataclasses.field(default_factory=list)
    strict_model_config: bool = False
    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: list = dataclasses.field(default_factory=list)
    pinned_memory_pool_size: uint = 1 << 28
    cuda_memory_pool_sizes: dict = dataclasses.field(default_factory=dict)
    cache_config: dict = dataclasses.field(default_factory=dict)
    cache_directory: str = "/opt/tritonserver/caches"
    min_supported_compute_capability: float = 6.0
    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout: uint = 30
    buffer_manager_thread_count: uint = 0
    model_load_thread_count: uint = 4
    model_load_retry_count: uint = 0
    model_namespacing: bool = False
    enable_peer_access: bool = True
    log_file: Optional[str] = None
    log_info: bool = False
    log_warn: bool = False
    log_error: bool = False
    log_format: LogFormat = LogFormat.DEFAULT
    log_verbose: uint = 0
    metrics: bool = True
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    metrics_interval: uint = 2000
    backend_directory: str = "/opt/tritonserver/backends"
    repo_agent_directory: str = "/opt/tritonserver/repoagents"
    model_load_device_limits: list = dataclasses.field(default_factory=list)
    backend_configuration: dict = dataclasses.field(default_factory=dict)
    host_policies: dict = dataclasses.field(default_factory=dict)
    metrics_configuration: dict = dataclasses.field(default_factory=dict)


# Options Tessera has nothing to apply to: refused (when not at Triton's default) with the reason.
_REFUSED = {
    "pinned_memory_pool_size": "Tessera allocates no pinned-memory pool",
    "cuda_memory_pool_sizes": "Tessera allocates no CUDA memory pool",
    "min_supported_compute_capability": "Tessera does not filter GPUs by compute capability",
    "buffer_manager_thread_count": "Tessera has no buffer-manager threads",
    "model_load_retry_count": "Tessera does not retry failed loads",
    "model_namespacing": "model namespacing is not implemented",
    "log_file": "Tessera logs to stderr (redirect it, or use Python logging)",
    "repo_agent_directory": "repository agents are not implemented",
    "model_load_device_limits": "Tessera has no per-device load limits",
    "host_policies": "host policies are not implemented",
    "backend_configuration": "Tessera's backends are built in and take their settings from each model's config",
}
_DEFAULTS = Options()


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _flags(options: Options) -> list:
    """The `tessera serve` flags for these options, with no network door."""
    for name, reason in _REFUSED.items():
        if getattr(options, name) != getattr(_DEFAULTS, name):
            raise UnsupportedError(f"Options.{name} is not supported by Tessera: {reason}")
    repositories = options.model_repository
    if isinstance(repositories, str):
        repositories = [repositories]
    if not repositories:
        raise InvalidArgumentError("Options.model_repository must name at least one model repository")
    flags = ["--allow-http", "false", "--allow-grpc", "false", "--allow-metrics", "false"]
    for repository in repositories:
        flags += ["--model-repository", str(repository)]
    flags += ["--id", options.server_id]
    flags += ["--model-control-mode", ModelControlMode(options.model_control_mode).name.lower()]
    for model in options.startup_models:
        flags += ["--load-model", model]
    flags += ["--strict-model-config", _bool(options.strict_model_config)]
    if options.rate_limiter_mode == RateLimitMode.EXEC_COUNT:
        flags += ["--rate-limit", "execution_count"]
    for resource in options.rate_limiter_resources:
        flags += ["--rate-limit-resource", f"{resource.name}:{resource.count}:{resource.device}"]
    for cache, settings in options.cache_config.items():
        for setting, value in settings.items():
            flags += ["--cache-config", f"{cache},{setting}={value}"]
    flags += ["--exit-on-error", _bool(options.exit_on_error)]
    flags += ["--strict-readiness", _bool(options.strict_readiness)]
    flags += ["--exit-timeout-secs", str(options.exit_timeout)]
    flags += ["--model-load-thread-count", str(options.model_load_thread_count)]
    flags += ["--enable-peer-access", _bool(options.enable_peer_access)]
    # Triton cascades the levels: verbose turns on info, info warnings, warnings errors.
    log_info = options.log_info or options.log_verbose > 0
    log_warn = options.log_warn or log_info
    log_error = options.log_error or log_warn
    flags += ["--log-info", _bool(log_info), "--log-warning", _bool(log_warn), "--log-error", _bool(log_error)]
    flags += ["--log-verbose", str(options.log_verbose)]
    flags += ["--log-format", "ISO8601" if options.log_format == LogFormat.ISO8601 else "default"]
    flags += ["--allow-cpu-metrics", _bool(options.metrics and options.cpu_metrics)]
    flags += ["--allow-gpu-metrics", _bool(options.metrics and options.gpu_metrics)]
    flags += ["--metrics-interval-ms", str(options.metrics_interval)]
    for group, settings in options.metrics_configuration.items():
        for setting, value in settings.items():
            flags += ["--metrics-config", f"{group},{setting}={value}" if group else f"{setting}={value}"]
    return flags


class ModelDictionary(dict):
    """`Server.models()`: `Model`s keyed by `(name, version)`; a plain name looks up too."""

    def __init__(self, server: "Server", models: list):
        super().__init__({(m.name, m.version): m for m in models})
        self._server = server
        self._names = {m.name for m in models}

    def __getitem__(self, key: Any) -> Model:
        if isinstance(key, str):
            if key in self._names:
                return Model(self._server, key)
            raise KeyError(f"Unknown Model: {key}")
        try:
            return super().__getitem__(key)
        except KeyError:
            raise KeyError(f"Unknown Model: {key}") from None

    def __str__(self) -> str:
        return str({key: str(model) for key, model in self.items()})


class Server:
    """Triton's `tritonserver.Server`: `Server(options)` or `Server(**option_fields)`."""

    def __init__(self, options: Optional[Options] = None, **kwargs: Any):
        self.options = options if options is not None else Options(**kwargs)
        self._native = None
        self._door = None
        # Requests whose responses the server delivers (async_infer, response queues), to end
        # any still open when the server stops.
        self._delivering: "weakref.WeakSet" = weakref.WeakSet()

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, wait_until_ready: bool = False, polling_interval: float = 0.1, timeout: Optional[float] = None):
        if self._native is not None:
            raise InvalidArgumentError("Server already started")
        flags = _flags(self.options)
        try:
            self._native = _native.Server(flags)
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from None
        except RuntimeError as e:
            raise InternalError(str(e)) from None
        self._door = self._native.in_process()
        if wait_until_ready:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._door.ready():
                if deadline is not None and time.monotonic() >= deadline:
                    raise UnavailableError("Timeout before ready")
                time.sleep(polling_interval)
        return self

    def stop(self) -> None:
        native, self._native, self._door = self._native, None, None
        if native is None:
            raise InvalidArgumentError("Server not started")
        try:
            native.stop()
        except RuntimeError as e:
            raise InternalError(str(e)) from None
        finally:
            for iterator in list(self._delivering):
                iterator._deliver(UnavailableError("the server stopped before the request finished"), True)
            self._delivering = weakref.WeakSet()

    def _started(self):
        if self._door is None:
            raise InvalidArgumentError("Server not started")
        return self._door

    # --- health and metadata ---------------------------------------------------------------------

    def live(self) -> bool:
        return self._started().live()

    def ready(self) -> bool:
        return self._started().ready()

    def metadata(self) -> dict:
        return json.loads(self._started().metadata())

    def metrics(self, metric_format: MetricFormat = MetricFormat.PROMETHEUS) -> str:
        door = self._started()
        if not self.options.metrics:
            raise UnsupportedError("metrics not supported")
        if metric_format != MetricFormat.PROMETHEUS:
            raise InvalidArgumentError(f"unsupported metric format {metric_format}")
        return door.metrics()

    # --- models ----------------------------------------------------------------------------------

    def model(self, model_name: str, model_version: int = -1) -> Model:
        self._started()
        return Model(self, model_name, model_version)

    def models(self, exclude_not_ready: bool = False) -> ModelDictionary:
        index = json.loads(self._started().index(exclude_not_ready))
        models = [
            Model(self, e["name"], int(e.get("version", -1)), e.get("state"), e.get("reason")) for e in index
        ]
        return ModelDictionary(self, models)

    def load(self, model_name: str, parameters: Optional[dict] = None) -> Model:
        """Loads (or reloads) a model, explicit control mode only. `parameters` as Triton's:
        `{"config": json_text}` overrides config.pbtxt, `{"file:<path>": bytes}` supplies files."""
        door = self._started()
        config, files = None, []
        for key, value in (parameters or {}).items():
            if key == "config":
                if not isinstance(value, str):
                    raise InvalidArgumentError("load parameter 'config' must be a JSON string")
                config = value
            elif key.startswith("file:"):
                if not isinstance(value, (bytes, bytearray)):
                    raise InvalidArgumentError(f"load parameter '{key}' must be bytes")
                files.append((key[len("file:") :], bytes(value)))
            elif type(value) in (str, int, bool, bytes):
                raise UnsupportedError(f"load parameter '{key}' is not supported by Tessera")
            else:
                raise InvalidArgumentError(f"Unsupported load parameter type {type(value).__name__} for '{key}'")
        with translated():
            door.load(model_name, config, files)
        return self.model(model_name)

    def unload(
        self,
        model: Union[str, Model],
        unload_dependents: bool = False,
        wait_until_unloaded: bool = False,
        polling_interval: float = 0.1,
        timeout: Optional[float] = None,
    ) -> None:
        """Unloads a model (and, with `unload_dependents`, the ensembles using it). Tessera's
        unload has finished when this returns, so `wait_until_unloaded` has nothing to wait for."""
        name = model.name if isinstance(model, Model) else model
        with translated():
            self._started().unload(name, unload_dependents)

    def register_model_repository(self, repository_path: str, name_mapping: Optional[dict] = None) -> None:
        raise UnsupportedError("registering model repositories at run time is not supported by Tessera")

    def unregister_model_repository(self, repository_path: str) -> None:
        raise UnsupportedError("registering model repositories at run time is not supported by Tessera")

    def poll_model_repository(self) -> None:
        raise UnsupportedError(
            "polling on demand is not supported by Tessera: POLL mode rescans every --repository-poll-secs"
        )

    def _ptr(self) -> Any:
        """The native server (`tessera.tritonfrontend` starts its doors on it)."""
        if self._native is None:
            raise InvalidArgumentError("Server not started")
        return self._native


class Metric:
    """Triton's server-side custom metrics: not offered in-process by Tessera."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise UnsupportedError(
            "tritonserver.Metric is not supported by Tessera; models define metrics through pb_utils.MetricFamily"
        )


class MetricFamily(Metric):
    pass
