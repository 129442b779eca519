"""threading.Thread for a guest that has no threads: started threads run cooperatively.

componentize-py's CPython for wasm32-wasi cannot start OS threads (`Thread.start()` raises
"can't start new thread"), yet Triton's decoupled examples send their responses from a thread
they start in execute() and never join. Here `start()` queues the thread instead; a queued
thread runs to its end, on the guest's only thread, when it is joined, or when the export call
that started it (initialize, execute, finalize) returns from user code, before the host gets
the call back. So responses "sent after execute returns" are sent in order within the same
host call, and a model whose finalize() waits for its threads finds them done.

What cannot work this way, and deadlocks until the host's execution time limit stops the guest:
a thread and its starter waiting on each other (an Event the thread sets that execute() waits
for without joining, a Queue execute() reads from, a lock held across start() that the thread
takes). Locks, Events and Conditions themselves work (uncontended).

concurrent.futures.ThreadPoolExecutor (and so asyncio's default executor, `run_in_executor(None,
...)`) is `InlineExecutor`: its workers would wait on their queue forever, so each submitted call
runs at once, on the guest's only thread, and submit() returns its finished Future. map(),
as_completed() and wait() then work unchanged, in submission order.
"""

import collections
import concurrent.futures
import sys
import threading

_pending = collections.deque()


def _start(self):
    if self._tessera_state is not None:
        raise RuntimeError("threads can only be started once")
    self._tessera_state = "queued"
    _pending.append(self)


def _run_one(thread):
    thread._tessera_state = "running"
    # threading.current_thread() is the running thread (its name, as a worker logs it)
    ident = threading.get_ident()
    active = threading._active
    outer = active.get(ident)
    active[ident] = thread
    try:
        thread.run()
    except SystemExit:
        pass
    except BaseException:  # noqa: BLE001  as an uncaught exception in a real thread: reported
        exc_type, exc, tb = sys.exc_info()
        threading.excepthook(threading.ExceptHookArgs((exc_type, exc, tb, thread)))
    finally:
        thread._tessera_state = "done"
        if outer is not None:
            active[ident] = outer
        else:
            active.pop(ident, None)


def _join(self, timeout=None):
    state = self._tessera_state
    if state is None:
        raise RuntimeError("cannot join thread before it is started")
    if state == "running":  # joined from itself, or from a thread it started and joins
        raise RuntimeError("cannot join a running thread (a guest's threads run cooperatively)")
    if state == "queued":
        _pending.remove(self)
        _run_one(self)


def _is_alive(self):
    return self._tessera_state in ("queued", "running")


def run_pending():
    """Runs every queued thread (and those they start) to its end, in start order."""
    while _pending:
        _run_one(_pending.popleft())


class InlineExecutor(concurrent.futures.Executor):
    """ThreadPoolExecutor in a guest: submit() runs the call at once and returns its Future."""

    def __init__(self, max_workers=None, thread_name_prefix="", initializer=None, initargs=()):
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        self._max_workers = max_workers
        self._initializer = initializer
        self._initargs = initargs
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs):
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if self._initializer is not None:  # once, as a worker thread would run it first
            init, self._initializer = self._initializer, None
            init(*self._initargs)
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001  as a worker thread: into the future
            future.set_exception(e)
        else:
            future.set_result(result)
        return future

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._shutdown = True


def install():
    """Makes threading.Thread cooperative and ThreadPoolExecutor inline (idempotent)."""
    import concurrent.futures.thread

    concurrent.futures.thread.ThreadPoolExecutor = InlineExecutor
    concurrent.futures.ThreadPoolExecutor = InlineExecutor
    import asyncio.base_events

    # asyncio.run() ends by shutting the default executor down from a thread it starts and awaits
    # (which a cooperative thread never finishes): shut the inline one down at once instead.
    async def shutdown_default_executor(self, timeout=None):
        self._executor_shutdown_called = True
        if self._default_executor is not None:
            self._default_executor.shutdown(wait=True)

    asyncio.base_events.BaseEventLoop.shutdown_default_executor = shutdown_default_executor
    if getattr(threading.Thread, "_tessera_state", "unset") != "unset":
        return
    threading.Thread._tessera_state = None
    threading.Thread.start = _start
    threading.Thread.join = _join
    threading.Thread.is_alive = _is_alive
