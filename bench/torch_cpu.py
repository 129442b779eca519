#!/usr/bin/env python3
"""TorchScript vs ONNX Runtime in Tessera, on the same computation, on this machine's CPU cores.

`text_scorer` (ONNX) and `text_scorer_torch` (TorchScript, libtorch 2.11) compute the same thing
(per row: sum(mask), sum(ids * mask) over [batch, 16] INT64). They are served from a copy of the
quickstart in which both have `dynamic_batching { }` (the quickstart's ONNX one has none). For each
concurrency, REPEATS windows per model, interleaved (and alternating which goes first) so drift
hits both. Reports client infer/s (perf_analyzer, HTTP), the server's mean request time (statistics
extension) and the server's CPU time per inference (/proc), medians with min-max.

The GPU half of this benchmark (the same model on CUDA) needs a GPU machine: docs/gpu.md.

    python3 bench/torch_cpu.py [--bin target/release/tessera] [--repeats 3] [--secs 3]

Needs scripts/setup.sh and ../shared/reference/triton/setup.sh (perf_analyzer). The binary must be
built with `--features torch` (e.g. cargo build --release --features torch).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import QUICKSTART, ROOT, cpu_seconds, fmt, perf, reference_env, stats, wait_ready  # noqa: E402

MODELS = ("text_scorer", "text_scorer_torch")
PORT = 18300


def window(env, pid, model, conc, secs):
    perf(env, PORT, model, conc, 1, [])  # warm-up
    n0, ns0, _ = stats(PORT, model)
    c0 = cpu_seconds(pid)
    thr = perf(env, PORT, model, conc, secs, [])
    c1 = cpu_seconds(pid)
    n1, ns1, _ = stats(PORT, model)
    n = max(n1 - n0, 1)
    return thr, (ns1 - ns0) / n / 1000, (c1 - c0) * 1e6 / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "tessera"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=3.0)
    ap.add_argument("--concurrency", default="1,16")
    args = ap.parse_args()
    env = reference_env()
    logdir = Path(tempfile.mkdtemp(prefix="tessera-torch-bench."))
    repo = logdir / "repo"
    for m in MODELS:
        shutil.copytree(QUICKSTART / m, repo / m)
        config = repo / m / "config.pbtxt"
        if "dynamic_batching" not in config.read_text():
            config.write_text(config.read_text() + "\ndynamic_batching { }\n")
    log = open(logdir / "tessera.log", "wb")
    cmd = [args.bin, "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
           "--http-port", str(PORT), "--grpc-port", str(PORT + 1), "--metrics-port", str(PORT + 2),
           "--model-control-mode", "explicit", "--load-model", MODELS[0], "--load-model", MODELS[1]]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(PORT, proc, "tessera")
        rows = []
        for conc in [int(c) for c in args.concurrency.split(",")]:
            results = {m: [] for m in MODELS}
            for r in range(args.repeats):
                order = MODELS if r % 2 == 0 else MODELS[::-1]
                for m in order:
                    results[m].append(window(env, proc.pid, m, conc, args.secs))
            for m in MODELS:
                thr = [x[0] for x in results[m] if x[0]]
                rows.append((m, conc, thr, [x[1] for x in results[m]], [x[2] for x in results[m]]))
        print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
              f"{args.repeats} windows of {args.secs:.0f} s per cell, HTTP, batch 1 per request")
        print(f"command: python3 bench/torch_cpu.py --bin {args.bin} --repeats {args.repeats} --secs {args.secs:g}\n")
        print("| model | backend | concurrency | infer/s (median, min-max) | server µs/request | server CPU µs/inference |")
        print("|---|---|---|---|---|---|")
        for m, conc, thr, lat, cpu in rows:
            backend = "TorchScript (libtorch 2.11)" if m.endswith("_torch") else "ONNX Runtime 1.31"
            print(f"| {m} | {backend} | {conc} | {fmt(thr)} | {fmt(lat)} | {fmt(cpu)} |")
        by = {(m, c): statistics.median(t) for m, c, t, _, _ in rows if t}
        for conc in sorted({c for _, c, _, _, _ in rows}):
            if (MODELS[0], conc) in by and (MODELS[1], conc) in by:
                print(f"\nc={conc}: TorchScript / ONNX throughput = {by[(MODELS[1], conc)] / by[(MODELS[0], conc)]:.2f}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
