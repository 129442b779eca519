"""What Triton 2.7x's doors and command line do that 2.51's did not, followed by Tessera
(docs/triton-http-behaviour.md, "Where Triton 2.7x answers differently"): header forwarding with
its reserved names, the cap on a chunked body's chunks, the repository index's boolean `ready`,
and the new flags with Triton's own checks."""

from __future__ import annotations

import json
import queue
import socket

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from tessera_testlib import copy_model, run_cli, start_server, wait_model_ready

pytestmark = pytest.mark.timeout(600)

# A model that answers with the request's parameters, as JSON in a BYTES output.
ECHO_PARAMETERS = '''
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PARAMS", [request.parameters().encode()], "BYTES")])
                for request in requests]
'''

ECHO_CONFIG = """name: "echo_params"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

BODY = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [1]}]}


@pytest.fixture(scope="module")
def forwarding_server(tmp_path_factory, tessera_binary):
    root = tmp_path_factory.mktemp("forward")
    repo = root / "repo"
    (repo / "echo_params" / "1").mkdir(parents=True)
    (repo / "echo_params" / "1" / "model.py").write_text(ECHO_PARAMETERS)
    (repo / "echo_params" / "config.pbtxt").write_text(ECHO_CONFIG)
    srv = start_server(root / "logs", [repo], ["--http-header-forward-pattern", "x-team-.*",
                                                "--grpc-header-forward-pattern", "(?-i)grpc-fwd-.*"])
    try:
        wait_model_ready(srv, "echo_params", deadline=300)
        yield srv
    finally:
        srv.stop_and_check()


def echoed(response: requests.Response) -> dict:
    assert response.status_code == 200, response.text
    [text] = response.json()["outputs"][0]["data"]
    return json.loads(text)


def test_http_headers_matching_the_pattern_reach_the_model_as_parameters(forwarding_server):
    srv = forwarding_server
    headers = {"X-Team-Name": "vision", "x-team-tier": "gold", "X-Other": "no"}
    params = echoed(requests.post(srv.http("/v2/models/echo_params/infer"), json=BODY, headers=headers, timeout=30))
    # hyper hands header names over lower-cased, as Triton's Python client sends them.
    assert params == {"x-team-name": "vision", "x-team-tier": "gold"}
    generate = requests.post(srv.http("/v2/models/echo_params/generate"), json={"INPUT0": [1]}, timeout=30,
                             headers={"x-team-name": "nlp"})
    assert generate.status_code == 200, generate.text
    value = generate.json()["PARAMS"]
    assert json.loads(value[0] if isinstance(value, list) else value) == {"x-team-name": "nlp"}


def test_grpc_metadata_is_forwarded_case_sensitively_on_unary_and_stream_calls(forwarding_server):
    srv = forwarding_server
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    inp = grpcclient.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    result = client.infer("echo_params", [inp], headers={"grpc-fwd-user": "ada", "other": "x"})
    assert json.loads(result.as_numpy("PARAMS")[0]) == {"grpc-fwd-user": "ada"}
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)), headers={"grpc-fwd-stream": "yes"})
    try:
        client.async_stream_infer("echo_params", [inp])
        result, error = got.get(timeout=30)
        assert error is None, error
        assert json.loads(result.as_numpy("PARAMS")[0]) == {"grpc-fwd-stream": "yes"}
    finally:
        client.stop_stream()
        client.close()


def test_reserved_names_cannot_be_forwarded(server_factory, repo):
    (repo / "echo_params" / "1").mkdir(parents=True)
    (repo / "echo_params" / "1" / "model.py").write_text(ECHO_PARAMETERS)
    (repo / "echo_params" / "config.pbtxt").write_text(ECHO_CONFIG)
    srv = server_factory(repo, ["--http-header-forward-pattern", ".*", "--grpc-header-forward-pattern", "prio.*"])
    wait_model_ready(srv, "echo_params", deadline=300)
    for name in ("priority", "triton_enable_empty_final_response", "sequence_id"):
        r = requests.post(srv.http("/v2/models/echo_params/infer"), json=BODY, headers={name: "1"}, timeout=30)
        assert r.status_code == 400, (name, r.text)
        assert r.json()["error"] == f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    inp = grpcclient.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(Exception) as refused:
        client.infer("echo_params", [inp], headers={"priority": "1"})
    assert "INVALID_ARGUMENT" in str(refused.value) and "'priority' is reserved" in str(refused.value)
    client.close()


def chunked_request(port: int, chunks: list[bytes]) -> tuple[int, bytes]:
    head = (b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        head_text, _, rest = answer.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head_text.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(rest) < length:
            rest += sock.recv(65536)
        return int(head_text.split()[1]), rest[:length]


def test_a_chunked_body_of_more_than_65536_chunks_is_refused(server_factory, repo):
    copy_model(repo, "simple")
    srv = server_factory(repo)
    wait_model_ready(srv, "simple")
    data = list(range(16))
    body = json.dumps({"inputs": [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "INT32", "data": data}
                                  for i in range(2)]}).encode()
    # A body sent a byte per chunk is read whole while the chunks stay under the cap.
    status, _ = chunked_request(srv.port, [body[i:i + 1] for i in range(len(body))])
    assert status == 200
    padded = body + b" " * (65537 - len(body))
    status, answer = chunked_request(srv.port, [padded[i:i + 1] for i in range(len(padded))])
    assert status == 400
    assert json.loads(answer)["error"] == ("Chunked request body exceeds maximum of 65536 non-empty chunks. "
                                           "Send fewer or larger HTTP chunks.")
    srv.assert_alive()


def test_the_index_takes_only_a_boolean_ready(server_factory, repo):
    copy_model(repo, "simple")
    srv = server_factory(repo)
    wait_model_ready(srv, "simple")
    r = requests.post(srv.http("/v2/repository/index"), json={"ready": "yes"}, timeout=10)
    assert r.status_code == 400 and r.json()["error"] == "Invalid value for 'ready': expected a boolean"
    assert requests.post(srv.http("/v2/repository/index"), json={"ready": True}, timeout=10).status_code == 200


@pytest.mark.parametrize(("args", "message"), [
    (["--grpc-infer-thread-count", "1"], "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128."),
    (["--grpc-infer-thread-count", "129"], "Must be in the range 2 to 128."),
    (["--grpc-max-response-pool-size", "0"], "Error: --grpc-max-response-pool-size must be greater than 0."),
    (["--http-max-input-size", "0"], "Error: --http-max-input-size must be greater than 0."),
    (["--http-header-forward-pattern", "("], "invalid pattern '('"),
])
def test_triton_2_7x_flags_are_checked_as_triton_checks_them(tmp_path, args, message):
    cp = run_cli(["serve", "--model-repository", str(tmp_path), *args])
    assert cp.returncode != 0 and message in cp.stderr, cp.stderr


def test_triton_2_7x_flags_are_taken(server_factory, repo):
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--grpc-infer-thread-count", "4", "--grpc-max-response-pool-size", "8",
                                "--enable-peer-access", "false"])
    wait_model_ready(srv, "simple")
