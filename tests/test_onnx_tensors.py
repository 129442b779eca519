"""ONNX models see every tensor byte for byte, whichever path the backend takes: the direct C API
call for CPU models of plain numbers (inputs lent to ONNX Runtime where they lie in the request,
copied only when misaligned for their type; only the requested outputs computed) and the `ort`
crate's path for BOOL. Real server, real tritonclient over HTTP and gRPC on 127.0.0.1."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tessera_testlib import start_server, wait_model_ready, write_string_identity

# Triton datatype -> (ONNX element type, numpy dtype the bytes are made and read with).
TYPES = {
    "UINT8": (TensorProto.UINT8, np.uint8),
    "INT8": (TensorProto.INT8, np.int8),
    "UINT16": (TensorProto.UINT16, np.uint16),
    "INT16": (TensorProto.INT16, np.int16),
    "UINT32": (TensorProto.UINT32, np.uint32),
    "INT32": (TensorProto.INT32, np.int32),
    "UINT64": (TensorProto.UINT64, np.uint64),
    "INT64": (TensorProto.INT64, np.int64),
    "FP16": (TensorProto.FLOAT16, np.float16),
    # numpy has no bfloat16: its bytes are made and compared as uint16.
    "BF16": (TensorProto.BFLOAT16, np.uint16),
    "FP32": (TensorProto.FLOAT, np.float32),
    "FP64": (TensorProto.DOUBLE, np.float64),
    "BOOL": (TensorProto.BOOL, np.bool_),
}


def model_name(datatype: str) -> str:
    return f"pair_{datatype.lower()}"


def write_pair_model(repo, datatype: str) -> None:
    """A [-1] x [-1] -> SAME = Identity(A) (an output that is an input's own buffer) and
    BOTH = Concat(A, B), batching up to 8."""
    elem, _ = TYPES[datatype]
    name = model_name(datatype)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["A"], ["SAME"]), helper.make_node("Concat", ["A", "B"], ["BOTH"], axis=1)],
        name,
        [helper.make_tensor_value_info(n, elem, [None, None]) for n in ("A", "B")],
        [helper.make_tensor_value_info(n, elem, [None, None]) for n in ("SAME", "BOTH")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    io = lambda n: f'{{ name: "{n}" data_type: TYPE_{datatype} dims: [ -1 ] }}'  # noqa: E731
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        f'input [ {io("A")}, {io("B")} ]\noutput [ {io("SAME")}, {io("BOTH")} ]\n')


def write_sum_model(repo) -> None:
    """SUM = A + B over INT32 [-1] (ONNX Runtime refuses shapes it cannot broadcast)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["SUM"])], "sum_int32",
        [helper.make_tensor_value_info(n, TensorProto.INT32, [None, None]) for n in ("A", "B")],
        [helper.make_tensor_value_info("SUM", TensorProto.INT32, [None, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (repo / "sum_int32" / "1").mkdir(parents=True)
    onnx.save(model, str(repo / "sum_int32" / "1" / "model.onnx"))
    (repo / "sum_int32" / "config.pbtxt").write_text('name: "sum_int32"\nbackend: "onnxruntime"\nmax_batch_size: 8\n')


@pytest.fixture(scope="module")
def pair_server(tmp_path_factory, tessera_binary):
    repo = tmp_path_factory.mktemp("pairs")
    for datatype in TYPES:
        write_pair_model(repo, datatype)
    write_sum_model(repo)
    srv = start_server(tmp_path_factory.mktemp("pair-server"), [repo], name="pairs",
                       ready=[*(model_name(datatype) for datatype in TYPES), "sum_int32"])
    yield srv
    srv.stop_and_check()


def values(datatype: str, n: int, seed: int) -> np.ndarray:
    _, dtype = TYPES[datatype]
    rng = np.random.default_rng(seed)
    if dtype is np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    # Every bit pattern (NaNs and infinities included for floats): bytes must come back as sent.
    return rng.integers(0, 256, n * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)


def binary_infer(srv, model: str, inputs: dict[str, np.ndarray], datatype: str, outputs: list[str],
                 pad: int) -> dict[str, tuple[list[int], bytes]]:
    """One binary-data HTTP request; `pad` characters of request id shift where the tensors'
    bytes start in the body (and so their alignment)."""
    header = {
        "id": "x" * pad,
        "inputs": [{"name": n, "datatype": datatype, "shape": [1, len(v)],
                    "parameters": {"binary_data_size": v.nbytes}} for n, v in inputs.items()],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs],
    }
    text = json.dumps(header).encode()
    body = text + b"".join(v.tobytes() for v in inputs.values())
    r = requests.post(srv.http(f"/v2/models/{model}/infer"), data=body, timeout=30,
                      headers={"Inference-Header-Content-Length": str(len(text))})
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    doc, data = json.loads(r.content[:n]), r.content[n:]
    out = {}
    for o in doc["outputs"]:
        assert o["datatype"] == datatype
        size = o["parameters"]["binary_data_size"]
        out[o["name"]] = (o["shape"], data[:size])
        data = data[size:]
    return out


@pytest.mark.parametrize("datatype", list(TYPES))
def test_every_numeric_type_comes_back_byte_for_byte_at_every_alignment(pair_server, datatype):
    # Eight request-id lengths put the first tensor at every offset modulo 8 in the body, so
    # 2-, 4- and 8-byte types arrive misaligned in most of them.
    for pad in range(8):
        a, b = values(datatype, 5, pad), values(datatype, 3, 100 + pad)
        out = binary_infer(pair_server, model_name(datatype), {"A": a, "B": b}, datatype, ["SAME", "BOTH"], pad)
        assert out["SAME"] == ([1, 5], a.tobytes()), f"pad {pad}"
        assert out["BOTH"] == ([1, 8], a.tobytes() + b.tobytes()), f"pad {pad}"


def test_only_the_requested_output_is_returned(pair_server):
    a, b = values("FP32", 4, 1), values("FP32", 2, 2)
    out = binary_infer(pair_server, model_name("FP32"), {"A": a, "B": b}, "FP32", ["BOTH"], 0)
    assert out == {"BOTH": ([1, 6], a.tobytes() + b.tobytes())}


def test_empty_tensors_and_onnx_runtimes_own_refusal(pair_server):
    # Zero elements: shapes come back, no bytes.
    empty = np.zeros(0, dtype=np.float64)
    out = binary_infer(pair_server, model_name("FP64"), {"A": empty, "B": empty}, "FP64", ["SAME", "BOTH"], 3)
    assert out == {"SAME": ([1, 0], b""), "BOTH": ([1, 0], b"")}
    # Shapes ONNX Runtime cannot broadcast: its own error, as a request error, and the model
    # goes on serving.
    header = {"inputs": [{"name": "A", "datatype": "INT32", "shape": [1, 2], "data": [1, 2]},
                         {"name": "B", "datatype": "INT32", "shape": [1, 3], "data": [3, 4, 5]}]}
    r = requests.post(pair_server.http("/v2/models/sum_int32/infer"), json=header, timeout=30)
    assert r.status_code == 500, r.text
    assert "onnxruntime execution failure" in r.json()["error"] and "broadcast" in r.json()["error"], r.text
    header["inputs"][1] = {"name": "B", "datatype": "INT32", "shape": [1, 2], "data": [10, 20]}
    r = requests.post(pair_server.http("/v2/models/sum_int32/infer"), json=header, timeout=30)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [11, 22], r.text


@pytest.mark.parametrize("datatype", ["UINT8", "INT16", "FP16", "INT64", "FP64", "BOOL"])
def test_grpc_raw_contents_come_back_byte_for_byte(pair_server, datatype):
    _, dtype = TYPES[datatype]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{pair_server.grpc_port}")
    # Two rows: a batch of two requests' worth in one tensor.
    a, b = values(datatype, 14, 7).reshape(2, 7), values(datatype, 6, 8).reshape(2, 3)
    inputs = []
    for name, v in (("A", a), ("B", b)):
        t = grpcclient.InferInput(name, list(v.shape), datatype)
        t.set_data_from_numpy(v)
        inputs.append(t)
    result = client.infer(model_name(datatype), inputs)
    same, both = result.as_numpy("SAME"), result.as_numpy("BOTH")
    assert same.shape == (2, 7) and same.tobytes() == a.tobytes()
    assert both.shape == (2, 10) and both.tobytes() == np.concatenate([a, b], axis=1).astype(dtype).tobytes()


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
