"""PyTriton details code relies on: unnamed tensors named as PyTriton names them, the workspace
and model store, lifecycle policies, ensembles that use models bound after the start, header
forwarding, and the remote mode refused by name. The server runs in this test process."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tritonclient.http as httpclient

from tessera_testlib import ensemble_config, free_ports, write_config_model

from tessera.pytriton.client import ModelClient
from tessera.pytriton.decorators import batch
from tessera.pytriton.exceptions import PyTritonValidationError
from tessera.pytriton.model_config import ModelConfig, Tensor
from tessera.pytriton.triton import RemoteTriton, Triton, TritonConfig, TritonLifecyclePolicy, TritonSecurityConfig


def config(**kw) -> TritonConfig:
    http, grpc, metrics = free_ports(3)
    return TritonConfig(http_address="127.0.0.1", grpc_address="127.0.0.1", metrics_address="127.0.0.1",
                        http_port=http, grpc_port=grpc, metrics_port=metrics, **kw)


@batch
def add_sub(INPUT_1, INPUT_2):
    return {"OUTPUT_1": INPUT_1 + INPUT_2, "OUTPUT_2": INPUT_1 - INPUT_2}


def bind_unnamed(t: Triton, name: str = "AddSub") -> None:
    t.bind(model_name=name, infer_func=add_sub,
           inputs=[Tensor(dtype=np.float32, shape=(-1,)), Tensor(dtype=np.float32, shape=(-1,))],
           outputs=[Tensor(dtype=np.float32, shape=(-1,)), Tensor(dtype=np.float32, shape=(-1,))],
           config=ModelConfig(max_batch_size=8))


def test_unnamed_tensors_are_named_by_position_from_one():
    with Triton(config=config()) as t:
        bind_unnamed(t)
        url = f"127.0.0.1:{t.http_port}"
        meta = httpclient.InferenceServerClient(url).get_model_metadata("AddSub")
        assert [i["name"] for i in meta["inputs"]] == ["INPUT_1", "INPUT_2"]
        assert [o["name"] for o in meta["outputs"]] == ["OUTPUT_1", "OUTPUT_2"]
        with ModelClient(url, "AddSub") as client:
            result = client.infer_sample(np.array([5.0], dtype=np.float32), np.array([3.0], dtype=np.float32))
        np.testing.assert_array_equal(result["OUTPUT_1"], [8.0])
        np.testing.assert_array_equal(result["OUTPUT_2"], [2.0])


def test_local_model_store_writes_each_config_to_the_workspace(tmp_path):
    workspace = tmp_path / "ws"
    policy = TritonLifecyclePolicy(launch_triton_on_startup=True, local_model_store=True)
    with Triton(config=config(), workspace=str(workspace), triton_lifecycle_policy=policy) as t:
        bind_unnamed(t)
        stored = workspace / "model-store" / "AddSub"
        text = (stored / "config.pbtxt").read_text()
        assert 'name: "AddSub"' in text and 'name: "INPUT_1"' in text and "max_batch_size: 8" in text
        assert (stored / "1").is_dir(), "a version directory, as PyTriton's model store has"
    assert (stored / "config.pbtxt").is_file(), "a workspace the user named is kept"


def test_a_temporary_workspace_goes_at_stop():
    policy = TritonLifecyclePolicy(local_model_store=True)
    with Triton(config=config(), triton_lifecycle_policy=policy) as t:
        bind_unnamed(t)
        store = t._workspace.model_store
        assert store and os.path.isfile(f"{store}/AddSub/config.pbtxt")
    assert not os.path.exists(store), "PyTriton removes the workspace it created"


def test_repository_ensemble_waits_for_a_model_bound_after_the_start(tmp_path):
    repo = tmp_path / "repo"
    write_config_model(repo, "ens", ensemble_config("ens", 'model_name: "AddSub" model_version: -1 '
                                                    'input_map [ { key: "INPUT_1" value: "X" }, '
                                                    '{ key: "INPUT_2" value: "X" } ] '
                                                    'output_map { key: "OUTPUT_1" value: "Y" }'))
    # An ensemble of that ensemble waits too.
    write_config_model(repo, "outer", ensemble_config("outer", 'model_name: "ens" model_version: -1 '
                                                      'input_map { key: "X" value: "X" } '
                                                      'output_map { key: "Y" value: "Y" }'))
    # The default policy starts the server on entering the block, before any bind.
    open_endpoints = TritonSecurityConfig(restricted_endpoints=[])
    with Triton(config=config(model_repository=str(repo)), security_config=open_endpoints) as t:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{t.http_port}")
        assert not client.is_model_ready("ens"), "waiting for its step"
        entry = [e for e in client.get_model_repository_index() if e["name"] == "ens"]
        assert entry and entry[0]["state"] == "UNAVAILABLE" and "AddSub" in entry[0]["reason"]
        assert not client.is_model_ready("outer")
        bind_unnamed(t)
        assert client.is_model_ready("ens"), "ready once its step is bound"
        assert client.is_model_ready("outer"), "and the ensemble using it"
        x = httpclient.InferInput("X", [1, 3], "FP32")
        x.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.float32))
        np.testing.assert_array_equal(client.infer("ens", [x]).as_numpy("Y"), [[2, 4, 6]])
        np.testing.assert_array_equal(client.infer("outer", [x]).as_numpy("Y"), [[2, 4, 6]])


def test_headers_reach_the_callable_when_forwarded():
    seen = []

    def infer(requests):
        seen.extend(r.parameters.get("x-scale") for r in requests)
        return [{"OUTPUT_1": r["INPUT_1"]} for r in requests]

    with Triton(config=config(http_header_forward_pattern="x-.*")) as t:
        t.bind(model_name="Echo", infer_func=infer, inputs=[Tensor(dtype=np.float32, shape=(-1,))],
               outputs=[Tensor(dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=8))
        with ModelClient(f"127.0.0.1:{t.http_port}", "Echo") as client:
            client.infer_sample(np.array([1.0], dtype=np.float32), headers={"x-scale": "3"})
    assert seen == ["3"], "the client sends headers=, and the server forwards those that match"


def test_remote_mode_is_refused_by_name():
    with pytest.raises(PyTritonValidationError, match="RemoteTriton is not supported by Tessera"):
        RemoteTriton(url="localhost")
