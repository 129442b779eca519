"""Cheaper lifetimes for host resource objects (tensor handles, requests) inside a guest.

componentize-py gives every resource object it makes (a tensor handle a host call returns, each
request handed to `execute`) a `weakref.finalize` that drops the host handle when the object
dies. In a guest that bookkeeping is interpreted Python: a registry entry, an info object, a
weak reference with a callback, and at death a registry pop and a call. Measured in-process,
`request.input()` plus the drop of the handle it returns cost ~3.7 µs, and add_sub_python makes
about five such objects per request.

`install(kinds, drop)` keeps componentize-py's protocol and drops the bookkeeping for those
objects only: `weakref.finalize(obj, drop, ...)` on an object of one of `kinds` (the generated
resource classes) with componentize-py's own drop function returns a small `HandleFinalizer`
that holds the drop function and its arguments, and the resource classes get a `__del__` that
calls it. componentize-py only ever calls the finalizer or `detach()`s it (when a handle moves
to the host: an output, a constructor's temporary); `HandleFinalizer` answers those, `peek()`
and `alive` as `weakref.finalize` would. Every other `weakref.finalize` (the user's, also on a
resource object, and the standard library's) is created by the original class as before.

Nothing here changes when a handle is dropped: when its object dies (reference count or cycle
collection), as before. At interpreter exit `weakref.finalize` would also run leftover
finalizers; a guest's interpreter never exits (the host drops the whole instance, and its handle
table with it).
"""

import weakref


class HandleFinalizer:
    """What `weakref.finalize` is to componentize-py, for one resource object's handle."""

    __slots__ = ("_func", "_args")

    def __init__(self, func, args):
        self._func = func
        self._args = args

    def __call__(self, _=None):
        func = self._func
        if func is None:
            return None
        self._func = None
        return func(*self._args)

    def detach(self):
        func = self._func
        if func is None:
            return None
        self._func = None
        return (None, func, self._args, {})

    def peek(self):
        func = self._func
        return None if func is None else (None, func, self._args, {})

    @property
    def alive(self):
        return self._func is not None


def _drop_handle(self):
    # HandleFinalizer.__call__, inline: one interpreted call less per handle
    finalizer = self.__dict__.get("finalizer")
    if finalizer.__class__ is HandleFinalizer:
        func = finalizer._func
        if func is not None:
            finalizer._func = None
            func(*finalizer._args)


_installed = False


def install(kinds, drop):
    """Gives objects of the resource classes `kinds` a `HandleFinalizer` when componentize-py
    registers `drop` (its `componentize_py_runtime.drop_resource`) for them (idempotent)."""
    global _installed
    kinds = frozenset(kinds)
    if _installed or not kinds or drop is None:
        return
    finalize = weakref.finalize

    make = object.__new__

    def new(cls, *args, **kwargs):
        if cls is finalize and len(args) >= 2 and args[1] is drop and args[0].__class__ in kinds and not kwargs:
            f = make(HandleFinalizer)  # HandleFinalizer(drop, args[2:]) without its __init__ call
            f._func = drop
            f._args = args[2:]
            return f
        return object.__new__(cls)

    for kind in kinds:
        kind.__del__ = _drop_handle
    finalize.__new__ = staticmethod(new)
    _installed = True


def resource_classes(*modules):
    """The resource classes componentize-py generated in `modules` (those with `__exit__`)."""
    out = []
    for module in modules:
        if module is None:
            continue
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and "__exit__" in value.__dict__:
                out.append(value)
    return out
