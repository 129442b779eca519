"""Model repository behaviour: index, control modes (none / explicit / poll), version policies,
broken configurations, auto-completed configs and reshape. Each custom repository is built under
tmp_path from the quickstart models; every server here is started for the test (or module) only.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import (
    quickstart_models,
    EXPECT,
    POLL_MODE_DEADLINE,
    add_sub_config,
    add_version_dir,
    copy_model,
    index_entries,
    model_ready,
    post_infer,
    quickstart_repo,
    remove_tree_atomic,
    repository_index,
    simple_json_request,
    start_server,
    wait_model_not_ready,
    wait_model_ready,
    wait_until,
    write_atomic,
)

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def infer_add_sub(url: str, model: str, batch: int = 1, dtype=np.float32, shape=None, version: str = ""):
    """Infer on an add_sub-like model and check the results; returns the InferResult."""
    shape = shape or [batch, 16]
    tname = "FP32" if dtype == np.float32 else "INT32"
    rng = np.random.default_rng(batch)
    a = rng.integers(-50, 50, size=shape).astype(dtype)
    b = rng.integers(-50, 50, size=shape).astype(dtype)
    c = httpclient.InferenceServerClient(url)
    try:
        inputs = []
        for n, arr in (("INPUT0", a), ("INPUT1", b)):
            i = httpclient.InferInput(n, list(arr.shape), tname)
            i.set_data_from_numpy(arr)
            inputs.append(i)
        result = c.infer(model, inputs, model_version=version)
    finally:
        c.close()
    return result, a, b


def check_sum_diff(result, a, b, out_shape=None):
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    out_shape = tuple(out_shape or a.shape)
    assert out0.shape == out_shape and out1.shape == out_shape, (out0.shape, out1.shape, out_shape)
    np.testing.assert_array_equal(out0, (a + b).reshape(out_shape))
    np.testing.assert_array_equal(out1, (a - b).reshape(out_shape))


def state_of(index, model, version=None):
    entries = index_entries(index, model)
    if version is not None:
        entries = [e for e in entries if str(e.get("version", "")) == str(version)]
    return entries


def mentions_line(reason: str, line: int) -> bool:
    """'line 3', 'line: 3', 'config.pbtxt:3:17', '3:17' (paths stripped first, they may hold digits)."""
    text = re.sub(r"(/[^\s'\"]*)+/(?=config\.pbtxt)", "", reason)
    return re.search(rf"(line\s*:?\s*{line}\b|config\.pbtxt:{line}\b|(?<![\w./-]){line}:\d+\b)", text, re.I) is not None


def client_for(server):
    return httpclient.InferenceServerClient(server.url, network_timeout=60.0)


# ---------------------------------------------------------------------------------------------
# Repository index (shared quickstart server, control mode none)
# ---------------------------------------------------------------------------------------------

def test_repository_index(server):
    index = repository_index(server)
    for m in ("add_sub", "simple", "classifier"):
        entries = state_of(index, m)
        assert entries == [{"name": m, "version": "1", "state": "READY"}], index
    ready_only = repository_index(server, {"ready": True})
    assert {e["name"] for e in ready_only} >= {"add_sub", "simple", "classifier"}
    assert all(e["state"] == "READY" for e in ready_only)


def test_repository_index_via_client(server):
    c = client_for(server)
    try:
        index = c.get_model_repository_index()
    finally:
        c.close()
    assert {e["name"] for e in index} == quickstart_models()


def test_load_unload_rejected_in_none_mode(server_factory):
    srv = server_factory(quickstart_repo())
    wait_model_ready(srv, "add_sub")
    c = client_for(srv)
    try:
        for call in (c.unload_model, c.load_model):
            with pytest.raises(InferenceServerException) as ei:
                call("add_sub")
            assert ei.value.status() == str(EXPECT["load_in_none_mode"]), ei.value
            assert "explicit model load / unload is not allowed" in ei.value.message()
        assert c.is_model_ready("add_sub"), "a rejected unload must leave the model loaded"
    finally:
        c.close()
    check_sum_diff(*infer_add_sub(srv.url, "add_sub"))


def test_multiple_model_repositories(server_factory, tmp_path):
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    copy_model(r1, "simple")
    copy_model(r2, "add_sub")
    srv = server_factory([r1, r2])
    wait_model_ready(srv, "simple")
    wait_model_ready(srv, "add_sub")
    check_sum_diff(*infer_add_sub(srv.url, "add_sub"))
    assert {e["name"] for e in repository_index(srv)} == {"simple", "add_sub"}


# ---------------------------------------------------------------------------------------------
# Explicit model control
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def explicit_server(server_factory):
    srv = server_factory(quickstart_repo(), ["--model-control-mode", "explicit", "--load-model", "simple"])
    wait_model_ready(srv, "simple")
    return srv


def test_explicit_mode_loads_only_requested(explicit_server):
    srv = explicit_server
    assert model_ready(srv, "simple")
    assert not model_ready(srv, "add_sub")
    assert not model_ready(srv, "classifier")
    index = repository_index(srv)
    assert {e["name"] for e in index} == quickstart_models(), index
    (simple,) = state_of(index, "simple")
    assert simple == {"name": "simple", "version": "1", "state": "READY"}
    for m in ("add_sub", "classifier"):
        assert state_of(index, m) == [{"name": m}], "a never-loaded model is listed by name only"
    assert repository_index(srv, {"ready": True}) == [simple]
    r = post_infer(srv, "add_sub", {"inputs": []})
    assert r.status_code == EXPECT["unknown_model"] and "'add_sub' is not found" in r.json()["error"], r.text


def test_explicit_load_and_unload(explicit_server):
    srv = explicit_server
    c = client_for(srv)
    try:
        c.load_model("add_sub")
        assert c.is_model_ready("add_sub"), "load_model returned but the model is not ready"
        check_sum_diff(*infer_add_sub(srv.url, "add_sub"))
        (e,) = state_of(repository_index(srv), "add_sub")
        assert e["state"] == "READY" and e["version"] == "1"

        c.unload_model("add_sub")
        wait_model_not_ready(srv, "add_sub")
        # UNLOADING first, then UNAVAILABLE with reason "unloaded"
        wait_until(lambda: state_of(repository_index(srv), "add_sub")
                   == [{"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}],
                   30, "the index shows add_sub UNAVAILABLE (unloaded)", srv)
        with pytest.raises(InferenceServerException) as ei:
            infer_add_sub(srv.url, "add_sub")
        assert ei.value.status() == "404" and "'add_sub' has no available versions" in ei.value.message()
        c.unload_model("add_sub")  # unloading again is fine
        c.unload_model("no_such_model")  # so is unloading an unknown model (Triton: 200)

        # loading again works, and (re)loading an already loaded model is fine
        c.load_model("add_sub")
        c.load_model("simple")
        assert c.is_model_ready("add_sub") and c.is_model_ready("simple")
        check_sum_diff(*infer_add_sub(srv.url, "add_sub", batch=3))
    finally:
        c.close()


def test_explicit_load_with_config_override(explicit_server):
    srv = explicit_server
    cfg = {
        "name": "add_sub",
        "backend": "onnxruntime",
        "max_batch_size": 4,
        "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
        "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")],
    }
    c = client_for(srv)
    try:
        c.load_model("add_sub", config=json.dumps(cfg))
        assert c.is_model_ready("add_sub")
        assert c.get_model_config("add_sub")["max_batch_size"] == 4
        check_sum_diff(*infer_add_sub(srv.url, "add_sub", batch=4))
        with pytest.raises(InferenceServerException) as ei:
            infer_add_sub(srv.url, "add_sub", batch=5)
        assert "4" in ei.value.message()
        # loading without override goes back to the on-disk config (max_batch_size 8)
        c.load_model("add_sub")
        assert c.get_model_config("add_sub")["max_batch_size"] == 8
        check_sum_diff(*infer_add_sub(srv.url, "add_sub", batch=8))
    finally:
        c.close()


def test_explicit_load_with_invalid_config_override(explicit_server):
    srv = explicit_server
    c = client_for(srv)
    try:
        with pytest.raises(InferenceServerException) as ei:
            c.load_model("add_sub", config="{ this is not json")
        assert ei.value.status() == str(EXPECT["load_bad_override"]), ei.value
        assert "add_sub" in ei.value.message()
        assert not c.is_model_ready("add_sub")
        assert c.is_model_ready("simple")
    finally:
        c.close()


def test_explicit_load_unknown_model(explicit_server):
    srv = explicit_server
    c = client_for(srv)
    try:
        with pytest.raises(InferenceServerException) as ei:
            c.load_model("no_such_model")
        assert "failed to load 'no_such_model'" in ei.value.message()
        assert ei.value.status() == str(EXPECT["load_unknown_model"]), ei.value.status()
        assert c.is_model_ready("simple")
    finally:
        c.close()


def test_explicit_load_model_star(server_factory):
    srv = server_factory(quickstart_repo(), ["--model-control-mode", "explicit", "--load-model", "*"])
    for m in ("simple", "add_sub", "classifier"):
        wait_model_ready(srv, m)


def test_explicit_mode_nothing_loaded_by_default(server_factory):
    srv = server_factory(quickstart_repo(), ["--model-control-mode", "explicit"])
    index = repository_index(srv)
    assert {e["name"] for e in index} == quickstart_models()
    assert index == [{"name": m} for m in sorted(m["name"] for m in index)], index
    c = client_for(srv)
    try:
        c.load_model("classifier")
        assert c.is_model_ready("classifier")
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# Poll mode
# ---------------------------------------------------------------------------------------------

POLL_ARGS = ["--model-control-mode", "poll", "--repository-poll-secs", "1"]


@pytest.fixture
def poll_setup(server_factory, repo):
    copy_model(repo, "simple")
    copy_model(repo, "add_sub")
    srv = server_factory(repo, POLL_ARGS)
    wait_model_ready(srv, "simple")
    wait_model_ready(srv, "add_sub")
    return srv, repo


def test_poll_picks_up_new_model(poll_setup):
    srv, repo = poll_setup
    assert not model_ready(srv, "add_sub_copy")
    copy_model(repo, "add_sub", "add_sub_copy")
    wait_model_ready(srv, "add_sub_copy", deadline=POLL_MODE_DEADLINE)
    check_sum_diff(*infer_add_sub(srv.url, "add_sub_copy"))
    assert model_ready(srv, "simple") and model_ready(srv, "add_sub")


def test_poll_picks_up_new_version(poll_setup):
    srv, repo = poll_setup
    add_version_dir(repo / "simple", 2)
    # default version policy is latest { num_versions: 1 }: 2 replaces 1
    wait_model_ready(srv, "simple", version=2, deadline=POLL_MODE_DEADLINE)
    wait_model_not_ready(srv, "simple", version=1, deadline=POLL_MODE_DEADLINE)
    result, a, b = infer_add_sub(srv.url, "simple", dtype=np.int32)
    check_sum_diff(result, a, b)
    assert result.get_response()["model_version"] == "2"


def test_poll_notices_removed_model(poll_setup):
    srv, repo = poll_setup
    remove_tree_atomic(repo / "add_sub")
    wait_model_not_ready(srv, "add_sub", deadline=POLL_MODE_DEADLINE)
    r = post_infer(srv, "add_sub", {"inputs": []})
    assert r.status_code != 200
    assert model_ready(srv, "simple")
    assert not any(e.get("state") == "READY" for e in state_of(repository_index(srv), "add_sub"))


def test_poll_notices_removed_version(poll_setup):
    srv, repo = poll_setup
    cfg = repo / "add_sub" / "config.pbtxt"
    write_atomic(cfg, add_sub_config("add_sub", extra="version_policy: { all: {} }"))
    add_version_dir(repo / "add_sub", 2, src_name="add_sub")
    wait_model_ready(srv, "add_sub", version=2, deadline=POLL_MODE_DEADLINE)
    assert model_ready(srv, "add_sub", version=1)
    remove_tree_atomic(repo / "add_sub" / "2")
    wait_model_not_ready(srv, "add_sub", version=2, deadline=POLL_MODE_DEADLINE)
    assert model_ready(srv, "add_sub", version=1)


def test_poll_reloads_changed_config(poll_setup):
    srv, repo = poll_setup
    c = client_for(srv)
    try:
        assert c.get_model_config("add_sub")["max_batch_size"] == 8
        write_atomic(repo / "add_sub" / "config.pbtxt", add_sub_config("add_sub", max_batch_size=4))
        wait_until(lambda: c.get_model_config("add_sub").get("max_batch_size") == 4,
                   POLL_MODE_DEADLINE, "add_sub is reloaded with max_batch_size 4", srv)
        wait_model_ready(srv, "add_sub")
        check_sum_diff(*infer_add_sub(srv.url, "add_sub", batch=4))
        with pytest.raises(InferenceServerException):
            infer_add_sub(srv.url, "add_sub", batch=5)
    finally:
        c.close()


def test_poll_broken_edit_then_fix(poll_setup):
    """Breaking a config while polling must not take the server (or other models) down; the fix is
    picked up. (Whether the old add_sub keeps serving while its new config is broken is left open,
    but if it says it is ready it must answer correctly.)"""
    srv, repo = poll_setup
    log_offset = len(srv.log_text())
    write_atomic(repo / "add_sub" / "config.pbtxt", 'name: "add_sub"\nmax_batch_size: : 8\n')

    def noticed():
        if not model_ready(srv, "add_sub"):
            return True
        if any(e.get("state") == "UNAVAILABLE" or e.get("reason") for e in state_of(repository_index(srv), "add_sub")):
            return True
        return "add_sub" in srv.log_text()[log_offset:]

    wait_until(noticed, POLL_MODE_DEADLINE, "the broken add_sub config is noticed", srv)
    assert model_ready(srv, "simple")
    if model_ready(srv, "add_sub"):
        check_sum_diff(*infer_add_sub(srv.url, "add_sub"))
    write_atomic(repo / "add_sub" / "config.pbtxt", add_sub_config("add_sub", max_batch_size=2))
    c = client_for(srv)
    try:
        wait_until(lambda: model_ready(srv, "add_sub") and c.get_model_config("add_sub")["max_batch_size"] == 2,
                   POLL_MODE_DEADLINE, "the fixed add_sub config is loaded", srv)
    finally:
        c.close()
    check_sum_diff(*infer_add_sub(srv.url, "add_sub", batch=2))


def test_load_rejected_in_poll_mode(poll_setup):
    srv, _ = poll_setup
    c = client_for(srv)
    try:
        with pytest.raises(InferenceServerException):
            c.load_model("add_sub")
        assert c.is_model_ready("add_sub")
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# Version policies (one server, three models with versions 1, 2, 3)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def versions_server(tmp_path_factory, tessera_binary):
    root = tmp_path_factory.mktemp("versions")
    repo = root / "repo"
    policies = {
        "latest2": "version_policy: { latest: { num_versions: 2 } }",
        "all_versions": "version_policy: { all: {} }",
        "specific13": "version_policy: { specific: { versions: [ 1, 3 ] } }",
        "default_policy": "",
    }
    for name, policy in policies.items():
        copy_model(repo, "add_sub", name, versions=(1, 2, 3), config=add_sub_config(name, extra=policy))
    srv = start_server(root / "logs", [repo], name="versions", ready=list(policies))
    yield srv
    srv.stop_and_check()


def _ready_versions(srv, model):
    return {v for v in (1, 2, 3) if model_ready(srv, model, v)}


@pytest.mark.parametrize("model,expected", [
    ("latest2", {2, 3}),
    ("all_versions", {1, 2, 3}),
    ("specific13", {1, 3}),
    ("default_policy", {3}),
])
def test_version_policy(versions_server, model, expected):
    srv = versions_server
    assert _ready_versions(srv, model) == expected
    c = client_for(srv)
    try:
        meta = c.get_model_metadata(model)
    finally:
        c.close()
    assert {int(v) for v in meta["versions"]} == expected, meta
    index = repository_index(srv)
    ready = {int(e["version"]) for e in state_of(index, model) if e.get("state") == "READY"}
    assert ready == expected, index
    # unversioned requests go to the highest available version
    result, a, b = infer_add_sub(srv.url, model)
    check_sum_diff(result, a, b)
    assert result.get_response()["model_version"] == str(max(expected))
    for v in expected:
        result, a, b = infer_add_sub(srv.url, model, version=str(v))
        check_sum_diff(result, a, b)
        assert result.get_response()["model_version"] == str(v)
    for v in {1, 2, 3} - expected:
        r = post_infer(srv, model, {"inputs": []}, version=v)
        assert r.status_code == EXPECT["unknown_version"], f"version {v} of {model} should not serve: {r.text}"
        assert f"'{model}' version {v} is not found" in r.json()["error"], r.text


# ---------------------------------------------------------------------------------------------
# Broken models: only they become unavailable (server runs with --exit-on-error false)
# ---------------------------------------------------------------------------------------------

SYNTAX_ERROR_LINE = 3
BROKEN = {
    # line 3 has a syntax error
    "broken_syntax": 'name: "broken_syntax"\nbackend: "onnxruntime"\nmax_batch_size: : 8\n',
    # line 4 names a field that ModelConfig does not have
    "unknown_field": 'name: "unknown_field"\nbackend: "onnxruntime"\nmax_batch_size: 8\nno_such_field: 1\n',
    # the config's name is not the directory's
    "name_mismatch": add_sub_config("something_else"),
    # dims disagree with the ONNX model ([batch, 16])
    "wrong_dims": add_sub_config("wrong_dims", input_dims="[ 15 ]", output_dims="[ 15 ]"),
}


@pytest.fixture(scope="module")
def broken_server(tmp_path_factory, tessera_binary):
    root = tmp_path_factory.mktemp("broken")
    repo = root / "repo"
    copy_model(repo, "simple")
    copy_model(repo, "add_sub")
    for name, cfg in BROKEN.items():
        copy_model(repo, "add_sub", name, config=cfg)
    # a model directory without any version directory
    (repo / "no_versions").mkdir()
    (repo / "no_versions" / "config.pbtxt").write_text(add_sub_config("no_versions"))
    srv = start_server(root / "logs", [repo], ["--exit-on-error", "false"], name="broken",
                       ready=["simple", "add_sub"])
    srv.repo = repo
    yield srv
    srv.stop_and_check()


def _unavailable_reason(srv, model) -> str:
    entries = state_of(repository_index(srv), model)
    assert entries, f"{model} is missing from the repository index"
    assert all(e.get("state") == "UNAVAILABLE" for e in entries), entries
    reason = " ".join(e.get("reason", "") for e in entries)
    assert reason.strip(), f"no reason given for {model}: {entries}"
    return reason


def test_good_models_unaffected_by_broken_ones(broken_server):
    srv = broken_server
    assert model_ready(srv, "simple") and model_ready(srv, "add_sub")
    check_sum_diff(*infer_add_sub(srv.url, "add_sub"))
    assert requests.get(srv.http("/v2/health/live"), timeout=10).status_code == 200


@pytest.mark.parametrize("model", sorted(list(BROKEN) + ["no_versions"]))
def test_broken_model_not_ready(broken_server, model):
    srv = broken_server
    assert not model_ready(srv, model)
    r = requests.get(srv.http(f"/v2/models/{model}/ready"), timeout=10)
    assert r.status_code == EXPECT["model_not_ready"]
    r = post_infer(srv, model, simple_json_request())
    assert r.status_code == EXPECT["unknown_model"], r.text
    assert f"Request for unknown model: '{model}'" in r.json()["error"], r.text


def test_syntax_error_reason_names_file_and_line(broken_server):
    reason = _unavailable_reason(broken_server, "broken_syntax")
    assert "config.pbtxt" in reason, reason
    assert mentions_line(reason, SYNTAX_ERROR_LINE), f"no line number {SYNTAX_ERROR_LINE} in: {reason!r}"


def test_unknown_field_reason(broken_server):
    reason = _unavailable_reason(broken_server, "unknown_field")
    assert "no_such_field" in reason, reason
    assert "config.pbtxt" in reason, reason


def test_name_mismatch_rejected(broken_server):
    reason = _unavailable_reason(broken_server, "name_mismatch")
    assert "something_else" in reason and "name_mismatch" in reason, reason
    assert not model_ready(broken_server, "something_else")


def test_wrong_dims_rejected(broken_server):
    reason = _unavailable_reason(broken_server, "wrong_dims")
    assert "INPUT0" in reason or "OUTPUT0" in reason or "dims" in reason.lower() or "shape" in reason.lower(), reason


def test_no_versions_reason(broken_server):
    reason = _unavailable_reason(broken_server, "no_versions")
    assert "version" in reason.lower(), reason


def test_server_not_ready_while_models_broken(broken_server):
    """Triton: /v2/health/ready is false while any model failed to load; live stays true."""
    srv = broken_server
    assert requests.get(srv.http("/v2/health/live"), timeout=10).status_code == 200
    assert requests.get(srv.http("/v2/health/ready"), timeout=10).status_code == EXPECT["server_not_ready"]


# ---------------------------------------------------------------------------------------------
# Auto-complete (no config.pbtxt) and strict mode
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [["--strict-model-config", "false"], []], ids=["strict-false", "default"])
def test_autocomplete_config_from_onnx(server_factory, repo, flags):
    copy_model(repo, "add_sub", "auto", with_config=False)
    assert not (repo / "auto" / "config.pbtxt").exists()
    srv = server_factory(repo, flags)
    wait_model_ready(srv, "auto")
    c = client_for(srv)
    try:
        meta = c.get_model_metadata("auto")
        cfg = c.get_model_config("auto")
    finally:
        c.close()
    assert meta["name"] == "auto"
    ins = {t["name"]: t for t in meta["inputs"]}
    outs = {t["name"]: t for t in meta["outputs"]}
    assert set(ins) == {"INPUT0", "INPUT1"} and set(outs) == {"OUTPUT0", "OUTPUT1"}
    assert all(t["datatype"] == "FP32" for t in [*ins.values(), *outs.values()])
    assert ins["INPUT0"]["shape"][-1] == 16
    assert cfg["name"] == "auto"
    assert cfg.get("backend") == "onnxruntime" or cfg.get("platform") == "onnxruntime_onnx"
    # As Triton: every dim 0 of the model is dynamic, so batching is on with the default max batch 4.
    assert cfg["max_batch_size"] == 4, cfg
    assert ins["INPUT0"]["shape"] == [-1, 16]
    shape = [1 if d == -1 else d for d in ins["INPUT0"]["shape"]]
    result, a, b = infer_add_sub(srv.url, "auto", shape=shape)
    check_sum_diff(result, a, b)


def test_strict_model_config_requires_config(server_factory, repo):
    copy_model(repo, "add_sub", "auto", with_config=False)
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--strict-model-config", "true", "--exit-on-error", "false"])
    wait_model_ready(srv, "simple")
    assert not model_ready(srv, "auto")
    entries = state_of(repository_index(srv), "auto")
    assert all(e.get("state") != "READY" for e in entries), entries


# ---------------------------------------------------------------------------------------------
# Reshape
# ---------------------------------------------------------------------------------------------

def test_reshape_inputs_and_outputs(server_factory, repo):
    copy_model(repo, "add_sub", "reshaped_in",
               config=add_sub_config("reshaped_in", input_dims="[ 4, 4 ]", input_extra="reshape: { shape: [ 16 ] }"))
    out_reshape = add_sub_config("reshaped_out", output_dims="[ 4, 4 ]")
    out_reshape = out_reshape.replace(
        'data_type: TYPE_FP32\n    dims: [ 4, 4 ]\n',
        'data_type: TYPE_FP32\n    dims: [ 4, 4 ]\n    reshape: { shape: [ 16 ] }\n')
    assert out_reshape.count("reshape:") == 2
    copy_model(repo, "add_sub", "reshaped_out", config=out_reshape)
    srv = server_factory(repo)
    wait_model_ready(srv, "reshaped_in")
    wait_model_ready(srv, "reshaped_out")

    c = client_for(srv)
    try:
        meta_in = c.get_model_metadata("reshaped_in")
        meta_out = c.get_model_metadata("reshaped_out")
    finally:
        c.close()
    assert all(t["shape"] == [-1, 4, 4] for t in meta_in["inputs"]), meta_in
    assert all(t["shape"] == [-1, 16] for t in meta_in["outputs"]), meta_in
    assert all(t["shape"] == [-1, 4, 4] for t in meta_out["outputs"]), meta_out

    result, a, b = infer_add_sub(srv.url, "reshaped_in", shape=[2, 4, 4])
    check_sum_diff(result, a, b, out_shape=(2, 16))
    result, a, b = infer_add_sub(srv.url, "reshaped_out", shape=[3, 16])
    check_sum_diff(result, a, b, out_shape=(3, 4, 4))
    # the un-reshaped form is rejected for the reshaped input
    with pytest.raises(InferenceServerException) as ei:
        infer_add_sub(srv.url, "reshaped_in", shape=[1, 16])
    assert "INPUT" in ei.value.message()


def test_unimplemented_config_fields_are_accepted_and_logged_once(server_factory, repo):
    extra = (
        "optimization { graph { level: 1 } }\n"
        "model_repository_agents { agents [ { name: \"checksum\" } ] }\n"
    )
    for name in ("fancy_a", "fancy_b"):
        copy_model(repo, "add_sub", name, config=add_sub_config(name, extra=extra))
    srv = server_factory(repo)
    wait_model_ready(srv, "fancy_a")
    wait_model_ready(srv, "fancy_b")
    result, a, b = infer_add_sub(srv.url, "fancy_b")
    check_sum_diff(result, a, b)
    log = srv.log_text()
    for field in ("optimization", "model_repository_agents"):
        lines = [l for l in log.splitlines() if "ignored" in l and field in l]
        assert len(lines) == 1, f"{field} should be logged as ignored exactly once:\n{log}"
