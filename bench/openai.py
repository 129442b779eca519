#!/usr/bin/env python3
"""What `/v1` costs, side by side in one run, on the quickstart's /v1 models (docs/openai.md):

- embeddings: `/v1/embeddings` on `minilm` (the adapter tokenizes, calls the encoder, pools)
  against v2 infer of the encoder itself with the ids tokenized by the client (tritonclient,
  binary output): the server's CPU per request at c=1 and c=8; and sentence-transformers
  in-process on the same sentences (this process's CPU per embedding, one at a time and in
  batches of 32);
- streaming: `/v1/chat/completions` with `stream` on `tiny_gpt` against Tessera's own
  `generate_stream` of its adapter (the same call as JSON, v2's streaming door): tokens/s at c=1
  and c=8, and the time to the first token.

Each cell is a window of SECS seconds of load by C client threads, in REPEATS interleaved rounds;
medians (min-max). The server runs from BIN (default target/release/tessera) on a copy of the four
models.

    .venv/bin/python bench/openai.py [--bin target/release/tessera] [--repeats 3] [--secs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from benchlib import QUICKSTART, ROOT, cpu_seconds, fmt, stop_tree, wait_ready  # noqa: E402

MODELS = ("minilm", "minilm_openai", "tiny_gpt", "tiny_gpt_openai")
PORT = 18400


def sentences(count: int = 100) -> list[str]:
    import test_openai_models  # the tests' 100 sentences of mixed length

    return test_openai_models.sentences(count)


def window(c: int, secs: float, call, pid: int) -> tuple[int, float, list[float]]:
    """C threads calling `call()` for SECS: calls done, server CPU seconds, what each call returned."""
    stop, done, lock, results = threading.Event(), [0], threading.Lock(), []

    def worker(i):
        session = requests.Session()
        n = i
        while not stop.is_set():
            value = call(session, n)
            n += c
            with lock:
                done[0] += 1
                results.append(value)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(c)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # warm
    with lock:
        done[0], results[:] = 0, []
    cpu0 = cpu_seconds(pid)
    time.sleep(secs)
    cpu1 = cpu_seconds(pid)
    with lock:
        n, values = done[0], list(results)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    return n, cpu1 - cpu0, values


def embeddings_cells(texts):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(QUICKSTART / "minilm_openai" / "1" / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    encoded = [tok.encode(t).ids for t in texts]
    url = f"http://127.0.0.1:{PORT}"

    def v1(session, n):
        r = session.post(f"{url}/v1/embeddings", json={"model": "minilm", "input": texts[n % len(texts)],
                                                        "encoding_format": "base64"}, timeout=60)
        r.raise_for_status()

    def v2(session, n):
        ids = encoded[n % len(encoded)]
        tensors = [("input_ids", ids), ("attention_mask", [1] * len(ids)), ("token_type_ids", [0] * len(ids))]
        header = {"inputs": [{"name": k, "shape": [1, len(v)], "datatype": "INT64",
                              "parameters": {"binary_data_size": 8 * len(v)}} for k, v in tensors],
                  "outputs": [{"name": "last_hidden_state", "parameters": {"binary_data": True}}]}
        head = json.dumps(header).encode()
        body = head + b"".join(np.asarray(v, dtype="<i8").tobytes() for _, v in tensors)
        r = session.post(f"{url}/v2/models/minilm/infer", data=body, timeout=60,
                         headers={"Inference-Header-Content-Length": str(len(head))})
        r.raise_for_status()
        # pool on the client, as a v2 caller must
        size = int(r.headers["Inference-Header-Content-Length"])
        hidden = np.frombuffer(r.content[size:], dtype="<f4").reshape(len(ids), -1)
        mean = hidden.mean(axis=0)
        return mean / np.linalg.norm(mean)

    return {"/v1/embeddings": v1, "v2 infer (client tokenizes, pools)": v2}


def stream_cells(max_tokens):
    url = f"http://127.0.0.1:{PORT}"
    messages = [{"role": "user", "content": "Tell me about the sandbox"}]

    def chat(session, n):
        t0 = time.perf_counter()
        first, tokens = None, 0
        with session.post(f"{url}/v1/chat/completions", stream=True, timeout=60,
                          json={"model": "tiny_gpt", "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.8, "seed": n, "stream": True,
                                "stream_options": {"include_usage": True}}) as r:
            for line in r.iter_lines():
                if not line.startswith(b"data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content") and first is None:
                    first = time.perf_counter() - t0
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
        return tokens, first

    def generate_stream(session, n):
        call = {"kind": "chat", "model": "tiny_gpt", "context_length": 128, "messages": messages,
                "max_tokens": max_tokens, "temperature": 0.8, "seed": n, "stream": True}
        t0 = time.perf_counter()
        first, tokens = None, 0
        with session.post(f"{url}/v2/models/tiny_gpt_openai/generate_stream", stream=True, timeout=60,
                          json={"request": json.dumps(call)}) as r:
            for line in r.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if event.get("text_output") and first is None:
                    first = time.perf_counter() - t0
                tokens = max(tokens, int(np.ravel(event.get("num_output_tokens", [0]))[0]))
        return tokens, first

    return {"/v1/chat/completions stream": chat, "v2 generate_stream (adapter)": generate_stream}


def start(binary: Path, root: Path) -> subprocess.Popen:
    repo = root / "repo"
    for name in MODELS:
        shutil.copytree(QUICKSTART / name, repo / name)
    log = open(root / "server.log", "w")
    proc = subprocess.Popen([str(binary), "serve", "--model-repository", str(repo), "--http-port", str(PORT),
                             "--grpc-port", str(PORT + 1), "--metrics-port", str(PORT + 2),
                             "--log-verbose", "0"], stdout=log, stderr=subprocess.STDOUT)
    for name in MODELS:
        wait_ready(PORT, proc, f"tessera ({name})", timeout=600, path=f"/v2/models/{name}/ready")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(ROOT / "target" / "release" / "tessera"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--secs", type=float, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    texts = sentences()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start(Path(args.bin), Path(tmp))
        try:
            pid = proc.pid
            rows: dict[tuple[str, int], list[tuple]] = {}
            for _ in range(args.repeats):
                for c in (1, 8):
                    for name, call in embeddings_cells(texts).items():
                        n, cpu, _ = window(c, args.secs, call, pid)
                        rows.setdefault((name, c), []).append((n / args.secs, cpu / max(n, 1) * 1e6))
                    for name, call in stream_cells(args.max_tokens).items():
                        n, cpu, values = window(c, args.secs, call, pid)
                        tokens = sum(v[0] for v in values)
                        ttft = sorted(v[1] * 1e3 for v in values if v[1] is not None)
                        p50 = ttft[len(ttft) // 2] if ttft else None
                        rows.setdefault((name, c), []).append((tokens / args.secs, cpu / max(tokens, 1) * 1e6, p50))
        finally:
            stop_tree(proc)
    print("| path | c | requests or tokens /s | server CPU µs / request or token | TTFT p50 ms |")
    print("|---|---:|---:|---:|---:|")
    for (name, c), cells in rows.items():
        ttft = fmt([cell[2] for cell in cells]) if len(cells[0]) > 2 else ""
        print(f"| {name} | {c} | {fmt([x[0] for x in cells])} | {fmt([x[1] for x in cells])} | {ttft} |")
    st_cpu(texts)


def st_cpu(texts) -> None:
    """sentence-transformers in this process: CPU per embedding, one at a time and 32 at a time,
    with torch's default threads and with one."""
    import torch

    import openai_reference as ref

    model = ref.sentence_transformer()
    model.encode(texts[:8])
    for threads in (torch.get_num_threads(), 1):
        torch.set_num_threads(threads)
        for batch in (1, 32):
            t0, w0 = time.process_time(), time.perf_counter()
            for i in range(0, len(texts), batch):
                model.encode(texts[i:i + batch], normalize_embeddings=True)
            cpu, wall = (time.process_time() - t0) / len(texts), (time.perf_counter() - w0) / len(texts)
            print(f"sentence-transformers in-process, {threads} torch thread(s), batch {batch}: "
                  f"{cpu * 1e6:,.0f} µs CPU and {wall * 1e6:,.0f} µs wall / embedding")


if __name__ == "__main__":
    main()
