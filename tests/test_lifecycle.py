"""What orchestrators rely on: SIGTERM drains in-flight requests within
--exit-timeout-secs while the doors close and readiness turns false at once, readiness follows the models marked as
required and the health of each model's instances, and a large repository's startup fits the
chart's startup probe."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import threading
import time

import requests

from tessera_deploy import one, rendered_chart
from tessera_testlib import (QUICKSTART, REPEAT_CONFIG, connection_refused, copy_faulty, wait_model_ready, wait_until,
                             write_config_model)


def write_repeat(repo):
    write_config_model(repo, "slow_repeat", REPEAT_CONFIG.format(name="slow_repeat"))


class SlowStream(threading.Thread):
    """A generate_stream request whose responses come `delay_ms` apart; records what arrived."""

    def __init__(self, srv, count: int, delay_ms: int):
        super().__init__(daemon=True)
        self.url = srv.http("/v2/models/slow_repeat/generate_stream")
        self.body = {"IN": list(range(count)), "DELAY": [delay_ms] * count, "WAIT": [0]}
        self.events: list[dict] = []
        self.first = threading.Event()
        self.error: Exception | None = None

    def run(self):
        try:
            with requests.post(self.url, json=self.body, stream=True, timeout=60) as r:
                for line in r.iter_lines(decode_unicode=True):
                    if line.startswith("data:"):
                        self.events.append(json.loads(line[5:]))
                        self.first.set()
        except Exception as e:  # noqa: BLE001 - recorded for the test to assert on
            self.error = e
        finally:
            self.first.set()


def ready_status(srv) -> int:
    return requests.get(srv.http("/v2/health/ready"), timeout=5).status_code


def long_stream(srv) -> SlowStream:
    """A 20 s stream (40 responses 500 ms apart), started once the server is ready."""
    wait_until(lambda: ready_status(srv) == 200, 30, "ready", srv)
    stream = SlowStream(srv, count=40, delay_ms=500)
    stream.start()
    assert stream.first.wait(30)
    return stream


def exit_time(srv, stream: SlowStream) -> float:
    """Seconds until the server process exits (after the signal just sent); joins the stream."""
    signalled = time.monotonic()
    rc = srv.process.wait(timeout=20)
    took = time.monotonic() - signalled
    srv.mark_stopped(rc)
    stream.join(30)
    return took


def test_sigterm_closes_the_doors_at_once_and_drains_in_flight_requests(server_factory, repo):
    write_repeat(repo)
    srv = server_factory(repo, ["--exit-timeout-secs=30"])
    wait_until(lambda: ready_status(srv) == 200, 30, "ready", srv)
    stream = SlowStream(srv, count=6, delay_ms=400)  # about 2.4 s of responses
    stream.start()
    assert stream.first.wait(30) and stream.error is None, stream.error
    signalled = time.monotonic()
    srv.process.send_signal(signal.SIGTERM)
    # Not ready, and not taking connections, at once: a probe or a late client is refused (and
    # goes elsewhere), while the request in flight goes on (tests/test_drain.py has the rest).
    wait_until(lambda: connection_refused(srv.port), 2, "connections refused after SIGTERM", srv)
    assert time.monotonic() - signalled < 2
    stream.join(30)
    assert stream.error is None, stream.error
    assert [e["OUT"] for e in stream.events] == list(range(6)), "the in-flight stream finished whole"
    rc = srv.process.wait(timeout=20)
    srv.mark_stopped(rc)
    assert rc == 0
    log = srv.log_text()
    assert "draining: not ready" in log
    assert "still in flight" not in log


def test_the_exit_timeout_bounds_the_drain(server_factory, repo):
    write_repeat(repo)
    srv = server_factory(repo, ["--exit-timeout-secs=1"])
    stream = long_stream(srv)
    srv.process.send_signal(signal.SIGTERM)
    took = exit_time(srv, stream)
    assert took < 6, f"exited {took:.1f}s after SIGTERM with --exit-timeout-secs=1"
    assert len(stream.events) < 40, "the stream was cut at the timeout"
    assert "still in flight at the exit timeout" in srv.log_text()


def test_a_second_signal_stops_at_once(server_factory, repo):
    write_repeat(repo)
    srv = server_factory(repo, ["--exit-timeout-secs=60"])
    stream = long_stream(srv)
    srv.process.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining: not ready" in srv.log_text(), 5, "draining", srv)
    srv.process.send_signal(signal.SIGINT)
    took = exit_time(srv, stream)
    assert took < 5, f"exited {took:.1f}s after the second signal"
    assert len(stream.events) < 40
    assert "stopping now" in srv.log_text()


def test_readiness_follows_the_required_models(server_factory, repo):
    """ModelMesh-style explicit control with --strict-readiness=false: the server is ready only
    while every --required-model has a ready version."""
    shutil.copytree(QUICKSTART / "add_sub", repo / "add_sub")
    shutil.copytree(QUICKSTART / "simple", repo / "simple")
    srv = server_factory(repo, ["--model-control-mode=explicit", "--strict-readiness=false",
                                "--required-model=add_sub"])
    assert ready_status(srv) == 400, "add_sub is required and not loaded"
    assert requests.post(srv.http("/v2/repository/models/simple/load"), timeout=60).status_code == 200
    assert ready_status(srv) == 400, "another model does not make it ready"
    assert requests.post(srv.http("/v2/repository/models/add_sub/load"), timeout=60).status_code == 200
    assert ready_status(srv) == 200
    assert requests.post(srv.http("/v2/repository/models/add_sub/unload"), timeout=60).status_code == 200
    assert ready_status(srv) == 400
    # Without the flag the same server would be ready: --strict-readiness=false ignores models.
    other = server_factory(repo, ["--model-control-mode=explicit", "--strict-readiness=false"])
    assert ready_status(other) == 200


def test_a_large_repository_starts_within_the_charts_startup_probe(server_factory, tmp_path):
    """200 models (ONNX and WebAssembly): the server opens its ports only once all are loaded, as
    Triton does, so the startup probe must allow that long. Prints the time it took."""
    repo = tmp_path / "large"
    repo.mkdir()
    for i in range(150):
        shutil.copytree(QUICKSTART / "add_sub", repo / f"onnx_{i:03d}")
        config = repo / f"onnx_{i:03d}" / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "add_sub"', f'name: "onnx_{i:03d}"'))
    for i in range(50):
        shutil.copytree(QUICKSTART / "add_sub_rust", repo / f"wasm_{i:03d}")
        config = repo / f"wasm_{i:03d}" / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "add_sub_rust"', f'name: "wasm_{i:03d}"'))
    container = one(rendered_chart(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    probe = container["startupProbe"]
    budget = probe["periodSeconds"] * probe["failureThreshold"]
    started = time.monotonic()
    srv = server_factory(repo)
    wait_until(lambda: ready_status(srv) == 200, budget, "ready within the startup probe's budget", srv)
    took = time.monotonic() - started
    print(f"200-model repository ready in {took:.1f}s (startup probe allows {budget}s)")
    assert took < budget / 4, f"{took:.1f}s leaves little of the startup probe's {budget}s"
    index = requests.post(srv.http("/v2/repository/index"), json={"ready": True}, timeout=30).json()
    assert len(index) == 200


def faulty(srv, mode: str) -> requests.Response:
    body = {"inputs": [{"name": "MODE", "shape": [1], "datatype": "BYTES", "data": [mode]},
                       {"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}
    return requests.post(srv.http("/v2/models/faulty/infer"), json=body, timeout=30)


def model_ready(srv, model: str) -> int:
    return requests.get(srv.http(f"/v2/models/{model}/ready"), timeout=5).status_code


def index_entry(srv, model: str) -> dict:
    index = requests.post(srv.http("/v2/repository/index"), json={}, timeout=10).json()
    return next(e for e in index if e["name"] == model)


def test_a_model_whose_instances_keep_failing_turns_not_ready_and_recovers_by_itself(server_factory, repo):
    """Three traps in a row (the config's unhealthy_after_failures) make faulty not ready, and with
    strict readiness the server; requests still reach it, other models still serve, an error the
    guest returns for one request does not count, and one execution that works makes both ready
    again."""
    copy_faulty(repo, extra_config='parameters { key: "unhealthy_after_failures" value: { string_value: "3" } }\n')
    shutil.copytree(QUICKSTART / "simple", repo / "simple")
    strict, lax = server_factory(repo), server_factory(repo, ["--strict-readiness=false"])
    simple = {"inputs": [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
                         for i in range(2)]}
    for srv in (strict, lax):
        wait_model_ready(srv, "faulty")
        wait_model_ready(srv, "simple")
        for attempt in range(3):
            assert model_ready(srv, "faulty") == 200, f"ready before failure {attempt + 1}"
            assert faulty(srv, "trap").status_code == 500
            # A request the guest refuses is its own error: the instance worked.
            assert faulty(srv, "no_such_mode").status_code == 400
        assert model_ready(srv, "faulty") == 200, "the refusals in between reset the count"
        for _ in range(3):
            assert faulty(srv, "trap").status_code == 500
        assert model_ready(srv, "faulty") == 400
        entry = index_entry(srv, "faulty")
        assert entry["state"] == "UNAVAILABLE", entry
        assert "unhealthy: the last 3 executions failed" in entry["reason"] and "trapped" in entry["reason"], entry
        assert requests.post(srv.http("/v2/models/simple/infer"), json=simple, timeout=30).status_code == 200
    assert ready_status(strict) == 400, "strict readiness follows every model"
    assert ready_status(lax) == 200
    for srv in (strict, lax):
        assert faulty(srv, "ok").status_code == 200, "an unhealthy model still takes requests"
        assert model_ready(srv, "faulty") == 200 and index_entry(srv, "faulty")["state"] == "READY"
        assert ready_status(srv) == 200


KV_REPORTER = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Reports TensorRT-LLM's KV-cache block metrics, as its backend does, and echoes INPUT0."""

    def initialize(self, args):
        family = pb_utils.MetricFamily("nv_trt_llm_kv_cache_block_metrics", "KV cache blocks",
                                       pb_utils.MetricFamily.GAUGE)
        self.blocks = [family.Metric(labels={"kv_cache_block_type": kind}) for kind in ("tokens_per", "used", "max")]
        for metric, value in zip(self.blocks, (64, 5, 20)):
            metric.set(value)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0"))])
                for r in requests]
'''


def test_orca_load_reports_answer_the_format_the_client_asks_for(server_factory, repo):
    """`endpoint-load-metrics-format: text|json` gets an `endpoint-load-metrics` header: Triton's
    KV-cache figures from a model that reports them, plus ORCA's CPU and memory utilisation and
    the pending requests; on generate (Triton's endpoint) and infer alike."""
    (repo / "kv" / "1").mkdir(parents=True)
    (repo / "kv" / "1" / "model.py").write_text(KV_REPORTER)
    (repo / "kv" / "config.pbtxt").write_text(
        'name: "kv"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    srv = server_factory(repo, ["--metrics-interval-ms=100"])
    wait_model_ready(srv, "kv", deadline=300)
    body = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.5]}]}
    text = requests.post(srv.http("/v2/models/kv/infer"), json=body, timeout=30,
                         headers={"endpoint-load-metrics-format": "text"})
    assert text.status_code == 200
    report = text.headers["endpoint-load-metrics"]
    assert report.startswith("TEXT cpu_utilization="), report
    fields = dict(f.split("=", 1) for f in report.removeprefix("TEXT ").split(", "))
    assert 0 <= float(fields["cpu_utilization"]) <= 1 and 0 < float(fields["mem_utilization"]) < 1
    assert fields["named_metrics.pending_requests"] == "0"
    assert float(fields["named_metrics.kv_cache_utilization"]) == 0.25  # 5 used of 20
    assert float(fields["named_metrics.max_token_capacity"]) == 1280  # 20 blocks of 64 tokens
    generate = requests.post(srv.http("/v2/models/kv/generate"), json={"INPUT0": [1.5]}, timeout=30,
                             headers={"endpoint-load-metrics-format": "json"})
    assert generate.status_code == 200, generate.text
    report = json.loads(generate.headers["endpoint-load-metrics"].removeprefix("JSON "))
    assert report["named_metrics"]["kv_cache_utilization"] == 0.25 and "cpu_utilization" in report
    # No header unless asked for, or for a format ORCA does not have.
    assert "endpoint-load-metrics" not in requests.post(srv.http("/v2/models/kv/infer"), json=body, timeout=30).headers
    odd = requests.post(srv.http("/v2/models/kv/infer"), json=body, timeout=30,
                        headers={"endpoint-load-metrics-format": "yaml"})
    assert odd.status_code == 200 and "endpoint-load-metrics" not in odd.headers


def http_exchange(sock: socket.socket, path: str) -> bytes:
    """One keep-alive GET on `sock`; the response's head (its body is empty or short)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "closed before answering"
        data += chunk
    return data.partition(b"\r\n\r\n")[0].lower()


def test_idle_keep_alive_connections_close_when_the_drain_starts(server_factory, repo):
    """At SIGTERM an idle keep-alive connection is closed at once (its client reconnects wherever
    the load balancer now sends it) while a request in flight keeps the drain going."""
    write_repeat(repo)
    srv = server_factory(repo, ["--exit-timeout-secs=30", "--http-keepalive-timeout=600"])
    stream = long_stream(srv)
    idle = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    assert b"200 ok" in http_exchange(idle, "/v2/health/live")
    srv.process.send_signal(signal.SIGTERM)
    idle.settimeout(5)
    started = time.monotonic()
    assert idle.recv(4096) == b"", "the idle keep-alive connection was closed"
    assert time.monotonic() - started < 5
    idle.close()
    assert stream.is_alive() and stream.error is None, "the request in flight still streams"
    srv.process.send_signal(signal.SIGINT)  # a second signal stops at once
    exit_time(srv, stream)
