#!/usr/bin/env python3
"""Real PyTriton 0.7.0 against Tessera's PyTriton-compatible package, side by side in one run:
the same @batch numpy callable (`Double`: OUTPUT0 = 2 * INPUT0, FP32 [16], max_batch_size 16),
perf_analyzer over HTTP at concurrency 1 and 16.

For each server: time from process start to the model being ready; then per concurrency, REPEATS
interleaved windows (alternating which server goes first) of client infer/s, p50 latency, the
server's CPU time per inference (utime + stime of its whole process tree: PyTriton's tritonserver,
python stub and proxy included) and server-side request time (statistics extension). Prints a
markdown table of medians (min-max) and the Tessera / PyTriton ratios.

    python3 bench/pytriton.py [--repeats 3] [--secs 3]

Needs the reference Triton (bench/benchlib.py: TRITON_REFERENCE, with PyTriton and perf_analyzer)
and scripts/setup.sh (the tessera package in .venv).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import REFERENCE, ROOT, cpu_seconds, fmt, reference_env, stats, stop_tree  # noqa: E402

MODEL = "Double"
PORTS = {"pytriton": 18600, "tessera": 18700}


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 120) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            sys.exit(f"server on {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{MODEL}/ready", timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.002)
    sys.exit(f"server on {port} not ready in {timeout} s")


def perf(env: dict, port: int, conc: int, secs: float) -> tuple[float | None, float | None]:
    cmd = [env["PERF_ANALYZER"], "-m", MODEL, "-u", f"127.0.0.1:{port}", "-i", "http", "-b", "1",
           "--concurrency-range", str(conc), "--measurement-interval", str(int(secs * 1000)),
           "--max-trials", "3", "-s", "100"]
    r = subprocess.run(cmd, env=dict(os.environ, LD_LIBRARY_PATH=env["PERF_ANALYZER_LD_LIBRARY_PATH"]),
                       capture_output=True, text=True, timeout=180)
    thr = p50 = None
    for line in r.stdout.splitlines():
        low = line.lower().strip()
        if "throughput:" in low and thr is None:
            thr = float(low.split("throughput:")[1].split()[0])
        if low.startswith("p50 latency:") and p50 is None:
            p50 = float(low.split(":")[1].split()[0])
    if thr is None:
        print(f"perf_analyzer failed on {port}: {(r.stdout + r.stderr)[-300:]}", file=sys.stderr)
    return thr, p50


def window(env, name, proc, conc, secs):
    port = PORTS[name]
    perf(env, port, conc, 1)  # warm-up
    n0, ns0, _ = stats(port, MODEL)
    c0 = cpu_seconds(proc.pid)
    thr, p50 = perf(env, port, conc, secs)
    c1 = cpu_seconds(proc.pid)
    n1, ns1, _ = stats(port, MODEL)
    n = max(n1 - n0, 1)
    return thr, p50, (c1 - c0) * 1e6 / n, (ns1 - ns0) / n / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=3.0)
    ap.add_argument("--starts", type=int, default=3, help="launches per server to time start to ready")
    args = ap.parse_args()
    env = reference_env()
    logs = Path(tempfile.mkdtemp(prefix="tessera-pytriton-bench."))
    procs = {}
    ready = {}
    # env.sh values may refer to $PATH and the like.
    ref_env = dict(os.environ, LD_LIBRARY_PATH=os.path.expandvars(env["TRITON_LD_LIBRARY_PATH"]),
                   PATH=os.path.expandvars(env["TRITON_PATH"]))
    commands = {
        "pytriton": ([f"{env['TRITON_VENV']}/bin/python", str(REFERENCE / "pytriton_double.py"), str(PORTS["pytriton"])],
                     ref_env),
        "tessera": ([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "bench" / "pytriton_double.py"),
                     str(PORTS["tessera"])], dict(os.environ)),
    }
    try:
        for name, (cmd, penv) in commands.items():
            ready[name] = []
            for start in range(args.starts):
                log = open(logs / f"{name}-{start}.log", "wb")
                # Same session as perf_analyzer, on purpose: with the kernel's autogroup scheduling
                # a server in a session of its own gets half the CPU whatever its thread count,
                # which moves the numbers.
                procs[name] = subprocess.Popen(cmd, env=penv, stdout=log, stderr=subprocess.STDOUT)
                ready[name].append(wait_ready(PORTS[name], procs[name]))
                if start < args.starts - 1:  # the last launch stays up for the windows
                    stop_tree(procs[name])
                    wait_ports_free(PORTS[name])
        rows = {}
        for conc in (1, 16):
            for r in range(args.repeats):
                order = ["pytriton", "tessera"] if r % 2 == 0 else ["tessera", "pytriton"]
                for name in order:
                    rows.setdefault((name, conc), []).append(window(env, name, procs[name], conc, args.secs))
        print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores (perf_analyzer shares them); "
              f"{args.repeats} windows of {args.secs:g} s per cell; HTTP, batch 1 per request")
        print(f"command: python3 bench/pytriton.py --repeats {args.repeats} --secs {args.secs:g} "
              f"--starts {args.starts}\n")
        up = {name: statistics.median(times) for name, times in ready.items()}
        print(f"start to ready, median (min-max) of {args.starts} launches: PyTriton {fmt(ready['pytriton'], 2)} s, "
              f"Tessera {fmt(ready['tessera'], 3)} s (ratio {up['tessera'] / up['pytriton']:.3f})\n")
        print("| server | c | infer/s | p50 µs | server CPU µs / inference | server µs / request |")
        print("|---|---:|---:|---:|---:|---:|")
        med = {}
        for (name, conc), ws in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            cols = [[w[i] for w in ws if w[i] is not None] for i in range(4)]
            med[(name, conc)] = [statistics.median(c) if c else float("nan") for c in cols]
            print(f"| {name} | {conc} | {fmt(cols[0], 0)} | {fmt(cols[1], 0)} | {fmt(cols[2])} | {fmt(cols[3])} |")
        print()
        for conc in (1, 16):
            t, p = med[("tessera", conc)], med[("pytriton", conc)]
            print(f"c={conc}: Tessera / PyTriton: infer/s {t[0] / p[0]:.2f}x, p50 {t[1] / p[1]:.3f}x, "
                  f"CPU per inference {t[2] / p[2]:.3f}x, server time {t[3] / p[3]:.3f}x")
    finally:
        for proc in procs.values():
            stop_tree(proc)


def wait_ports_free(http_port: int, timeout: float = 60) -> None:
    """Until nothing listens on the server's HTTP, gRPC and metrics ports (a child of the last
    launch may outlive it briefly)."""
    deadline = time.monotonic() + timeout
    for port in (http_port, http_port + 1, http_port + 2):
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) != 0:
                    break
            time.sleep(0.05)


if __name__ == "__main__":
    main()
