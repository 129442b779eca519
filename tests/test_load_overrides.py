"""Model load with file overrides: Triton's `config` and `file:<version>/<name>` load parameters, over
HTTP and gRPC, and the temporary files they leave (none)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tessera_testlib import copy_model, quickstart_repo, wait_model_ready


def add_sub_override_config(name: str) -> str:
    return json.dumps({
        "name": name, "backend": "onnxruntime", "max_batch_size": 8,
        "input": [{"name": f"INPUT{i}", "data_type": "TYPE_FP32", "dims": [16]} for i in (0, 1)],
        "output": [{"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [16]} for i in (0, 1)],
    })


def override_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("tessera-override-*"))


@pytest.fixture
def override_server(server_factory, tmp_path):
    """An explicit-mode server whose temporary directory is ours to watch."""
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    srv = server_factory(repo, ["--model-control-mode=explicit", "--load-model=simple",
                                f"--http-max-input-size={1 << 20}"], env={"TMPDIR": str(tmp)})
    wait_model_ready(srv, "simple")
    return srv, tmp, repo


def add_sub_check(url_or_client, model: str) -> None:
    c = url_or_client
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    Input = grpcclient.InferInput if isinstance(c, grpcclient.InferenceServerClient) else httpclient.InferInput
    inputs = [Input("INPUT0", [1, 16], "FP32"), Input("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a * 2)
    r = c.infer(model, inputs)
    np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a * 3)


def test_load_with_file_override_over_http_then_unload_removes_its_files(override_server):
    srv, tmp, _ = override_server
    onnx_bytes = (quickstart_repo() / "add_sub" / "1" / "model.onnx").read_bytes()
    c = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
    # A model that is in no repository: the override is all there is.
    c.load_model("math", config=add_sub_override_config("math"), files={"file:1/model.onnx": onnx_bytes})
    assert c.is_model_ready("math")
    add_sub_check(c, "math")
    (made,) = override_dirs(tmp)
    assert (made / "1" / "model.onnx").read_bytes() == onnx_bytes
    c.unload_model("math")
    assert not c.is_model_ready("math")
    assert override_dirs(tmp) == []
    c.close()


def test_load_with_file_override_over_grpc_and_a_plain_reload_goes_back_to_the_repository(override_server):
    srv, tmp, repo = override_server
    copy_model(repo, "add_sub")
    onnx_bytes = (quickstart_repo() / "add_sub" / "1" / "model.onnx").read_bytes()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    c.load_model("add_sub", config=add_sub_override_config("add_sub"), files={"file:7/model.onnx": onnx_bytes})
    assert c.is_model_ready("add_sub", "7") and not c.is_model_ready("add_sub", "1")
    add_sub_check(c, "add_sub")
    assert len(override_dirs(tmp)) == 1
    # A load without overrides reads the repository again, and the override's files go.
    c.load_model("add_sub")
    assert c.is_model_ready("add_sub", "1") and not c.is_model_ready("add_sub", "7")
    assert override_dirs(tmp) == []
    c.close()


POLL_FAILED = "failed to load 'odd', failed to poll from model repository"


@pytest.mark.parametrize("parameters", [
    {"file:1/model.onnx": "eA=="},                                     # a file without config
    {"config": add_sub_override_config("odd"), "file:../escape.onnx": "eA=="},  # outside the model directory
    {"config": add_sub_override_config("odd"), "file:/etc/evil": "eA=="},
])
def test_bad_file_overrides_get_tritons_error_and_leave_nothing(override_server, parameters):
    srv, tmp, _ = override_server
    r = requests.post(srv.http("/v2/repository/models/odd/load"), json={"parameters": parameters}, timeout=30)
    assert r.status_code == 500 and r.json() == {"error": POLL_FAILED}, r.text
    assert override_dirs(tmp) == []
    assert not (tmp.parent / "escape.onnx").exists()
    assert requests.get(srv.http("/v2/models/simple/ready"), timeout=10).status_code == 200


def test_oversized_and_malformed_load_parameters(override_server):
    srv, tmp, _ = override_server
    url = srv.http("/v2/repository/models/odd/load")
    big = base64.b64encode(b"\0" * (2 << 20)).decode()
    r = requests.post(url, json={"parameters": {"config": "{}", "file:1/model.onnx": big}}, timeout=30)
    assert r.status_code == 400 and "maximum allowed size of 1048576" in r.json()["error"], r.text
    r = requests.post(url, json={"parameters": {"config": "{}", "file:1/model.onnx": "not base64!"}}, timeout=30)
    assert r.status_code == 400 and "is not valid base64" in r.json()["error"], r.text
    r = requests.post(url, json={"parameters": {"config": 5}}, timeout=30)
    assert r.status_code == 500 and r.json()["error"] == "attempt to access JSON non-string as string", r.text
    r = requests.post(url, json={"parameters": {"colour": "blue"}}, timeout=30)
    assert r.status_code == 500 and r.json()["error"] == "unexpected error on creating Triton parameter", r.text
    assert override_dirs(tmp) == []
    assert requests.get(srv.http("/v2/models/simple/ready"), timeout=10).status_code == 200
