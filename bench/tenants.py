#!/usr/bin/env python3
"""Tenants sharing a model, side by side in one run (docs/tenants.md; figures in
docs/benchmarks.md):

1. Noisy neighbour. Tenant A floods one shared model with perf_analyzer at FLOOD concurrency
   (10x the requests the model executes at once: max_batch_size 8 on one instance, so 80) while
   tenant B calls it one request at a time with tritonclient. B's latency p50 / p99 and failures:
   alone; beside the flood with no tenants file (today's one queue); beside the flood with a
   tenants file (A and B weight 1, fair queueing). For `add_sub` (ONNX) and `add_sub_rust`
   (a Wasm guest).
2. Weights. A (weight 3) and B (weight 1) both flood the model at FLOOD concurrency: the split of
   their throughputs (perf_analyzer's, each tenant its own process).
3. Cost. Server CPU per inference under perf_analyzer at c=8 on add_sub without a tenants file
   and with a file of one tenant (every request sends its key): identity, admission and fair
   queueing together.

Each cell is a window of SECS seconds, in REPEATS interleaved rounds; medians (min-max). Needs
scripts/setup.sh and ../shared/reference/triton/setup.sh (perf_analyzer). Everything listens on
127.0.0.1.

    .venv/bin/python bench/tenants.py [--bin target/release/tessera] [--repeats 3] [--secs 8]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import QUICKSTART, ROOT, cpu_seconds, fmt, reference_env, stop_tree, wait_ready  # noqa: E402

MODELS = ("add_sub", "add_sub_rust")
KEYS = {"a": "bench-key-a-0123456789", "b": "bench-key-b-0123456789"}
FLOOD = 80
PORT = 18600


def tenants_file(path: Path, weights: dict[str, int]) -> Path:
    text = "".join(
        f'[[tenant]]\nname = "{name}"\nweight = {weight}\nmodels = ["*"]\nroles = ["infer", "statistics"]\n'
        f'keys = [{{ id = "{name}-1", sha256 = "{hashlib.sha256(KEYS[name].encode()).hexdigest()}" }}]\n\n'
        for name, weight in weights.items())
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


class Server:
    def __init__(self, binary: Path, repo: Path, tenants: Path | None, log: Path):
        args = [str(binary), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
                "--http-port", str(PORT), "--grpc-port", str(PORT + 1), "--metrics-port", str(PORT + 2)]
        if tenants:
            args += ["--tenants", str(tenants)]
        self.proc = subprocess.Popen(args, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
        wait_ready(PORT, self.proc, "tessera", timeout=300)

    def stop(self) -> None:
        stop_tree(self.proc)


def perf_cmd(env: dict, model: str, conc: int, secs: float, key: str | None) -> list[str]:
    cmd = [env["PERF_ANALYZER"], "-m", model, "-u", f"127.0.0.1:{PORT}", "-i", "http", "-b", "1",
           "--concurrency-range", str(conc), "--measurement-interval", str(int(secs * 1000)),
           "--max-trials", "3", "-s", "100"]
    return cmd + (["-H", f"Authorization:Bearer {key}"] if key else [])


def perf_start(env: dict, model: str, conc: int, secs: float, key: str | None) -> subprocess.Popen:
    return subprocess.Popen(perf_cmd(env, model, conc, secs, key), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ, LD_LIBRARY_PATH=env["PERF_ANALYZER_LD_LIBRARY_PATH"]))


def perf_throughput(proc: subprocess.Popen) -> float | None:
    out, _ = proc.communicate(timeout=600)
    for line in out.splitlines():
        if "throughput:" in line.lower():
            return float(line.lower().split("throughput:")[1].split()[0])
    print(f"perf_analyzer failed: {out[-400:]}", file=sys.stderr)
    return None


def b_loop(model: str, secs: float, key: str | None) -> tuple[list[float], int]:
    """Tenant B: one request at a time for `secs`; latencies in ms and failures."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{PORT}", network_timeout=120)
    headers = {"Authorization": f"Bearer {key}"} if key else None
    x = np.ones((1, 16), dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    for i in inputs:
        i.set_data_from_numpy(x, binary_data=True)
    latencies, failures = [], 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            client.infer(model, inputs, headers=headers)
            latencies.append((time.monotonic() - started) * 1000)
        except Exception:  # noqa: BLE001 - any failure counts
            failures += 1
    client.close()
    return latencies, failures


def p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else float("nan")


def noisy(binary: Path, repo: Path, tmp: Path, env: dict, secs: float) -> dict:
    """One round of part 1: per model and setting, B's p50, p99 and failures."""
    out = {}
    for setting in ("alone", "no file", "tenants 1:1"):
        tenants = tenants_file(tmp / "t11.toml", {"a": 1, "b": 1}) if setting == "tenants 1:1" else None
        server = Server(binary, repo, tenants, tmp / "server.log")
        try:
            key_a, key_b = (KEYS["a"], KEYS["b"]) if tenants else (None, None)
            for model in MODELS:
                b_loop(model, 1, key_b)  # warm
                flood = None if setting == "alone" else perf_start(env, model, FLOOD, secs + 2, key_a)
                if flood:
                    time.sleep(2)  # the flood at its height before B measures
                latencies, failures = b_loop(model, secs, key_b)
                if flood:
                    if flood.poll() is not None:
                        sys.exit(f"the flood ended before B's window did: {flood.communicate()[0][-400:]}")
                    flood.kill()
                    flood.wait()
                out[(model, setting)] = (statistics.median(latencies), p99(latencies), failures, len(latencies))
        finally:
            server.stop()
    return out


def weights(binary: Path, repo: Path, tmp: Path, env: dict, secs: float) -> dict:
    """One round of part 2: per model, A's and B's throughput at weights 3:1."""
    out = {}
    server = Server(binary, repo, tenants_file(tmp / "t31.toml", {"a": 3, "b": 1}), tmp / "server.log")
    try:
        for model in MODELS:
            procs = [perf_start(env, model, FLOOD, secs, KEYS[t]) for t in ("a", "b")]
            a, b = (perf_throughput(p) for p in procs)
            out[model] = (a, b)
    finally:
        server.stop()
    return out


def cost(binary: Path, repo: Path, tmp: Path, env: dict, secs: float) -> dict:
    """One round of part 3: server CPU µs per inference, without and with a one-tenant file."""
    out = {}
    for setting in ("no file", "one tenant"):
        tenants = tenants_file(tmp / "t1.toml", {"a": 1}) if setting == "one tenant" else None
        server = Server(binary, repo, tenants, tmp / "server.log")
        try:
            key = KEYS["a"] if tenants else None
            perf_throughput(perf_start(env, "add_sub", 8, 2, key))  # warm
            before = cpu_seconds(server.proc.pid)
            started = time.monotonic()
            rate = perf_throughput(perf_start(env, "add_sub", 8, secs, key))
            cpu = cpu_seconds(server.proc.pid) - before
            elapsed = time.monotonic() - started
            # perf_analyzer's trials: the CPU over its whole run against its own mean rate.
            out[setting] = cpu / (rate * elapsed) * 1e6 if rate else None
        finally:
            server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "tessera")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=8)
    args = ap.parse_args()
    env = reference_env()
    rounds_noisy, rounds_weights, rounds_cost = [], [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repo = tmp / "repo"
        repo.mkdir()
        for model in MODELS:
            subprocess.run(["cp", "-r", str(QUICKSTART / model), str(repo / model)], check=True)
        for r in range(args.repeats):
            print(f"round {r + 1}/{args.repeats}", file=sys.stderr)
            rounds_noisy.append(noisy(args.bin, repo, tmp, env, args.secs))
            rounds_weights.append(weights(args.bin, repo, tmp, env, args.secs))
            rounds_cost.append(cost(args.bin, repo, tmp, env, args.secs))
    print(f"\n1. B at c=1 beside A's flood (perf_analyzer c={FLOOD}); ms, medians (min-max) of {args.repeats}")
    print("| model | setting | B p50 ms | B p99 ms | p99 / alone | B failures | B requests |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model in MODELS:
        alone = [r[(model, "alone")][1] for r in rounds_noisy]
        for setting in ("alone", "no file", "tenants 1:1"):
            cells = [r[(model, setting)] for r in rounds_noisy]
            ratio = [c[1] / a for c, a in zip(cells, alone)]
            print(f"| {model} | {setting} | {fmt([c[0] for c in cells], 2)} | {fmt([c[1] for c in cells], 2)} | "
                  f"{fmt(ratio, 2)} | {sum(c[2] for c in cells)} | {fmt([c[3] for c in cells], 0)} |")
    print(f"\n2. Weights 3:1, both at c={FLOOD}: throughput infer/s")
    print("| model | A (weight 3) | B (weight 1) | A / B |")
    print("|---|---:|---:|---:|")
    for model in MODELS:
        cells = [r[model] for r in rounds_weights]
        ratios = [a / b for a, b in cells if a and b]
        print(f"| {model} | {fmt([c[0] for c in cells], 0)} | {fmt([c[1] for c in cells], 0)} | {fmt(ratios, 2)} |")
    print("\n3. Server CPU per inference, add_sub, perf_analyzer c=8: µs")
    base = [r["no file"] for r in rounds_cost]
    one = [r["one tenant"] for r in rounds_cost]
    ratio = [o / b for o, b in zip(one, base) if o and b]
    print(f"| no tenants file | one tenant | ratio |\n|---:|---:|---:|\n| {fmt(base, 0)} | {fmt(one, 0)} | {fmt(ratio, 3)} |")


if __name__ == "__main__":
    main()
