#!/usr/bin/env python3
"""What sealing (encryption at rest) adds to a model's load: the quickstart's largest model
(minilm, an 87 MB ONNX file) served plain and sealed (`tessera seal`, A256KW + A256GCM) by one
release server, each loaded and unloaded in turn through the repository API; the time of each
`load` call, medians (min-max).

    .venv/bin/python bench/sealed_load.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import QUICKSTART, ROOT, fmt, stop_tree, wait_ready  # noqa: E402

PORT = 18660
MODEL = "minilm"


def post(path: str) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=300) as r:
        r.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "tessera")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        keys = tmp / "keys.json"
        key = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
        keys.write_text(json.dumps({"keys": [{"kty": "oct", "kid": "bench", "k": key}]}))
        repo = tmp / "repo"
        for name in (MODEL, f"{MODEL}_sealed"):
            shutil.copytree(QUICKSTART / MODEL, repo / name)
            config = repo / name / "config.pbtxt"
            config.write_text(config.read_text().replace(f'name: "{MODEL}"', f'name: "{name}"'))
        sealed = repo / f"{MODEL}_sealed" / "1" / "model.onnx"
        subprocess.run([str(args.bin), "seal", str(QUICKSTART / MODEL / "1" / "model.onnx"), str(sealed),
                        "--keys", str(keys), "--kid", "bench"], check=True)
        server = subprocess.Popen(
            [str(args.bin), "serve", "--model-repository", str(repo), "--model-control-mode=explicit",
             f"--model-keys={keys}", "--http-address", "127.0.0.1", "--http-port", str(PORT),
             "--grpc-port", str(PORT + 1), "--metrics-port", str(PORT + 2)],
            stdout=open(tmp / "server.log", "ab"), stderr=subprocess.STDOUT)
        times: dict[str, list[float]] = {}
        try:
            wait_ready(PORT, server, "tessera", timeout=300)
            for r in range(args.rounds):
                names = (MODEL, f"{MODEL}_sealed") if r % 2 == 0 else (f"{MODEL}_sealed", MODEL)
                for name in names:
                    started = time.perf_counter()
                    post(f"/v2/repository/models/{name}/load")
                    times.setdefault(name, []).append((time.perf_counter() - started) * 1000)
                    post(f"/v2/repository/models/{name}/unload")
        finally:
            stop_tree(server)
    plain, sealed_ms = times[MODEL], times[f"{MODEL}_sealed"]
    print(f"\n| {MODEL} ({(QUICKSTART / MODEL / '1' / 'model.onnx').stat().st_size / 1e6:.0f} MB) | load ms |")
    print("|---|---:|")
    print(f"| plain | {fmt(plain)} |\n| sealed | {fmt(sealed_ms)} |")
    print(f"| added (medians) | {sorted(sealed_ms)[len(sealed_ms) // 2] - sorted(plain)[len(plain) // 2]:,.1f} |")


if __name__ == "__main__":
    main()
