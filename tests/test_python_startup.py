"""Startup with a repository of many model.py models: their builds run at once (up to
`--python-guest-build-jobs`, by default one per CPU as memory allows), ahead of the model-load
threads; a build that fails names the model's file, the line and the cause in the model's reason
(from the Python traceback, without the server's paths); the other models serve. With Triton's
default `--exit-on-error=true` the server exits, the log saying why.

Every model's source carries a token of its own, so nothing comes from the build cache."""

from __future__ import annotations

import re
import uuid

import pytest
import requests

from tessera_testlib import REPO_ROOT, index_entries, repository_index, wait_model_ready, wait_until

pytestmark = pytest.mark.timeout(900)
BUILD_DEADLINE = 600.0

GOOD = '''# {token}
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_list(),
                                                            "FP32")]) for r in requests]
'''

# A sibling module with a syntax error on its third line.
BROKEN_HELPER = '''# {token}
X = 1
def scale(:
    return X
'''
IMPORTS_HELPER = '''# {token}
from helper import scale


class TritonPythonModel:
    pass
'''

# Raises at import (module level runs when the guest is built), in a function called from line 9.
RAISES = '''# {token}
import triton_python_backend_utils as pb_utils


def read_settings():
    raise RuntimeError("settings file missing")


SETTINGS = read_settings()


class TritonPythonModel:
    pass
'''

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
'''

GOOD_MODELS = ["good_a", "good_b", "good_c", "good_d"]
REASONS = {
    "bad_sibling": "building model.py failed: helper.py line 3: SyntaxError: invalid syntax",
    "bad_import": "building model.py failed: model.py line 6: RuntimeError: settings file missing",
}


def write_repo(root, good=GOOD_MODELS):
    token = uuid.uuid4().hex
    repo = root / "repo"
    files = {name: {"model.py": GOOD} for name in good}
    files["bad_sibling"] = {"model.py": IMPORTS_HELPER, "helper.py": BROKEN_HELPER}
    files["bad_import"] = {"model.py": RAISES}
    for name, sources in files.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        for file, text in sources.items():
            # Each model's own token: distinct sources, distinct builds.
            (repo / name / "1" / file).write_text(text.format(token=f"{token} {name}"))
    return repo


def build_events(log: str) -> list[tuple[str, str]]:
    """("start" | "end", model) for each build, in log order."""
    events = []
    for line in log.splitlines():
        found = re.search(r"model=\"?([a-z_]+)\"?", line)
        if not found:
            continue
        if "building the Python guest" in line:
            events.append(("start", found.group(1)))
        elif "built the Python guest" in line or "building model.py failed" in line:
            events.append(("end", found.group(1)))
    return events


def most_at_once(events: list[tuple[str, str]]) -> int:
    running, peak = set(), 0
    for kind, model in events:
        if kind == "start":
            running.add(model)
            peak = max(peak, len(running))
        else:
            running.discard(model)
    return peak


def test_builds_run_at_once_failures_name_file_line_and_cause_and_the_rest_serve(server_factory, tmp_path,
                                                                                  wasm_cache):
    repo = write_repo(tmp_path)
    srv = server_factory(repo, ["--exit-on-error=false", "--python-guest-build-jobs=3",
                                "--model-load-thread-count=1", f"--wasm-cache-dir={wasm_cache}"],
                         deadline=BUILD_DEADLINE)
    for name in GOOD_MODELS:
        wait_model_ready(srv, name, deadline=BUILD_DEADLINE)
    index = repository_index(srv)
    for name, reason in REASONS.items():
        [entry] = index_entries(index, name)
        assert entry["state"] == "UNAVAILABLE", entry
        assert entry["reason"].endswith(reason), entry["reason"]
        for host_path in (str(tmp_path), str(REPO_ROOT), ".build-", "<build>", "Traceback"):
            assert host_path not in entry["reason"], entry["reason"]
    for name in GOOD_MODELS:
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [2.5]}]}
        r = requests.post(srv.http(f"/v2/models/{name}/infer"), json=body, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0]["data"] == [2.5]
    events = build_events(srv.log_text())
    assert sorted(m for kind, m in events if kind == "start") == sorted([*GOOD_MODELS, *REASONS]), events
    # Three builds at once, never more, though one model-load thread takes the models.
    assert most_at_once(events) == 3, events


def test_by_default_a_failed_build_stops_the_server_and_the_log_names_file_line_and_cause(server_factory, tmp_path):
    # The failing models alone: good ones would only add builds before the same exit.
    repo = write_repo(tmp_path, good=[])
    srv = server_factory(repo, [], expect_exit=True)
    wait_until(lambda: srv.process.poll() is not None, BUILD_DEADLINE, "the server to exit")
    assert srv.process.returncode != 0
    log = srv.log_text()
    for reason in REASONS.values():
        assert reason.removeprefix("building model.py failed: ") in log
    assert "bad_import" in log and "bad_sibling" in log
