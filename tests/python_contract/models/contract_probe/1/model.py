"""contract_probe: reports what the python backend gives a model, one OP per case of
tests/python_contract/cases.py. Written against Triton's python backend (r24.10 / Triton 2.51):
every answer is OUT, a JSON document; the client asserts on it.

Ops: info, params, params_over, error, raise, raise_value, request, bytes, bf16, bls_sequence, errors_api.
"""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

import helper as helper_by_name  # the version directory is on sys.path
from . import helper  # the version directory is a package: Triton imports this file as `<version>.model`
from .sub import DEEP

IMPORTED = {
    "relative": helper.VALUE,
    "absolute": helper_by_name.VALUE,
    "subpackage": DEEP,
    "name": __name__,
    "package": __package__,
    "file_basename": os.path.basename(__file__),
}
ARGV_AT_IMPORT = list(sys.argv)


def _read(path):
    try:
        with open(path) as f:
            return {"ok": f.read().split()}
    except Exception as e:  # noqa: BLE001  reported to the client
        return {"error": "%s: %s" % (type(e).__name__, e)}


def _out(obj, extra=()):
    blob = np.array([json.dumps(obj, sort_keys=True).encode()], dtype=np.object_)
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", blob)] + list(extra))


def _text(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return None
    v = t.as_numpy().reshape(-1)[0]
    return v.decode() if isinstance(v, bytes) else str(v)


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.args_report = {k: [type(v).__name__, v] for k, v in args.items()}
        self.config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.files = {
            "via_file": _read(os.path.join(os.path.dirname(__file__), "labels.txt")),
            "via_repository": _read(os.path.join(version_dir, "labels.txt")),
            "via_helper": _read_helper(),
        }

    def execute(self, requests):
        responses = []
        for request in requests:
            op = _text(request, "OP")
            arg = _text(request, "ARG")
            handler = getattr(self, "op_" + str(op), None)
            if handler is None:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("unknown OP %r" % op, pb_utils.TritonError.INVALID_ARG)))
                continue
            responses.append(handler(request, arg))
        return responses

    def finalize(self):
        print("contract_probe: finalize called")

    # -- ops ---------------------------------------------------------------------------------
    def op_info(self, request, arg):
        config = self.config
        return _out({
            "args": self.args_report,
            "args_keys": sorted(self.args),
            "config_name": config.get("name"),
            "config_backend": config.get("backend"),
            "config_inputs": sorted(i["name"] for i in config.get("input", [])),
            "config_outputs": sorted(o["name"] for o in config.get("output", [])),
            "config_parameter": config.get("parameters", {}).get("contract_param"),
            "config_max_batch_size": config.get("max_batch_size"),
            "argv": list(sys.argv),
            "argv_at_import": ARGV_AT_IMPORT,
            "imports": IMPORTED,
            "files": self.files,
        })

    def op_params(self, request, arg):
        raw = request.parameters()
        report = {"type": type(raw).__name__, "parameters": json.loads(raw)}
        try:
            # Response parameters: accepted from Triton 24.12 (python_backend #394); 2.51 has none.
            resp = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([json.dumps(report).encode()], dtype=np.object_))],
                parameters={"echo": "yes", "count": 3, "flag": True})
            return resp
        except TypeError as e:
            report["response_parameters"] = "TypeError: %s" % e
            return _out(report)

    def op_params_over(self, request, arg):
        """Response parameters past Tessera's bounds (ARG: "value", "count" or "reserved"), or of
        a type Triton refuses (ARG "float": reported, as Triton raises at construction)."""
        params = {
            "value": {"big": "x" * ((64 << 10) + 1)},
            "count": {"p%d" % i: i for i in range(65)},
            "reserved": {"triton_final_response": False},
            "float": {"ratio": 0.5},
        }[arg]
        out = [pb_utils.Tensor("OUT", np.array([b"{}"], dtype=np.object_))]
        try:
            return pb_utils.InferenceResponse(output_tensors=out, parameters=params)
        except Exception as e:  # noqa: BLE001  reported to the client
            return _out({"raised": type(e).__name__, "message": str(e)})

    def op_error(self, request, arg):
        spec = json.loads(arg)
        code = getattr(pb_utils.TritonError, spec["code"]) if spec.get("code") else None
        error = (pb_utils.TritonError(spec["message"]) if code is None
                 else pb_utils.TritonError(spec["message"], code))
        return pb_utils.InferenceResponse(output_tensors=[], error=error)

    def op_raise(self, request, arg):
        raise pb_utils.TritonModelException(arg or "contract_probe raised")

    def op_raise_value(self, request, arg):
        raise ValueError(arg or "contract_probe raised ValueError")

    def op_request(self, request, arg):
        opt = pb_utils.get_input_tensor_by_name(request, "OPT")
        return _out({
            "request_id": request.request_id(),
            "flags": request.flags(),
            "correlation_id": request.correlation_id(),
            "is_cancelled": request.is_cancelled(),
            "requested_output_names": sorted(request.requested_output_names()),
            "input_names": sorted(t.name() for t in request.inputs()),
            "missing_optional_is_none": opt is None,
            "missing_unknown_is_none": pb_utils.get_input_tensor_by_name(request, "NO_SUCH_INPUT") is None,
            "optional_value": None if opt is None else opt.as_numpy().tolist(),
        })

    def op_bytes(self, request, arg):
        t = pb_utils.get_input_tensor_by_name(request, "BIN")
        arr = t.as_numpy()
        mixed = np.array([b"raw\xff", "text", 7, 2.5, "", b""], dtype=np.object_)
        report = {
            "dtype": str(arr.dtype),
            "shape": list(arr.shape),
            "element_types": sorted({type(v).__name__ for v in arr.reshape(-1)}),
            "lengths": [len(v) for v in arr.reshape(-1)],
            "hex": [bytes(v).hex() for v in arr.reshape(-1)],
        }
        echo = pb_utils.Tensor("BOUT", arr)
        return _out(report, [echo, pb_utils.Tensor("MIXED", mixed)])

    def op_bf16(self, request, arg):
        t = pb_utils.get_input_tensor_by_name(request, "BF_IN")
        report = {"shape": list(t.shape())}
        try:
            report["triton_dtype"] = int(t.triton_dtype())
        except Exception as e:  # noqa: BLE001  Triton 2.51: its datatype enum has no BF16
            report["triton_dtype"] = "%s: %s" % (type(e).__name__, str(e).split("!")[0])
        try:
            report["as_numpy"] = {"dtype": str(t.as_numpy().dtype), "values": t.as_numpy().tolist()}
        except Exception as e:  # noqa: BLE001  Triton: no numpy type for BF16
            report["as_numpy"] = {"error": "%s: %s" % (type(e).__name__, e)}
        out = pb_utils.Tensor.from_dlpack("BF_OUT", t.to_dlpack())
        return _out(report, [out])

    def op_bls_sequence(self, request, arg):
        """Three BLS requests of one sequence to contract_sequence: START, none, END."""
        seen = []
        for flags in (pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START, 0,
                      pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END):
            x = pb_utils.Tensor("X", np.array([[1.0]], dtype=np.float32))
            bls = pb_utils.InferenceRequest(model_name="contract_sequence", requested_output_names=["OUT"],
                                            inputs=[x], correlation_id=777, flags=flags)
            response = bls.exec()
            if response.has_error():
                seen.append({"error": response.error().message()})
                continue
            out = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy().reshape(-1)[0]
            seen.append(json.loads(out))
        return _out({"seen": seen})

    def op_errors_api(self, request, arg):
        E = pb_utils.TritonError
        codes = {n: int(getattr(E, n)) for n in
                 ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
                  "ALREADY_EXISTS", "CANCELLED")}
        e = E("m1")
        e2 = E("m2", E.NOT_FOUND)
        try:
            raise pb_utils.TritonModelException("m3")
        except Exception as caught:  # noqa: BLE001
            exc = caught
        resp = pb_utils.InferenceResponse(error=E("m4", E.UNAVAILABLE))
        return _out({
            "codes": codes,
            "default_code": int(e.code()),
            "message": e.message(),
            "code": int(e2.code()),
            "model_exception_is_exception": isinstance(exc, Exception),
            "model_exception_str": str(exc),
            "response_has_error": resp.has_error(),
            "response_error_message": resp.error().message(),
            "response_error_code": int(resp.error().code()),
            "ok_response_has_error": pb_utils.InferenceResponse([]).has_error(),
        })


def _read_helper():
    try:
        return {"ok": helper.labels()}
    except Exception as e:  # noqa: BLE001
        return {"error": "%s: %s" % (type(e).__name__, e)}
