"""How the guest imports the user's model file: as Triton's python backend stub does.

Triton's stub (`ModelContext::StubSetup`, pb_stub.cc) appends the version directory and the model
directory to `sys.path` and imports the model file as module `<version>.<name>` (`1.model`): the
version directory is a package, so `from . import helper`, `from .sub import x` and the absolute
`import helper` all work, and `sys.argv` is `['']` (an embedded interpreter given no arguments).

scripts/build-python-guest.sh stages copies of the version directory's `.py` files as that
package and writes `tessera_model_entry.py` (PACKAGE, MODULE) beside them. The build runs this at
pre-initialization, so the user's modules are imported then and only those are in the component.

`__file__` of every module of the version directory reads `/model/<path in the version
directory>`, and its code objects carry that name (tracebacks show it): `/model` is where the
`filesystem = read-only` parameter mounts the version directory, so
`os.path.join(os.path.dirname(__file__), "labels.txt")` opens the model's own file under that grant
(at initialize or execute; at build time only the `.py` files are there).
"""

import importlib
import importlib.machinery
import os
import sys

from . import _net

GUEST_DIR = "/model"  # the version directory, under the `filesystem = read-only` grant


class _Loader(importlib.machinery.SourceFileLoader):
    """A source loader whose code objects are named by the module's guest path."""

    def __init__(self, fullname, path, guest_path):
        super().__init__(fullname, path)
        self.guest_path = guest_path

    def get_code(self, fullname):
        return compile(self.get_data(self.path), self.guest_path, "exec", dont_inherit=True)


class _Finder:
    """Finds the version directory's modules (as the package or by their own names) as the path
    finder does, and names them by their guest paths."""

    def __init__(self, package, root):
        self.package = package
        self.root = root  # the staged copy of the version directory, at build time

    def _ours(self, top):
        if top == self.package:
            return True
        path = os.path.join(self.root, top)
        return os.path.isfile(path + ".py") or os.path.isdir(path)

    def find_spec(self, fullname, path=None, target=None):
        if not self._ours(fullname.partition(".")[0]):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        origin = os.path.realpath(spec.origin)
        if not origin.startswith(self.root + os.sep):
            return spec
        guest_path = GUEST_DIR + "/" + origin[len(self.root) + 1:]
        spec.loader = _Loader(fullname, spec.origin, guest_path)
        spec.origin = guest_path
        spec.cached = None
        return spec


def set_argv():
    """sys.argv as Triton's stub has it: pybind11's embedded interpreter, started with no
    arguments, has `['']`. (The guest's runtime sets it again when an instance starts.)"""
    sys.argv = [""]


def import_model():
    """The user's model module, imported as Triton imports it."""
    set_argv()
    try:
        import tessera_model_entry as entry  # written by build-python-guest.sh
    except ImportError:  # an older build layout: model.py on the path
        module = importlib.import_module("model")
        _net.install()
        return module
    spec = importlib.machinery.PathFinder.find_spec(entry.PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if locations:
        finder = _Finder(entry.PACKAGE, os.path.realpath(locations[0]))
        sys.meta_path.insert(0, finder)
    module = importlib.import_module(entry.MODULE)
    _preload()
    _net.install()  # after the user's imports: urllib3, when imported, is patched too
    return module


# Submodules that a module the model imported loads only on first use (concurrent.futures gives
# ThreadPoolExecutor through a module __getattr__): only what is imported at build time is in the
# component, so they are loaded now.
_LAZY = {"concurrent.futures": ("concurrent.futures.thread",)}


def _preload():
    for parent, children in _LAZY.items():
        if parent in sys.modules:
            for child in children:
                try:
                    importlib.import_module(child)
                except ImportError:
                    pass
    _guest_event_loop()


def _guest_event_loop():
    """asyncio.run() and asyncio.new_event_loop() give the guest's own loop (_aio.HostLoop, the one
    `async def execute` runs on): the default selector loop needs a socket pair, which a guest
    cannot make."""
    import asyncio
    import asyncio.events

    from . import _aio

    def new_event_loop():
        return _aio.HostLoop()

    asyncio.events.new_event_loop = new_event_loop
    asyncio.new_event_loop = new_event_loop
