#!/usr/bin/env python3
"""Writes the models bench/batching.sh measures into a model repository (default: a new temp dir,
printed on stdout):

    usage: gen_batching_models.py [REPO] [small|large]

  dense_batched    Y = relu(X @ W1) @ W2, FP32; small: X [batch, 512], W1 [512, 1024],
                   W2 [1024, 512] (4 MiB of weights); large: X [batch, 1024], W1 [1024, 4096],
                   W2 [4096, 1024] (32 MiB); dynamic_batching (200 µs delay), max_batch_size 32
  dense_unbatched  the same model file and max_batch_size, default scheduler (no batching)
  dense_queue0     the same with dynamic_batching and no delay, to measure the queue's own cost

A batch-1 run is bound by reading the weights, so one run of 16 rows costs little more than one
row: this is the case dynamic batching exists for. Deterministic weights; checked with onnx.checker.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZES = {"small": (512, 1024, 512), "large": (1024, 4096, 1024)}
MAX_BATCH = 32
D_IN, D_HIDDEN, D_OUT = SIZES["small"]


def model() -> bytes:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((D_IN, D_HIDDEN)) / np.sqrt(D_IN)).astype(np.float32)
    w2 = (rng.standard_normal((D_HIDDEN, D_OUT)) / np.sqrt(D_HIDDEN)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W1"], ["h"]),
            helper.make_node("Relu", ["h"], ["hr"]),
            helper.make_node("MatMul", ["hr", "W2"], ["Y"]),
        ],
        "dense",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", D_IN])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", D_OUT])],
        initializer=[numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m.SerializeToString()


def config(name: str, scheduling: str) -> str:
    return f'''name: "{name}"
backend: "onnxruntime"
max_batch_size: {MAX_BATCH}
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {D_IN} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {D_OUT} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{scheduling}
'''


def main() -> int:
    global D_IN, D_HIDDEN, D_OUT
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="tessera-batching-"))
    size = sys.argv[2] if len(sys.argv) > 2 else "small"
    if size not in SIZES:
        print(f"size must be one of {sorted(SIZES)}", file=sys.stderr)
        return 2
    D_IN, D_HIDDEN, D_OUT = SIZES[size]
    data = model()
    for name, scheduling in (
        ("dense_batched", "dynamic_batching { max_queue_delay_microseconds: 200 }"),
        ("dense_unbatched", ""),
        ("dense_queue0", "dynamic_batching { }"),
    ):
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "1" / "model.onnx").write_bytes(data)
        (repo / name / "config.pbtxt").write_text(config(name, scheduling))
    print(repo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
