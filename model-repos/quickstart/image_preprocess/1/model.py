"""Image pre-processing before image_classifier, with numpy, as a Triton python-backend model.

IMAGE (UINT8 [height, width, 3], RGB) -> scaled to [0, 1], normalised with ImageNet's mean and
standard deviation, resized to 224x224 (bilinear), laid out as NCHW -> image_classifier (BLS)
-> the top_k classes (CLASSES, INT64) and their probabilities (SCORES, FP32).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def resize_bilinear(image, size):
    """[h, w, c] float image -> [size, size, c], sampling at pixel centres (as OpenCV's
    INTER_LINEAR does)."""
    h, w = image.shape[:2]

    def grid(n):
        pos = (np.arange(size, dtype=np.float32) + 0.5) * (n / size) - 0.5
        pos = np.clip(pos, 0, n - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        return lo, hi, (pos - lo).astype(np.float32)

    y0, y1, fy = grid(h)
    x0, x1, fx = grid(w)
    top = image[y0][:, x0] * (1 - fx)[None, :, None] + image[y0][:, x1] * fx[None, :, None]
    bottom = image[y1][:, x0] * (1 - fx)[None, :, None] + image[y1][:, x1] * fx[None, :, None]
    return top * (1 - fy)[:, None, None] + bottom * fy[:, None, None]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.top_k = int(config["parameters"]["top_k"]["string_value"])

    def execute(self, requests):
        return [self.classify(request) for request in requests]

    def classify(self, request):
        image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
        if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] == 0 or image.shape[1] == 0:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "IMAGE must be [height, width, 3] with a non-empty height and width, got %s"
                % (list(image.shape),), pb_utils.TritonError.INVALID_ARG))
        pixels = (image.astype(np.float32) / 255.0 - MEAN) / STD
        batch = resize_bilinear(pixels, SIZE).transpose(2, 0, 1)[None].astype(np.float32)
        response = pb_utils.InferenceRequest(
            model_name="image_classifier", requested_output_names=["output"],
            inputs=[pb_utils.Tensor("input", np.ascontiguousarray(batch))]).exec()
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
        probabilities = pb_utils.get_output_tensor_by_name(response, "output").as_numpy()[0]
        top = np.argsort(-probabilities, kind="stable")[: self.top_k]
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("CLASSES", top.astype(np.int64)),
            pb_utils.Tensor("SCORES", probabilities[top].astype(np.float32)),
        ])
