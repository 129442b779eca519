"""Limits against hostile input (issue 13 item 7): bodies are inflated in a stream that stops at
--http-max-input-size, the server holds at most --max-inflight-request-bytes of request bytes at
once, and the JSON parser stops at its bounds (inputs, parameters, nesting) while parsing. Memory
is read from the server's /proc status: VmHWM is the peak resident set, so a burst that ever
pushed the process past the budget shows, however briefly."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tessera_testlib import copy_model, wait_model_ready

MiB = 1 << 20
LIMIT = 16 * MiB
BUDGET = 32 * MiB
# What a burst may add to the server's peak resident set beyond the budget: connections, task and
# allocator overhead. Without the budget and the streaming limit these bursts added 177 MiB
# (bombs) and 1,004 MiB (maximal bodies) on this machine.
SLACK = 48 * MiB


def status_kib(srv, field: str) -> int:
    for line in Path(f"/proc/{srv.process.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{srv.process.pid}/status")


def burst(url: str, body: bytes, headers: dict, count: int) -> list[tuple[int, str]]:
    """POSTs `body` `count` times at once (one thread each; all start together)."""
    results: list[tuple[int, str]] = []
    lock = threading.Lock()
    start = threading.Barrier(count)

    def one():
        start.wait()
        try:
            r = requests.post(url, data=body, headers=headers, timeout=120)
            item = (r.status_code, r.text[:300])
        except requests.RequestException as e:  # the server may close on a refused upload
            item = (-1, str(e)[:300])
        with lock:
            results.append(item)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def assert_serves(srv) -> None:
    c = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    np.testing.assert_array_equal(c.infer("simple", inputs).as_numpy("OUTPUT0"), a + a)
    c.close()


@pytest.fixture
def limited(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, [f"--http-max-input-size={LIMIT}", f"--max-inflight-request-bytes={BUDGET}"])
    wait_model_ready(srv, "simple")
    assert_serves(srv)
    return srv


def test_a_hundred_gzip_bombs_at_once_stay_within_the_budget(limited):
    srv = limited
    bomb = gzip.compress(b"\0" * (64 * MiB), compresslevel=9)  # ~64 KiB that inflates to 64 MiB
    assert len(bomb) < MiB
    before = status_kib(srv, "VmHWM")
    results = burst(srv.http("/v2/models/simple/infer"), bomb,
                    {"Content-Encoding": "gzip", "Content-Type": "application/json"}, 100)
    peak = status_kib(srv, "VmHWM")
    codes = sorted({code for code, _ in results})
    assert set(codes) <= {400, 503}, results[:5]
    too_large = [text for code, text in results if code == 400]
    assert too_large and all(f"maximum allowed size of {LIMIT}" in t for t in too_large), too_large[:3]
    assert (peak - before) * 1024 < BUDGET + SLACK, f"peak RSS rose by {(peak - before) // 1024} MiB"
    assert_serves(srv)


def test_a_hundred_maximal_bodies_at_once_are_refused_or_served_within_the_budget(limited):
    srv = limited
    body = b"x" * (LIMIT - 1024)  # just under the limit: read whole, then refused as bad JSON
    before = status_kib(srv, "VmHWM")
    results = burst(srv.http("/v2/models/simple/infer"), body, {"Content-Type": "application/json"}, 100)
    peak = status_kib(srv, "VmHWM")
    # Each waits (briefly) for budget, then is read, or refused with 503 naming the flag.
    unavailable = [text for code, text in results if code == 503]
    assert all("--max-inflight-request-bytes" in t for t in unavailable), unavailable[:2]
    assert all(code in (400, 500, 503) for code, _ in results), results[:5]
    assert (peak - before) * 1024 < BUDGET + SLACK, f"peak RSS rose by {(peak - before) // 1024} MiB"
    assert_serves(srv)


def test_parsing_stops_at_the_input_bound(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo)
    wait_model_ready(srv, "simple")
    tiny = b'{"name":"a","shape":[1],"datatype":"INT32","data":[1]},'
    text = b'{"inputs":[' + tiny * 1_100_000 + tiny[:-1] + b"]}"  # ~59 MiB of JSON
    body = gzip.compress(text, compresslevel=6)
    before = status_kib(srv, "VmHWM")
    results = burst(srv.http("/v2/models/simple/infer"), body, {"Content-Encoding": "gzip"}, 4)
    peak = status_kib(srv, "VmHWM")
    for code, text in results:
        assert code in (400, 500) and "more than 4096 items" in text, (code, text)
    # Four inflated bodies (59 MiB each) must be held; their parse trees (hundreds of MiB each) not.
    assert (peak - before) * 1024 < 400 * MiB, f"peak RSS rose by {(peak - before) // 1024} MiB"
    assert_serves(srv)


@pytest.mark.parametrize("body, needle", [
    # A parameter must be a scalar: a nested value is refused as it is parsed.
    ({"parameters": {"p": [0] * 1000}, "inputs": []}, "parameter 'p' must be a bool, a number or a string"),
    ({"parameters": {f"k{i}": i for i in range(1025)}, "inputs": []}, "more than 1024 parameters"),
    # A shape that claims 2^40 elements with three values: refused without reserving for the shape.
    ({"inputs": [{"name": "INPUT0", "shape": [1 << 40], "datatype": "INT32", "data": [1, 2, 3]}]}, "'data' has 3"),
])
def test_json_bounds_name_the_problem(server_factory, tmp_path, body, needle):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo)
    wait_model_ready(srv, "simple")
    r = requests.post(srv.http("/v2/models/simple/infer"), data=json.dumps(body), timeout=30)
    assert r.status_code in (400, 500) and needle in r.json()["error"], (r.status_code, r.text)
    deep = b"[" * 100_000 + b"]" * 100_000
    r = requests.post(srv.http("/v2/models/simple/infer"), timeout=30,
                      data=b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":' + deep + b"}]}")
    assert r.status_code in (400, 500) and "recursion limit" in r.json()["error"], r.text
    assert_serves(srv)
