"""A Python guest built here with `tessera guest build` (the "probe") against the sandbox: it
reads or writes a path it is given, reads the clocks, sleeps, hoards memory or host tensors, and
answers a marker string baked in at build time. It checks the filesystem and clock grants, the
time and memory limits as a Python guest meets them, and hot-swapping a guest under load.

Every server started here uses a private --wasm-cache-dir (the probe is ~18 MB compiled and its
build is not reproducible, so it would otherwise add ~35 MB to ~/.cache/tessera/wasm on every
run). The example guests and the `faulty` guest are in test_wasm.py.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import requests
import tritonclient.http as httpclient

from tessera_testlib import (
    GuestBuild,
    error_message,
    index_entries,
    repository_index,
    start_server,
    wait_model_ready,
    wait_until,
)

# Compiling the Python guest (~18 MB) takes ~6-30 s on a loaded 2-core machine, and servers only
# answer /health/live once their startup models are loaded.
PYTHON_GUEST_DEADLINE = 150.0


def link_or_copy(src: Path, dst: Path) -> None:
    """dst as a hard link to src (the Python guest is ~18 MB), atomically replacing what was there."""
    tmp = dst.parent / f".{dst.name}.incoming"
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


PROBE_MODEL_PY = '''\
# Sandbox probe: OP (read | write | list | time | marker) on ARG; RESULT is "OK:<answer>" or
# "ERR:<exception type>: <message>".
import os
import time

import triton_python_backend_utils as pb_utils

MARKER = "@MARKER@"
HOARD = []
KEPT = []


def probe(op, arg):
    try:
        if op == "read":
            with open(arg, "rb") as f:
                return "OK:" + f.read().decode("utf-8", "replace")
        if op == "write":
            with open(arg, "w") as f:
                f.write("written by a guest")
            return "OK:wrote " + arg
        if op == "list":
            return "OK:" + ",".join(sorted(os.listdir(arg)))
        if op == "time":
            return "OK:%r %r" % (time.time(), time.monotonic())
        if op == "marker":
            return "OK:" + MARKER
        if op == "sleep":
            time.sleep(float(arg))
            return "OK:slept"
        if op == "big":
            return "OK:" + "x" * int(arg)
        if op == "hoard":  # a deliberate leak: keeps arg bytes for the instance's life
            HOARD.append(bytearray(int(arg)))
            return "OK:%d" % len(HOARD)
        if op == "hoard_host":  # keeps a host tensor of arg bytes (a handle) for the instance's life
            t = pb_utils.Tensor("X", bytes(int(arg)), "UINT8")
            t._lower_borrowed()  # the handle a BLS input gets: the bytes now live in the host
            t._raw = None  # and no longer in the guest
            HOARD.append(t)
            return "OK:%d" % len(HOARD)
        return "ERR:unknown op " + op
    except Exception as e:
        return "ERR:%s: %s" % (type(e).__name__, e)


def text(request, name):
    value = pb_utils.get_input_tensor_by_name(request, name).as_list()[0]
    return value.decode() if isinstance(value, bytes) else value


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            op = text(request, "OP")
            if op == "misfit":  # a BYTES element that claims 5 bytes and has 2: the host refuses it
                out = pb_utils.Tensor.from_bytes("RESULT", b"\\x05\\x00\\x00\\x00ab", "BYTES", [1])
            elif op in ("pass", "pass_twice"):  # ARG handed on as RESULT (a handle above 4 KiB)
                out = pb_utils.Tensor("RESULT", pb_utils.get_input_tensor_by_name(request, "ARG"))
                if op == "pass_twice":  # and a computed RESULT too: one name given twice
                    twice = pb_utils.Tensor("RESULT", [b"again"], "BYTES", shape=[1])
                    responses.append(pb_utils.InferenceResponse(output_tensors=[out, twice]))
                    continue
            elif op in ("keep", "kept"):  # keep this request past its call / ask the kept one
                if op == "keep":
                    KEPT.append(request)
                # its host handle (`request.at` takes it during the call; the kept one keeps it)
                answer = "OK:%d" % len(KEPT[-1]._handle().inputs()) if KEPT else "ERR:none kept"
                out = pb_utils.Tensor("RESULT", [answer.encode()], "BYTES", shape=[1])
            else:
                result = probe(op, text(request, "ARG"))
                out = pb_utils.Tensor("RESULT", [result.encode()], "BYTES", shape=[1])
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''


def probe_config(name: str, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "wasm"\nmax_batch_size: 0\n'
        'input [ { name: "OP" data_type: TYPE_STRING dims: [ 1 ] },\n'
        '        { name: "ARG" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        f"{extra}\n"
    )


class PythonGuests:
    """The probe built with MARKER "A" and "B" (two `tessera guest build` runs, in the background)."""

    def __init__(self, root: Path):
        self.root = root
        self.builds: dict[str, GuestBuild] = {}

    def start(self, marker: str) -> None:
        if marker not in self.builds:
            src = self.root / f"probe_{marker}" / "model.py"
            src.parent.mkdir(parents=True)
            src.write_text(PROBE_MODEL_PY.replace("@MARKER@", marker))
            self.builds[marker] = GuestBuild(src, self.root / f"probe_{marker}.wasm", self.root / "logs")

    def get(self, marker: str) -> Path:
        self.start(marker)
        return self.builds[marker].wait()

    def kill(self) -> None:
        for b in self.builds.values():
            b.kill()


@pytest.fixture(scope="module")
def python_guests(tmp_path_factory):
    guests = PythonGuests(tmp_path_factory.mktemp("python-guests"))
    yield guests
    guests.kill()


@pytest.fixture(scope="module", autouse=True)
def _start_python_guest_builds(request):
    """Start both builds with the module's first test when a selected test needs them, so that
    componentize-py runs while the tests above do."""
    if any("python_guests" in item.fixturenames for item in request.session.items):
        guests = request.getfixturevalue("python_guests")
        guests.start("A")
        guests.start("B")


def outputs_of(r: requests.Response) -> dict[str, dict]:
    assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:1000]}"
    return {o["name"]: o for o in r.json()["outputs"]}


def probe(srv, model: str, op: str, arg: str = "", session=None) -> str:
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": [op]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": [arg]}]}
    r = (session or requests).post(srv.http(f"/v2/models/{model}/infer"), json=body, timeout=30)
    out = outputs_of(r)["RESULT"]
    assert out["datatype"] == "BYTES" and out["shape"] == [1], out
    return out["data"][0]


SANDBOX_MODELS = {
    "no_grants": "",
    "fs_read_only": 'parameters { key: "filesystem" value: { string_value: "read-only" } }',
    "clocks": 'parameters { key: "clocks" value: { string_value: "true" } }',
    "small_memory": 'parameters { key: "max_memory_bytes" value: { string_value: "67108864" } }',
    "short_limit": 'parameters { key: "max_execute_ms" value: { string_value: "500" } }',
}


def secret(model: str) -> str:
    return f"the data file of {model}, 1f3870be"


@pytest.fixture(scope="module")
def sandbox_server(tmp_path_factory, python_guests, wasm_cache, tessera_binary):
    wasm = python_guests.get("A")
    root = tmp_path_factory.mktemp("sandbox")
    repo = root / "repo"
    for name, params in SANDBOX_MODELS.items():
        version_dir = repo / name / "1"
        version_dir.mkdir(parents=True)
        link_or_copy(wasm, version_dir / "model.wasm")
        (version_dir / "data.txt").write_text(secret(name))
        (repo / name / "config.pbtxt").write_text(probe_config(name, params))
    srv = start_server(root / "logs", [repo], ["--wasm-cache-dir", str(wasm_cache)], name="sandbox",
                       ready=list(SANDBOX_MODELS), ready_deadline=PYTHON_GUEST_DEADLINE)
    srv.repo = repo
    yield srv
    srv.stop_and_check()


def host_files() -> list[str]:
    files = [p for p in ("/etc/hostname", "/etc/passwd") if Path(p).is_file()]
    assert files, "no host file to try to read"
    return files


def assert_refused(answer: str, what: str, must_not_contain: str = "") -> None:
    assert answer.startswith("ERR:"), f"the guest could {what}: {answer[:300]!r}"
    if must_not_contain:
        assert must_not_contain not in answer, f"the guest saw the data trying to {what}: {answer!r}"


def test_no_filesystem_without_grant(sandbox_server):
    srv, model = sandbox_server, "no_grants"
    own = srv.repo / model / "1"
    for path in host_files():
        assert_refused(probe(srv, model, "read", path), f"read {path}")
    for path in ("/model/data.txt", str(own / "data.txt"), str(own / "model.wasm")):
        assert_refused(probe(srv, model, "read", path), f"read its own file {path}", "1f3870be")
    for path in ("/", "/model", str(own)):
        assert_refused(probe(srv, model, "list", path), f"list {path}")
    assert_refused(probe(srv, model, "write", "/model/x"), "write /model/x")
    assert sorted(p.name for p in own.iterdir()) == ["data.txt", "model.wasm"]


def test_python_guest_reads_small_and_large_inputs(sandbox_server):
    # The SDK takes a batch's inputs up to 4 KiB in one host call (request.read-inputs) and
    # fetches larger ones as handles: a guest's answer quoting a 10-byte and a 6,000-byte
    # argument shows it read each whole, by either path, through the real host.
    for name in ("a" * 10, "b" * 6000):
        answer = probe(sandbox_server, "no_grants", "list", "/" + name)
        assert answer.startswith("ERR:") and ("/" + name) in answer, answer[:200]


def test_python_guest_output_the_host_refuses_is_the_callers_error(sandbox_server):
    # The host checks every tensor a guest makes: a malformed output fails that request with
    # the host's reason, and the instance serves on.
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["misfit"]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": [""]}]}
    r = requests.post(sandbox_server.http("/v2/models/no_grants/infer"), json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert "invalid BYTES data for output 'RESULT'" in r.json()["error"], r.text
    assert probe(sandbox_server, "no_grants", "marker").startswith("OK:")


def test_python_guest_hands_an_input_on_without_copying_and_names_are_checked(sandbox_server):
    # A 6,000-byte input stays a host handle and goes back as the output through
    # request.give-tensors; a small one comes with the call and goes back by value. An output
    # name given twice (the handle and a computed tensor) fails that request with INVALID_ARG.
    for arg in ("c" * 6000, "small"):
        assert probe(sandbox_server, "no_grants", "pass", arg) == arg
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["pass_twice"]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": ["d" * 6000]}]}
    r = requests.post(sandbox_server.http("/v2/models/no_grants/infer"), json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert "output 'RESULT' given twice for one request" in r.json()["error"], r.text
    assert probe(sandbox_server, "no_grants", "marker").startswith("OK:")


def test_read_only_filesystem_grant(sandbox_server):
    srv, model = sandbox_server, "fs_read_only"
    own = srv.repo / model / "1"
    assert probe(srv, model, "read", "/model/data.txt") == "OK:" + secret(model)
    assert probe(srv, model, "list", "/model") == "OK:data.txt,model.wasm"
    # only the version directory, only at /model
    for path in host_files():
        assert_refused(probe(srv, model, "read", path), f"read {path}")
    assert_refused(probe(srv, model, "read", str(own / "data.txt")), "read its version dir by its host path",
                   "1f3870be")
    assert_refused(probe(srv, model, "read", "/model/../config.pbtxt"), "escape /model", 'backend: "wasm"')
    assert_refused(probe(srv, model, "read", "/model/../../fs_read_only/config.pbtxt"), "escape /model",
                   'backend: "wasm"')
    # read-only: neither a new file nor an overwrite
    assert_refused(probe(srv, model, "write", "/model/x"), "write /model/x")
    assert_refused(probe(srv, model, "write", "/model/data.txt"), "overwrite /model/data.txt")
    assert sorted(p.name for p in own.iterdir()) == ["data.txt", "model.wasm"]
    assert (own / "data.txt").read_text() == secret(model)
    # another model's grant does not extend to this one
    assert_refused(probe(srv, "no_grants", "read", "/model/data.txt"), "read /model without a grant")


def test_clocks_read_zero_without_grant(sandbox_server):
    assert probe(sandbox_server, "no_grants", "time") == "OK:0.0 0.0"
    assert probe(sandbox_server, "fs_read_only", "time") == "OK:0.0 0.0"


def test_clocks_grant(sandbox_server):
    before = time.time()
    answer = probe(sandbox_server, "clocks", "time")
    after = time.time()
    assert answer.startswith("OK:"), answer
    wall, monotonic = (float(v) for v in answer[3:].split())
    assert before - 5 <= wall <= after + 5, f"guest wall clock {wall}, host {before}..{after}"
    assert monotonic > 0, answer
    later = float(probe(sandbox_server, "clocks", "time")[3:].split()[1])
    assert later >= monotonic, f"monotonic clock went back: {monotonic} -> {later}"


def test_a_request_kept_past_its_call_keeps_none_of_the_callers_inputs(sandbox_server):
    """A guest may keep a request object after execute returns; the host then drops the
    request's inputs (the caller's bytes), so keeping requests cannot grow the server."""
    assert probe(sandbox_server, "no_grants", "keep") == "OK:2", "during its call: OP and ARG"
    assert probe(sandbox_server, "no_grants", "kept") == "OK:0", "after its call: none"


def test_a_guest_sleeps_no_longer_than_its_time_limit(sandbox_server):
    """`time.sleep` waits in a host call (wasi:io/poll), where the guest's time limit cannot stop
    it: the host cuts a guest's timers to its execution's deadline. A short sleep is whole; an
    hour's sleep ends with the time-limit error after 500 ms (it held the instance an hour
    before), and the model answers at once again."""
    srv, model = sandbox_server, "short_limit"
    started = time.monotonic()
    assert probe(srv, model, "sleep", "0.05") == "OK:slept"
    assert time.monotonic() - started >= 0.05
    body = {"inputs": [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": ["sleep"]},
                       {"name": "ARG", "shape": [1], "datatype": "BYTES", "data": ["3600"]}]}
    started = time.monotonic()
    r = requests.post(srv.http(f"/v2/models/{model}/infer"), json=body, timeout=60)
    assert r.status_code == 500, r.text
    assert error_message(r) == f"WebAssembly model '{model}' execute exceeded its time limit of 500 ms (max_execute_ms)"
    assert time.monotonic() - started < 5
    assert probe(srv, model, "marker") == "OK:A"


class Traffic(threading.Thread):
    """Sends marker requests one after another (a bounded number) until stopped; records
    (start time, end time, marker) for each answer and every failure."""

    MAX_REQUESTS = 50_000
    PACE_S = 0.005  # leaves CPU for the server's compile; pacing only, nothing waits on it

    def __init__(self, srv, model: str):
        super().__init__(daemon=True)
        self.srv, self.model = srv, model
        self.stop_event = threading.Event()
        self.answers: list[tuple[float, float, str]] = []
        self.failures: list[str] = []

    def count(self, marker: str | None = None) -> int:
        return sum(1 for _, _, m in self.answers if marker is None or m == marker)

    def run(self) -> None:
        with requests.Session() as session:
            while not self.stop_event.is_set() and len(self.answers) + len(self.failures) < self.MAX_REQUESTS:
                started = time.monotonic()
                try:
                    answer = probe(self.srv, self.model, "marker", session=session)
                    if answer.startswith("OK:"):
                        self.answers.append((started, time.monotonic(), answer[3:]))
                    else:
                        self.failures.append(answer)
                except Exception as e:  # noqa: BLE001 - every failure is reported by the test
                    self.failures.append(repr(e))
                self.stop_event.wait(self.PACE_S)


def test_hot_swap_under_load(server_factory, tmp_path, python_guests, wasm_cache):
    a, b = python_guests.get("A"), python_guests.get("B")
    repo = tmp_path / "repo"
    version_dir = repo / "swap" / "1"
    version_dir.mkdir(parents=True)
    link_or_copy(a, version_dir / "model.wasm")
    (repo / "swap" / "config.pbtxt").write_text(probe_config("swap"))
    srv = server_factory(repo, ["--model-control-mode", "explicit", "--load-model", "swap",
                                "--wasm-cache-dir", str(wasm_cache)])
    wait_model_ready(srv, "swap", deadline=PYTHON_GUEST_DEADLINE)
    assert probe(srv, "swap", "marker") == "OK:A"

    traffic = Traffic(srv, "swap")
    traffic.start()
    try:
        wait_until(lambda: traffic.count("A") >= 20, 60, "20 requests answered before the swap", srv)
        link_or_copy(b, version_dir / "model.wasm")  # one rename: the server never sees half a file
        c = httpclient.InferenceServerClient(srv.url, network_timeout=PYTHON_GUEST_DEADLINE)
        try:
            load_started = time.monotonic()
            c.load_model("swap")
            load_done = time.monotonic()
            assert c.is_model_ready("swap")
        finally:
            c.close()
        wait_until(lambda: traffic.count("B") >= 20 or not traffic.is_alive(), 60,
                   "20 requests answered after the swap", srv)
    finally:
        traffic.stop_event.set()
        traffic.join(timeout=60)
    assert not traffic.is_alive(), "the traffic thread did not stop"

    assert traffic.failures == [], f"{len(traffic.failures)} requests failed across the swap: {traffic.failures[:5]}"
    markers = [m for _, _, m in traffic.answers]
    assert set(markers) == {"A", "B"}, f"markers seen: {sorted(set(markers))} ({len(markers)} requests)"
    first_b = markers.index("B")
    assert markers[:first_b] == ["A"] * first_b and markers[first_b:] == ["B"] * (len(markers) - first_b), (
        f"A answered after B: A x{first_b}, then {''.join(markers[first_b:first_b + 200])}..."
    )
    late_a = [t for t, _, m in traffic.answers if m == "A" and t > load_done]
    assert not late_a, f"{len(late_a)} requests sent after load_model returned were answered by the old guest"
    during = sum(1 for t, end, _ in traffic.answers if load_started < t and end < load_done)
    assert during > 0 or load_done - load_started < 0.5, (
        f"no request was answered during the {load_done - load_started:.1f}s reload: it blocked traffic"
    )
    assert probe(srv, "swap", "marker") == "OK:B"
    assert [e.get("state") for e in index_entries(repository_index(srv), "swap")] == ["READY"]


def test_python_guest_outputs_cost_no_guest_memory_after_the_call(sandbox_server):
    # componentize-py never frees the guest copy of a bytes argument sent to the host; the SDK
    # sends output bytes as a latin-1 string, which it frees. 150 responses of 1 MiB from a 64 MiB
    # guest (the old way, every one leaked: a trap after ~40) need no recycling of the instance.
    before = sandbox_server.log_text().count("recycling a guest instance")
    with requests.Session() as s:
        for i in range(150):
            answer = probe(sandbox_server, "small_memory", "big", str(1 << 20), session=s)
            assert answer.startswith("OK:") and len(answer) == 3 + (1 << 20), f"call {i}: {answer[:200]}"
    assert sandbox_server.log_text().count("recycling a guest instance") == before


def test_a_guest_that_hoards_memory_is_recycled_between_calls(sandbox_server):
    # A guest that keeps 1 MiB per call would trap at its 64 MiB limit after ~40 calls; the host
    # recycles the instance when its memory nears the limit, between calls, so no request fails.
    with requests.Session() as s:
        for i in range(150):
            answer = probe(sandbox_server, "small_memory", "hoard", str(1 << 20), session=s)
            assert answer.startswith("OK:"), f"call {i}: {answer[:200]}"
    assert "recycling a guest instance near its memory limit" in sandbox_server.log_text()


def test_a_guest_that_hoards_host_tensors_is_refused_past_four_times_its_memory(sandbox_server):
    # Handles keep their bytes in the host, out of the guest's memory cap: past 4 x
    # max_memory_bytes (64 MiB here) the host refuses to hold more for it, and the guest gets
    # the host's reason as an exception, instead of the server growing; other models serve on.
    refused = None
    with requests.Session() as s:
        for i in range(140):  # 2 MiB each
            answer = probe(sandbox_server, "small_memory", "hoard_host", str(2 << 20), session=s)
            if not answer.startswith("OK:"):
                refused = (i, answer)
                break
    assert refused is not None, "the host held 280 MiB of tensors for a 64 MiB guest"
    i, answer = refused
    # Each tensor also holds its name and shape (9 bytes): the 128th passes 256 MiB.
    assert i == 127, f"call {i}: {answer[:300]}"
    assert "4 x max_memory_bytes" in answer, answer[:300]
    assert probe(sandbox_server, "no_grants", "marker").startswith("OK:")
