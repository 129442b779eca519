"""What the bench scripts share (imported by them: bench/ is each script's own directory, so on
sys.path): where the reference Triton is, a server's own cost read from /proc and the statistics
extension, readiness waits, perf_analyzer runs and number formatting.

The reference Triton: `TRITON_REFERENCE` names the directory of its scripts (setup.sh, run.sh,
stop.sh, model_repository/; default ../shared/reference/triton beside this checkout), and
`TRITON_REFERENCE_ENV` the environment file its setup.sh writes (default: the path that setup.sh
documents). bench/lib.sh reads the same two variables.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "model-repos" / "quickstart"
REFERENCE = Path(os.environ.get("TRITON_REFERENCE", ROOT.parent / "shared" / "reference" / "triton"))
REFERENCE_ENV = Path(os.environ.get("TRITON_REFERENCE_ENV", "/opt/triton-reference/triton/env.sh"))
TICK = os.sysconf("SC_CLK_TCK")


def reference_env() -> dict:
    """The reference install's variables (TRITONSERVER, PERF_ANALYZER, ...), from its env file."""
    if not REFERENCE_ENV.is_file():
        sys.exit(f"{REFERENCE_ENV} missing: run {REFERENCE / 'setup.sh'} (or set TRITON_REFERENCE_ENV)")
    out = {}
    for line in REFERENCE_ENV.read_text().splitlines():
        if line.startswith("export "):
            key, value = line[7:].strip().split("=", 1)
            out[key] = value.strip('"')
    return out


def tree(pid: int) -> set[int]:
    """A process and all its descendants."""
    seen, todo = set(), [pid]
    while todo:
        p = todo.pop()
        seen.add(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return seen


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGTERM to a server (PyTriton stops its tritonserver on it), then SIGKILL to whatever of its
    process tree is left after 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        for pid in tree(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by a process and its whole tree (Triton's stub processes too)."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / TICK


def rss_kib(pid: int) -> int:
    """A process's resident set size in KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def private_kib(pid: int) -> int:
    """The process's private memory: Private_Clean + Private_Dirty of /proc/PID/smaps_rollup."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f.read().splitlines()[1:]:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0])
    return fields["Private_Clean"] + fields["Private_Dirty"]


def stats(port: int, model: str) -> tuple[int, int, int]:
    """The statistics extension's success count, success ns and execution count of a model."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats", timeout=10) as r:
        versions = json.load(r)["model_stats"]
    count = sum(int(v["inference_stats"]["success"]["count"]) for v in versions)
    ns = sum(int(v["inference_stats"]["success"]["ns"]) for v in versions)
    executions = sum(int(v["execution_count"]) for v in versions)
    return count, ns, executions


def wait_ready(port: int, proc: subprocess.Popen | None, what: str, timeout: float = 90,
               path: str = "/v2/health/ready") -> None:
    """Waits for 200 on `path`; exits the script when `proc` dies or the time is up."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before becoming ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"{what} not ready within {timeout:.0f} s")


def perf(env: dict, port: int, model: str, conc: int, secs: float, params: list[str] = ()) -> float | None:
    """perf_analyzer's throughput for one window (over gRPC, HTTP port + 1, when request
    parameters are sent: perf_analyzer sends them over gRPC only), or None if it failed."""
    protocol, port = ("grpc", port + 1) if params else ("http", port)
    cmd = [env["PERF_ANALYZER"], "-m", model, "-u", f"127.0.0.1:{port}", "-i", protocol, "-b", "1",
           "--concurrency-range", str(conc), "--measurement-interval", str(int(secs * 1000)),
           "--max-trials", "3", "-s", "100"]
    for p in params:
        cmd += ["--request-parameter", p]
    r = subprocess.run(cmd, env=dict(os.environ, LD_LIBRARY_PATH=env["PERF_ANALYZER_LD_LIBRARY_PATH"]),
                       capture_output=True, text=True, timeout=120)
    for line in r.stdout.splitlines():
        if "throughput:" in line.lower():
            return float(line.lower().split("throughput:")[1].split()[0])
    print(f"perf_analyzer failed for {model} on {port}: {(r.stdout + r.stderr)[-300:]}", file=sys.stderr)
    return None


def fmt(values: list[float], digits: int = 1) -> str:
    """Median (min-max) of the values that are not None."""
    v = [x for x in values if x is not None]
    if not v:
        return "n/a"
    return f"{statistics.median(v):,.{digits}f} ({min(v):,.{digits}f}-{max(v):,.{digits}f})"
