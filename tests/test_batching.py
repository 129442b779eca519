"""Dynamic batching, observed from outside: concurrent requests through tritonclient are merged
into fewer executions (statistics' execution_count and batch_stats), every caller still gets its
own rows, requests with different shapes are never merged, and a full queue rejects at once."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import (add_sub_config, copy_model, quickstart_repo, slow_identity_config, wait_model_ready,
                             write_atomic, write_config_model)

pytestmark = pytest.mark.timeout(120)


def stats_of(client, model):
    return client.get_inference_statistics(model, as_json=True)["model_stats"][0]


def inputs_for(a: np.ndarray, b: np.ndarray):
    ins = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"), grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def variable_add_sub_onnx() -> bytes:
    """add_sub with a variable second dimension: FP32 [batch, n] -> sum and difference."""
    import onnx
    from onnx import TensorProto, helper

    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "n"])

    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]), helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "variable_add_sub", [vi("INPUT0"), vi("INPUT1")], [vi("OUTPUT0"), vi("OUTPUT1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


@pytest.fixture
def batching_server(server_factory, tmp_path):
    repo = tmp_path / "repo"
    # A 200 ms queue delay makes merging deterministic: 16 requests sent at once all wait for
    # each other, up to max_batch_size 8 per batch.
    model_dir = copy_model(repo, "add_sub", "batched", config=add_sub_config(
        "batched", max_batch_size=8, input_dims="[ -1 ]", output_dims="[ -1 ]",
        extra="dynamic_batching { max_queue_delay_microseconds: 200000 }"))
    write_atomic(model_dir / "1" / "model.onnx", variable_add_sub_onnx())
    copy_model(repo, "add_sub", "queue_limited", config=add_sub_config(
        "queue_limited", max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { max_queue_size: 1 } }"))
    copy_model(repo, "add_sub", "unbatched", config=add_sub_config("unbatched", max_batch_size=8))
    srv = server_factory(repo)
    for m in ("batched", "queue_limited", "unbatched"):
        wait_model_ready(srv, m)
    return srv


def send_all(client, model, requests):
    results: queue.Queue = queue.Queue()
    for i, (a, b) in enumerate(requests):
        client.async_infer(model, inputs_for(a, b), lambda result, error, i=i: results.put((i, result, error)), request_id=str(i))
    out = {}
    for _ in requests:
        i, result, error = results.get(timeout=60)
        out[i] = (result, error)
    return out


def assert_all_summed(results: dict, reqs) -> None:
    """Every request of send_all was answered without error, OUTPUT0 = INPUT0 + INPUT1."""
    for i, (a, b) in enumerate(reqs):
        result, error = results[i]
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_concurrent_requests_are_batched(batching_server):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{batching_server.grpc_port}")
    rng = np.random.default_rng(7)
    reqs = [(rng.standard_normal((1, 16), dtype=np.float32), rng.standard_normal((1, 16), dtype=np.float32)) for _ in range(16)]
    # One request with two rows: it counts 2 towards max_batch_size.
    reqs.append((np.ones((2, 16), dtype=np.float32), np.ones((2, 16), dtype=np.float32)))
    results = send_all(c, "batched", reqs)
    for i, (a, b) in enumerate(reqs):
        result, error = results[i]
        assert error is None, error
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
        assert result.get_response().id == str(i)
    s = stats_of(c, "batched")
    assert int(s["inference_count"]) == 18
    executions = int(s["execution_count"])
    assert executions < 17, f"17 requests ran in {executions} executions: no batching"
    sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in s["batch_stats"]}
    assert max(sizes) <= 8 and max(sizes) > 1, sizes
    assert sum(size * n for size, n in sizes.items()) == 18
    assert int(s["inference_stats"]["queue"]["count"]) == 17
    c.close()


def test_different_shapes_are_not_merged(batching_server):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{batching_server.grpc_port}")
    short = [(np.full((1, 4), i, dtype=np.float32), np.ones((1, 4), dtype=np.float32)) for i in range(4)]
    long = [(np.full((1, 8), i, dtype=np.float32), np.ones((1, 8), dtype=np.float32)) for i in range(4)]
    reqs = [r for pair in zip(short, long) for r in pair]
    assert_all_summed(send_all(c, "batched", reqs), reqs)
    s = stats_of(c, "batched")
    assert int(s["execution_count"]) >= 2, "[*,4] and [*,8] requests cannot share a batch"
    c.close()


def test_full_queue_is_rejected(batching_server):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{batching_server.grpc_port}")
    reqs = [(np.ones((1, 16), dtype=np.float32), np.ones((1, 16), dtype=np.float32))] * 32
    results = send_all(c, "queue_limited", reqs)
    errors = [e for _, e in results.values() if e is not None]
    ok = [r for r, e in results.values() if e is None]
    assert ok, "some requests must be served"
    print(f"queue_limited: {len(ok)} served, {len(errors)} rejected")
    for e in errors:
        assert isinstance(e, InferenceServerException)
        assert e.status() == "StatusCode.UNAVAILABLE" and "Exceeds maximum queue size" in e.message(), e
    for r in ok:
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 16), 2, dtype=np.float32))
    c.close()


def test_unbatched_model_runs_one_request_per_execution(batching_server):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{batching_server.grpc_port}")
    reqs = [(np.ones((1, 16), dtype=np.float32), np.ones((1, 16), dtype=np.float32))] * 8
    results = send_all(c, "unbatched", reqs)
    assert all(e is None for _, e in results.values())
    s = stats_of(c, "unbatched")
    assert int(s["execution_count"]) == int(s["inference_count"]) == 8
    c.close()


def test_wasm_guest_executes_the_formed_batch(server_factory, tmp_path):
    """A WebAssembly guest's execute receives the whole batch (one call, several requests)."""
    repo = tmp_path / "repo"
    src = (quickstart_repo() / "add_sub_rust" / "config.pbtxt").read_text()
    src = src.replace("dynamic_batching { }", "dynamic_batching { max_queue_delay_microseconds: 200000 }")
    assert "max_queue_delay_microseconds: 200000" in src
    copy_model(repo, "add_sub_rust", config=src)
    srv = server_factory(repo)
    wait_model_ready(srv, "add_sub_rust")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    reqs = [(np.full((1, 16), i, dtype=np.float32), np.ones((1, 16), dtype=np.float32)) for i in range(8)]
    assert_all_summed(send_all(c, "add_sub_rust", reqs), reqs)
    s = stats_of(c, "add_sub_rust")
    assert int(s["inference_count"]) == 8 and int(s["execution_count"]) < 8, s
    c.close()


def test_full_queue_is_503_over_http_with_tritons_message(server_factory, tmp_path):
    """One request executes (for 1 s), one waits in the queue (max_queue_size 1); every other
    request sent meanwhile is refused at once: HTTP 503 with Triton's message and request id."""
    repo = tmp_path / "repo"
    queue_of_one = "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n"
    write_config_model(repo, "slow_queue", slow_identity_config("slow_queue", 1000, max_batch_size=1, extra=queue_of_one))
    srv = server_factory(repo)
    wait_model_ready(srv, "slow_queue")
    answers: queue.Queue = queue.Queue()

    def post(i: int) -> None:
        body = {"id": f"r{i}", "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [i]}]}
        r = requests.post(srv.http("/v2/models/slow_queue/infer"), json=body, timeout=60)
        answers.put((i, r.status_code, r.json()))

    threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = [answers.get_nowait() for _ in threads]
    served = [(i, body) for i, code, body in results if code == 200]
    refused = [(i, body) for i, code, body in results if code == 503]
    assert len(served) + len(refused) == 8, results
    assert 1 <= len(served) <= 3 and len(refused) >= 5, results
    for i, body in refused:
        assert body == {"error": f"[request id: r{i}] Exceeds maximum queue size"}, body
    for i, body in served:
        assert body["outputs"][0]["data"] == [i] and body["id"] == f"r{i}"
