#!/usr/bin/env python3
"""What a call costs from Python, side by side in one run, on the same model (`Double`:
OUTPUT0 = 2 * INPUT0, FP32 [16], max_batch_size 16):

- `inproc`: Tessera's in-process API (`tessera.tritonserver`, Triton's `tritonserver` module),
  callers are threads of this process, an ONNX model; no socket.
- `http`: the same in-process server's HTTP door (`tessera.tritonfrontend.KServeHttp`), called by
  tritonclient from a client process.
- `pytriton`: real PyTriton 0.7.0 (the reference install) serving a @batch numpy callable, the
  same client process.

Per mode and concurrency (1 and 8 callers), REPEATS interleaved windows: calls/s, p50 µs, the
server's CPU µs per call (in-process: this whole process, callers included) and, for `inproc`,
the model's own compute (statistics: compute_input + compute_infer + compute_output per
inference) and the cost above it. Target: in-process CPU per call at most 30 µs above
the model's compute.

    .venv/bin/python bench/inprocess.py [--repeats 3] [--secs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from benchlib import REFERENCE, ROOT, cpu_seconds, fmt, reference_env, stop_tree, tree  # noqa: E402

CLIENT = r"""
import json, sys, threading, time, resource
import numpy as np
import tritonclient.http as httpclient
url, conc, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lat = []
lock = threading.Lock()
def run():
    c = httpclient.InferenceServerClient(url)
    x = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    x.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    for _ in range(20):
        c.infer("Double", [x])
    mine = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        t = time.perf_counter(); c.infer("Double", [x]); mine.append(time.perf_counter() - t)
    with lock:
        lat.extend(mine)
ts = [threading.Thread(target=run) for _ in range(conc)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps({"calls": len(lat), "p50": sorted(lat)[len(lat) // 2]}))
"""


def double_repo() -> Path:
    from tessera_testlib import write_onnx_model

    repo = Path(tempfile.mkdtemp(prefix="tessera-inproc.")) / "repo"
    write_onnx_model(repo, "Double", "TYPE_FP32", [16], max_batch_size=16, inp="INPUT0", out="OUTPUT0", op="Add")
    return repo


def compute_ns(model) -> tuple[int, int]:
    s = model.statistics()["model_stats"][0]
    st = s["inference_stats"]
    return s["inference_count"], sum(st[k]["ns"] for k in ("compute_input", "compute_infer", "compute_output"))


def inproc_window(model, conc: int, secs: float) -> tuple:
    import numpy as np

    x = {"INPUT0": np.ones((1, 16), dtype=np.float32)}
    for _ in range(50):
        list(model.infer(inputs=x))
    lat: list = []
    lock = threading.Lock()

    def run():
        mine = []
        end = time.monotonic() + secs
        while time.monotonic() < end:
            t = time.perf_counter()
            for _ in model.infer(inputs=x):
                pass
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)

    n0, c0 = compute_ns(model)
    cpu0, wall0 = time.process_time(), time.monotonic()
    threads = [threading.Thread(target=run) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    n1, c1 = compute_ns(model)
    calls = len(lat)
    compute_us = (c1 - c0) / max(n1 - n0, 1) / 1e3
    cpu_us = cpu / calls * 1e6
    return calls / wall, statistics.median(lat) * 1e6, cpu_us, compute_us, cpu_us - compute_us


def http_window(url: str, server_cpu, conc: int, secs: float) -> tuple:
    cpu0 = server_cpu()
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", CLIENT, url, str(conc), str(secs)],
                         capture_output=True, text=True, timeout=secs + 120, check=True)
    cpu = server_cpu() - cpu0
    r = json.loads(out.stdout)
    return r["calls"] / secs, r["p50"] * 1e6, cpu / r["calls"] * 1e6, None, None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=3.0)
    args = ap.parse_args()
    import tessera.tritonserver as tritonserver
    from tessera.tritonfrontend import KServeHttp
    from tessera_testlib import free_port

    server = tritonserver.Server(model_repository=str(double_repo()), log_info=False).start(wait_until_ready=True)
    model = server.model("Double")
    http = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=free_port()))
    http.start()
    env = reference_env()
    ref_env = dict(os.environ, LD_LIBRARY_PATH=os.path.expandvars(env["TRITON_LD_LIBRARY_PATH"]),
                   PATH=os.path.expandvars(env["TRITON_PATH"]))
    py_port = free_port()
    pytriton = subprocess.Popen([f"{env['TRITON_VENV']}/bin/python", str(REFERENCE / "pytriton_double.py"),
                                 str(py_port)], env=ref_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import urllib.request

        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{py_port}/v2/models/Double/ready", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or pytriton.poll() is not None:
                    sys.exit("PyTriton did not get ready")
                time.sleep(0.05)
        py_cpu = lambda: sum(cpu_seconds(p) for p in tree(pytriton.pid))  # noqa: E731
        rows: dict = {}
        for conc in (1, 8):
            for r in range(args.repeats):
                modes = ["inproc", "http", "pytriton"]
                for mode in modes[r % 3:] + modes[:r % 3]:
                    if mode == "inproc":
                        w = inproc_window(model, conc, args.secs)
                    elif mode == "http":
                        w = http_window(f"127.0.0.1:{http.port}", time.process_time, conc, args.secs)
                    else:
                        w = http_window(f"127.0.0.1:{py_port}", py_cpu, conc, args.secs)
                    rows.setdefault((mode, conc), []).append(w)
        print(f"\nmachine: {os.cpu_count()} cores shared by callers and servers; {args.repeats} windows of "
              f"{args.secs:g} s per cell, interleaved; batch 1 per call")
        print(f"command: .venv/bin/python bench/inprocess.py --repeats {args.repeats} --secs {args.secs:g}\n")
        print("| mode | c | calls/s | p50 µs | server CPU µs / call | model compute µs | CPU above compute µs |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for (mode, conc), ws in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            cols = [[w[i] for w in ws if w[i] is not None] for i in range(5)]
            cells = [fmt(c, 0 if i < 2 else 1) if c else "–" for i, c in enumerate(cols)]
            print(f"| {mode} | {conc} | " + " | ".join(cells) + " |")
    finally:
        stop_tree(pytriton)
        http.stop()
        server.stop()


if __name__ == "__main__":
    main()
