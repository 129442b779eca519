"""Bad requests over raw HTTP. Each case checks the status code and a KServe error body
{"error": "<meaningful message>"}, then proves the server still serves a good request.

Expected status codes live in tessera_testlib.EXPECT (aligned with docs/triton-http-behaviour.md).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import requests

from tessera_testlib import (
    BAD_REQUEST,
    EXPECT,
    INTERNAL,
    error_message,
    SIMPLE_IN0,
    SIMPLE_IN1,
    assert_error,
    assert_error_then_serves,
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
    r = post_infer(server, "simple", b'{"inputs":[{"name":')
    assert_error_then_serves(server, r, EXPECT["malformed_json"], any_of=["json", "parse"])


def test_trailing_garbage_after_json(server):
    r = post_infer(server, "simple", json.dumps(simple_json_request()).encode() + b"xyz")
    assert_error_then_serves(server, r, EXPECT["malformed_json"], any_of=["json", "parse"])


def test_empty_body(server):
    # Triton treats an empty body as a raw binary request (no JSON header) and, simple having two
    # inputs, answers 400 "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs
    # in 'simple' model configuration".
    r = post_infer(server, "simple", b"")
    assert_error(r, EXPECT["empty_body"], "simple")
    assert r.json()["error"] == ("[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced "
                                 "but got 2 inputs in 'simple' model configuration")
    assert_serves(server)


@pytest.mark.parametrize("body", [b"[1,2,3]", b'"hello"', b"42", b"null", b"{}"],
                         ids=["array", "string", "number", "null", "empty-object"])
def test_non_object_json_or_no_inputs(server, body):
    r = post_infer(server, "simple", body)
    assert_error_then_serves(server, r, EXPECT["non_object_json"], "inputs")


def test_inputs_not_an_array(server):
    r = post_infer(server, "simple", {"inputs": {}})
    assert_error_then_serves(server, r, EXPECT["inputs_not_array"], "inputs")


def test_empty_inputs_array(server):
    r = post_infer(server, "simple", {"inputs": []})
    assert_error_then_serves(server, r, EXPECT["missing_input"], "INPUT0", "INPUT1")


def test_deeply_nested_json(server):
    body = b"[" * 100_000 + b"]" * 100_000
    r = post_infer(server, "simple", body)
    assert_error_then_serves(server, r, EXPECT["deeply_nested_json"])


def test_deeply_nested_json_in_data_field(server):
    req = simple_json_request()
    req["inputs"][0]["data"] = "NESTED"
    text = json.dumps(req).replace('"NESTED"', "[" * 50_000 + "0" + "]" * 50_000, 1)
    r = post_infer(server, "simple", text.encode())
    # Triton 2.51: 500 ("Shape does not match true shape of 'data' field" once flattened); 2.7x, which
    # this server follows, refuses data under 100 or more arrays.
    assert_error_then_serves(server, r, 400,
                             "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit (100)")


@pytest.mark.parametrize("field", ["name", "shape", "datatype"])
def test_missing_tensor_field(server, field):
    req = simple_json_request()
    del req["inputs"][0][field]
    r = post_infer(server, "simple", req)
    assert_error(r, INTERNAL, field)  # "Unable to parse 'shape': attempt to access non-existing object member 'shape'"
    assert_serves(server)


def test_missing_data_field(server):
    req = simple_json_request()
    del req["inputs"][0]["data"]
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["no_data"], "data", "binary_data_size")


def test_negative_shape(server):
    req = simple_json_request()
    req["inputs"][0]["shape"] = [-1, 16]
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, INTERNAL, "shape")


def test_id_not_a_string(server):
    r = post_infer(server, "simple", simple_json_request(id=5))
    assert_error_then_serves(server, r, INTERNAL, "id")


# ---------------------------------------------------------------------------------------------
# Tensor validation
# ---------------------------------------------------------------------------------------------

def test_wrong_datatype(server):
    req = simple_json_request()
    req["inputs"][0]["datatype"] = "FP32"
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["wrong_dtype"], "INPUT0", "FP32", "INT32", "simple")


def test_unknown_datatype_name(server):
    req = simple_json_request()
    req["inputs"][1]["datatype"] = "COMPLEX128"
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["invalid_dtype_name"], "datatype", "INPUT1")


def test_wrong_shape(server):
    req = simple_json_request()
    req["inputs"][0]["shape"] = [1, 15]
    req["inputs"][0]["data"] = list(range(15))
    r = post_infer(server, "simple", req)
    msg = assert_error(r, EXPECT["wrong_shape"], "INPUT0", "simple", "[-1,16]", "[1,15]")
    assert "max_batch_size" in msg  # Triton's NOTE about the batch dimension
    assert_serves(server)


def test_missing_batch_dimension(server):
    req = simple_json_request()
    req["inputs"][0]["shape"] = [16]
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["batch_mismatch"], "INPUT0", "batch size")


def test_inputs_with_different_batch_sizes(server):
    req = simple_json_request()
    req["inputs"][1]["shape"] = [2, 16]
    req["inputs"][1]["data"] = SIMPLE_IN1 * 2
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["batch_mismatch"], "batch size", "simple")


@pytest.mark.parametrize("n", [15, 17], ids=["too-few", "too-many"])
def test_element_count_mismatch(server, n):
    req = simple_json_request()
    req["inputs"][0]["data"] = list(range(n))
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["element_count"], "data", "shape")


@pytest.mark.parametrize("bad", ["a", 1.5], ids=["string", "float"])
def test_data_element_of_wrong_json_type(server, bad):
    req = simple_json_request()
    req["inputs"][0]["data"] = [bad] + list(range(1, 16))
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["data_json_type"], "data")


def test_missing_input(server):
    req = simple_json_request()
    del req["inputs"][1]
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["missing_input"], "INPUT1", "simple", "expected 2 inputs but got 1")


def test_request_id_prefixes_core_errors(server):
    req = simple_json_request(id="abc")
    del req["inputs"][1]
    r = post_infer(server, "simple", req)
    msg = assert_error(r, EXPECT["missing_input"], "INPUT1")
    assert msg.startswith("[request id: abc] "), msg
    req = simple_json_request()
    del req["inputs"][1]
    msg = assert_error(post_infer(server, "simple", req), EXPECT["missing_input"])
    assert msg.startswith("[request id: <id_unknown>] "), msg
    assert_serves(server)


def test_unknown_input(server):
    req = simple_json_request()
    req["inputs"].append(dict(req["inputs"][0], name="INPUT_BOGUS"))
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["unknown_input"], "INPUT_BOGUS", "simple")


def test_duplicate_input(server):
    req = simple_json_request()
    req["inputs"].insert(0, dict(req["inputs"][0]))
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["duplicate_input"], "INPUT0", "already exists")


def test_unknown_requested_output(server):
    r = post_infer(server, "simple", simple_json_request(outputs=[{"name": "OUTPUT_BOGUS"}]))
    assert_error_then_serves(server, r, EXPECT["unknown_output"], "OUTPUT_BOGUS", "simple")


def test_batch_larger_than_max_batch_size(server):
    r = post_infer(server, "simple", simple_json_request(batch=9))
    assert_error_then_serves(server, r, EXPECT["batch_too_large"], "batch-size must be <= 8", "simple")


# ---------------------------------------------------------------------------------------------
# Model / version / URL routing
# ---------------------------------------------------------------------------------------------

def test_unknown_model(server):
    r = post_infer(server, "no_such_model", simple_json_request())
    assert_error_then_serves(server, r, EXPECT["unknown_model"], "Request for unknown model", "'no_such_model'")


def test_unknown_version(server):
    r = post_infer(server, "simple", simple_json_request(), version=99)
    assert_error_then_serves(server, r, EXPECT["unknown_version"], "'simple' version 99")


@pytest.mark.parametrize("version", ["abc", "-1"])
def test_bad_version_in_path(server, version):
    r = post_infer(server, "simple", simple_json_request(), version=version)
    assert_error_then_serves(server, r, EXPECT["bad_version_path"])


@pytest.mark.parametrize("path", ["/v2/models/no_such_model", "/v2/models/no_such_model/config",
                                  "/v2/models/no_such_model/versions/1"])
def test_unknown_model_metadata_endpoints(server, path):
    r = requests.get(server.http(path), timeout=10)
    assert_error_then_serves(server, r, EXPECT["unknown_model"], "'no_such_model'")


@pytest.mark.parametrize("path", ["/v2/models/no_such_model/ready", "/v2/models/simple/versions/9/ready"])
def test_not_ready_endpoints(server, path):
    r = requests.get(server.http(path), timeout=10)
    assert_error_then_serves(server, r, EXPECT["model_not_ready"], "not ready")


@pytest.mark.parametrize("path,needle", [("/v2/models/no_such_model/stats", "no_such_model"),
                                         ("/v2/models/simple/versions/9/stats", "simple")])
def test_stats_for_unknown_model_or_version(server, path, needle):
    r = requests.get(server.http(path), timeout=10)
    assert_error_then_serves(server, r, EXPECT["stats_unknown_model"], needle, "not available")


@pytest.mark.parametrize("method,path", [
    ("GET", "/v2/foo"), ("GET", "/v3/models"), ("GET", "/"), ("GET", "/v2/"), ("GET", "/v2/models"),
    ("GET", "/v2/models/simple/"), ("POST", "/v2/models/simple/infer/"), ("POST", "/v3/models/simple/infer"),
])
def test_unknown_url(server, method, path):
    r = requests.request(method, server.http(path), timeout=10)
    assert_error_then_serves(server, r, EXPECT["unknown_url"], "Not Found")


@pytest.mark.parametrize("method,path", [
    ("GET", "/v2/models/simple/infer"), ("PUT", "/v2/models/simple/infer"), ("DELETE", "/v2/models/simple/infer"),
    ("POST", "/v2/health/ready"), ("POST", "/v2"), ("POST", "/v2/models/simple"), ("POST", "/v2/models/simple/config"),
    ("GET", "/v2/repository/index"), ("GET", "/v2/repository/models/simple/load"),
])
def test_wrong_method(server, method, path):
    r = requests.request(method, server.http(path), timeout=10)
    assert_error_then_serves(server, r, EXPECT["wrong_method"], "Method Not Allowed")


def test_query_string_is_ignored(server):
    r = requests.post(server.http("/v2/models/simple/infer?x=1"), data=json.dumps(simple_json_request()), timeout=10)
    assert r.status_code == 200, r.text
    assert requests.get(server.http("/v2/health/ready?x=1"), timeout=10).status_code == 200


# ---------------------------------------------------------------------------------------------
# Binary tensor framing
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("delta", [100, 1], ids=["much-larger", "one-larger"])
def test_header_length_larger_than_body(server, delta):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": str(len(body) + delta)})
    assert_error_then_serves(server, r, EXPECT["header_length_out_of_range"], "inference header size",
                             str(len(body) + delta))


def test_header_length_negative(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": "-5"})
    assert_error_then_serves(server, r, EXPECT["header_length_out_of_range"], "inference header size", "-5")


@pytest.mark.parametrize("value", ["abc", ""], ids=["abc", "empty"])
def test_header_length_not_numeric(server, value):
    # Triton 2.7x parses the value with std::stoi: no digits is refused (2.51's atoi read it as 0,
    # a raw binary request).
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": value})
    assert r.status_code == 400, r.text
    assert r.json() == {"error": f"Unable to parse Inference-Header-Content-Length, got: {value}"}, r.text
    # "<n>abc" is n, as stoi reads it: the JSON header is found.
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": f"{hlen}abc"})
    assert r.status_code == 200, r.text
    assert_serves(server)


def test_header_length_cuts_json_short(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": "100"})
    assert_error_then_serves(server, r, EXPECT["header_length_cuts_json"], any_of=["json", "parse"])


def test_binary_body_shorter_than_declared(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body[:-4], headers={"Inference-Header-Content-Length": str(hlen)})
    assert_error_then_serves(server, r, EXPECT["binary_short"], "INPUT1", "expecting 4 additional bytes", "simple")


def test_binary_body_longer_than_declared(server):
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body + b"\0" * 4, headers={"Inference-Header-Content-Length": str(hlen)})
    assert_error_then_serves(server, r, EXPECT["binary_long"], "unexpected additional input data", "simple")


def test_binary_data_size_inconsistent_with_shape(server):
    # 60 bytes declared (and sent) for INPUT0 [1,16] INT32, which needs 64.
    header = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 60}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
    ]}
    h = json.dumps(header).encode()
    r = post_infer(server, "simple", h + A.tobytes()[:60] + B.tobytes(),
                   headers={"Inference-Header-Content-Length": str(len(h))})
    assert_error_then_serves(server, r, EXPECT["byte_size_mismatch"], "byte size mismatch", "INPUT0",
                             "Expected 64, got 60")


def test_binary_data_size_without_binary_section(server):
    req = simple_json_request()
    del req["inputs"][0]["data"]
    req["inputs"][0]["parameters"] = {"binary_data_size": 64}
    r = post_infer(server, "simple", req)
    assert_error_then_serves(server, r, EXPECT["binary_short"], "INPUT0", "expecting 64 additional bytes")


def test_binary_request_without_header_length(server):
    # Triton's JSON parser stops at the first NUL byte, so it parses the header and then misses the
    # binary data (400 "expecting 64 additional bytes"). A parser that does not stop at NUL sees
    # trailing garbage after the JSON (500). Either way: an error naming the problem, never a 200.
    body, hlen = binary_request(A, B)
    r = post_infer(server, "simple", body)
    assert r.status_code in (BAD_REQUEST, INTERNAL), r.text
    error_message(r)
    assert_serves(server)


def test_both_data_and_binary_data_size(server):
    header = simple_json_request()
    header["inputs"][0]["parameters"] = {"binary_data_size": 64}
    h = json.dumps(header).encode()
    r = post_infer(server, "simple", h + A.tobytes(), headers={"Inference-Header-Content-Length": str(len(h))})
    assert_error_then_serves(server, r, EXPECT["data_and_binary"], "only one of", "data", "binary_data_size")


# ---------------------------------------------------------------------------------------------
# Content-Encoding
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_invalid_compressed_body(server, encoding):
    r = post_infer(server, "simple", json.dumps(simple_json_request()).encode(), headers={"Content-Encoding": encoding})
    assert_error_then_serves(server, r, EXPECT["bad_compressed_body"])


def test_truncated_gzip_body(server):
    good = gzip.compress(json.dumps(simple_json_request()).encode())
    r = post_infer(server, "simple", good[: len(good) // 2], headers={"Content-Encoding": "gzip"})
    assert_error_then_serves(server, r, EXPECT["bad_compressed_body"])


def test_unsupported_content_encoding(server):
    r = post_infer(server, "simple", json.dumps(simple_json_request()).encode(), headers={"Content-Encoding": "br"})
    assert_error(r, EXPECT["unsupported_encoding"], "Unsupported compression type")
    assert r.headers.get("Accept-Encoding") == "gzip, deflate", dict(r.headers)
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Tensors claimed far larger than the body
# ---------------------------------------------------------------------------------------------

def test_oversized_binary_data_size_claim(server):
    """binary_data_size claims 2**40 bytes: must be a clean 400, not an allocation attempt."""
    body, hlen = binary_request(A, B, sizes=(2**40, 64))
    r = post_infer(server, "simple", body, headers={"Inference-Header-Content-Length": str(hlen)})
    assert_error_then_serves(server, r, EXPECT["binary_short"], "INPUT0")


def test_huge_shape_claim(server):
    req = simple_json_request()
    req["inputs"][0]["shape"] = [1, 2**40]
    req["inputs"][1]["shape"] = [1, 2**40]
    r = post_infer(server, "simple", req)
    # Triton's front end would try to allocate the claimed size; a clean 400/500 error is what counts.
    assert r.status_code in (BAD_REQUEST, INTERNAL), r.text
    error_message(r)
    assert_serves(server)


# ---------------------------------------------------------------------------------------------
# Concurrency: bad requests interleaved with good ones on the same connection pool
# ---------------------------------------------------------------------------------------------

def test_keepalive_connection_survives_error(server):
    with requests.Session() as s:
        for i in range(5):
            bad = s.post(server.http("/v2/models/simple/infer"), data=b"{bad json", timeout=10)
            assert bad.status_code == EXPECT["malformed_json"], bad.text
            good = s.post(server.http("/v2/models/simple/infer"), data=json.dumps(simple_json_request()), timeout=10)
            assert good.status_code == 200, good.text
    assert_serves(server)
