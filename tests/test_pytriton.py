"""The `tessera` Python package with PyTriton's API: the server runs inside this test process and
PyTriton's documented usage runs unchanged except for its imports (`tessera.pytriton...`).
Clients are PyTriton's (ModelClient & co., here over tritonclient) and tritonclient itself, over
HTTP and gRPC on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, ensemble_config, free_ports, wait_until, write_config_model

from tessera.pytriton.client import AsyncioModelClient, DecoupledModelClient, FuturesModelClient, ModelClient
from tessera.pytriton.decorators import batch, fill_optionals, first_value, group_by_values, sample, triton_context
from tessera.pytriton.exceptions import PyTritonUnrecoverableError, PyTritonValidationError
from tessera.pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from tessera.pytriton.triton import Triton, TritonConfig, TritonLifecyclePolicy, TritonSecurityConfig


def config(**kw) -> TritonConfig:
    http, grpc, metrics = free_ports(3)
    return TritonConfig(http_address="127.0.0.1", grpc_address="127.0.0.1", metrics_address="127.0.0.1",
                        http_port=http, grpc_port=grpc, metrics_port=metrics, **kw)


@pytest.fixture
def triton():
    with Triton(config=config()) as t:
        yield t


def http_url(t: Triton) -> str:
    return f"127.0.0.1:{t.http_port}"


def grpc_url(t: Triton) -> str:
    return f"grpc://127.0.0.1:{t.grpc_port}"


SEEN: dict = {}


@batch
def linear(**inputs):
    x = inputs["INPUT_1"]
    SEEN["input"] = x
    return {"OUTPUT_1": x * 2 + 1}


def bind_linear(t: Triton, name: str = "Linear", **config_kw) -> None:
    t.bind(model_name=name, infer_func=linear,
           inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
           outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
           config=ModelConfig(max_batch_size=16, **config_kw))


def test_linear_model_with_batch_decorator(triton):
    bind_linear(triton)
    triton.run()
    assert triton.is_alive()
    x = np.array([1, 2, 3], dtype=np.float32)
    for url in (http_url(triton), grpc_url(triton)):
        with ModelClient(url, "Linear") as client:
            np.testing.assert_array_equal(client.infer_sample(x)["OUTPUT_1"], x * 2 + 1)
            batch_x = np.stack([x, x + 10])
            np.testing.assert_array_equal(client.infer_batch(INPUT_1=batch_x)["OUTPUT_1"], batch_x * 2 + 1)
    # The callable saw a read-only view of the request's bytes, not a copy.
    assert not SEEN["input"].flags.owndata and not SEEN["input"].flags.writeable
    # An ordinary model for tritonclient: metadata, statistics.
    meta = requests.get(f"http://{http_url(triton)}/v2/models/Linear").json()
    assert meta["inputs"] == [{"name": "INPUT_1", "datatype": "FP32", "shape": [-1, -1]}]
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{triton.grpc_port}")
    i = grpcclient.InferInput("INPUT_1", [1, 2], "FP32")
    i.set_data_from_numpy(np.array([[4, 5]], dtype=np.float32))
    np.testing.assert_array_equal(grpc.infer("Linear", [i]).as_numpy("OUTPUT_1"), [[9, 11]])
    stats = requests.get(f"http://{http_url(triton)}/v2/models/Linear/stats",
                         headers={"triton-access-token": triton.get_access_token()}).json()["model_stats"][0]
    assert stats["inference_count"] >= 6


def test_dynamic_batcher_merges_concurrent_requests(triton):
    bind_linear(triton, batcher=DynamicBatcher(max_queue_delay_microseconds=300_000, preferred_batch_size=[8]))
    triton.run()
    with FuturesModelClient(http_url(triton), "Linear", max_workers=8) as client:
        futures = [client.infer_sample(np.full(2, i, dtype=np.float32)) for i in range(8)]
        results = [f.result(timeout=60) for f in futures]
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r["OUTPUT_1"], np.full(2, i * 2 + 1, dtype=np.float32))
    stats = requests.get(f"http://{http_url(triton)}/v2/models/Linear/stats",
                         headers={"triton-access-token": triton.get_access_token()}).json()["model_stats"][0]
    assert stats["inference_count"] == 8 and stats["execution_count"] < 8


def test_one_batch_serves_requests_of_different_sizes_and_requested_outputs(triton):
    # Requests of 1 and 3 rows asking for different outputs share one call of a @batch callable
    # that returns a list (config order) of float64 arrays: each request gets its own rows of the
    # outputs it asked for, converted to the configured dtypes.
    calls = []

    @batch
    def stats_fn(X):
        calls.append(len(X))
        return [X.sum(axis=1, keepdims=True).astype(np.float64), np.arange(len(X)).reshape(-1, 1)]

    triton.bind(model_name="RowStats", infer_func=stats_fn,
                inputs=[Tensor(name="X", dtype=np.float32, shape=(2,))],
                outputs=[Tensor(name="SUM", dtype=np.float32, shape=(1,)),
                         Tensor(name="ROW", dtype=np.int32, shape=(1,))],
                config=ModelConfig(max_batch_size=8, batcher=DynamicBatcher(
                    max_queue_delay_microseconds=500_000, preferred_batch_size=[4])))
    client = httpclient.InferenceServerClient(http_url(triton), concurrency=2)
    one = httpclient.InferInput("X", [1, 2], "FP32")
    one.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
    three = httpclient.InferInput("X", [3, 2], "FP32")
    three.set_data_from_numpy(np.array([[10, 20], [30, 40], [50, 60]], dtype=np.float32))
    a = client.async_infer("RowStats", [one], outputs=[httpclient.InferRequestedOutput("SUM")])
    b = client.async_infer("RowStats", [three], outputs=[httpclient.InferRequestedOutput("ROW")])
    a, b = a.get_result(), b.get_result()
    assert calls == [4], "one call for both requests"
    assert a.as_numpy("ROW") is None and b.as_numpy("SUM") is None
    np.testing.assert_array_equal(a.as_numpy("SUM"), np.array([[3]], dtype=np.float32))
    assert a.as_numpy("SUM").dtype == np.float32
    rows = b.as_numpy("ROW")
    assert rows.dtype == np.int32 and rows.shape == (3, 1) and len(set(rows.ravel())) == 3

    @batch
    def short(X):
        return {"SUM": X[:1, :1], "ROW": np.zeros((1, 1), dtype=np.int32)}

    triton.bind(model_name="Short", infer_func=short,
                inputs=[Tensor(name="X", dtype=np.float32, shape=(2,))],
                outputs=[Tensor(name="SUM", dtype=np.float32, shape=(1,)),
                         Tensor(name="ROW", dtype=np.int32, shape=(1,))],
                config=ModelConfig(max_batch_size=8))
    with pytest.raises(InferenceServerException, match="output SUM has 1 rows for a batch of 3"):
        client.infer("Short", [three])

    # An output nobody asked for may be left out, batched or not.
    @batch
    def only_sum(X):
        return {"SUM": X.sum(axis=1, keepdims=True)}

    triton.bind(model_name="OnlySum", infer_func=only_sum,
                inputs=[Tensor(name="X", dtype=np.float32, shape=(2,))],
                outputs=[Tensor(name="SUM", dtype=np.float32, shape=(1,)),
                         Tensor(name="ROW", dtype=np.int32, shape=(1,))],
                config=ModelConfig(max_batch_size=8))
    got = client.infer("OnlySum", [three], outputs=[httpclient.InferRequestedOutput("SUM")]).as_numpy("SUM")
    np.testing.assert_array_equal(got, [[30], [70], [110]])
    with pytest.raises(InferenceServerException, match="did not return output ROW"):
        client.infer("OnlySum", [three])


def test_strings_in_and_out(triton):
    @batch
    def upper(**inputs):
        text = inputs["TEXT"]
        return {"UPPER": np.char.upper(text.astype(np.bytes_)).astype(np.object_)}

    triton.bind(model_name="Upper", infer_func=upper,
                inputs=[Tensor(name="TEXT", dtype=np.bytes_, shape=(1,))],
                outputs=[Tensor(name="UPPER", dtype=np.bytes_, shape=(1,))],
                config=ModelConfig(max_batch_size=8))
    triton.run()
    with ModelClient(http_url(triton), "Upper") as client:
        out = client.infer_batch(TEXT=np.array([[b"hello"], [b"tessera \x00 nul"]], dtype=np.object_))
    assert out["UPPER"].tolist() == [[b"HELLO"], [b"TESSERA \x00 NUL"]]


def test_several_instances_run_at_the_same_time(triton):
    # Two callables (two instances): both must be inside at once for the barrier to open; if the
    # server ran them one after another, each would time out.
    barrier = threading.Barrier(2, timeout=30)

    def make():
        @sample
        def wait_for_the_other(INPUT):
            barrier.wait()
            return {"OUTPUT": INPUT}
        return wait_for_the_other

    triton.bind(model_name="Pair", infer_func=[make(), make()],
                inputs=[Tensor(name="INPUT", dtype=np.int32, shape=(1,))],
                outputs=[Tensor(name="OUTPUT", dtype=np.int32, shape=(1,))],
                config=ModelConfig(batching=False))
    triton.run()
    config_json = requests.get(f"http://{http_url(triton)}/v2/models/Pair/config").json()
    assert config_json["instance_group"][0]["count"] == 2
    with FuturesModelClient(http_url(triton), "Pair", max_workers=2) as client:
        futures = [client.infer_sample(np.array([i], dtype=np.int32)) for i in (1, 2)]
        assert sorted(int(f.result(timeout=60)["OUTPUT"][0]) for f in futures) == [1, 2]


def test_group_by_values_fill_optionals_and_first_value(triton):
    calls = []

    @fill_optionals(temperature=np.array([1.0], dtype=np.float32))
    @group_by_values("temperature")
    @batch
    @first_value("temperature")
    def scale(**inputs):
        calls.append(inputs["temperature"])
        return {"OUT": inputs["x"] * inputs["temperature"]}

    triton.bind(model_name="Scale", infer_func=scale,
                inputs=[Tensor(name="x", dtype=np.float32, shape=(1,)),
                        Tensor(name="temperature", dtype=np.float32, shape=(1,), optional=True)],
                outputs=[Tensor(name="OUT", dtype=np.float32, shape=(1,))],
                config=ModelConfig(max_batch_size=8))
    triton.run()
    client = httpclient.InferenceServerClient(http_url(triton))
    x = httpclient.InferInput("x", [3, 1], "FP32")
    x.set_data_from_numpy(np.array([[1], [2], [3]], dtype=np.float32))
    t = httpclient.InferInput("temperature", [3, 1], "FP32")
    t.set_data_from_numpy(np.array([[10], [0.5], [10]], dtype=np.float32))
    out = client.infer("Scale", [x, t]).as_numpy("OUT")
    np.testing.assert_array_equal(out, [[10], [1], [30]])
    assert sorted(calls) == [0.5, 10.0], "one call per distinct temperature, each given a scalar"
    only_x = client.infer("Scale", [x]).as_numpy("OUT")  # temperature filled with 1.0
    np.testing.assert_array_equal(only_x, [[1], [2], [3]])


def test_a_failing_callable_fails_its_request_only(triton):
    @batch
    def picky(**inputs):
        if (inputs["INPUT_1"] < 0).any():
            raise ValueError("negative inputs are not allowed")
        return {"OUTPUT_1": inputs["INPUT_1"]}

    triton.bind(model_name="Picky", infer_func=picky,
                inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
                config=ModelConfig(max_batch_size=4))
    triton.run()
    client = httpclient.InferenceServerClient(http_url(triton))
    bad = httpclient.InferInput("INPUT_1", [1, 1], "FP32")
    bad.set_data_from_numpy(np.array([[-1]], dtype=np.float32))
    with pytest.raises(InferenceServerException) as ei:
        client.infer("Picky", [bad])
    assert "ValueError: negative inputs are not allowed" in ei.value.message()
    good = httpclient.InferInput("INPUT_1", [1, 1], "FP32")
    good.set_data_from_numpy(np.array([[3]], dtype=np.float32))
    np.testing.assert_array_equal(client.infer("Picky", [good]).as_numpy("OUTPUT_1"), [[3]])
    assert triton.is_alive()


def test_strict_checks_returned_dtypes(triton):
    @batch
    def wrong_type(**inputs):
        return {"OUTPUT_1": inputs["INPUT_1"].astype(np.int64)}

    triton.bind(model_name="Strict", infer_func=wrong_type,
                inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
                config=ModelConfig(max_batch_size=4), strict=True)
    triton.run()
    with ModelClient(http_url(triton), "Strict") as client:
        with pytest.raises(Exception) as ei:
            client.infer_sample(np.array([1.0], dtype=np.float32))
    assert "has dtype int64, the model configuration says float32" in str(ei.value)


def test_unrecoverable_error_stops_the_server():
    t = Triton(config=config())

    @batch
    def doomed(**inputs):
        raise PyTritonUnrecoverableError("the GPU fell off")

    t.bind(model_name="Doomed", infer_func=doomed,
           inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
           outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
           config=ModelConfig(max_batch_size=4))
    t.run()
    try:
        with ModelClient(http_url(t), "Doomed") as client:
            with pytest.raises(Exception) as ei:
                client.infer_sample(np.array([1.0], dtype=np.float32))
        assert "the GPU fell off" in str(ei.value)
        wait_until(lambda: not t.is_alive(), 30, "the server to stop after PyTritonUnrecoverableError")
    finally:
        t.stop()


def test_asyncio_client_and_triton_context(triton):
    @triton_context
    @batch
    def describe(triton_context, **inputs):
        names = [o.name for o in triton_context.model_config.outputs]
        return {names[0]: inputs["INPUT_1"] + len(names)}

    triton.bind(model_name="Ctx", infer_func=describe,
                inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
                config=ModelConfig(max_batch_size=4))
    triton.run()

    async def main():
        async with AsyncioModelClient(http_url(triton), "Ctx") as client:
            return await client.infer_sample(np.array([1.0, 2.0], dtype=np.float32))

    np.testing.assert_array_equal(asyncio.run(main())["OUTPUT_1"], [2.0, 3.0])


def test_config_fields_env_and_refusals(monkeypatch):
    with pytest.raises(PyTritonValidationError, match="grpc_use_ssl is not supported by Tessera"):
        Triton(config=config(grpc_use_ssl=True))
    http, grpc, metrics = free_ports(3)
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_HTTP_PORT", str(http))
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_GRPC_PORT", str(grpc))
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_METRICS_PORT", str(metrics))
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_HTTP_ADDRESS", "127.0.0.1")
    with Triton() as t:
        bind_linear(t)
        t.run()
        assert t.http_port == http
        assert requests.get(f"http://127.0.0.1:{http}/v2/health/ready").status_code == 200
    # Explicit fields win over the environment's, which fill the rest (as PyTriton layers them);
    # a list field comes from <FIELD>_0, <FIELD>_1, ... or <FIELD> as its one element.
    explicit_http = free_ports(1)[0]
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_CACHE_CONFIG", "local,size=1048576")
    with Triton(config=TritonConfig(http_port=explicit_http, http_address="127.0.0.1", http_thread_count=1)) as t:
        bind_linear(t, "Cached", response_cache=True)
        assert t.http_port == explicit_http and t.grpc_port == grpc
        with ModelClient(f"127.0.0.1:{explicit_http}", "Cached") as client:
            client.infer_sample(np.array([1], dtype=np.float32))
            client.infer_sample(np.array([1], dtype=np.float32))
        stats = requests.get(f"http://127.0.0.1:{explicit_http}/v2/models/Cached/stats",
                             headers={"triton-access-token": t.get_access_token()}).json()
        assert stats["model_stats"][0]["inference_stats"]["cache_hit"]["count"] == 1
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_METRICS_CONFIG_1", "summary_latencies=true")
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_METRICS_CONFIG_0", "counter_latencies=false")
    assert TritonConfig.from_env().metrics_config == ["counter_latencies=false", "summary_latencies=true"]


def test_bound_models_next_to_a_model_repository(tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "add_sub")
    with Triton(config=config(model_repository=str(repo))) as t:
        bind_linear(t)
        t.run()
        client = httpclient.InferenceServerClient(http_url(t))
        wait_until(lambda: client.is_model_ready("add_sub"), 60, "add_sub from the repository")
        assert client.is_model_ready("Linear")


def test_decoupled_generator_streams_responses(triton):
    def countdown(requests):
        # PyTriton's decoupled models: a generator yielding one dict per request each time.
        start = int(requests[0]["N"][0])
        for k in range(start, 0, -1):
            yield [{"LEFT": np.array([k], dtype=np.int32)}]

    triton.bind(model_name="Countdown", infer_func=countdown,
                inputs=[Tensor(name="N", dtype=np.int32, shape=(1,))],
                outputs=[Tensor(name="LEFT", dtype=np.int32, shape=(1,))],
                config=ModelConfig(batching=False, decoupled=True))
    triton.run()
    with DecoupledModelClient(grpc_url(triton), "Countdown") as client:
        got = [int(r["LEFT"][0]) for r in client.infer_sample(np.array([3], dtype=np.int32))]
    assert got == [3, 2, 1]
    # The same stream over HTTP (Triton's generate_stream extension, server-sent events).
    r = requests.post(f"http://{http_url(triton)}/v2/models/Countdown/generate_stream", json={"N": [2]},
                      stream=True, timeout=30)
    events = [line for line in r.iter_lines() if line.startswith(b"data:")]
    assert len(events) == 2 and b'"LEFT":2}' in events[0] and b'"LEFT":1}' in events[1]


def test_bound_model_as_an_ensemble_step(tmp_path):
    # A repository ensemble whose step is a bound callable: an ordinary model to the ensemble
    # scheduler. With launch_triton_on_startup=False the server starts in run(), with the bound
    # models served before the repository loads, so the ensemble loads at once.
    repo = tmp_path / "repo"
    write_config_model(repo, "ens", ensemble_config("ens", 'model_name: "Linear" model_version: -1 '
                                                    'input_map { key: "INPUT_1" value: "X" } '
                                                    'output_map { key: "OUTPUT_1" value: "Y" }'))
    policy = TritonLifecyclePolicy(launch_triton_on_startup=False)
    with Triton(config=config(model_repository=str(repo)), triton_lifecycle_policy=policy) as t:
        bind_linear(t)
        assert t.http_port is None, "no server before run() with launch_triton_on_startup=False"
        t.run()
        client = httpclient.InferenceServerClient(http_url(t))
        assert client.is_model_ready("ens"), "the ensemble loaded with the server, its step already bound"
        x = httpclient.InferInput("X", [1, 3], "FP32")
        x.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.float32))
        np.testing.assert_array_equal(client.infer("ens", [x]).as_numpy("Y"), [[3, 5, 7]])


def test_default_lifecycle_serves_each_bind_at_once(triton):
    # PyTriton's default policy: the server runs from the start of the `with` block and a bind
    # serves its model at once, before run().
    assert triton.http_port is not None and triton.is_alive()
    bind_linear(triton, "Early")
    assert httpclient.InferenceServerClient(http_url(triton)).is_model_ready("Early")


def test_wasm_guest_calls_a_bound_model_through_bls(tmp_path):
    # The quickstart bls_fanout guest calls its `fanout_target` 4 times and sums OUTPUT0; here the
    # target is a Python callable, allowed by the guest's allow-list like any model.
    repo = tmp_path / "repo"
    text = (Path(__file__).resolve().parents[1] / "model-repos/quickstart/bls_fanout/config.pbtxt").read_text()
    text = text.replace('string_value: "fanout_target"', 'string_value: "PyAdd"')
    text = text.replace('"fanout_target,add_sub,simple"', '"PyAdd"')
    copy_model(repo, "bls_fanout", config=text)
    calls = []

    @batch
    def add(INPUT0, INPUT1):
        calls.append(len(INPUT0))
        return {"OUTPUT0": INPUT0 + INPUT1}

    with Triton(config=config(model_repository=str(repo))) as t:
        t.bind(model_name="PyAdd", infer_func=add,
               inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(16,)),
                       Tensor(name="INPUT1", dtype=np.float32, shape=(16,))],
               outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(16,))],
               config=ModelConfig(max_batch_size=8))
        client = httpclient.InferenceServerClient(http_url(t))
        x = np.arange(16, dtype=np.float32)
        inp = httpclient.InferInput("INPUT0", [16], "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("bls_fanout", [inp]).as_numpy("OUTPUT0"), 8 * x)
        assert sum(calls) == 4, "four BLS calls of one row each reached the callable"


def test_model_version(triton):
    bind_linear(triton, "Versioned")
    triton.bind(model_name="V2", infer_func=linear,
                inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
                model_version=2, config=ModelConfig(max_batch_size=4))
    client = httpclient.InferenceServerClient(http_url(triton))
    assert client.is_model_ready("V2", "2") and not client.is_model_ready("V2", "1")
    with ModelClient(http_url(triton), "V2", model_version="2") as mc:
        np.testing.assert_array_equal(mc.infer_sample(np.array([1], dtype=np.float32))["OUTPUT_1"], [3])
    with pytest.raises(PyTritonValidationError, match="model_version must be a positive integer"):
        triton.bind(model_name="V0", infer_func=linear, inputs=[], outputs=[], model_version=0)
    # Another version of the same name is served beside it (PyTriton keys models by name and
    # version); the same name and version again is refused.
    @batch
    def triple(**inputs):
        return {"OUTPUT_1": inputs["INPUT_1"] * 3}

    triton.bind(model_name="V2", infer_func=triple,
                inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
                model_version=3, config=ModelConfig(max_batch_size=4))
    assert client.is_model_ready("V2", "2") and client.is_model_ready("V2", "3")
    with ModelClient(http_url(triton), "V2", model_version="3") as mc:
        np.testing.assert_array_equal(mc.infer_sample(np.array([1], dtype=np.float32))["OUTPUT_1"], [3])
    with pytest.raises(PyTritonValidationError, match="model V2 version 3 is already bound"):
        triton.bind(model_name="V2", infer_func=triple, inputs=[], outputs=[], model_version=3)


def test_security_config_restricts_endpoints_with_a_token(tmp_path):
    # PyTriton's default: shared-memory, model-repository, statistics, trace and logging need the
    # triton-access-token header (a generated token); inference and health stay open.
    workspace = tmp_path / "ws"
    with Triton(config=config(), workspace=workspace) as t:
        assert workspace.is_dir()
        bind_linear(t)
        token = t.get_access_token()
        assert token
        base = f"http://{http_url(t)}"
        assert requests.get(f"{base}/v2/health/ready").status_code == 200
        denied = requests.get(f"{base}/v2/models/Linear/stats")
        assert denied.status_code == 403 and "triton-access-token" in denied.json()["error"]
        wrong = requests.get(f"{base}/v2/models/Linear/stats", headers={"triton-access-token": "nope"})
        assert wrong.status_code == 403
        ok = requests.get(f"{base}/v2/models/Linear/stats", headers={"triton-access-token": token})
        assert ok.status_code == 200
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{t.grpc_port}")
        with pytest.raises(InferenceServerException) as ei:
            grpc.get_inference_statistics("Linear")
        assert ei.value.status() == "StatusCode.UNAVAILABLE"
        # Over gRPC, Triton (and so PyTriton) expects the key with its `triton-grpc-protocol-` prefix.
        headers = {"triton-grpc-protocol-triton-access-token": token}
        assert grpc.get_inference_statistics("Linear", headers=headers).model_stats
        with ModelClient(http_url(t), "Linear") as client:
            np.testing.assert_array_equal(client.infer_sample(np.array([1], dtype=np.float32))["OUTPUT_1"], [3])
    with Triton(config=config(), security_config=TritonSecurityConfig(restricted_endpoints=[])) as t:
        assert t.get_access_token() is None
        bind_linear(t)
        assert requests.get(f"http://{http_url(t)}/v2/models/Linear/stats").status_code == 200
    with pytest.raises(PyTritonValidationError, match="Invalid endpoint names: bogus"):
        TritonSecurityConfig(restricted_endpoints=["bogus"])
