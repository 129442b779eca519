"""Guest capabilities, deny by default: wasi:config (config parameters and the operator's secrets,
--guest-secrets) and wasi:keyvalue (a store per model and per tenant, with a quota, in memory or
persisted with --guest-keyvalue-dir), from a Rust guest (example-guests/capability_probe), a
Python one (tests/guests/capability_py) and a JavaScript one (tests/guests/capability_js). A secret's marker value is then looked for in every log,
trace, metric, cache and temporary file the server wrote. Real server and clients over 127.0.0.1."""

from __future__ import annotations

import hashlib
import secrets as pysecrets
import shutil
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import REPO_ROOT, GuestBuild, start_server, wait_until

pytestmark = pytest.mark.timeout(900)

TESTS = Path(__file__).resolve().parent
RUST_PROBE = REPO_ROOT / "target" / "guests" / "capability_probe" / "model.wasm"
MARKER = "TESSERA-SECRET-" + pysecrets.token_hex(8)
KEYS = {"a": "tenant-a-key-0123456789", "b": "tenant-b-key-0123456789", "ops": "ops-key-0123456789"}
GRANTED = ("cap_rust", "cap_py")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def config(name: str, backend: str, **parameters: str) -> str:
    params = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in parameters.items())
    return (f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 0\n'
            'input [ { name: "OP" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n' + params)


def add_model(repo: Path, name: str, lang: str | Path = "rust", **parameters: str) -> None:
    """The probe as model `name`: `lang` is rust, python, or the path of another built probe."""
    version = repo / name / "1"
    version.mkdir(parents=True)
    if lang == "python":
        shutil.copy(TESTS / "guests" / "capability_py" / "model.py", version / "model.py")
    else:
        shutil.copy(RUST_PROBE if lang == "rust" else lang, version / "model.wasm")
    (repo / name / "config.pbtxt").write_text(config(name, "python" if lang == "python" else "wasm", **parameters))


def ask(srv, model: str, op: str, tenant: str | None = "a") -> str:
    """The probe's answer to `op`, or InferenceServerException with its error."""
    headers = {"Authorization": f"Bearer {KEYS[tenant]}"} if tenant else None
    client = httpclient.InferenceServerClient(srv.url)
    try:
        inp = httpclient.InferInput("OP", [1], "BYTES")
        inp.set_data_from_numpy(np.array([op.encode()], dtype=np.object_))
        return client.infer(model, [inp], headers=headers).as_numpy("OUT")[0].decode()
    finally:
        client.close()


def refused(srv, model: str, op: str, tenant: str | None = "a") -> str:
    with pytest.raises(InferenceServerException) as info:
        ask(srv, model, op, tenant)
    return str(info.value)


@pytest.fixture(scope="module")
def probe_built():
    if not RUST_PROBE.is_file():
        pytest.fail(f"{RUST_PROBE} is missing: run scripts/build-guests.sh (scripts/setup.sh runs it)", pytrace=False)


@pytest.fixture(scope="module")
def world(probe_built, tmp_path_factory):
    """A server with a secrets file, a tenants file, traces to a file and every directory it
    writes to under one root, which the marker test searches."""
    root = tmp_path_factory.mktemp("capabilities")
    repo = root / "repo"
    js_probe = GuestBuild(TESTS / "guests" / "capability_js", root / "build" / "capability_js.wasm", root / "build").wait()
    common = {"config.endpoint": "http://svc.local:8080", "keyvalue": "memory", "keyvalue_max_bytes": "4096"}
    add_model(repo, "cap_rust", **common)
    add_model(repo, "cap_py", "python", **common)
    add_model(repo, "cap_js", js_probe, **common)
    add_model(repo, "cap_js_none", js_probe)
    add_model(repo, "cap_none")
    add_model(repo, "cap_broken")
    add_model(repo, "cap_too_big", keyvalue="memory", keyvalue_max_bytes=str(1 << 40))
    (root / "secrets.toml").write_text(
        '[secrets.api_key]\nenv = "TESSERA_TEST_MARKER"\nmodels = ["cap_rust", "cap_py", "cap_js"]\n\n'
        '[secrets.missing]\nenv = "TESSERA_TEST_UNSET_VARIABLE"\nmodels = ["cap_broken"]\n')
    (root / "tenants.toml").write_text("".join(
        f'[[tenant]]\nname = "{name}"\nmodels = ["cap_*"]\n{roles}keys = [{{ id = "{name}-1", sha256 = "{sha(key)}" }}]\n\n'
        for name, key, roles in [("a", KEYS["a"], ""), ("b", KEYS["b"], ""),
                                 ("ops", KEYS["ops"], 'roles = ["infer", "repository", "metrics"]\n')]))
    dirs = {name: root / name for name in ("traces", "cache", "tmp", "kv", "logs")}
    for d in dirs.values():
        d.mkdir()
    loaded = ["cap_rust", "cap_py", "cap_none", "cap_js", "cap_js_none"]
    flags = ["--model-control-mode=explicit", *[f"--load-model={m}" for m in loaded],
             f"--guest-secrets={root / 'secrets.toml'}", f"--tenants={root / 'tenants.toml'}",
             f"--guest-keyvalue-dir={dirs['kv']}", f"--wasm-cache-dir={dirs['cache']}",
             "--log-verbose=1", "--log-requests=true",
             "--trace-config", f"triton,file={dirs['traces'] / 'trace.json'}", "--trace-config", "triton,log-frequency=1",
             "--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS"]
    srv = start_server(dirs["logs"], [repo], flags, env={"TESSERA_TEST_MARKER": MARKER, "TMPDIR": str(dirs["tmp"])})
    try:
        ops = {"Authorization": f"Bearer {KEYS['ops']}"}
        for model in loaded:  # a model's readiness is the tenants'
            url = srv.http(f"/v2/models/{model}/ready")
            wait_until(lambda: requests.get(url, headers=ops, timeout=30).status_code == 200, 600,
                       f"{model} ready", srv)
        yield srv, root
    finally:
        srv.stop_and_check()


@pytest.mark.parametrize("model", GRANTED)
def test_a_granted_model_reads_its_secret_and_config_values(world, model):
    srv, _ = world
    assert ask(srv, model, "config:api_key") == MARKER[::-1]
    assert ask(srv, model, "config:endpoint") == "http://svc.local:8080"[::-1]
    assert ask(srv, model, "config-keys") == "api_key,endpoint"
    assert ask(srv, model, "config:keyvalue") == "<absent>", "only config.* parameters are values"


def test_a_javascript_guest_imports_the_standard_interfaces_by_their_wit_names(world):
    srv, _ = world
    assert ask(srv, "cap_js", "config:api_key") == MARKER[::-1]
    assert ask(srv, "cap_js", "config:endpoint") == "http://svc.local:8080"[::-1]
    assert [ask(srv, "cap_js", "count:js", t) for t in ("a", "a", "b")] == ["1", "2", "1"]
    assert ask(srv, "cap_js_none", "config:api_key") == "<absent>"
    assert "access-denied" in refused(srv, "cap_js_none", "count:js")


def test_a_model_granted_nothing_reads_nothing_and_has_no_store(world):
    srv, _ = world
    assert ask(srv, "cap_none", "config:api_key") == "<absent>"
    assert ask(srv, "cap_none", "config-keys") == ""
    assert "has no key-value store" in refused(srv, "cap_none", "count:c")


@pytest.mark.parametrize("model", GRANTED)
def test_counts_are_kept_per_model_and_per_tenant(world, model):
    srv, _ = world
    bucket = f"count-{model}"
    assert [ask(srv, model, f"count:{bucket}", "a") for _ in range(3)] == ["1", "2", "3"]
    assert ask(srv, model, f"count:{bucket}", "b") == "1", "tenant b has a space of its own"
    assert ask(srv, model, f"set:{bucket}:note:from-a", "a") == "ok"
    assert ask(srv, model, f"get:{bucket}:note", "b") == "<absent>"
    assert ask(srv, model, f"keys:{bucket}", "a") == "n,note"
    other = "cap_py" if model == "cap_rust" else "cap_rust"
    assert ask(srv, other, f"get:{bucket}:note", "a") == "<absent>", "another model's store is apart"


@pytest.mark.parametrize("model", GRANTED)
def test_a_write_past_the_quota_is_refused_and_the_store_serves_on(world, model):
    srv, _ = world
    message = refused(srv, model, "set:q:big:" + "x" * 5000)
    assert "past its quota of 4096" in message, message
    assert ask(srv, model, "get:q:big") == "<absent>"
    assert ask(srv, model, "set:q:small:y") == "ok"


def test_a_grant_the_server_cannot_keep_leaves_the_model_unavailable_with_the_reason(world):
    srv, _ = world
    ops = {"Authorization": f"Bearer {KEYS['ops']}"}
    r = requests.post(srv.http("/v2/repository/models/cap_broken/load"), headers=ops, timeout=120)
    assert r.status_code == 400, r.text
    assert "secret 'missing': its environment variable is not set" in r.json()["error"], r.text
    r = requests.post(srv.http("/v2/repository/models/cap_too_big/load"), headers=ops, timeout=120)
    assert r.status_code == 400, r.text
    assert "this server grants at most 67108864 (--guest-keyvalue-max-bytes)" in r.json()["error"], r.text
    index = requests.post(srv.http("/v2/repository/index"), headers=ops, json={}, timeout=30).json()
    states = {m["name"]: (m.get("state"), m.get("reason", "")) for m in index}
    assert states["cap_broken"][0] == "UNAVAILABLE" and "secret 'missing'" in states["cap_broken"][1], states
    assert ask(srv, "cap_rust", "config:endpoint") == "http://svc.local:8080"[::-1], "the others serve on"


def test_the_secret_appears_in_no_log_trace_metric_cache_or_temporary_file(world):
    srv, root = world
    for model in GRANTED:  # read it again now, in a traced and logged request
        assert ask(srv, model, "config:api_key") == MARKER[::-1]
    metrics = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics",
                           headers={"Authorization": f"Bearer {KEYS['ops']}"}, timeout=10)
    assert metrics.status_code == 200
    assert MARKER not in metrics.text
    searched = 0
    for path in root.rglob("*"):
        if path.is_file() and path.name != "secrets.toml":
            searched += 1
            assert MARKER.encode() not in path.read_bytes(), f"the secret's value is in {path}"
    assert searched >= 5, "the log, traces and cache were searched"
    assert any((root / "traces").iterdir()), "traces were written"
    assert any((root / "cache").rglob("*")), "compiled components were cached"


def test_a_persistent_store_outlives_the_server(probe_built, tmp_path):
    repo = tmp_path / "repo"
    add_model(repo, "cap_kept", keyvalue="persistent")
    kv = tmp_path / "kv"
    flags = [f"--guest-keyvalue-dir={kv}", f"--wasm-cache-dir={tmp_path / 'cache'}"]
    counts = []
    for run in range(2):
        srv = start_server(tmp_path / f"logs{run}", [repo], flags, ready=["cap_kept"])
        try:
            counts += [ask(srv, "cap_kept", "count:runs", None) for _ in range(2)]
        finally:
            srv.stop_and_check()
    assert counts == ["1", "2", "3", "4"]
    assert len(list(kv.glob("*.tkv"))) == 1


@pytest.fixture(scope="module")
def isolation(probe_built, tmp_path_factory):
    """The probe under `isolation = reuse` (the default) and `fresh`, in Rust and Python, the
    fresh ones with a key-value store, which outlives their instances by design."""
    root = tmp_path_factory.mktemp("isolation")
    repo = root / "repo"
    for lang, suffix in (("rust", "rust"), ("python", "py")):
        add_model(repo, f"iso_{suffix}_reuse", lang)
        add_model(repo, f"iso_{suffix}_fresh", lang, isolation="fresh", keyvalue="memory")
    add_model(repo, "iso_bad", isolation="sometimes")
    models = [f"iso_{s}_{m}" for s in ("rust", "py") for m in ("reuse", "fresh")]
    srv = start_server(root / "logs", [repo], ["--model-control-mode=explicit", *[f"--load-model={m}" for m in models]],
                       ready=models, ready_deadline=600)
    try:
        yield srv
    finally:
        srv.stop_and_check()


@pytest.mark.parametrize("lang", ["rust", "py"])
def test_fresh_isolation_gives_every_execution_a_new_instance(isolation, lang):
    srv = isolation
    assert [ask(srv, f"iso_{lang}_reuse", "calls", None) for _ in range(3)] == ["1", "2", "3"]
    assert [ask(srv, f"iso_{lang}_fresh", "calls", None) for _ in range(3)] == ["1", "1", "1"]
    # What the guest keeps on purpose, in its key-value store, outlives the instances.
    assert [ask(srv, f"iso_{lang}_fresh", "count:c", None) for _ in range(3)] == ["1", "2", "3"]


def test_an_unknown_isolation_mode_fails_the_load_and_says_so(isolation):
    r = requests.post(isolation.http("/v2/repository/models/iso_bad/load"), timeout=120)
    assert r.status_code == 400, r.text
    assert "parameter 'isolation' must be reuse or fresh" in r.json()["error"], r.text
