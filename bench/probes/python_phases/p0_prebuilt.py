# A probe guest of bench/probes/python_phases.sh (see there).
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        z = [0.0] * 16
        self.resp = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", z, "FP32", shape=[1, 16]), pb_utils.Tensor("OUTPUT1", z, "FP32", shape=[1, 16])])
    def execute(self, requests):
        return [self.resp] * len(requests)
