#!/usr/bin/env python3
"""What `isolation = fresh` (a new instance for every execution) adds per request, against the
default `reuse`, for a Rust and a Python guest (the quickstart's add_sub_rust and add_sub_python,
each served twice by one server: as it is, and as `<name>_fresh` with the parameter added).

perf_analyzer over HTTP at c=1 and c=8, windows alternating between the two copies; the time per
request is concurrency / throughput (Little's law), and the added time the difference of the
medians. Prints a markdown table (docs/benchmarks.md, "Fresh instances").

    .venv/bin/python bench/isolation.py [--repeats 3] [--secs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import QUICKSTART, ROOT, fmt, perf, reference_env, stop_tree, wait_ready  # noqa: E402

MODELS = ("add_sub_rust", "add_sub_python")
PORT = 18650


def lay_out(repo: Path) -> None:
    for model in MODELS:
        for name, extra in ((model, ""), (f"{model}_fresh", 'parameters { key: "isolation" value { string_value: '
                                                            '"fresh" } }\n')):
            subprocess.run(["cp", "-r", str(QUICKSTART / model), str(repo / name)], check=True)
            config = (repo / name / "config.pbtxt").read_text().replace(f'name: "{model}"', f'name: "{name}"')
            (repo / name / "config.pbtxt").write_text(config + extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "tessera")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--secs", type=float, default=5)
    args = ap.parse_args()
    env = reference_env()
    per_request: dict[tuple[str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repo = tmp / "repo"
        repo.mkdir()
        lay_out(repo)
        server = subprocess.Popen(
            [str(args.bin), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
             "--http-port", str(PORT), "--grpc-port", str(PORT + 1), "--metrics-port", str(PORT + 2)],
            stdout=open(tmp / "server.log", "ab"), stderr=subprocess.STDOUT)
        try:
            wait_ready(PORT, server, "tessera", timeout=600)
            for r in range(args.repeats):
                print(f"round {r + 1}/{args.repeats}", file=sys.stderr)
                for model in MODELS:
                    for conc in (1, 8):
                        order = ("reuse", "fresh") if r % 2 == 0 else ("fresh", "reuse")
                        for mode in order:
                            name = model if mode == "reuse" else f"{model}_fresh"
                            throughput = perf(env, PORT, name, conc, args.secs)
                            if throughput:
                                per_request.setdefault((model, conc, mode), []).append(conc / throughput * 1e6)
        finally:
            stop_tree(server)
    print("\n| guest | concurrency | reuse: µs per request | fresh: µs per request | added µs (medians) |")
    print("|---|---:|---:|---:|---:|")
    for model in MODELS:
        for conc in (1, 8):
            reuse, fresh = per_request.get((model, conc, "reuse"), []), per_request.get((model, conc, "fresh"), [])
            added = statistics.median(fresh) - statistics.median(reuse) if reuse and fresh else float("nan")
            print(f"| {model} | {conc} | {fmt(reuse)} | {fmt(fresh)} | {added:,.1f} |")


if __name__ == "__main__":
    main()
