"""The SDK's parts of Triton's python-backend contract that need no component, under plain CPython:
the model file imported as `<version>.<name>` (_entry), outgoing connections refused (_net), the
inline ThreadPoolExecutor (_threads), DLPack between tensors, and the builder's requests detection.
End to end (a server, the real Triton side by side): tests/python_contract."""

import concurrent.futures
import importlib
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))

import triton_python_backend_utils as pb_utils  # noqa: E402
from tessera_guest import _entry, _net, _threads  # noqa: E402


def test_model_file_imports_as_a_package_with_guest_paths(tmp_path, monkeypatch):
    version = tmp_path / "models" / "7"
    (version / "sub").mkdir(parents=True)
    (version / "helper.py").write_text("VALUE = 'h'\n")
    (version / "sub" / "__init__.py").write_text("from .. import helper\nDEEP = helper.VALUE + '!'\n")
    (version / "entry.py").write_text(textwrap.dedent("""
        import sys
        from . import helper
        from .sub import DEEP
        import helper as by_name
        ARGV = list(sys.argv)
        def boom():
            raise ValueError('x')
    """))
    (tmp_path / "entry_dir").mkdir()
    (tmp_path / "entry_dir" / "tessera_model_entry.py").write_text("PACKAGE = '7'\nMODULE = '7.entry'\n")
    for p in (str(version), str(tmp_path / "models"), str(tmp_path / "entry_dir")):
        monkeypatch.syspath_prepend(p)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(sys, "argv", ["pytest"])
    for name in ("tessera_model_entry", "7", "7.entry", "7.helper", "7.sub", "helper"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(_net, "install", lambda: None)  # not this process's sockets
    import asyncio.events
    monkeypatch.setattr(asyncio.events, "new_event_loop", asyncio.events.new_event_loop)  # restored after
    monkeypatch.setattr(asyncio, "new_event_loop", asyncio.new_event_loop)
    module = _entry.import_model()
    assert module.__name__ == "7.entry" and module.__package__ == "7"
    assert module.__file__ == "/model/entry.py"
    assert module.helper.__file__ == "/model/helper.py" and module.by_name.__file__ == "/model/helper.py"
    assert module.DEEP == "h!" and sys.modules["7.sub"].__file__ == "/model/sub/__init__.py"
    assert module.ARGV == [""]
    with pytest.raises(ValueError) as caught:
        module.boom()
    assert caught.traceback[-1].frame.code.raw.co_filename == "/model/entry.py"


def test_outgoing_connections_fail_saying_why(monkeypatch):
    # install() patches this process's sockets: each is restored after the test, so the
    # suite's later files (on the same pytest-xdist worker) still reach their servers.
    import urllib3.util.connection

    for name in ("create_connection", "getaddrinfo"):
        monkeypatch.setattr(socket, name, getattr(socket, name))
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, getattr(socket.socket, name))
    monkeypatch.setattr(urllib3.util.connection, "create_connection", urllib3.util.connection.create_connection)
    _net.install()
    with pytest.raises(PermissionError) as caught:
        socket.create_connection(("127.0.0.1", 9))
    assert "outgoing HTTP is not granted to this model" in str(caught.value)
    assert "127.0.0.1:9" in str(caught.value)
    with pytest.raises(PermissionError):
        socket.getaddrinfo("example.com", 80)
    with socket.socket() as s, pytest.raises(PermissionError):
        s.connect(("127.0.0.1", 9))


def test_thread_pool_runs_each_call_inline():
    pool = _threads.InlineExecutor(max_workers=2)
    assert list(pool.map(lambda v: v * v, range(4))) == [0, 1, 4, 9]
    failed = pool.submit(lambda: 1 / 0)
    assert isinstance(failed.exception(), ZeroDivisionError)
    assert [f.result() for f in concurrent.futures.as_completed([pool.submit(sum, [1, 2])])] == [3]
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(sum, [])


def test_dlpack_passes_a_tensor_under_another_name():
    t = pb_utils.Tensor("A", [1.0, 2.0], "BF16")
    out = pb_utils.Tensor.from_dlpack("B", t.to_dlpack())
    assert out.name() == "B" and out.datatype() == "BF16" and out.to_bytes() == t.to_bytes()
    with pytest.raises(TypeError):
        pb_utils.Tensor.from_dlpack("C", object())


@pytest.mark.parametrize("source,expected", [
    ("import requests\n", True), ("from requests.adapters import HTTPAdapter\n", True),
    ("import urllib3\n", True), ("import json\n", False), ("x = 'import requests'\n", False),
])
def test_builder_bundles_requests_when_imported(tmp_path, source, expected):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text(source)
    deps = importlib.util.spec_from_file_location("python_guest_deps", ROOT / "scripts" / "python_guest_deps.py")
    module = importlib.util.module_from_spec(deps)
    deps.loader.exec_module(module)
    assert module.uses_requests(str(tmp_path)) is expected
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("requests==2.32.3\n")
    assert module.uses_requests(str(tmp_path), str(requirements)) is False


def test_builder_refuses_a_model_file_not_ending_in_py(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.txt").write_text("")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build-python-guest.sh"), str(tmp_path / "1" / "model.txt"),
                        str(tmp_path / "out.wasm")], capture_output=True, text=True)
    assert r.returncode == 1 and "Model name must end with '.py'" in r.stderr, r.stderr
