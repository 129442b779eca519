"""Environment variables for guests (docs/wasm.md, "Environment variables"): the operator grants
server variables with `--guest-env NAME|PREFIX*`, and a model sees those of them its
`environment_variables` parameter asks for, in `os.environ` from `initialize` on, and nothing
else. An uploaded config alone never reads the server's environment: it asks for a variable the
operator did not grant and is refused, or asks for everything and gets only what was granted.
Triton's `EXECUTION_ENV_PATH` (a conda-pack environment) is refused, saying to use
requirements.txt.

Real server, real model.py guests (one build: every model here has the same source)."""

from __future__ import annotations

import json

import pytest
import requests

from tessera_testlib import index_entries, repository_index, start_server, wait_model_ready

pytestmark = pytest.mark.timeout(900)
BUILD_DEADLINE = 600.0
SECRET = "canary-secret-5f2c9e1d"

ENV_MODEL = '''
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

AT_IMPORT = sorted(os.environ)  # module level: runs when the guest is built


class TritonPythonModel:
    def initialize(self, args):
        self.at_initialize = dict(os.environ)

    def execute(self, requests):
        seen = {"initialize": self.at_initialize, "execute": dict(os.environ),
                "getenv": os.getenv("APP_MODE"), "import": AT_IMPORT}
        out = np.array([json.dumps(seen).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
'''


def config(name: str, **parameters: str) -> dict:
    return {
        "name": name, "backend": "python", "max_batch_size": 0,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]}],
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
    }


def pbtxt(name: str, **parameters: str) -> str:
    params = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in parameters.items())
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n' + params)


def write_model(repo, name: str, **parameters: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(pbtxt(name, **parameters))
    (repo / name / "1" / "model.py").write_text(ENV_MODEL)


def seen(srv, model: str) -> dict:
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    r = requests.post(srv.http(f"/v2/models/{model}/infer"), json=body, timeout=60)
    assert r.status_code == 200, r.text
    return json.loads(r.json()["outputs"][0]["data"][0])


def load(srv, name: str, cfg: dict) -> requests.Response:
    files = {"file:1/model.py": __import__("base64").b64encode(ENV_MODEL.encode()).decode()}
    body = {"parameters": {"config": json.dumps(cfg), **files}}
    return requests.post(srv.http(f"/v2/repository/models/{name}/load"), json=body, timeout=BUILD_DEADLINE)


SERVER_ENV = {"APP_MODE": "fast", "APP_LEVEL": "3", "SECRET_TOKEN": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET}


@pytest.fixture(scope="module")
def granted(tmp_path_factory, wasm_cache):
    """A server that grants APP_* and holds secrets it does not grant; explicit mode, so clients
    upload models (the attacker's door)."""
    repo = tmp_path_factory.mktemp("env-repo")
    write_model(repo, "asks", environment_variables="APP_MODE, APP_LEVEL")
    write_model(repo, "silent")
    srv = start_server(tmp_path_factory.mktemp("env-logs"), [repo],
                       ["--model-control-mode=explicit", "--load-model=*", "--guest-env=APP_*",
                        f"--wasm-cache-dir={wasm_cache}"],
                       env=SERVER_ENV, name="granted", ready=("asks", "silent"), ready_deadline=BUILD_DEADLINE)
    yield srv
    srv.stop_and_check()


def test_a_model_sees_the_granted_variables_its_config_asks_for_from_initialize_on(granted):
    env = seen(granted, "asks")
    assert env["initialize"] == {"APP_MODE": "fast", "APP_LEVEL": "3"}
    assert env["execute"] == env["initialize"]
    assert env["getenv"] == "fast"
    # Module-level code ran when the guest was built, with none of the server's variables.
    assert not set(env["import"]) & set(SERVER_ENV)


def test_a_model_that_asks_for_nothing_sees_nothing_though_the_operator_granted_some(granted):
    env = seen(granted, "silent")
    assert env["initialize"] == {} and env["execute"] == {} and env["getenv"] is None


def test_an_uploaded_config_asking_for_an_ungranted_variable_is_refused_without_its_value(granted):
    r = load(granted, "thief", config("thief", environment_variables="APP_MODE,SECRET_TOKEN"))
    assert r.status_code == 400, r.text
    assert "SECRET_TOKEN, which the server does not grant to guests" in r.text, r.text
    assert "--guest-env" in r.text
    reason = json.dumps(index_entries(repository_index(granted), "thief"))
    for reply in (r.text, reason):
        assert SECRET not in reply
    assert requests.get(granted.http("/v2/models/thief/ready"), timeout=10).status_code != 200


@pytest.mark.parametrize("asks", ["*", "SECRET_*", "AWS_*,APP_*", "S*"])
def test_an_uploaded_config_asking_by_pattern_gets_only_what_the_operator_granted(granted, asks):
    r = load(granted, "grabber", config("grabber", environment_variables=asks))
    assert r.status_code == 200, r.text
    env = seen(granted, "grabber")
    granted_app = {"APP_MODE": "fast", "APP_LEVEL": "3"}
    expected = {k: v for k, v in granted_app.items() if any(k.startswith(p.strip().rstrip("*")) for p in asks.split(","))}
    assert env["execute"] == expected
    assert SECRET not in json.dumps(env)


def test_names_that_are_not_variable_names_are_refused_without_being_echoed(granted):
    bad = "APP_MODE,$(cat /etc/passwd)\x1b[31m"
    r = load(granted, "odd", config("odd", environment_variables=bad))
    assert r.status_code == 400, r.text
    assert "entry 2 is not a variable name" in r.text, r.text
    assert "/etc/passwd" not in r.text and "\\u001b" not in r.text and "\x1b" not in r.text


def test_execution_env_path_is_refused_saying_to_use_requirements_txt(granted):
    r = load(granted, "conda", config("conda", EXECUTION_ENV_PATH="$$TRITON_MODEL_DIRECTORY/python3.11.tar.gz"))
    assert r.status_code == 400, r.text
    assert "'EXECUTION_ENV_PATH' (a conda-pack environment) is not supported" in r.text, r.text
    assert "requirements.txt" in r.text
    assert "$$TRITON_MODEL_DIRECTORY" not in r.text


def test_without_the_flag_no_model_sees_any_server_variable(server_factory, tmp_path, wasm_cache):
    repo = tmp_path / "repo"
    write_model(repo, "asks", environment_variables="APP_MODE")
    write_model(repo, "all", environment_variables="*")
    srv = server_factory(repo, ["--exit-on-error=false", f"--wasm-cache-dir={wasm_cache}"], env=SERVER_ENV)
    wait_model_ready(srv, "all", deadline=BUILD_DEADLINE)
    assert seen(srv, "all")["execute"] == {}
    [entry] = index_entries(repository_index(srv), "asks")
    assert entry["state"] == "UNAVAILABLE"
    assert "APP_MODE, which the server does not grant to guests" in entry["reason"], entry
    assert SECRET not in srv.log_text()


def test_a_bare_star_grant_is_refused_at_startup(server_factory, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    srv = server_factory(repo, ["--guest-env=*"], env=SERVER_ENV, expect_exit=True)
    assert srv.process.wait(timeout=60) != 0
    assert "name the variables, or a prefix" in srv.log_text()
