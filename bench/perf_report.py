#!/usr/bin/env python3
"""The markdown report of bench/perf.sh: reads its results.tsv and the environment perf.sh
exports (machine, commands, pairs) and prints the tables."""
import csv
import os
import statistics as st

rows = list(csv.DictReader(open(os.environ["RESULTS"]), delimiter="\t"))
servers = [s for s in ("tessera", "triton") if any(r["server"] == s for r in rows)]
pairs = os.environ["PAIRS"].split()
concs = sorted({int(r["concurrency"]) for r in rows})


def model(server, pair):
    return pair.split(":", 1)[1] if server == "tessera" else pair.split(":", 1)[0]


def label(server, pair):
    kind = "Tessera" if server == "tessera" else "Triton 2.51 (python backend)"
    return f"{kind} {model(server, pair)}"


def vals(pair, s, c, key, rep=None):
    return [float(r[key]) for r in rows if r["pair"] == pair and r["server"] == s
            and int(r["concurrency"]) == c and r[key] != "NA" and (rep is None or int(r["repeat"]) == rep)]


def med(v):
    return st.median(v) if v else None


def fmt(x, nd=0):
    return "n/a" if x is None else f"{x:,.{nd}f}"


def spread(v, nd=0):
    """The machine's noise: min-max of the repeats."""
    return f"{fmt(min(v), nd)}-{fmt(max(v), nd)}" if v else "n/a"


shm = " with system shared memory" if os.environ["SHM"] == "system" else ""
print(f"### perf_analyzer over {os.environ['PROTOCOL'].upper()}{shm}, batch 1: median of "
      f"{os.environ['REPEATS']} run(s) ({os.environ['MEASURE_MS']} ms windows), min-max in brackets\n")
print("| server, model | c | infer/s | p50 µs | p99 µs | server CPU µs / inference | server-side µs / request "
      "| executions / inference |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for pair in pairs:
    for c in concs:
        for s in servers:
            ips, cpu, srv = (vals(pair, s, c, k) for k in ("infer_per_s", "cpu_us", "server_us"))
            print(f"| {label(s, pair)} | {c} | {fmt(med(ips))} ({spread(ips)}) "
                  f"| {fmt(med(vals(pair, s, c, 'p50_us')))} | {fmt(med(vals(pair, s, c, 'p99_us')))} "
                  f"| {fmt(med(cpu), 1)} ({spread(cpu, 1)}) | {fmt(med(srv), 1)} ({spread(srv, 1)}) "
                  f"| {fmt(med(vals(pair, s, c, 'exec_per_inf')), 2)} |")

if len(servers) == 2:
    print("\n| comparison | c | Tessera/Triton infer/s | p50 | server CPU / inference | server-side / request |")
    print("|---|---:|---:|---:|---:|---:|")
    for pair in pairs:
        for c in concs:
            out = []
            for key in ("infer_per_s", "p50_us", "cpu_us", "server_us"):
                a, b = med(vals(pair, "tessera", c, key)), med(vals(pair, "triton", c, key))
                out.append("n/a" if a is None or not b else f"{a / b:.2f}x")
            print(f"| {model('tessera', pair)} vs {model('triton', pair)} | {c} | " + " | ".join(out) + " |")
    print("\n(infer/s: higher is better; latency and cost ratios: lower is better.)")

# The BLS hop: a model that forwards to add_sub with one BLS call, minus add_sub called directly,
# paired repeat by repeat (the same minute of the machine's noise).
bls = next((p for p in pairs if p.startswith("bls_add_sub:")), None)
direct = next((p for p in pairs if p == "add_sub:add_sub"), None)
if bls and direct:
    print("\n| BLS hop: bls_add_sub minus add_sub, server-side µs / request | c | median | per repeat |")
    print("|---|---:|---:|---|")
    reps = sorted({int(r["repeat"]) for r in rows})
    for s in servers:
        for c in concs:
            hops = []
            for rep in reps:
                a, b = vals(bls, s, c, "server_us", rep), vals(direct, s, c, "server_us", rep)
                if a and b:
                    hops.append(a[0] - b[0])
            name = "Tessera (Rust guest -> ONNX add_sub)" if s == "tessera" else "Triton (python BLS -> python add_sub)"
            print(f"| {name} | {c} | {fmt(med(hops), 1)} | {', '.join(fmt(h, 1) for h in hops) or 'n/a'} |")

ready = []
if os.environ.get("TESSERA_READY_S"):
    ready.append(f"Tessera {os.environ['TESSERA_READY_S']} s")
if os.environ.get("TRITON_READY_S"):
    ready.append(f"Triton {os.environ['TRITON_READY_S']} s")
print(f"""
- machine: {os.environ['NPROC']} CPUs, {os.environ['CPU_MODEL']}, Linux {os.environ['KERNEL']}; client and
  servers share these cores. Load average (1/5/15 min) before: {os.environ['LOAD_START']}, after: {os.environ['LOAD_END']}.
- {os.environ['DATE']}, tessera repo at {os.environ['GIT_REV']}, {os.environ['PA_VERSION']}.
- start to ready: {', '.join(ready) or 'n/a'}.
- server CPU: the process tree's utime+stime over the window (Triton's stub processes included);
  server-side: the statistics extension's success time per request (bench/server_sample.py).
- backends differ: Triton serves its python-backend models (add_sub with dynamic batching, one stub
  process per instance); Tessera serves model-repos/quickstart (add_sub: ONNX Runtime; add_sub_rust,
  add_sub_python, bls_add_sub: WebAssembly guests).
- commands:""")
if os.environ.get("TESSERA_CMD"):
    print(f"  - Tessera: `{os.environ['TESSERA_CMD']}`")
if "triton" in servers:
    print(f"  - Triton: `{os.environ['TRITON_CMD']}`")
ports = "18101 Tessera, 18201 Triton" if os.environ["PROTOCOL"] == "grpc" else "18100 Tessera, 18200 Triton"
print(f"  - each measurement (`source $TRITON_REFERENCE_ENV` first, bench/lib.sh; PORT {ports}): "
      f"`{os.environ['PA_EXAMPLE']}`")
