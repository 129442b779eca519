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
"""

import collections
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
    try:
        thread.run()
    except SystemExit:
        pass
    except BaseException:  # noqa: BLE001  as an uncaught exception in a real thread: reported
        exc_type, exc, tb = sys.exc_info()
        threading.excepthook(threading.ExceptHookArgs((exc_type, exc, tb, thread)))
    finally:
        thread._tessera_state = "done"


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


def install():
    """Makes threading.Thread cooperative (idempotent)."""
    if getattr(threading.Thread, "_tessera_state", "unset") != "unset":
        return
    threading.Thread._tessera_state = None
    threading.Thread.start = _start
    threading.Thread.join = _join
    threading.Thread.is_alive = _is_alive
