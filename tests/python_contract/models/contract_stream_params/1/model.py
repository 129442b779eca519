"""Sends N responses, the i-th with OUT = i and its own response parameters (step, last, note),
the last with the FINAL flag. Where InferenceResponse takes no parameters (Triton before r24.12)
it sends that TypeError as the request's error instead."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            sender = request.get_response_sender()
            for step in range(n):
                out = pb_utils.Tensor("OUT", np.array([step], dtype=np.int32))
                params = {"step": step, "last": step == n - 1, "note": "response %d" % step}
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if step == n - 1 else 0
                try:
                    response = pb_utils.InferenceResponse([out], parameters=params)
                except TypeError as e:
                    error = pb_utils.TritonError("TypeError: %s" % e)
                    sender.send(pb_utils.InferenceResponse([], error=error),
                                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    break
                sender.send(response, flags=flags)
        return None
