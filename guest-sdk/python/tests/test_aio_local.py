"""The SDK's asyncio loop for `async def execute` (tessera_guest/_aio.py) under plain CPython, with
a scripted stand-in for the host's infer-async / wait-any: which calls run at the same time, the
order answers come back in, errors, the in-flight limit, timers."""

import asyncio
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton_python_backend_utils as pb_utils  # noqa: E402
from tessera_guest import _aio, _host  # noqa: E402


def wit_error(code, message):
    return SimpleNamespace(code=SimpleNamespace(value=code), message=message)


class Output:
    """A BLS output handle: only its name is read here."""

    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


class Call:
    def __init__(self, host, n, model):
        self.host, self.n, self.model = host, n, model
        self.dropped = False

    def ready(self):
        return self.n in self.host.finished

    def get(self):
        if self.model == "failing":
            raise _host.Err(wit_error(3, "model 'failing' rejected the input"))
        if self.n not in self.host.finished:
            raise _host.Err(wit_error(4, "no answer within the BLS time limit"))
        return [Output("OUT%d" % self.n)]

    def __exit__(self, *exc):
        self.dropped = True


class FakeHost:
    """Finishes the newest outstanding call at each wait-any, so answers arrive in reverse order;
    `stuck` makes wait-any report nothing (the BLS time limit passed)."""

    def __init__(self, stuck=False):
        self.started = []  # Call objects, in start order
        self.finished = set()
        self.waits = []  # the call numbers each wait-any was given
        self.sync_calls = 0
        self.stuck = stuck

    def live(self):
        return sum(not c.dropped for c in self.started)

    def infer_async(self, model, version, inputs, outputs, params):
        if model == "forbidden":
            raise _host.Err(wit_error(3, "model 'm' is not allowed to call model 'forbidden'"))
        assert self.live() < _aio.MAX_IN_FLIGHT, "the host refuses a call beyond its limit"
        call = Call(self, len(self.started), model)
        self.started.append(call)
        return call

    def wait_any(self, calls):
        self.waits.append([c.n for c in calls])
        if self.stuck:
            return None
        self.finished.add(calls[-1].n)
        return len(calls) - 1

    def infer(self, model, version, inputs, outputs, params):
        self.sync_calls += 1
        return [Output("SYNC")]


@pytest.fixture
def host(monkeypatch):
    fake = FakeHost()
    monkeypatch.setattr(_host, "AVAILABLE", True)
    monkeypatch.setattr(_host, "wit_host", fake)
    return fake


def request(model="m"):
    return pb_utils.InferenceRequest(model_name=model, requested_output_names=["OUT"], inputs=[])


def names(response):
    assert not response.has_error(), response.error().message()
    return [t.name() for t in response.output_tensors()]


def test_gather_starts_every_call_before_waiting_and_keeps_request_order(host):
    async def execute():
        return await asyncio.gather(*[request().async_exec() for _ in range(3)])

    responses = _aio.run(execute())
    assert host.waits[0] == [0, 1, 2], "all three calls ran on the host at the same time"
    assert [names(r) for r in responses] == [["OUT0"], ["OUT1"], ["OUT2"]]
    assert all(c.dropped for c in host.started)


def test_awaiting_one_by_one_runs_one_at_a_time(host):
    async def execute():
        return [await request().async_exec() for _ in range(3)]

    responses = _aio.run(execute())
    assert host.waits == [[0], [1], [2]]
    assert [names(r) for r in responses] == [["OUT0"], ["OUT1"], ["OUT2"]]


def test_errors_come_back_as_responses_as_in_triton(host):
    async def execute():
        return await asyncio.gather(request("failing").async_exec(), request("forbidden").async_exec(),
                                    request().async_exec())

    failed, refused, ok = _aio.run(execute())
    assert failed.has_error() and failed.error().message() == "model 'failing' rejected the input"
    assert failed.error().code() == pb_utils.TritonError.INVALID_ARG
    assert refused.has_error() and "is not allowed to call model 'forbidden'" in refused.error().message()
    assert names(ok) == ["OUT1"]  # the refused call never started


def test_a_gather_wider_than_the_host_limit_waits_for_free_slots(host):
    async def execute():
        return await asyncio.gather(*[request().async_exec() for _ in range(100)])

    responses = _aio.run(execute())
    assert [names(r) for r in responses] == [["OUT%d" % i] for i in range(100)]
    assert max(len(w) for w in host.waits) == _aio.MAX_IN_FLIGHT


def test_calls_that_outlive_the_time_limit_fail_instead_of_hanging(host):
    host.stuck = True

    async def execute():
        return await asyncio.gather(request().async_exec(), request().async_exec())

    responses = _aio.run(execute())
    assert [r.error().message() for r in responses] == ["no answer within the BLS time limit"] * 2


def test_timers_do_not_wait(host):
    async def execute():
        await asyncio.sleep(3600)
        response = await asyncio.wait_for(request().async_exec(), timeout=60)
        return names(response)

    started = time.monotonic()
    assert _aio.run(execute()) == ["OUT0"]
    assert time.monotonic() - started < 5


def test_waiting_on_something_no_call_completes_is_an_error(host):
    async def execute():
        await asyncio.get_running_loop().create_future()

    with pytest.raises(RuntimeError, match="nothing can wake it"):
        _aio.run(execute())


def test_async_exec_outside_the_guest_loop_runs_the_call_at_once(host):
    async def execute():
        return await request().async_exec()

    assert names(asyncio.run(execute())) == ["SYNC"]
    assert host.sync_calls == 1 and host.started == []


class AdoptingHost(FakeHost):
    """A host that opens the call to adoption and hands over `arrivals` (lists of positions), one
    list at each wait, recording `finish` and `adopt` calls."""

    def __init__(self, arrivals=(), expire_at=None):
        super().__init__()
        self.arrivals = list(arrivals)
        self.adopts = []  # the `close` flag of each adopt call
        self.finished_requests = []  # (position, answer)
        self.expire_at = expire_at  # (wait number, positions): the host ends them then
        self.wait_timeouts = []

    def adopt(self, close):
        self.adopts.append(close)
        if len(self.adopts) == 1:
            return []
        return [(p, b"pack%d" % p) for p in self.arrivals.pop(0)] if self.arrivals and not close else []

    def wait(self, calls, timeout_ns):
        self.wait_timeouts.append(timeout_ns)
        expired = None
        if self.expire_at and self.expire_at[0] == len(self.wait_timeouts):
            expired = self.expire_at[1]
        finished = None
        if calls:
            self.finished.add(calls[-1].n)
            finished = len(calls) - 1
        return SimpleNamespace(finished=finished, requests=bool(self.arrivals), expired=expired,
                               waited_ns=timeout_ns or 0)

    def finish(self, position, answer):
        self.finished_requests.append((position, answer))


@pytest.fixture
def adopting(monkeypatch):
    def make(**kw):
        fake = AdoptingHost(**kw)
        monkeypatch.setattr(_host, "AVAILABLE", True)
        monkeypatch.setattr(_host, "wit_host", fake)
        return fake
    return make


def test_adopted_requests_run_beside_the_call_and_each_ends_on_its_own(adopting):
    host = adopting(arrivals=[[1], [2]])
    event = asyncio.Event()
    order = []

    async def own():
        await event.wait()  # only a request adopted later sets it: impossible one at a time
        order.append("own")

    async def adopted(position, pack):
        if position == 2:
            event.set()
        await request().async_exec()  # a BLS call of its own, overlapping the others
        order.append(position)

    def ended(positions, task):
        assert task.exception() is None
        host.finish(positions, "given")

    done, result = _aio.run_adopting(own(), 1, lambda p, pack: adopted(p, pack), ended)
    assert (done, result) == (True, None)
    assert sorted(map(str, order)) == ["1", "2", "own"]
    assert sorted(p for ps, _ in host.finished_requests for p in ps) == [0, 1, 2]
    assert host.adopts[0] is False and host.adopts[-1] is True, "opened first, closed last"
    assert all(c.dropped for c in host.started)


def test_without_an_offer_the_coroutine_runs_alone(adopting):
    host = adopting()
    host.adopt = lambda close: None

    async def own():
        return "alone"

    assert _aio.run_adopting(own(), 1, None, None) == (False, "alone")


def test_a_timer_waits_in_the_host_and_an_expired_request_is_cancelled(adopting):
    host = adopting(expire_at=(1, [0]))
    ended = []

    async def own():
        await asyncio.sleep(30)  # ended by the host (its time limit) during this wait
        ended.append("woke")

    done, _ = _aio.run_adopting(own(), 1, None, lambda positions, task: ended.append(positions))
    assert done and ended == [], "cancelled, not ended by the guest: the host already ended it"
    assert 29 * 10**9 < host.wait_timeouts[0] <= 30 * 10**9, "the timer's real time, in the host"
