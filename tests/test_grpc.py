"""The gRPC front door with the real tritonclient[grpc]: sync, async (callbacks), aio and
streaming clients, every RPC, error codes, message limits and compression.

Expected behaviour is Triton 2.51's as observed (docs/triton-grpc-behaviour.md)."""

from __future__ import annotations

import base64

import asyncio
import json
import queue
import threading
from functools import partial

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, start_server, wait_model_ready, wait_model_not_ready

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def gclient(server):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


def simple_inputs(a: np.ndarray, b: np.ndarray):
    inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "INT32"), grpcclient.InferInput("INPUT1", list(b.shape), "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def ab(batch: int = 1):
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 3, dtype=np.int32)
    return a, b


def grpc_error(fn, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        fn(*args, **kwargs)
    return info.value


def assert_simple_works(c) -> None:
    a, b = ab()
    r = c.infer("simple", simple_inputs(a, b))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


# ---------------------------------------------------------------------------------------------
# Health, metadata, config
# ---------------------------------------------------------------------------------------------

def test_health_and_metadata(gclient, server):
    assert gclient.is_server_live()
    assert gclient.is_server_ready()
    assert gclient.is_model_ready("simple")
    assert gclient.is_model_ready("simple", "1")
    assert not gclient.is_model_ready("simple", "7")
    assert not gclient.is_model_ready("no_such_model")
    meta = gclient.get_server_metadata(as_json=True)
    assert meta["name"] == "tessera"
    assert "system_shared_memory" in meta["extensions"]
    model = gclient.get_model_metadata("simple", as_json=True)
    assert model["name"] == "simple" and model["versions"] == ["1"] and model["platform"] == "onnxruntime_onnx"
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}
    config = gclient.get_model_config("simple").config
    assert config.name == "simple" and config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    err = grpc_error(gclient.get_model_metadata, "no_such_model")
    assert err.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'no_such_model' is not found" in err.message()


def raw_call(port: int, method: str, payload: bytes, timeout: float = 10) -> bytes:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        return call(payload, timeout=timeout)


def test_standard_health_service(server):
    # HealthCheckResponse{status: SERVING (1)} is the two bytes 08 01, for any service name.
    assert raw_call(server.grpc_port, "/grpc.health.v1.Health/Check", b"") == b"\x08\x01"
    named = b"\x0a\x1einference.GRPCInferenceService"
    assert raw_call(server.grpc_port, "/grpc.health.v1.Health/Check", named) == b"\x08\x01"


# ---------------------------------------------------------------------------------------------
# Inference: sync, async callbacks, aio
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 3])
def test_sync_infer_simple(gclient, batch):
    a, b = ab(batch)
    r = gclient.infer("simple", simple_inputs(a, b), request_id="req-7")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    response = r.get_response()
    assert response.id == "req-7" and response.model_name == "simple" and response.model_version == "1"


def test_requested_output_and_classification(gclient):
    a, b = ab()
    r = gclient.infer("simple", simple_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in r.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert r.as_numpy("OUTPUT0") is None
    top = gclient.infer("simple", simple_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)])
    labels = [x.decode() for x in top.as_numpy("OUTPUT0").reshape(-1)]
    assert labels == ["18:15", "17:14"], labels


def test_typed_contents_are_accepted(server):
    """Clients that fill InferTensorContents instead of raw_input_contents (e.g. other languages)."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="simple", id="typed")
    for name, values in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
        t = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(values)
    raw = raw_call(server.grpc_port, "/inference.GRPCInferenceService/ModelInfer", request.SerializeToString())
    response = service_pb2.ModelInferResponse.FromString(raw)
    assert response.id == "typed"
    out0 = np.frombuffer(response.raw_output_contents[0], dtype=np.int32)
    np.testing.assert_array_equal(out0, np.arange(16) + 1)


def test_bytes_tensors_round_trip(gclient, server):
    wait_model_ready(server, "tokenizer", deadline=60)
    text = np.array([["hello world"]], dtype=object)
    inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(text)
    r = gclient.infer("tokenizer", [inp])
    import tritonclient.http as httpclient

    h = httpclient.InferenceServerClient(server.url)
    hinp = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    hinp.set_data_from_numpy(text)
    expected = h.infer("tokenizer", [hinp])
    for name in ("INPUT_IDS", "ATTENTION_MASK"):
        np.testing.assert_array_equal(r.as_numpy(name), expected.as_numpy(name))
    assert int(r.as_numpy("ATTENTION_MASK").sum()) > 0


def test_async_infer_with_callbacks(gclient):
    results: queue.Queue = queue.Queue()
    n = 24
    for i in range(n):
        a = np.full((1, 16), i, dtype=np.int32)
        b = np.ones((1, 16), dtype=np.int32)
        gclient.async_infer("simple", simple_inputs(a, b), partial(lambda i, result, error: results.put((i, result, error)), i), request_id=str(i))
    seen = set()
    for _ in range(n):
        i, r, e = results.get(timeout=30)
        assert e is None, e
        assert r.get_response().id == str(i)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 16), i + 1))
        seen.add(i)
    assert seen == set(range(n))


def test_aio_client(server):
    async def main():
        async with grpcaio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as c:
            assert await c.is_server_ready()
            meta = await c.get_model_metadata("simple", as_json=True)
            assert meta["name"] == "simple"
            a, b = ab(2)
            inputs = [grpcaio.InferInput("INPUT0", [2, 16], "INT32"), grpcaio.InferInput("INPUT1", [2, 16], "INT32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            results = await asyncio.gather(*(c.infer("simple", inputs, request_id=str(i)) for i in range(8)))
            for i, r in enumerate(results):
                assert r.get_response().id == str(i)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
            with pytest.raises(InferenceServerException) as info:
                await c.infer("no_such_model", inputs)
            assert info.value.status() == "StatusCode.NOT_FOUND"

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------------

class Stream:
    """A started tritonclient stream whose callback results land in a queue."""

    def __init__(self, port: int):
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        self.results: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def next(self, timeout: float = 30):
        return self.results.get(timeout=timeout)

    def assert_quiet(self) -> None:
        """Nothing more arrives once the server has answered a later probe request."""
        a, b = ab()
        self.client.async_stream_infer("simple", simple_inputs(a, b), request_id="probe")
        result, error = self.next()
        assert error is None and result.get_response().id == "probe", (result, error)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(server):
    wait_model_ready(server, "repeat", deadline=60)
    s = Stream(server.grpc_port)
    yield s
    s.close()


def repeat_input(values):
    inp = grpcclient.InferInput("IN", [len(values)], "INT32")
    inp.set_data_from_numpy(np.array(values, dtype=np.int32))
    return [inp]


def final_flag(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def test_stream_decoupled_repeat(stream):
    values = [7, -1, 42, 5]
    stream.client.async_stream_infer("repeat", repeat_input(values), request_id="rep")
    got = []
    for _ in values:
        result, error = stream.next()
        assert error is None, error
        assert result.get_response().id == "rep"
        assert final_flag(result) is False
        got.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0])))
    assert got == [(v, i) for i, v in enumerate(values)]
    # repeat ends with the final flag alone: nothing is sent for it unless asked.
    stream.assert_quiet()


def test_stream_empty_final_response_when_asked(stream):
    stream.client.async_stream_infer("repeat", repeat_input([1, 2]), request_id="e", enable_empty_final_response=True)
    flags = []
    for _ in range(3):
        result, error = stream.next()
        assert error is None, error
        flags.append(final_flag(result))
    assert flags == [False, False, True]
    last = result.get_response()
    assert last.id == "e" and len(last.outputs) == 0
    stream.assert_quiet()


def test_stream_errors_stay_in_stream(stream):
    a, b = ab()
    stream.client.async_stream_infer("no_such_model", simple_inputs(a, b), request_id="bad-model")
    result, error = stream.next()
    assert result is None and "Request for unknown model: 'no_such_model' is not found" in str(error)
    bad = [grpcclient.InferInput("INPUT0", [1, 15], "INT32"), grpcclient.InferInput("INPUT1", [1, 15], "INT32")]
    for t in bad:
        t.set_data_from_numpy(np.zeros((1, 15), dtype=np.int32))
    stream.client.async_stream_infer("simple", bad, request_id="bad-shape")
    result, error = stream.next()
    assert result is None and "[request id: bad-shape]" in str(error), error
    # The same stream still serves, and non-decoupled responses are final.
    stream.client.async_stream_infer("simple", simple_inputs(a, b), request_id="good")
    result, error = stream.next()
    assert error is None and final_flag(result) is True
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_stream_interleaves_requests(stream):
    stream.client.async_stream_infer("repeat", repeat_input(list(range(10))), request_id="long")
    a, b = ab()
    for i in range(5):
        stream.client.async_stream_infer("simple", simple_inputs(a, b), request_id=f"s{i}")
    by_id: dict[str, list] = {}
    for _ in range(15):
        result, error = stream.next()
        assert error is None, error
        by_id.setdefault(result.get_response().id, []).append(result)
    assert len(by_id["long"]) == 10
    assert [int(r.as_numpy("IDX")[0]) for r in by_id["long"]] == list(range(10)), "one request's responses stay in order"
    assert all(len(by_id[f"s{i}"]) == 1 for i in range(5))


def test_aio_stream_decoupled(server):
    """The aio client's stream_infer: requests from an async iterator, then the stream closes
    once every response has been received (the client half-closes, the server finishes)."""
    wait_model_ready(server, "repeat", deadline=60)

    async def main():
        async with grpcaio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as c:
            async def requests():
                for n in (3, 1, 2):
                    inp = grpcaio.InferInput("IN", [n], "INT32")
                    inp.set_data_from_numpy(np.arange(n, dtype=np.int32) + 10 * n)
                    yield {"model_name": "repeat", "inputs": [inp], "request_id": f"n{n}"}

            got: dict[str, list] = {}
            async for result, error in c.stream_infer(requests(), stream_timeout=30):
                assert error is None, error
                response = result.get_response()
                values = [] if not response.outputs else [int(result.as_numpy("OUT")[0])]
                got.setdefault(response.id, []).append((values, final_flag(result)))
            return got

    got = asyncio.run(main())
    # (the aio client cannot ask for empty final responses, so none are sent)
    assert got == {
        "n3": [([30], False), ([31], False), ([32], False)],
        "n1": [([10], False)],
        "n2": [([20], False), ([21], False)],
    }


def test_modelinfer_on_decoupled_model_is_unimplemented(gclient, server):
    wait_model_ready(server, "repeat", deadline=60)
    err = grpc_error(gclient.infer, "repeat", repeat_input([1]))
    assert err.status() == "StatusCode.UNIMPLEMENTED"
    assert "doesn't support models with decoupled transaction policy" in err.message()


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def test_error_codes(gclient):
    a, b = ab()
    err = grpc_error(gclient.infer, "no_such_model", simple_inputs(a, b))
    assert err.status() == "StatusCode.NOT_FOUND"
    err = grpc_error(gclient.infer, "simple", simple_inputs(a, b), model_version="7")
    assert err.status() == "StatusCode.NOT_FOUND" and "version 7 is not found" in err.message()
    wrong = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    for t in wrong:
        t.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    err = grpc_error(gclient.infer, "simple", wrong, request_id="dt")
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "[request id: dt]" in err.message() and "INT32" in err.message(), err.message()
    err = grpc_error(gclient.infer, "simple", simple_inputs(*ab(9)))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "batch" in err.message()
    only_one = simple_inputs(a, b)[:1]
    err = grpc_error(gclient.infer, "simple", only_one)
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "INPUT1" in err.message()
    assert_simple_works(gclient)


def test_raw_input_contents_mismatch(server, gclient):
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="simple")
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    request.raw_input_contents.append(np.zeros(16, dtype=np.int32).tobytes())
    with pytest.raises(grpc.RpcError) as info:
        raw_call(server.grpc_port, "/inference.GRPCInferenceService/ModelInfer", request.SerializeToString())
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unable to find data for input tensor 'INPUT1' for model 'simple'" in info.value.details()
    # tritonclient refuses reserved parameters itself; a hand-made request reaches the server.
    request.raw_input_contents.append(np.zeros(16, dtype=np.int32).tobytes())
    request.parameters["triton_x"].int64_param = 1
    with pytest.raises(grpc.RpcError) as info:
        raw_call(server.grpc_port, "/inference.GRPCInferenceService/ModelInfer", request.SerializeToString())
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reserved for Triton usage" in info.value.details()
    assert_simple_works(gclient)


@pytest.mark.parametrize("payload", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x2a\x02\x0a"])
def test_malformed_protobuf(server, gclient, payload):
    with pytest.raises(grpc.RpcError) as info:
        raw_call(server.grpc_port, "/inference.GRPCInferenceService/ModelInfer", payload)
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert "decode" in info.value.details().lower(), info.value.details()
    assert_simple_works(gclient)


def test_unknown_rpc_is_unimplemented(server, gclient):
    with pytest.raises(grpc.RpcError) as info:
        raw_call(server.grpc_port, "/inference.GRPCInferenceService/NoSuchRpc", b"")
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert_simple_works(gclient)


def test_oversize_message_is_rejected(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--grpc-max-message-size=2048"])
    wait_model_ready(srv, "simple")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    big = np.zeros((8, 16), dtype=np.int32)  # 2 x 512 bytes of tensors plus framing: fits
    r = c.infer("simple", simple_inputs(big, big))
    assert r.as_numpy("OUTPUT0").shape == (8, 16)
    inp = grpcclient.InferInput("IN", [1024], "INT32")
    inp.set_data_from_numpy(np.zeros(1024, dtype=np.int32))  # 4 KiB
    err = grpc_error(c.infer, "simple", [inp])
    # gRPC C++ (Triton) says RESOURCE_EXHAUSTED; tonic says OUT_OF_RANGE. Both name the limit.
    assert err.status() in ("StatusCode.OUT_OF_RANGE", "StatusCode.RESOURCE_EXHAUSTED"), err
    assert "2048" in err.message(), err.message()
    assert_simple_works(c)
    c.close()


@pytest.mark.parametrize("level", ["none", "low", "high"])
def test_gzip_and_deflate_requests_and_responses(server_factory, tmp_path, level):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, [f"--grpc-infer-response-compression-level={level}"])
    wait_model_ready(srv, "simple")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    a, b = ab(4)
    for algorithm in ("gzip", "deflate"):
        # A server without the algorithm answers UNIMPLEMENTED "Content is compressed with `deflate`...".
        r = c.infer("simple", simple_inputs(a, b), compression_algorithm=algorithm)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    # The bidirectional stream compresses each message the same way.
    results = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put((result, error)), compression_algorithm="deflate")
    c.async_stream_infer("simple", simple_inputs(a, b))
    result, error = results.get(timeout=30)
    assert error is None, error
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    c.stop_stream()
    c.close()


def test_keepalive_options(server):
    opts = grpcclient.KeepAliveOptions(keepalive_time_ms=1000, keepalive_timeout_ms=500, keepalive_permit_without_calls=True)
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}", keepalive_options=opts)
    assert_simple_works(c)
    c.close()


# ---------------------------------------------------------------------------------------------
# Statistics, repository, trace and log settings
# ---------------------------------------------------------------------------------------------

def test_statistics_count_grpc_work(gclient):
    def success():
        stats = gclient.get_inference_statistics("simple", as_json=True)["model_stats"][0]
        return int(stats["inference_stats"]["success"].get("count", 0)), int(stats.get("inference_count", 0))

    before_ok, before_n = success()
    for _ in range(3):
        assert_simple_works(gclient)
    after_ok, after_n = success()
    assert after_ok - before_ok >= 3 and after_n - before_n >= 3
    every = gclient.get_inference_statistics(as_json=True)["model_stats"]
    assert {"simple", "add_sub"} <= {s["name"] for s in every}
    err = grpc_error(gclient.get_inference_statistics, "no_such_model")
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "requested model 'no_such_model' is not available" in err.message()


def test_repository_control_over_grpc(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    copy_model(repo, "add_sub")
    srv = server_factory(repo, ["--model-control-mode=explicit", "--load-model=simple"])
    wait_model_ready(srv, "simple")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    index = {m["name"]: m for m in c.get_model_repository_index(as_json=True)["models"]}
    assert index["simple"]["state"] == "READY" and "state" not in index["add_sub"]
    assert not c.is_model_ready("add_sub")
    c.load_model("add_sub")
    assert c.is_model_ready("add_sub")
    config = c.get_model_config("add_sub", as_json=True)["config"]
    config["max_batch_size"] = 2
    c.load_model("add_sub", config=json.dumps(config))
    assert c.get_model_config("add_sub").config.max_batch_size == 2
    c.unload_model("simple")
    wait_model_not_ready(srv, "simple")
    assert not c.is_model_ready("simple")
    ready = [m["name"] for m in c.get_model_repository_index(as_json=True)["models"] if m.get("state") == "READY"]
    assert ready == ["add_sub"]
    err = grpc_error(c.load_model, "no_such_model")
    assert "no_such_model" in err.message()
    # A file override needs a config (Triton answers only that polling failed).
    err = grpc_error(c.load_model, "add_sub", files={"file:1/model.onnx": b"x"})
    assert err.status() == "StatusCode.INTERNAL"
    assert err.message() == "failed to load 'add_sub', failed to poll from model repository"
    c.close()


def test_repository_control_refused_outside_explicit_mode(gclient):
    err = grpc_error(gclient.unload_model, "simple")
    assert err.status() == "StatusCode.UNAVAILABLE" and "polling is enabled" in err.message()
    assert gclient.is_model_ready("simple")


def test_trace_and_log_settings(gclient):
    trace = gclient.get_trace_settings(as_json=True)["settings"]
    assert trace["trace_level"]["value"] == ["OFF"] and trace["trace_rate"]["value"] == ["1000"]
    updated = gclient.update_trace_settings(settings={"trace_rate": "50"}, as_json=True)["settings"]
    assert updated["trace_rate"]["value"] == ["50"]
    gclient.update_trace_settings(settings={"trace_rate": None})
    assert gclient.get_trace_settings(as_json=True)["settings"]["trace_rate"]["value"] == ["1000"]
    err = grpc_error(gclient.update_trace_settings, settings={"trace_rate": "abc"})
    assert "Unable to parse 'trace_rate', got: abc" in err.message()
    err = grpc_error(gclient.update_trace_settings, settings={"trace_level": ["TIMESTAMPS"]})
    assert "trace file name is not given" in err.message()
    err = grpc_error(gclient.get_trace_settings, model_name="no_such_model")
    assert "Request for unknown model : no_such_model" in err.message()

    log = gclient.get_log_settings(as_json=True)["settings"]
    assert log["log_info"]["bool_param"] is True and log["log_format"]["string_param"] == "default"
    updated = gclient.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
    assert updated["log_verbose_level"]["uint32_param"] == 1
    gclient.update_log_settings({"log_verbose_level": 0})
    err = grpc_error(gclient.update_log_settings, {"log_format": "xml"})
    assert "invalid argument for log_format, got: xml" in err.message()
    err = grpc_error(gclient.update_log_settings, {"log_file": "/tmp/x.log"})
    assert err.status() == "StatusCode.UNIMPLEMENTED"
    assert_simple_works(gclient)


def test_cuda_shared_memory_without_gpu(gclient):
    assert len(gclient.get_cuda_shared_memory_status().regions) == 0
    gclient.unregister_cuda_shared_memory()
    gclient.unregister_cuda_shared_memory("anything")
    err = grpc_error(gclient.register_cuda_shared_memory, "gpu0", base64.b64encode(b"\0" * 64), 0, 1024)
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert err.message().startswith("failed to register shared memory region: invalid args")
