"""Triton's raw binary request: `Inference-Header-Content-Length: 0`, and the body is the one input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests

from tessera_testlib import copy_model, wait_model_ready, write_onnx_model


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
    write_onnx_model(repo, "raw_fp32", "TYPE_FP32", [-1], max_batch_size=4, inp="IN", out="OUT")
    write_onnx_model(repo, "raw_fixed", "TYPE_INT32", [2, 3], inp="IN", out="OUT")
    write_onnx_model(repo, "raw_two_vars", "TYPE_FP32", [-1, -1], inp="IN", out="OUT")
    write_onnx_model(repo, "raw_text", "TYPE_STRING", [1], inp="IN", out="OUT")
    write_onnx_model(repo, "raw_texts", "TYPE_STRING", [-1], inp="IN", out="OUT")
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


@pytest.mark.parametrize("header", ["0", "0x10", None])
def test_raw_binary_request_by_every_header_triton_reads_as_zero(raw_server, header):
    """Triton reads Inference-Header-Content-Length with std::stoi: "0x10" is 0, a raw request;
    without the header, an empty body is one too (a non-empty one is JSON)."""
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
