# add_sub as a Tessera Python guest: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.
#
# Ported from Triton's python_backend examples/add_sub/model.py. The changes from a Triton model:
#   - no `import numpy`: there is no numpy inside a Wasm guest;
#   - `.as_numpy()` -> `.as_list()` (a flat Python list), arithmetic element by element;
#   - the output Tensor gets the input's shape and the config's datatype explicitly
#     (`pb_utils.triton_string_to_numpy` returns a datatype name such as "FP32" here).
# Build: scripts/build-python-guest.sh example-guests/add_sub_python model.wasm
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Your Python model must use the same class name. Every Python model
    that is created must have "TritonPythonModel" as the class name.
    """

    def initialize(self, args):
        """`initialize` is called only once when the model is being loaded.

        Parameters
        ----------
        args : dict
          Both keys and values are strings. The dictionary keys and values are:
          * model_config: A JSON string containing the model configuration
          * model_instance_kind: A string containing model instance kind
          * model_instance_device_id: A string containing model instance device ID
          * model_repository: Model repository path
          * model_version: Model version
          * model_name: Model name
        """
        # You must parse model_config. JSON string is not parsed here
        self.model_config = model_config = json.loads(args["model_config"])

        # Get OUTPUT0 configuration
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")

        # Get OUTPUT1 configuration
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")

        # Convert Triton types to datatype names ("TYPE_FP32" -> "FP32")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        """`execute` receives a list of pb_utils.InferenceRequest (more than one when the model
        batches) and must return one pb_utils.InferenceResponse per request, in order.
        """
        output0_dtype = self.output0_dtype
        output1_dtype = self.output1_dtype

        responses = []

        # Every Python backend must iterate over everyone of the requests
        # and create a pb_utils.InferenceResponse for each of them.
        for request in requests:
            # Get INPUT0
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            # Get INPUT1
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")

            a = in_0.as_list()
            b = in_1.as_list()
            out_0 = [x + y for x, y in zip(a, b)]
            out_1 = [x - y for x, y in zip(a, b)]

            # Create output tensors. You need pb_utils.Tensor
            # objects to create pb_utils.InferenceResponse.
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0, output0_dtype, shape=in_0.shape())
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1, output1_dtype, shape=in_0.shape())

            # Create InferenceResponse. You can set an error here in case
            # there was a problem with handling this inference request.
            # Below is an example of how you can set errors in inference
            # response:
            #
            # pb_utils.InferenceResponse(
            #    output_tensors=..., TritonError("An error occurred"))
            inference_response = pb_utils.InferenceResponse(
                output_tensors=[out_tensor_0, out_tensor_1]
            )
            responses.append(inference_response)

        # You should return a list of pb_utils.InferenceResponse. Length
        # of this list must match the length of `requests` list.
        return responses

    def finalize(self):
        """`finalize` is called only once when the model is being unloaded."""
        print("Cleaning up...")
