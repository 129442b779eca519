"""`async def execute` as Triton runs it (python_backend's README, "Async Execute"; src/pb_stub.cc,
`RunCoroutine`): a decoupled model's coroutines run concurrently on one instance while they await
(BLS, `asyncio.sleep`, an `asyncio.Event`), up to the model's `max_async_requests`; a model that
is not decoupled runs one coroutine to its end before the next. Real server, one instance per
model, tritonclient over gRPC streams and HTTP.

Overlap is shown without timing: a request that waits on an `asyncio.Event` only a later request
sets completes only if the two run at once on the one instance.
"""

from __future__ import annotations

import queue
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tessera_testlib import start_server

pytestmark = pytest.mark.timeout(900)

# Roles of the decoupled model's requests.
WAITER, SETTER, TRAPS, BARRIER = 0, 1, 2, 3
STARTED = 100  # the first response of every request
TIMED_OUT = -1

DECOUPLED_MODEL = '''
import asyncio
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Each request: a first response STARTED, then by ROLE
    0 waits up to ARG ms for KEY's event (0 if it was set, -1 if not);
    1 sets KEY's event; 2 traps the instance (os.abort) once the others are waiting;
    3 waits until ARG requests of KEY have arrived (-1 after 30 s);
    then COUNT more responses 1..COUNT, an asyncio.sleep apart, then the final flag. RUNNING in
    each response: how many requests the instance is running at that moment."""

    def initialize(self, args):
        self.events = {}
        self.arrived = {}
        self.running = 0

    async def execute(self, requests):
        for request in requests:
            await self.serve(request)
        return None

    async def serve(self, request):
        role, key, count, arg = [int(pb_utils.get_input_tensor_by_name(request, name).as_list()[0])
                                 for name in ("ROLE", "KEY", "COUNT", "ARG")]
        sender = request.get_response_sender()

        def send(value):
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", [value], "INT32"),
                                                    pb_utils.Tensor("RUNNING", [self.running], "INT32")]))

        self.running += 1
        try:
            event = self.events.setdefault(key, asyncio.Event())
            send(100)
            if role == 0:
                try:
                    await asyncio.wait_for(event.wait(), timeout=arg / 1000)
                    send(0)
                except asyncio.TimeoutError:
                    send(-1)
            elif role == 1:
                event.set()
                send(0)
            elif role == 2:
                await asyncio.sleep(0.05)
                os.abort()
            elif role == 3:
                self.arrived[key] = self.arrived.get(key, 0) + 1
                if self.arrived[key] >= arg:
                    event.set()
                try:
                    await asyncio.wait_for(event.wait(), timeout=30)
                    send(0)
                except asyncio.TimeoutError:
                    send(-1)
            for i in range(count):
                await asyncio.sleep(0.01)
                send(i + 1)
        finally:
            self.running -= 1
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

SERIAL_MODEL = '''
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Not decoupled: RUNNING is the most executions the instance ever ran at once."""

    def initialize(self, args):
        self.running = 0
        self.most = 0

    async def execute(self, requests):
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(0.05)
        finally:
            self.running -= 1
        return [pb_utils.InferenceResponse([pb_utils.Tensor("RUNNING", [self.most], "INT32")])
                for _ in requests]
'''

INPUTS = ", ".join('{ name: "%s" data_type: TYPE_INT32 dims: [ 1 ] }' % n for n in ("ROLE", "KEY", "COUNT", "ARG"))

DECOUPLED_CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
input [ {inputs} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }}, {{ name: "RUNNING" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{extra}
'''

SERIAL_CONFIG = '''
name: "serial"
backend: "python"
max_batch_size: 0
instance_group [ { count: 1 kind: KIND_CPU } ]
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "RUNNING" data_type: TYPE_INT32 dims: [ 1 ] } ]
'''

MODELS = ("overlap", "quota", "serial")


def param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'


def write_model(repo: Path, name: str, source: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(source))
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))


@pytest.fixture(scope="module")
def srv(tmp_path_factory, wasm_cache):
    repo = tmp_path_factory.mktemp("async-repo")
    write_model(repo, "overlap", DECOUPLED_MODEL,
                DECOUPLED_CONFIG.format(name="overlap", inputs=INPUTS, extra=param("max_execute_ms", "20000")))
    write_model(repo, "quota", DECOUPLED_MODEL,
                DECOUPLED_CONFIG.format(name="quota", inputs=INPUTS, extra=param("max_async_requests", "2")))
    write_model(repo, "serial", SERIAL_MODEL, SERIAL_CONFIG)
    server = start_server(tmp_path_factory.mktemp("async-logs"), [repo], ["--wasm-cache-dir", str(wasm_cache)],
                          name="async", ready=MODELS, ready_deadline=600)
    yield server
    server.stop_and_check()


class Stream:
    """One request on a gRPC stream of its own; its responses as (OUT, RUNNING) pairs, or an error
    string, in arrival order, until the final flag."""

    def __init__(self, srv, model: str, role: int, key: int, count: int = 0, arg: int = 0):
        self.got: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
        self.client.start_stream(callback=lambda result, error: self.got.put((result, error)))
        inputs = []
        for name, value in (("ROLE", role), ("KEY", key), ("COUNT", count), ("ARG", arg)):
            i = grpcclient.InferInput(name, [1], "INT32")
            i.set_data_from_numpy(np.array([value], dtype=np.int32))
            inputs.append(i)
        self.client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        self.responses: list = []
        self.ended = False

    def next(self, timeout: float = 60):
        """The next response (an (OUT, RUNNING) pair or an error string); None at the end."""
        result, error = self.got.get(timeout=timeout)
        if error is not None:
            self.responses.append(str(error))
            return self.responses[-1]
        response = result.get_response()
        if response.parameters["triton_final_response"].bool_param and not response.outputs:
            self.ended = True
            return None
        self.responses.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("RUNNING")[0])))
        return self.responses[-1]

    def rest(self, timeout: float = 60) -> list:
        """Every response until the final flag (or the first error)."""
        while not self.ended:
            item = self.next(timeout)
            if item is None or isinstance(item, str):
                break
        return self.responses

    def close(self):
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def streams():
    opened: list[Stream] = []

    def open_(*args, **kw) -> Stream:
        opened.append(Stream(*args, **kw))
        return opened[-1]

    yield open_
    for s in opened:
        s.close()


def test_a_request_waits_for_one_that_arrives_later_on_the_same_instance(srv, streams):
    # The waiter holds the model's only instance until its event is set; only a request running
    # beside it on that instance can set it.
    waiter = streams(srv, "overlap", WAITER, key=1, arg=60_000)
    assert waiter.next() == (STARTED, 1)
    setter = streams(srv, "overlap", SETTER, key=1)
    assert setter.rest() == [(STARTED, 2), (0, 2)], "it ran while the waiter waited"
    assert [v for v, _ in waiter.rest(timeout=30)] == [STARTED, 0]
    assert waiter.ended and setter.ended


def test_concurrent_requests_each_get_their_responses_in_order(srv, streams):
    # Eight streams, each waiting until all eight have arrived, then streaming 20 responses an
    # asyncio.sleep apart: they interleave on the instance, and each stays in order.
    peers = 8
    started = time.monotonic()
    opened = [streams(srv, "overlap", BARRIER, key=2, count=20, arg=peers) for _ in range(peers)]
    for s in opened:
        values = [v for v, _ in s.rest()]
        assert values == [STARTED, 0] + list(range(1, 21)), values
        assert s.ended
    assert max(running for s in opened for _, running in s.responses) == peers
    assert time.monotonic() - started >= 0.2, "asyncio.sleep waits its time (20 x 10 ms)"


def test_a_model_that_is_not_decoupled_runs_one_coroutine_at_a_time(srv):
    results: list = []

    def one():
        try:
            c = httpclient.InferenceServerClient(srv.url)
            i = httpclient.InferInput("X", [1], "INT32")
            i.set_data_from_numpy(np.array([0], dtype=np.int32))
            results.append(int(c.infer("serial", [i]).as_numpy("RUNNING")[0]))
        except Exception as e:  # noqa: BLE001  reported by the assertion below
            results.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [1] * 6, "as in Triton: the coroutine runs to its end before the next execute"


def test_past_its_quota_a_request_waits_for_room(srv, streams):
    # max_async_requests 2: two waiters fill the instance, so the setter cannot join them. The
    # first to time out (4 s) makes room; only then does the setter run (the other waiter may
    # then see its event set).
    waiters = [streams(srv, "quota", WAITER, key=3, arg=4000) for _ in range(2)]
    for w in waiters:
        assert w.next()[0] == STARTED
    setter = streams(srv, "quota", SETTER, key=3)
    outcomes = sorted(w.rest()[1][0] for w in waiters)
    assert outcomes[0] == TIMED_OUT, "the setter could not join both waiters"
    assert [v for v, _ in setter.rest()] == [STARTED, 0]
    running = [r for s in [*waiters, setter] for _, r in s.responses]
    assert max(running) == 2, running


def test_a_trap_fails_the_requests_in_flight_and_the_model_serves_on(srv, streams):
    waiters = [streams(srv, "overlap", WAITER, key=4, arg=60_000) for _ in range(2)]
    for w in waiters:
        assert w.next()[0] == STARTED
    trapper = streams(srv, "overlap", TRAPS, key=4)
    for s in [*waiters, trapper]:
        responses = s.rest(timeout=30)
        assert isinstance(responses[-1], str), responses
        assert "WebAssembly model 'overlap' execute trapped" in responses[-1], responses[-1]
    # The instance was rebuilt: the model serves the next requests, concurrently again.
    waiter = streams(srv, "overlap", WAITER, key=5, arg=60_000)
    assert waiter.next()[0] == STARTED
    assert streams(srv, "overlap", SETTER, key=5).rest()[-1][0] == 0
    assert [v for v, _ in waiter.rest()] == [STARTED, 0]
