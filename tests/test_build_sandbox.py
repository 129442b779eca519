"""The model.py build path under attack (docs/wasm.md, "Threat model"): what a client uploads through
the repository load API is an attacker's. requirements.txt is data, never pip's instructions; the
build writes only a directory of its own and reaches no port; no path from a config leaves its
model directory; a build that never ends holds up no other load, and an unload, SIGTERM or the
server's death ends it; the build, compile and function caches keep to their caps.

Each test is the attack itself: the sdist that would write a marker if its build ever ran, the
model.py that writes into every directory it is shown, traversal in every spelling."""

from __future__ import annotations

import base64
import http.server
import io
import json
import os
import signal
import subprocess
import tarfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
import requests

from tessera_testlib import REPO_ROOT, copy_model, index_entries, repository_index, wait_until

pytestmark = pytest.mark.timeout(900)
BUILD_DEADLINE = 600.0
CANARY = "canary-7d1e0f9a5b3c"

PLAIN_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
'''

# Without numpy (the cache test's server has a cache directory of its own, with no numpy built).
LIST_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_list(),
                                                            "FP32")]) for r in requests]
'''

LOOPING_MODEL = '''
while True:  # module level: runs at build time, forever
    pass
'''


def python_config(name: str, **extra) -> str:
    config = {
        "name": name, "backend": "python", "max_batch_size": 0,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
    }
    config.update(extra)
    return json.dumps(config)


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def load(srv, name: str, config: str | None = None, files: dict | None = None, timeout: float = BUILD_DEADLINE):
    parameters = {}
    if config is not None:
        parameters["config"] = config
    for key, contents in (files or {}).items():
        parameters[key] = b64(contents)
    body = {"parameters": parameters} if parameters else {}
    return requests.post(srv.http(f"/v2/repository/models/{name}/load"), json=body, timeout=timeout)


@pytest.fixture
def explicit(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "add_sub")
    srv = server_factory(repo, ["--model-control-mode=explicit"], env={"CANARY_SECRET": CANARY})
    return srv, repo


class Index(http.server.SimpleHTTPRequestHandler):
    """A package index on 127.0.0.1 that counts what it is asked for."""

    requests_seen: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).requests_seen.append(self.path)
        super().do_GET()


@pytest.fixture
def evil_index(tmp_path):
    """A directory served over HTTP holding only an sdist whose build writes a marker file."""
    marker = tmp_path / "sdist-build-ran"
    root = tmp_path / "index"
    root.mkdir()
    setup_py = f"open({str(marker)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='tessera-sdist-probe', version='1.0')\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in [("setup.py", setup_py),
                           ("PKG-INFO", "Metadata-Version: 2.1\nName: tessera-sdist-probe\nVersion: 1.0\n")]:
            data = text.encode()
            info = tarfile.TarInfo(f"tessera_sdist_probe-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (root / "tessera_sdist_probe-1.0.tar.gz").write_bytes(buf.getvalue())
    Index.requests_seen = []
    handler = lambda *a, **kw: Index(*a, directory=str(root), **kw)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", marker
    finally:
        httpd.shutdown()
        httpd.server_close()


REFUSED = [
    ("-r /proc/self/environ\n", 1),
    ("-r /etc/hostname\n", 1),
    ("-c /etc/passwd\n", 1),
    ("six==1.17.0\n--no-binary :all:\n", 2),
    ("six==1.17.0\n# a comment\n--index-url {index}\n", 3),
    ("--find-links {index}\ntessera-sdist-probe\n", 1),
    ("tessera-sdist-probe @ {index}tessera_sdist_probe-1.0.tar.gz\n", 1),
    ("{index}tessera_sdist_probe-1.0.tar.gz\n", 1),
    ("./local_package\n", 1),
    ("/etc\n", 1),
    ("six>=1.0\n", 1),
    ('six==1.17.0 ; open("/etc/passwd")\n', 1),
    ("six==1.17.0 --install-option=--prefix=/tmp\n", 1),
]


@pytest.mark.parametrize("requirements,line", REFUSED, ids=[f"case{i}" for i in range(len(REFUSED))])
def test_a_requirements_line_that_is_not_a_package_is_refused_naming_the_line(explicit, evil_index, requirements,
                                                                              line):
    srv, _ = explicit
    index, marker = evil_index
    text = requirements.format(index=index)
    r = load(srv, "probe", python_config("probe"), {"file:1/model.py": PLAIN_MODEL, "file:1/requirements.txt": text})
    assert r.status_code == 400, r.text
    assert f"requirements.txt line {line}:" in r.text, r.text
    entry = index_entries(repository_index(srv), "probe")
    reason = json.dumps(entry)
    hostname = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else None
    for reply in (r.text, reason):
        assert CANARY not in reply, "the server's environment leaked"
        assert "root:" not in reply, "/etc/passwd leaked"
        if hostname:
            assert hostname not in reply, "/etc/hostname leaked"
        bad_line = text.splitlines()[line - 1]
        assert bad_line not in reply, "the refused line is echoed back"
    assert not Index.requests_seen, f"the build fetched from a client-chosen URL: {Index.requests_seen}"
    assert not marker.exists(), "an sdist's build ran on the host"
    assert load(srv, "add_sub").status_code == 200, "the server serves on"


def test_only_wheels_are_installed_so_no_sdist_build_ever_runs(server_factory, tmp_path, evil_index):
    """Even from the operator's own index, a requirement with only an sdist fails the build: pip
    installs wheels only, so the sdist's setup.py never runs."""
    index, marker = evil_index
    repo = tmp_path / "repo"
    repo.mkdir()
    srv = server_factory(repo, ["--model-control-mode=explicit"],
                         env={"PIP_FIND_LINKS": index, "PIP_NO_INDEX": "1"})
    r = load(srv, "probe", python_config("probe"),
             {"file:1/model.py": PLAIN_MODEL, "file:1/requirements.txt": "tessera-sdist-probe==1.0\n"})
    assert r.status_code == 400, r.text
    assert "tessera-sdist-probe has no pure-Python wheel" in r.text, r.text
    assert not marker.exists(), "the sdist's build ran on the host"


POISONER = '''
import os
import sys

import numpy  # noqa: F401  (numpy's directory is preopened too)
import six  # noqa: F401  (and the dependency cache's)

WRITES = {}
for directory in sorted(set(p for p in sys.path if p) | {"/", "/tmp", "."}):
    target = os.path.join(directory, "tessera_poison_probe.py")
    try:
        with open(target, "w") as f:
            f.write("raise SystemExit('poisoned')\\n")
        WRITES[directory] = "written"
    except OSError as e:
        WRITES[directory] = type(e).__name__
# the SDK every guest imports: overwrite it in place
import triton_python_backend_utils as pb_utils
try:
    with open(pb_utils.__file__, "a") as f:
        f.write("\\nPOISONED = True\\n")
    WRITES["sdk"] = "written"
except OSError as e:
    WRITES["sdk"] = type(e).__name__


class TritonPythonModel:
    def execute(self, requests):
        import json
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", numpy.array([json.dumps(WRITES)], dtype=object))])
                for _ in requests]
'''


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("TESSERA_CACHE_DIR") or Path(base) / "tessera")


def test_a_model_py_cannot_write_outside_its_build_directory(explicit):
    """Module-level code runs at build time with the SDK, numpy and the dependency cache on its
    path: it may write nowhere but its own build directory, so no upload changes a later guest."""
    srv, repo = explicit
    config = python_config("poisoner", output=[{"name": "Y", "data_type": "TYPE_STRING", "dims": [1]}])
    r = load(srv, "poisoner", config, {"file:1/model.py": POISONER, "file:1/requirements.txt": "six==1.17.0\n"})
    assert r.status_code == 200, r.text
    r = requests.post(srv.http("/v2/models/poisoner/infer"), timeout=120,
                      json={"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [0]}]})
    assert r.status_code == 200, r.text
    writes = json.loads(r.json()["outputs"][0]["data"][0])
    # The guest sees each directory on its path under a name of its own (/0, /1, ...): the
    # copy of its sources and componentize-py's working directories are in its build
    # directory, and writable; the SDK, numpy and the dependency cache are not.
    assert writes["sdk"] == "PermissionError", writes
    assert sum(outcome == "PermissionError" for outcome in writes.values()) >= 4, writes
    probes = subprocess.run(["find", str(REPO_ROOT), str(cache_root()), "/tmp", "-maxdepth", "6",
                             "-name", "tessera_poison_probe.py"], capture_output=True, text=True).stdout.split()
    assert probes == [], f"an upload wrote outside its build directory: {probes}"
    sdk = REPO_ROOT / "guest-sdk" / "python" / "triton_python_backend_utils.py"
    assert "POISONED" not in sdk.read_text()
    assert subprocess.run(["git", "status", "--porcelain", "guest-sdk"], cwd=REPO_ROOT, capture_output=True,
                          text=True).stdout == ""


TRAVERSALS = ["../../../../../../etc/passwd", "/etc/passwd", "1/../../../../../../etc/hostname", "..", "./../x",
              "a/../../b", "/nonexistent-dir/model.onnx", "../../../../../../nonexistent-dir/x", "..\\..\\etc\\passwd",
              "model.py\u0000.txt"]


@pytest.mark.parametrize("backend", ["onnxruntime", "python"])
def test_a_file_name_that_leaves_the_model_directory_is_refused_alike(explicit, backend):
    srv, _ = explicit
    messages = set()
    for i, name in enumerate(TRAVERSALS):
        model = f"trav{i}"
        config = python_config(model, backend=backend, default_model_filename=name)
        r = load(srv, model, config, {"file:1/model.py": PLAIN_MODEL})
        assert r.status_code == 400, (name, r.text)
        message = r.json()["error"].replace(model, "M")
        assert "default_model_filename" in message and "inside the model's directory" in message, message
        assert "passwd" not in message and "nonexistent" not in message and "hostname" not in message, message
        messages.add(message)
    assert len(messages) == 1, f"the answer tells paths apart: {messages}"
    for field, config in [
        ("label_filename", {"output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1],
                                        "label_filename": "../../../../etc/passwd"}]}),
        ("input_data_file", {"model_warmup": [{"name": "w", "batch_size": 1, "inputs": {
            "X": {"data_type": "TYPE_FP32", "dims": [1], "input_data_file": "/etc/passwd"}}}]}),
    ]:
        r = load(srv, "travfield", python_config("travfield", backend=backend, **config),
                 {"file:1/model.py": PLAIN_MODEL})
        assert r.status_code == 400 and field in r.text and "passwd" not in r.text, r.text
    for key, target in [("file:/tmp/tessera-trav-abs", "/tmp/tessera-trav-abs"),
                        ("file:1/../../../../../../../tmp/tessera-trav-up", "/tmp/tessera-trav-up"),
                        ("file:../tessera-trav-sibling", None), ("file:1/a/../../../tessera-trav-deep", None)]:
        r = load(srv, "travfile", python_config("travfile"), {key: "x", "file:1/model.py": PLAIN_MODEL})
        assert r.status_code in (400, 500) and "failed to poll from model repository" in r.text, r.text
        assert "tessera-trav" not in r.text, r.text
        if target:
            assert not Path(target).exists(), f"an upload was written outside its model directory: {target}"
    for name in ["..", "%2e%2e", "a%5Cb"]:
        r = requests.post(srv.http(f"/v2/repository/models/{name}/load"), json={}, timeout=30)
        assert r.status_code in (400, 404), r.text
    assert load(srv, "add_sub").status_code == 200, "the server serves on"


def build_processes(server_pid: int) -> list[int]:
    """Processes of this server's model.py builds (their command lines name the build directory,
    `.build-<key>-<server pid>-<n>`), wherever they were reparented."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if f"-{server_pid}-".encode() in cmdline and b".build-" in cmdline:
            found.append(int(entry.name))
    return found


def start_looping_load(srv) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run():
        try:
            outcome["response"] = load(srv, "looping", python_config("looping"), {"file:1/model.py": LOOPING_MODEL})
        except requests.RequestException as e:
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: build_processes(srv.process.pid), 120, "the looping build to start", srv)
    return thread, outcome


def test_a_build_that_never_ends_holds_up_no_other_load_and_unload_ends_it(explicit):
    srv, _ = explicit
    thread, outcome = start_looping_load(srv)
    started = time.monotonic()
    r = load(srv, "add_sub", timeout=120)
    assert r.status_code == 200, r.text
    r = requests.post(srv.http("/v2/repository/models/add_sub/unload"), json={}, timeout=120)
    assert r.status_code == 200, r.text
    assert time.monotonic() - started < 60, "another model's load and unload waited for the looping build"
    assert thread.is_alive(), "the looping build is still running"
    r = requests.post(srv.http("/v2/repository/models/looping/unload"), json={}, timeout=120)
    assert r.status_code == 200, r.text
    thread.join(60)
    assert not thread.is_alive(), "the unload did not end the build"
    assert outcome["response"].status_code != 200 and "cancelled" in outcome["response"].text, outcome
    wait_until(lambda: not build_processes(srv.process.pid), 30, "the builder's processes to end", srv)
    # A cancelled build is not remembered: the next load builds again (and is cancelled again).
    thread, outcome = start_looping_load(srv)
    r = requests.post(srv.http("/v2/repository/models/looping/unload"), json={}, timeout=120)
    assert r.status_code == 200, r.text
    thread.join(60)
    assert not thread.is_alive() and "cancelled" in outcome["response"].text, outcome
    wait_until(lambda: not build_processes(srv.process.pid), 30, "the builder's processes to end", srv)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_the_builder_dies_with_the_server(server_factory, tmp_path, sig):
    repo = tmp_path / "repo"
    repo.mkdir()
    srv = server_factory(repo, ["--model-control-mode=explicit"], expect_exit=True)
    srv.wait_live()
    _thread, _ = start_looping_load(srv)
    pid = srv.process.pid
    srv.process.send_signal(sig)
    rc = srv.process.wait(timeout=60)
    srv.mark_stopped(rc)
    if sig == signal.SIGTERM:
        assert rc == 0, srv.log_text()
        assert "panicked" not in srv.log_text()
    wait_until(lambda: not build_processes(pid), 30, "the builder's processes to die with the server")


def test_the_build_cache_keeps_to_its_cap(server_factory, tmp_path):
    """Every distinct model.py adds a built guest: past the cap the least recently used goes,
    and /metrics counts it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    cache = tmp_path / "cache"
    srv = server_factory(repo, ["--model-control-mode=explicit", "--python-guest-cache-max-mib=1",
                                f"--wasm-cache-dir={tmp_path / 'wasm'}", "--wasm-cache-max-mib=1"],
                         env={"XDG_CACHE_HOME": str(cache)})
    for i in range(3):
        source = LIST_MODEL + f"\nVARIANT = {i}\n"
        r = load(srv, f"v{i}", python_config(f"v{i}"), {"file:1/model.py": source})
        assert r.status_code == 200, r.text
    guests = sorted((cache / "tessera" / "python-guests").glob("*.wasm"))
    assert len(guests) == 1, f"a 1 MiB cap keeps only the newest guest: {guests}"
    compiled = sorted((tmp_path / "wasm").glob("*.cwasm"))
    assert len(compiled) == 1, compiled
    functions = sum(f.stat().st_size for f in (tmp_path / "wasm" / "functions").glob("*.fn"))
    assert 0 < functions <= 128 << 10, f"the function cache keeps to an eighth of 1 MiB: {functions} bytes"
    metrics = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=30).text
    assert 'tessera_disk_cache_max_bytes{cache="compiled_functions"} 131072' in metrics, metrics
    evictions = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                 if line.startswith("tessera_disk_cache_evictions_total{")}
    assert evictions.get('cache="python_guests"', 0) >= 2, metrics
    assert evictions.get('cache="compiled_components"', 0) >= 2, metrics
    r = requests.post(srv.http("/v2/models/v0/infer"), timeout=60,
                      json={"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [3]}]})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [3.0], "a loaded model serves on"


def test_a_second_guest_compiles_from_the_first_ones_functions(server_factory, tmp_path):
    """Python guests carry the same interpreter: the second one's compile takes the interpreter's
    functions from the function cache, adding few of its own, and serves."""
    repo = tmp_path / "repo"
    repo.mkdir()
    functions = tmp_path / "wasm" / "functions"
    srv = server_factory(repo, ["--model-control-mode=explicit", f"--wasm-cache-dir={tmp_path / 'wasm'}"])
    counts = []
    for i in range(2):
        r = load(srv, f"v{i}", python_config(f"v{i}"), {"file:1/model.py": LIST_MODEL + f"\nVARIANT = {i}\n"})
        assert r.status_code == 200, r.text
        counts.append(len(list(functions.glob("*.fn"))))
    assert counts[0] > 1000, f"the interpreter's functions are cached: {counts}"
    # About a tenth are new: a function whose body differs with the guest's snapshot.
    assert counts[1] - counts[0] < counts[0] // 4, f"the second guest compiled its interpreter again: {counts}"
    for i in range(2):
        r = requests.post(srv.http(f"/v2/models/v{i}/infer"), timeout=60,
                          json={"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [i + 2]}]})
        assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [i + 2.0], r.text


def test_servers_sharing_a_cache_build_and_compile_a_guest_once(server_factory, tmp_path):
    """Replicas on one cache volume, asked for the same model.py at the same moment: one builds and
    compiles it, the other waits for that and reads the result; both serve it."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ["--model-control-mode=explicit", f"--wasm-cache-dir={tmp_path / 'wasm'}"]
    for i in range(2):
        (tmp_path / f"repo{i}").mkdir()
    servers = [server_factory(tmp_path / f"repo{i}", args, env=env) for i in range(2)]
    source = LIST_MODEL + "\nVARIANT = 'replicas'\n"
    answers: list = [None, None]

    def load_on(i: int) -> None:
        answers[i] = load(servers[i], "shared", python_config("shared"), {"file:1/model.py": source})

    threads = [threading.Thread(target=load_on, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BUILD_DEADLINE)
    assert [a.status_code if a is not None else None for a in answers] == [200, 200], answers
    logs = [srv.log_text() for srv in servers]
    builds = sum(log.count("building the Python guest") for log in logs)
    compiles = sum(log.count("compiled WebAssembly component") for log in logs)
    assert (builds, compiles) == (1, 1), f"built {builds} and compiled {compiles} times between the two servers"
    for i, srv in enumerate(servers):
        r = requests.post(srv.http("/v2/models/shared/infer"), timeout=60,
                          json={"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [i + 5]}]})
        assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [i + 5.0], r.text
