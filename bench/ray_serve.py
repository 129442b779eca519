#!/usr/bin/env python3
"""Tessera under Ray Serve against Tessera's own HTTP door, on the same model (the quickstart's ONNX
add_sub, FP32 [1, 16]), at concurrency 8 (closed loop, one keep-alive connection per client thread):

- through Ray: a real two-node local Ray cluster (tests/ray_cluster.py), Ray Serve's HTTP proxy on
  the head node, the two replicas of examples/ray_serve/tessera_deployment.py (one per node), each
  running Tessera in-process (tessera.tritonserver); JSON {"INPUT0": [...], "INPUT1": [...]};
- direct: `tessera serve` (target/release/tessera, else target/debug/tessera, or --bin) on the
  same repository, KServe v2 JSON to /v2/models/add_sub/infer.

REPEATS interleaved windows of SECS each (alternating which side goes first). Per side: req/s,
p50 and p99 latency, and the server side's CPU per request (utime + stime of every process of the
two Ray nodes, or of the tessera process; Ray's idle burn, measured before the windows, taken off).
Prints a markdown table of medians (min-max) and what Ray adds per request: p50 and CPU.

    .venv/bin/python bench/ray_serve.py [--repeats 3] [--secs 5] [--concurrency 8]

Needs `.venv/bin/pip install -r tests/requirements-ray.txt` and the tessera package
(scripts/setup.sh). The client threads, both Ray nodes and the direct server share the machine's
cores; everything stays on loopback.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from ray_cluster import ray_cluster  # noqa: E402
from ray_serve_load import (  # noqa: E402
    KServeAddSub,
    ServeAddSub,
    cpu_seconds,
    idle_cpu_per_s,
    measure,
)
from tessera_testlib import free_port, start_server, wait_model_ready  # noqa: E402

QUICKSTART = ROOT / "model-repos" / "quickstart"
DEPLOYMENT = ROOT / "examples" / "ray_serve" / "tessera_deployment.py"
ROUTE = "/add_sub"


def default_bin() -> Path:
    for p in (os.environ.get("TESSERA_BIN"), ROOT / "target" / "release" / "tessera", ROOT / "target" / "debug" / "tessera"):
        if p and Path(p).is_file():
            return Path(p)
    sys.exit("no tessera binary: build it (cargo build --release) or pass --bin")


def load_deployment(path: Path, class_name: str):
    import ray.cloudpickle

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)  # the nodes' workers do not have it on their path
    return getattr(module, class_name)


def fmt(values: list[float], digits: int = 0) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--bin", type=Path, default=None, help="the tessera binary for the direct side")
    ap.add_argument("--deployment", type=Path, default=DEPLOYMENT)
    ap.add_argument("--deployment-class", default="TesseraAddSub")
    args = ap.parse_args()
    bin_path = args.bin or default_bin()
    conc = args.concurrency

    from ray import serve

    deployment = load_deployment(args.deployment, args.deployment_class)
    logs = Path(tempfile.mkdtemp(prefix="tessera-ray-bench."))
    rows: dict[str, list] = {"ray": [], "direct": []}
    timings = {}
    with ray_cluster(env={"RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0"}) as cluster:
        timings["cluster start"] = cluster.started_s
        port = free_port()
        t = time.monotonic()
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        serve.run(deployment.bind(model_repository=str(QUICKSTART)), name="tessera", route_prefix=ROUTE)
        timings["serve.run"] = time.monotonic() - t
        srv = start_server(logs, [QUICKSTART], ["--model-control-mode", "explicit", "--load-model", "add_sub"],
                           bin_path=bin_path, name="direct")
        try:
            wait_model_ready(srv, "add_sub")
            ray_cpu = lambda: cpu_seconds(cluster.pids())  # noqa: E731
            direct_cpu = lambda: cpu_seconds([srv.process.pid])  # noqa: E731
            idle = {"ray": idle_cpu_per_s(ray_cpu), "direct": idle_cpu_per_s(direct_cpu)}
            sides = {
                "ray": ("127.0.0.1", port, ServeAddSub(ROUTE), ray_cpu),
                "direct": ("127.0.0.1", srv.http_port, KServeAddSub("add_sub"), direct_cpu),
            }
            for r in range(args.repeats):
                order = ["ray", "direct"] if r % 2 == 0 else ["direct", "ray"]
                for name in order:
                    host, p, f, cpu = sides[name]
                    m = measure(name, host, p, f, cpu, concurrency=conc, duration_s=args.secs,
                                idle_per_s=idle[name])
                    print(f"{name}: {m.load.summary()}; server CPU {m.server_cpu_us_per_request:.0f} µs/req",
                          file=sys.stderr)
                    rows[name].append(m)
        finally:
            srv.stop()
            serve.shutdown()

    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores shared by the client threads, both Ray "
          f"nodes and the direct server; {args.repeats} windows of {args.secs:g} s per side; c={conc}; "
          f"HTTP JSON, one [1, 16] request each")
    print(f"command: .venv/bin/python bench/ray_serve.py --repeats {args.repeats} --secs {args.secs:g} "
          f"--concurrency {conc}   (direct: {bin_path.relative_to(ROOT) if bin_path.is_relative_to(ROOT) else bin_path})")
    print(f"Ray idle burn (GCS, raylets, agents, Serve controller and health checks): "
          f"{idle['ray'] * 1000:.0f} ms CPU/s, taken off the CPU column; "
          f"cluster start {timings['cluster start']:.1f} s, serve.run {timings['serve.run']:.1f} s\n")
    names = {"ray": "Ray Serve proxy -> replica (in-process Tessera)", "direct": f"Tessera HTTP door ({bin_path.name} serve)"}
    print("| path | c | req/s | p50 µs | p99 µs | server CPU µs / req | lost |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    med = {}
    for name, ms in rows.items():
        rps = [m.load.rps for m in ms]
        p50 = [m.load.p50_us for m in ms]
        p99 = [m.load.percentile_us(0.99) for m in ms]
        cpu = [m.server_cpu_us_per_request for m in ms]
        med[name] = (statistics.median(rps), statistics.median(p50), statistics.median(cpu))
        print(f"| {names[name]} | {conc} | {fmt(rps)} | {fmt(p50)} | {fmt(p99)} | {fmt(cpu)} | "
              f"{sum(m.load.lost for m in ms)} |")
    (r_rps, r_p50, r_cpu), (d_rps, d_p50, d_cpu) = med["ray"], med["direct"]
    print(f"\nRay adds per request (medians): p50 +{r_p50 - d_p50:.0f} µs ({r_p50 / d_p50:.1f}x the direct "
          f"door's), server CPU +{r_cpu - d_cpu:.0f} µs ({r_cpu / d_cpu:.1f}x); req/s {r_rps / d_rps:.2f}x")


if __name__ == "__main__":
    main()
