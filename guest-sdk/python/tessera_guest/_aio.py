"""Parallel BLS for `async def execute`: an asyncio event loop whose idle wait blocks in the host.

Triton's Python backend runs `async def execute(self, requests)` on an asyncio loop, so BLS code
fans out with `await asyncio.gather(*[r.async_exec() for r in requests])`. A Wasm guest has one
thread and no sockets, so this loop has no selector over file descriptors: when every task waits,
it asks the host (`host.wait-any`) which of the guest's BLS calls (`host.infer-async`) finished,
and completes their futures. Calls started in the same loop iteration (as `gather` starts them)
run concurrently on the host.

Timers (`asyncio.sleep`, timeouts) are not real: a guest may have no clock, so a loop with only
timers left runs them at once.
"""

import asyncio
import asyncio.base_events

from . import _host


class _HostSelector:
    """The loop's "selector": waits for BLS calls instead of file descriptors."""

    def __init__(self):
        # (pending-infer handle, future, how to turn the result into the future's value)
        self.calls = []

    def select(self, timeout=None):
        if not self.calls:
            return []
        if timeout is None or timeout > 0:
            # Blocks until one finished (bounded by the model's BLS time limit on the host).
            _host.wit_host.wait_any([h for h, _, _ in self.calls])
        done = [c for c in self.calls if c[0].ready()]
        if not done and (timeout is None or timeout > 0):
            # Nothing finished within the host's time limit: collect them all; each `get` returns
            # the host's timeout error.
            done = list(self.calls)
        for call in done:
            self.calls.remove(call)
            handle, future, convert = call
            try:
                result = handle.get()
            except _host.Err as e:
                result = e
            if not future.done():
                future.set_result(convert(result))
        return []

    def close(self):
        self.calls.clear()


class HostLoop(asyncio.base_events.BaseEventLoop):
    """The event loop `async def execute` runs on inside a guest."""

    def __init__(self):
        super().__init__()
        self._selector = _HostSelector()

    def _process_events(self, event_list):
        pass

    def _write_to_self(self):
        pass

    def wait_for_call(self, handle, convert):
        """A future completed with `convert(result)` when the host call `handle` finishes."""
        future = self.create_future()
        self._selector.calls.append((handle, future, convert))
        return future

    def close(self):
        self._selector.close()
        super().close()


def run(coro):
    """Runs `async def execute` to completion on a fresh HostLoop."""
    loop = HostLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
