#!/usr/bin/env python3
"""What a guest costs in each language: the same add_sub model written in Rust, Python, JavaScript,
C and C++ (the quickstart's add_sub_rust, add_sub_python, add_sub_js, add_sub_c, add_sub_cpp).

    usage: TESSERA_BIN=target/release/tessera .venv/bin/python bench/guest_langs.py   (after scripts/setup.sh)

For each model, on a repository holding only it (release binary, 127.0.0.1):
- component size: bytes of model.wasm;
- cold compile: start to ready with an empty --wasm-cache-dir (compiling the component dominates);
- warm start: start to ready again with that cache (load the compiled artifact, instantiate,
  initialize);
- per call at c=1: perf_analyzer (the reference install's, ../shared/reference/triton) at
  concurrency 1 over HTTP for MEASURE_MS, then from the statistics extension the execution time
  per call (compute_infer / executions: the host's call into the guest and back, the guest's
  work included) and the server-side time per request, plus the server's CPU per inference
  (/proc); without perf_analyzer a tritonclient loop of CALLS requests;
- private memory per instance: (private(N) - private(1)) / (N - 1), private = Private_Clean +
  Private_Dirty of /proc/PID/smaps_rollup after one inference, with instance_group count 1 and N.

REPEATS runs of each timing (median, min-max). Env: N (default 64), REPEATS (3), MEASURE_MS (3000),
CALLS (2000), MODELS (space-separated, default all five). Prints a markdown table.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests
from benchlib import REFERENCE_ENV, cpu_seconds, private_kib, reference_env  # bench/ is on sys.path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "model-repos" / "quickstart"
BIN = Path(os.environ.get("TESSERA_BIN", ROOT / "target" / "release" / "tessera"))
MODELS = os.environ.get("MODELS", "add_sub_rust add_sub_c add_sub_cpp add_sub_js add_sub_python").split()
LANGUAGE = {"add_sub_rust": "Rust", "add_sub_c": "C", "add_sub_cpp": "C++", "add_sub_js": "JavaScript",
            "add_sub_python": "Python"}
N = int(os.environ.get("N", "64"))
REPEATS = int(os.environ.get("REPEATS", "3"))
MEASURE_MS = int(os.environ.get("MEASURE_MS", "3000"))
CALLS = int(os.environ.get("CALLS", "2000"))
PORT = 18600


def repo_with(model: str, count: int, root: Path) -> Path:
    repo = root / f"repo-{model}-{count}"
    if repo.exists():
        shutil.rmtree(repo)
    (repo / model / "1").mkdir(parents=True)
    shutil.copy2(QUICKSTART / model / "1" / "model.wasm", repo / model / "1" / "model.wasm")
    config = (QUICKSTART / model / "config.pbtxt").read_text()
    config = re.sub(r"instance_group \[[^\]]*\]", f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]", config)
    (repo / model / "config.pbtxt").write_text(config)
    return repo


class Server:
    def __init__(self, repo: Path, cache: Path, log: Path):
        self.t0 = time.monotonic()
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(
            [str(BIN), "serve", "--model-repository", str(repo), "--http-port", str(PORT), "--grpc-port",
             str(PORT + 1), "--metrics-port", str(PORT + 2), "--wasm-cache-dir", str(cache)],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_ready(self, deadline_s: float = 300) -> float:
        url = f"http://127.0.0.1:{PORT}/v2/health/ready"
        while time.monotonic() - self.t0 < deadline_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if requests.get(url, timeout=1).status_code == 200:
                    return time.monotonic() - self.t0
            except requests.RequestException:
                pass
            time.sleep(0.005)
        raise RuntimeError("server not ready in time")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def infer_once(model: str) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16).tolist()
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": a} for n in ("INPUT0", "INPUT1")]}
    r = requests.post(f"http://127.0.0.1:{PORT}/v2/models/{model}/infer", json=body, timeout=60)
    r.raise_for_status()


def stats(model: str) -> tuple[int, int, int, int]:
    s = requests.get(f"http://127.0.0.1:{PORT}/v2/models/{model}/stats", timeout=10).json()["model_stats"][0]
    inf = s["inference_stats"]
    return inf["success"]["count"], inf["success"]["ns"], s["execution_count"], inf["compute_infer"]["ns"]


def perf_analyzer() -> tuple[str, dict] | None:
    if not REFERENCE_ENV.is_file():
        return None
    env = reference_env()
    return env["PERF_ANALYZER"], dict(os.environ, LD_LIBRARY_PATH=env["PERF_ANALYZER_LD_LIBRARY_PATH"])


def load(model: str, pid: int) -> tuple[float, float, float]:
    """(execution µs per call, server-side µs per request, server CPU µs per inference) at c=1."""
    pa = perf_analyzer()
    n0, ns0, ex0, ci0 = stats(model)
    c0 = cpu_seconds(pid)
    if pa:
        binary, env = pa
        subprocess.run([binary, "-m", model, "-u", f"127.0.0.1:{PORT}", "-i", "http", "-b", "1",
                        "--concurrency-range", "1", "--measurement-interval", str(MEASURE_MS), "--max-trials", "3",
                        "-s", "100"], env=env, capture_output=True, check=False, timeout=120)
    else:
        for _ in range(CALLS):
            infer_once(model)
    c1 = cpu_seconds(pid)
    n1, ns1, ex1, ci1 = stats(model)
    dn, dex = max(n1 - n0, 1), max(ex1 - ex0, 1)
    return (ci1 - ci0) / dex / 1000, (ns1 - ns0) / dn / 1000, (c1 - c0) * 1e6 / dn


def fmt(values: list[float], digits: int = 1) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:,.{digits}f}"
    return f"{med:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def measure(model: str, scratch: Path) -> dict:
    size = (QUICKSTART / model / "1" / "model.wasm").stat().st_size
    cold, warm, call, server_side, cpu = [], [], [], [], []
    for r in range(REPEATS):
        cache = scratch / f"cache-{model}-{r}"
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir()
        repo = repo_with(model, 1, scratch)
        s = Server(repo, cache, scratch / f"{model}-cold-{r}.log")
        try:
            cold.append(s.wait_ready())
        finally:
            s.stop()
        s = Server(repo, cache, scratch / f"{model}-warm-{r}.log")
        try:
            warm.append(s.wait_ready())
            infer_once(model)
            c, ss, cp = load(model, s.proc.pid)
            call.append(c)
            server_side.append(ss)
            cpu.append(cp)
        finally:
            s.stop()
    cache = scratch / f"cache-{model}-0"
    private = {}
    for count in (1, N):
        s = Server(repo_with(model, count, scratch), cache, scratch / f"{model}-mem-{count}.log")
        try:
            s.wait_ready()
            infer_once(model)
            private[count] = private_kib(s.proc.pid)
        finally:
            s.stop()
    per_instance = (private[N] - private[1]) / (N - 1)
    return {"size": size, "cold": cold, "warm": warm, "call": call, "server_side": server_side, "cpu": cpu,
            "private1": private[1], "per_instance": per_instance}


def main() -> int:
    if not BIN.is_file():
        print(f"{BIN} is missing: cargo build --release", file=sys.stderr)
        return 1
    for model in MODELS:
        if not (QUICKSTART / model / "1" / "model.wasm").is_file():
            print(f"{model}: model.wasm missing; run scripts/build-guests.sh", file=sys.stderr)
            return 1
    scratch = Path(tempfile.mkdtemp(prefix="tessera-guest-langs-"))
    rows = []
    try:
        for model in MODELS:
            print(f"measuring {model} ...", file=sys.stderr, flush=True)
            rows.append((model, measure(model, scratch)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    tool = "perf_analyzer c=1" if perf_analyzer() else f"a tritonclient loop of {CALLS} requests"
    print(f"| language (model) | component | cold compile, start to ready s | warm start s | execution µs / call "
          f"| server-side µs / request | server CPU µs / inference | private KiB per extra instance |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for model, m in rows:
        size = m["size"]
        size_text = f"{size / 1e6:.1f} MB" if size > 1e6 else f"{size / 1e3:.0f} KB"
        print(f"| {LANGUAGE.get(model, model)} ({model}) | {size_text} | {fmt(m['cold'], 2)} | {fmt(m['warm'], 3)} "
              f"| {fmt(m['call'])} | {fmt(m['server_side'])} | {fmt(m['cpu'])} | {m['per_instance']:,.0f} |")
    print()
    print(f"Command: `TESSERA_BIN={BIN} .venv/bin/python bench/guest_langs.py` (N={N}, REPEATS={REPEATS}, "
          f"load: {tool}{f', {MEASURE_MS} ms windows' if perf_analyzer() else ''}); median (min-max) of the repeats.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
