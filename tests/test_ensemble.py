"""Ensembles (`platform: "ensemble"`): data-driven execution, batching across steps, decoupled
steps, load-time validation with Triton's messages, run-time errors, statistics, readiness that
follows the steps, and repository load/unload with `unload_dependents`. Real server, real
tritonclient over HTTP and gRPC on 127.0.0.1."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tessera_testlib import (
    copy_faulty,
    copy_model,
    grpc_stream_responses,
    quickstart_repo,
    sse_events,
    wait_model_not_ready,
    wait_model_ready,
    write_onnx_model,
)

QUICKSTART_ENSEMBLE = "text_pipeline"


# ---------------------------------------------------------------------------------------------
# Repository builders
# ---------------------------------------------------------------------------------------------

def step(model: str, inputs: dict, outputs: dict, version: int = -1) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {ins} {outs} }}'


def tensors(spec: dict, dtype: str = "TYPE_FP32", dims: str = "[ 16 ]") -> str:
    return ", ".join(f'{{ name: "{n}" data_type: {d or dtype} dims: {s or dims} }}'
                     for n, (d, s) in ((n, v if isinstance(v, tuple) else (None, None)) for n, v in spec.items()))


def write_ensemble(repo: Path, name: str, inputs, outputs, steps: list[str], *, max_batch_size: int = 8,
                   extra: str = "", scheduling_extra: str = "") -> Path:
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f"input [ {tensors(inputs) if isinstance(inputs, dict) else inputs} ]\n"
        f"output [ {tensors(outputs) if isinstance(outputs, dict) else outputs} ]\n"
        f"ensemble_scheduling {{ {scheduling_extra} step [ {', '.join(steps)} ] }}\n{extra}\n")
    return d


def add_sub_twice(repo: Path, name: str = "ens_twice", model: str = "add_sub") -> Path:
    """A, B -> add_sub -> S = A+B, D = A-B -> add_sub -> A2 = 2A, B2 = 2B."""
    return write_ensemble(repo, name, {"A": 0, "B": 0}, {"A2": 0, "B2": 0}, [
        step(model, {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "S", "OUTPUT1": "D"}),
        step(model, {"INPUT0": "S", "INPUT1": "D"}, {"OUTPUT0": "A2", "OUTPUT1": "B2"}),
    ])


def int_model(repo: Path, name: str, *, dims: list[int], batching: bool, op: str = "Add") -> Path:
    """An ONNX model Y = X op X on INT32."""
    return write_onnx_model(repo, name, "TYPE_INT32", dims, max_batch_size=8 if batching else 0,
                               inp="X", out="Y", op=op)


def join_model(repo: Path, name: str) -> Path:
    """A non-batching ONNX model Y = X + X2 on INT32 [1]."""
    x, x2, y = (helper.make_tensor_value_info(n, TensorProto.INT32, [1]) for n in ("X", "X2", "Y"))
    graph = helper.make_graph([helper.make_node("Add", ["X", "X2"], ["Y"])], name, [x, x2], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "X2" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')
    return d


def ab(batch: int = 2):
    a = np.arange(16 * batch, dtype=np.float32).reshape(batch, 16)
    b = np.full((batch, 16), 3.0, dtype=np.float32)
    return a, b


def infer_with(lib, url: str, model: str, named: dict, outputs: list[str] | None = None, **kw):
    """One inference through tritonclient's `lib` (tritonclient.http or tritonclient.grpc)."""
    c = lib.InferenceServerClient(url)
    ins = []
    for name, value in named.items():
        i = lib.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        i.set_data_from_numpy(value)
        ins.append(i)
    outs = [lib.InferRequestedOutput(o) for o in outputs] if outputs else None
    return c.infer(model, ins, outputs=outs, **kw)


http_infer = partial(infer_with, httpclient)
grpc_infer = partial(infer_with, grpcclient)


def stats(url: str, model: str) -> dict:
    return httpclient.InferenceServerClient(url).get_inference_statistics(model)["model_stats"][0]


def grpc_url(srv) -> str:
    return f"127.0.0.1:{srv.grpc_port}"


def explicit(server_factory, repo: Path, *models: str):
    args = ["--model-control-mode", "explicit"]
    for m in models:
        args += ["--load-model", m]
    return server_factory(repo, args)


def load_error(srv, model: str) -> str:
    c = httpclient.InferenceServerClient(srv.url)
    with pytest.raises(InferenceServerException) as ei:
        c.load_model(model)
    assert srv.is_running()
    return ei.value.message()


# ---------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def twice_server(server_factory, repo):
    copy_model(repo, "add_sub")
    add_sub_twice(repo)
    return server_factory(repo)


@pytest.mark.parametrize("door", ["http", "grpc"])
def test_results_equal_calling_the_steps_one_by_one(twice_server, door):
    srv = twice_server
    infer, url = (http_infer, srv.url) if door == "http" else (grpc_infer, grpc_url(srv))
    a, b = ab(3)
    r = infer(url, "ens_twice", {"A": a, "B": b})
    first = infer(url, "add_sub", {"INPUT0": a, "INPUT1": b})
    second = infer(url, "add_sub", {"INPUT0": first.as_numpy("OUTPUT0"), "INPUT1": first.as_numpy("OUTPUT1")})
    np.testing.assert_array_equal(r.as_numpy("A2"), second.as_numpy("OUTPUT0"))
    np.testing.assert_array_equal(r.as_numpy("B2"), second.as_numpy("OUTPUT1"))
    np.testing.assert_array_equal(r.as_numpy("A2"), 2 * a)
    np.testing.assert_array_equal(r.as_numpy("B2"), 2 * b)


def test_statistics_count_the_ensemble_once_and_its_steps_each(twice_server):
    srv = twice_server
    a, b = ab(2)
    for _ in range(3):
        http_infer(srv.url, "ens_twice", {"A": a, "B": b})
    ens = stats(srv.url, "ens_twice")
    steps = stats(srv.url, "add_sub")
    assert ens["inference_stats"]["success"]["count"] == 3
    assert ens["inference_count"] == 6  # 3 requests of batch 2
    assert steps["inference_stats"]["success"]["count"] == 6  # two steps per request
    assert steps["inference_count"] == 12
    # The ensemble's compute is its steps' compute.
    assert 0 < ens["inference_stats"]["compute_infer"]["ns"] <= steps["inference_stats"]["compute_infer"]["ns"]
    metrics = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    assert 'nv_inference_request_success{model="ens_twice",version="1"} 3' in metrics


def test_steps_no_requested_output_needs_are_skipped(server_factory, repo):
    copy_model(repo, "add_sub")
    copy_model(repo, "add_sub", "add_sub_b")
    write_ensemble(repo, "ens_fork", {"A": 0, "B": 0}, {"SUM": 0, "DIFF": 0}, [
        step("add_sub", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM"}),
        step("add_sub_b", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "DIFF"}),
    ])
    srv = server_factory(repo)
    a, b = ab(1)
    r = http_infer(srv.url, "ens_fork", {"A": a, "B": b}, outputs=["SUM"])
    np.testing.assert_array_equal(r.as_numpy("SUM"), a + b)
    assert r.as_numpy("DIFF") is None
    assert stats(srv.url, "add_sub")["inference_stats"]["success"]["count"] == 1
    assert stats(srv.url, "add_sub_b")["inference_stats"]["success"]["count"] == 0, "the skipped step ran"
    r = http_infer(srv.url, "ens_fork", {"A": a, "B": b})
    np.testing.assert_array_equal(r.as_numpy("DIFF"), a - b)
    assert stats(srv.url, "add_sub_b")["inference_stats"]["success"]["count"] == 1


def test_independent_steps_run_at_the_same_time(server_factory, repo):
    # A model that batches two requests only if both are queued together; alone, a request waits
    # out a 3 s queue delay. Two independent steps on it form one batch only if they overlap.
    config = (quickstart_repo() / "add_sub" / "config.pbtxt").read_text().replace(
        "dynamic_batching { }",
        "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 3000000 }")
    config = config.replace('name: "add_sub"', 'name: "pairs"')
    copy_model(repo, "add_sub", "pairs", config=config)
    write_ensemble(repo, "ens_parallel", {"A": 0, "B": 0}, {"X": 0, "Y": 0}, [
        step("pairs", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "X"}),
        step("pairs", {"INPUT0": "B", "INPUT1": "A"}, {"OUTPUT1": "Y"}),
    ])
    srv = server_factory(repo)
    a, b = ab(1)
    r = http_infer(srv.url, "ens_parallel", {"A": a, "B": b})
    np.testing.assert_array_equal(r.as_numpy("X"), a + b)
    np.testing.assert_array_equal(r.as_numpy("Y"), b - a)
    s = stats(srv.url, "pairs")
    assert (s["execution_count"], s["inference_count"]) == (1, 2), s


def test_nested_ensembles(server_factory, repo):
    copy_model(repo, "add_sub")
    add_sub_twice(repo, "inner")
    write_ensemble(repo, "outer", {"P": 0, "Q": 0}, {"P4": 0}, [
        step("inner", {"A": "P", "B": "Q"}, {"A2": "p2", "B2": "q2"}),
        step("inner", {"A": "p2", "B": "q2"}, {"A2": "P4"}),
    ])
    srv = server_factory(repo)
    a, b = ab(2)
    for infer, url in ((http_infer, srv.url), (grpc_infer, grpc_url(srv))):
        r = infer(url, "outer", {"P": a, "Q": b})
        np.testing.assert_array_equal(r.as_numpy("P4"), 4 * a)
    assert stats(srv.url, "inner")["inference_stats"]["success"]["count"] == 4
    assert stats(srv.url, "add_sub")["inference_stats"]["success"]["count"] == 8


def test_non_batching_steps_in_a_batching_ensemble(server_factory, repo):
    int_model(repo, "double_nb", dims=[4], batching=False)
    int_model(repo, "double_b", dims=[4], batching=True)
    write_ensemble(repo, "ens_mixed", '{ name: "X" data_type: TYPE_INT32 dims: [ 4 ] }',
                   '{ name: "Y" data_type: TYPE_INT32 dims: [ 4 ] }', [
                       step("double_b", {"X": "X"}, {"Y": "x2"}),
                       step("double_nb", {"X": "x2"}, {"Y": "x4"}),
                       step("double_b", {"X": "x4"}, {"Y": "Y"}),
                   ])
    srv = server_factory(repo)
    x = np.array([[1, 2, 3, 4]], dtype=np.int32)
    r = http_infer(srv.url, "ens_mixed", {"X": x})
    np.testing.assert_array_equal(r.as_numpy("Y"), 8 * x)
    # The step that does not batch can only take a batch of one.
    with pytest.raises(InferenceServerException) as ei:
        http_infer(srv.url, "ens_mixed", {"X": np.vstack([x, x])})
    assert "in ensemble 'ens_mixed'" in ei.value.message() and "double_nb" in ei.value.message()
    assert ei.value.status() == "400"


def test_sequence_ids_pass_through_to_a_sequence_batching_step(server_factory, repo):
    copy_model(repo, "simple_sequence")
    write_ensemble(repo, "ens_seq", '{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }',
                   '{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }',
                   [step("simple_sequence", {"INPUT": "IN"}, {"OUTPUT": "OUT"})])
    srv = server_factory(repo)
    c = grpcclient.InferenceServerClient(grpc_url(srv))
    totals = []
    for i, v in enumerate([3, 4, 5]):
        inp = grpcclient.InferInput("IN", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        r = c.infer("ens_seq", [inp], sequence_id=77, sequence_start=i == 0, sequence_end=i == 2)
        totals.append(int(r.as_numpy("OUT")[0][0]))
    # simple_sequence accumulates its input over the sequence.
    assert totals == [3, 7, 12], totals


# ---------------------------------------------------------------------------------------------
# Decoupled steps
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def decoupled_server(server_factory, repo):
    copy_model(repo, "repeat")
    int_model(repo, "double_one", dims=[1], batching=False)
    write_ensemble(repo, "ens_stream", '{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }',
                   '{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, '
                   '{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }', [
                       step("repeat", {"IN": "IN"}, {"OUT": "value", "IDX": "IDX"}),
                       step("double_one", {"X": "value"}, {"Y": "OUT"}),
                   ], max_batch_size=0, scheduling_extra="max_inflight_responses: 2")
    return server_factory(repo)


def test_decoupled_ensemble_streams_over_grpc(decoupled_server):
    srv = decoupled_server
    cfg = httpclient.InferenceServerClient(srv.url).get_model_config("ens_stream")
    assert cfg["model_transaction_policy"]["decoupled"] is True
    inp = grpcclient.InferInput("IN", [4], "INT32")
    inp.set_data_from_numpy(np.array([5, 6, 7, 8], dtype=np.int32))
    got = grpc_stream_responses(grpc_url(srv), "ens_stream", [inp], ["IDX", "OUT"])
    assert sorted(got) == [(0, 10), (1, 12), (2, 14), (3, 16)]
    assert stats(srv.url, "double_one")["inference_stats"]["success"]["count"] == 4


def test_decoupled_ensemble_streams_over_http_generate_stream(decoupled_server):
    srv = decoupled_server
    with requests.post(srv.http("/v2/models/ens_stream/generate_stream"), json={"IN": [1, 2, 3]},
                       stream=True, timeout=30) as r:
        assert r.status_code == 200, r.text
        events = sse_events(r)
    assert sorted((e["IDX"], e["OUT"]) for e in events) == [(0, 2), (1, 4), (2, 6)], events


def test_decoupled_ensemble_refuses_plain_infer(decoupled_server):
    with pytest.raises(InferenceServerException) as ei:
        http_infer(decoupled_server.url, "ens_stream", {"IN": np.array([1], dtype=np.int32)})
    assert "decoupled" in ei.value.message()


# ---------------------------------------------------------------------------------------------
# Load-time validation
# ---------------------------------------------------------------------------------------------

def test_validation_errors_use_tritons_messages(server_factory, repo):
    copy_model(repo, "add_sub")
    copy_model(repo, "repeat")
    two = {"INPUT0": "A", "INPUT1": "B"}
    write_ensemble(repo, "unknown_model", {"A": 0, "B": 0}, {"S": 0},
                   [step("nope", two, {"OUTPUT0": "S"})])
    write_ensemble(repo, "too_big_batch", {"A": 0, "B": 0}, {"S": 0},
                   [step("add_sub", two, {"OUTPUT0": "S"})], max_batch_size=16)
    write_ensemble(repo, "unwritten", {"A": 0}, {"S": 0},
                   [step("add_sub", {"INPUT0": "A", "INPUT1": "ghost"}, {"OUTPUT0": "S"})])
    write_ensemble(repo, "unused_input", {"A": 0, "B": 0, "SPARE": 0}, {"S": 0},
                   [step("add_sub", two, {"OUTPUT0": "S"})])
    write_ensemble(repo, "wrong_dtype", '{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, '
                   '{ name: "B" data_type: TYPE_FP32 dims: [ 16 ] }', {"S": 0},
                   [step("add_sub", two, {"OUTPUT0": "S"})])
    write_ensemble(repo, "wrong_shape", {"A": ("TYPE_FP32", "[ 8 ]"), "B": 0}, {"S": 0},
                   [step("add_sub", two, {"OUTPUT0": "S"})])
    write_ensemble(repo, "missing_version", {"A": 0, "B": 0}, {"S": 0},
                   [step("add_sub", two, {"OUTPUT0": "S"}, version=7)])
    write_ensemble(repo, "cycle_a", {"A": 0, "B": 0}, {"S": 0}, [step("cycle_b", {"A": "A", "B": "B"}, {"S": "S"})])
    write_ensemble(repo, "cycle_b", {"A": 0, "B": 0}, {"S": 0}, [step("cycle_a", {"A": "A", "B": "B"}, {"S": "S"})])
    srv = explicit(server_factory, repo, "add_sub", "repeat")

    assert load_error(srv, "unknown_model").endswith(
        "ensemble unknown_model contains models that are not available or ambiguous: nope")
    assert ("ensemble too_big_batch allows maximum batch size 16, but it contains model add_sub which only "
            "allows maximum batch size to be 8") in load_error(srv, "too_big_batch")
    assert ("output 'S' for ensemble 'unwritten' is not written: at least one of its depending tensors, 'ghost', "
            "is not connected") in load_error(srv, "unwritten")
    assert "ensemble input 'SPARE' for ensemble unused_input' is not used" in load_error(srv, "unused_input")
    msg = load_error(srv, "wrong_dtype")
    assert msg.endswith("in ensemble wrong_dtype, ensemble tensor A: inconsistent data type: TYPE_INT32 is inferred "
                        "from model wrong_dtype while TYPE_FP32 is inferred from model add_sub"), msg
    msg = load_error(srv, "wrong_shape")
    assert "inconsistent shape" in msg and "[-1,8]" in msg and "[-1,16]" in msg, msg
    assert ("ensemble 'missing_version' depends on 'add_sub' whose required version 7 is not loaded."
            in load_error(srv, "missing_version"))
    msg = load_error(srv, "cycle_a")
    assert "circular dependency between ensembles: cycle_a -> ... -> cycle_b -> cycle_a" in msg, msg
    # Every failure left the server serving.
    a, b = ab(1)
    http_infer(srv.url, "add_sub", {"INPUT0": a, "INPUT1": b})


def test_a_step_fed_by_two_decoupled_models_is_refused(server_factory, repo):
    copy_model(repo, "repeat")
    copy_model(repo, "repeat", "repeat_b")
    write_ensemble(repo, "two_streams", '{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }',
                   '{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }', [
                       step("repeat", {"IN": "IN"}, {"OUT": "o1"}),
                       step("repeat_b", {"IN": "IN"}, {"OUT": "o2"}),
                       step("join_nb", {"X": "o1", "X2": "o2"}, {"Y": "OUT"}),
                   ], max_batch_size=0)
    join_model(repo, "join_nb")
    srv = explicit(server_factory, repo, "repeat", "repeat_b", "join_nb")
    msg = load_error(srv, "two_streams")
    assert msg.endswith("in ensemble two_streams, step of model 'join_nb' receives inputs originated from different "
                        "decoupled models"), msg


# ---------------------------------------------------------------------------------------------
# Errors at run time
# ---------------------------------------------------------------------------------------------

def test_a_failing_step_fails_the_request_with_its_status(server_factory, repo):
    copy_faulty(repo)
    write_ensemble(repo, "ens_faulty", '{ name: "MODE" data_type: TYPE_STRING dims: [ 1 ] }, '
                   '{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }',
                   '{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }',
                   [step("faulty", {"MODE": "MODE", "INPUT0": "X"}, {"OUTPUT0": "Y"})], max_batch_size=0)
    srv = server_factory(repo)
    x = np.array([1.5, 2.5], dtype=np.float32)
    ok = http_infer(srv.url, "ens_faulty", {"MODE": np.array([b"ok"], dtype=object), "X": x})
    np.testing.assert_array_equal(ok.as_numpy("Y"), x)
    for door, infer, url in (("http", http_infer, srv.url), ("grpc", grpc_infer, grpc_url(srv))):
        with pytest.raises(InferenceServerException) as ei:
            infer(url, "ens_faulty", {"MODE": np.array([b"trap"], dtype=object), "X": x})
        msg = ei.value.message()
        assert msg.startswith("in ensemble 'ens_faulty', "), msg
        assert "trap" in msg or "wasm" in msg, msg
        assert ei.value.status() == ("500" if door == "http" else "StatusCode.INTERNAL"), ei.value.status()
    s = stats(srv.url, "ens_faulty")["inference_stats"]
    assert (s["success"]["count"], s["fail"]["count"]) == (1, 2)
    # The server keeps serving the ensemble.
    ok = http_infer(srv.url, "ens_faulty", {"MODE": np.array([b"ok"], dtype=object), "X": x})
    np.testing.assert_array_equal(ok.as_numpy("Y"), x)


# ---------------------------------------------------------------------------------------------
# Readiness, load / unload
# ---------------------------------------------------------------------------------------------

def test_ensemble_readiness_follows_its_steps(server_factory, repo):
    copy_model(repo, "add_sub")
    add_sub_twice(repo)
    # Loading the ensemble alone loads the model it needs.
    srv = explicit(server_factory, repo, "ens_twice")
    c = httpclient.InferenceServerClient(srv.url)
    assert c.is_model_ready("add_sub") and c.is_model_ready("ens_twice")
    c.unload_model("add_sub")
    wait_model_not_ready(srv, "ens_twice")
    index = {e["name"]: e for e in c.get_model_repository_index()}
    assert index["ens_twice"]["state"] == "UNAVAILABLE"
    assert "add_sub" in index["ens_twice"]["reason"]
    a, b = ab(1)
    with pytest.raises(InferenceServerException):
        http_infer(srv.url, "ens_twice", {"A": a, "B": b})
    assert not c.is_server_ready()
    c.load_model("add_sub")
    wait_model_ready(srv, "ens_twice")
    np.testing.assert_array_equal(http_infer(srv.url, "ens_twice", {"A": a, "B": b}).as_numpy("A2"), 2 * a)
    assert c.is_server_ready()


@pytest.mark.parametrize("door", ["http", "grpc"])
def test_unload_dependents(server_factory, repo, door):
    copy_model(repo, "add_sub")
    copy_model(repo, "add_sub", "add_sub_b")
    add_sub_twice(repo)
    add_sub_twice(repo, "ens_b", model="add_sub_b")
    # ens_twice pulls add_sub in as a dependency; add_sub_b is asked for by name.
    srv = explicit(server_factory, repo, "ens_twice", "add_sub_b", "ens_b")
    lib = httpclient if door == "http" else grpcclient
    c = lib.InferenceServerClient(srv.url if door == "http" else grpc_url(srv))
    index = lambda: {e["name"]: e for e in httpclient.InferenceServerClient(srv.url).get_model_repository_index()}

    # As Triton: unloading an ensemble with unload_dependents also unloads the models that were
    # loaded only for it ...
    c.unload_model("ens_twice", unload_dependents=True)
    assert not c.is_model_ready("ens_twice") and not c.is_model_ready("add_sub")
    assert index()["add_sub"]["reason"] == "unloaded"
    # ... and by default leaves them: add_sub_b was loaded by name, and without the flag anyway.
    c.unload_model("ens_b")
    assert c.is_model_ready("add_sub_b") and not c.is_model_ready("ens_b")
    c.load_model("ens_b")
    c.unload_model("ens_b", unload_dependents=True)
    assert c.is_model_ready("add_sub_b"), "a model loaded by name is not a dependency to unload"

    # Unloading a step (flag or not) leaves its ensemble waiting: loading the step brings it back.
    c.load_model("ens_twice")
    assert c.is_model_ready("ens_twice")
    c.unload_model("add_sub", unload_dependents=True)
    wait_model_not_ready(srv, "ens_twice")
    c.load_model("add_sub")
    wait_model_ready(srv, "ens_twice")


def test_server_metadata_lists_tritons_extensions(twice_server):
    meta = httpclient.InferenceServerClient(twice_server.url).get_server_metadata()
    for ext in ("classification", "sequence", "model_repository", "model_repository(unload_dependents)",
                "schedule_policy", "model_configuration", "system_shared_memory", "binary_tensor_data",
                "parameters", "statistics", "trace", "logging"):
        assert ext in meta["extensions"], (ext, meta["extensions"])


# ---------------------------------------------------------------------------------------------
# The quickstart pipeline
# ---------------------------------------------------------------------------------------------

def test_quickstart_text_pipeline_equals_its_steps(server):
    texts = np.array([[b"hello world"], [b"a b c d e f"], [b""]], dtype=object)
    for infer, url in ((http_infer, server.url), (grpc_infer, grpc_url(server))):
        r = infer(url, QUICKSTART_ENSEMBLE, {"TEXT": texts})
        tok = infer(url, "tokenizer", {"TEXT": texts})
        score = infer(url, "text_scorer", {"INPUT_IDS": tok.as_numpy("INPUT_IDS"),
                                           "ATTENTION_MASK": tok.as_numpy("ATTENTION_MASK")})
        label = infer(url, "score_label", {"TOKEN_COUNT": score.as_numpy("TOKEN_COUNT"),
                                           "ID_SUM": score.as_numpy("ID_SUM")})
        np.testing.assert_array_equal(r.as_numpy("TOKEN_COUNT"), score.as_numpy("TOKEN_COUNT"))
        np.testing.assert_array_equal(r.as_numpy("MEAN_ID"), label.as_numpy("MEAN_ID"))
        np.testing.assert_array_equal(r.as_numpy("LABEL"), label.as_numpy("LABEL"))
        # The tokenizer counts [CLS] and [SEP]: the empty text has 2 tokens and no words.
        assert [row[0] for row in r.as_numpy("LABEL")] == [b"short", b"long", b"empty"]
        assert [row[0] for row in r.as_numpy("TOKEN_COUNT")] == [4, 8, 2]
