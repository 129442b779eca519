#!/usr/bin/env python3
"""The twin of ../shared/reference/triton/pytriton_double.py on Tessera's package: the same
PyTriton code (a @batch numpy callable, OUTPUT0 = 2 * INPUT0, FP32 [16], max_batch_size 16), with
only the imports changed.

    .venv/bin/python bench/pytriton_double.py [HTTP_PORT]    # gRPC = HTTP_PORT+1, metrics = +2
"""
import sys

import numpy as np
from tessera.pytriton.decorators import batch
from tessera.pytriton.model_config import ModelConfig, Tensor
from tessera.pytriton.triton import Triton, TritonConfig, TritonSecurityConfig


@batch
def infer_fn(**inputs):
    (x,) = inputs.values()
    return [x * 2.0]


port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
cfg = TritonConfig(http_port=port, grpc_port=port + 1, metrics_port=port + 2,
                   http_address="127.0.0.1", grpc_address="127.0.0.1", log_verbose=0)
with Triton(config=cfg, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
    triton.bind(model_name="Double", infer_func=infer_fn,
                inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(16,))],
                outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(16,))],
                config=ModelConfig(max_batch_size=16))
    triton.serve()
