#!/usr/bin/env python3
"""Runs every case of tests/python_contract (cases.py and any cases_*.py beside it) against a
server serving tests/python_contract/models, and prints a pass/fail table (and JSON with --json).

    python tests/python_contract/run.py --http-url http://127.0.0.1:8000 --grpc-url 127.0.0.1:8001 \\
        [--server triton|tessera] [--log FILE] [--json OUT.json] [-k SUBSTRING]

Against the real Triton 2.51 (its finalize case needs explicit model control):

    EXTRA_ARGS="--model-control-mode=explicit --load-model=*" \\
        bash ../shared/reference/triton/run.sh tests/python_contract/models
    python tests/python_contract/run.py --server triton --log /opt/triton-reference/run/tritonserver.log

Outcomes: pass; FAIL; expected (failed, and EXPECT in cases.py says why this server fails it by
design); unexpected-pass (an EXPECT entry that no longer holds); skip (the server lacks what the
case needs, or the case is another server's). Exit status 1 when any case FAILs or passes
unexpectedly.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases  # noqa: E402


def load_cases():
    """cases.py's cases, then those of every cases_*.py (the environment and async cases register there)."""
    for extra in sorted(HERE.glob("cases_*.py")):
        importlib.import_module(extra.stem)
    return list(cases.CASES)


def run_case(ctx, name, fn):
    """(outcome, seconds, detail) of one case on ctx.server."""
    only = cases.ONLY.get(name)
    if only and only != ctx.server:
        return "skip", 0.0, "runs on %s only" % only
    expected = cases.EXPECT.get(name, {}).get(ctx.server)
    t0 = time.monotonic()
    try:
        fn(ctx)
    except cases.Skip as e:
        return "skip", time.monotonic() - t0, str(e)
    except Exception as e:  # noqa: BLE001  a case's failure, whatever it raised
        detail = "%s: %s" % (type(e).__name__, e) if str(e) else traceback.format_exc(limit=3)
        if expected:
            return "expected", time.monotonic() - t0, "%s (by design: %s)" % (detail, expected)
        return "FAIL", time.monotonic() - t0, detail
    if expected:
        return "unexpected-pass", time.monotonic() - t0, "EXPECT says it fails: %s" % expected
    return "pass", time.monotonic() - t0, ""


def run_all(ctx, selected=None):
    results = []
    for name, topic, fn in load_cases():
        if selected and selected not in name:
            continue
        outcome, seconds, detail = run_case(ctx, name, fn)
        results.append({"case": name, "topic": topic, "outcome": outcome, "seconds": round(seconds, 3),
                        "detail": detail[:2000]})
    return results


def table(results, server):
    width = max([len(r["case"]) for r in results] + [4])
    lines = ["%-*s  %-11s  %-15s  detail" % (width, "case (%s)" % server, "topic", "outcome")]
    for r in results:
        detail = r["detail"].replace("\n", " ")
        lines.append("%-*s  %-11s  %-15s  %s" % (width, r["case"], r["topic"], r["outcome"], detail[:160]))
    counts = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    lines.append(", ".join("%s: %d" % kv for kv in sorted(counts.items())))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http-url", default="http://127.0.0.1:8000")
    parser.add_argument("--grpc-url", default="127.0.0.1:8001")
    parser.add_argument("--server", default="triton", choices=["triton", "tessera"],
                        help="which server's EXPECT / ONLY entries apply (default triton)")
    parser.add_argument("--log", help="the server's log file (the finalize case looks there)")
    parser.add_argument("--json", help="also write the results as JSON to this file")
    parser.add_argument("-k", dest="selected", help="only the cases whose name contains this")
    args = parser.parse_args(argv)
    http_url = args.http_url if "://" in args.http_url else "http://" + args.http_url
    ctx = cases.Ctx(http_url=http_url.rstrip("/"), grpc_url=args.grpc_url, server=args.server, log_path=args.log)
    try:
        results = run_all(ctx, args.selected)
    finally:
        ctx.close()
    print(table(results, args.server))
    if args.json:
        Path(args.json).write_text(json.dumps({"server": args.server, "results": results}, indent=1) + "\n")
    bad = [r for r in results if r["outcome"] in ("FAIL", "unexpected-pass")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
