#!/usr/bin/env python3
"""Triton's python-backend add_sub example, side by side: on NVIDIA's Triton 2.51 (its python
backend: a stub process per instance), the same model.py on Tessera (built into a guest with
numpy, served from model.py), and Tessera's pure-Python add_sub_python (no numpy).

    usage: .venv/bin/python bench/python_numpy.py
    (after scripts/setup.sh, ../shared/reference/triton/setup.sh and
     cargo build --release --bin tessera; TESSERA_BIN overrides the binary)

Prints markdown:
1. The numpy guest's own costs, from a cold start with empty caches (numpy itself stays built:
   its cache is TESSERA_CACHE_DIR's): component size, cold build (model.py -> component) and
   compile seconds from the server's log, start to ready cold and warm, the peak RSS of the
   server with its builder and compiler processes, and the guest's linear memory after its first
   call (tessera_model_memory_bytes). The same for add_sub_python (prebuilt: no build step).
2. bench/cost_windows.sh over the three servers' models, ROUNDS rounds at concurrency 1 and 16:
   server CPU µs per inference (the whole process tree, Triton's stubs included) and server-side
   µs per request (the statistics extension). perf_analyzer (the reference install's) sends the
   examples' [4] FP32 inputs (add_sub_python: [1, 16]).

Env: ROUNDS (3), MEASURE_S (4), WARMUP_S (2), TESSERA_BIN.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchlib import REFERENCE, ROOT  # bench/ is the script's own directory, so on sys.path

BENCH = ROOT / "bench"
BIN = Path(os.environ.get("TESSERA_BIN", ROOT / "target" / "release" / "tessera"))
EXAMPLE = ROOT / "tests" / "third_party" / "python_backend" / "examples" / "add_sub"
QUICKSTART = ROOT / "model-repos" / "quickstart"
CACHE = Path(os.environ.get("TESSERA_CACHE_DIR", Path.home() / ".cache" / "tessera"))
PORTS = {"tessera": 18700, "triton": 18710}


def repo(root: Path, pure: bool) -> Path:
    path = root / ("tessera-repo" if pure else "triton-repo")
    (path / "add_sub" / "1").mkdir(parents=True)
    shutil.copy(EXAMPLE / "model.py", path / "add_sub" / "1" / "model.py")
    shutil.copy(EXAMPLE / "config.pbtxt", path / "add_sub" / "config.pbtxt")
    if pure:
        (path / "add_sub_python" / "1").mkdir(parents=True)
        shutil.copy(QUICKSTART / "add_sub_python" / "1" / "model.wasm", path / "add_sub_python" / "1")
        shutil.copy(QUICKSTART / "add_sub_python" / "config.pbtxt", path / "add_sub_python")
    return path


def serve_argv(repository: Path, port: int, *extra: str) -> list[str]:
    return [str(BIN), "serve", "--model-repository", str(repository), "--http-port", str(port),
            "--grpc-port", str(port + 1), "--metrics-port", str(port + 2), *extra]


def cold_start(repository: Path, port: int, env: dict, workdir: Path) -> dict:
    """bench/cold_start.py's line, as a dict, and its log."""
    workdir.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([sys.executable, str(BENCH / "cold_start.py"), str(port), "--",
                          *serve_argv(repository, port)], env=env, cwd=workdir, capture_output=True,
                         text=True, check=True)
    fields = dict(item.split("=", 1) for item in run.stdout.split())
    fields["log"] = (workdir / "cold_start.log").read_text()
    return fields


def metric(port: int, name: str, model: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port + 2}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_ready(port: int, model: str, proc: subprocess.Popen, deadline: float = 600) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"server on {port} exited with {proc.returncode}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/ready", timeout=2).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"{model} on {port} not ready within {deadline}s")


def first_call(port: int, model: str, shape: list[int]) -> None:
    import numpy as np
    import tritonclient.http as httpclient

    with httpclient.InferenceServerClient(f"127.0.0.1:{port}") as client:
        inputs = [httpclient.InferInput(n, shape, "FP32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(np.ones(shape, np.float32))
        client.infer(model, inputs)


def main() -> None:
    if not BIN.is_file():
        sys.exit(f"{BIN} missing: cargo build --release --bin tessera")
    with tempfile.TemporaryDirectory(prefix="bench-python-numpy-") as tmp:
        root = Path(tmp)
        tessera_repo, triton_repo = repo(root, True), repo(root, False)
        # empty server caches (built guests, compiled components); numpy stays built
        env = dict(os.environ, XDG_CACHE_HOME=str(root / "cache"), TESSERA_CACHE_DIR=str(CACHE))
        cold = cold_start(tessera_repo, PORTS["tessera"], env, root / "cold")
        warm = cold_start(tessera_repo, PORTS["tessera"], env, root / "warm")
        built = re.search(r"built the Python guest model=\S+add_sub/1 seconds=([\d.]+)", cold["log"])
        compiled = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"compiled WebAssembly component.*model=(\S+) elapsed_ms=(\d+)", cold["log"])}
        guests = list((root / "cache" / "tessera" / "python-guests").glob("*.wasm"))
        numpy_component = guests[0] if guests else None
        pure_component = QUICKSTART / "add_sub_python" / "1" / "model.wasm"
        numpy_compile = next((ms for path, ms in compiled.items() if "python-guests" in path), None)
        pure_compile = next((ms for path, ms in compiled.items() if "add_sub_python" in path), None)

        server = subprocess.Popen(serve_argv(tessera_repo, PORTS["tessera"]), env=env,
                                  stdout=subprocess.DEVNULL, stderr=open(root / "tessera.log", "w"))
        triton = None
        try:
            for model in ("add_sub", "add_sub_python"):
                wait_ready(PORTS["tessera"], model, server)
            first_call(PORTS["tessera"], "add_sub", [4])
            first_call(PORTS["tessera"], "add_sub_python", [1, 16])
            memory = {m: metric(PORTS["tessera"], "tessera_model_memory_bytes", m) for m in ("add_sub", "add_sub_python")}
            mib = lambda v: "%.1f" % (v / 2**20) if v else "n/a"  # noqa: E731
            print("| model | component | cold build s | cold compile s | cold start to ready s | warm start s "
                  "| peak RSS, server + builder + compilers MiB | guest memory after first call MiB |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            print(f"| add_sub example, numpy | {numpy_component.stat().st_size / 1e6:.1f} MB "
                  f"| {float(built.group(1)) if built else float('nan'):.1f} | {numpy_compile / 1000:.1f} "
                  f"| {cold['ready_s']} | {warm['ready_s']} | {cold['peak_total_MiB']} | {mib(memory['add_sub'])} |")
            print(f"| add_sub_python, no numpy | {pure_component.stat().st_size / 1e6:.1f} MB | (prebuilt) "
                  f"| {pure_compile / 1000 if pure_compile else float('nan'):.1f} | (same start) | (same start) "
                  f"| (same start) | {mib(memory['add_sub_python'])} |")
            print()
            triton_env = dict(os.environ, HTTP_PORT=str(PORTS["triton"]), GRPC_PORT=str(PORTS["triton"] + 1),
                              METRICS_PORT=str(PORTS["triton"] + 2))
            run = subprocess.run(["bash", str(REFERENCE / "run.sh"), str(triton_repo)], env=triton_env,
                                 capture_output=True, text=True, check=True)
            triton = int(run.stdout.split()[-1])
            costs = subprocess.run(
                ["bash", str(BENCH / "cost_windows.sh"),
                 f"triton=" + f"{PORTS['triton']}:{triton}:add_sub",
                 f"tessera_numpy={PORTS['tessera']}:{server.pid}:add_sub",
                 f"tessera_pure={PORTS['tessera']}:{server.pid}:add_sub_python"],
                env=dict(os.environ, PYTHON=sys.executable), capture_output=True, text=True)
            print(costs.stdout, end="")
            if costs.returncode:
                sys.exit(costs.stderr)
        finally:
            server.terminate()
            server.wait(timeout=60)
            if triton:
                subprocess.run(["bash", str(REFERENCE / "stop.sh")], env=dict(os.environ), check=False)


if __name__ == "__main__":
    main()
