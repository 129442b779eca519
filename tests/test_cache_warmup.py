"""Response cache (`--cache-config local,size=N` + `response_cache { enable: true }`) and model
warmup (`model_warmup`): a hit returns the same answer without executing; warmup runs before the
model turns ready, and a failing warmup makes the model unavailable with a clear reason."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tessera_testlib import copy_model, quickstart_repo, repository_index, wait_model_ready, write_atomic

pytestmark = pytest.mark.timeout(120)


def simple_config(name: str, extra: str) -> str:
    text = (quickstart_repo() / "simple" / "config.pbtxt").read_text().replace('name: "simple"', f'name: "{name}"')
    return text + "\n" + extra + "\n"


def infer(c, model, fill: int):
    a = np.full((1, 16), fill, dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    return c.infer(model, inputs).as_numpy("OUTPUT0")


def stats(c, model):
    return c.get_inference_statistics(model)["model_stats"][0]


@pytest.fixture
def cache_repo(tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple", "cached", config=simple_config("cached", "response_cache { enable: true }"))
    copy_model(repo, "simple", "uncached")
    return repo


def test_cache_hit_skips_execution(server_factory, cache_repo):
    srv = server_factory(cache_repo, ["--cache-config", "local,size=1048576"])
    wait_model_ready(srv, "cached")
    c = httpclient.InferenceServerClient(srv.url)
    first = infer(c, "cached", 5)
    second = infer(c, "cached", 5)
    np.testing.assert_array_equal(first, np.full((1, 16), 6))
    np.testing.assert_array_equal(second, first)
    s = stats(c, "cached")
    assert int(s["execution_count"]) == 1 and int(s["inference_count"]) == 1, "the hit did not execute"
    assert int(s["inference_stats"]["success"]["count"]) == 2
    assert int(s["inference_stats"]["cache_hit"]["count"]) == 1
    assert int(s["inference_stats"]["cache_miss"]["count"]) == 1
    np.testing.assert_array_equal(infer(c, "cached", 7), np.full((1, 16), 8))
    assert int(stats(c, "cached")["execution_count"]) == 2, "different inputs miss"
    metrics = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    assert 'nv_cache_num_hits_per_model{model="cached",version="1"} 1' in metrics
    assert 'nv_cache_num_misses_per_model{model="cached",version="1"} 2' in metrics
    for _ in range(2):
        infer(c, "uncached", 5)
    assert int(stats(c, "uncached")["execution_count"]) == 2, "models without response_cache always execute"
    c.close()


def test_cache_needs_a_server_cache(server_factory, cache_repo):
    srv = server_factory(cache_repo)
    wait_model_ready(srv, "cached")
    c = httpclient.InferenceServerClient(srv.url)
    infer(c, "cached", 5)
    infer(c, "cached", 5)
    assert int(stats(c, "cached")["execution_count"]) == 2
    assert "no cache" in srv.log_text()
    c.close()


def test_unsupported_cache_is_refused(server_factory, cache_repo):
    srv = server_factory(cache_repo, ["--cache-config", "redis,host=localhost"], expect_exit=True)
    assert srv.process.wait(timeout=30) != 0
    assert "only the 'local' cache is supported" in srv.log_text()


WARMUP = '''model_warmup [
  {{
    name: "{name}"
    batch_size: {batch}
    count: {count}
    inputs {{ key: "INPUT0" value: {{ data_type: TYPE_INT32 dims: [ {dims} ] {data} }} }}
    inputs {{ key: "INPUT1" value: {{ data_type: TYPE_INT32 dims: [ {dims} ] {data} }} }}
  }}
]'''


def test_warmup_runs_before_ready(server_factory, tmp_path):
    repo = tmp_path / "repo"
    model = copy_model(repo, "simple", "warm", config=simple_config("warm", "\n".join([
        WARMUP.format(name="zeros", batch=2, count=3, dims=16, data="zero_data: true"),
        WARMUP.format(name="random", batch=8, count=1, dims=16, data="random_data: true"),
        WARMUP.format(name="from_file", batch=1, count=1, dims=16, data='input_data_file: "ones.bin"'),
    ])))
    write_atomic(model / "warmup" / "ones.bin", np.ones(16, dtype=np.int32).tobytes())
    srv = server_factory(repo)
    wait_model_ready(srv, "warm")
    log = srv.log_text()
    for sample in ("zeros", "random", "from_file"):
        assert f'sample="{sample}"' in log, log[-2000:]
    assert log.index("warmup done") < log.index('"model loaded" model="warm"'), "warmup finishes before the model is ready"
    c = httpclient.InferenceServerClient(srv.url)
    np.testing.assert_array_equal(infer(c, "warm", 1), np.full((1, 16), 2))
    c.close()


@pytest.mark.parametrize("sample,needle", [
    (WARMUP.format(name="bad_dims", batch=1, count=1, dims=15, data="zero_data: true"),
     # Both inputs are wrong: Triton's hash-map order checks INPUT1 first.
     "unexpected shape for input 'INPUT1'"),
    (WARMUP.format(name="missing_file", batch=1, count=1, dims=16, data='input_data_file: "nope.bin"'), "cannot read warmup data file"),
    (WARMUP.format(name="too_big", batch=9, count=1, dims=16, data="zero_data: true"), "batch-size must be <= 8"),
])
def test_failing_warmup_makes_the_model_unavailable(server_factory, tmp_path, sample, needle):
    repo = tmp_path / "repo"
    copy_model(repo, "simple", "cold", config=simple_config("cold", sample))
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--exit-on-error=false"])
    wait_model_ready(srv, "simple")
    entries = [e for e in repository_index(srv) if e["name"] == "cold"]
    assert entries and all(e.get("state") == "UNAVAILABLE" for e in entries), entries
    reason = " ".join(e.get("reason", "") for e in entries)
    assert "failed warmup sample" in reason and needle in reason, reason
    assert requests.get(srv.http("/v2/models/cold/ready"), timeout=10).status_code == 400
