"""scripts/serve.sh on a first run (no target/.setup-complete): the ONNX and TorchScript models
answer as soon as the server is up, every other quickstart model is loaded through the repository
API once the rest of setup is done, and stopping the script stops the server and everything it
started. Setup is already done when the suite runs, so its rest takes seconds here."""

from __future__ import annotations

import os
import signal
import subprocess

import requests

from tessera_testlib import REPO_ROOT, connection_refused, free_ports, tail, wait_until

STAMP = REPO_ROOT / "target" / ".setup-complete"
DEADLINE = 600.0


def index(port: int) -> dict:
    r = requests.post(f"http://127.0.0.1:{port}/v2/repository/index", json={}, timeout=10)
    r.raise_for_status()
    return {m["name"]: m.get("state") for m in r.json()}


def test_a_first_run_serves_at_once_loads_the_rest_later_and_stops_everything(tmp_path):
    http, grpc, metrics = free_ports(3)
    had_stamp = STAMP.exists()
    STAMP.unlink(missing_ok=True)
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["bash", str(REPO_ROOT / "scripts" / "serve.sh"), f"--http-port={http}",
                                 "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        def log_text() -> str:
            return log_path.read_text(errors="replace")

        wait_until(lambda: "first run: serving" in log_text() or proc.poll() is not None, DEADLINE,
                   "serve.sh to take its first-run path")
        assert proc.poll() is None, tail(log_text())
        wait_until(lambda: "setup complete" in log_text() or "did not load (see the server" in log_text()
                   or proc.poll() is not None, DEADLINE, "the rest of setup and the loads")
        assert "setup complete: every quickstart model is loaded" in log_text(), tail(log_text())
        states = index(http)
        assert states and all(state == "READY" for state in states.values()), states
        assert STAMP.exists(), "a completed setup leaves its stamp"
        children = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) > 1, "the server runs beside the script"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0
        wait_until(lambda: connection_refused(http), 60, "the server to stop with the script")
        wait_until(lambda: not subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True).stdout,
                   60, "every process serve.sh started to stop")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if had_stamp:
            STAMP.touch()
