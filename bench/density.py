#!/usr/bin/env python3
"""Density: how many Wasm models one server holds, how fast they load, and what a cold model costs.

    usage: .venv/bin/python bench/density.py [N ...]      (after scripts/setup.sh; default 1000 10000)

For each N it writes a repository of N copies of add_sub_rust under distinct names (`m00000`...,
each with its own config.pbtxt and its own copy of model.wasm; every DISTINCT_EVERY-th (default
10th) copy is a distinct component, the same code with a custom section that differs, so the
compile cache holds N/DISTINCT_EVERY components), warms the compile cache with one start, then starts the server again and reports:
- time from spawning the process to /v2/health/ready (every model loaded);
- the server's RSS then, and after every model has answered once;
- that every model answers correctly (OUTPUT0 = INPUT0 + INPUT1), one request each;
- first-request latency of a model whose instance is not live (evicted or never started), from a
  keep-alive client, p50 / p99 / max over `COLD` (default 500) models picked at random;
- the same for a model that is live (warm), for comparison.

Prints a markdown table. Everything listens on 127.0.0.1. Env: TESSERA_BIN, COLD, EXTRA_ARGS
(appended to the server's command line, e.g. "--wasm-max-instances 200").
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "model-repos" / "quickstart" / "add_sub_rust"
BIN = Path(os.environ.get("TESSERA_BIN", ROOT / "target" / "release" / "tessera"))
COLD = int(os.environ.get("COLD", "500"))
DISTINCT_EVERY = int(os.environ.get("DISTINCT_EVERY", "10"))
EXTRA_ARGS = os.environ.get("EXTRA_ARGS", "").split()
PORT = 18400


def custom_section(tag: int) -> bytes:
    """A component-level custom section (id 0) named `tessera-bench` holding `tag`: the same code,
    other bytes, so another compile-cache entry."""
    name = b"tessera-bench"
    payload = bytes([len(name)]) + name + struct.pack("<I", tag)
    size, leb = len(payload), b""
    while True:
        byte = size & 0x7F
        size >>= 7
        leb += bytes([byte | (0x80 if size else 0)])
        if not size:
            break
    return b"\x00" + leb + payload


def write_repo(repo: Path, n: int) -> None:
    wasm = (SOURCE / "1" / "model.wasm").read_bytes()
    config = (SOURCE / "config.pbtxt").read_text()
    for i in range(n):
        name = f"m{i:05d}"
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config.replace('name: "add_sub_rust"', f'name: "{name}"'))
        (repo / name / "1" / "model.wasm").write_bytes(wasm + custom_section(i // DISTINCT_EVERY))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start(repo: Path, cache: Path) -> tuple[subprocess.Popen, float]:
    argv = [str(BIN), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
            "--http-port", str(PORT), "--allow-grpc", "false", "--allow-metrics", "false",
            "--wasm-cache-dir", str(cache), "--log-info", "false", "--exit-on-error", "false", *EXTRA_ARGS]
    t0 = time.monotonic()
    log = open(cache.parent / "server.log", "wb")  # a file, not a pipe nobody reads while it loads
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    proc.log_path = log.name
    while time.monotonic() - t0 < 900:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {Path(proc.log_path).read_text()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1)
            c.request("GET", "/v2/health/ready")
            # The doors open once startup loading has finished, successful or not.
            status = c.getresponse().status
            took = time.monotonic() - t0
            if status != 200:
                proc.kill()
                raise RuntimeError(f"loaded in {took:.2f} s but not ready: {Path(proc.log_path).read_text()[-1500:]}")
            return proc, took
        except OSError:
            pass
        time.sleep(0.01)
    proc.kill()
    raise RuntimeError("not ready in 900 s")


BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [float(i) for i in range(16)]},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]}).encode()


def infer(conn: http.client.HTTPConnection, model: str) -> float:
    t = time.perf_counter()
    conn.request("POST", f"/v2/models/{model}/infer", body=BODY, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    took = time.perf_counter() - t
    if r.status != 200:
        raise RuntimeError(f"{model}: HTTP {r.status}: {data[:300]!r}")
    out = {o["name"]: o["data"] for o in json.loads(data)["outputs"]}
    if out["OUTPUT0"] != [float(i) + 1.0 for i in range(16)]:
        raise RuntimeError(f"{model}: wrong OUTPUT0 {out['OUTPUT0']}")
    return took


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def measure(n: int, tmp: Path) -> dict:
    repo, cache = tmp / f"repo{n}", tmp / f"cache{n}"
    write_repo(repo, n)
    proc, _ = start(repo, cache)  # compiles every distinct component once
    proc.terminate()
    proc.wait(timeout=60)
    proc, ready_s = start(repo, cache)
    try:
        rss_ready = rss_kib(proc.pid)
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        names = [f"m{i:05d}" for i in range(n)]
        t = time.monotonic()
        first = [infer(conn, m) for m in names]  # every model answers correctly
        sweep_s = time.monotonic() - t
        rss_all = rss_kib(proc.pid)
        maps = len(Path(f"/proc/{proc.pid}/maps").read_text().splitlines())
        rng = random.Random(7)
        cold = []
        # The sweep left the last-used models live: the earliest ones are the least recently used.
        for m in rng.sample(names[: n // 2], min(COLD, n // 2)):
            cold.append(infer(conn, m))
        warm_model = names[-1]
        warm = [infer(conn, warm_model) for _ in range(COLD)]
        return {"n": n, "ready_s": ready_s, "rss_ready": rss_ready, "rss_all": rss_all, "maps": maps, "sweep_s": sweep_s,
                "first_p99": pct(first, 99), "cold": cold, "warm": warm}
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> int:
    if not BIN.exists():
        print(f"{BIN} missing: cargo build --release (or set TESSERA_BIN)", file=sys.stderr)
        return 1
    counts = [int(a) for a in sys.argv[1:]] or [1000, 10000]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-density-") as t:
        for n in counts:
            rows.append(measure(n, Path(t)))
            shutil.rmtree(Path(t) / f"repo{n}", ignore_errors=True)
    print(f"### Wasm model density, warm compile cache, {os.cpu_count()} CPUs\n")
    print("| models | ready s | RSS MiB at ready | RSS MiB after all answered | all answered in s "
          "| memory maps | cold first request ms p50 / p99 / max | live model ms p50 / p99 |")
    print("|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        c, w = r["cold"], r["warm"]
        print(f"| {r['n']:,} | {r['ready_s']:.2f} | {r['rss_ready'] / 1024:.0f} | {r['rss_all'] / 1024:.0f} "
              f"| {r['sweep_s']:.1f} | {r['maps']:,} | {statistics.median(c) * 1e3:.2f} / {pct(c, 99) * 1e3:.2f} / {max(c) * 1e3:.2f} "
              f"| {statistics.median(w) * 1e3:.2f} / {pct(w, 99) * 1e3:.2f} |")
    print(f"\nCommand: `.venv/bin/python bench/density.py {' '.join(map(str, counts))}` "
          f"(COLD={COLD}, extra args: {' '.join(EXTRA_ARGS) or 'none'}). Latency is client-side over one "
          f"keep-alive HTTP connection (JSON); one distinct component per {DISTINCT_EVERY} models; memory maps: "
          "lines of /proc/PID/maps after every model answered (the kernel's limit, vm.max_map_count, is "
          f"{Path('/proc/sys/vm/max_map_count').read_text().strip()} here).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
