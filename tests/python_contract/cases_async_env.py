"""Client cases of the environment a model reads and of `async def execute`, beside cases.py
(run.py and tests/test_python_contract.py import every cases_*.py): environment variables
(models/contract_async_seq) and `async def execute` (models/contract_async, contract_async_seq).

What they assert comes from Triton's python_backend at r24.10: README "Async Execute" and
src/pb_stub.cc `ProcessRequests` / `RunCoroutine` (a decoupled model's coroutine runs in the
background on the instance's event loop, so the next request starts while it awaits; any other
model's coroutine is waited for, one batch at a time), and src/stub_launcher.cc (the stub
inherits the server's environment).

The environment cases need the server started with CONTRACT_GREETING=hello and
CONTRACT_SECRET=s3cr3t in its environment (Tessera also with `--guest-env
CONTRACT_GREETING,CONTRACT_SECRET`); they skip when the greeting is not there.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid

import numpy as np

from cases import EXPECT, Ctx, Skip, case, post

EXPECT.update({
    "environment_only_what_the_model_asks": {
        "triton": "Triton hands every model the server's whole environment (the stub inherits it); Tessera "
                  "gives a model only the variables the operator grants and the model asks for",
    },
})


def _stream_one(ctx: Ctx, op: str, key: str, answers: queue.Queue, started: threading.Event):
    """One request on a gRPC stream of its own; puts (op, report or error text) on `answers`."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(ctx.grpc_url)
    done = threading.Event()

    def callback(result, error):
        if error is not None:
            answers.put((op, "error: %s" % error))
            done.set()
        elif result.as_numpy("OUT") is not None:
            answers.put((op, json.loads(result.as_numpy("OUT").reshape(-1)[0])))
            done.set()

    try:
        client.start_stream(callback=callback)
        inputs = []
        for name, value in (("OP", op), ("ARG", key)):
            t = grpcclient.InferInput(name, [1], "BYTES")
            t.set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
            inputs.append(t)
        client.async_stream_infer("contract_async", inputs, request_id=op)
        started.set()
        done.wait(60)
    finally:
        client.stop_stream()
        client.close()


@case("async")
def async_decoupled_requests_overlap(ctx: Ctx):
    """A decoupled model's `async def execute` awaiting an asyncio.Event is released by a later
    request to the same (single) instance: only possible when the coroutines overlap."""
    key, answers = uuid.uuid4().hex, queue.Queue()
    waiting = threading.Event()
    waiter = threading.Thread(target=_stream_one, args=(ctx, "wait", key, answers, waiting))
    waiter.start()
    try:
        assert waiting.wait(60), "the waiting request was not sent"
        _stream_one(ctx, "set", key, answers, threading.Event())
    finally:
        waiter.join(90)
    got = {}
    while not answers.empty():
        op, report = answers.get()
        got[op] = report
    assert got.get("set") == {"op": "set", "set": True}, got
    assert got.get("wait") == {"op": "wait", "released": True}, got


@case("async")
def async_not_decoupled_runs_one_at_a_time(ctx: Ctx):
    """A model that is not decoupled runs its coroutine to its end before the next execute: six
    concurrent requests, each awaiting asyncio.sleep, never see two executions at once."""
    peaks, errors = [], []

    def one():
        status, body = post(ctx, "/v2/models/contract_async_seq/infer",
                            {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["overlap"]}]})
        if status != 200:
            errors.append((status, body))
        else:
            peaks.append(json.loads(body["outputs"][0]["data"][0])["peak"])

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(peaks) == 6 and max(peaks) == 1, peaks


def _env_report(ctx: Ctx) -> dict:
    status, body = post(ctx, "/v2/models/contract_async_seq/infer",
                        {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["env"]}]})
    assert status == 200, (status, body)
    report = json.loads(body["outputs"][0]["data"][0])
    if report["execute"]["CONTRACT_GREETING"] is None and report["execute"]["CONTRACT_SECRET"] is None:
        raise Skip("the server was not started with CONTRACT_GREETING / CONTRACT_SECRET (and, for Tessera, "
                   "--guest-env CONTRACT_GREETING,CONTRACT_SECRET)")
    return report


@case("environment")
def environment_variables_reach_the_model(ctx: Ctx):
    """os.environ holds a server variable the model uses, in initialize and in execute."""
    report = _env_report(ctx)
    assert report["initialize"]["CONTRACT_GREETING"] == "hello", report
    assert report["execute"]["CONTRACT_GREETING"] == "hello", report


@case("environment")
def environment_only_what_the_model_asks(ctx: Ctx):
    """A server variable the model did not ask for (its environment_variables parameter) is not in
    its os.environ, even when the operator granted it."""
    report = _env_report(ctx)
    assert report["initialize"]["CONTRACT_SECRET"] is None, report
    assert report["execute"]["CONTRACT_SECRET"] is None, report
