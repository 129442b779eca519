"""What orchestrators rely on (issue 14, item 6): SIGTERM drains in-flight requests within
--exit-timeout-secs while readiness turns false at once, readiness follows the models marked as
required, and a large repository's startup fits the chart's startup probe."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time

import requests

from tessera_testlib import QUICKSTART, wait_until

from test_deploy import one, rendered_chart

REPEAT = """name: "slow_repeat"
backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""


def write_repeat(repo):
    (repo / "slow_repeat" / "1").mkdir(parents=True)
    (repo / "slow_repeat" / "config.pbtxt").write_text(REPEAT)


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


def test_sigterm_turns_readiness_false_at_once_and_drains_in_flight_requests(server_factory, repo):
    write_repeat(repo)
    srv = server_factory(repo, ["--exit-timeout-secs=30"])
    wait_until(lambda: ready_status(srv) == 200, 30, "ready", srv)
    stream = SlowStream(srv, count=6, delay_ms=400)  # about 2.4 s of responses
    stream.start()
    assert stream.first.wait(30) and stream.error is None, stream.error
    signalled = time.monotonic()
    srv.process.send_signal(signal.SIGTERM)
    # Not ready at once, while the door still answers (the probe sees 400, not a refused connection).
    wait_until(lambda: ready_status(srv) == 400, 2, "readiness false after SIGTERM", srv)
    assert time.monotonic() - signalled < 2
    assert requests.get(srv.http("/v2/health/live"), timeout=5).status_code == 200
    # A request that arrives during the drain is still served (sent before the endpoint update landed).
    late = requests.post(srv.http("/v2/models/slow_repeat/generate_stream"), timeout=30,
                         json={"IN": [7], "DELAY": [0], "WAIT": [0]})
    assert late.status_code == 200 and '"OUT":7' in late.text.replace(" ", ""), late.text
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
    wait_until(lambda: ready_status(srv) == 400, 5, "draining", srv)
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
