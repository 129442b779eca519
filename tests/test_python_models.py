"""Models served straight from model.py (`backend: "python"`): built at load, their
requirements.txt bundled, their build errors confined to their own load, their BLS calls gated by
--python-allowed-models and their own `allowed_models`.

The guests here do not use numpy (a build takes seconds); tests/test_triton_examples.py covers
numpy and Triton's own examples. requirements.txt installs from the package index.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import requests

from tessera_testlib import QUICKSTART, copy_model, index_entries, repository_index, wait_model_ready, wait_until

pytestmark = pytest.mark.timeout(900)
LOAD_DEADLINE = 600.0

VERSION_MODEL = '''
import json

import six
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("VERSION", [six.__version__.encode()], "BYTES")])
                for _ in requests]
'''

VERSION_CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "VERSION" data_type: TYPE_STRING dims: [ 1 ] }} ]
'''

BLS_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            response = pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=["OUTPUT0"],
                                                 inputs=[x, pb_utils.Tensor("INPUT1", x)]).exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            out.append(pb_utils.InferenceResponse([pb_utils.get_output_tensor_by_name(response, "OUTPUT0")]))
        return out
'''

BLS_CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
{extra}
'''


def python_model(repo: Path, name: str, source: str, config: str, requirements: str | None = None) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(source))
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    if requirements is not None:
        (repo / name / "1" / "requirements.txt").write_text(requirements)


def state(server, model: str) -> dict:
    entries = index_entries(repository_index(server), model)
    assert entries, f"{model} is not in the repository index"
    return entries[0]


def infer_json(server, model: str, inputs: list[dict]) -> requests.Response:
    return requests.post(server.http(f"/v2/models/{model}/infer"), data=json.dumps({"inputs": inputs}), timeout=120)


def test_requirements_are_bundled_and_a_bad_model_fails_only_its_own_load(server_factory, repo):
    python_model(repo, "pure", VERSION_MODEL, VERSION_CONFIG.format(name="pure"), "six==1.17.0\n")
    python_model(repo, "native", VERSION_MODEL, VERSION_CONFIG.format(name="native"), "six==1.17.0\npandas==2.2.3\n")
    python_model(repo, "broken", "class TritonPythonModel(:\n", VERSION_CONFIG.format(name="broken"))
    srv = server_factory(repo, ["--exit-on-error=false"], deadline=LOAD_DEADLINE)
    wait_model_ready(srv, "pure", deadline=LOAD_DEADLINE)
    r = infer_json(srv, "pure", [{"name": "X", "shape": [1], "datatype": "FP32", "data": [0]}])
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == ["1.17.0"], "six from requirements.txt, bundled into the guest"

    native = state(srv, "native")
    assert native["state"] == "UNAVAILABLE"
    assert "pandas has no pure-Python wheel" in native["reason"], native["reason"]
    broken = state(srv, "broken")
    assert broken["state"] == "UNAVAILABLE"
    assert "SyntaxError" in broken["reason"], broken["reason"]
    # and the server serves on
    r = infer_json(srv, "pure", [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1]}])
    assert r.status_code == 200, r.text


def bls_repo(repo: Path, own_allowed: str | None = None) -> None:
    copy_model(repo, "add_sub")
    extra = ""
    if own_allowed is not None:
        extra = f'parameters {{ key: "allowed_models" value: {{ string_value: "{own_allowed}" }} }}'
    python_model(repo, "caller", BLS_MODEL, BLS_CONFIG.format(name="caller", extra=extra))


def call(srv) -> requests.Response:
    x = list(range(16))
    return infer_json(srv, "caller", [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": x}])


def test_bls_from_model_py_needs_the_servers_allow_list(server_factory, tmp_path):
    refused_repo, allowed_repo = tmp_path / "refused", tmp_path / "allowed"
    bls_repo(refused_repo)
    bls_repo(allowed_repo)
    refused = server_factory(refused_repo, deadline=LOAD_DEADLINE)
    r = call(refused)
    assert r.status_code == 500, r.text
    assert "not allowed to call model 'add_sub'" in r.text and "--python-allowed-models" in r.text, r.text

    allowed = server_factory(allowed_repo, ["--python-allowed-models", "*"], deadline=LOAD_DEADLINE)
    r = call(allowed)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [2.0 * v for v in range(16)]


def test_a_models_own_allowed_models_narrows_the_servers(server_factory, repo):
    bls_repo(repo, own_allowed="simple")
    srv = server_factory(repo, ["--python-allowed-models", "add_sub,simple"], deadline=LOAD_DEADLINE)
    r = call(srv)
    assert r.status_code == 500 and "not allowed to call model 'add_sub'" in r.text, r.text


def test_the_quickstart_numpy_preprocessor_classifies_an_image(server):
    """model-repos/quickstart/image_preprocess: model.py with numpy, served from the repository."""
    red = [255, 0, 0] * 4
    green = [0, 200, 0] * 6
    r = infer_json(server, "image_preprocess", [{"name": "IMAGE", "shape": [2, 2, 3], "datatype": "UINT8", "data": red}])
    assert r.status_code == 200, r.text
    by = {o["name"]: o for o in r.json()["outputs"]}
    assert by["CLASSES"]["data"][0] == 284 and by["CLASSES"]["datatype"] == "INT64"
    assert by["SCORES"]["data"][0] > 0.99
    r = infer_json(server, "image_preprocess", [{"name": "IMAGE", "shape": [3, 2, 3], "datatype": "UINT8", "data": green}])
    assert r.status_code == 200 and r.json()["outputs"][0]["data"][0] == 963, r.text
    r = infer_json(server, "image_preprocess", [{"name": "IMAGE", "shape": [0, 2, 3], "datatype": "UINT8", "data": []}])
    assert r.status_code == 400 and "non-empty height and width" in r.text, r.text
    assert QUICKSTART.joinpath("image_preprocess", "1", "model.py").is_file()
    # sandboxed like any guest, and counted as one: its linear memory (CPython and numpy)
    metrics = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    memory = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
              if line.startswith("tessera_model_memory_bytes{") and 'model="image_preprocess"' in line]
    assert memory and memory[0] > 16 << 20, memory


STREAMER = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Streams COUNT responses, stopping when its caller goes (is_cancelled, or a failed send)."""

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_list()[0])
            sender = request.get_response_sender()
            sent = 0
            while sent < count and not sender.is_cancelled():
                try:
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", [sent], "INT32")]))
                except pb_utils.TritonModelException as e:
                    pb_utils.Logger.log_info("streamer: a send failed: " + e.message())
                    break
                sent += 1
            pb_utils.Logger.log_info("streamer: stopped after %d of %d, cancelled=%s" % (
                sent, count, request.is_cancelled()))
            if not sender.is_cancelled():
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

STREAMER_CONFIG = '''
name: "streamer"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "max_execute_ms" value: { string_value: "60000" } }
'''


def test_a_cancelled_stream_stops_the_guest_that_feeds_it(server_factory, repo):
    """A client cancels its gRPC stream after 5 of a million responses: the guest sees
    `is_cancelled()` (or a failed send) and stops at once, rather than producing the rest into
    nothing until its time limit, and the model serves the next stream whole."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    python_model(repo, "streamer", STREAMER, STREAMER_CONFIG)
    srv = server_factory(repo)
    wait_model_ready(srv, "streamer", deadline=300)

    def stream(count: int, cancel_after: int | None) -> list[int]:
        got: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        inp = grpcclient.InferInput("COUNT", [1], "INT32")
        inp.set_data_from_numpy(np.array([count], dtype=np.int32))
        client.async_stream_infer("streamer", [inp], enable_empty_final_response=True)
        values = []
        try:
            while cancel_after is None or len(values) < cancel_after:
                result, error = got.get(timeout=60)
                assert error is None, error
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
                values.append(int(result.as_numpy("OUT")[0]))
        finally:
            client.stop_stream(cancel_requests=cancel_after is not None)
            client.close()
        return values

    assert stream(1_000_000, cancel_after=5) == [0, 1, 2, 3, 4]
    wait_until(lambda: "streamer: stopped after" in srv.log_text(), 20, "the guest stopped", srv)
    line = next(ln for ln in srv.log_text().splitlines() if "streamer: stopped after" in ln)
    sent = int(line.split("stopped after ")[1].split(" of")[0])
    assert sent < 10_000 and "cancelled=True" in line, line
    assert stream(3, cancel_after=None) == [0, 1, 2]
