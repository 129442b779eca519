"""Triton's `tritonfrontend` on Tessera: network doors started on an in-process server.

`KServeHttp(server, KServeHttp.Options(port=...)).start()` opens the HTTP door of a
`tessera.tritonserver.Server`; `KServeGrpc` and `Metrics` likewise. `stop()` closes that door
alone (requests in flight finish); the server's `stop()` closes every door. Options Tessera
cannot apply per door raise `UnsupportedError` naming them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from tessera.tritonserver._errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
)


class _Frontend:
    _kind = ""
    _name = ""
    # Option -> Triton's default: anything else is refused (Tessera sets it server-wide or not at all).
    _fixed: dict = {}

    def __init__(self, server: Any, options: Optional[Any] = None):
        if options is None:
            options = self.Options()
        if not isinstance(options, self.Options):
            raise InvalidArgumentError(f"Incorrect type for options. options argument must be of type {self.Options}")
        for field, default in self._fixed.items():
            if getattr(options, field) != default:
                raise UnsupportedError(f"{type(self).__name__}.Options.{field} is not supported by Tessera per door")
        if not 0 <= options.port <= 65535:
            raise InvalidArgumentError(f"port {options.port} is out of range")
        self._server = server
        self._options = options
        self._door = None

    def start(self) -> None:
        if self._door is not None:
            raise AlreadyExistsError(f"{self._name} server is already running.")
        native = self._server._ptr()
        try:
            self._door = native.start_door(self._kind, self._options.address, self._options.port, None)
        except (RuntimeError, ValueError) as e:
            raise UnavailableError(str(e)) from None

    def stop(self) -> None:
        if self._door is None:
            raise UnavailableError(f"{self._name} server is not running.")
        door, self._door = self._door, None
        door.stop()

    @property
    def port(self) -> Optional[int]:
        """The port the door listens on (the one picked, with port 0)."""
        return None if self._door is None else self._door.port

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.stop()
        return False


class KServeHttp(_Frontend):
    @dataclasses.dataclass
    class Options:
        address: str = "0.0.0.0"
        port: int = 8000
        reuse_port: bool = False
        thread_count: int = 8
        header_forward_pattern: str = ""

    _kind = "http"
    _name = "HTTP"
    _fixed = {"reuse_port": False, "header_forward_pattern": ""}


class KServeGrpc(_Frontend):
    @dataclasses.dataclass
    class Options:
        address: str = "0.0.0.0"
        port: int = 8001
        reuse_port: bool = False
        use_ssl: bool = False
        server_cert: str = ""
        server_key: str = ""
        root_cert: str = ""
        use_mutual_auth: bool = False
        keepalive_time_ms: int = 7_200_000
        keepalive_timeout_ms: int = 20_000
        keepalive_permit_without_calls: bool = False
        http2_max_pings_without_data: int = 2
        http2_min_recv_ping_interval_without_data_ms: int = 300_000
        http2_max_ping_strikes: int = 2
        max_connection_age_ms: int = 0
        max_connection_age_grace_ms: int = 0
        infer_compression_level: int = 0
        infer_thread_count: int = 2
        infer_allocation_pool_size: int = 8
        max_response_pool_size: int = 2_147_483_647
        forward_header_pattern: str = ""

    _kind = "grpc"
    _name = "GRPC"
    _fixed = {
        "reuse_port": False,
        "use_ssl": False,
        "use_mutual_auth": False,
        "keepalive_time_ms": 7_200_000,
        "keepalive_timeout_ms": 20_000,
        "keepalive_permit_without_calls": False,
        "http2_max_pings_without_data": 2,
        "http2_min_recv_ping_interval_without_data_ms": 300_000,
        "http2_max_ping_strikes": 2,
        "max_connection_age_ms": 0,
        "max_connection_age_grace_ms": 0,
        "infer_compression_level": 0,
        "max_response_pool_size": 2_147_483_647,
        "forward_header_pattern": "",
    }


class Metrics(_Frontend):
    @dataclasses.dataclass
    class Options:
        address: str = "0.0.0.0"
        port: int = 8002
        thread_count: int = 1

    _kind = "metrics"
    _name = "Metrics"


__all__ = ["KServeHttp", "KServeGrpc", "Metrics"]
