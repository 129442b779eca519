"""Density and tenancy: thousands of Wasm models with a bounded set of live instances (eviction,
cold starts, idle eviction), Triton's rate limiter, per-model quotas (queue, concurrency, CPU
time) refused with clear messages, and the per-model sandbox metrics."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest
import requests

from tessera_testlib import (
    QUICKSTART,
    at_once,
    copy_faulty,
    error_message,
    repository_index,
    wait_model_ready,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)

ADD_SUB_RUST = QUICKSTART / "add_sub_rust"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$')


def scrape(srv) -> dict[tuple[str, frozenset], float]:
    r = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=30)
    assert r.status_code == 200
    samples = {}
    for line in r.text.splitlines():
        m = SAMPLE.match(line)
        if m:
            samples[(m.group(1), frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(3) or "")))] = float(m.group(4))
    return samples


def metric(samples, name, model, **labels) -> float:
    return samples[(name, frozenset({"model": model, "version": "1", **labels}.items()))]


def total(samples, name) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def add_sub_repo(repo: Path, count: int, extra_config: str = "") -> list[str]:
    """`count` copies of add_sub_rust named m0000... (model.wasm hard-linked: one component)."""
    wasm = ADD_SUB_RUST / "1" / "model.wasm"
    config = (ADD_SUB_RUST / "config.pbtxt").read_text()
    names = [f"m{i:04d}" for i in range(count)]
    for name in names:
        (repo / name / "1").mkdir(parents=True)
        os.link(wasm, repo / name / "1" / "model.wasm")
        (repo / name / "config.pbtxt").write_text(
            config.replace('name: "add_sub_rust"', f'name: "{name}"') + extra_config)
    return names


def add_sub_body(offset: float) -> dict:
    return {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [offset + i for i in range(16)]},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
    ]}


def assert_adds(session: requests.Session, srv, model: str, offset: float) -> None:
    r = session.post(f"{srv.base_url}/v2/models/{model}/infer", json=add_sub_body(offset), timeout=30)
    assert r.status_code == 200, f"{model}: HTTP {r.status_code}: {r.text[:500]}"
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert out["OUTPUT0"] == [offset + i + 1.0 for i in range(16)], model


def faulty_body(mode: str) -> dict:
    return {"inputs": [
        {"name": "MODE", "shape": [1], "datatype": "BYTES", "data": [mode]},
        {"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]},
    ]}


def faulty_call(srv, model: str, mode: str):
    """(HTTP status, error message or "", when the response arrived)."""
    r = requests.post(f"{srv.base_url}/v2/models/{model}/infer", json=faulty_body(mode), timeout=60)
    return r.status_code, (error_message(r) if r.status_code != 200 else ""), time.monotonic()


ONE_INSTANCE = 'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
# faulty's `loop` runs to its time limit: 300 ms here.
LOOP_LIMIT = 'parameters { key: "max_execute_ms" value: { string_value: "300" } }\n'


def faulty_with(repo: Path, name: str, extra: str) -> None:
    copy_faulty(repo, name, extra)
    cfg = repo / name / "config.pbtxt"
    # faulty's own config sets max_execute_ms 500; the test's value replaces it.
    text = cfg.read_text()
    if "max_execute_ms" in extra:
        text = re.sub(r'parameters \{ key: "max_execute_ms" value: \{ string_value: "500" \} \}\n', "", text)
    cfg.write_text(text)


# ---------------------------------------------------------------------------------------------
# Many models, few live instances
# ---------------------------------------------------------------------------------------------

def test_two_thousand_models_answer_with_64_live_instances(server_factory, tmp_path, wasm_cache):
    names = add_sub_repo(tmp_path / "repo", 2000)
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache), "--wasm-max-instances", "64"])
    r = requests.get(f"{srv.base_url}/v2/health/ready", timeout=10)
    assert r.status_code == 200, "every model loaded although only 64 instances may be live"
    with requests.Session() as s:
        for i, name in enumerate(names):
            assert_adds(s, srv, name, float(i))
        samples = scrape(srv)
        live = total(samples, "tessera_model_instances_live")
        assert 1 <= live <= 64, f"{live} instances live with --wasm-max-instances 64"
        # m0000 was evicted long ago: it is rebuilt on its next request and answers the same.
        assert metric(samples, "tessera_model_instances_live", "m0000") == 0
        assert metric(samples, "tessera_model_instances_live", names[-1]) == 1
        assert_adds(s, srv, "m0000", 7.0)
        assert metric(scrape(srv), "tessera_model_instances_live", "m0000") == 1
    srv.assert_no_new_panic()


def test_idle_instances_are_evicted_and_come_back_on_the_next_request(server_factory, tmp_path, wasm_cache):
    names = add_sub_repo(tmp_path / "repo", 3)
    srv = server_factory(tmp_path / "repo",
                         ["--wasm-cache-dir", str(wasm_cache), "--wasm-instance-idle-secs", "1"])
    with requests.Session() as s:
        for name in names:
            assert_adds(s, srv, name, 1.0)
        wait_until(lambda: total(scrape(srv), "tessera_model_instances_live") == 0, 20,
                   "every idle instance is evicted", srv)
        assert total(scrape(srv), "tessera_model_memory_bytes") == 0, "evicted instances hold no memory"
        assert_adds(s, srv, names[1], 2.0)
        samples = scrape(srv)
        assert metric(samples, "tessera_model_instances_live", names[1]) == 1
        assert metric(samples, "tessera_model_memory_bytes", names[1]) > 0


# ---------------------------------------------------------------------------------------------
# Triton's rate limiter
# ---------------------------------------------------------------------------------------------

def rate_limited_repo(repo: Path) -> None:
    group = ('instance_group [ { count: 1 kind: KIND_CPU rate_limiter { '
             'resources [ { name: "R" global: true count: 1 } ] priority: 1 } } ]\n')
    for name in ("slow_a", "slow_b"):
        faulty_with(repo, name, group + LOOP_LIMIT)


def finish_gap(srv) -> float:
    """Runs faulty's `loop` (300 ms) on slow_a and slow_b at once; the gap between the two ends."""
    calls = iter(["slow_a", "slow_b"])
    ends = at_once(lambda: faulty_call(srv, next(calls), "loop"), 2)
    for status, message, _ in ends:
        assert status == 500 and "time limit of 300 ms" in message, (status, message)
    return abs(ends[0][2] - ends[1][2])


def test_rate_limiter_runs_instances_sharing_a_resource_one_at_a_time(server_factory, tmp_path, wasm_cache):
    rate_limited_repo(tmp_path / "repo")
    limited = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache), "--rate-limit",
                                                 "execution_count"])
    # One copy of the global R: the second execution starts when the first ends.
    assert finish_gap(limited) >= 0.25
    # Without --rate-limit the resources are ignored and both run side by side.
    free = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache)])
    assert finish_gap(free) < 0.25


def test_rate_limit_resource_too_small_fails_the_load_with_the_reason(server_factory, tmp_path, wasm_cache):
    rate_limited_repo(tmp_path / "repo")
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache), "--exit-on-error", "false",
                                             "--rate-limit", "execution_count", "--rate-limit-resource", "R:0"])
    entries = {e["name"]: e for e in repository_index(srv)}
    assert entries["slow_a"]["state"] == "UNAVAILABLE"
    # Triton's message (qa/L0_rate_limiter).
    assert ('Resource count for "R" is limited to 0 which will prevent scheduling of one or more model instances, '
            "the minimum required count is 1") in entries["slow_a"]["reason"], entries["slow_a"]


# ---------------------------------------------------------------------------------------------
# Quotas
# ---------------------------------------------------------------------------------------------

def test_queue_quota_refuses_what_does_not_fit_and_counts_it(server_factory, tmp_path, wasm_cache):
    faulty_with(tmp_path / "repo", "queued",
                ONE_INSTANCE + LOOP_LIMIT + 'parameters { key: "max_queue_size" value: { string_value: "1" } }\n')
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "queued")
    results = at_once(lambda: faulty_call(srv, "queued", "loop"), 8)
    refused = [m for status, m, _ in results if status == 503]
    ran = [m for status, m, _ in results if status == 500]
    assert len(refused) + len(ran) == 8, results
    # One executes, one waits; arrivals that overlap the check may squeeze in, never most of them.
    assert 2 <= len(ran) <= 4 and len(refused) >= 4, results
    for m in refused:
        assert "Exceeds maximum queue size (the model's max_queue_size quota is 1)" in m, m
    for m in ran:
        assert "time limit of 300 ms" in m, m
    assert metric(scrape(srv), "tessera_model_quota_refusals_total", "queued", quota="queue") == len(refused)


def test_concurrency_quota_serialises_instances(server_factory, tmp_path, wasm_cache):
    faulty_with(tmp_path / "repo", "capped",
                'instance_group [ { count: 2 kind: KIND_CPU } ]\n' + LOOP_LIMIT
                + 'parameters { key: "max_concurrent_executions" value: { string_value: "1" } }\n')
    faulty_with(tmp_path / "repo", "uncapped", 'instance_group [ { count: 2 kind: KIND_CPU } ]\n' + LOOP_LIMIT)
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache)])
    for model, serial in (("capped", True), ("uncapped", False)):
        ends = at_once(lambda m=model: faulty_call(srv, m, "loop"), 2)
        assert all(s == 500 for s, _, _ in ends), ends
        gap = abs(ends[0][2] - ends[1][2])
        assert (gap >= 0.25) == serial, f"{model}: the two executions ended {gap:.3f} s apart"


def test_cpu_quota_refuses_until_the_budget_refills(server_factory, tmp_path, wasm_cache):
    faulty_with(tmp_path / "repo", "cpu_capped",
                ONE_INSTANCE + 'parameters { key: "max_execute_ms" value: { string_value: "100" } }\n'
                + 'parameters { key: "max_cpu_ms_per_second" value: { string_value: "20" } }\n')
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache)])
    status, message, _ = faulty_call(srv, "cpu_capped", "loop")
    assert status == 500 and "time limit" in message
    # Up to 100 ms of CPU (less on a busy box: the quota counts CPU, not wall time) against a
    # bucket of 20 ms: in debt for up to four seconds.
    status, message, _ = faulty_call(srv, "cpu_capped", "ok")
    assert status == 503, (status, message)
    assert "model 'cpu_capped' has used its CPU quota of 20 ms per second (max_cpu_ms_per_second)" in message
    wait_until(lambda: faulty_call(srv, "cpu_capped", "ok")[0] == 200, 15, "the CPU budget refills", srv,
               interval=0.25)
    samples = scrape(srv)
    assert metric(samples, "tessera_model_quota_refusals_total", "cpu_capped", quota="cpu") >= 1
    assert metric(samples, "tessera_model_cpu_duration_us", "cpu_capped") > 20_000


def test_bad_quota_parameters_fail_the_load_with_the_reason(server_factory, tmp_path, wasm_cache):
    faulty_with(tmp_path / "repo", "bad_queue", 'parameters { key: "max_queue_size" value: { string_value: "many" } }\n')
    faulty_with(tmp_path / "repo", "bad_cpu",
                'parameters { key: "max_cpu_ms_per_second" value: { string_value: "-5" } }\n')
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache), "--exit-on-error", "false"])
    entries = {e["name"]: e for e in repository_index(srv)}
    assert "parameter 'max_queue_size' must be a positive integer, got 'many'" in entries["bad_queue"]["reason"]
    assert "parameter 'max_cpu_ms_per_second' must be a positive integer, got '-5'" in entries["bad_cpu"]["reason"]


# ---------------------------------------------------------------------------------------------
# Per-model sandbox metrics
# ---------------------------------------------------------------------------------------------

def test_traps_are_counted_by_kind_per_model(server_factory, tmp_path, wasm_cache):
    faulty_with(tmp_path / "repo", "noisy", ONE_INSTANCE + LOOP_LIMIT)
    faulty_with(tmp_path / "repo", "quiet", ONE_INSTANCE)
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache)])
    for mode, times in (("loop", 1), ("oom", 2), ("trap", 3), ("panic", 1), ("ok", 2)):
        for _ in range(times):
            faulty_call(srv, "noisy", mode)
    assert faulty_call(srv, "quiet", "ok")[0] == 200
    samples = scrape(srv)
    traps = {k: metric(samples, "tessera_model_traps_total", "noisy", kind=k) for k in ("timeout", "memory", "fault")}
    assert traps == {"timeout": 1, "memory": 2, "fault": 4}, traps
    assert all(metric(samples, "tessera_model_traps_total", "quiet", kind=k) == 0
               for k in ("timeout", "memory", "fault")), "another model's traps are not this one's"
    for model in ("noisy", "quiet"):
        assert metric(samples, "tessera_model_instances_live", model) == 1, model
        assert metric(samples, "tessera_model_memory_bytes", model) > 0, model
        assert metric(samples, "tessera_model_cpu_duration_us", model) > 0, model
    # The loop alone ran for 300 ms (without a CPU quota the metric counts execution time on the
    # thread); the quiet one's two calls a fraction of a millisecond.
    assert metric(samples, "tessera_model_cpu_duration_us", "noisy") >= 50_000
    assert metric(samples, "tessera_model_cpu_duration_us", "quiet") < 20_000


def faulty_sized(srv, model: str, mode: str, sizes: list[float]):
    """(HTTP status, error message or "") of a `faulty` call whose INPUT0 carries its sizes."""
    body = faulty_body(mode)
    body["inputs"][1].update(shape=[len(sizes)], data=sizes)
    r = requests.post(f"{srv.base_url}/v2/models/{model}/infer", json=body, timeout=60)
    return r.status_code, (error_message(r) if r.status_code != 200 else "")


def test_a_guest_cannot_make_the_host_copy_one_string_over_and_over(server_factory, tmp_path, wasm_cache):
    """A list<string> argument may name one string many times; wasmtime copies each before the
    host sees any. The copies of one call are capped at 2 x max_memory_bytes (32 MiB here):
    under it the call reaches the host, over it (even a terabyte's worth) the guest traps with
    the reason, and its neighbours and its own next request are served. A model granted more
    memory may pass more than wasmtime's own default cap (128 MiB)."""
    repo = tmp_path / "repo"
    # Copying 160 MiB of strings can take more than faulty's 500 ms on a loaded machine: the limit
    # this test is about is the copies' bytes, so time gets room.
    roomy_time = 'parameters { key: "max_execute_ms" value: { string_value: "20000" } }\n'
    for name, memory in (("faulty", 16 << 20), ("roomy", 128 << 20)):
        faulty_with(repo, name, ONE_INSTANCE + roomy_time)
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('string_value: "67108864"', f'string_value: "{memory}"'))
    [neighbour] = add_sub_repo(repo, 1)
    srv = server_factory(repo, ["--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "faulty")
    # 24 x 1 MiB: under the cap, the host takes the call (and refuses 'repeat', which is absent).
    status, message = faulty_sized(srv, "faulty", "alias_strings", [24, 1 << 20])
    assert status == 400 and "the host took a call naming one 1048576-byte string 24 times" in message, message
    refused = ("WebAssembly model 'faulty' execute passed more than 33554432 bytes to the host in one call "
               "(2 x max_memory_bytes)")
    # 48 x 1 MiB: over it (and under wasmtime's own default of 128 MiB, which would let it in).
    # 1 M x 1 MiB: a terabyte, refused the same way without the server's memory moving.
    for count in (48, 1 << 20):
        status, message = faulty_sized(srv, "faulty", "alias_strings", [count, 1 << 20])
        assert (status, message[:len(refused)]) == (500, refused), (count, status, message)
        assert_adds(requests, srv, neighbour, 1.0)
        assert faulty_call(srv, "faulty", "ok")[0] == 200, "the guest serves its next request"
    assert metric(scrape(srv), "tessera_model_traps_total", "faulty", kind="memory") == 2
    status, message = faulty_sized(srv, "roomy", "alias_strings", [160, 1 << 20])
    assert status == 400 and "the host took a call naming one 1048576-byte string 160 times" in message, message
    srv.assert_alive()


def test_a_guest_log_line_is_cut_at_eight_kib(server_factory, tmp_path, wasm_cache):
    """A guest's 4 MiB log line reaches neither the server's log nor a caller whole."""
    repo = tmp_path / "repo"
    faulty_with(repo, "faulty", ONE_INSTANCE)
    srv = server_factory(repo, ["--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "faulty")
    status, message = faulty_sized(srv, "faulty", "log_flood", [4 << 20])
    assert status == 500, message
    # The trap quotes the guest's last log line: its first 8 KiB, and how much was cut.
    assert f"(last guest log: {'x' * 8192}... ({(4 << 20) - 8192} more bytes cut; log lines keep 8192))" \
        in message, message[-300:]
    assert len(message) < 9000
    assert "x" * 8193 not in srv.log_text() and "x" * 8192 in srv.log_text()
    assert faulty_call(srv, "faulty", "ok")[0] == 200


def test_a_full_live_set_refuses_with_the_reason_and_loads_still_succeed(server_factory, tmp_path, wasm_cache):
    # One live instance for three models: loads (in parallel) wait their turn instead of failing.
    for name in ("busy", "other", "third"):
        faulty_with(tmp_path / "repo", name, ONE_INSTANCE + LOOP_LIMIT)
    srv = server_factory(tmp_path / "repo", ["--wasm-cache-dir", str(wasm_cache), "--wasm-max-instances", "1",
                                             "--model-load-thread-count", "3"])
    assert requests.get(f"{srv.base_url}/v2/health/ready", timeout=10).status_code == 200
    assert faulty_call(srv, "other", "ok")[0] == 200, "a model evicts the idle live instance"
    busy = threading.Thread(target=faulty_call, args=(srv, "busy", "loop"))
    busy.start()
    # `busy` is live (and holds its instance for its whole 300 ms loop) once the gauge says so.
    wait_until(lambda: metric(scrape(srv), "tessera_model_instances_live", "busy") == 1, 10,
               "busy's instance is live", srv, interval=0.005)
    status, message, _ = faulty_call(srv, "other", "ok")
    busy.join()
    assert status == 503, (status, message)
    assert "all 1 live WebAssembly instances are executing (--wasm-max-instances); model 'other' cannot start one now" \
        in message
    assert metric(scrape(srv), "tessera_model_quota_refusals_total", "other", quota="instances") == 1
    assert faulty_call(srv, "other", "ok")[0] == 200, "once busy is done, other gets the room back"


def test_a_guest_that_loops_on_a_connection_thread_stalls_only_its_own_request(server_factory, tmp_path, wasm_cache):
    """Every connection on one thread (--connection-thread-count=1). `faulty` answers fast until its
    executions run inline on that thread, then loops to its 3 s time limit: a neighbour on another
    connection of the same thread keeps being answered meanwhile (the execution hands the thread's
    other connections over once it runs past a few ms)."""
    repo = tmp_path / "repo"
    faulty_with(repo, "faulty", ONE_INSTANCE + 'parameters { key: "max_execute_ms" value: { string_value: "3000" } }\n')
    [neighbour] = add_sub_repo(repo, 1)
    srv = server_factory(repo, ["--wasm-cache-dir", str(wasm_cache), "--connection-thread-count", "1"])
    wait_model_ready(srv, "faulty")
    wait_model_ready(srv, neighbour)
    with requests.Session() as looping, requests.Session() as session:
        # A streak of short executions: faulty's next ones run inline, on the connection's thread.
        for _ in range(40):
            r = looping.post(f"{srv.base_url}/v2/models/faulty/infer", json=faulty_body("ok"), timeout=30)
            assert r.status_code == 200, r.text
        assert_adds(session, srv, neighbour, 0.0)
        loop_result = {}

        def loop():
            started = time.monotonic()
            r = looping.post(f"{srv.base_url}/v2/models/faulty/infer", json=faulty_body("loop"), timeout=60)
            loop_result.update(status=r.status_code, text=r.text, started=started, ended=time.monotonic())

        looper = threading.Thread(target=loop)
        looper.start()
        slowest, answered = 0.0, 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            started = time.monotonic()
            assert_adds(session, srv, neighbour, float(answered))
            slowest = max(slowest, time.monotonic() - started)
            answered += 1
        looper.join()
    assert loop_result["status"] == 500 and "time limit of 3000 ms" in loop_result["text"], loop_result
    assert loop_result["ended"] - loop_result["started"] >= 2.5, "faulty did not loop to its limit"
    assert slowest < 1.0, f"a neighbour waited {slowest:.3f} s behind the looping guest ({answered} answered)"


def test_a_version_unloaded_mid_request_is_unloading_until_the_request_ends(server_factory, tmp_path, wasm_cache):
    """Triton's model lifecycle: an unload takes the version out of service at once, but a request
    already running on it finishes there, and the index says UNLOADING until it has."""
    repo = tmp_path / "repo"
    # One live instance for two models: faulty's turns live only when its request executes.
    faulty_with(repo, "faulty", ONE_INSTANCE + 'parameters { key: "max_execute_ms" value: { string_value: "2000" } }\n')
    faulty_with(repo, "other", ONE_INSTANCE)
    srv = server_factory(repo, ["--wasm-cache-dir", str(wasm_cache), "--wasm-max-instances", "1",
                                "--model-control-mode", "explicit", "--load-model", "faulty", "--load-model", "other"])
    wait_model_ready(srv, "faulty")
    assert faulty_call(srv, "other", "ok")[0] == 200, "other evicts faulty's idle instance"
    looping = {}
    busy = threading.Thread(target=lambda: looping.update(result=faulty_call(srv, "faulty", "loop")))
    busy.start()
    try:
        wait_until(lambda: metric(scrape(srv), "tessera_model_instances_live", "faulty") == 1, 10,
                   "faulty's instance is executing", srv, interval=0.005)
        r = requests.post(f"{srv.base_url}/v2/repository/models/faulty/unload", timeout=10)
        assert r.status_code == 200, r.text
        states = {(e["name"], e.get("version"), e.get("state")) for e in repository_index(srv)}
        assert ("faulty", "1", "UNLOADING") in states, states
        assert requests.get(f"{srv.base_url}/v2/models/faulty/ready", timeout=10).status_code != 200
    finally:
        busy.join()
    status, message, _ = looping["result"]
    assert status != 200 and "time limit" in message, (status, message)
    entry = [e for e in repository_index(srv) if e["name"] == "faulty"]
    assert entry == [{"name": "faulty", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}], entry
