"""The sequence batcher through tritonclient: Triton's simple_sequence accumulator (an ONNX model
whose state the server carries) over HTTP and gRPC (unary and streaming), interleaved sequences,
uint64 and string correlation ids, CORRID/END control inputs, idle sequences released, errors."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, quickstart_repo, wait_model_ready, write_atomic

pytestmark = pytest.mark.timeout(120)


def seq_input(mod, value: int):
    i = mod.InferInput("INPUT", [1, 1], "INT32")
    i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [i]


def expected_sums(steps):
    """steps: (sequence id, value, start) -> the running sum each step should return."""
    acc, out = {}, []
    for seq, value, start in steps:
        acc[seq] = value if start else acc[seq] + value
        out.append(acc[seq])
    return out


INTERLEAVED = [(1000, 0, True), (1001, 100, True), (1000, 1, False), (1001, -1, False), (1000, 2, False),
               (1001, -2, False), (1000, 3, False), (1001, -3, False)]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_interleaved_sequences_accumulate(server, proto):
    wait_model_ready(server, "simple_sequence")
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(server.url if proto == "http" else f"127.0.0.1:{server.grpc_port}")
    base = 5000 if proto == "http" else 6000  # distinct ids per test on the shared server
    got = []
    for i, (seq, value, start) in enumerate(INTERLEAVED):
        end = i >= len(INTERLEAVED) - 2
        r = c.infer("simple_sequence", seq_input(mod, value), sequence_id=base + seq, sequence_start=start, sequence_end=end)
        got.append(int(r.as_numpy("OUTPUT")[0][0]))
    assert got == expected_sums(INTERLEAVED)
    # Both sequences ended: a request without START is refused.
    with pytest.raises(InferenceServerException) as info:
        c.infer("simple_sequence", seq_input(mod, 1), sequence_id=base + 1000)
    assert "must specify the START flag on the first request of the sequence" in info.value.message()
    c.close()


def test_string_correlation_ids_and_restart(server):
    wait_model_ready(server, "simple_sequence")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    def send(seq, value, start=False, end=False):
        r = c.infer("simple_sequence", seq_input(grpcclient, value), sequence_id=seq, sequence_start=start, sequence_end=end)
        return int(r.as_numpy("OUTPUT")[0][0])

    assert [send("user-a", 4, start=True), send("user-b", 10, start=True), send("user-a", 4), send("user-b", 1)] == [4, 10, 8, 11]
    assert send("user-a", 7, start=True) == 7, "a new START resets the state"
    assert send("user-a", 1, end=True) == 8
    assert send("user-b", 1, end=True) == 12
    c.close()


def stream_steps(server, steps, timeout: float) -> dict[str, int]:
    """Sends `steps` ((request id, value, sequence id, start, end)) in order on one gRPC stream of
    simple_sequence; the OUTPUT answered to each, by request id."""
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    results: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for rid, value, seq, start, end in steps:
            c.async_stream_infer("simple_sequence", seq_input(grpcclient, value), request_id=rid,
                                 sequence_id=seq, sequence_start=start, sequence_end=end)
        got = {}
        for _ in steps:
            result, error = results.get(timeout=timeout)
            assert error is None, error
            got[result.get_response().id] = int(result.as_numpy("OUTPUT")[0][0])
        return got
    finally:
        c.stop_stream()
        c.close()


def test_streaming_sequences_like_tritons_example(server):
    """simple_grpc_sequence_stream_infer_client.py: two sequences interleaved on one stream."""
    wait_model_ready(server, "simple_sequence")
    values = [11, 7, 5, 3, 2, 0, 1]
    ids = (7000, 7001)
    got = stream_steps(server, [(f"{seq}_{i}", sign * v, seq, i == 0, i == len(values) - 1)
                                for i, v in enumerate(values) for seq, sign in zip(ids, (1, -1))], timeout=30)
    for seq, sign in zip(ids, (1, -1)):
        running = np.cumsum([sign * v for v in values]).tolist()
        assert [got[f"{seq}_{i}"] for i in range(len(values))] == running


def test_many_concurrent_sequences(server):
    """32 sequences at once (more than the 8 direct slots): every sequence sums correctly."""
    wait_model_ready(server, "simple_sequence")
    n, steps = 32, 4
    got = stream_steps(server, [(f"{s}_{step}", s + step, 8000 + s, step == 0, step == steps - 1)
                                for step in range(steps) for s in range(n)], timeout=60)
    for s in range(n):
        assert [got[f"{s}_{k}"] for k in range(steps)] == np.cumsum([s + k for k in range(steps)]).tolist()


def test_sequence_errors(server):
    wait_model_ready(server, "simple_sequence")
    c = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as info:
        c.infer("simple_sequence", seq_input(httpclient, 1))
    assert "must specify a non-zero or non-empty correlation ID" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        c.infer("simple_sequence", seq_input(httpclient, 1), sequence_id=424242)
    assert "must specify the START flag" in info.value.message()
    two = httpclient.InferInput("INPUT", [2, 1], "INT32")
    two.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        c.infer("simple_sequence", [two], sequence_id=424243, sequence_start=True)
    assert info.value.message() == ("inference request to model 'simple_sequence' must specify batch-size 1 due "
                                    "to requirements of sequence batcher")
    # A string correlation id appears unquoted, as in Triton's message.
    with pytest.raises(InferenceServerException) as info:
        c.infer("simple_sequence", seq_input(httpclient, 1), sequence_id="abc")
    assert info.value.message() == ("inference request for sequence abc to model 'simple_sequence' must specify "
                                    "the START flag on the first request of the sequence")
    c.close()


def test_idle_sequences_are_released(server_factory, tmp_path):
    repo = tmp_path / "repo"
    config = (quickstart_repo() / "simple_sequence" / "config.pbtxt").read_text()
    config = config.replace("max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 200000")
    copy_model(repo, "simple_sequence", config=config)
    srv = server_factory(repo)
    wait_model_ready(srv, "simple_sequence")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    c.infer("simple_sequence", seq_input(grpcclient, 3), sequence_id=1, sequence_start=True)
    # A sequence that keeps sending within the idle limit stays alive...
    r = c.infer("simple_sequence", seq_input(grpcclient, 3), sequence_id=1)
    assert int(r.as_numpy("OUTPUT")[0][0]) == 6
    # ...one that goes quiet for longer is released with its state (the idle limit is what is tested).
    import time
    time.sleep(0.6)
    with pytest.raises(InferenceServerException) as info:
        c.infer("simple_sequence", seq_input(grpcclient, 3), sequence_id=1)
    assert "must specify the START flag" in info.value.message()
    c.close()


def corrid_model_onnx(elem_type) -> bytes:
    import onnx
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["CORRID"], ["ID"]), helper.make_node("Identity", ["END"], ["ENDED"])],
        "corrid_echo",
        [helper.make_tensor_value_info("CORRID", elem_type, ["batch", 1]),
         helper.make_tensor_value_info("END", onnx.TensorProto.BOOL, ["batch", 1]),
         helper.make_tensor_value_info("X", onnx.TensorProto.INT32, ["batch", 1])],
        [helper.make_tensor_value_info("ID", elem_type, ["batch", 1]),
         helper.make_tensor_value_info("ENDED", onnx.TensorProto.BOOL, ["batch", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


CORRID_CONFIG = '''name: "{name}"
backend: "onnxruntime"
max_batch_size: 4
sequence_batching {{
  control_input [
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {dtype} }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] }} ] }}
  ]
}}
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "ID" data_type: {dtype} dims: [ 1 ] }},
  {{ name: "ENDED" data_type: TYPE_BOOL dims: [ 1 ] }}
]
'''


def test_corrid_and_end_control_inputs(server_factory, tmp_path):
    import onnx

    repo = tmp_path / "repo"
    for name, dtype, elem in (("uint_ids", "TYPE_UINT64", onnx.TensorProto.UINT64), ("string_ids", "TYPE_STRING", onnx.TensorProto.STRING)):
        write_atomic(repo / name / "config.pbtxt", CORRID_CONFIG.format(name=name, dtype=dtype))
        write_atomic(repo / name / "1" / "model.onnx", corrid_model_onnx(elem))
    srv = server_factory(repo)
    wait_model_ready(srv, "uint_ids")
    wait_model_ready(srv, "string_ids")
    c = httpclient.InferenceServerClient(srv.url)

    def send(model, seq, start=False, end=False):
        x = httpclient.InferInput("X", [1, 1], "INT32")
        x.set_data_from_numpy(np.zeros((1, 1), dtype=np.int32))
        r = c.infer(model, [x], sequence_id=seq, sequence_start=start, sequence_end=end)
        return r.as_numpy("ID")[0][0], bool(r.as_numpy("ENDED")[0][0])

    big = 2**64 - 5  # above i64::MAX: travels as an unsigned JSON number
    assert send("uint_ids", big, start=True) == (big, False)
    assert send("uint_ids", big, end=True) == (big, True)
    ident, ended = send("string_ids", "corr-xyz", start=True, end=True)
    assert ident == b"corr-xyz" and ended
    with pytest.raises(InferenceServerException) as info:
        send("uint_ids", "not-a-number", start=True)
    assert "does not fit control input 'CORRID'" in info.value.message()
    c.close()
