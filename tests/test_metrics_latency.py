"""Latency distributions on /metrics, read with Prometheus' own parser (prometheus_client):
Triton's `--metrics-config` histograms and summaries, per-model buckets from `model_metrics`, and
Tessera's per-phase histograms."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tessera_testlib import (REPEAT_CONFIG, grpc_stream_responses, slow_identity_config, wait_model_ready,
                             write_config_model)


pytestmark = pytest.mark.timeout(180)

DELAY_MS = 5

BUCKETS = """model_metrics {
  metric_control: [
    { metric_identifier: { family: "nv_inference_first_response_histogram_ms" }
      histogram_options: { buckets: [ 1, 2, 4, 8, 16, 1000 ] } }
  ]
}"""



def families(srv) -> dict:
    """Every family on /metrics as prometheus_client parses it (it raises on malformed text)."""
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family, model: str, suffix: str = "") -> dict:
    """A model's samples of one family: label tuple (minus model and version) -> value. (The
    parser names a counter's samples `<family>_total`: pass that suffix for a counter.)"""
    found = {}
    for s in family.samples:
        if s.labels.get("model") == model and s.name == family.name + suffix:
            rest = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model", "version")))
            found[rest] = s.value
    return found


def buckets(family, model: str) -> dict[float, float]:
    """A model's histogram buckets: upper bound (inf for +Inf) -> cumulative count."""
    return {float(dict(k)["le"]): v for k, v in samples(family, model, "_bucket").items()}


def infer_slow(srv, model: str, n: int) -> None:
    client = httpclient.InferenceServerClient(srv.url)
    inp = httpclient.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([7], dtype=np.int32))
    for _ in range(n):
        assert client.infer(model, [inp]).as_numpy("OUTPUT0")[0] == 7
    client.close()


@pytest.fixture
def latency_server(server_factory, repo):
    # One instance that takes DELAY_MS per execution; its first-response buckets come from its config.
    write_config_model(repo, "slow", slow_identity_config("slow", DELAY_MS, extra=BUCKETS))
    write_config_model(repo, "repeat_int32", REPEAT_CONFIG.format(name="repeat_int32"))
    srv = server_factory(repo, [
        "--metrics-config=histogram_latencies=true",
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01",
    ])
    wait_model_ready(srv, "slow")
    wait_model_ready(srv, "repeat_int32")
    return srv


def test_first_response_histogram_uses_the_models_buckets(latency_server):
    infer_slow(latency_server, "slow", 10)
    f = families(latency_server)
    hist = f["nv_inference_first_response_histogram_ms"]
    assert hist.type == "histogram"
    got = buckets(hist, "slow")
    assert list(got) == [1, 2, 4, 8, 16, 1000, float("inf")]
    # Every response took at least the execution's delay: none in the buckets below it.
    assert got[4] == 0 and got[float("inf")] == 10
    assert samples(hist, "slow", "_count")[()] == 10
    assert samples(hist, "slow", "_sum")[()] >= 10 * DELAY_MS


def test_a_decoupled_models_first_response_is_timed_at_its_first_response(latency_server):
    """Three responses 20, 400 and 400 ms apart: the first response is under 100 ms (Triton's
    default buckets), though the whole request takes over 800 ms."""
    inputs = [grpcclient.InferInput("IN", [3], "INT32"), grpcclient.InferInput("DELAY", [3], "UINT32"),
              grpcclient.InferInput("WAIT", [1], "UINT32")]
    inputs[0].set_data_from_numpy(np.array([1, 2, 3], dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array([20, 400, 400], dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.array([0], dtype=np.uint32))
    assert grpc_stream_responses(f"127.0.0.1:{latency_server.grpc_port}", "repeat_int32", inputs, ["OUT"]) == [(1,), (2,), (3,)]
    f = families(latency_server)
    got = buckets(f["nv_inference_first_response_histogram_ms"], "repeat_int32")
    assert list(got) == [100, 500, 2000, 5000, float("inf")]
    assert got[100] == 1, got
    request = samples(f["tessera_inference_request_histogram_us"], "repeat_int32", "_sum")[()]
    assert request >= 800_000, "the request histogram holds the whole stream's time"


def test_summaries_report_the_asked_quantiles_and_agree_with_the_counters(latency_server):
    infer_slow(latency_server, "slow", 12)
    f = families(latency_server)
    summary = f["nv_inference_request_summary_us"]
    assert summary.type == "summary"
    quantiles = {dict(k)["quantile"]: v for k, v in samples(summary, "slow").items()}
    assert set(quantiles) == {"0.5", "0.9"}
    assert DELAY_MS * 1000 <= quantiles["0.5"] <= quantiles["0.9"]
    assert samples(summary, "slow", "_count")[()] == 12
    # As Triton documents: a summary's count and sum match the counters.
    success = samples(f["nv_inference_request_success"], "slow", "_total")[()]
    assert success == 12
    queue = f["nv_inference_queue_summary_us"]
    assert samples(queue, "slow", "_sum")[()] == pytest.approx(
        samples(f["nv_inference_queue_duration_us"], "slow", "_total")[()], abs=12)
    for name in ("nv_inference_compute_input_summary_us", "nv_inference_compute_infer_summary_us",
                 "nv_inference_compute_output_summary_us"):
        assert samples(f[name], "slow", "_count")[()] == 12, name
    assert "nv_cache_hit_summary_per_model" not in f, "no model caches responses"


def test_phase_histograms_are_on_by_default_and_counters_can_be_turned_off(server_factory, repo):
    write_config_model(repo, "slow", slow_identity_config("slow", 1))
    srv = server_factory(repo, ["--metrics-config=counter_latencies=false"])
    wait_model_ready(srv, "slow")
    infer_slow(srv, "slow", 3)
    f = families(srv)
    for phase in ("request", "queue", "compute"):
        hist = f[f"tessera_inference_{phase}_histogram_us"]
        assert hist.type == "histogram"
        assert samples(hist, "slow", "_count")[()] == 3, phase
    compute = buckets(f["tessera_inference_compute_histogram_us"], "slow")
    assert compute[500] == 0 and compute[float("inf")] == 3, "each execution slept 1 ms"
    assert "nv_inference_request_duration_us" not in f and "nv_inference_queue_duration_us" not in f
    assert samples(f["nv_inference_request_success"], "slow", "_total")[()] == 3
    # Triton's defaults: no first-response histogram and no summaries unless asked for.
    assert "nv_inference_first_response_histogram_ms" not in f
    assert not any(name.endswith("_summary_us") for name in f)

    off = server_factory(repo, ["--metrics-config=phase_histograms=false"])
    wait_model_ready(off, "slow")
    assert not any(name.startswith("tessera_inference_") for name in families(off))


def test_bad_model_metrics_buckets_fail_only_that_model(server_factory, repo):
    bad = BUCKETS.replace("[ 1, 2, 4, 8, 16, 1000 ]", "[ 8, 4 ]")
    write_config_model(repo, "bad_buckets", slow_identity_config("bad_buckets", 0, extra=bad))
    write_config_model(repo, "slow", slow_identity_config("slow", 0))
    srv = server_factory(repo, ["--metrics-config=histogram_latencies=true", "--exit-on-error=false"])
    wait_model_ready(srv, "slow")
    index = requests.post(srv.http("/v2/repository/index"), json={}, timeout=10).json()
    entry = next(e for e in index if e["name"] == "bad_buckets")
    assert entry["state"] == "UNAVAILABLE"
    assert "buckets of 'nv_inference_first_response_histogram_ms' must be finite and increasing" in entry["reason"]
