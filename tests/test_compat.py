"""Drop-in compatibility, round 2 (issue 13): BYTES with NUL bytes through ONNX string tensors,
Triton's raw binary request, the built-in utility backends (identity, repeat, square) and model
load with file overrides. Real server, real tritonclient over HTTP and gRPC on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import queue
import struct
import subprocess
import time
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from onnx import TensorProto, helper

from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, quickstart_repo, wait_model_ready


ONNX_TYPES = {"TYPE_STRING": TensorProto.STRING, "TYPE_FP32": TensorProto.FLOAT, "TYPE_INT32": TensorProto.INT32}


def write_onnx_identity(repo, name: str, dtype: str, dims: list[int], *, max_batch_size: int = 0,
                        inp: str = "TEXT", out: str = "ECHO") -> None:
    """An ONNX Identity model `inp` -> `out` of one datatype, with its config."""
    onnx_dims = ([None] if max_batch_size else []) + [None if d < 0 else d for d in dims]
    graph = helper.make_graph(
        [helper.make_node("Identity", [inp], [out])], name,
        [helper.make_tensor_value_info(inp, ONNX_TYPES[dtype], onnx_dims)],
        [helper.make_tensor_value_info(out, ONNX_TYPES[dtype], onnx_dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    d = repo / name
    (d / "1").mkdir(parents=True)
    onnx.save(model, str(d / "1" / "model.onnx"))
    dims_text = ", ".join(str(x) for x in dims)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "{inp}" data_type: {dtype} dims: [ {dims_text} ] }} ]\n'
        f'output [ {{ name: "{out}" data_type: {dtype} dims: [ {dims_text} ] }} ]\n')


def write_string_identity(repo, name: str = "strings") -> None:
    """An ONNX Identity over a STRING tensor [-1] (no batching)."""
    write_onnx_identity(repo, name, "TYPE_STRING", [-1])


# Elements that a C-string path would cut or refuse: NUL inside, at either end, alone, non-UTF-8.
AWKWARD = [b"a\x00b", b"\x00lead", b"trail\x00", b"\x00", b"", b"\xff\xfe\x00\x80", b"plain", b"\x00" * 300]


def test_bytes_with_nul_pass_through_onnx_string_tensors(server_factory, repo):
    write_string_identity(repo)
    srv = server_factory(repo)
    wait_model_ready(srv, "strings")
    sent = np.array(AWKWARD, dtype=np.object_)

    hc = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
    inp = httpclient.InferInput("TEXT", [len(AWKWARD)], "BYTES")
    inp.set_data_from_numpy(sent, binary_data=True)
    got = hc.infer("strings", [inp], outputs=[httpclient.InferRequestedOutput("ECHO", binary_data=True)])
    assert list(got.as_numpy("ECHO")) == AWKWARD

    gc = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    ginp = grpcclient.InferInput("TEXT", [len(AWKWARD)], "BYTES")
    ginp.set_data_from_numpy(sent)
    assert list(gc.infer("strings", [ginp]).as_numpy("ECHO")) == AWKWARD

    # An empty tensor and one long element with NULs every other byte.
    for elements in ([], [bytes(range(256)) * 64]):
        ginp = grpcclient.InferInput("TEXT", [len(elements)], "BYTES")
        ginp.set_data_from_numpy(np.array(elements, dtype=np.object_).reshape([len(elements)]))
        assert list(gc.infer("strings", [ginp]).as_numpy("ECHO").reshape(-1)) == elements
    gc.close()
    hc.close()


# ---------------------------------------------------------------------------------------------
# gRPC over TLS (--grpc-use-ssl, --grpc-use-ssl-mutual), certificates made here with openssl
# ---------------------------------------------------------------------------------------------

def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.crt"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "2", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, cert


def make_leaf(d: Path, name: str, ca: tuple[Path, Path], *, server: bool) -> tuple[Path, Path]:
    key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt", d / f"{name}.ext"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    usage = "serverAuth" if server else "clientAuth"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   f"extendedKeyUsage={usage}\n" + ("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else ""))
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return key, cert


@pytest.fixture
def pki(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    ca = make_ca(d, "ca")
    other_ca = make_ca(d, "other-ca")
    return {
        "ca": ca,
        "server": make_leaf(d, "server", ca, server=True),
        "client": make_leaf(d, "client", ca, server=False),
        "stranger": make_leaf(d, "stranger", other_ca, server=False),
    }


def wait_exit(srv, deadline: float = 60) -> int:
    try:
        return srv.process.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server kept running although it should have exited:\n{srv.log_text()[-3000:]}", pytrace=False)


def tls_client(srv, pki, client: str | None) -> grpcclient.InferenceServerClient:
    kw = {"root_certificates": str(pki["ca"][1])}
    if client:
        kw.update(private_key=str(pki[client][0]), certificate_chain=str(pki[client][1]))
    return grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}", ssl=True, **kw)


def assert_simple_infer(c) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    np.testing.assert_array_equal(c.infer("simple", inputs).as_numpy("OUTPUT0"), a + a)


def test_grpc_tls_one_way(server_factory, tmp_path, pki):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--grpc-use-ssl=true", f"--grpc-server-cert={pki['server'][1]}",
                                f"--grpc-server-key={pki['server'][0]}"])
    wait_model_ready(srv, "simple")
    c = tls_client(srv, pki, None)
    assert c.is_server_live()
    assert_simple_infer(c)
    c.close()
    # A plaintext client gets no answer from a TLS door.
    plain = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    with pytest.raises(InferenceServerException):
        plain.is_server_live(client_timeout=5)
    plain.close()


def test_grpc_tls_mutual_refuses_unknown_clients(server_factory, tmp_path, pki):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--grpc-use-ssl-mutual=true", f"--grpc-server-cert={pki['server'][1]}",
                                f"--grpc-server-key={pki['server'][0]}", f"--grpc-root-cert={pki['ca'][1]}"])
    wait_model_ready(srv, "simple")
    c = tls_client(srv, pki, "client")
    assert_simple_infer(c)
    c.close()
    for who in (None, "stranger"):  # no certificate; one signed by another authority
        c = tls_client(srv, pki, who)
        with pytest.raises(InferenceServerException) as e:
            c.is_server_live(client_timeout=5)
        assert "UNAVAILABLE" in str(e.value) or "DEADLINE" in str(e.value), e.value
        c.close()
    # The door still serves the right client afterwards.
    c = tls_client(srv, pki, "client")
    assert c.is_server_live()
    c.close()


@pytest.mark.parametrize("flags, message", [
    (["--grpc-use-ssl=true"], "--grpc-use-ssl needs --grpc-server-cert"),
    (["--grpc-use-ssl-mutual=true", "--grpc-server-cert={cert}", "--grpc-server-key={key}"],
     "--grpc-use-ssl-mutual needs --grpc-root-cert"),
    (["--grpc-use-ssl=true", "--grpc-server-cert={key}", "--grpc-server-key={key}"], "gRPC TLS configuration"),
])
def test_grpc_tls_bad_flags_stop_the_start(server_factory, tmp_path, pki, flags, message):
    repo = tmp_path / "repo"
    repo.mkdir()
    flags = [f.format(cert=pki["server"][1], key=pki["server"][0]) for f in flags]
    srv = server_factory(repo, flags, expect_exit=True)
    assert wait_exit(srv) > 0
    assert message in srv.log_text(), srv.log_text()


# ---------------------------------------------------------------------------------------------
# Triton's raw binary request: Inference-Header-Content-Length: 0 and the body is the one input
# ---------------------------------------------------------------------------------------------

def raw_post(srv, model: str, body: bytes) -> requests.Response:
    return requests.post(srv.http(f"/v2/models/{model}/infer"), data=body, timeout=30,
                         headers={"Inference-Header-Content-Length": "0"})


def binary_outputs(r: requests.Response) -> tuple[dict, bytes]:
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/octet-stream"
    n = int(r.headers["Inference-Header-Content-Length"])
    return json.loads(r.content[:n]), r.content[n:]


@pytest.fixture
def raw_server(server_factory, repo):
    write_onnx_identity(repo, "raw_fp32", "TYPE_FP32", [-1], max_batch_size=4, inp="IN", out="OUT")
    write_onnx_identity(repo, "raw_fixed", "TYPE_INT32", [2, 3], inp="IN", out="OUT")
    write_onnx_identity(repo, "raw_two_vars", "TYPE_FP32", [-1, -1], inp="IN", out="OUT")
    write_onnx_identity(repo, "raw_text", "TYPE_STRING", [1], inp="IN", out="OUT")
    write_onnx_identity(repo, "raw_texts", "TYPE_STRING", [-1], inp="IN", out="OUT")
    copy_model(repo, "simple")
    srv = server_factory(repo)
    for m in ("raw_fp32", "raw_fixed", "raw_two_vars", "raw_text", "raw_texts", "simple"):
        wait_model_ready(srv, m)
    return srv


def test_raw_binary_request_deduces_the_variable_dimension(raw_server):
    values = np.arange(5, dtype=np.float32) * 1.5
    doc, data = binary_outputs(raw_post(raw_server, "raw_fp32", values.tobytes()))
    # A batch dimension of 1 for a batching model; the -1 from the byte count. No id: none was sent.
    assert doc["model_name"] == "raw_fp32" and "id" not in doc
    (out,) = doc["outputs"]
    assert out["name"] == "OUT" and out["shape"] == [1, 5] and out["datatype"] == "FP32"
    assert out["parameters"]["binary_data_size"] == 20
    np.testing.assert_array_equal(np.frombuffer(data, dtype=np.float32), values)

    ints = np.arange(6, dtype=np.int32)
    doc, data = binary_outputs(raw_post(raw_server, "raw_fixed", ints.tobytes()))
    assert doc["outputs"][0]["shape"] == [2, 3]
    np.testing.assert_array_equal(np.frombuffer(data, dtype=np.int32), ints)


def test_raw_binary_bytes_input_is_one_element(raw_server):
    body = b"raw \x00 text \xff"
    doc, data = binary_outputs(raw_post(raw_server, "raw_text", body))
    assert doc["outputs"][0]["shape"] == [1] and doc["outputs"][0]["datatype"] == "BYTES"
    assert data == len(body).to_bytes(4, "little") + body


@pytest.mark.parametrize("model, body, message", [
    ("simple", b"\0" * 128, "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced "
                            "but got 2 inputs in 'simple' model configuration"),
    ("raw_two_vars", b"\0" * 16, "[request id: <id_unknown>] The shape of the raw input 'IN' can not be deduced "
                                 "because there are more than one variable-sized dimension"),
    ("raw_texts", b"abc", "[request id: <id_unknown>] For BYTE datatype raw input 'IN', the model must have input "
                          "shape [1]"),
    ("raw_fp32", b"\0" * 10, "[request id: <id_unknown>] input byte size mismatch for input 'raw_input' for model "
                             "'raw_fp32'. Expected 8, got 10"),
    ("raw_fixed", b"\0" * 20, "[request id: <id_unknown>] input byte size mismatch for input 'raw_input' for model "
                              "'raw_fixed'. Expected 24, got 20"),
])
def test_raw_binary_errors_are_tritons(raw_server, model, body, message):
    r = raw_post(raw_server, model, body)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": message}
    # The same model still answers a good raw request.
    if model == "raw_fp32":
        binary_outputs(raw_post(raw_server, model, b"\0" * 8))


@pytest.mark.parametrize("header", ["abc", "0x10", None])
def test_raw_binary_request_by_every_header_triton_reads_as_zero(raw_server, header):
    """Triton reads Inference-Header-Content-Length with atoi: a value that is not a number is 0,
    a raw request; without the header, an empty body is one too (a non-empty one is JSON)."""
    headers = {"Content-Type": "application/octet-stream"}
    if header is not None:
        headers["Inference-Header-Content-Length"] = header
    body = b"" if header is None else np.arange(4, dtype=np.float32).tobytes()
    r = requests.post(raw_server.http("/v2/models/raw_fp32/infer"), data=body, headers=headers, timeout=30)
    if header is None:
        # An empty raw body for a [-1] FP32 input: the shape is deduced as [1, 0], a valid tensor.
        doc, data = binary_outputs(r)
        assert doc["outputs"][0]["shape"] == [1, 0] and data == b""
    else:
        doc, data = binary_outputs(r)
        assert doc["outputs"][0]["shape"] == [1, 4]
        np.testing.assert_array_equal(np.frombuffer(data, dtype=np.float32), np.arange(4, dtype=np.float32))

# ---------------------------------------------------------------------------------------------
# Triton's utility backends, built in: identity, repeat, square
# ---------------------------------------------------------------------------------------------

REPEAT_CONFIG = """name: "{name}"
backend: "repeat"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }},
        {{ name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }},
        {{ name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
         {{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }} ]
"""

SQUARE_CONFIG = """name: "{name}"
backend: "square"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{extra}"""

IDENTITY_CONFIG = """name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
        {{ name: "INPUT1" data_type: TYPE_STRING dims: [ 2 ] optional: true }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_STRING dims: [ 2 ] }} ]
dynamic_batching {{ }}
"""


def write_config_model(repo, name: str, text: str) -> None:
    d = repo / name
    (d / "1").mkdir(parents=True)  # a version directory with no model file: these backends need none
    (d / "config.pbtxt").write_text(text)


@pytest.fixture
def utility_server(server_factory, repo):
    write_config_model(repo, "repeat_int32", REPEAT_CONFIG.format(name="repeat_int32"))
    write_config_model(repo, "square_int32", SQUARE_CONFIG.format(name="square_int32", extra=""))
    write_config_model(repo, "square_failing", SQUARE_CONFIG.format(
        name="square_failing", extra='parameters [ { key: "CUSTOM_FAIL_COUNT" value: { string_value: "1" } },\n'
                                      '{ key: "CUSTOM_EMPTY_COUNT" value: { string_value: "1" } } ]'))
    write_config_model(repo, "identity_fp32", IDENTITY_CONFIG.format(name="identity_fp32"))
    srv = server_factory(repo)
    for m in ("repeat_int32", "square_int32", "square_failing", "identity_fp32"):
        wait_model_ready(srv, m)
    return srv


class Stream:
    """A gRPC bidirectional stream with its responses in a queue."""

    def __init__(self, srv):
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
        self.responses: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.responses.put((result, error)))

    def until_final(self, timeout: float = 30) -> list:
        """Responses (result or error) up to the empty final one."""
        got = []
        while True:
            result, error = self.responses.get(timeout=timeout)
            if error is not None:
                got.append(error)
                continue
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param and not response.outputs:
                return got
            got.append(result)

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def repeat_inputs(values, delays, wait: int):
    tensors = []
    for name, data, dtype in (("IN", values, np.int32), ("DELAY", delays, np.uint32), ("WAIT", [wait], np.uint32)):
        t = grpcclient.InferInput(name, [len(data)], "INT32" if dtype is np.int32 else "UINT32")
        t.set_data_from_numpy(np.array(data, dtype=dtype))
        tensors.append(t)
    return tensors


def test_repeat_streams_each_element_then_the_final_flag(utility_server):
    s = Stream(utility_server)
    try:
        s.client.async_stream_infer("repeat_int32", repeat_inputs([10, 20, 30], [0, 50, 0], 0),
                                    request_id="r1", enable_empty_final_response=True)
        got = s.until_final()
        assert [(int(r.as_numpy("IDX")[0]), int(r.as_numpy("OUT")[0])) for r in got] == [(0, 10), (1, 20), (2, 30)]
        assert all(r.get_response().id == "r1" for r in got)
        # An empty IN: the final flag alone.
        s.client.async_stream_infer("repeat_int32", repeat_inputs([], [], 0), enable_empty_final_response=True)
        assert s.until_final() == []
    finally:
        s.close()


def test_repeat_paces_by_delay_and_interleaves_requests(utility_server):
    # Two requests on one instance: WAIT 0 frees it at once, so the second request's quick
    # responses arrive between the first request's slow ones.
    s = Stream(utility_server)
    try:
        s.client.async_stream_infer("repeat_int32", repeat_inputs([1, 2], [0, 400], 0), request_id="slow")
        s.client.async_stream_infer("repeat_int32", repeat_inputs([7], [0], 0), request_id="quick")
        order = []
        while len(order) < 3:
            result, error = s.responses.get(timeout=30)
            assert error is None, error
            order.append((result.get_response().id, int(result.as_numpy("OUT")[0])))
        assert order.index(("quick", 7)) < order.index(("slow", 2)), order
    finally:
        s.close()


def test_repeat_over_generate_stream_and_plain_infer_refused(utility_server):
    with requests.post(utility_server.http("/v2/models/repeat_int32/generate_stream"), timeout=30, stream=True,
                       json={"IN": [4, 5], "DELAY": [0, 0], "WAIT": [0]}) as r:
        assert r.status_code == 200, r.text
        events = [json.loads(line[5:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data:")]
    assert [(e["IDX"], e["OUT"]) for e in events] == [(0, 4), (1, 5)]
    c = httpclient.InferenceServerClient(f"127.0.0.1:{utility_server.http_port}")
    inp = httpclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    # Triton's answer, checked before the body is read (so also for a body in an unknown encoding).
    for headers in ({}, {"Content-Encoding": "br"}):
        r = requests.post(utility_server.http("/v2/models/repeat_int32/infer"), data=b"{}", headers=headers,
                          timeout=30)
        assert (r.status_code, r.json()) == (
            501, {"error": "HTTP end point doesn't support models with decoupled transaction policy"}), r.text
    with pytest.raises(InferenceServerException) as e:
        c.infer("repeat_int32", [inp])
    assert "decoupled" in str(e.value)
    # An unknown model is reported before an unsupported encoding, as Triton does.
    r = requests.post(utility_server.http("/v2/models/nope/infer"), data=b"{}", headers={"Content-Encoding": "br"},
                      timeout=30)
    assert r.status_code == 404, r.text


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_cancelling_a_repeat_stream_stops_its_work(utility_server):
    # Two million responses with no delay; the client takes 100 and cancels.
    s = Stream(utility_server)
    n = 2_000_000
    s.client.async_stream_infer("repeat_int32", repeat_inputs(list(range(n)), [0] * n, 0))
    for _ in range(100):
        result, error = s.responses.get(timeout=30)
        assert error is None, error
    pid = utility_server.process.pid
    at_cancel = cpu_seconds(pid)
    s.close(cancel=True)
    # Once the stream is gone the producer stops: the server goes (nearly) idle at once. Before
    # cancellation reached the producer, it ran on for about 2 s of CPU.
    deadline = time.monotonic() + 10
    while True:
        before = cpu_seconds(pid)
        time.sleep(0.25)
        used = cpu_seconds(pid) - before
        if used < 0.03:
            break
        assert time.monotonic() < deadline, f"server still busy ({used:.2f} s CPU per 0.25 s) after the cancel"
    after_cancel = cpu_seconds(pid) - at_cancel
    print(f"CPU after the cancel: {after_cancel:.2f} s")
    assert after_cancel < 0.5, f"the server used {after_cancel:.2f} s of CPU after the stream was cancelled"
    assert_square_works(utility_server)


def assert_square_works(srv) -> None:
    s = Stream(srv)
    try:
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([3], dtype=np.int32))
        s.client.async_stream_infer("square_int32", [inp], enable_empty_final_response=True)
        got = s.until_final()
        assert [int(r.as_numpy("OUT")[0]) for r in got] == [3, 3, 3]
    finally:
        s.close()


def test_square_sends_n_responses_and_honours_its_failure_parameters(utility_server):
    assert_square_works(utility_server)
    s = Stream(utility_server)
    try:
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([4], dtype=np.int32))
        s.client.async_stream_infer("square_failing", [inp], enable_empty_final_response=True)
        got = s.until_final()
        # 4 responses: 2 succeed, 1 fails ("simulated failure"), 1 is never sent.
        assert [int(r.as_numpy("OUT")[0]) for r in got if not isinstance(r, InferenceServerException)] == [4, 4]
        errors = [r for r in got if isinstance(r, InferenceServerException)]
        assert len(errors) == 1 and "simulated failure" in str(errors[0]), got
        inp.set_data_from_numpy(np.array([0], dtype=np.int32))
        s.client.async_stream_infer("square_int32", [inp], enable_empty_final_response=True)
        assert s.until_final() == []
    finally:
        s.close()


def test_identity_returns_inputs_and_zeros_for_an_absent_optional(utility_server):
    c = httpclient.InferenceServerClient(f"127.0.0.1:{utility_server.http_port}")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    inp0 = httpclient.InferInput("INPUT0", [2, 3], "FP32")
    inp0.set_data_from_numpy(x)
    words = np.array([[b"a\x00b", b""], [b"c", b"\xff"]], dtype=np.object_)
    inp1 = httpclient.InferInput("INPUT1", [2, 2], "BYTES")
    inp1.set_data_from_numpy(words)
    r = c.infer("identity_fp32", [inp0, inp1])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    assert r.as_numpy("OUTPUT1").tolist() == words.tolist()
    r = c.infer("identity_fp32", [inp0])  # INPUT1 is optional: OUTPUT1 is zeros (empty strings)
    assert r.as_numpy("OUTPUT1").tolist() == [[b"", b""], [b"", b""]]
    # Over gRPC too, with only OUTPUT0 asked for.
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{utility_server.grpc_port}")
    ginp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    ginp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    r = g.infer("identity_fp32", [ginp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
    assert r.as_numpy("OUTPUT1") is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.ones((1, 4), dtype=np.float32))


@pytest.mark.parametrize("name, text, message", [
    ("repeat_batching", REPEAT_CONFIG.replace("max_batch_size: 0", "max_batch_size: 4"),
     "repeat backend only supports models with max_batch_size == 0"),
    ("repeat_names", REPEAT_CONFIG.replace('"WAIT"', '"PAUSE"'), "expected third input tensor name to be WAIT, got PAUSE"),
    ("repeat_types", REPEAT_CONFIG.replace('"DELAY" data_type: TYPE_UINT32', '"DELAY" data_type: TYPE_INT32'),
     "expected DELAY datatype to be UINT32, got TYPE_INT32"),
    ("square_shape", SQUARE_CONFIG.replace('"IN" data_type: TYPE_INT32 dims: [ 1 ]', '"IN" data_type: TYPE_INT32 dims: [ 2 ]'),
     "expected IN shape to be [1], got [2]"),
    ("identity_pairs", IDENTITY_CONFIG.replace('name: "OUTPUT1"', 'name: "OUTPUT2"'),
     "expected input and output indices to match"),
    ("identity_types", IDENTITY_CONFIG.replace('"OUTPUT0" data_type: TYPE_FP32', '"OUTPUT0" data_type: TYPE_INT32'),
     "expected input and output datatype to match, got TYPE_FP32 and TYPE_INT32"),
])
def test_utility_configs_are_checked_with_tritons_messages(server_factory, repo, name, text, message):
    write_config_model(repo, name, text.format(name=name, extra=""))
    srv = server_factory(repo, ["--exit-on-error=false"])
    r = requests.post(srv.http("/v2/repository/index"), json={}, timeout=10)
    (entry,) = [e for e in r.json() if e["name"] == name]
    assert entry["state"] == "UNAVAILABLE" and message in entry["reason"], entry


# ---------------------------------------------------------------------------------------------
# Model load with file overrides (Triton's `config` + `file:<version>/<name>` load parameters)
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Request errors word for word as Triton 2.51 answers them (checked side by side with the
# reference tritonserver; the catalogue is docs/triton-http-behaviour.md, "Request errors")
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def simple_server(server_factory, repo):
    copy_model(repo, "simple")
    srv = server_factory(repo)
    wait_model_ready(srv, "simple")
    return srv


def simple_inputs_json(shape0=(1, 16)):
    return [{"name": "INPUT0", "shape": list(shape0), "datatype": "INT32", "data": [0] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}]


NOT_UNSIGNED = "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"


@pytest.mark.parametrize("path, body, status, message", [
    ("/v2/models/simple/versions/abc/infer", {"inputs": simple_inputs_json()}, 404, "Not Found"),
    ("/v2/models/simple/versions/99999999999999999999/infer", {"inputs": simple_inputs_json()}, 400,
     "failed to get model version from specified version string '99999999999999999999' (details: stol), "
     "version should be an integral value > 0"),
    ("/v2/models/simple/infer", {"inputs": simple_inputs_json((-1, 16))}, 500, NOT_UNSIGNED),
    ("/v2/models/simple/infer", {"inputs": simple_inputs_json((1.5, 16))}, 500, NOT_UNSIGNED),
    ("/v2/models/simple/infer", {"inputs": simple_inputs_json(("1", 16))}, 500, NOT_UNSIGNED),
])
def test_http_request_errors_are_tritons(simple_server, path, body, status, message):
    r = requests.post(simple_server.http(path), json=body, timeout=30)
    assert (r.status_code, r.json()) == (status, {"error": message}), r.text


P = "[request id: <id_unknown>] "


def simple_input(name, shape=(1, 16), data=None):
    return {"name": name, "shape": list(shape), "datatype": "INT32",
            "data": [0] * 16 if data is None else data}


@pytest.mark.parametrize("inputs, message", [
    # The model's checks run in Triton's order over its hash-map order of the inputs.
    ([simple_input("INPUT0"), simple_input("BOGUS")], "unexpected inference input 'BOGUS' for model 'simple'"),
    ([simple_input("INPUT0"), simple_input("INPUT1"), simple_input("BOGUS")],
     P + "expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) ['BOGUS','INPUT1','INPUT0'], but "
         "missing required input(s) ]. Please provide all required input(s)."),
    ([simple_input("INPUT0"), simple_input("INPUT1", (2, 16), [0] * 32)],
     P + "input 'INPUT0' batch size does not match other inputs for 'simple'"),
    ([simple_input("INPUT0", ()), simple_input("INPUT1")],
     P + "input 'INPUT0' has no shape but model requires batch dimension for 'simple'"),
    ([simple_input("INPUT0", (0, 16), []), simple_input("INPUT1", (0, 16), [])],
     P + "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 0"),
    # An element count that overflows to 0, as Triton computes it: no data is read, the shape is wrong.
    # (Both batch dims are 2^32, 0 in Triton's 32-bit batch size, so they agree; INPUT1 comes first.)
    ([simple_input("INPUT0", (2**32, 2**32)), simple_input("INPUT1", (2**32, 2**32))],
     P + "unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [4294967296,4294967296]. "
         "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to "
         "each input shape. If you want to specify the full shape including the batch dim in your input dims "
         "config, try setting max_batch_size to zero. See the model configuration docs for more info on "
         "max_batch_size."),
])
def test_model_checks_are_tritons_in_its_order(simple_server, inputs, message):
    r = requests.post(simple_server.http("/v2/models/simple/infer"), json={"inputs": inputs}, timeout=30)
    assert (r.status_code, r.json()) == (400, {"error": message}), r.text


def test_sizes_are_checked_after_the_model_checks_on_every_door(simple_server, server_factory, repo):
    url = simple_server.http("/v2/models/simple/infer")
    # Binary extension: a short tensor is reported with the prefix and the model, as Triton does.
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 60}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}]}).encode()
    r = requests.post(url, data=header + b"\0" * 124, timeout=30,
                      headers={"Inference-Header-Content-Length": str(len(header))})
    assert (r.status_code, r.json()["error"]) == (
        400, P + "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"), r.text
    # ...but a wrong datatype on the same input is found first.
    header = header.replace(b'"INT32", "parameters": {"binary_data_size": 60}', b'"FP32", "parameters": '
                            b'{"binary_data_size": 60}')
    r = requests.post(url, data=header + b"\0" * 124, timeout=30,
                      headers={"Inference-Header-Content-Length": str(len(header))})
    assert r.json()["error"] == P + "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"

    # gRPC: negative dims and short raw contents reach the same checks.
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    def grpc_error(shape0, raw0):
        request = service_pb2.ModelInferRequest(model_name="simple")
        for name, shape in (("INPUT0", shape0), ("INPUT1", [1, 16])):
            request.inputs.add(name=name, datatype="INT32", shape=shape)
        request.raw_input_contents.extend([raw0, b"\0" * 64])
        with pytest.raises(grpc.RpcError) as e:
            g._client_stub.ModelInfer(request, timeout=30)
        return e.value.code(), e.value.details()
    assert grpc_error([1, 15], b"\0" * 64) == (grpc.StatusCode.INVALID_ARGUMENT, P + (
        "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]. NOTE: Setting a "
        "non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input "
        "shape. If you want to specify the full shape including the batch dim in your input dims config, try "
        "setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."))
    assert grpc_error([1, 16], b"\0" * 60) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        P + "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60")
    assert grpc_error([-1, 16], b"\0" * 64) == (
        grpc.StatusCode.INVALID_ARGUMENT, P + "input 'INPUT0' batch size does not match other inputs for 'simple'")
    # Triton keeps the batch size in 32 bits: 2^32 + 1 is 1, which INPUT0's real dim does not match.
    assert grpc_error([2**32 + 1, 16], b"\0" * 64) == (
        grpc.StatusCode.INVALID_ARGUMENT, P + "input 'INPUT0' batch size does not match other inputs for 'simple'")
    g.close()


def test_bytes_element_counts_are_the_models_check(server_factory, repo):
    write_string_identity(repo)
    srv = server_factory(repo)
    wait_model_ready(srv, "strings")
    url = srv.http("/v2/models/strings/infer")
    def http_error(shape, data):
        body = {"inputs": [{"name": "TEXT", "shape": shape, "datatype": "BYTES", "data": data}]}
        r = requests.post(url, json=body, timeout=30)
        return r.status_code, r.json()["error"]
    assert http_error([3], ["a", "b"]) == (
        400, P + "expected 3 string elements for inference input 'TEXT' for model 'strings', got 2")
    assert http_error([1], ["a", "b", "c"]) == (
        400, P + "unexpected number of string elements 2 for inference input 'TEXT' for model 'strings', expecting 1")
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    request = service_pb2.ModelInferRequest(model_name="strings")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", 5) + b"x")
    with pytest.raises(grpc.RpcError) as e:
        g._client_stub.ModelInfer(request, timeout=30)
    assert (e.value.code(), e.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "incomplete string data for inference input 'TEXT', expecting string of length 5 but only 1 bytes available")
    # The server keeps serving.
    ok = requests.post(url, json={"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]},
                       timeout=30)
    assert ok.json()["outputs"][0]["data"] == ["hi"]
    g.close()


ONE_OF = ("Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
          "'shared_memory_region' in 'parameters'")


def with_params(**params):
    return {"inputs": simple_inputs_json(), "parameters": params}


def with_output(**params):
    return {"inputs": simple_inputs_json(), "outputs": [{"name": "OUTPUT0", "parameters": params}]}


@pytest.mark.parametrize("body, status, message", [
    (with_params(triton_x=1), 400,
     "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."),
    (with_params(foo=None), 400, "parameter 'foo' has invalid type. It should be either 'int', 'bool', or 'string'."),
    (with_params(foo=[1, 2]), 400, "parameter 'foo' has invalid type. It should be either 'int', 'bool', or 'string'."),
    (with_params(sequence_id=True), 500, "Unable to parse 'sequence_id': attempt to access JSON non-string as string"),
    (with_params(sequence_id=-5), 500, "Unable to parse 'sequence_id': attempt to access JSON non-string as string"),
    (with_params(sequence_id="x" * 129), 501, "string correlation ID cannot be longer than 128 characters"),
    (with_params(sequence_start="yes"), 500,
     "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"),
    (with_params(priority=-1), 500,
     "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    (with_params(timeout=1.5), 500,
     "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    (with_params(binary_data_output=1), 500,
     "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean"),
    ({"inputs": simple_inputs_json(), "parameters": [1]}, 500,
     "failed to get request params.: attempt to get members for non-object"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32"}]}, 400, ONE_OF + ". But no field is set"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16,
                  "parameters": {"binary_data_size": 64}}]}, 400, ONE_OF + ". But set 'data' 'binary_data_size'"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": "64"}}]},
     500, "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FLOAT", "data": [0] * 16}]}, 400,
     "invalid datatype for input INPUT0"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP16", "data": [0] * 16}]}, 400,
     "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": 5}]}, 500,
     "Unable to parse 'data': attempt to access JSON non-array as array"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "INT32", "data": ["a", 1]}]}, 500,
     "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    ({"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "BYTES", "data": [1, "a"]}]}, 500,
     "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
    (with_output(binary_data="yes"), 500, "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean"),
    (with_output(classification="2"), 500,
     "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    (with_output(classification=2, shared_memory_region="r", shared_memory_byte_size=64), 400,
     "Output can't set both 'shared_memory_region' and 'classification'"),
])
def test_http_parameter_errors_are_tritons(simple_server, body, status, message):
    r = requests.post(simple_server.http("/v2/models/simple/infer"), json=body, timeout=30)
    assert (r.status_code, r.json()) == (status, {"error": message}), r.text


def input_without(field):
    entry = {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}
    del entry[field]
    return entry


@pytest.mark.parametrize("body, status, message", [
    # Valid JSON of the wrong structure: TritonJson's words, in the order Triton walks the tree.
    ([1], 500, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
    ({"id": "x"}, 500, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
    ({"inputs": 5}, 500, "Unable to parse 'inputs': attempt to access JSON non-array as array"),
    ({"inputs": simple_inputs_json(), "id": 7}, 500, "Unable to parse 'id': attempt to access JSON non-string as string"),
    ({"inputs": [5]}, 400, ONE_OF + ". But no field is set"),
    ({"inputs": [input_without("name")]}, 500, "Unable to parse 'name': attempt to access non-existing object member 'name'"),
    ({"inputs": [dict(input_without("name"), name=3)]}, 500,
     "Unable to parse 'name': attempt to access JSON non-string as string"),
    ({"inputs": [input_without("datatype")]}, 500,
     "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'"),
    ({"inputs": [input_without("shape")]}, 500,
     "Unable to parse 'shape': attempt to access non-existing object member 'shape'"),
    ({"inputs": [dict(input_without("shape"), shape=16)]}, 500,
     "Unable to parse 'shape': attempt to access JSON non-array as array"),
    ({"inputs": simple_inputs_json(), "outputs": {"name": "OUTPUT0"}}, 500,
     "Unable to parse 'outputs': attempt to access JSON non-array as array"),
    ({"inputs": simple_inputs_json(), "outputs": [{}]}, 500,
     "Unable to parse 'name': attempt to access non-existing object member 'name'"),
])
def test_http_body_structure_errors_are_tritons(simple_server, body, status, message):
    r = requests.post(simple_server.http("/v2/models/simple/infer"), json=body, timeout=30)
    assert (r.status_code, r.json()) == (status, {"error": message}), r.text


def test_http_leftovers_and_ignored_parameters_are_tritons(simple_server):
    url = simple_server.http("/v2/models/simple/infer")
    header = json.dumps({"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32",
                                     "parameters": {"binary_data_size": 64}} for n in ("INPUT0", "INPUT1")]}).encode()
    r = requests.post(url, data=header + b"\0" * 132, timeout=30,
                      headers={"Inference-Header-Content-Length": str(len(header))})
    assert (r.status_code, r.json()) == (400, {"error": "unexpected additional input data for model 'simple'"})
    # Triton ignores `parameters` on an input or output when it is not an object; doubles are fine.
    inputs = simple_inputs_json()
    inputs[0]["parameters"] = 5
    body = {"inputs": inputs, "outputs": [{"name": "OUTPUT0", "parameters": [1]}], "parameters": {"ratio": 0.5}}
    r = requests.post(url, json=body, timeout=30)
    assert r.status_code == 200 and r.json()["outputs"][0]["name"] == "OUTPUT0", r.text


def grpc_param(**kind):
    return service_pb2.InferParameter(**kind)


@pytest.mark.parametrize("params, output_params, code, message", [
    ({"sequence_id": grpc_param(bool_param=True)}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
    ({"sequence_start": grpc_param(int64_param=1)}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value type for 'sequence_start' parameter, expected bool_param."),
    ({"priority": grpc_param(int64_param=-1)}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value for 'priority', expected value >= 0."),
    ({"priority": grpc_param(string_param="1")}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value type for 'priority' parameter, expected int64_param or uint64_param."),
    ({"timeout": grpc_param(uint64_param=5)}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value type for 'timeout' parameter, expected int64_param."),
    ({"triton_enable_empty_final_response": grpc_param(int64_param=1)}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."),
    ({"foo": grpc_param(uint64_param=5)}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value type for 'foo' parameter, expected int64_param, bool_param, or string_param."),
    ({"sequence_id": grpc_param(string_param="x" * 129)}, {}, grpc.StatusCode.UNIMPLEMENTED,
     "string correlation ID cannot be longer than 128 characters"),
    ({}, {"classification": grpc_param(string_param="2")}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value type for 'classification' parameter, expected int64_param"),
    ({}, {"classification": grpc_param(int64_param=-1)}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid value for 'classification' parameter, expected >= 0"),
    ({}, {"classification": grpc_param(int64_param=2), "shared_memory_region": grpc_param(string_param="r")},
     grpc.StatusCode.INVALID_ARGUMENT, "output can't set both 'shared_memory_region' and 'classification'"),
])
def test_grpc_parameter_errors_are_tritons(simple_server, params, output_params, code, message):
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(b"\0" * 64)
    for key, value in params.items():
        request.parameters[key].CopyFrom(value)
    out = request.outputs.add(name="OUTPUT0")
    for key, value in output_params.items():
        out.parameters[key].CopyFrom(value)
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    with pytest.raises(grpc.RpcError) as e:
        g._client_stub.ModelInfer(request, timeout=30)
    assert (e.value.code(), e.value.details()) == (code, message)
    g.close()


def test_duplicate_requested_outputs_are_answered_once(simple_server):
    body = {"inputs": simple_inputs_json(), "outputs": [{"name": "OUTPUT1"}, {"name": "OUTPUT1"}]}
    r = requests.post(simple_server.http("/v2/models/simple/infer"), json=body, timeout=30)
    assert r.status_code == 200 and [o["name"] for o in r.json()["outputs"]] == ["OUTPUT1"], r.text
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    out = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT0")]
    r = g.infer("simple", inputs, outputs=out)
    assert [o.name for o in r.get_response().outputs] == ["OUTPUT0"]
    g.close()


@pytest.mark.parametrize("version, message", [
    ("abc", "failed to get model version from specified version string 'abc' (details: stol), version should be an "
            "integral value > 0"),
    ("-1", "invalid model version specified '-1' , version should be an integral value > 0"),
])
def test_grpc_version_errors_are_tritons(simple_server, version, message):
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        g.infer("simple", inputs, model_version=version)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and e.value.message() == message, e.value
    # std::stol reads a leading number and ignores the rest: "1abc" is version 1.
    assert g.infer("simple", inputs, model_version="1abc").as_numpy("OUTPUT0") is not None
    g.close()


def test_shared_memory_registration_errors_are_tritons(simple_server, tmp_path):
    import uuid
    key = f"/tessera-compat-{uuid.uuid4().hex[:8]}"
    fd = os.open(f"/dev/shm{key}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 64)
    os.close(fd)
    try:
        def register(name, k, offset, size):
            return requests.post(simple_server.http(f"/v2/systemsharedmemory/region/{name}/register"),
                                 json={"key": k, "offset": offset, "byte_size": size}, timeout=10)
        cases = [
            (("r1", "/tessera-no-such-key", 0, 64), 500, "Unable to open shared memory region: '/tessera-no-such-key'"),
            (("r2", "/a/b", 0, 64), 500, "Unable to open shared memory region: '/a/b'"),
            (("r3", key, 0, 128), 400, "failed to register shared memory region 'r3': invalid args"),
            (("r4", key, 2**64 - 1, 16), 400,
             "failed to register shared memory region 'r4': unable to process address spaceInvalid argument"),
        ]
        for args, status, message in cases:
            r = register(*args)
            assert (r.status_code, r.json()) == (status, {"error": message}), (args, r.text)
        assert register("ok", key, 0, 64).status_code == 200
        r = register("ok", key, 0, 64)
        assert (r.status_code, r.json()) == (400, {"error": "shared memory region 'ok' already in manager"}), r.text
    finally:
        requests.post(simple_server.http("/v2/systemsharedmemory/unregister"), timeout=10)
        os.unlink(f"/dev/shm{key}")


@pytest.fixture
def shm_region(simple_server):
    """A 64-byte system shared-memory region 'rb' registered with the server."""
    import uuid
    key = f"/tessera-compat-{uuid.uuid4().hex[:8]}"
    fd = os.open(f"/dev/shm{key}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 64)
    os.close(fd)
    r = requests.post(simple_server.http("/v2/systemsharedmemory/region/rb/register"),
                      json={"key": key, "offset": 0, "byte_size": 64}, timeout=10)
    assert r.status_code == 200, r.text
    yield "rb"
    requests.post(simple_server.http("/v2/systemsharedmemory/unregister"), timeout=10)
    os.unlink(f"/dev/shm{key}")


def shm_http_body(**params):
    inputs = simple_inputs_json()
    del inputs[0]["data"]
    inputs[0]["parameters"] = params
    return {"inputs": inputs}


@pytest.mark.parametrize("params, status, message", [
    ({"shared_memory_region": 5, "shared_memory_byte_size": 64}, 500,
     "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string"),
    ({"shared_memory_region": "rb", "shared_memory_offset": -1, "shared_memory_byte_size": 64}, 500,
     "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ({"shared_memory_region": "rb", "shared_memory_byte_size": "64"}, 500,
     "Unable to parse 'shared_memory_byte_size': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    # No byte size over HTTP is a byte size of 0, which Triton's bounds check refuses at offset 0.
    ({"shared_memory_region": "rb"}, 400, "Invalid offset + byte size for shared memory region: 'rb'"),
    ({"shared_memory_region": "rb", "shared_memory_offset": 64, "shared_memory_byte_size": 0}, 400,
     "Invalid offset for shared memory region: 'rb'"),
    ({"shared_memory_region": "rb", "shared_memory_offset": 32, "shared_memory_byte_size": 64}, 400,
     "Invalid offset + byte size for shared memory region: 'rb'"),
    ({"shared_memory_region": "rb", "shared_memory_byte_size": 60}, 400,
     P + "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"),
])
def test_http_shared_memory_tensor_errors_are_tritons(simple_server, shm_region, params, status, message):
    r = requests.post(simple_server.http("/v2/models/simple/infer"), json=shm_http_body(**params), timeout=30)
    assert (r.status_code, r.json()) == (status, {"error": message}), r.text


def test_http_shared_memory_offset_without_region_is_ignored(simple_server):
    inputs = simple_inputs_json()
    inputs[0]["parameters"] = {"shared_memory_offset": 8}
    r = requests.post(simple_server.http("/v2/models/simple/infer"), json={"inputs": inputs}, timeout=30)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("params, message", [
    ({"shared_memory_region": grpc_param(int64_param=1), "shared_memory_byte_size": grpc_param(int64_param=64)},
     "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', expected string_param."),
    ({"shared_memory_region": grpc_param(string_param="rb"), "shared_memory_offset": grpc_param(string_param="0"),
      "shared_memory_byte_size": grpc_param(int64_param=64)},
     "invalid value type for 'shared_memory_offset' parameter for tensor 'INPUT0', expected int64_param."),
    ({"shared_memory_region": grpc_param(string_param="rb"), "shared_memory_byte_size": grpc_param(uint64_param=64)},
     "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', expected int64_param."),
    ({"shared_memory_byte_size": grpc_param(int64_param=64)},
     "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'"),
    # A negative offset is taken as unsigned, as Triton does: far past the region.
    ({"shared_memory_region": grpc_param(string_param="rb"), "shared_memory_offset": grpc_param(int64_param=-1),
      "shared_memory_byte_size": grpc_param(int64_param=64)}, "Invalid offset for shared memory region: 'rb'"),
])
def test_grpc_shared_memory_tensor_errors_are_tritons(simple_server, shm_region, params, message):
    request = service_pb2.ModelInferRequest(model_name="simple")
    shm = request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    for key, value in params.items():
        shm.parameters[key].CopyFrom(value)
    request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    request.raw_input_contents.append(b"\0" * 64)
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    with pytest.raises(grpc.RpcError) as e:
        g._client_stub.ModelInfer(request, timeout=30)
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    g.close()


@pytest.mark.parametrize("body, message", [
    # rapidjson's words and byte offsets, as Triton answers a syntax error (500).
    (b'{"inputs":[{"name":', "Invalid value. at 19"),
    (b'{"inputs" 1}', "Missing a colon after a name of object member. at 10"),
    (b'{"inputs":1 "b":2}', "Missing a comma or '}' after an object member. at 12"),
    (b'{"inputs":[]} xyz', "The document root must not be followed by other values. at 14"),
    (b'{"inputs":[1 2]}', "Missing a comma or ']' after an array element. at 13"),
    (b'{"id":"\\x"}', "Invalid escape character in string. at 7"),
    (b'{"id":"abc', "Missing a closing quotation mark in string. at 10"),
    (b'{"inputs":[],"a":1.}', "Miss fraction part in number. at 19"),
    (b'{"inputs":[],"a":1e}', "Miss exponent in number. at 19"),
    (b' ', "The document is empty. at 1"),
])
def test_http_json_syntax_errors_are_rapidjsons(simple_server, body, message):
    r = requests.post(simple_server.http("/v2/models/simple/infer"), data=body, timeout=30)
    assert (r.status_code, r.json()) == (500, {"error": "failed to parse the request JSON buffer: " + message}), r.text


def test_http_json_is_read_as_rapidjson_reads_it(simple_server):
    body = json.dumps({"inputs": simple_inputs_json()}).encode()
    for variant in (body + b"\0 trailing bytes after a NUL", b"\xef\xbb\xbf" + body):
        r = requests.post(simple_server.http("/v2/models/simple/infer"), data=variant, timeout=30)
        assert r.status_code == 200, r.text


def test_shared_memory_register_bodies_are_tritons(simple_server, shm_region):
    def register(path, body):
        return requests.post(simple_server.http(path), data=body, timeout=10)
    url = "/v2/systemsharedmemory/region/r2/register"
    cases = [
        (url, b"", 500, "failed to parse the request JSON buffer: The document is empty. at 0"),
        (url, b"{", 500, "failed to parse the request JSON buffer: Missing a name for object member. at 1"),
        (url, b'{"key": 5, "byte_size": 64}', 500, "attempt to access JSON non-string as string"),
        (url, b'{"key": "/k", "offset": -1, "byte_size": 64}', 500,
         "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        (url, b'{"key": "/k", "byte_size": "64"}', 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ("/v2/systemsharedmemory/register", b'{"key": "/k", "byte_size": 64}', 400,
         "'region name' is necessary to register system shared memory region"),
        ("/v2/cudasharedmemory/register", b"{}", 400,
         "'region name' is necessary to register cuda shared memory region"),
    ]
    for path, body, status, message in cases:
        r = register(path, body)
        assert (r.status_code, r.json()) == (status, {"error": message}), (body, r.text)
    # Over gRPC an empty region name is a name, as in Triton.
    key = requests.get(simple_server.http(f"/v2/systemsharedmemory/region/{shm_region}/status"),
                       timeout=10).json()[0]["key"]
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    g.register_system_shared_memory("", key, 64)
    assert [r.name for r in g.get_system_shared_memory_status().regions.values()].count("") == 1
    g.close()
    r = requests.get(simple_server.http(f"/v2/cudasharedmemory/region/{shm_region}/status"), timeout=10)
    assert (r.status_code, r.json()) == (404, {
        "error": "The region named 'rb' is registered as system shared memory, not CUDA shared memory"}), r.text


@pytest.mark.parametrize("datatype, contents, message", [
    ("INT32", {"fp32_contents": [0.0] * 16},
     "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected datatype "
     "'INT32'"),
    ("INT32", {"int_contents": [0] * 16, "fp32_contents": [0.0] * 16},
     "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple', binary data was already supplied."),
    # The count is the core's check, after the model's: a byte-size mismatch.
    ("INT32", {"int_contents": [0] * 15},
     P + "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"),
])
def test_grpc_typed_contents_errors_are_tritons(simple_server, datatype, contents, message):
    request = service_pb2.ModelInferRequest(model_name="simple")
    typed = request.inputs.add(name="INPUT0", datatype=datatype, shape=[1, 16])
    for field, values in contents.items():
        getattr(typed.contents, field).extend(values)
    request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16]).contents.int_contents.extend([0] * 16)
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    with pytest.raises(grpc.RpcError) as e:
        g._client_stub.ModelInfer(request, timeout=30)
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    g.close()


def test_a_body_that_is_not_gzip_is_refused_as_such(simple_server):
    # Decided: Triton inflates it to nothing and answers as for a raw request; Tessera says what is wrong.
    r = requests.post(simple_server.http("/v2/models/simple/infer"), data=b"not gzip at all", timeout=30,
                      headers={"Content-Encoding": "gzip"})
    assert (r.status_code, r.json()) == (400, {"error": "failed to decompress the gzip request body: invalid gzip header"})


def test_an_unknown_datatype_is_reported_as_triton_does(simple_server):
    invalid = P + "inference input 'INPUT0' data-type is '<invalid>', but model 'simple' expects 'INT32'"
    # gRPC: the model's datatype check, in Triton's order, names the type '<invalid>'.
    request = service_pb2.ModelInferRequest(model_name="simple")
    request.inputs.add(name="INPUT0", datatype="FLOAT", shape=[1, 16])
    request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    request.raw_input_contents.extend([b"\0" * 64, b"\0" * 64])
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    with pytest.raises(grpc.RpcError) as e:
        g._client_stub.ModelInfer(request, timeout=30)
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, invalid)
    g.close()
    # HTTP binary data: the same; with JSON data the door refuses it first (it cannot read the values).
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FLOAT", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}]}).encode()
    r = requests.post(simple_server.http("/v2/models/simple/infer"), data=header + b"\0" * 128, timeout=30,
                      headers={"Inference-Header-Content-Length": str(len(header))})
    assert (r.status_code, r.json()) == (400, {"error": invalid}), r.text
