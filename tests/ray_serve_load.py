"""Closed-loop HTTP load for tests/test_ray_serve.py and bench/ray_serve.py: `concurrency` client
threads, each with one keep-alive connection, each sending its next request when the last one is
answered. Two request formats for the same model (add_sub: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 =
INPUT0 - INPUT1, FP32 [16]):

- `ServeAddSub`: examples/ray_serve/tessera_deployment.py's JSON, through Ray Serve's HTTP proxy;
- `KServeAddSub`: KServe v2 JSON, straight to Tessera's own HTTP door.

Every answer is checked against the values sent (each request sends different values). With
`retry=True` a failed attempt (connection error, non-200, wrong values) is counted and the request
sent again on a new connection, with a short backoff, until it succeeds or `retry_deadline_s`
passes (then it is lost). Plain http.client: the client's own cost per request stays small, since
it shares the machine's cores with the servers.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable


N = 16


def _values(i: int) -> tuple[list[float], list[float]]:
    # small integers: exact in FP32, and different for every request
    a = [float((i + k) % 1000) for k in range(N)]
    b = [float((i * 7 + k) % 13) for k in range(N)]
    return a, b


class ServeAddSub:
    """The Ray Serve deployment's JSON: {"INPUT0": [...], "INPUT1": [...]}."""

    def __init__(self, path: str):
        self.path = path

    def request(self, i: int) -> tuple[str, bytes, Callable[[dict], bool]]:
        a, b = _values(i)
        body = json.dumps({"INPUT0": a, "INPUT1": b}).encode()
        add = [x + y for x, y in zip(a, b)]
        sub = [x - y for x, y in zip(a, b)]
        return self.path, body, lambda ans: ans.get("OUTPUT0") == add and ans.get("OUTPUT1") == sub


class KServeAddSub:
    """KServe v2 JSON to /v2/models/<model>/infer (Tessera's own HTTP door)."""

    def __init__(self, model: str = "add_sub"):
        self.path = f"/v2/models/{model}/infer"

    def request(self, i: int) -> tuple[str, bytes, Callable[[dict], bool]]:
        a, b = _values(i)
        body = json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [1, N], "datatype": "FP32", "data": a},
            {"name": "INPUT1", "shape": [1, N], "datatype": "FP32", "data": b},
        ]}).encode()
        add = [x + y for x, y in zip(a, b)]
        sub = [x - y for x, y in zip(a, b)]

        def check(ans: dict) -> bool:
            out = {o["name"]: o["data"] for o in ans.get("outputs", [])}
            return out.get("OUTPUT0") == add and out.get("OUTPUT1") == sub

        return self.path, body, check


@dataclass
class Failure:
    t: float  # monotonic time of the failed attempt's start
    t_end: float  # and of its failure
    kind: str  # "HTTP 500: ...", "ConnectionResetError", "wrong values"
    worker: int  # the client thread
    attempt: int  # 1 for a request's first attempt


@dataclass
class LoadResult:
    concurrency: int
    elapsed_s: float
    completed: int = 0  # requests answered correctly (after retries, with retry=True)
    lost: int = 0  # requests never answered correctly
    first_attempt_failures: int = 0  # requests whose first attempt failed
    retries: int = 0  # attempts after a request's first
    latencies_s: list[float] = field(default_factory=list)  # of the successful attempt
    replicas: Counter = field(default_factory=Counter)  # answers per "replica" field (Serve)
    nodes: dict = field(default_factory=dict)  # replica -> node
    pids: dict = field(default_factory=dict)  # replica -> pid
    first_seen: dict = field(default_factory=dict)  # replica -> monotonic time of its first answer
    failures: list[Failure] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.completed / self.elapsed_s if self.elapsed_s else 0.0

    def percentile_us(self, q: float) -> float:
        if not self.latencies_s:
            return float("nan")
        lat = sorted(self.latencies_s)
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6

    @property
    def p50_us(self) -> float:
        return statistics.median(self.latencies_s) * 1e6 if self.latencies_s else float("nan")

    def summary(self) -> str:
        kinds = Counter(f.kind for f in self.failures)
        return (f"c={self.concurrency} {self.completed} ok in {self.elapsed_s:.1f} s ({self.rps:.0f}/s), "
                f"p50 {self.p50_us:.0f} µs, p99 {self.percentile_us(0.99):.0f} µs, lost {self.lost}, "
                f"first attempts failed {self.first_attempt_failures}, retries {self.retries}, "
                f"replicas {dict(self.replicas)}, failures {dict(kinds)}")


def closed_loop(
    host: str,
    port: int,
    fmt,
    *,
    concurrency: int = 8,
    duration_s: float | None = None,
    stop: threading.Event | None = None,
    max_duration_s: float = 300.0,
    retry: bool = False,
    retry_deadline_s: float = 60.0,
    timeout_s: float = 30.0,
    on_success: Callable[[dict], None] | None = None,
) -> LoadResult:
    """Run the load until `duration_s` passes or `stop` is set (at most `max_duration_s`: the loop
    is bounded whatever the caller does); requests in flight then are finished (with retries).
    `on_success(answer)` is called (under the result's lock, briefly) for each correct answer."""
    assert duration_s is not None or stop is not None
    stop = stop or threading.Event()
    result = LoadResult(concurrency, 0.0)
    lock = threading.Lock()
    counter = iter(range(10**9))
    t0 = time.monotonic()
    hard_end = t0 + max_duration_s
    end = t0 + duration_s if duration_s is not None else hard_end

    def worker(w: int) -> None:
        conn = None
        while not stop.is_set() and time.monotonic() < min(end, hard_end):
            with lock:
                i = next(counter)
            path, body, check = fmt.request(i)
            attempt = 0
            first_t = time.monotonic()
            while True:
                attempt += 1
                t = time.monotonic()
                ok, kind, ans = False, "", None
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
                    conn.request("POST", path, body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                    if resp.status != 200:
                        kind = f"HTTP {resp.status}: {data[:120].decode(errors='replace')}"
                    else:
                        ans = json.loads(data)
                        ok = check(ans)
                        kind = "" if ok else f"wrong values: {data[:200].decode(errors='replace')}"
                    if resp.getheader("connection", "").lower() == "close":
                        conn.close()
                        conn = None
                except (OSError, http.client.HTTPException, ValueError) as e:
                    kind = type(e).__name__
                    if conn is not None:
                        conn.close()
                    conn = None
                lat = time.monotonic() - t
                with lock:
                    if ok:
                        result.completed += 1
                        result.latencies_s.append(lat)
                        rep = ans.get("replica")
                        if rep is not None:
                            result.replicas[rep] += 1
                            if rep not in result.first_seen:
                                result.first_seen[rep] = time.monotonic()
                                result.nodes[rep] = ans.get("node")
                                result.pids[rep] = ans.get("pid")
                        if on_success is not None:
                            on_success(ans)
                        break
                    result.failures.append(Failure(t, t + lat, kind, w, attempt))
                    if attempt == 1:
                        result.first_attempt_failures += 1
                    if not retry or time.monotonic() - first_t > retry_deadline_s:
                        result.lost += 1
                        break
                    result.retries += 1
                if conn is not None:  # a failed answer on a live connection: start afresh
                    conn.close()
                    conn = None
                time.sleep(min(0.5, 0.02 * 2 ** min(attempt, 5)))
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(1.0, hard_end - time.monotonic() + retry_deadline_s + timeout_s))
    result.elapsed_s = time.monotonic() - t0
    return result


def cpu_seconds(pids) -> float:
    """utime + stime so far of these processes (those that have exited count no more)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


@dataclass
class Measurement:
    name: str
    load: LoadResult
    server_cpu_us_per_request: float


def idle_cpu_per_s(cpu: Callable[[], float], secs: float = 2.0) -> float:
    """CPU seconds per second a server side burns with no load (Ray's GCS, raylets, agents and
    health checks), to take off the per-request figure."""
    c0, t0 = cpu(), time.monotonic()
    time.sleep(secs)
    return (cpu() - c0) / (time.monotonic() - t0)


def measure(name: str, host: str, port: int, fmt, cpu: Callable[[], float], *, concurrency: int = 8,
            warmup_s: float = 1.0, duration_s: float = 5.0, idle_per_s: float = 0.0) -> Measurement:
    """rps, p50 and the server side's CPU per request (less `idle_per_s`, its idle burn) at
    `concurrency`, after a warm-up; no retries (a failure is a failure)."""
    closed_loop(host, port, fmt, concurrency=concurrency, duration_s=warmup_s)
    c0 = cpu()
    load = closed_loop(host, port, fmt, concurrency=concurrency, duration_s=duration_s)
    c1 = cpu()
    busy = max(0.0, (c1 - c0) - idle_per_s * load.elapsed_s)
    return Measurement(name, load, busy * 1e6 / max(load.completed, 1))


def compare(ray_m: Measurement, direct_m: Measurement) -> str:
    """A markdown table of both and the cost Ray adds per request."""
    rows = ["| path | c | req/s | p50 µs | p99 µs | server CPU µs / req | lost |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for m in (ray_m, direct_m):
        ld = m.load
        rows.append(f"| {m.name} | {ld.concurrency} | {ld.rps:.0f} | {ld.p50_us:.0f} | "
                    f"{ld.percentile_us(0.99):.0f} | {m.server_cpu_us_per_request:.0f} | {ld.lost} |")
    r, d = ray_m.load, direct_m.load
    rows.append("")
    rows.append(f"Ray adds per request: p50 +{r.p50_us - d.p50_us:.0f} µs "
                f"({r.p50_us / d.p50_us:.1f}x), server CPU +"
                f"{ray_m.server_cpu_us_per_request - direct_m.server_cpu_us_per_request:.0f} µs; "
                f"throughput {r.rps / d.rps:.2f}x of the direct door's")
    return "\n".join(rows)

