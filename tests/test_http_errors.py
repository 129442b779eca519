"""Bad requests over raw HTTP. Each case checks the status code and a KServe error body
{"error": "<meaningful message>"}, then proves the server still serves a good request.

Expected status codes live in tessera_testlib.EXPECT (aligned with docs/triton-http-behaviour.md).
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time

import numpy as np
import pytest
import requests

from tessera_testlib import (
    EXPECT,
    SIMPLE_IN0,
    SIMPLE_IN1,
    TesseraServer,
    assert_error,
    assert_serves,
    post_infer,
    simple_json_request,
)


def binary_request(in0: np.ndarray, in1: np.ndarray, sizes=None, extra_json=None):
    """A binary-tensor request for simple: (body bytes, JSON header length)."""
    sizes = sizes or (in0.nbytes, in1.nbytes)
    header = {
        "inputs": [
            {"name": "INPUT0", "shape": list(in0.shape), "datatype": "INT32",
             "parameters": {"binary_data_size": sizes[0]}},
            {"name": "INPUT1", "shape": list(in1.shape), "datatype": "INT32",
             "parameters": {"binary_data_size": sizes[1]}},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
    }
    if extra_json:
        header.update(extra_json)
    h = json.dumps(header).encode()
    return h + in0.tobytes() + in1.tobytes(), len(h)


A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.int32)


# ---------------------------------------------------------------------------------------------
# The good path of the raw helpers (so a failure below is about the bad input, not the helper)
# ---------------------------------------------------------------------------------------------

def test_raw_json_infer_ok(server):
    r = post_infer(server, "simple", simple_json_request(id="raw-1"))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["model_name"] == "simple" and doc["id"] == "raw-1"
    outs = {o["name"]: o for o in doc["outputs"]}
    assert outs["OUTPUT0"]["data"] == [a + b for a, b in zip(SIMPLE_IN0, SIMPLE_IN1)]
    assert outs["OUTPUT0"]["shape"] == [1, 16] and outs["OUTPUT0"]["datatype"] == "INT32"


def test_raw_binary_infer_ok(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={
        "Inference-Header-Content-Length": str(hlen), "Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    outs = {o["name"]: o for o in r.json()["outputs"]}
    assert list(outs) == ["OUTPUT0"]
    assert outs["OUTPUT0"]["data"] == (A + B).ravel().tolist()


def test_raw_binary_output_ok(server):
    body, hlen = binary_request(A, B, extra_json={"outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}}]})
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": str(hlen)})
    assert r.status_code == 200, r.text
    jlen = int(r.headers["Inference-Header-Content-Length"])
    doc = json.loads(r.content[:jlen])
    (out,) = doc["outputs"]
    assert out["name"] == "OUTPUT1" and out["parameters"]["binary_data_size"] == 64
    got = np.frombuffer(r.content[jlen:], dtype=np.int32)
    np.testing.assert_array_equal(got, (A - B).ravel())


# ---------------------------------------------------------------------------------------------
# Body / JSON framing
# ---------------------------------------------------------------------------------------------

def test_malformed_json(server):
    r = post_infer(server, "simple", b'{"inputs": [ {"name": "INPUT0", ')
    assert_error(r, EXPECT["malformed_json"], any_of=["json", "parse"])
    assert_serves(server)


def test_empty_body(server):
    r = post_infer(server, "simple", b"")
    assert_error(r, EXPECT["empty_body"])
    assert_serves(server)


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b'"inputs"', b"42", b"null", b"true"])
def test_non_object_json(server, body):
    r = post_infer(server, "simple", body)
    assert_error(r, EXPECT["non_object_json"])
    assert_serves(server)


def test_deeply_nested_json(server):
    body = b"[" * 100_000 + b"]" * 100_000
    r = post_infer(server, "simple", body)
    assert_error(r, EXPECT["deeply_nested_json"])
    assert_serves(server)


def test_deeply_nested_json_in_data_field(server):
    req = simple_json_request()
    req["inputs"][0]["data"] = "NESTED"
    text = json.dumps(req).replace('"NESTED"', "[" * 50_000 + "0" + "]" * 50_000, 1)
    json_ok = text.count("[") == text.count("]")
    assert json_ok
    r = post_infer(server, "simple", text.encode())
    assert_error(r, EXPECT["deeply_nested_json"])
    assert_serves(server)


def test_inputs_not_a_list(server):
    r = post_infer(server, "simple", {"inputs": {"name": "INPUT0"}})
    assert_error(r, EXPECT["non_object_json"], any_of=["inputs", "array", "list"])
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Tensor validation
# ---------------------------------------------------------------------------------------------

def test_wrong_datatype(server):
    req = simple_json_request()
    req["inputs"][0]["datatype"] = "FP32"
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["wrong_dtype"], "INPUT0", any_of=["INT32", "FP32"])
    assert_serves(server)


def test_unknown_datatype_name(server):
    req = simple_json_request()
    req["inputs"][1]["datatype"] = "COMPLEX128"
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["wrong_dtype"], any_of=["COMPLEX128", "INPUT1", "datatype"])
    assert_serves(server)


def test_wrong_shape(server):
    req = simple_json_request(in0=list(range(15)), in1=[1] * 15)
    for t in req["inputs"]:
        t["shape"] = [1, 15]
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["wrong_shape"], "INPUT0", any_of=["shape", "15"])
    assert_serves(server)


def test_wrong_rank(server):
    req = simple_json_request()
    req["inputs"][0]["shape"] = [16]
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["wrong_shape"], "INPUT0")
    assert_serves(server)


def test_inputs_with_different_batch_sizes(server):
    req = simple_json_request()
    req["inputs"][1]["shape"] = [2, 16]
    req["inputs"][1]["data"] = SIMPLE_IN1 * 2
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["wrong_shape"], any_of=["batch", "INPUT1", "shape"])
    assert_serves(server)


@pytest.mark.parametrize("n", [15, 17], ids=["too-few", "too-many"])
def test_element_count_mismatch(server, n):
    req = simple_json_request()
    req["inputs"][0]["data"] = list(range(n))
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["element_count"], any_of=["INPUT0", "data", "element"])
    assert_serves(server)


def test_data_of_wrong_json_type(server):
    req = simple_json_request()
    req["inputs"][0]["data"] = ["a"] * 16
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["wrong_dtype"], any_of=["INPUT0", "data", "int"])
    assert_serves(server)


def test_missing_input(server):
    req = simple_json_request()
    del req["inputs"][1]
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["missing_input"], "INPUT1")
    assert_serves(server)


def test_unknown_input(server):
    req = simple_json_request()
    req["inputs"].append(dict(req["inputs"][0], name="INPUT_BOGUS"))
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["unknown_input"], "INPUT_BOGUS")
    assert_serves(server)


def test_duplicate_input(server):
    req = simple_json_request()
    req["inputs"][1]["name"] = "INPUT0"
    r = post_infer(server, "simple", req)
    assert_error(r, EXPECT["unknown_input"], "INPUT0")
    assert_serves(server)


def test_unknown_requested_output(server):
    r = post_infer(server, "simple", simple_json_request(outputs=[{"name": "OUTPUT_BOGUS"}]))
    assert_error(r, EXPECT["unknown_output"], "OUTPUT_BOGUS")
    assert_serves(server)


def test_batch_larger_than_max_batch_size(server):
    r = post_infer(server, "simple", simple_json_request(batch=9))
    assert_error(r, EXPECT["batch_too_large"], "batch", "8")
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Model / version / URL routing
# ---------------------------------------------------------------------------------------------

def test_unknown_model(server):
    r = post_infer(server, "no_such_model", simple_json_request())
    assert_error(r, EXPECT["unknown_model"], "no_such_model")
    assert_serves(server)


def test_unknown_version(server):
    r = post_infer(server, "simple", simple_json_request(), version=99)
    assert_error(r, EXPECT["unknown_version"], "simple", "99")
    assert_serves(server)


def test_non_numeric_version(server):
    r = post_infer(server, "simple", simple_json_request(), version="abc")
    assert r.status_code in (400, 404), r.text
    assert_serves(server)


@pytest.mark.parametrize("path", ["/v2/models/no_such_model", "/v2/models/no_such_model/config",
                                  "/v2/models/no_such_model/versions/1"])
def test_unknown_model_metadata_endpoints(server, path):
    r = requests.get(server.http(path), timeout=10)
    assert_error(r, EXPECT["unknown_model"], "no_such_model")
    assert_serves(server)


def test_unknown_model_ready(server):
    r = requests.get(server.http("/v2/models/no_such_model/ready"), timeout=10)
    assert r.status_code != 200
    assert_serves(server)


@pytest.mark.parametrize("method,path", [("GET", "/v2/nothing/here"), ("GET", "/"), ("POST", "/v3/models/simple/infer"),
                                         ("GET", "/v2/models/simple/infer/extra")])
def test_unknown_url(server, method, path):
    r = requests.request(method, server.http(path), timeout=10)
    assert r.status_code in EXPECT["unknown_url"], f"{method} {path}: HTTP {r.status_code}: {r.text!r}"
    assert_serves(server)


@pytest.mark.parametrize("method,path", [("GET", "/v2/models/simple/infer"), ("PUT", "/v2/models/simple/infer"),
                                         ("DELETE", "/v2/health/live"), ("POST", "/v2/health/ready")])
def test_wrong_method(server, method, path):
    r = requests.request(method, server.http(path), timeout=10)
    assert r.status_code in EXPECT["wrong_method"], f"{method} {path}: HTTP {r.status_code}: {r.text!r}"
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Binary tensor framing
# ---------------------------------------------------------------------------------------------

def test_header_length_larger_than_body(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": str(len(body) + 100)})
    assert_error(r, EXPECT["header_length_too_large"], any_of=["inference-header-content-length", "header", "length"])
    assert_serves(server)


@pytest.mark.parametrize("value", ["abc", "-5", "1e3", "99999999999999999999999"])
def test_header_length_not_numeric(server, value):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": value})
    assert_error(r, EXPECT["header_length_not_numeric"], any_of=["inference-header-content-length", "header", "length"])
    assert_serves(server)


def test_header_length_cuts_json_short(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": str(hlen - 10)})
    assert r.status_code == 400, r.text
    assert_serves(server)


def test_binary_body_shorter_than_declared(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body[:-8], headers={"Inference-Header-Content-Length": str(hlen)})
    assert_error(r, EXPECT["binary_size_mismatch"], any_of=["INPUT1", "binary", "size", "bytes"])
    assert_serves(server)


def test_binary_body_longer_than_declared(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body + b"\0" * 8, headers={"Inference-Header-Content-Length": str(hlen)})
    assert_error(r, EXPECT["binary_size_mismatch"], any_of=["binary", "size", "bytes", "additional", "unexpected"])
    assert_serves(server)


def test_binary_data_size_inconsistent_with_shape(server):
    # Total body length is right (60 + 68 = 128 bytes) but each tensor's declared size is wrong.
    body, hlen = binary_request(A, B, sizes=(60, 68))
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": str(hlen)})
    assert_error(r, EXPECT["binary_size_mismatch"], any_of=["INPUT0", "INPUT1"])
    assert_serves(server)


def test_binary_data_size_without_header_length(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body)  # no Inference-Header-Content-Length: body is not valid JSON
    assert r.status_code == 400, r.text
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Content-Encoding
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_invalid_compressed_body(server, encoding):
    r = post_infer(server, "simple", b"this is not compressed at all" * 10, headers={"Content-Encoding": encoding})
    assert_error(r, EXPECT["bad_gzip"], any_of=["gzip", "deflate", "decompress", "compress", "encod"])
    assert_serves(server)


def test_truncated_gzip_body(server):
    good = gzip.compress(json.dumps(simple_json_request()).encode())
    r = post_infer(server, "simple", good[: len(good) // 2], headers={"Content-Encoding": "gzip"})
    assert_error(r, EXPECT["bad_gzip"])
    assert_serves(server)


def test_unsupported_content_encoding(server):
    r = post_infer(server, "simple", json.dumps(simple_json_request()).encode(), headers={"Content-Encoding": "br"})
    assert 400 <= r.status_code < 500, r.text
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Oversized bodies (bounded: at most ~70 MiB is sent)
# ---------------------------------------------------------------------------------------------

def _raw_post(server: TesseraServer, path: str, headers: dict, chunks, total_timeout: float = 60.0):
    """Send a request over a raw socket from a sender thread while reading the response.

    Returns (status or None, response bytes, send error or None). The server may answer early and
    close the connection mid-upload; that is fine (a reset is reported, never raised)."""
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=total_timeout)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.http_port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "Connection: close\r\n\r\n"
    send_error: list = []

    def sender():
        try:
            sock.sendall(head.encode())
            for c in chunks:
                sock.sendall(c)
        except OSError as e:
            send_error.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    data = b""
    deadline = time.monotonic() + total_timeout
    try:
        while time.monotonic() < deadline:
            try:
                piece = sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not piece:
                break
            data += piece
            if b"\r\n\r\n" in data:
                head_part, _, rest = data.partition(b"\r\n\r\n")
                cl = [l for l in head_part.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(rest) >= int(cl[0].split(b":")[1]):
                    break
    finally:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        t.join(timeout=30)
    status = None
    if data.startswith(b"HTTP/1."):
        status = int(data.split(b" ", 2)[1])
    return status, data, (send_error[0] if send_error else None)


def _body_of(raw: bytes) -> bytes:
    return raw.partition(b"\r\n\r\n")[2]


def test_oversized_body_is_rejected(server):
    """~70 MiB: a *valid* infer request padded by a huge id. Triton's default
    --http-max-input-size is 64 MiB; a server without any limit would answer 200 here."""
    pad = 70 * 1024 * 1024
    prefix = json.dumps(simple_json_request())[:-1].encode() + b', "id": "'
    suffix = b'"}'
    total = len(prefix) + pad + len(suffix)
    block = b"x" * (1024 * 1024)

    def chunks():
        yield prefix
        for _ in range(pad // len(block)):
            yield block
        yield suffix

    status, raw, _ = _raw_post(server, "/v2/models/simple/infer",
                               {"Content-Type": "application/json", "Content-Length": str(total)}, chunks())
    if status is not None:
        assert status in EXPECT["body_too_large"], f"HTTP {status} for a {total}-byte body: {raw[:300]!r}"
        if status != 413 or _body_of(raw):
            msg = json.loads(_body_of(raw))["error"]
            assert msg.strip()
    # else: the server cut the connection before we could read an answer; acceptable if it survives.
    assert_serves(server)


def test_oversized_chunked_body_is_rejected(server):
    pad = 70 * 1024 * 1024
    block = b"x" * (1024 * 1024)

    def chunks():
        first = json.dumps(simple_json_request())[:-1].encode() + b', "id": "'
        yield b"%x\r\n%s\r\n" % (len(first), first)
        for _ in range(pad // len(block)):
            yield b"%x\r\n%s\r\n" % (len(block), block)
        yield b'2\r\n"}\r\n0\r\n\r\n'

    status, raw, _ = _raw_post(server, "/v2/models/simple/infer",
                               {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}, chunks())
    if status is not None:
        assert status in EXPECT["body_too_large"], f"HTTP {status}: {raw[:300]!r}"
    assert_serves(server)


def test_lying_content_length_then_close(server):
    """Content-Length promises 1 GiB, a few KB arrive, then the client hangs up: the server must
    neither allocate the promised size up front and die, nor stop serving others."""
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
    try:
        sock.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1073741824\r\n\r\n" + b"{" * 4096)
    finally:
        sock.close()
    assert_serves(server)


def test_oversized_binary_data_size_claim(server):
    """binary_data_size claims 2**40 bytes: must be a clean 400, not an allocation attempt."""
    body, hlen = binary_request(A, B, sizes=(2**40, 64))
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": str(hlen)})
    assert_error(r, EXPECT["binary_size_mismatch"])
    assert_serves(server)


def test_huge_shape_claim(server):
    req = simple_json_request()
    req["inputs"][0]["shape"] = [1, 2**40]
    req["inputs"][1]["shape"] = [1, 2**40]
    r = post_infer(server, "simple", req)
    assert r.status_code == 400, r.text
    error_ok = r.json().get("error", "")
    assert error_ok.strip()
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Concurrency: bad requests interleaved with good ones on the same connection pool
# ---------------------------------------------------------------------------------------------

def test_keepalive_connection_survives_error(server):
    with requests.Session() as s:
        for i in range(5):
            bad = s.post(server.http("/v2/models/simple/infer"), data=b"{bad json", timeout=10)
            assert bad.status_code == 400
            good = s.post(server.http("/v2/models/simple/infer"), data=json.dumps(simple_json_request()), timeout=10)
            assert good.status_code == 200, good.text
    assert_serves(server)
