"""Client cases of the python backend's contract and of the packages a model imports, run against
any server serving tests/python_contract/models: Tessera (tests/test_python_contract.py) or the
real Triton 2.51 (run.py). Each case is a plain function of a Ctx; it passes by returning and
fails by raising (AssertionError with what differed). `Skip` says the server lacks what the case needs (a flag).

What the cases assert comes from Triton's documentation (python_backend README r24.10, the model
configuration guide, the HTTP/gRPC protocol) and its source at r24.10 (Triton 2.51):
src/pb_stub.cc (`ModelContext::StubSetup`: the model file imported as `<version>.<name>` with the
version and model directories on sys.path; `py::scoped_interpreter guard{}`: sys.argv `['']`),
src/stub_launcher.cc (`initialize_map`: seven str keys), src/pb_tensor.cc (BF16 has no numpy
form), the server's HTTP/gRPC status of each TRITONSERVER_Error_Code — never from what Tessera does.

EXPECT names the cases a server fails by design, with the reason: run.py reports them as
"expected" rather than as failures. More case modules (cases_*.py beside this one: environment,
async) register with the same `case` decorator; run.py imports them all.
"""

from __future__ import annotations

import json
import struct
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

CASES: list[tuple[str, str, Callable]] = []  # (name, topic, function)

# {case name: {server kind: reason}}: a case this server fails by design.
EXPECT: dict[str, dict[str, str]] = {
    "response_parameters": {
        "triton": "InferenceResponse(parameters=...) arrived in python_backend r24.12 (#394); 2.51 has no "
                  "response parameters (TypeError)",
    },
    "decoupled_response_parameters": {
        "triton": "InferenceResponse(parameters=...) arrived in python_backend r24.12 (#394); 2.51 has no "
                  "response parameters (TypeError)",
    },
    "response_parameters_bounded": {
        "triton": "2.51 has no response parameters (TypeError); later Triton bounds neither their number nor "
                  "their size, and Tessera does (64 parameters, 1 KiB keys, 64 KiB values)",
    },
    "bf16_as_numpy_refused": {
        "tessera": "a guest reads BF16 as float32 (numpy has no bfloat16 and a guest has no DLPack consumer); "
                   "Triton refuses as_numpy() on BF16",
    },
    "requests_importable": {
        "triton": "the reference Triton 2.51 here (nvidia-pytriton's environment) has no requests installed",
    },
    "requests_reaches_url": {
        "triton": "the reference Triton 2.51 here (nvidia-pytriton's environment) has no requests installed",
        "tessera": "outgoing HTTP is not granted to any model yet (the capabilities issue adds the grant); "
                   "requests fails with a ConnectionError saying so (case requests_denied_clearly)",
    },
}

# Cases only one server kind runs (what the other does differently by design is in EXPECT).
ONLY: dict[str, str] = {
    "requests_denied_clearly": "tessera",
}


class Skip(Exception):
    """The server lacks what the case needs (not a failure)."""


@dataclass
class Ctx:
    http_url: str  # e.g. http://127.0.0.1:8000
    grpc_url: str  # e.g. 127.0.0.1:8001
    server: str = "triton"  # "triton" or "tessera": picks EXPECT / ONLY entries
    log_path: str | None = None  # the server's log file, for the cases that look there
    _clients: dict = field(default_factory=dict)

    @property
    def http(self):
        if "http" not in self._clients:
            import tritonclient.http as httpclient
            self._clients["http"] = httpclient.InferenceServerClient(self.http_url.split("://", 1)[-1],
                                                                     network_timeout=120)
        return self._clients["http"]

    @property
    def grpc(self):
        if "grpc" not in self._clients:
            import tritonclient.grpc as grpcclient
            self._clients["grpc"] = grpcclient.InferenceServerClient(self.grpc_url)
        return self._clients["grpc"]

    def close(self):
        for c in self._clients.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass
        self._clients.clear()


def case(topic: str):
    def register(fn):
        CASES.append((fn.__name__, topic, fn))
        return fn
    return register


# -- helpers ----------------------------------------------------------------------------------

def post(ctx: Ctx, path: str, body: dict | None = None, timeout: float = 120) -> tuple[int, dict]:
    """POST JSON; (status, decoded body)."""
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(ctx.http_url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw) if raw else {}
    except ValueError:
        return status, {"raw": raw.decode("utf-8", "replace")}


def get(ctx: Ctx, path: str, timeout: float = 30) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(ctx.http_url + path, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def op_request(model: str, op: str, arg: str | None = None, parameters: dict | None = None, **extra) -> dict:
    inputs = [{"name": "OP", "shape": [1], "datatype": "BYTES", "data": [op]}]
    if arg is not None:
        inputs.append({"name": "ARG", "shape": [1], "datatype": "BYTES", "data": [arg]})
    body = {"inputs": inputs, "outputs": [{"name": "OUT"}]}
    if parameters:
        body["parameters"] = parameters
    body.update(extra)
    return body


def binary_infer(ctx: Ctx, model: str, inputs: list[tuple[str, str, list[int], bytes]],
                 outputs: list[str]) -> dict[str, tuple[str, list[int], bytes]]:
    """An HTTP inference with every input and output in the binary-data extension (raw bytes: BYTES
    as <u32 LE length><bytes>..., BF16 as 2 bytes a value), independent of tritonclient's numpy
    rules: {output name: (datatype, shape, raw bytes)}."""
    header = {
        "inputs": [{"name": n, "datatype": dt, "shape": shape, "parameters": {"binary_data_size": len(raw)}}
                   for n, dt, shape, raw in inputs],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs],
    }
    head = json.dumps(header).encode()
    req = urllib.request.Request(ctx.http_url + "/v2/models/%s/infer" % model,
                                 data=head + b"".join(raw for _, _, _, raw in inputs),
                                 headers={"Content-Type": "application/octet-stream",
                                          "Inference-Header-Content-Length": str(len(head))})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            body, length = r.read(), r.headers.get("Inference-Header-Content-Length")
    except urllib.error.HTTPError as e:
        raise AssertionError("HTTP %d: %s" % (e.code, e.read()[:2000])) from None
    length = int(length) if length is not None else len(body)
    meta, offset, got = json.loads(body[:length]), length, {}
    for out in meta["outputs"]:
        size = (out.get("parameters") or {}).get("binary_data_size")
        assert size is not None, "output %s came without binary data: %s" % (out["name"], out)
        got[out["name"]] = (out["datatype"], out["shape"], body[offset:offset + size])
        offset += size
    return got


def bytes_elements(raw: bytes) -> list[bytes]:
    """The elements of a serialized BYTES tensor."""
    out, i = [], 0
    while i < len(raw):
        (n,) = struct.unpack_from("<I", raw, i)
        out.append(raw[i + 4:i + 4 + n])
        i += 4 + n
    return out


def bytes_tensor(values: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def report_of(status: int, body: dict) -> dict:
    assert status == 200, f"HTTP {status}: {body}"
    out = {o["name"]: o for o in body["outputs"]}["OUT"]
    return json.loads(out["data"][0])


def probe(ctx: Ctx, op: str, arg: str | None = None, **kw) -> dict:
    return report_of(*post(ctx, "/v2/models/contract_probe/infer", op_request("contract_probe", op, arg, **kw)))


def info(ctx: Ctx) -> dict:
    if "info" not in ctx._clients:
        ctx._clients["info"] = probe(ctx, "info")
    return ctx._clients["info"]


def error_text(body: dict) -> str:
    return str(body.get("error", body))


# -- the python backend's contract ----------------------------------------------------------

@case("contract")
def default_model_filename(ctx: Ctx):
    """config.pbtxt's default_model_filename names the version directory's Python file, imported as
    `<version>.<name without .py>` (pb_stub.cc StubSetup)."""
    status, body = post(ctx, "/v2/models/contract_named/infer",
                        {"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1.0]}]})
    report = report_of(status, body)
    assert report == {"name": "1.entry_point", "file": "entry_point.py"}, report


@case("contract")
def imports_as_package(ctx: Ctx):
    """The version directory is a package: relative imports of siblings and subpackages, and the
    absolute import of a sibling (the version directory is on sys.path too); `__name__` is
    `1.model`, `__package__` `1`."""
    imports = info(ctx)["imports"]
    assert imports == {"relative": "helper", "absolute": "helper", "subpackage": "deep+helper",
                       "name": "1.model", "package": "1", "file_basename": "model.py"}, imports


@case("contract")
def data_files_relative_to___file__(ctx: Ctx):
    """A data file in the version directory opens by os.path.dirname(__file__), from model.py
    and from a sibling module."""
    files = info(ctx)["files"]
    assert files["via_file"] == {"ok": ["cat", "dog"]}, files
    assert files["via_helper"] == {"ok": ["cat", "dog"]}, files


@case("contract")
def data_files_under_model_repository(ctx: Ctx):
    """os.path.join(args['model_repository'], args['model_version'], 'labels.txt') opens: the
    model_repository argument is the model's directory (stub_launcher.cc: RepositoryPath())."""
    files = info(ctx)["files"]
    assert files["via_repository"] == {"ok": ["cat", "dog"]}, files


@case("contract")
def sys_argv(ctx: Ctx):
    """sys.argv is [''] (pybind11's scoped_interpreter started without arguments), when the module
    is imported and when the model runs."""
    report = info(ctx)
    assert report["argv_at_import"] == [""], report["argv_at_import"]
    assert report["argv"] == [""], report["argv"]


@case("contract")
def initialize_args(ctx: Ctx):
    """initialize(args): exactly the seven keys of stub_launcher.cc's initialize_map, all str;
    model_config is the model's configuration as JSON."""
    report = info(ctx)
    args = report["args"]
    assert report["args_keys"] == ["model_config", "model_instance_device_id", "model_instance_kind",
                                   "model_instance_name", "model_name", "model_repository", "model_version"]
    assert all(t == "str" for t, _ in args.values()), {k: t for k, (t, _) in args.items()}
    assert args["model_name"][1] == "contract_probe"
    assert args["model_version"][1] == "1"
    assert args["model_instance_kind"][1] == "CPU"
    assert args["model_instance_device_id"][1] == "0"
    assert args["model_instance_name"][1] == "contract_probe_0_0", args["model_instance_name"]
    assert args["model_repository"][1], "model_repository is empty"
    config = json.loads(args["model_config"][1])
    assert config["name"] == "contract_probe" and config["backend"] == "python", config
    assert report["config_inputs"] == ["ARG", "BF_IN", "BIN", "OP", "OPT"]
    assert report["config_outputs"] == ["BF_OUT", "BOUT", "MIXED", "OUT"]
    assert report["config_parameter"] == {"string_value": "from-config"}, report["config_parameter"]
    assert report["config_max_batch_size"] == 0
    assert config["instance_group"][0]["kind"] == "KIND_CPU", config["instance_group"]


@case("contract")
def request_parameters(ctx: Ctx):
    """request.parameters() is a JSON object string of the request's parameters, typed as sent
    (HTTP JSON and gRPC)."""
    sent = {"text": "value", "number": 7, "flag": True}
    report = probe(ctx, "params", parameters=sent)
    assert report["type"] == "str", report
    for k, v in sent.items():
        assert report["parameters"].get(k) == v, (k, report["parameters"])
    import tritonclient.grpc as grpcclient
    op = grpcclient.InferInput("OP", [1], "BYTES")
    op.set_data_from_numpy(np.array([b"params"], dtype=np.object_))
    result = ctx.grpc.infer("contract_probe", [op], outputs=[grpcclient.InferRequestedOutput("OUT")],
                            parameters=sent)
    report = json.loads(result.as_numpy("OUT")[0])
    for k, v in sent.items():
        assert report["parameters"].get(k) == v, (k, report["parameters"])


@case("contract")
def response_parameters(ctx: Ctx):
    """InferenceResponse(parameters={...}) reaches the client as the response's parameters
    (python_backend r24.12+)."""
    status, body = post(ctx, "/v2/models/contract_probe/infer", op_request("contract_probe", "params"))
    report = report_of(status, body)
    assert "response_parameters" not in report, report["response_parameters"]
    params = body.get("parameters") or {}
    assert params.get("echo") == "yes" and params.get("count") == 3 and params.get("flag") is True, body


@case("contract")
def decoupled_response_parameters(ctx: Ctx):
    """A decoupled model's responses each carry the parameters given to their InferenceResponse
    (gRPC stream: beside Triton's own triton_final_response)."""
    import queue

    import tritonclient.grpc as grpcclient

    got = queue.Queue()
    client = grpcclient.InferenceServerClient(ctx.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        n = grpcclient.InferInput("N", [1], "INT32")
        n.set_data_from_numpy(np.array([2], dtype=np.int32))
        client.async_stream_infer("contract_stream_params", [n], enable_empty_final_response=True)
        seen = []
        while True:
            result, error = got.get(timeout=60)
            assert error is None, error
            response = result.get_response()
            params = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in response.parameters.items()}
            final = params.pop("triton_final_response")
            if response.outputs:
                seen.append(params)
            if final:
                break
    finally:
        client.stop_stream()
        client.close()
    assert seen == [{"step": 0, "last": False, "note": "response 0"},
                    {"step": 1, "last": True, "note": "response 1"}], seen


@case("contract")
def response_parameters_bounded(ctx: Ctx):
    """Response parameters of a type Triton refuses raise when the response is made; ones past
    Tessera's bounds, or a key Triton reserves, fail that request with a clear error."""
    report = probe(ctx, "params_over", "float")
    assert report.get("raised") == "TritonModelException", report
    assert "Expect parameters values to have type bool/int/str" in report["message"], report
    for arg, words in (("value", "at most 65536"), ("count", "65 given, at most 64"),
                       ("reserved", "reserves")):
        status, body = post(ctx, "/v2/models/contract_probe/infer", op_request("contract_probe", "params_over", arg))
        assert status == 400 and "invalid response parameters" in body.get("error", ""), (arg, status, body)
        assert words in body["error"], (arg, body)
    assert probe(ctx, "info")  # the model still answers


# The HTTP status Triton's HTTP endpoint gives each TRITONSERVER_Error_Code (http_server.cc
# HttpCodeFromError) and the gRPC status (grpc_utils.cc TritonCodeToGrpcCode).
ERROR_STATUS = {
    "UNKNOWN": (400, "UNKNOWN"),
    "INTERNAL": (500, "INTERNAL"),
    "NOT_FOUND": (404, "NOT_FOUND"),
    "INVALID_ARG": (400, "INVALID_ARGUMENT"),
    "UNAVAILABLE": (503, "UNAVAILABLE"),
    "UNSUPPORTED": (501, "UNIMPLEMENTED"),
    "ALREADY_EXISTS": (400, "ALREADY_EXISTS"),
    "CANCELLED": (400, "CANCELLED"),
}


@case("contract")
def error_response_codes(ctx: Ctx):
    """InferenceResponse(error=TritonError(message, code)): the request fails with the message and
    the code's status; without a code, INTERNAL."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
    got = {}
    for code, (http_status, grpc_status) in list(ERROR_STATUS.items()) + [(None, (500, "INTERNAL"))]:
        message = "contract error %s" % code
        status, body = post(ctx, "/v2/models/contract_probe/infer",
                            op_request("contract_probe", "error", json.dumps({"code": code, "message": message})))
        op = grpcclient.InferInput("OP", [1], "BYTES")
        op.set_data_from_numpy(np.array([b"error"], dtype=np.object_))
        arg = grpcclient.InferInput("ARG", [1], "BYTES")
        arg.set_data_from_numpy(np.array([json.dumps({"code": code, "message": message}).encode()], dtype=np.object_))
        try:
            ctx.grpc.infer("contract_probe", [op, arg])
            grpc_got = "OK"
        except InferenceServerException as e:
            grpc_got = (e.status() or "").replace("StatusCode.", "")
            assert message in e.message(), (code, e.message())
        assert message in error_text(body), (code, body)
        got[str(code)] = (status, grpc_got)
    want = {str(k): v for k, v in list(ERROR_STATUS.items()) + [(None, (500, "INTERNAL"))]}
    assert got == want, {k: (got[k], want[k]) for k in want if got[k] != want[k]}


@case("contract")
def model_exception_fails_the_request(ctx: Ctx):
    """An exception from execute() (TritonModelException or any other) fails the requests of the
    batch with its message; the model serves on."""
    status, body = post(ctx, "/v2/models/contract_probe/infer", op_request("contract_probe", "raise", "boom-1"))
    assert status == 500 and "boom-1" in error_text(body), (status, body)
    status, body = post(ctx, "/v2/models/contract_probe/infer",
                        op_request("contract_probe", "raise_value", "boom-2"))
    assert status == 500 and "boom-2" in error_text(body) and "ValueError" in error_text(body), (status, body)
    assert info(ctx)["args"]  # still serving
    assert probe(ctx, "errors_api")["message"] == "m1"


@case("contract")
def error_classes(ctx: Ctx):
    """pb_utils.TritonError's codes are TRITONSERVER_Error_Code's values; TritonError(message)
    defaults to INTERNAL; TritonModelException is an Exception; InferenceResponse(error=...)
    has_error()."""
    report = probe(ctx, "errors_api")
    assert report["codes"] == {"UNKNOWN": 0, "INTERNAL": 1, "NOT_FOUND": 2, "INVALID_ARG": 3, "UNAVAILABLE": 4,
                               "UNSUPPORTED": 5, "ALREADY_EXISTS": 6, "CANCELLED": 7}, report["codes"]
    assert report["default_code"] == 1 and report["message"] == "m1" and report["code"] == 2, report
    assert report["model_exception_is_exception"] and report["model_exception_str"] == "m3", report
    assert report["response_has_error"] and report["response_error_message"] == "m4", report
    assert report["response_error_code"] == 4 and report["ok_response_has_error"] is False, report


@case("contract")
def missing_optional_input(ctx: Ctx):
    """get_input_tensor_by_name returns None for an optional input the request left out (and for a
    name the model does not have)."""
    report = probe(ctx, "request")
    assert report["missing_optional_is_none"] is True and report["missing_unknown_is_none"] is True, report
    assert report["input_names"] == ["OP"], report
    body = op_request("contract_probe", "request")
    body["inputs"].append({"name": "OPT", "shape": [2], "datatype": "FP32", "data": [1.5, -2.0]})
    report = report_of(*post(ctx, "/v2/models/contract_probe/infer", body))
    assert report["missing_optional_is_none"] is False and report["optional_value"] == [1.5, -2.0], report


@case("contract")
def request_id_flags_cancelled(ctx: Ctx):
    """A plain request: its id as sent, flags() 0, correlation_id() 0, is_cancelled() False,
    requested_output_names() as asked."""
    report = probe(ctx, "request", id="contract-req-42")
    assert report["request_id"] == "contract-req-42", report
    assert report["flags"] == 0 and report["correlation_id"] == 0, report
    assert report["is_cancelled"] is False, report
    assert report["requested_output_names"] == ["OUT"], report


@case("contract")
def sequence_flags(ctx: Ctx):
    """In a sequence, request.flags() carries TRITONSERVER_REQUEST_FLAG_SEQUENCE_START (1) and
    _END (2) and correlation_id() the sequence ID; the sequence fields are not parameters."""
    def send(seq_id, start=False, end=False):
        params = {"sequence_id": seq_id, "sequence_start": start, "sequence_end": end}
        body = {"inputs": [{"name": "X", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}], "parameters": params}
        status, resp = post(ctx, "/v2/models/contract_sequence/infer", body)
        assert status == 200, (status, resp)
        return json.loads(resp["outputs"][0]["data"][0])

    first, middle, last = send(4242, start=True), send(4242), send(4242, end=True)
    assert (first["flags"], middle["flags"], last["flags"]) == (1, 0, 2), (first, middle, last)
    assert first["start"] and last["end"] and not middle["start"] and not middle["end"], (first, middle, last)
    assert {first["correlation_id"], middle["correlation_id"], last["correlation_id"]} == {4242}, (first, last)
    for r in (first, middle, last):
        assert not set(r["parameters"]) & {"sequence_id", "sequence_start", "sequence_end"}, r["parameters"]


@case("contract")
def bls_sequence_flags(ctx: Ctx):
    """A BLS InferenceRequest(correlation_id=..., flags=...) to a sequence model: the callee sees
    the flags and the correlation ID (README "Using BLS with Stateful Models")."""
    seen = probe(ctx, "bls_sequence")["seen"]
    assert [r.get("flags") for r in seen] == [1, 0, 2], seen
    assert [r.get("correlation_id") for r in seen] == [777, 777, 777], seen


@case("contract")
def bytes_edge_cases(ctx: Ctx):
    """BYTES: empty elements, non-UTF-8 bytes and NULs come to the model as an object array of
    bytes and go back unchanged; an object array of mixed types (bytes, str, int, float) goes out
    as each element's bytes or str() encoded (serialize_byte_tensor)."""
    values = [b"", b"\xff\xfe\x00", "h\u00e9llo".encode(), b"a\x00b", b""]
    got = binary_infer(ctx, "contract_probe",
                       [("OP", "BYTES", [1], bytes_tensor([b"bytes"])),
                        ("BIN", "BYTES", [len(values)], bytes_tensor(values))], ["OUT", "BOUT", "MIXED"])
    report = json.loads(bytes_elements(got["OUT"][2])[0])
    assert report["dtype"] == "object" and report["element_types"] == ["bytes"], report
    assert report["hex"] == [v.hex() for v in values], report
    assert got["BOUT"][:2] == ("BYTES", [len(values)]) and bytes_elements(got["BOUT"][2]) == values, got["BOUT"]
    mixed = bytes_elements(got["MIXED"][2])
    assert mixed == [b"raw\xff", b"text", b"7", b"2.5", b"", b""], mixed


@case("contract")
def bytes_empty_tensor(ctx: Ctx):
    """A BYTES tensor of no elements comes in as an empty object array and goes back as one."""
    got = binary_infer(ctx, "contract_probe",
                       [("OP", "BYTES", [1], bytes_tensor([b"bytes"])), ("BIN", "BYTES", [0], b"")],
                       ["OUT", "BOUT"])
    report = json.loads(bytes_elements(got["OUT"][2])[0])
    assert report["shape"] == [0] and report["lengths"] == [], report
    assert got["BOUT"] == ("BYTES", [0], b""), got["BOUT"]


BF16_VALUES = [1.0, -2.5, 0.15625, 3.0e38]  # 3.0e38 is not a bfloat16: sent as its truncation


def _bf16_infer(ctx: Ctx):
    raw = b"".join(struct.pack("<f", v)[2:] for v in BF16_VALUES)  # the high half of each float32
    got = binary_infer(ctx, "contract_probe",
                       [("OP", "BYTES", [1], bytes_tensor([b"bf16"])), ("BF_IN", "BF16", [len(BF16_VALUES)], raw)],
                       ["OUT", "BF_OUT"])
    return raw, json.loads(bytes_elements(got["OUT"][2])[0]), got["BF_OUT"]


@case("contract")
def bf16_passthrough(ctx: Ctx):
    """A BF16 input goes back unchanged through Tensor.from_dlpack(name, tensor.to_dlpack()) (the
    README's way for BF16). (Its triton_dtype() is reported, not asserted: Triton 2.51's raises a
    TypeError, its datatype enum having no BF16.)"""
    raw, report, out = _bf16_infer(ctx)
    assert report["shape"] == [len(BF16_VALUES)], report
    assert out == ("BF16", [len(BF16_VALUES)], raw), out


@case("contract")
def bf16_as_numpy_refused(ctx: Ctx):
    """as_numpy() on a BF16 tensor raises: numpy has no bfloat16 (pb_tensor.cc: "Tensor dtype is
    BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead.")."""
    _, report, _ = _bf16_infer(ctx)
    assert "error" in report["as_numpy"] and "BF16" in report["as_numpy"]["error"], report["as_numpy"]


@case("contract")
def model_finalize(ctx: Ctx):
    """Unloading a model calls its finalize() (once per instance); the server log shows what it
    printed. Needs --model-control-mode=explicit; the log check needs the log file."""
    status, body = post(ctx, "/v2/repository/models/contract_finalize/unload")
    if status != 200:
        raise Skip("the server refuses unload (start it with --model-control-mode=explicit --load-model=*): "
                   f"HTTP {status} {body}")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if get(ctx, "/v2/models/contract_finalize/ready")[0] != 200:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("contract_finalize still ready 60 s after its unload")
        if ctx.log_path:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with open(ctx.log_path, errors="replace") as f:
                    if "contract_finalize: finalize contract_finalize_0_0" in f.read():
                        break
                time.sleep(0.2)
            else:
                raise AssertionError("the server log does not show finalize()'s print")
    finally:
        status, body = post(ctx, "/v2/repository/models/contract_finalize/load")
        assert status == 200, (status, body)


# -- what a Triton python environment has -------------------------------------------------------

def packages(ctx: Ctx, op: str, arg: str | None = None) -> dict:
    return report_of(*post(ctx, "/v2/models/contract_packages/infer", op_request("contract_packages", op, arg)))


@case("packages")
def stdlib_packages(ctx: Ctx):
    """json, asyncio (asyncio.run, gather, sleep), threading (Thread, Lock), concurrent.futures
    (ThreadPoolExecutor map/submit), logging, dataclasses and typing work in execute()."""
    report = packages(ctx, "stdlib")
    assert report["json"] == {"a": [1, 2.5, None]}, report
    assert report["asyncio"] == [0, 2, 4, 6], report
    assert report["thread"] == ["worker"] and report["lock"] is True, report
    assert report["futures"] == {"map": [0, 1, 4, 9, 16], "submit": 6}, report
    assert report["logging"] is True, report
    assert report["dataclasses"] == {"x": 1, "y": None} and report["typing"] == ["x", "y"], report


@case("packages")
def requests_importable(ctx: Ctx):
    """`import requests` works (a Triton python environment usually has it)."""
    report = packages(ctx, "stdlib")
    assert report["requests"], "requests is not importable: %s" % report["requests_error"]


@case("packages")
def requests_reaches_url(ctx: Ctx):
    """requests.get to the server's own health endpoint from execute() answers 200."""
    report = packages(ctx, "http", ctx.http_url + "/v2/health/live")
    assert report.get("status") == 200, report


@case("packages")
def requests_denied_clearly(ctx: Ctx):
    """Without an outgoing-HTTP grant, requests.get fails at once with a
    requests.exceptions.ConnectionError whose message says outgoing HTTP is not granted."""
    report = packages(ctx, "http", ctx.http_url + "/v2/health/live")
    assert report.get("error") == "ConnectionError" and report.get("is_connection_error"), report
    assert "outgoing HTTP is not granted to this model" in report["message"], report
