"""contract_finalize: says in the server log that initialize and finalize ran."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        print("contract_finalize: initialize %s" % self.name, flush=True)

    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("not for inference")) for _ in requests]

    def finalize(self):
        print("contract_finalize: finalize %s" % self.name, flush=True)
