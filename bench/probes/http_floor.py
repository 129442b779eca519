#!/usr/bin/env python3
"""The HTTP floor beside an inference: server CPU per request for GET /v2/health/live (accept no
body, route, answer 200 with nothing: the server's HTTP stack and the kernel's loopback TCP path)
and for a JSON infer on an add_sub-shaped model, on servers that are already running, under the
same `wrk` load (apt package wrk; 127.0.0.1 only). The difference between the two rows of a
server is what its inference path costs over its HTTP door.

usage: bench/probes/http_floor.py NAME=HTTP_PORT:PID[:MODEL] ... [--conc 1] [--secs 4] [--rounds 3]
  e.g. bench/probes/http_floor.py triton=18200:1234:add_sub tessera=18100:5678:add_sub_rust

CPU is the server's whole process tree (Triton's python stubs included), as in cpu_cost.py.
Prints a markdown table: median (min-max) over the rounds, rounds interleaved across servers.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import cpu_seconds  # noqa: E402

DATA = "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"
BODY = ('{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":%s},'
        '{"name":"INPUT1","shape":[1,16],"datatype":"FP32","data":%s}]}' % (DATA, DATA))
LUA = 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [[%s]]\n' % BODY


def run_wrk(url, conc, secs, script=None):
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: install the apt package wrk (apt-get install -y wrk)")
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{secs}s", url]
    if script:
        cmd[1:1] = ["-s", script]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 30).stdout
    total = re.search(r"(\d+) requests in", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if total is None:
        raise SystemExit(f"wrk printed no request count for {url}:\n{out}")
    if bad:
        raise SystemExit(f"{bad.group(1)} requests to {url} failed: is the model loaded with add_sub's I/O?")
    return int(total.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("servers", nargs="+")
    ap.add_argument("--conc", type=int, default=1)
    ap.add_argument("--secs", type=float, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    servers = []
    for spec in args.servers:
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        servers.append((name, int(parts[0]), int(parts[1]), parts[2] if len(parts) > 2 else "add_sub"))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA)
        script = f.name
    results = {}
    try:
        for _ in range(args.rounds):
            for name, port, pid, model in servers:
                for what, path, lua in (("health/live", "/v2/health/live", None),
                                        (f"infer {model} (JSON)", f"/v2/models/{model}/infer", script)):
                    before = cpu_seconds(pid)
                    n = run_wrk(f"http://127.0.0.1:{port}{path}", args.conc, int(args.secs), lua)
                    cpu = cpu_seconds(pid) - before
                    results.setdefault((name, what), []).append((n / args.secs, cpu * 1e6 / n))
    finally:
        os.unlink(script)
    print(f"wrk -t1 -c{args.conc}, {args.secs:g} s windows, {args.rounds} rounds; median (min-max)\n")
    print("| server | request | req/s | server CPU µs / request |")
    print("|---|---|---:|---:|")
    for (name, what), rows in results.items():
        rate = [r for r, _ in rows]
        cost = [c for _, c in rows]
        print(f"| {name} | {what} | {statistics.median(rate):,.0f} | "
              f"{statistics.median(cost):.1f} ({min(cost):.1f}-{max(cost):.1f}) |")


if __name__ == "__main__":
    main()
