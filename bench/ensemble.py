#!/usr/bin/env python3
"""Ensemble and BLS fan-out overhead, Tessera beside the reference NVIDIA Triton, in one run.

What it measures (server-side time from the statistics extension, so the load generator sharing
the 2 cores does not blur it; plus server CPU per inference from /proc):

  1. Ensemble step overhead. Under perf_analyzer load on an ensemble whose steps are all `add_sub`,
     the ensemble's mean request time minus its steps' mean request time (both from the same
     measurement window: the steps' statistics count the requests the ensemble made), divided by
     the number of steps. `ens_add_sub` has one step (the reference repository's own ensemble);
     `ens_add_sub_x4` chains four. Triton's side is the same ensembles over its python-backend
     add_sub; Tessera's over its ONNX add_sub.
  2. BLS fan-out (Tessera): the `bls_fanout` guest calls a target 4 times, in parallel
     (infer-async) or one after another (request parameter mode=sequential); `calls=1` makes one
     call, the baseline. Two targets: `fanout_target` (add_sub, ~35 µs of CPU a call) and
     `fanout_wait` (the same with a 1 ms batching delay for a lone call). Reported: mean request time of each and the ratios parallel / one call
     and parallel / sequential. (These three run over gRPC: perf_analyzer sends request
     parameters only over gRPC. Server-side time does not depend on the door.)

usage: bench/ensemble.py [--tessera-bin target/release/tessera] [--secs 4] [--repeats 3] [--conc 1]
                         [--only tessera|triton]
Prints a markdown table; everything listens on 127.0.0.1 (Tessera 18300-18302, Triton 18400-18402).
Needs scripts/setup.sh (models, guests) and ../shared/reference/triton/setup.sh (perf_analyzer and
tritonserver); about 4 minutes with the defaults.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import QUICKSTART, REFERENCE, ROOT, cpu_seconds, fmt, perf, reference_env, stats, wait_ready
# fanout_target: the add_sub graph, ~35 µs a call; fanout_wait: the same, but a call alone waits out
# a 1 ms batching delay (four together do not), like a model whose calls take time.
FANOUT_TARGETS = ("fanout_target", "fanout_wait")


def chain_config(name: str, steps: int) -> str:
    """An ensemble of `steps` add_sub steps: (A, B) -> (A+B, A-B) -> (2A, 2B) -> ..."""
    parts = []
    a, b = "INPUT0", "INPUT1"
    for i in range(steps):
        last = i == steps - 1
        x, y = ("OUTPUT0", "OUTPUT1") if last else (f"s{i}", f"d{i}")
        parts.append(
            f'{{ model_name: "add_sub" model_version: -1 input_map {{ key: "INPUT0" value: "{a}" }} '
            f'input_map {{ key: "INPUT1" value: "{b}" }} output_map {{ key: "OUTPUT0" value: "{x}" }} '
            f'output_map {{ key: "OUTPUT1" value: "{y}" }} }}')
        a, b = x, y
    io = ('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, '
          '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
          'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, '
          '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n')
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{io}'
            f'ensemble_scheduling {{ step [ {", ".join(parts)} ] }}\n')


def add_ensembles(repo: Path) -> None:
    for name, steps in (("ens_add_sub", 1), ("ens_add_sub_x4", 4)):
        d = repo / name
        if d.exists():
            shutil.rmtree(d)
        (d / "1").mkdir(parents=True)
        (d / "config.pbtxt").write_text(chain_config(name, steps))


def tessera_repo(work: Path) -> Path:
    repo = work / "tessera-repo"
    repo.mkdir()
    for model in ("add_sub", "bls_fanout", "fanout_target"):
        if (QUICKSTART / model).is_dir():
            shutil.copytree(QUICKSTART / model, repo / model)
    if (repo / "fanout_target").is_dir():
        # A target whose calls wait, as real models' do: a lone request waits out a 1 ms queue
        # delay, four that arrive together run at once as one batch.
        shutil.copytree(repo / "fanout_target", repo / "fanout_wait")
        config = (repo / "fanout_wait" / "config.pbtxt").read_text()
        config = config.replace('name: "fanout_target"', 'name: "fanout_wait"').replace(
            "dynamic_batching { }",
            "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000 }")
        (repo / "fanout_wait" / "config.pbtxt").write_text(config)
        fanout = repo / "bls_fanout" / "config.pbtxt"
        fanout.write_text(fanout.read_text().replace('string_value: "fanout_target,', 'string_value: "fanout_wait,fanout_target,'))
    add_ensembles(repo)
    return repo


def triton_repo(work: Path) -> Path:
    repo = work / "triton-repo"
    shutil.copytree(REFERENCE / "model_repository", repo)
    for d in repo.iterdir():
        if d.is_dir():
            (d / "1").mkdir(exist_ok=True)  # the reference ens_add_sub has no version directory
    add_ensembles(repo)
    return repo


def window(env, port, pid, model, steps_model, conc, secs, params=()):
    """One measurement window: (mean request µs of model, mean request µs of steps_model or None,
    CPU µs per request of the whole server, client infer/s)."""
    perf(env, port, model, conc, 1, list(params))  # warm-up
    n0, ns0, _ = stats(port, model)
    m0 = stats(port, steps_model) if steps_model else (0, 0)
    c0 = cpu_seconds(pid)
    thr = perf(env, port, model, conc, secs, list(params))
    c1 = cpu_seconds(pid)
    n1, ns1, _ = stats(port, model)
    m1 = stats(port, steps_model) if steps_model else (0, 0)
    n = max(n1 - n0, 1)
    step_us = (m1[1] - m0[1]) / max(m1[0] - m0[0], 1) / 1000 if steps_model else None
    return (ns1 - ns0) / n / 1000, step_us, m1[0] - m0[0], n, (c1 - c0) * 1e6 / n, thr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera-bin", default=str(ROOT / "target" / "release" / "tessera"))
    ap.add_argument("--secs", type=float, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conc", type=int, default=1)
    ap.add_argument("--only", choices=["tessera", "triton"])
    args = ap.parse_args()
    env = reference_env()
    work = Path(tempfile.mkdtemp(prefix="tessera-bench-ensemble."))
    procs = []
    servers = {}
    try:
        if args.only != "triton":
            repo = tessera_repo(work)
            ort = ROOT / ".venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1"
            log = open(work / "tessera.log", "w")
            p = subprocess.Popen([args.tessera_bin, "serve", "--model-repository", str(repo),
                                  "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
                                  "--metrics-address", "127.0.0.1", "--http-port", "18300",
                                  "--grpc-port", "18301", "--metrics-port", "18302"],
                                 env=dict(os.environ, ORT_DYLIB_PATH=os.environ.get("ORT_DYLIB_PATH", str(ort))),
                                 stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            wait_ready(18300, p, "tessera")
            servers["tessera"] = (18300, p.pid)
        if args.only != "tessera":
            if not REFERENCE.is_dir():
                sys.exit(f"{REFERENCE} not found (set TRITON_REFERENCE)")
            out = subprocess.run(["bash", str(REFERENCE / "run.sh"), str(triton_repo(work))], capture_output=True, text=True,
                                 env=dict(os.environ, HTTP_PORT="18400", GRPC_PORT="18401", METRICS_PORT="18402",
                                          RUN_DIR=str(work / "triton-run")))
            if out.returncode != 0:
                sys.exit(f"reference triton failed to start: {out.stderr[-500:]}")
            servers["triton"] = (18400, int(out.stdout.split()[-1]))

        rows: dict[tuple[str, str], list] = {}
        for rep in range(args.repeats):
            order = list(servers) if rep % 2 == 0 else list(reversed(servers))
            for name in order:
                port, pid = servers[name]
                for model, steps in (("add_sub", 0), ("ens_add_sub", 1), ("ens_add_sub_x4", 4)):
                    rows.setdefault((name, model), []).append(
                        window(env, port, pid, model, "add_sub" if steps else None, args.conc, args.secs))
                if name == "tessera" and (QUICKSTART / "bls_fanout").is_dir():
                    for target in FANOUT_TARGETS:
                        for label, params in (("1 call", ["calls:1:int"]), ("4 parallel", []),
                                              ("4 sequential", ["mode:sequential:string"])):
                            rows.setdefault((name, f"bls_fanout -> {target}, {label}"), []).append(
                                window(env, port, pid, "bls_fanout", target, args.conc, args.secs,
                                       params + [f"target:{target}:string"]))

        print(f"\nconcurrency {args.conc}, {args.repeats} windows of {args.secs:.0f} s each; median (min-max); "
              "server-side µs from the statistics extension\n")
        print("| server | model | request µs | steps' own µs / call | overhead µs per step | server CPU µs / request "
              "| client infer/s |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for (name, model), ws in rows.items():
            steps = {"ens_add_sub": 1, "ens_add_sub_x4": 4}.get(model)
            overhead = [(w[0] - w[1] * w[2] / w[3]) / steps for w in ws] if steps else []
            print(f"| {name} | {model} | {fmt([w[0] for w in ws])} | "
                  f"{fmt([w[1] for w in ws if w[1] is not None]) if ws[0][1] is not None else ''} | "
                  f"{fmt(overhead) if steps else ''} | {fmt([w[4] for w in ws])} | "
                  f"{fmt([w[5] for w in ws if w[5]], 0)} |")
        fan = {k[1]: statistics.median([w[0] for w in v]) for k, v in rows.items() if k[1].startswith("bls_fanout")}
        for target in FANOUT_TARGETS:
            one, par, seq = (fan.get(f"bls_fanout -> {target}, {label}", 0)
                             for label in ("1 call", "4 parallel", "4 sequential"))
            if one > 0 and seq > 0:
                print(f"\nBLS fan-out to {target} (medians): 4 parallel / 1 call = {par / one:.2f}x; "
                      f"4 sequential / 1 call = {seq / one:.2f}x; parallel / sequential = {par / seq:.2f}x")
        print(f"\nmachine: {os.cpu_count()} cores; {subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()}; "
              f"tessera binary {args.tessera_bin}")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if "triton" in servers:
            subprocess.run(["bash", str(REFERENCE / "stop.sh")], capture_output=True,
                           env=dict(os.environ, RUN_DIR=str(work / "triton-run")))
        print(f"logs: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
