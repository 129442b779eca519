"""Triton's in-process Python API (`import tritonserver`) on Tessera: `tessera.tritonserver`
runs the server inside this test process, with Triton's documented usage unchanged but for the
import. Network doors open only through `tessera.tritonfrontend`, checked with tritonclient."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

import tessera.tritonserver as tritonserver
from tessera.tritonfrontend import KServeGrpc, KServeHttp, Metrics
from tessera_testlib import copy_model, free_port, slow_identity_config, write_config_model, write_onnx_model

EXPLICIT = tritonserver.ModelControlMode.EXPLICIT


def listening_ports() -> set[int]:
    """TCP ports this process listens on (from /proc: sockets this process's descriptors hold)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    copy_model(repo, "add_sub")
    copy_model(repo, "repeat")
    copy_model(repo, "simple_sequence")
    write_onnx_model(repo, "strings", "TYPE_STRING", [-1, -1])
    write_config_model(repo, "slow", slow_identity_config("slow", 300))
    write_config_model(repo, "pause", slow_identity_config("pause", 30))
    return repo


@pytest.fixture
def server(repo):
    server = tritonserver.Server(model_repository=str(repo), model_control_mode=EXPLICIT, log_info=False)
    server.start(wait_until_ready=True, timeout=120)
    yield server
    if server._door is not None:
        server.stop()


def add_sub_inputs():
    return {"INPUT0": np.arange(16, dtype=np.float32).reshape(1, 16), "INPUT1": np.full((1, 16), 2, dtype=np.float32)}


def test_server_starts_in_process_with_no_port_open(repo):
    before = listening_ports()
    server = tritonserver.Server(tritonserver.Options(model_repository=[str(repo)], model_control_mode=EXPLICIT))
    assert server.start(wait_until_ready=True, timeout=120) is server, "start() returns the server, as Triton's"
    try:
        assert server.live() and server.ready()
        assert listening_ports() == before, "Triton's in-process server opens no port; frontends do"
        assert server.metadata()["name"] == "triton", "Options.server_id defaults to Triton's"
        assert "binary_tensor_data" in server.metadata()["extensions"]
        with pytest.raises(tritonserver.InvalidArgumentError, match="already started"):
            server.start()
    finally:
        server.stop()
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        server.ready()


def test_load_infer_unload_in_explicit_mode(server):
    model = server.model("add_sub")
    assert not model.ready(), "nothing loads at start in EXPLICIT mode"
    loaded = server.load("add_sub")
    assert loaded.name == "add_sub" and loaded.ready()
    assert ("add_sub", 1) in server.models(), "models() is keyed by (name, version)"
    assert server.models()[("add_sub", 1)].state == "READY"
    assert "add_sub" in {name for name, _ in server.models(exclude_not_ready=True)}
    responses = list(loaded.infer(inputs=add_sub_inputs()))
    assert len(responses) == 1 and responses[0].final and responses[0].error is None
    outputs = responses[0].outputs
    np.testing.assert_array_equal(outputs["OUTPUT0"].to_numpy(), [np.arange(16) + 2])
    np.testing.assert_array_equal(np.from_dlpack(outputs["OUTPUT1"]), [np.arange(16) - 2])
    assert outputs["OUTPUT0"].data_type == tritonserver.DataType.FP32
    assert list(outputs["OUTPUT0"].shape) == [1, 16]
    assert responses[0].model.version == 1
    server.unload("add_sub", wait_until_unloaded=True)
    assert not model.ready()
    with pytest.raises(tritonserver.TritonError, match="add_sub"):
        model.infer(inputs=add_sub_inputs())


def test_metadata_config_statistics_and_metrics(server):
    model = server.load("add_sub")
    meta = model.metadata()
    assert meta["name"] == "add_sub" and meta["versions"] == ["1"]
    assert [i["name"] for i in meta["inputs"]] == ["INPUT0", "INPUT1"]
    assert model.config()["name"] == "add_sub"
    assert model.batch_properties() == tritonserver.ModelBatchFlag.FIRST_DIM
    assert model.transaction_properties() == tritonserver.ModelTxnPropertyFlag.ONE_TO_ONE
    for _ in range(3):
        list(model.infer(inputs=add_sub_inputs()))
    stats = model.statistics()["model_stats"][0]
    assert stats["name"] == "add_sub" and stats["inference_stats"]["success"]["count"] == 3
    text = server.metrics()
    assert 'nv_inference_request_success{model="add_sub",version="1"} 3' in text
    with pytest.raises(tritonserver.InvalidArgumentError, match="not available"):
        server.model("repeat").statistics()


def test_triton_errors_for_bad_requests(server):
    model = server.load("add_sub")
    with pytest.raises(tritonserver.InvalidArgumentError, match="INPUT1"):
        list(model.infer(inputs={"INPUT0": np.zeros((1, 16), dtype=np.float32)}))
    with pytest.raises(tritonserver.InvalidArgumentError, match="FP64"):
        list(model.infer(inputs={"INPUT0": np.zeros((1, 16)), "INPUT1": np.zeros((1, 16))}))
    responses = list(model.infer(inputs={"INPUT0": np.zeros((1, 16))}, raise_on_error=False))
    assert len(responses) == 1 and responses[0].final and not responses[0].outputs
    assert isinstance(responses[0].error, tritonserver.InvalidArgumentError), "raise_on_error=False returns it"
    with pytest.raises(tritonserver.InvalidArgumentError, match="Unsupported Value"):
        model.infer(inputs=add_sub_inputs(), parameters={"p": None})
    with pytest.raises(tritonserver.InvalidArgumentError, match="not supported"):
        model.infer(inputs={"INPUT0": object()})
    with pytest.raises(tritonserver.NotFoundError, match="nope"):
        server.model("nope").infer(inputs=add_sub_inputs())
    with pytest.raises(tritonserver.NotFoundError, match="nope"):
        server.model("nope").async_infer(inputs=add_sub_inputs())  # at submission, as Triton
    with pytest.raises(tritonserver.InternalError, match="nope"):
        server.load("nope")
    # The server goes on serving.
    assert list(model.infer(inputs=add_sub_inputs()))[0].outputs["OUTPUT0"].to_numpy()[0, 0] == 2


def test_requests_built_as_triton_builds_them(server):
    model = server.load("add_sub")
    request = model.create_request(request_id="r-1", inputs=add_sub_inputs(), parameters={"p": 1.5})
    assert isinstance(request, tritonserver.InferenceRequest) and request.model is model
    response = next(model.infer(request))
    assert response.request_id == "r-1" and response.error is None
    sequence = server.load("simple_sequence")
    start, end = tritonserver.RequestFlag.SEQUENCE_START, tritonserver.RequestFlag.SEQUENCE_END
    totals = []
    for value, flags in ((3, start), (4, 0), (5, end)):
        request = tritonserver.InferenceRequest(model=sequence, correlation_id=42, flags=flags,
                                                inputs={"INPUT": np.array([[value]], dtype=np.int32)})
        totals.append(int(next(sequence.infer(request)).outputs["OUTPUT"].to_numpy()[0, 0]))
    assert totals == [3, 7, 12], "correlation_id and the sequence flags reach the sequence batcher"
    config = model.config()
    config["max_batch_size"] = 4
    server.load("add_sub", {"config": json.dumps(config)})
    assert server.model("add_sub").config()["max_batch_size"] == 4, "load() takes Triton's config override"


class DLPackOnly:
    """A DLPack producer that is not a numpy array (as a torch or cupy tensor would be)."""

    def __init__(self, array, device=(1, 0)):
        self._array, self._device = array, device

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device


def test_inputs_from_lists_tensors_and_dlpack(server):
    model = server.load("add_sub")
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = {"INPUT0": tritonserver.Tensor.from_dlpack(x), "INPUT1": DLPackOnly(x)}
    out = list(model.infer(inputs=inputs))[0].outputs
    np.testing.assert_array_equal(np.from_dlpack(out["OUTPUT0"]), x * 2)
    with pytest.raises(tritonserver.InvalidArgumentError, match="'FP64', but model 'add_sub' expects 'FP32'"):
        list(model.infer(inputs={"INPUT0": x.tolist(), "INPUT1": x}))  # a list of floats is FP64, as in Triton
    with pytest.raises(tritonserver.UnsupportedError, match="host memory only"):
        model.infer(inputs={"INPUT0": DLPackOnly(x, device=(2, 0)), "INPUT1": x})
    strings = server.load("strings")
    words = [["hello", "wörld"], ["a\x00b", ""]]
    out = list(strings.infer(inputs={"TEXT": words}))[0].outputs["ECHO"]
    assert out.data_type == tritonserver.DataType.BYTES
    assert out.to_string_array().tolist() == words, "BYTES round trip, NUL and UTF-8 kept"
    assert out.to_bytes_array()[0][1] == "wörld".encode()
    with pytest.raises(tritonserver.InvalidArgumentError, match="BYTES"):
        out.__dlpack__()


def test_decoupled_model_streams_and_can_be_cancelled(server):
    repeat = server.load("repeat")
    assert repeat.transaction_properties() == tritonserver.ModelTxnPropertyFlag.DECOUPLED
    consumed = repeat.infer(inputs={"IN": np.array([5, 6, 7], dtype=np.int32)})
    responses = list(consumed)
    values = [int(r.outputs["OUT"].to_numpy()[0]) for r in responses if r.outputs]
    assert values == [5, 6, 7]
    assert responses[-1].final and sum(r.final for r in responses) == 1
    # More responses than the server buffers: the model waits for a reader, so the stream stays
    # in flight until cancelled.
    iterator = repeat.infer(inputs={"IN": np.arange(5000, dtype=np.int32)})
    first = next(iterator)
    assert int(first.outputs["OUT"].to_numpy()[0]) == 0
    iterator.cancel()
    with pytest.raises(tritonserver.UnknownError, match="cancelled"):
        list(iterator)
    # Both iterators are still referenced: neither request may hold the server's stop.
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 10, "stop() waited for a request that should have left (exit timeout 30 s)"
    assert consumed is not None and iterator is not None


def test_async_cancel_stops_the_model(server):
    repeat = server.load("repeat")

    async def run():
        iterator = repeat.async_infer(inputs={"IN": np.arange(5000, dtype=np.int32)})
        first = await iterator.__anext__()
        iterator.cancel()
        with pytest.raises(tritonserver.UnknownError, match="cancelled"):
            async for _ in iterator:
                pass
        return int(first.outputs["OUT"].to_numpy()[0])

    assert asyncio.run(run()) == 0
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 10, "the cancelled request was still in flight"


def thread_count() -> int:
    """Threads of this process, native ones included."""
    return len(os.listdir("/proc/self/task"))


def test_async_infer_overlaps_requests_without_a_thread_each(server):
    model = server.load("pause")
    n = 32
    list(model.infer(inputs={"INPUT0": np.array([0], dtype=np.int32)}))  # the server's threads exist

    async def run():
        threads_before = thread_count()
        iterators = [model.async_infer(inputs={"INPUT0": np.array([i], dtype=np.int32)}) for i in range(n)]
        # One instance, 30 ms per execution: all of them are in flight now.
        assert thread_count() <= threads_before + 4, "no thread per request"

        async def first(iterator):
            async for response in iterator:
                return int(response.outputs["OUTPUT0"].to_numpy()[0])

        return await asyncio.gather(*(first(it) for it in iterators))

    started = time.monotonic()
    assert asyncio.run(run()) == list(range(n))
    assert time.monotonic() - started >= n * 0.03, "the executions ran one after another, all of them"


def test_async_decoupled_and_response_queue(server):
    repeat = server.load("repeat")

    async def collect():
        responses_queue: asyncio.Queue = asyncio.Queue()
        iterator = repeat.async_infer(inputs={"IN": np.array([1, 2], dtype=np.int32)},
                                      response_queue=responses_queue)
        seen = [r async for r in iterator]
        queued = [responses_queue.get_nowait() for _ in range(responses_queue.qsize())]
        return seen, queued

    seen, queued = asyncio.run(collect())
    assert [int(r.outputs["OUT"].to_numpy()[0]) for r in seen if r.outputs] == [1, 2]
    assert len(queued) == len(seen) and queued[-1].final
    sync_queue: queue.SimpleQueue = queue.SimpleQueue()
    repeat.infer(inputs={"IN": np.array([9], dtype=np.int32)}, response_queue=sync_queue)
    first = sync_queue.get(timeout=30)
    assert int(first.outputs["OUT"].to_numpy()[0]) == 9, "the queue fills without iterating, as Triton's"


def test_the_gil_is_released_while_the_server_works(server):
    model = server.load("slow")
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        started = time.monotonic()
        list(model.infer(inputs={"INPUT0": np.array([1], dtype=np.int32)}))
        ended = time.monotonic()
    finally:
        stop.set()
        ticker.join()
    during = [t for t in ticks if started < t < ended]
    assert ended - started >= 0.3
    assert len(during) >= 20, f"another Python thread ran only {len(during)} times during a 300 ms inference"


def test_options_tessera_cannot_apply_are_refused_by_name(repo):
    with pytest.raises(tritonserver.UnsupportedError, match="Options.log_file"):
        tritonserver.Server(model_repository=str(repo), log_file="/tmp/x.log").start()
    with pytest.raises(tritonserver.UnsupportedError, match="Options.model_namespacing"):
        tritonserver.Server(model_repository=str(repo), model_namespacing=True).start()
    with pytest.raises(tritonserver.InvalidArgumentError, match="model_repository"):
        tritonserver.Server().start()
    with pytest.raises(TypeError):
        tritonserver.Server(no_such_option=1)
    with pytest.raises(tritonserver.UnsupportedError, match="Metric"):
        tritonserver.MetricFamily(tritonserver.MetricKind.COUNTER, "m", "d")


def test_startup_models_and_none_mode_load_at_start(repo):
    server = tritonserver.Server(model_repository=str(repo), model_control_mode=EXPLICIT,
                                 startup_models=["add_sub"]).start(wait_until_ready=True, timeout=120)
    try:
        assert server.model("add_sub").ready() and not server.model("repeat").ready()
    finally:
        server.stop()
    server = tritonserver.Server(model_repository=str(repo)).start(wait_until_ready=True, timeout=120)
    try:
        assert server.model("repeat").ready(), "NONE mode loads the whole repository"
        with pytest.raises(tritonserver.UnavailableError, match="explicit model load"):
            server.load("add_sub")
    finally:
        server.stop()


def test_frontends_start_and_stop_doors_on_demand(server):
    server.load("add_sub")
    http = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=free_port()))
    with pytest.raises(tritonserver.UnsupportedError, match="header_forward_pattern"):
        KServeHttp(server, KServeHttp.Options(header_forward_pattern="x-.*"))
    with pytest.raises(tritonserver.InvalidArgumentError, match="options"):
        KServeHttp(server, KServeGrpc.Options())
    http.start()
    with pytest.raises(tritonserver.AlreadyExistsError):
        http.start()
    port = http.port
    assert port in listening_ports()
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    x = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    y = httpclient.InferInput("INPUT1", [1, 16], "FP32")
    x.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
    y.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    np.testing.assert_array_equal(client.infer("add_sub", [x, y]).as_numpy("OUTPUT0"), [np.arange(16) + 1])
    client.close()
    http.stop()
    assert port not in listening_ports(), "stop() closes that door"
    with pytest.raises(tritonserver.UnavailableError):
        http.stop()
    with KServeGrpc(server, KServeGrpc.Options(address="127.0.0.1", port=free_port())) as grpc, \
            Metrics(server, Metrics.Options(address="127.0.0.1", port=free_port())) as metrics:
        assert {grpc.port, metrics.port} <= listening_ports()
        import requests

        text = requests.get(f"http://127.0.0.1:{metrics.port}/metrics", timeout=30).text
        assert 'nv_inference_request_success{model="add_sub",version="1"} 1' in text


def test_requests_in_flight_at_stop_get_their_responses(server):
    model = server.load("slow")
    results: dict = {}

    def call(i: int) -> None:
        try:
            responses = list(model.infer(inputs={"INPUT0": np.array([i], dtype=np.int32)}))
            results[i] = int(responses[0].outputs["OUTPUT0"].to_numpy()[0])
        except tritonserver.TritonError as e:
            results[i] = e

    callers = [threading.Thread(target=call, args=(i,)) for i in (1, 2)]
    for caller in callers:
        caller.start()
    # One executes (300 ms), the other waits in the queue: both are in flight.
    pending = 'nv_inference_pending_request_count{model="slow",version="1"} 1'
    deadline = time.monotonic() + 60
    while pending not in server.metrics():
        assert time.monotonic() < deadline, "the second request never queued"
        time.sleep(0.005)
    server.stop()
    for caller in callers:
        caller.join(60)
    assert results == {1: 1, 2: 2}, "stop() lets requests in flight finish (exit_timeout), as Triton's"
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        model.infer(inputs={"INPUT0": np.array([3], dtype=np.int32)})
