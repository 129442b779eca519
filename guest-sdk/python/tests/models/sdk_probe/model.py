# A guest that exercises the SDK for tests/test_guest_sdk.py: the request parameter "op" picks
# what execute() does with that request.
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.config = json.loads(args["model_config"])
        if self.config.get("parameters", {}).get("fail_init"):
            raise pb_utils.TritonModelException("initialize was told to fail")
        pb_utils.Logger.log_info("initialized %s v%s" % (args["model_name"], args["model_version"]))

    def execute(self, requests):
        ops = [json.loads(r.parameters()).get("op", "echo") for r in requests]
        if "raise" in ops:
            raise ValueError("execute was told to raise")
        if "wrong_count" in ops:
            return []
        if "decoupled" in ops:
            for r in requests:
                self.decoupled(r)
            return None
        return [getattr(self, op)(r) for op, r in zip(ops, requests)]

    # every op returns one InferenceResponse
    def echo(self, request):
        # outputs every input under OUT_<name>, as handles (no bytes through the guest)
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT_" + t.name(), t) for t in request.inputs()])

    def roundtrip(self, request):
        # decodes and re-encodes every input with its own datatype and shape
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT_" + t.name(), t.as_list(), t.datatype(), shape=t.shape())
            for t in request.inputs()])

    def nested(self, request):
        t = request.inputs()[0]
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", t.tolist(), t.datatype())])

    def upper(self, request):
        t = pb_utils.get_input_tensor_by_name(request, "TEXT")
        words = [w.upper() for w in t.as_list()]
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", words, shape=t.shape())])

    def with_params(self, request):
        # response parameters; types Triton refuses raise when the response is made
        for bad in ({"f": 0.5}, {1: "x"}, {"l": [1]}):
            try:
                pb_utils.InferenceResponse([], parameters=bad)
            except pb_utils.TritonModelException:
                continue
            raise AssertionError("parameters %r were accepted" % bad)
        params = {"echo": "yes", "n": 2, "flag": True}
        response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", [1.0], "FP32")], parameters=params)
        assert json.loads(response.parameters()) == params
        return response

    def inferred(self, request):
        # floats without a datatype or shape: the glue applies the config's OUTPUT0 (FP32, dims)
        n = pb_utils.get_input_tensor_by_name(request, "INPUT0").element_count()
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", [0.5] * n)])

    def big(self, request):
        # a fresh output of `n` bytes (guest -> host by value, through request.set-outputs)
        n = json.loads(request.parameters())["n"]
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", bytes(n), "UINT8")])

    def misfit(self, request):
        # 5 bytes for one FP32: the SDK's own count check rounds down and lets it through, the
        # host refuses it (given by value: the response's last output goes as a handle)
        return pb_utils.InferenceResponse([
            pb_utils.Tensor.from_bytes("BAD", b"12345", "FP32", [1]),
            pb_utils.Tensor("OUT", [1.0], "FP32"),
        ])

    def mixed(self, request):
        # an input passed on (a host handle when it is above the prefetch limit) next to an
        # output computed here (by value)
        x = request.inputs()[0]
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT_X", x),
            pb_utils.Tensor("COUNT", [x.element_count()], "INT64"),
        ])

    def keep(self, request):
        # keeps a request past its call that never took its handle (this probe's execute takes
        # every request's, to read its op): a copy of it with no handle
        self.kept = pb_utils.InferenceRequest.__new__(type(request))
        self.kept._position, self.kept._call, self.kept._served = 0, request._call, True
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", ["kept"], "BYTES")])

    def use_kept(self, request):
        try:
            answer = "id " + self.kept.request_id()
        except pb_utils.TritonModelException as e:
            answer = e.message()
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", [answer], "BYTES")])

    def error(self, request):
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError("bad input", pb_utils.TritonError.INVALID_ARG))

    def meta(self, request):
        info = {
            "id": request.request_id(),
            "requested": request.requested_output_names(),
            "params": json.loads(request.parameters()),
            "model": request.model_name(),
            "args": sorted(self.args),
        }
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", [json.dumps(info)], "BYTES")])

    def user_finalizer(self, request):
        # a finalizer of the model's own on a host resource object (the request) runs when the
        # object dies, like any weakref.finalize: the SDK's cheaper handle finalizers are only
        # for componentize-py's own
        import weakref

        weakref.finalize(request._host_request, pb_utils.Logger.log_info, "user finalizer ran")
        return pb_utils.InferenceResponse([])

    def log(self, request):
        pb_utils.Logger.log_verbose("v")
        pb_utils.Logger.log_warn("w")
        pb_utils.Logger.log_error("e")
        pb_utils.Logger.log("i", pb_utils.LogLevel.INFO)
        print("printed", "line")
        return pb_utils.InferenceResponse([])

    def bls(self, request):
        in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
        bls_request = pb_utils.InferenceRequest(
            model_name="inner",
            requested_output_names=["Y"],
            inputs=[pb_utils.Tensor("X", in0), pb_utils.Tensor.from_list("K", [2.0])],
            parameters={"mode": "fast", "n": 3, "flag": True, "ratio": 0.5},
        )
        response = bls_request.exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        y = pb_utils.get_output_tensor_by_name(response, "Y")
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", y)])

    def bls_missing(self, request):
        response = pb_utils.InferenceRequest(model_name="nope", inputs=[]).exec()
        return pb_utils.InferenceResponse(error=response.error())

    def bls_stream(self, request):
        in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
        total = []
        errors = []
        for response in pb_utils.InferenceRequest(
                model_name="repeat", inputs=[in0], requested_output_names=["Y"]).stream_exec():
            if response.has_error():
                errors.append(response.error().message())
            else:
                total.extend(response.output_tensors()[0].as_list())
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT", total, "FP32"),
            pb_utils.Tensor("ERRORS", errors or [""], "BYTES"),
        ])

    def decoupled(self, request):
        sender = request.get_response_sender()
        in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
        for i in range(3):
            params = {"i": i} if i == 0 else None  # response parameters, on the first only
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", in0)], parameters=params))
        sender.send(pb_utils.InferenceResponse(
            error=pb_utils.TritonError("partial", pb_utils.TritonError.UNAVAILABLE)))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        try:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except pb_utils.TritonModelException:
            pass
        else:
            raise AssertionError("sending after the final response must fail")

    def finalize(self):
        pb_utils.Logger.log_info("finalized")
