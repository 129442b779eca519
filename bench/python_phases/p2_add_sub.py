# A probe guest of bench/python_phases.sh (see there).
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        pass
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            a = in_0.as_list()
            b = in_1.as_list()
            out_0 = [x + y for x, y in zip(a, b)]
            out_1 = [x - y for x, y in zip(a, b)]
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", out_0, "FP32", shape=in_0.shape()), pb_utils.Tensor("OUTPUT1", out_1, "FP32", shape=in_0.shape())]))
        return responses
