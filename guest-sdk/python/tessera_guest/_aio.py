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
        for call in done:
            self.calls.remove(call)
            _finish(*call)
        while self.backlog and len(self.calls) < MAX_IN_FLIGHT:
            start, future, convert = self.backlog.pop(0)
            if not future.done():
                self._start(start, future, convert)
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
