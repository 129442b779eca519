"""Parallel BLS for `async def execute`: an asyncio event loop whose idle wait blocks in the host.

Triton's Python backend runs `async def execute(self, requests)` on an asyncio loop, so BLS code
fans out with `await asyncio.gather(*[r.async_exec() for r in requests])`. A Wasm guest has one
thread and no sockets, so this loop has no selector over file descriptors: when every task waits,
it asks the host (`host.wait-any`) which of the guest's BLS calls (`host.infer-async`) finished,
and completes their futures. Calls started in the same loop iteration (as `gather` starts them)
run concurrently on the host.

Timers (`asyncio.sleep`, timeouts) are not real: a guest may have no clock (it reads 0 without the
`clocks` grant), so when only timers are left the loop jumps its own time to the next one instead
of waiting, and while BLS calls run a timer fires only once one of them has finished.

Adoption (a decoupled model's `async def execute`, as Triton runs it): the host offers the call
more requests while it runs (`host.adopt`), and the loop runs each as a coroutine of its own,
`execute([request])`, beside the call's own. Its idle wait is then `host.wait`, which also wakes
for new requests, for a request's time limit, and after a timer's real time (timers wait then, so
that requests can arrive meanwhile; a guest whose clock reads 0 moves its clock by the time
waited). Each request ends when its coroutine does (`host.finish`); the call returns when every
coroutine it started has ended and the host has closed it to new requests.
"""

import asyncio
import asyncio.base_events
import time

from . import _host

# The host runs at most this many infer-async calls of one instance at once (MAX_CALLS_IN_FLIGHT
# in host/src/backend/wasm/bls.rs); later ones wait here for a free slot, so a gather over more
# requests than that ports unchanged.
MAX_IN_FLIGHT = 64


class _HostSelector:
    """The loop's "selector": waits for BLS calls instead of file descriptors."""

    def __init__(self, loop):
        self._loop = loop
        # [pending-infer handle, future, how to turn the result into the future's value]
        self.calls = []
        # (start: () -> handle, future, convert) of calls waiting for a free slot, oldest first
        self.backlog = []
        # the _Adopter of a call the host opened to more requests, else None
        self.adopter = None

    def start(self, start, future, convert):
        """Starts a host call now, or as soon as fewer than MAX_IN_FLIGHT run."""
        if len(self.calls) >= MAX_IN_FLIGHT:
            self.backlog.append((start, future, convert))
        else:
            self._start(start, future, convert)

    def _start(self, start, future, convert):
        try:
            handle = start()
        except _host.Err as e:  # refused before it ran (e.g. a model not allowed)
            future.set_result(convert(e))
            return
        self.calls.append((handle, future, convert))

    def select(self, timeout=None):
        if self.adopter is not None:
            return self._select_adopting(timeout)
        if not self.calls:
            if timeout is None:
                # A real loop would sleep until I/O that can never come in a guest.
                raise RuntimeError("async execute() is waiting for something other than BLS calls "
                                   "(async_exec) or timers: nothing can wake it inside a guest")
            self._loop._skip(timeout)  # only timers left: go to the next one
            return []
        if timeout is None or timeout > 0:
            # Blocks until one finished (bounded by the model's BLS time limit on the host).
            _host.wit_host.wait_any([c[0] for c in self.calls])
        done = [c for c in self.calls if c[0].ready()]
        if not done and (timeout is None or timeout > 0):
            # Nothing finished within the host's time limit: collect them all; each `get` returns
            # the host's timeout error.
            done = list(self.calls)
        self._complete(done)
        return []

    def _complete(self, done):
        for call in done:
            self.calls.remove(call)
            _finish(*call)
        while self.backlog and len(self.calls) < MAX_IN_FLIGHT:
            start, future, convert = self.backlog.pop(0)
            if not future.done():
                self._start(start, future, convert)

    def _select_adopting(self, timeout):
        """select() of a call open to more requests: `host.wait` also wakes for them and for
        their time limits, and a timer waits its real time."""
        if timeout is not None and timeout <= 0:  # callbacks are ready: only look
            self._complete([c for c in self.calls if c[0].ready()])
            return []
        timeout_ns = None if timeout is None else int(timeout * 1e9)
        before = self._loop.time()
        wake = _host.wit_host.wait([c[0] for c in self.calls], timeout_ns)
        if timeout is not None:
            # a guest whose clock reads 0 (no `clocks` grant) moves it by the time waited
            behind = min(timeout, wake.waited_ns / 1e9) - (self._loop.time() - before)
            if behind > 0:
                self._loop._skip(behind)
        if wake.finished is not None:
            self._complete([c for c in self.calls if c[0].ready()])
        if wake.expired:
            self.adopter.expire(wake.expired)
        if wake.requests:
            self.adopter.take()
        return []

    def close(self):
        self.calls.clear()
        self.backlog.clear()


def _finish(handle, future, convert):
    """Completes `future` with the call's result and drops the handle at once, which frees its
    slot on the host for a call waiting in the backlog."""
    try:
        result = handle.get()
    except _host.Err as e:
        result = e
    finally:
        exit_ = getattr(handle, "__exit__", None)  # componentize-py resources drop on __exit__
        if exit_ is not None:
            exit_(None, None, None)
    if not future.done():  # a cancelled task's call still ran; its result is dropped
        future.set_result(convert(result))


class HostLoop(asyncio.base_events.BaseEventLoop):
    """The event loop `async def execute` (and async initialize / finalize) runs on in a guest."""

    def __init__(self):
        super().__init__()
        self._selector = _HostSelector(self)
        self._skipped = 0.0
        # A guest without the `clocks` grant reports a resolution of 1 s, which would fire every
        # timer due within a second as soon as the loop passes by; this loop's time only moves
        # by what it waited (or skipped), so its timers fire when due.
        self._clock_resolution = 1e-6

    def time(self):
        return time.monotonic() + self._skipped

    def _skip(self, seconds):
        self._skipped += seconds

    def _process_events(self, event_list):
        pass

    def _write_to_self(self):
        pass

    def start_call(self, start, convert):
        """A future completed with `convert(result)` once the host call that `start()` begins
        (returning a pending-infer handle, or raising Err) has finished."""
        future = self.create_future()
        self._selector.start(start, future, convert)
        return future

    def close(self):
        self._selector.close()
        super().close()


def run(coro):
    """Runs a coroutine of the user's model to completion on a fresh HostLoop."""
    loop = HostLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


class _Adopter:
    """The requests of one call open to adoption, each a task on the loop: `own`, the call's own
    requests' coroutine (positions 0..own_count-1), and one `execute([request])` per request
    adopted. `start(position, pack)` makes an adopted request's coroutine; `ended(positions,
    task)` tells the host how the task ended those requests."""

    def __init__(self, loop, start, ended):
        self.loop = loop
        self.start = start
        self.ended = ended
        self.tasks = {}  # task -> the positions it serves
        self.expired = set()
        self.idle = None  # a future set when no task is left

    def add(self, coro, positions):
        task = self.loop.create_task(coro)
        self.tasks[task] = positions
        task.add_done_callback(self._done)

    def take(self, close=False):
        """Starts the requests waiting for the call; closing it to more first if `close`. Returns
        how many it started."""
        return self.run_each(_host.wit_host.adopt(close) or [])

    def run_each(self, taken):
        """Starts each (position, pack) the host handed over."""
        for position, pack in taken:
            try:
                coro = self.start(position, pack)
            except BaseException as e:  # noqa: BLE001  the request fails, not the call
                coro = _raise(e)
            self.add(coro, (position,))
        return len(taken)

    def expire(self, positions):
        """The host ended these requests (their time limit passed): their work stops."""
        self.expired.update(positions)
        for task, served in list(self.tasks.items()):
            if all(p in self.expired for p in served):
                task.cancel()

    def _done(self, task):
        served = self.tasks.pop(task, ())
        if not task.cancelled():
            live = [p for p in served if p not in self.expired]
            if live:
                self.ended(live, task)
        if not self.tasks and self.idle is not None and not self.idle.done():
            self.idle.set_result(None)

    async def until_all_ended(self):
        while True:
            while self.tasks:
                self.idle = self.loop.create_future()
                await self.idle
            if not self.take(close=True):  # closed: none can join any more
                return


async def _raise(e):
    raise e


def run_adopting(coro, own_count, start, ended):
    """Runs the coroutine of a decoupled model's call (its `own_count` requests) on a fresh
    HostLoop that adopts the requests the host offers while it runs (see the module docs).
    Returns (True, None) once every request has ended through `ended`; (False, what `coro`
    returned) when the host offers none, having run `coro` alone, as `run` does."""
    loop = HostLoop()
    try:
        asyncio.set_event_loop(loop)
        first = _host.wit_host.adopt(False)  # opens the call; requests may be waiting already
        if first is None:  # not offered: one coroutine at a time
            return False, loop.run_until_complete(coro)
        adopter = loop._selector.adopter = _Adopter(loop, start, ended)
        adopter.add(coro, tuple(range(own_count)))
        adopter.run_each(first)
        loop.run_until_complete(adopter.until_all_ended())
        return True, None
    finally:
        asyncio.set_event_loop(None)
        loop.close()
