#!/usr/bin/env python3
"""Cold and warm start of a repository of numpy model.py models.

Writes N models (at most 20), each its own model.py (add and subtract with numpy, a constant of
its own: distinct sources, so each is built, as in a real repository of distinct models; with
--same-source all share one source and so one build), then starts the server twice on the same
caches and times each start to /v2/health/ready:

- cold: empty caches of built guests and compiled components, under a fresh TESSERA_CACHE_DIR
  into which the numpy built for guests (and the dependency cache) are linked from the usual cache:
  numpy is a one-time toolchain artifact (scripts/build-numpy-wasi.sh, 3 min of CPU once per
  numpy / componentize-py version), not a per-start cost;
- warm: the second start, every guest built and compiled already.

Samples the RSS of the server and every process under it (builders, compilers) every 0.1 s, and
reads from the server's log how many builds ran at once.

The guests' cache key holds the builder's hash (its script, the guest SDK, wit/): in a checkout
being edited meanwhile, the warm start would build again. Pass a builder of a snapshot then, e.g.
`git archive HEAD scripts guest-sdk wit tests/requirements.txt | tar -x -C SNAP && ln -s
$PWD/.venv SNAP/.venv`, and `-- --python-guest-builder SNAP/scripts/build-python-guest.sh`.

With --triton, the real Triton 2.51 (../shared/reference/triton/, installed by its setup.sh) starts
the same repository too, side by side: it builds nothing (its python stubs import model.py in
processes of their own), so its one start is both its cold and its warm start.

usage: python_startup.py [--models 20] [--bin target/release/tessera] [--same-source] [--triton]
                         [-- FLAGS...]
Prints one line per start and a JSON summary; the work directory (repository, caches, logs) is
removed unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchlib import ROOT, rss_kib, tree  # bench/ is the script's own directory, so on sys.path

MAX_MODELS = 20
DEADLINE_S = 1800

MODEL = '''import numpy as np
import triton_python_backend_utils as pb_utils

OFFSET = {offset}  # this model's own constant: its own source, its own build


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b + OFFSET).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.float32)),
            ]))
        return responses
'''

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
'''


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def usual_cache_root() -> Path:
    if os.environ.get("TESSERA_CACHE_DIR"):
        return Path(os.environ["TESSERA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tessera"


def write_repo(repo: Path, models: int, same_source: bool) -> None:
    for i in range(models):
        name = f"numpy_{i:02d}"
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "1" / "model.py").write_text(MODEL.format(offset=0 if same_source else i))


def most_builds_at_once(log: str) -> int:
    running, peak = set(), 0
    for line in log.splitlines():
        found = re.search(r'model="?([A-Za-z0-9_]+)"?', line)
        if not found:
            continue
        if "building the Python guest" in line:
            running.add(found.group(1))
            peak = max(peak, len(running))
        elif "built the Python guest" in line or "building model.py failed" in line:
            running.discard(found.group(1))
    return peak


def start(binary: Path, repo: Path, cache: Path, log_path: Path, flags: list[str]) -> dict:
    http, grpc, metrics = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    env["TESSERA_CACHE_DIR"] = str(cache)
    argv = [str(binary), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
            "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
            "--wasm-cache-dir", str(cache / "wasm"), *flags]
    started = time.monotonic()
    with open(log_path, "w") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    peak_total = most_processes = 0
    try:
        while True:
            if time.monotonic() - started > DEADLINE_S:
                sys.exit(f"not ready after {DEADLINE_S} s: see {log_path}")
            if server.poll() is not None:
                sys.exit(f"the server exited ({server.returncode}): see {log_path}")
            procs = tree(server.pid)
            most_processes = max(most_processes, len(procs) - 1)
            peak_total = max(peak_total, sum(rss_kib(p) for p in procs))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.1)
        ready_s = time.monotonic() - started
        request = urllib.request.Request(f"http://127.0.0.1:{http}/v2/repository/index", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10) as r:
            index = json.loads(r.read())
    finally:
        server.terminate()
        server.wait()
    log = log_path.read_text()
    return {
        "ready_s": round(ready_s, 1),
        "ready_models": sum(1 for e in index if e.get("state") == "READY"),
        "builds": log.count("building the Python guest"),
        "most_builds_at_once": most_builds_at_once(log),
        "peak_rss_MiB": round(peak_total / 1024),
        "most_child_processes": most_processes,
    }


TRITON = ROOT.parent / "shared" / "reference" / "triton"


def start_triton(repo: Path, log_path: Path) -> dict:
    """Triton 2.51 on the same repository: time to ready (run.sh's own measure, from its process
    start) and the RSS of its process tree (server and one python stub per instance) once ready."""
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, HTTP_PORT=str(http), GRPC_PORT=str(grpc), METRICS_PORT=str(metrics),
               RUN_DIR=str(log_path.parent / "triton-run"), READY_TIMEOUT=str(DEADLINE_S))
    run = subprocess.run(["bash", str(TRITON / "run.sh"), str(repo)], env=env, capture_output=True, text=True)
    log_path.write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        sys.exit(f"Triton did not start: see {log_path}")
    pid = int(run.stdout.split()[-1])
    try:
        procs = tree(pid)
        ready_s = float(re.search(r"ready_s=([0-9.]+)", run.stderr).group(1))
        return {"ready_s": round(ready_s, 1), "peak_rss_MiB": round(sum(rss_kib(p) for p in procs) / 1024),
                "processes": len(procs)}
    finally:
        subprocess.run(["bash", str(TRITON / "stop.sh")], env=env, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=MAX_MODELS)
    parser.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "tessera")
    parser.add_argument("--same-source", action="store_true", help="every model the same model.py")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--triton", action="store_true", help="also start the reference Triton 2.51")
    parser.add_argument("flags", nargs="*", help="more `tessera serve` flags (after --)")
    args = parser.parse_args()
    if not 1 <= args.models <= MAX_MODELS:
        sys.exit(f"--models: 1 to {MAX_MODELS}")
    usual = usual_cache_root()
    numpy = usual / "numpy-wasi"
    if not numpy.is_dir():
        sys.exit(f"{numpy} missing: build numpy for guests first (scripts/build-numpy-wasi.sh)")
    work = Path(tempfile.mkdtemp(prefix="tessera-python-startup-"))
    try:
        repo, cache = work / "repo", work / "cache"
        cache.mkdir()
        for shared in ("numpy-wasi", "python-deps"):
            if (usual / shared).is_dir():
                (cache / shared).symlink_to(usual / shared)
        write_repo(repo, args.models, args.same_source)
        results = {"models": args.models, "same_source": args.same_source, "cpus": os.cpu_count(), "flags": args.flags}
        for run in ("cold", "warm"):
            results[run] = start(args.bin, repo, cache, work / f"{run}.log", ["--exit-on-error=false", *args.flags])
            print(f"{run}: " + " ".join(f"{k}={v}" for k, v in results[run].items()), flush=True)
        if args.triton:
            results["triton"] = start_triton(repo, work / "triton.log")
            print("triton: " + " ".join(f"{k}={v}" for k, v in results["triton"].items()), flush=True)
        print(json.dumps(results))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
