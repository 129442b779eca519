"""contract_sequence: reports each request's flags() and correlation_id()."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            report = {
                "flags": request.flags(),
                "correlation_id": request.correlation_id(),
                "start": bool(request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START),
                "end": bool(request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END),
                "parameters": json.loads(request.parameters()),
            }
            out = np.array([[json.dumps(report, sort_keys=True).encode()]], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
