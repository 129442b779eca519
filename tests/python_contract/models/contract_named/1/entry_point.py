"""contract_named: served from entry_point.py (config.pbtxt's default_model_filename)."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        report = json.dumps({"name": __name__, "file": os.path.basename(__file__)})
        out = pb_utils.Tensor("OUT", np.array([report.encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
