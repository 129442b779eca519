"""The execution fast paths' debugging switch (`tessera serve --no-fast-paths`, see
host/src/execution/mod.rs): every request takes the slow path (queued, run on a blocking thread)
and is answered exactly as with the fast paths on, over both doors and through BLS."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tessera_testlib import copy_model


def add_sub(client_lib, url: str, model: str, x: np.ndarray, y: np.ndarray):
    client = client_lib.InferenceServerClient(url)
    inputs = [client_lib.InferInput("INPUT0", [1, 16], "FP32"), client_lib.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    result = client.infer(model, inputs)
    return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")


def test_without_fast_paths_both_doors_and_bls_answer_the_same(server_factory, repo):
    for model in ("add_sub", "bls_add_sub", "bls_fanout", "fanout_target"):
        copy_model(repo, model)
    srv = server_factory(repo, ["--no-fast-paths"])
    assert "execution fast paths are off (--no-fast-paths)" in srv.log_text()
    grpc_url = f"127.0.0.1:{srv.grpc_port}"

    def call(i: int):
        x = np.full((1, 16), i, dtype=np.float32)
        y = np.arange(16, dtype=np.float32).reshape(1, 16)
        lib, url = (httpclient, srv.url) if i % 2 else (grpcclient, grpc_url)
        for model in ("add_sub", "bls_add_sub"):
            out0, out1 = add_sub(lib, url, model, x, y)
            np.testing.assert_array_equal(out0, x + y, err_msg=f"{model} request {i}")
            np.testing.assert_array_equal(out1, x - y, err_msg=f"{model} request {i}")
        return i

    # Concurrent callers on both doors: each gets its own answer.
    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(call, range(32))) == list(range(32))

    # A guest's parallel BLS calls (infer-async) as well.
    client = httpclient.InferenceServerClient(srv.url)
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    i = httpclient.InferInput("INPUT0", [16], "FP32")
    i.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("bls_fanout", [i]).as_numpy("OUTPUT0"), 8 * x, rtol=1e-6)
