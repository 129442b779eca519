"""Prometheus metrics on --metrics-port: Triton's names and labels, values checked against the
work done (and against the statistics extension, which reports the same numbers)."""

from __future__ import annotations

import re
import socket

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tessera_testlib import add_sub_config, copy_model, wait_model_ready, write_atomic

pytestmark = pytest.mark.timeout(120)

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$')


def scrape(srv) -> dict[tuple[str, frozenset], float]:
    r = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not Prometheus text: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def value(samples, name, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def simple_inputs(batch=1, cols=16):
    a = np.arange(batch * cols, dtype=np.int32).reshape(batch, cols)
    inputs = [httpclient.InferInput("INPUT0", [batch, cols], "INT32"), httpclient.InferInput("INPUT1", [batch, cols], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return inputs


@pytest.fixture
def metrics_server(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    copy_model(repo, "add_sub")
    srv = server_factory(repo, ["--metrics-interval-ms=100"])
    wait_model_ready(srv, "simple")
    wait_model_ready(srv, "add_sub")
    return srv


def test_metrics_count_the_work_done(metrics_server):
    c = httpclient.InferenceServerClient(metrics_server.url)
    for _ in range(5):
        c.infer("simple", simple_inputs())
    c.infer("simple", simple_inputs(batch=3))
    for _ in range(2):
        with pytest.raises(Exception):
            c.infer("simple", simple_inputs(cols=15))  # wrong shape: a failed request
    s = scrape(metrics_server)
    m = {"model": "simple", "version": "1"}
    assert value(s, "nv_inference_request_success", **m) == 6
    assert value(s, "nv_inference_request_failure", reason="OTHER", **m) == 2
    assert value(s, "nv_inference_request_failure", reason="BACKEND", **m) == 0
    assert value(s, "nv_inference_count", **m) == 8  # 5 x 1 + 1 x 3
    assert value(s, "nv_inference_exec_count", **m) == 6
    assert value(s, "nv_inference_pending_request_count", **m) == 0
    for name in ("nv_inference_request_duration_us", "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
                 "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us"):
        assert value(s, name, **m) >= 0
    assert value(s, "nv_inference_request_duration_us", **m) > 0
    assert value(s, "nv_inference_request_success", model="add_sub", version="1") == 0
    # The statistics extension reports the same numbers.
    stats = c.get_inference_statistics("simple")["model_stats"][0]
    assert int(stats["inference_count"]) == 8 and int(stats["execution_count"]) == 6
    assert int(stats["inference_stats"]["success"]["count"]) == 6
    assert int(stats["inference_stats"]["fail"]["count"]) == 2
    total_us = (int(stats["inference_stats"]["success"]["ns"]) + int(stats["inference_stats"]["fail"]["ns"])) // 1000
    assert value(s, "nv_inference_request_duration_us", **m) == pytest.approx(total_us, abs=2)
    c.close()


def test_host_metrics(metrics_server):
    s = scrape(metrics_server)
    total = value(s, "nv_cpu_memory_total_bytes")
    used = value(s, "nv_cpu_memory_used_bytes")
    assert total > 0 and 0 < used <= total
    assert 0.0 <= value(s, "nv_cpu_utilization") <= 1.0


def test_unloaded_models_leave_the_metrics(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--model-control-mode=explicit", "--load-model=simple"])
    wait_model_ready(srv, "simple")
    assert ("nv_inference_count", frozenset({("model", "simple"), ("version", "1")})) in scrape(srv)
    assert requests.post(srv.http("/v2/repository/models/simple/unload"), timeout=30).status_code == 200
    assert not any(labels and ("model", "simple") in labels for _, labels in scrape(srv))


def test_metrics_can_be_turned_off(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--allow-metrics=false"])
    wait_model_ready(srv, "simple")
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", srv.metrics_port)) != 0, "nothing listens on the metrics port"
    srv2 = server_factory(repo, ["--allow-cpu-metrics=false"])
    wait_model_ready(srv2, "simple")
    names = {name for name, _ in scrape(srv2)}
    assert "nv_inference_count" in names and "nv_cpu_utilization" not in names
