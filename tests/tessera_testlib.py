"""Shared helpers for Tessera's integration tests: starting the real server binary, waiting on it,
raw-HTTP and gRPC helpers, guest builds. The model-repository builders (tessera_repos) and the
expected (Triton-compatible) error codes (tessera_errors) are re-exported from here.

Everything talks to 127.0.0.1 only. Waiting is always a bounded polling loop with a deadline.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

# Re-exported: the tests import everything from tessera_testlib.
from tessera_errors import (  # noqa: F401
    BAD_REQUEST,
    EXPECT,
    INTERNAL,
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    UNAVAILABLE,
    assert_error,
    error_message,
)
from tessera_repos import (  # noqa: F401
    FAULTY_CONFIG,
    FAULTY_GUEST,
    QUICKSTART,
    REPEAT_CONFIG,
    REPO_ROOT,
    add_sub_config,
    add_version_dir,
    copy_faulty,
    copy_model,
    ensemble_config,
    is_ensemble,
    quickstart_models,
    quickstart_repo,
    remove_tree_atomic,
    slow_identity_config,
    write_atomic,
    write_config_model,
    write_onnx_model,
    write_string_identity,
)

DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "tessera"

# Deadlines (seconds). Generous: a debug build on a 2-core machine under load.
# A server binds its doors once its startup models are loaded: a cold one compiles its guests
# first (and builds its model.py models when their cache is cold).
STARTUP_DEADLINE = 180.0
SHUTDOWN_DEADLINE = 20.0
READY_DEADLINE = 60.0
POLL_MODE_DEADLINE = 45.0

PANIC_MARKER = "panicked"
# A panicking WebAssembly guest is the sandbox doing its job, not a server panic: the server logs it
# as "guest panicked at FILE:LINE: MESSAGE" (the guest SDK's panic hook). Anything else saying
# "panicked" (Rust's "thread '...' panicked at", "model instance panicked ...") is the server's.
HOST_PANIC = re.compile(r"(?<!guest )" + PANIC_MARKER)


# ---------------------------------------------------------------------------------------------
# Binary / environment
# ---------------------------------------------------------------------------------------------

def tessera_bin() -> Path:
    """Path of the server binary (TESSERA_BIN or target/debug/tessera); fails the test clearly if absent."""
    p = Path(os.environ.get("TESSERA_BIN", str(DEFAULT_BIN)))
    if not p.is_file():
        pytest.fail(
            f"Tessera binary not found at {p}. Build it (cargo build) or set TESSERA_BIN to its path.",
            pytrace=False,
        )
    if not os.access(p, os.X_OK):
        pytest.fail(f"Tessera binary {p} is not executable.", pytrace=False)
    return p


def server_env(extra: dict | None = None) -> dict:
    """The environment for the server: ours, minus TESSERA_* settings (the CLI reads e.g.
    TESSERA_MODEL_CONTROL_MODE from the environment, which would silently change what a test runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_") or k == "TESSERA_BIN"}
    env.setdefault("RUST_BACKTRACE", "1")
    if extra:
        env.update(extra)
    return env


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (bind port 0, read it back, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """n distinct free ports (all sockets held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def assert_no_panic(text: str, what: str = "server") -> None:
    m = HOST_PANIC.search(text)
    assert m is None, f"{what} panicked:\n{tail(text[:m.end() + 4000] if m else text)}"


def tail(text: str, n: int = 60) -> str:
    lines = text.splitlines()
    return "\n".join(lines[-n:])


# ---------------------------------------------------------------------------------------------
# Server process
# ---------------------------------------------------------------------------------------------

@dataclass
class TesseraServer:
    process: subprocess.Popen
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    argv: list[str]
    # Log offset already checked for panics (per-test attribution on shared servers).
    checked_offset: int = 0
    stopped: bool = False
    returncode: int | None = None

    # tritonclient wants "host:port" without a scheme.
    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def port(self) -> int:
        return self.http_port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def http(self, path: str) -> str:
        return self.base_url + path

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def is_running(self) -> bool:
        return self.process.poll() is None

    def assert_alive(self) -> None:
        rc = self.process.poll()
        assert rc is None, f"server exited unexpectedly with code {rc}; log tail:\n{tail(self.log_text())}"
        r = requests.get(self.http("/v2/health/live"), timeout=10)
        assert r.status_code == 200, f"/v2/health/live answered {r.status_code}"

    def assert_no_new_panic(self) -> None:
        text = self.log_text()
        new = text[self.checked_offset:]
        self.checked_offset = len(text)
        assert_no_panic(new)

    def wait_live(self, deadline: float = STARTUP_DEADLINE) -> None:
        end = time.monotonic() + deadline
        last_err = None
        while time.monotonic() < end:
            rc = self.process.poll()
            if rc is not None:
                raise ServerExited(rc, self.log_text())
            try:
                r = requests.get(self.http("/v2/health/live"), timeout=2)
                if r.status_code == 200:
                    return
                last_err = f"HTTP {r.status_code}"
            except requests.RequestException as e:
                last_err = repr(e)
            time.sleep(0.05)
        pytest.fail(
            f"server did not become live within {deadline}s (last: {last_err}); argv={self.argv}\n"
            f"log tail:\n{tail(self.log_text())}",
            pytrace=False,
        )

    def mark_stopped(self, rc: int) -> None:
        """The test ended the process itself (e.g. a signal test): teardown only checks for panics."""
        self.stopped = True
        self.returncode = rc

    def stop(self) -> int:
        """SIGTERM, wait (bounded), SIGKILL as a last resort. Returns the exit code."""
        if self.stopped:
            return self.returncode  # type: ignore[return-value]
        self.stopped = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=SHUTDOWN_DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                self.returncode = self.process.returncode
                raise AssertionError(
                    f"server did not exit within {SHUTDOWN_DEADLINE}s of SIGTERM (killed)\n"
                    f"log tail:\n{tail(self.log_text())}"
                )
        self.returncode = self.process.returncode
        return self.returncode

    def stop_and_check(self, expect_running: bool = True) -> None:
        """Teardown check: it was still running (did not crash), shuts down on SIGTERM, never panicked."""
        if self.stopped:  # the test stopped it on purpose (and checked how)
            assert_no_panic(self.log_text())
            return
        crashed_rc = self.process.poll()
        rc = self.stop()
        text = self.log_text()
        assert_no_panic(text)
        if expect_running:
            assert crashed_rc is None, (
                f"server had already exited (code {crashed_rc}) before teardown; log tail:\n{tail(text)}"
            )
        if expect_running:
            # A graceful shutdown exits 0; dying of the SIGTERM itself is tolerated. Anything else
            # (a fatal signal such as SIGSEGV/SIGABRT, or an error exit) means it broke on shutdown.
            assert rc in (0, -signal.SIGTERM, 128 + signal.SIGTERM), (
                f"server exited with code {rc} on SIGTERM; log tail:\n{tail(text)}"
            )


class ServerExited(Exception):
    def __init__(self, rc: int, log: str):
        super().__init__(f"server exited during startup with code {rc}; log tail:\n{tail(log)}")
        self.rc = rc
        self.log = log


def build_argv(
    bin_path: Path,
    repos: Sequence[Path | str],
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    extra_args: Sequence[str] = (),
    subcommand: str | None = "serve",
    triton_style: bool = False,
    repo_flag: str = "--model-repository",
) -> list[str]:
    argv = [str(bin_path)]
    if subcommand:
        argv.append(subcommand)

    def opt(name: str, value) -> list[str]:
        return [f"{name}={value}"] if triton_style else [name, str(value)]

    for r in repos:
        argv += opt(repo_flag, r)
    argv += opt("--http-address", "127.0.0.1")
    argv += opt("--http-port", http_port)
    argv += opt("--grpc-port", grpc_port)
    argv += opt("--metrics-port", metrics_port)
    # Tests opt in to client shared memory (off by default, as in Triton 2.7x), unless they say.
    if subcommand == "serve" and not any(str(a).startswith("--allow-client-shm") for a in extra_args):
        argv += opt("--allow-client-shm", "true")
    argv += list(extra_args)
    return argv


def start_server(
    log_dir: Path,
    repos: Sequence[Path | str],
    extra_args: Sequence[str] = (),
    *,
    bin_path: Path | None = None,
    subcommand: str | None = "serve",
    triton_style: bool = False,
    repo_flag: str = "--model-repository",
    wait: bool = True,
    env: dict | None = None,
    name: str = "tessera",
    deadline: float = STARTUP_DEADLINE,
    ready: Sequence[str] = (),
    ready_deadline: float | None = None,
) -> TesseraServer:
    """Start the real binary on free ports and (by default) wait until /v2/health/live answers 200,
    then until each model in `ready` is ready (`ready_deadline`, READY_DEADLINE by default).

    A server that is not live or whose models are not ready in time is killed before the failure
    is raised: nothing else would stop it. Retries on a different set of ports when the process
    dies complaining that an address is in use (another process grabbed a port between our probe
    and the server's bind)."""
    bin_path = bin_path or tessera_bin()
    log_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        http_port, grpc_port, metrics_port = free_ports(3)
        argv = build_argv(
            bin_path, repos, http_port, grpc_port, metrics_port, extra_args,
            subcommand=subcommand, triton_style=triton_style, repo_flag=repo_flag,
        )
        log_path = log_dir / f"{name}-{http_port}.log"
        with open(log_path, "wb") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=server_env(env), cwd=str(log_dir),
            )
        srv = TesseraServer(proc, http_port, grpc_port, metrics_port, log_path, argv)
        if not wait:
            return srv
        try:
            srv.wait_live(deadline)
            for model in ready:
                wait_model_ready(srv, model, deadline=ready_deadline or READY_DEADLINE)
            return srv
        except ServerExited as e:
            if re.search(r"address (already )?in use|already in use", e.log, re.I) and attempt < 2:
                continue
            pytest.fail(f"{e}\nargv={argv}", pytrace=False)
        except BaseException:
            # not live or not ready within the deadline (pytest.fail), or the test interrupted:
            # the server started here must not outlive it
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            srv.mark_stopped(proc.returncode)
            raise
    raise AssertionError("unreachable")


def run_cli(args: Sequence[str], timeout: float = 30, bin_path: Path | None = None) -> subprocess.CompletedProcess:
    """Run the binary to completion (for --help, bad flags, ...); bounded by timeout."""
    argv = [str(bin_path or tessera_bin()), *args]
    try:
        cp = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, env=server_env(),
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{argv} did not exit within {timeout}s (stdout={e.stdout!r}, stderr={e.stderr!r})",
                    pytrace=False)
    assert_no_panic(cp.stdout + cp.stderr, what=" ".join(argv))
    return cp


# ---------------------------------------------------------------------------------------------
# Polling helpers
# ---------------------------------------------------------------------------------------------

def wait_until(pred: Callable[[], bool], deadline: float, what: str, server: TesseraServer | None = None,
               interval: float = 0.1) -> None:
    """Bounded polling: pred() is retried until it is true or the deadline passes. Exceptions raised by
    pred (a request failing while a model reloads, ...) count as 'not yet'; the last one is reported."""
    end = time.monotonic() + deadline
    last_exc = None
    while time.monotonic() < end:
        if server is not None and not server.is_running():
            pytest.fail(f"server exited (code {server.process.poll()}) while waiting until {what}; "
                        f"log tail:\n{tail(server.log_text())}", pytrace=False)
        try:
            if pred():
                return
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - transient failures while polling
            last_exc = e
        time.sleep(interval)
    msg = f"timed out after {deadline}s waiting until {what}"
    if last_exc is not None:
        msg += f" (last error: {last_exc!r})"
    if server is not None:
        msg += f"; log tail:\n{tail(server.log_text())}"
    pytest.fail(msg, pytrace=False)


def connection_refused(port: int) -> bool:
    """Whether a TCP connect to 127.0.0.1:port is refused (nothing listens there)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def model_ready(server: TesseraServer, model: str, version: str | int | None = None) -> bool:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version not in (None, "") else "") + "/ready"
    return requests.get(server.http(path), timeout=10).status_code == 200


def wait_model_ready(server: TesseraServer, model: str, version=None, deadline: float = READY_DEADLINE) -> None:
    v = f" version {version}" if version else ""
    wait_until(lambda: model_ready(server, model, version), deadline, f"model '{model}'{v} is ready", server)


def wait_model_not_ready(server: TesseraServer, model: str, version=None, deadline: float = READY_DEADLINE) -> None:
    v = f" version {version}" if version else ""
    wait_until(lambda: not model_ready(server, model, version), deadline,
               f"model '{model}'{v} is no longer ready", server)


def repository_index(server: TesseraServer, body: dict | None = None) -> list[dict]:
    r = requests.post(server.http("/v2/repository/index"), data=json.dumps(body or {}), timeout=10)
    assert r.status_code == 200, f"repository index: HTTP {r.status_code}: {r.text}"
    idx = r.json()
    assert isinstance(idx, list), f"repository index is not a JSON array: {idx!r}"
    return idx


def index_entries(index: list[dict], model: str) -> list[dict]:
    return [e for e in index if e.get("name") == model]


# ---------------------------------------------------------------------------------------------
# Raw HTTP helpers
# ---------------------------------------------------------------------------------------------

SIMPLE_IN0 = list(range(16))
SIMPLE_IN1 = [1] * 16


def simple_infer_inputs(client_lib) -> list:
    """The `simple` model's inputs SIMPLE_IN0 and SIMPLE_IN1, for tritonclient.http or .grpc."""
    inputs = [client_lib.InferInput("INPUT0", [1, 16], "INT32"), client_lib.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(np.array([SIMPLE_IN0], dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array([SIMPLE_IN1], dtype=np.int32))
    return inputs


def assert_error_then_serves(server: TesseraServer, resp: requests.Response, status: int | Iterable[int],
                             *needles: str, any_of: Sequence[str] = ()) -> str:
    """assert_error on `resp`, then assert_serves: the error left the server serving. The message."""
    msg = assert_error(resp, status, *needles, any_of=any_of)
    assert_serves(server)
    return msg


def assert_simple_infers(server: TesseraServer, client_lib, **infer_options) -> None:
    """One inference of `simple` over tritonclient.http or .grpc (`infer_options`, e.g. a
    compression_algorithm, go to infer()): OUTPUT0 is INPUT0 + INPUT1."""
    grpc = client_lib.__name__.endswith("grpc")
    client = client_lib.InferenceServerClient(f"127.0.0.1:{server.grpc_port if grpc else server.http_port}")
    try:
        result = client.infer("simple", simple_infer_inputs(client_lib), **infer_options)
        expected = np.array([SIMPLE_IN0], dtype=np.int32) + np.array([SIMPLE_IN1], dtype=np.int32)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
    finally:
        client.close()


def assert_serves_grpc(server: TesseraServer) -> None:
    """`simple` answers a deflate-compressed gRPC request."""
    assert_simple_infers(server, grpcclient, compression_algorithm="deflate")


def status_kib(server: TesseraServer, field: str) -> int:
    """A size field of the server's /proc/PID/status in KiB (VmRSS: resident set; VmHWM: its peak)."""
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{server.process.pid}/status")


def simple_json_request(in0=None, in1=None, batch: int = 1, **top) -> dict:
    in0 = SIMPLE_IN0 if in0 is None else in0
    in1 = SIMPLE_IN1 if in1 is None else in1
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [batch, 16], "datatype": "INT32", "data": in0 * batch},
            {"name": "INPUT1", "shape": [batch, 16], "datatype": "INT32", "data": in1 * batch},
        ]
    }
    body.update(top)
    return body


def post_infer(server: TesseraServer, model: str, body, *, version=None, headers=None, timeout=30):
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "") + "/infer"
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json"}
    else:
        data = body
        hdrs = {}
    hdrs.update(headers or {})
    return requests.post(server.http(path), data=data, headers=hdrs, timeout=timeout)


def assert_serves(server: TesseraServer) -> None:
    """A good request right after a bad one: the server still answers correctly."""
    server.assert_alive()
    r = post_infer(server, "simple", simple_json_request())
    assert r.status_code == 200, f"good request after a bad one failed: HTTP {r.status_code}: {r.text}"
    outs = {o["name"]: o for o in r.json()["outputs"]}
    assert outs["OUTPUT0"]["data"] == [a + b for a, b in zip(SIMPLE_IN0, SIMPLE_IN1)]
    assert outs["OUTPUT1"]["data"] == [a - b for a, b in zip(SIMPLE_IN0, SIMPLE_IN1)]


# ---------------------------------------------------------------------------------------------
# WebAssembly guests
# ---------------------------------------------------------------------------------------------

# componentize-py takes ~8-20 s per Python guest (two at once on two cores: allow for both).
GUEST_BUILD_DEADLINE = 240.0


class GuestBuild:
    """`tessera guest build SRC -o OUT` running in the background (start it early, wait when needed)."""

    def __init__(self, src: Path, out: Path, log_dir: Path):
        self.src, self.out = src, out
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"guest-build-{out.stem}.log"
        argv = [str(tessera_bin()), "guest", "build", str(src), "-o", str(out), "--root", str(REPO_ROOT)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=server_env())
        self.argv = argv

    def wait(self, deadline: float = GUEST_BUILD_DEADLINE) -> Path:
        """The built component; fails the test with the build's output if the build failed."""
        try:
            rc = self.process.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            pytest.fail(f"{' '.join(self.argv)} did not finish within {deadline}s:\n"
                        f"{tail(self.log_path.read_text(errors='replace'))}", pytrace=False)
        text = self.log_path.read_text(errors="replace")
        if rc != 0 or not self.out.is_file() or self.out.stat().st_size == 0:
            pytest.fail(f"{' '.join(self.argv)} failed (exit code {rc}):\n{tail(text)}", pytrace=False)
        assert_no_panic(text, what="tessera guest build")
        return self.out

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def sse_events(resp: requests.Response) -> list[dict]:
    """The JSON payloads of a server-sent-events response (`data: {...}` lines), in order."""
    events = []
    for line in resp.iter_lines(decode_unicode=True):
        if line and line.startswith("data:"):
            events.append(json.loads(line[len("data:"):].strip()))
    return events


def at_once(call, count: int) -> list:
    """Runs `call()` `count` times at once (one thread each, all released together); returns the
    results in completion order."""
    results = []
    lock = threading.Lock()
    start = threading.Barrier(count)

    def one():
        start.wait()
        item = call()
        with lock:
            results.append(item)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def grpc_stream_responses(url: str, model: str, inputs, outputs: Sequence[str], timeout: float = 30) -> list[tuple]:
    """Sends one request on a gRPC stream (tritonclient) and returns, per response until the final
    flag, the first element of each of `outputs`. An empty final response ends the list."""
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer(model, inputs, request_id="stream-1", enable_empty_final_response=True)
        values = []
        while True:
            result, error = got.get(timeout=timeout)
            assert error is None, error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param and not response.outputs:
                return values
            values.append(tuple(int(result.as_numpy(name)[0]) for name in outputs))
    finally:
        client.stop_stream()


