# `async def execute` fanning BLS calls out with asyncio.gather, as Triton's python backend allows:
# every request's call is started before any is awaited (host infer-async), then collected.
# initialize and finalize are coroutines too, and sleep: the SDK's loop skips timers it would
# otherwise wait for (a guest has no clock unless granted one).
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def initialize(self, args):
        await asyncio.sleep(3600)
        self.k = 3.0

    async def execute(self, requests):
        calls = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            k = pb_utils.Tensor.from_list("K", [self.k])
            calls.append(pb_utils.InferenceRequest(
                model_name="inner", inputs=[pb_utils.Tensor("X", x), k],
                requested_output_names=["Y"]).async_exec())
        responses = []
        for response in await asyncio.gather(*calls):
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
                continue
            y = pb_utils.get_output_tensor_by_name(response, "Y")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", y)]))
        return responses

    async def finalize(self):
        await asyncio.sleep(1)
        pb_utils.Logger.log_info("finalized")
