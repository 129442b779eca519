"""A decoupled model's per-response cost: wall time and the server's CPU per streamed response.

    usage: .venv/bin/python bench/probes/stream_cost.py NAME=GRPC_PORT:PID [NAME=GRPC_PORT:PID ...]
    e.g.   .venv/bin/python bench/probes/stream_cost.py old=18501:1234 new=18601:5678

Each server must serve the quickstart `repeat` guest (model-repos/quickstart). One tritonclient
gRPC stream per cell asks for N=20000 responses; three rounds, interleaved, so drift hits every
server alike. Server CPU is the process's user+system time from /proc (10 ms ticks: about
0.5 µs per response at this N). The Python client bounds the wall time, not the server.
"""
import queue
import statistics
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient

def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / 100.0

def run(port, pid, n):
    q = queue.Queue()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    inp = grpcclient.InferInput("IN", [n], "INT32")
    inp.set_data_from_numpy(np.arange(n, dtype=np.int32))
    c0, t0 = cpu_s(pid), time.monotonic()
    c.async_stream_infer("repeat", [inp], enable_empty_final_response=True)
    got = 0
    while True:
        r, e = q.get(timeout=60)
        assert e is None, e
        resp = r.get_response()
        if resp.parameters["triton_final_response"].bool_param and not resp.outputs:
            break
        got += 1
    t1, c1 = time.monotonic(), cpu_s(pid)
    c.stop_stream(); c.close()
    assert got == n, got
    return (t1 - t0) / n * 1e6, (c1 - c0) / n * 1e6

servers = [s.split("=") for s in sys.argv[1:]]
n = 20000
rows = {name: [] for name, _ in servers}
for rnd in range(3):
    for name, spec in servers:
        port, pid = spec.split(":")
        rows[name].append(run(int(port), int(pid), n))
print("| server | wall µs / response (median, min-max) | server CPU µs / response |")
print("|---|---:|---:|")
for name, vals in rows.items():
    w = [v[0] for v in vals]; c = [v[1] for v in vals]
    print(f"| {name} | {statistics.median(w):.1f} ({min(w):.1f}-{max(w):.1f}) | {statistics.median(c):.1f} ({min(c):.1f}-{max(c):.1f}) |")
