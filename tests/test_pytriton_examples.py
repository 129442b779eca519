"""PyTriton's own examples (tests/third_party/pytriton: v0.7.0, numpy only, nothing changed but the
imports) run as their READMEs say: each server script in a process of its own (this Python, with
the `tessera` package), then client.py, whose printed results are checked as a user would read them.

The clients connect to `localhost:8000`, as written in them, so the servers keep PyTriton's default
HTTP port: each test first checks that 8000 is free (and fails, never skips, if it is not). The
other doors are moved to free ports and every door listens on 127.0.0.1, through PyTriton's
`PYTRITON_TRITON_CONFIG_<FIELD>` variables, which leave the examples' code as it is."""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tessera_testlib import (
    READY_DEADLINE,
    REPO_ROOT,
    SHUTDOWN_DEADLINE,
    assert_no_panic,
    free_ports,
    tail,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)

EXAMPLES = REPO_ROOT / "tests" / "third_party" / "pytriton" / "examples"
HTTP_PORT = 8000  # the examples' ModelClient("localhost", ...) and RemoteTriton(url="localhost")
CLIENT_DEADLINE = 60.0
ACCESS_TOKEN = "tessera-test-token"  # TRITON_ACCESS_TOKEN, as simple_python_remote_mode's README says


@dataclass
class Script:
    path: Path
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def assert_running(self) -> None:
        rc = self.process.poll()
        assert rc is None, f"{self.path.name} exited with code {rc}; its output:\n{tail(self.log())}"


def _stop(process: subprocess.Popen) -> int:
    """Ctrl+C (SIGINT), then SIGTERM, then SIGKILL, each with a bounded wait. Returns the exit code."""
    for send, wait in ((lambda: process.send_signal(signal.SIGINT), SHUTDOWN_DEADLINE),
                       (lambda: process.send_signal(signal.SIGTERM), 10.0),
                       (process.kill, 10.0)):
        if process.poll() is not None:
            break
        send()
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return process.wait(timeout=10)


class ExampleRun:
    """The scripts of one example; all are stopped at teardown, whatever happened."""

    def __init__(self, example: str, log_dir: Path):
        self.dir = EXAMPLES / example
        self.log_dir = log_dir
        self.scripts: list[Script] = []
        grpc_port, metrics_port = free_ports(2)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PYTRITON_", "TESSERA_")) and k != "TRITON_ACCESS_TOKEN"}
        self.env.update({
            "PYTRITON_TRITON_CONFIG_HTTP_ADDRESS": "127.0.0.1",
            "PYTRITON_TRITON_CONFIG_GRPC_ADDRESS": "127.0.0.1",
            "PYTRITON_TRITON_CONFIG_METRICS_ADDRESS": "127.0.0.1",
            "PYTRITON_TRITON_CONFIG_GRPC_PORT": str(grpc_port),
            "PYTRITON_TRITON_CONFIG_METRICS_PORT": str(metrics_port),
        })

    def start(self, script: str) -> Script:
        if not self.scripts:
            assert_port_free(HTTP_PORT)
        log_path = self.log_dir / f"{self.dir.name}-{script}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen([sys.executable, script], cwd=self.dir, env=self.env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        started = Script(self.dir / script, process, log_path)
        self.scripts.append(started)
        return started

    def wait_ready(self, *models: str) -> None:
        """Until the server answers ready, and each model too; fails at once if a script exits."""
        def ready() -> bool:
            for script in self.scripts:
                script.assert_running()
            paths = ["/v2/health/ready"] + [f"/v2/models/{m}/ready" for m in models]
            return all(requests.get(f"http://127.0.0.1:{HTTP_PORT}{p}", timeout=5).status_code == 200
                       for p in paths)

        wait_until(ready, READY_DEADLINE, f"{self.dir.name} serves {', '.join(models)}")

    def client(self) -> "ClientOutput":
        try:
            cp = subprocess.run([sys.executable, "client.py"], cwd=self.dir, env=self.env,
                                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=CLIENT_DEADLINE)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{self.dir.name}/client.py did not finish within {CLIENT_DEADLINE}s; "
                        f"stderr:\n{e.stderr}", pytrace=False)
        output = cp.stdout + cp.stderr
        servers = "\n".join(f"--- {s.path.name}:\n{tail(s.log(), 30)}" for s in self.scripts)
        assert cp.returncode == 0 and "Traceback" not in output, (
            f"{self.dir.name}/client.py exited with code {cp.returncode}:\n{tail(output)}\n{servers}")
        return ClientOutput(output)

    def stop_and_check(self) -> None:
        """Ctrl+C stops each script (the remote ones first), which exits 0, as under PyTriton."""
        for script in reversed(self.scripts):
            rc = _stop(script.process)
            assert_no_panic(script.log(), what=script.path.name)
            assert rc == 0, f"{script.path.name} exited with code {rc} on SIGINT:\n{tail(script.log())}"

    def close(self) -> None:
        for script in reversed(self.scripts):
            _stop(script.process)


def assert_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            pytest.fail(f"port {port} is in use ({e}): PyTriton's example clients connect to localhost:{port}, "
                        f"so these tests need it free", pytrace=False)


class ClientOutput:
    """What client.py logged: `... - INFO - examples.<example>.client: <name>: <value>` lines."""

    LINE = re.compile(r" - INFO - examples\.\w+\.client: ([^:]+): (.*)$", re.M)

    def __init__(self, text: str):
        self.text = text
        self.lines = self.LINE.findall(text)

    def values(self, name: str) -> list:
        """Every value logged under `name`, in order, as Python values (lists of floats, bytes)."""
        found = [ast.literal_eval(v) for n, v in self.lines if n == name]
        assert found, f"client.py printed no '{name}: ...' line; it printed:\n{tail(self.text)}"
        return found


@pytest.fixture
def example(tmp_path):
    runs: list[ExampleRun] = []

    def make(name: str) -> ExampleRun:
        run = ExampleRun(name, tmp_path)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.close()


def column(*values: float) -> list:
    """A (batch, 1) batch as tolist() prints it."""
    return [[float(v)] for v in values]


def test_add_sub_python(example):
    run = example("add_sub_python")
    run.start("server.py")
    run.wait_ready("AddSub")
    out = run.client()
    assert out.values("add") == [column(2, 2)]
    assert out.values("sub") == [column(0, 0)]
    run.stop_and_check()


def test_add_sub_python_with_optional(example):
    run = example("add_sub_python_with_optional")
    run.start("server.py")
    run.wait_ready("AddSub")
    out = run.client()
    # a = b = 1; t defaults to 2 (fill_optionals), w to 1: (w, t) = (1, 2), (3, 2), (1, 5), (3, 5).
    assert out.values("add") == [column(4, 4), column(6, 6), column(7, 7), column(9, 9)]
    assert out.values("sub") == [column(2, 2), column(4, 4), column(5, 5), column(7, 7)]
    run.stop_and_check()


def test_identity_python(example):
    run = example("identity_python")
    run.start("server.py")
    run.wait_ready("Identity")
    out = run.client()
    # Random doubles and b"\xff\x00\x00\x00" (NUL bytes included) come back exactly.
    assert out.values("OUTPUT_1") == out.values("INPUT_1")
    assert out.values("OUTPUT_2") == out.values("INPUT_2") == [[[b"\xff\x00\x00\x00"]] * 4]
    run.stop_and_check()


def test_multiple_models_python(example):
    run = example("multiple_models_python")
    run.start("server.py")
    run.wait_ready("Multiply2", "Multiply4")
    out = run.client()
    assert out.values("Multiply2/product") == [column(2, 2)]
    assert out.values("Multiply4/product") == [column(4, 4)]
    run.stop_and_check()


def test_use_parameters_and_headers(example):
    run = example("use_parameters_and_headers")
    run.start("server.py")
    run.wait_ready("ParamsAndHeaders")
    out = run.client()
    # a = 2, b = 1: (a + b) / header_divisor 3, (a - b) * parameter_multiplier 2.
    assert out.values("scaled_add") == [column(1, 1)]
    assert out.values("scaled_sub") == [column(2, 2)]
    run.stop_and_check()


def test_simple_python_remote_mode_is_refused_by_name(example):
    # Remote mode binds callables of one process into a server another process runs: Tessera
    # refuses it by name (docs/pytriton.md), and the server that started keeps serving.
    run = example("simple_python_remote_mode")
    run.env["TRITON_ACCESS_TOKEN"] = ACCESS_TOKEN
    run.start("server_starting_triton.py")
    run.wait_ready("AddSub")
    remote = run.start("server_remote_mul.py")
    try:
        rc = remote.process.wait(timeout=CLIENT_DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail("server_remote_mul.py kept running: RemoteTriton was not refused", pytrace=False)
    assert rc != 0 and "RemoteTriton is not supported by Tessera" in remote.log(), tail(remote.log())
    run.scripts.remove(remote)
    run.wait_ready("AddSub")
    run.stop_and_check()
