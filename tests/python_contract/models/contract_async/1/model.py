"""OP "wait" ARG key: awaits the event `key` (at most 20 s) and answers whether it was released;
OP "set" ARG key: releases it. Both answer through the response sender (decoupled)."""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _text(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0].decode()


class TritonPythonModel:
    def initialize(self, args):
        self.events = {}

    def _event(self, key):
        if key not in self.events:
            self.events[key] = asyncio.Event()
        return self.events[key]

    async def execute(self, requests):
        for request in requests:
            op, key = _text(request, "OP"), _text(request, "ARG")
            if op == "wait":
                try:
                    await asyncio.wait_for(self._event(key).wait(), timeout=20)
                    out = {"op": op, "released": True}
                except asyncio.TimeoutError:
                    out = {"op": op, "released": False}
                self.events.pop(key, None)
            else:
                self._event(key).set()
                out = {"op": op, "set": True}
            response = pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([json.dumps(out).encode()], dtype=np.object_))])
            request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
