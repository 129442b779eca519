#!/usr/bin/env python3
"""Noisy neighbours: a well-behaved model's latency alone and next to four misbehaving tenants.

    usage: .venv/bin/python bench/noisy.py      (after scripts/setup.sh)

One server holds `good` (add_sub_rust) and four copies of the sandbox-test guest `faulty`, each
with the quotas an operator would give an untrusted tenant (see QUOTAS below):
- `burner` spins on every call until its time limit stops it (mode `loop`);
- `trapper` traps on every call (mode `trap`), so its instance is rebuilt every time;
- `hog` allocates until its memory cap stops it (mode `oom`);
- `flooder` runs slow executions (mode `loop` with a 1 ms limit), one at a time, and is sent far
  more requests than its queue quota holds.

Phase 1 runs GOOD_THREADS closed-loop clients against `good` for SECONDS_PER_PHASE; phase 2 does
the same while each neighbour has a client process of its own (no shared GIL with good's client):
burner, trapper and hog at up to NEIGHBOUR_RATE requests per second each, the flooder with
FLOOD_THREADS unpaced threads. It
reports good's client-side latency p50 / p99 / max in both phases and their ratio, good's failed
requests, what the neighbours got back, and the server's RSS before, during, and after (once
the neighbours stop and their instances are evicted by `--wasm-instance-idle-secs 1`). REPEATS
(default 3) runs of both phases give the medians and spread. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("TESSERA_BIN", ROOT / "target" / "release" / "tessera"))
FAULTY = ROOT / "target" / "guests" / "faulty" / "model.wasm"
GOOD = ROOT / "model-repos" / "quickstart" / "add_sub_rust"
SECONDS = float(os.environ.get("SECONDS_PER_PHASE", "10"))
GOOD_THREADS = int(os.environ.get("GOOD_THREADS", "2"))
FLOOD_THREADS = int(os.environ.get("FLOOD_THREADS", "16"))
REPEATS = int(os.environ.get("REPEATS", "3"))
NEIGHBOUR_RATE = float(os.environ.get("NEIGHBOUR_RATE", "50"))
PORT = 18500
# NO_QUOTAS=1: the same tenants with only their time and memory limits, for comparison.
NO_QUOTAS = os.environ.get("NO_QUOTAS") == "1"

# An untrusted tenant's quotas: CPU time a few percent of one core, so that what it does with
# that time lands on another request's 99th percentile rarely.
QUOTAS = {
    "burner": ("loop", {"max_execute_ms": "10", "max_cpu_ms_per_second": "10"}),
    "trapper": ("trap", {"max_cpu_ms_per_second": "10"}),
    "hog": ("oom", {"max_memory_bytes": str(32 << 20), "max_cpu_ms_per_second": "10"}),
    "flooder": ("loop", {"max_execute_ms": "1", "max_queue_size": "4", "max_concurrent_executions": "1",
                         "max_cpu_ms_per_second": "20"}),
}


def tenant_params(params: dict) -> dict:
    if not NO_QUOTAS:
        return params
    return {k: v for k, v in params.items() if k in ("max_execute_ms", "max_memory_bytes")}


def write_repo(repo: Path) -> None:
    shutil.copytree(GOOD, repo / "good")
    cfg = repo / "good" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "add_sub_rust"', 'name: "good"'))
    for name, (_, params) in QUOTAS.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(FAULTY, repo / name / "1" / "model.wasm")
        lines = [
            f'name: "{name}"', 'backend: "wasm"', "max_batch_size: 0",
            'input [ { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] }, '
            '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]',
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]',
            "instance_group [ { count: 1 kind: KIND_CPU } ]",
        ]
        lines += [f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
                  for k, v in tenant_params(params).items()]
        (repo / name / "config.pbtxt").write_text("\n".join(lines) + "\n")


GOOD_BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16}]}).encode()


def faulty_body(mode: str) -> bytes:
    return json.dumps({"inputs": [
        {"name": "MODE", "shape": [1], "datatype": "BYTES", "data": [mode]},
        {"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}).encode()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def client(model: str, body: bytes, stop, sink: list, lock: threading.Lock, pause: float = 0.0) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    mine = []
    while not stop.is_set():
        t = time.perf_counter()
        try:
            conn.request("POST", f"/v2/models/{model}/infer", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            status = r.status
        except OSError:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
            status = -1
        mine.append((status, time.perf_counter() - t))
        if pause:
            time.sleep(pause)
    with lock:
        sink.extend(mine)


def neighbour(name: str, mode: str, stop, out) -> None:
    """One tenant's client process, each thread paced at NEIGHBOUR_RATE requests per second: one
    thread, or FLOOD_THREADS for the flooder, whose slow executions (1 ms time limit) then overflow
    its queue."""
    lock, results = threading.Lock(), []
    n = FLOOD_THREADS if name == "flooder" else 1
    pause = 1.0 / NEIGHBOUR_RATE
    threads = [threading.Thread(target=client, args=(name, faulty_body(mode), stop, results, lock, pause))
               for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((name, summarize(results)))


def phase(with_neighbours: bool, pid: int) -> dict:
    stop, lock = threading.Event(), threading.Lock()
    good: list = []
    threads = [threading.Thread(target=client, args=("good", GOOD_BODY, stop, good, lock))
               for _ in range(GOOD_THREADS)]
    procs, out, mp_stop = [], multiprocessing.Queue(), multiprocessing.Event()
    if with_neighbours:
        procs = [multiprocessing.Process(target=neighbour, args=(name, mode, mp_stop, out))
                 for name, (mode, _) in QUOTAS.items()]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    rss_peak = 0
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        rss_peak = max(rss_peak, rss_kib(pid))
        time.sleep(0.1)
    stop.set()
    mp_stop.set()
    for t in threads:
        t.join()
    others = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join()
    lat = sorted(d for s, d in good if s == 200)
    return {
        "n": len(lat), "failed": sum(1 for s, _ in good if s != 200),
        "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)], "max": lat[-1],
        "others": others, "rss_peak": rss_peak,
    }


def cpu_ms_by_model() -> dict[str, float]:
    """tessera_model_cpu_duration_us per model, in ms, from /metrics."""
    c = http.client.HTTPConnection("127.0.0.1", PORT + 2, timeout=10)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith("tessera_model_cpu_duration_us{"):
            model = line.split('model="', 1)[1].split('"', 1)[0]
            out[model] = float(line.rsplit(" ", 1)[1]) / 1000
    return out


def summarize(results: list) -> str:
    counts: dict[int, int] = {}
    for s, _ in results:
        counts[s] = counts.get(s, 0) + 1
    return ", ".join(f"{n} x {s}" for s, n in sorted(counts.items())) or "-"


def main() -> int:
    for p in (BIN, FAULTY):
        if not p.exists():
            print(f"{p} missing: scripts/setup.sh and cargo build --release", file=sys.stderr)
            return 1
    runs = []
    with tempfile.TemporaryDirectory(prefix="tessera-noisy-") as t:
        repo = Path(t) / "repo"
        write_repo(repo)
        argv = [str(BIN), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
                "--http-port", str(PORT), "--allow-grpc", "false", "--metrics-port", str(PORT + 2),
                "--wasm-cache-dir", str(Path(t) / "cache"), "--log-info", "false", "--log-warning", "false",
                "--wasm-instance-idle-secs", "1"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1)
                    c.request("GET", "/v2/health/ready")
                    if c.getresponse().status == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("server did not become ready")
                time.sleep(0.05)
            phase(False, proc.pid)  # warm-up
            for _ in range(REPEATS):
                rss_before = rss_kib(proc.pid)
                alone = phase(False, proc.pid)
                cpu_before = cpu_ms_by_model()
                noisy = phase(True, proc.pid)
                cpu_after = cpu_ms_by_model()
                noisy["cpu_ms"] = {m: cpu_after[m] - cpu_before.get(m, 0.0) for m in cpu_after}
                time.sleep(3)  # idle instances are evicted after 1 s (the sweeper runs every 250 ms)
                runs.append((alone, noisy, rss_before, rss_kib(proc.pid)))
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    def med(values):
        return statistics.median(values)

    print(f"### Noisy neighbours ({os.cpu_count()} CPUs, {SECONDS:.0f} s per phase, {GOOD_THREADS} good clients, "
          f"median of {REPEATS} runs, min-max in brackets)\n")
    print("| | good p50 ms | good p99 ms | good max ms | good requests | good failed | server RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, idx in (("alone", 0), ("with neighbours", 1)):
        ph = [r[idx] for r in runs]
        p50, p99 = [x["p50"] * 1e3 for x in ph], [x["p99"] * 1e3 for x in ph]
        print(f"| {label} | {med(p50):.2f} ({min(p50):.2f}-{max(p50):.2f}) | {med(p99):.2f} "
              f"({min(p99):.2f}-{max(p99):.2f}) | {med([x['max'] * 1e3 for x in ph]):.1f} | "
              f"{med([x['n'] for x in ph]):,.0f} | {sum(x['failed'] for x in ph)} | "
              f"{med([x['rss_peak'] / 1024 for x in ph]):.0f} (peak) |")
    ratios = [r[1]["p99"] / r[0]["p99"] for r in runs]
    print(f"\np99 ratio (with / alone): median {med(ratios):.2f} (runs: {', '.join(f'{x:.2f}' for x in ratios)}); "
          f"RSS before each run {', '.join(f'{r[2] / 1024:.0f}' for r in runs)} MiB, after (neighbours stopped, "
          f"instances evicted) {', '.join(f'{r[3] / 1024:.0f}' for r in runs)} MiB.\n")
    last = runs[-1][1]
    print("What the neighbours got (last run): " + "; ".join(
        f"{k}: {v} ({last['cpu_ms'].get(k, 0) / SECONDS:.0f} ms of guest CPU per second)"
        for k, v in last["others"].items()))
    print(f"\ngood's own guest CPU: {last['cpu_ms'].get('good', 0) / SECONDS:.0f} ms per second.")
    print(f"\nQuotas: {json.dumps({k: tenant_params(v[1]) for k, v in QUOTAS.items()})}. "
          f"Command: `{'NO_QUOTAS=1 ' if NO_QUOTAS else ''}.venv/bin/python bench/noisy.py`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
