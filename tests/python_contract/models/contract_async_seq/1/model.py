"""OP "overlap": awaits asyncio.sleep(0.2) and answers the most executions that ran at once so far;
OP "env": the variables CONTRACT_GREETING and CONTRACT_SECRET as initialize and execute saw them."""

import asyncio
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

NAMES = ("CONTRACT_GREETING", "CONTRACT_SECRET")


class TritonPythonModel:
    def initialize(self, args):
        self.active = 0
        self.peak = 0
        self.env_at_initialize = {name: os.environ.get(name) for name in NAMES}

    async def execute(self, requests):
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            responses = []
            for request in requests:
                op = pb_utils.get_input_tensor_by_name(request, "OP").as_numpy().reshape(-1)[0].decode()
                if op == "overlap":
                    await asyncio.sleep(0.2)
                    out = {"peak": self.peak}
                else:
                    out = {"initialize": self.env_at_initialize,
                           "execute": {name: os.environ.get(name) for name in NAMES}}
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([json.dumps(out).encode()], dtype=np.object_))]))
            return responses
        finally:
            self.active -= 1
