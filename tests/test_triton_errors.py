"""Request errors word for word as Triton 2.51 answers them, checked side by side with the reference
tritonserver; the catalogue is docs/triton-http-behaviour.md, "Request errors"."""

from __future__ import annotations

import json
import os
import struct

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, wait_model_ready, write_string_identity


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
    # An element count past i64::MAX: Triton 2.51 wrapped it (to 0 here) and read no data; 2.7x, which
    # this server follows, refuses the first such input in the door.
    ([simple_input("INPUT0", (2**32, 2**32)), simple_input("INPUT1", (2**32, 2**32))],
     "invalid shape for input 'INPUT0': shape [4294967296,4294967296] causes total element count to exceed "
     "maximum size of 9223372036854775807"),
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


def test_duplicate_requested_outputs_are_refused_as_triton_2_7x_does(simple_server):
    # Triton 2.51 answered such a request with the output once; 2.7x (core #493) refuses it.
    body = {"id": "dup", "inputs": simple_inputs_json(), "outputs": [{"name": "OUTPUT1"}, {"name": "OUTPUT1"}]}
    r = requests.post(simple_server.http("/v2/models/simple/infer"), json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": "[request id: dup] output 'OUTPUT1' already exists in request"}
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{simple_server.grpc_port}")
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    out = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT0")]
    with pytest.raises(InferenceServerException) as e:
        g.infer("simple", inputs, outputs=out)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == "[request id: <id_unknown>] output 'OUTPUT0' already exists in request"
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
