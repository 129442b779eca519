# bls_fanout written as Triton Python BLS code: `async def execute` + asyncio.gather over
# InferenceRequest.async_exec(), exactly as Triton's python_backend documents it; the calls run
# concurrently on the host. Same behaviour as the Rust bls_fanout guest: OUTPUT0 = the sum of
# `calls` (default 4) calls to the model named by config parameter `fanout_target` (default
# add_sub; request parameter `target` overrides it), each given INPUT0 as both inputs; request
# parameter mode = "sequential" awaits them one at a time instead.
# Build: scripts/build-python-guest.sh example-guests/bls_fanout_python model.wasm
import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        parameters = self.model_config.get("parameters", {})
        self.target = parameters.get("fanout_target", {}).get("string_value", "add_sub")

    async def execute(self, requests):
        return [await self.fan_out(request) for request in requests]

    async def fan_out(self, request):
        params = json.loads(request.parameters())
        calls = params.get("calls", 4)
        if not isinstance(calls, int) or not 1 <= calls <= 16:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "parameter 'calls' must be an integer in 1..=16", pb_utils.TritonError.INVALID_ARG))
        mode = params.get("mode", "parallel")
        if mode not in ("parallel", "sequential"):
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "parameter 'mode' must be \"parallel\" or \"sequential\", got \"%s\"" % mode,
                pb_utils.TritonError.INVALID_ARG))
        target = params.get("target", self.target)
        x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
        row = pb_utils.Tensor("INPUT0", x.as_list(), "FP32", [1, 16])
        row1 = pb_utils.Tensor("INPUT1", x.as_list(), "FP32", [1, 16])

        def call():
            return pb_utils.InferenceRequest(
                model_name=target, requested_output_names=["OUTPUT0"], inputs=[row, row1])

        if mode == "sequential":
            responses = [await call().async_exec() for _ in range(calls)]
        else:
            responses = await asyncio.gather(*[call().async_exec() for _ in range(calls)])

        total = [0.0] * 16
        for response in responses:
            if response.has_error():
                error = response.error()
                return pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "BLS call to '%s' failed: %s" % (target, error.message()), error.code()))
            out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_list()
            total = [t + v for t, v in zip(total, out)]
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("OUTPUT0", total, "FP32", [16])])
