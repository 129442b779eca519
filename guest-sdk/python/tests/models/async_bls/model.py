# `async def execute` awaiting BLS calls, as Triton's python backend allows.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            k = pb_utils.Tensor.from_list("K", [3.0])
            response = await pb_utils.InferenceRequest(
                model_name="inner", inputs=[pb_utils.Tensor("X", x), k],
                requested_output_names=["Y"]).async_exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
                continue
            y = pb_utils.get_output_tensor_by_name(response, "Y")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", y)]))
        return responses
