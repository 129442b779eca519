#!/usr/bin/env python3
"""Memory per model instance and start-to-ready time: Tessera's Wasm guests vs Triton's python backend.

    usage: .venv/bin/python bench/wasm_instances.py      (after scripts/setup.sh)

For each of add_sub_rust and add_sub_python (Tessera) it starts the server on a repository holding
only that model, with instance_group count 1 and then N (default 100), with a warm compile cache,
and reads the server's private memory (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup)
once the model is ready: (private(N) - private(1)) / (N - 1) is the cost of one more instance.
Start to ready is the time from spawning the process to the first 200 on /v2/health/ready.

For Triton (the reference install, ../shared/reference/triton) it does the same with its python
add_sub at count 1 and TRITON_N (default 4; each instance is a stub process of ~44 MiB RSS), summing
the server and its stub processes. Prints a markdown table. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from benchlib import QUICKSTART, REFERENCE, REFERENCE_ENV, ROOT, private_kib  # bench/ is on sys.path

BIN = Path(os.environ.get("TESSERA_BIN", ROOT / "target" / "release" / "tessera"))
N = int(os.environ.get("N", "100"))
TRITON_N = int(os.environ.get("TRITON_N", "4"))
REPEATS = int(os.environ.get("REPEATS", "3"))
PORT = 18300


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait_ready(port: int, proc: subprocess.Popen, t0: float, deadline_s: float = 120) -> float:
    url = f"http://127.0.0.1:{port}/v2/health/ready"
    while time.monotonic() - t0 < deadline_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return time.monotonic() - t0
        except requests.RequestException:
            pass
        time.sleep(0.002)
    raise RuntimeError("not ready in time")


def tessera_repo(model: str, count: int, tmp: Path) -> Path:
    repo = tmp / f"{model}_{count}"
    shutil.copytree(QUICKSTART / model, repo / model)
    cfg = repo / model / "config.pbtxt"
    text = cfg.read_text().replace("count: 1", f"count: {count}")
    assert f"count: {count}" in text, "config must have an instance_group with count: 1"
    cfg.write_text(text)
    return repo


def measure_tessera(model: str, count: int, tmp: Path, cache: Path) -> tuple[float, int]:
    repo = tessera_repo(model, count, tmp)
    argv = [str(BIN), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
            "--http-port", str(PORT), "--allow-grpc", "false", "--allow-metrics", "false",
            "--wasm-cache-dir", str(cache), "--log-info", "false"]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready = wait_ready(PORT, proc, t0)
        # one inference, so every instance that will ever be touched has been set up
        body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
                           for n in ("INPUT0", "INPUT1")]}
        r = requests.post(f"http://127.0.0.1:{PORT}/v2/models/{model}/infer", json=body, timeout=10)
        r.raise_for_status()
        return ready, private_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure_triton(count: int, tmp: Path) -> tuple[float, int]:
    repo = tmp / f"triton_{count}"
    shutil.copytree(REFERENCE / "model_repository" / "add_sub", repo / "add_sub")
    cfg = repo / "add_sub" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("count: 1", f"count: {count}"))
    run_dir = tmp / f"triton_run_{count}"
    env = dict(os.environ, HTTP_PORT=str(PORT + 10), GRPC_PORT=str(PORT + 11), METRICS_PORT=str(PORT + 12),
               RUN_DIR=str(run_dir))
    out = subprocess.run(["bash", str(REFERENCE / "run.sh"), str(repo)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"triton failed to start: {out.stderr[-2000:]}")
    pid = int(out.stdout.strip().splitlines()[-1])
    try:
        ready = float((run_dir / "startup_s").read_text())
        total = private_kib(pid) + sum(private_kib(c) for c in children(pid))
        return ready, total
    finally:
        subprocess.run(["bash", str(REFERENCE / "stop.sh")], env=env, capture_output=True)


def main() -> int:
    if not BIN.exists():
        print(f"{BIN} missing: cargo build --release (or set TESSERA_BIN)", file=sys.stderr)
        return 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-wasm-bench-") as t:
        tmp = Path(t)
        cache = tmp / "cache"
        for model in ("add_sub_rust", "add_sub_python"):
            measure_tessera(model, 1, tmp / "warm", cache)  # warms the compile cache
            readies, one, many = [], [], []
            for i in range(REPEATS):
                r1, p1 = measure_tessera(model, 1, tmp / f"a{i}", cache)
                rn, pn = measure_tessera(model, N, tmp / f"b{i}", cache)
                readies.append(r1)
                one.append(p1)
                many.append(pn)
            per = (statistics.median(many) - statistics.median(one)) / (N - 1)
            rows.append((f"Tessera {model}", statistics.median(readies), min(readies), max(readies),
                         statistics.median(one), N, statistics.median(many), per))
        if (REFERENCE / "run.sh").exists() and REFERENCE_ENV.exists():
            r1, p1 = measure_triton(1, tmp)
            rn, pn = measure_triton(TRITON_N, tmp)
            rows.append(("Triton 2.51 python add_sub", r1, r1, r1, p1, TRITON_N, pn, (pn - p1) / (TRITON_N - 1)))
    print(f"### Instance memory and start to ready (warm compile cache), {os.cpu_count()} CPUs\n")
    print("| server / model | ready s (median, min-max) | private KiB at 1 | instances | private KiB at N | KiB per extra instance |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, med, lo, hi, p1, n, pn, per in rows:
        print(f"| {name} | {med:.3f} ({lo:.3f}-{hi:.3f}) | {p1:,} | {n} | {pn:,} | {per:,.0f} |")
    print(f"\nCommand: `TESSERA_BIN={BIN} .venv/bin/python bench/wasm_instances.py` (N={N}, TRITON_N={TRITON_N}, "
          f"repeats={REPEATS}). Private = Private_Clean + Private_Dirty of /proc/PID/smaps_rollup, after one inference;"
          " Triton's figure sums the server and its stub processes.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
