"""Triton's utility backends, built in: identity, repeat and square (streams, pacing, interleaving,
cancellation, config checks with Triton's messages)."""

from __future__ import annotations

import json
import os
import queue
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tritonclient.utils import InferenceServerException

from tessera_testlib import REPEAT_CONFIG, wait_model_ready, write_config_model


SQUARE_CONFIG = """name: "{name}"
backend: "square"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{extra}"""

IDENTITY_CONFIG = """name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
        {{ name: "INPUT1" data_type: TYPE_STRING dims: [ 2 ] optional: true }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_STRING dims: [ 2 ] }} ]
dynamic_batching {{ }}
"""


@pytest.fixture
def utility_server(server_factory, repo):
    write_config_model(repo, "repeat_int32", REPEAT_CONFIG.format(name="repeat_int32"))
    write_config_model(repo, "square_int32", SQUARE_CONFIG.format(name="square_int32", extra=""))
    write_config_model(repo, "square_failing", SQUARE_CONFIG.format(
        name="square_failing", extra='parameters [ { key: "CUSTOM_FAIL_COUNT" value: { string_value: "1" } },\n'
                                      '{ key: "CUSTOM_EMPTY_COUNT" value: { string_value: "1" } } ]'))
    write_config_model(repo, "identity_fp32", IDENTITY_CONFIG.format(name="identity_fp32"))
    srv = server_factory(repo)
    for m in ("repeat_int32", "square_int32", "square_failing", "identity_fp32"):
        wait_model_ready(srv, m)
    return srv


class Stream:
    """A gRPC bidirectional stream with its responses in a queue."""

    def __init__(self, srv):
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
        self.responses: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.responses.put((result, error)))

    def until_final(self, timeout: float = 30) -> list:
        """Responses (result or error) up to the empty final one."""
        got = []
        while True:
            result, error = self.responses.get(timeout=timeout)
            if error is not None:
                got.append(error)
                continue
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param and not response.outputs:
                return got
            got.append(result)

    def square(self, model: str, n: int) -> list:
        """Asks a square model for `n` responses; what came, up to the empty final one."""
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([n], dtype=np.int32))
        self.client.async_stream_infer(model, [inp], enable_empty_final_response=True)
        return self.until_final()

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def repeat_inputs(values, delays, wait: int):
    tensors = []
    for name, data, dtype in (("IN", values, np.int32), ("DELAY", delays, np.uint32), ("WAIT", [wait], np.uint32)):
        t = grpcclient.InferInput(name, [len(data)], "INT32" if dtype is np.int32 else "UINT32")
        t.set_data_from_numpy(np.array(data, dtype=dtype))
        tensors.append(t)
    return tensors


def test_repeat_streams_each_element_then_the_final_flag(utility_server):
    s = Stream(utility_server)
    try:
        s.client.async_stream_infer("repeat_int32", repeat_inputs([10, 20, 30], [0, 50, 0], 0),
                                    request_id="r1", enable_empty_final_response=True)
        got = s.until_final()
        assert [(int(r.as_numpy("IDX")[0]), int(r.as_numpy("OUT")[0])) for r in got] == [(0, 10), (1, 20), (2, 30)]
        assert all(r.get_response().id == "r1" for r in got)
        # An empty IN: the final flag alone.
        s.client.async_stream_infer("repeat_int32", repeat_inputs([], [], 0), enable_empty_final_response=True)
        assert s.until_final() == []
    finally:
        s.close()


def test_repeat_paces_by_delay_and_interleaves_requests(utility_server):
    # Two requests on one instance: WAIT 0 frees it at once, so the second request's quick
    # responses arrive between the first request's slow ones.
    s = Stream(utility_server)
    try:
        s.client.async_stream_infer("repeat_int32", repeat_inputs([1, 2], [0, 400], 0), request_id="slow")
        s.client.async_stream_infer("repeat_int32", repeat_inputs([7], [0], 0), request_id="quick")
        order = []
        while len(order) < 3:
            result, error = s.responses.get(timeout=30)
            assert error is None, error
            order.append((result.get_response().id, int(result.as_numpy("OUT")[0])))
        assert order.index(("quick", 7)) < order.index(("slow", 2)), order
    finally:
        s.close()


def test_repeat_over_generate_stream_and_plain_infer_refused(utility_server):
    with requests.post(utility_server.http("/v2/models/repeat_int32/generate_stream"), timeout=30, stream=True,
                       json={"IN": [4, 5], "DELAY": [0, 0], "WAIT": [0]}) as r:
        assert r.status_code == 200, r.text
        events = [json.loads(line[5:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data:")]
    assert [(e["IDX"], e["OUT"]) for e in events] == [(0, 4), (1, 5)]
    c = httpclient.InferenceServerClient(f"127.0.0.1:{utility_server.http_port}")
    inp = httpclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    # Triton's answer, checked before the body is read (so also for a body in an unknown encoding).
    for headers in ({}, {"Content-Encoding": "br"}):
        r = requests.post(utility_server.http("/v2/models/repeat_int32/infer"), data=b"{}", headers=headers,
                          timeout=30)
        assert (r.status_code, r.json()) == (
            501, {"error": "HTTP end point doesn't support models with decoupled transaction policy"}), r.text
    with pytest.raises(InferenceServerException) as e:
        c.infer("repeat_int32", [inp])
    assert "decoupled" in str(e.value)
    # An unknown model is reported before an unsupported encoding, as Triton does.
    r = requests.post(utility_server.http("/v2/models/nope/infer"), data=b"{}", headers={"Content-Encoding": "br"},
                      timeout=30)
    assert r.status_code == 404, r.text


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_cancelling_a_repeat_stream_stops_its_work(utility_server):
    # Two million responses with no delay; the client takes 100 and cancels.
    s = Stream(utility_server)
    n = 2_000_000
    s.client.async_stream_infer("repeat_int32", repeat_inputs(list(range(n)), [0] * n, 0))
    for _ in range(100):
        result, error = s.responses.get(timeout=30)
        assert error is None, error
    pid = utility_server.process.pid
    at_cancel = cpu_seconds(pid)
    s.close(cancel=True)
    # Once the stream is gone the producer stops: the server goes (nearly) idle at once. Before
    # cancellation reached the producer, it ran on for about 2 s of CPU.
    deadline = time.monotonic() + 10
    while True:
        before = cpu_seconds(pid)
        time.sleep(0.25)
        used = cpu_seconds(pid) - before
        if used < 0.03:
            break
        assert time.monotonic() < deadline, f"server still busy ({used:.2f} s CPU per 0.25 s) after the cancel"
    after_cancel = cpu_seconds(pid) - at_cancel
    print(f"CPU after the cancel: {after_cancel:.2f} s")
    assert after_cancel < 0.5, f"the server used {after_cancel:.2f} s of CPU after the stream was cancelled"
    assert_square_works(utility_server)


def assert_square_works(srv) -> None:
    s = Stream(srv)
    try:
        assert [int(r.as_numpy("OUT")[0]) for r in s.square("square_int32", 3)] == [3, 3, 3]
    finally:
        s.close()


def test_square_sends_n_responses_and_honours_its_failure_parameters(utility_server):
    assert_square_works(utility_server)
    s = Stream(utility_server)
    try:
        got = s.square("square_failing", 4)
        # 4 responses: 2 succeed, 1 fails ("simulated failure"), 1 is never sent.
        assert [int(r.as_numpy("OUT")[0]) for r in got if not isinstance(r, InferenceServerException)] == [4, 4]
        errors = [r for r in got if isinstance(r, InferenceServerException)]
        assert len(errors) == 1 and "simulated failure" in str(errors[0]), got
        assert s.square("square_int32", 0) == []
    finally:
        s.close()


def test_identity_returns_inputs_and_zeros_for_an_absent_optional(utility_server):
    c = httpclient.InferenceServerClient(f"127.0.0.1:{utility_server.http_port}")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    inp0 = httpclient.InferInput("INPUT0", [2, 3], "FP32")
    inp0.set_data_from_numpy(x)
    words = np.array([[b"a\x00b", b""], [b"c", b"\xff"]], dtype=np.object_)
    inp1 = httpclient.InferInput("INPUT1", [2, 2], "BYTES")
    inp1.set_data_from_numpy(words)
    r = c.infer("identity_fp32", [inp0, inp1])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    assert r.as_numpy("OUTPUT1").tolist() == words.tolist()
    r = c.infer("identity_fp32", [inp0])  # INPUT1 is optional: OUTPUT1 is zeros (empty strings)
    assert r.as_numpy("OUTPUT1").tolist() == [[b"", b""], [b"", b""]]
    # Over gRPC too, with only OUTPUT0 asked for.
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{utility_server.grpc_port}")
    ginp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    ginp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    r = g.infer("identity_fp32", [ginp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
    assert r.as_numpy("OUTPUT1") is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.ones((1, 4), dtype=np.float32))


@pytest.mark.parametrize("name, text, message", [
    ("repeat_batching", REPEAT_CONFIG.replace("max_batch_size: 0", "max_batch_size: 4"),
     "repeat backend only supports models with max_batch_size == 0"),
    ("repeat_names", REPEAT_CONFIG.replace('"WAIT"', '"PAUSE"'), "expected third input tensor name to be WAIT, got PAUSE"),
    ("repeat_types", REPEAT_CONFIG.replace('"DELAY" data_type: TYPE_UINT32', '"DELAY" data_type: TYPE_INT32'),
     "expected DELAY datatype to be UINT32, got TYPE_INT32"),
    ("square_shape", SQUARE_CONFIG.replace('"IN" data_type: TYPE_INT32 dims: [ 1 ]', '"IN" data_type: TYPE_INT32 dims: [ 2 ]'),
     "expected IN shape to be [1], got [2]"),
    ("identity_pairs", IDENTITY_CONFIG.replace('name: "OUTPUT1"', 'name: "OUTPUT2"'),
     "expected input and output indices to match"),
    ("identity_types", IDENTITY_CONFIG.replace('"OUTPUT0" data_type: TYPE_FP32', '"OUTPUT0" data_type: TYPE_INT32'),
     "expected input and output datatype to match, got TYPE_FP32 and TYPE_INT32"),
])
def test_utility_configs_are_checked_with_tritons_messages(server_factory, repo, name, text, message):
    write_config_model(repo, name, text.format(name=name, extra=""))
    srv = server_factory(repo, ["--exit-on-error=false"])
    r = requests.post(srv.http("/v2/repository/index"), json={}, timeout=10)
    (entry,) = [e for e in r.json() if e["name"] == name]
    assert entry["state"] == "UNAVAILABLE" and message in entry["reason"], entry
