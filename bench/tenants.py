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

Each cell is a window of SECS seconds, in REPEATS interleaved rounds (part 3: two servers side by
side, 2 x REPEATS windows alternating between them); medians (min-max). Needs
scripts/setup.sh and ../shared/reference/triton/setup.sh (perf_analyzer). Everything listens on
127.0.0.1.

    .venv/bin/python bench/tenants.py [--bin target/release/tessera] [--repeats 3] [--secs 8]
        [--only noisy|weights|cost]
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

MODELS = ("add_sub", "add_sub_rust", "queue_bound")
# A model whose executions wait rather than compute: Triton's identity backend taking 2 ms per
# batch of up to 8 on one instance, so the flood fills its queue without saturating the CPU.
QUEUE_BOUND = """name: "queue_bound"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
parameters [ { key: "execute_delay_ms" value: { string_value: "2" } } ]
"""
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
    def __init__(self, binary: Path, repo: Path, tenants: Path | None, log: Path, port: int = PORT):
        self.port = port
        args = [str(binary), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
                "--http-port", str(port), "--grpc-port", str(port + 1), "--metrics-port", str(port + 2)]
        if tenants:
            args += ["--tenants", str(tenants)]
        self.proc = subprocess.Popen(args, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
        wait_ready(port, self.proc, "tessera", timeout=300)

    def stop(self) -> None:
        stop_tree(self.proc)


def perf_cmd(env: dict, model: str, conc: int, secs: float, key: str | None, port: int = PORT) -> list[str]:
    cmd = [env["PERF_ANALYZER"], "-m", model, "-u", f"127.0.0.1:{port}", "-i", "http", "-b", "1",
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


def queue_us(tenant: str) -> tuple[float, float]:
    """The tenant's time in model queues so far (µs) and how many requests passed one."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{PORT + 2}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        for name in ("tessera_tenant_queue_duration_us", "tessera_tenant_queue_requests_total"):
            if line.startswith(f'{name}{{tenant="{tenant}"}}'):
                values[name] = float(line.rsplit(" ", 1)[1])
    return values.get("tessera_tenant_queue_duration_us", 0.0), values.get("tessera_tenant_queue_requests_total", 0.0)


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
                queued = [queue_us(t) for t in ("a", "b")] if tenants else None
                latencies, failures = b_loop(model, secs, key_b)
                waits = None
                if queued:
                    # Mean time in the model's queue per request, A's and B's, in ms.
                    after = [queue_us(t) for t in ("a", "b")]
                    waits = tuple((a[0] - q[0]) / max(a[1] - q[1], 1) / 1000 for a, q in zip(after, queued))
                if flood:
                    if flood.poll() is not None:
                        sys.exit(f"the flood ended before B's window did: {flood.communicate()[0][-400:]}")
                    flood.kill()
                    flood.wait()
                out[(model, setting)] = (statistics.median(latencies), p99(latencies), failures, len(latencies), waits)
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


def inference_count(metrics_port: int, model: str) -> float:
    """The model's successful inferences so far, from /metrics (open in both servers)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("nv_inference_count{") and f'model="{model}"' in line:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def cost_windows(binary: Path, repo: Path, tmp: Path, env: dict, secs: float, repeats: int) -> dict:
    """Part 3: two servers side by side (no file; a file of one tenant), every request with the
    tenant's key, windows alternating between them: server CPU µs per inference under perf_analyzer
    at c=8 on add_sub, the window taken 2 s after the load starts (perf_analyzer only
    generates it)."""
    servers: dict[str, Server] = {}
    try:
        servers["no file"] = Server(binary, repo, None, tmp / "server0.log", PORT)
        one = tenants_file(tmp / "t1.toml", {"a": 1})
        servers["one tenant"] = Server(binary, repo, one, tmp / "server1.log", PORT + 10)
        out = {setting: [] for setting in servers}
        for _ in range(repeats):
            for setting, server in servers.items():
                # The same requests to both (the header too: a server without a file ignores it), so
                # the client does the same work and the load is the same.
                cmd = perf_cmd(env, "add_sub", 8, 600, KEYS["a"], server.port)
                load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env=dict(os.environ, LD_LIBRARY_PATH=env["PERF_ANALYZER_LD_LIBRARY_PATH"]))
                time.sleep(2)
                cpu0, n0 = cpu_seconds(server.proc.pid), inference_count(server.port + 2, "add_sub")
                time.sleep(secs)
                cpu1, n1 = cpu_seconds(server.proc.pid), inference_count(server.port + 2, "add_sub")
                load.kill()
                load.wait()
                out[setting].append((cpu1 - cpu0) / max(n1 - n0, 1) * 1e6)
        return out
    finally:
        for server in servers.values():
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "tessera")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=8)
    ap.add_argument("--only", choices=("noisy", "weights", "cost"), help="run one part")
    args = ap.parse_args()
    env = reference_env()
    rounds_noisy, rounds_weights, costs = [], [], {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repo = tmp / "repo"
        repo.mkdir()
        for model in MODELS[:2]:
            subprocess.run(["cp", "-r", str(QUICKSTART / model), str(repo / model)], check=True)
        (repo / "queue_bound" / "1").mkdir(parents=True)
        (repo / "queue_bound" / "config.pbtxt").write_text(QUEUE_BOUND)
        for r in range(args.repeats):
            print(f"round {r + 1}/{args.repeats}", file=sys.stderr)
            if args.only in (None, "noisy"):
                rounds_noisy.append(noisy(args.bin, repo, tmp, env, args.secs))
            if args.only in (None, "weights"):
                rounds_weights.append(weights(args.bin, repo, tmp, env, args.secs))
        if args.only in (None, "cost"):
            costs = cost_windows(args.bin, repo, tmp, env, args.secs, 2 * args.repeats)
    if rounds_noisy:
        report_noisy(rounds_noisy, args.repeats)
    if rounds_weights:
        report_weights(rounds_weights)
    if costs:
        base, one = costs["no file"], costs["one tenant"]
        ratio = [o / b for o, b in zip(one, base)]
        print(f"\n3. Server CPU per inference, add_sub, perf_analyzer c=8, {len(base)} alternating windows: µs")
        print(f"| no tenants file | one tenant | ratio |\n|---:|---:|---:|\n| {fmt(base, 1)} | {fmt(one, 1)} | "
              f"{fmt(ratio, 3)} |")


def report_noisy(rounds_noisy: list, repeats: int) -> None:
    print(f"\n1. B at c=1 beside A's flood (perf_analyzer c={FLOOD}); ms, medians (min-max) of {repeats}")
    print("| model | setting | B p50 ms | B p99 ms | p99 / alone | B failures | B requests | queue ms A / B |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for model in MODELS:
        alone = [r[(model, "alone")][1] for r in rounds_noisy]
        for setting in ("alone", "no file", "tenants 1:1"):
            cells = [r[(model, setting)] for r in rounds_noisy]
            ratio = [c[1] / a for c, a in zip(cells, alone)]
            waits = [c[4] for c in cells if c[4]]
            wait = f"{fmt([w[0] for w in waits], 2)} / {fmt([w[1] for w in waits], 2)}" if waits else ""
            print(f"| {model} | {setting} | {fmt([c[0] for c in cells], 2)} | {fmt([c[1] for c in cells], 2)} | "
                  f"{fmt(ratio, 2)} | {sum(c[2] for c in cells)} | {fmt([c[3] for c in cells], 0)} | {wait} |")


def report_weights(rounds_weights: list) -> None:
    print(f"\n2. Weights 3:1, both at c={FLOOD}: throughput infer/s")
    print("| model | A (weight 3) | B (weight 1) | A / B |")
    print("|---|---:|---:|---:|")
    for model in MODELS:
        cells = [r[model] for r in rounds_weights]
        ratios = [a / b for a, b in cells if a and b]
        print(f"| {model} | {fmt([c[0] for c in cells], 0)} | {fmt([c[1] for c in cells], 0)} | {fmt(ratios, 2)} |")


if __name__ == "__main__":
    main()
