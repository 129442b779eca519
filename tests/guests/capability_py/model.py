"""The Python twin of example-guests/capability_probe (tests/test_capabilities.py): the same
operations on OP, answered in OUT, through tessera_guest.capabilities."""

import numpy as np
import triton_python_backend_utils as pb_utils
from tessera_guest import capabilities


def answer(op):
    verb, _, rest = op.partition(":")
    if verb == "config":
        value = capabilities.config_get(rest)
        return "<absent>" if value is None else value[::-1]
    if verb == "config-keys":
        return ",".join(sorted(capabilities.config_items()))
    if verb == "count":
        return str(capabilities.Bucket(rest).increment("n"))
    if verb == "set":
        bucket, key, value = rest.split(":", 2)
        capabilities.Bucket(bucket).set(key, value)
        return "ok"
    if verb == "get":
        bucket, key = rest.split(":", 1)
        value = capabilities.Bucket(bucket).get(key)
        return "<absent>" if value is None else value.decode()
    if verb == "keys":
        return ",".join(capabilities.Bucket(rest).keys())
    raise ValueError("unknown operation")


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0  # requests this instance served: 1 every time under isolation = fresh

    def execute(self, requests):
        responses = []
        for request in requests:
            self.calls += 1
            op = pb_utils.get_input_tensor_by_name(request, "OP").as_numpy().reshape(-1)[0].decode()
            try:
                text = str(self.calls) if op == "calls" else answer(op)
                out = np.array([text.encode()], dtype=np.object_)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
            except Exception as e:  # noqa: BLE001 - the test reads the message
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
        return responses
