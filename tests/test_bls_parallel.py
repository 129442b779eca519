"""Parallel BLS (fan-out) from guests: `infer-async` in the WIT, `infer_async` / `wait_all` in the
Rust SDK, and Triton's `async def execute` + `asyncio.gather(*[r.async_exec() ...])` in the Python
SDK. Real server, tritonclient over HTTP and gRPC."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, quickstart_repo

FANOUT_GUESTS = ["bls_fanout", "bls_fanout_python"]


def fanout(url: str, model: str, x: np.ndarray, door: str = "http", **params):
    lib = httpclient if door == "http" else grpcclient
    c = lib.InferenceServerClient(url)
    i = lib.InferInput("INPUT0", [16], "FP32")
    i.set_data_from_numpy(x)
    return c.infer(model, [i], parameters=params or None).as_numpy("OUTPUT0")


def stats(url: str, model: str) -> dict:
    return httpclient.InferenceServerClient(url).get_inference_statistics(model)["model_stats"][0]


@pytest.mark.parametrize("model", FANOUT_GUESTS)
@pytest.mark.parametrize("door", ["http", "grpc"])
def test_parallel_and_sequential_fan_out_give_the_same_answer(server, model, door):
    url = server.url if door == "http" else f"127.0.0.1:{server.grpc_port}"
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    parallel = fanout(url, model, x, door)
    sequential = fanout(url, model, x, door, mode="sequential")
    np.testing.assert_allclose(parallel, 8 * x, rtol=1e-6)  # 4 calls of add_sub(x, x) = 2x
    np.testing.assert_array_equal(parallel, sequential)
    np.testing.assert_allclose(fanout(url, model, x, door, calls=1), 2 * x, rtol=1e-6)


@pytest.fixture
def batching_target_server(server_factory, repo):
    """The fan-out guests calling a target that runs 4 queued requests as one batch and makes a
    lone request wait out a 2 s queue delay: only calls that overlap form that batch."""
    config = (quickstart_repo() / "fanout_target" / "config.pbtxt").read_text().replace(
        "dynamic_batching { }",
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }")
    assert "preferred_batch_size" in config
    copy_model(repo, "fanout_target", config=config)
    for guest in FANOUT_GUESTS:
        copy_model(repo, guest)
    return server_factory(repo)


@pytest.mark.parametrize("model", FANOUT_GUESTS)
def test_calls_started_together_run_concurrently(batching_target_server, model):
    srv = batching_target_server
    x = np.ones(16, dtype=np.float32)
    before = stats(srv.url, "fanout_target")
    np.testing.assert_allclose(fanout(srv.url, model, x), 8 * x)
    after = stats(srv.url, "fanout_target")
    # The four calls were in the target's queue at the same time: one execution of four.
    assert after["inference_count"] - before["inference_count"] == 4
    assert after["execution_count"] - before["execution_count"] == 1, (before, after)


@pytest.mark.parametrize("model", FANOUT_GUESTS)
def test_sequential_calls_run_one_at_a_time(server, model):
    x = np.ones(16, dtype=np.float32)
    before = stats(server.url, "fanout_target")
    fanout(server.url, model, x, mode="sequential")
    after = stats(server.url, "fanout_target")
    assert after["inference_count"] - before["inference_count"] == 4
    assert after["execution_count"] - before["execution_count"] == 4


@pytest.mark.parametrize("model", FANOUT_GUESTS)
def test_a_parallel_call_to_a_model_not_allowed_fails_clearly(server, model):
    with pytest.raises(InferenceServerException) as ei:
        fanout(server.url, model, np.ones(16, dtype=np.float32), target="classifier")
    msg = ei.value.message()
    assert f"model '{model}' is not allowed to call model 'classifier'" in msg, msg
    # The guest keeps serving.
    np.testing.assert_allclose(fanout(server.url, model, np.ones(16, dtype=np.float32)), 8.0)


@pytest.mark.parametrize("model", FANOUT_GUESTS)
def test_an_error_of_a_called_model_reaches_the_client(server, model):
    # `simple` (allowed) takes INT32: the four parallel calls with FP32 inputs fail in `simple`'s
    # own validation, and that message comes back through the guest.
    with pytest.raises(InferenceServerException) as ei:
        fanout(server.url, model, np.ones(16, dtype=np.float32), target="simple")
    msg = ei.value.message()
    assert "data-type is 'FP32', but model 'simple' expects 'INT32'" in msg, msg


def test_the_configured_target_is_called(server_factory, repo):
    # Config parameter `fanout_target` picks the model: here add_sub, which then counts the calls.
    copy_model(repo, "add_sub")
    for guest in FANOUT_GUESTS:
        config = (quickstart_repo() / guest / "config.pbtxt").read_text().replace(
            'string_value: "fanout_target" }', 'string_value: "add_sub" }')
        copy_model(repo, guest, config=config)
    srv = server_factory(repo)
    x = np.arange(16, dtype=np.float32)
    for n, guest in enumerate(FANOUT_GUESTS, start=1):
        np.testing.assert_allclose(fanout(srv.url, guest, x), 8 * x)
        assert stats(srv.url, "add_sub")["inference_count"] == 4 * n


def text_input(lib, texts: np.ndarray):
    i = lib.InferInput("TEXT", list(texts.shape), "BYTES")
    i.set_data_from_numpy(texts)
    return i


@pytest.mark.parametrize("door", ["http", "grpc"])
def test_text_pipeline_bls_equals_calling_the_steps_one_by_one(server, door):
    lib = httpclient if door == "http" else grpcclient
    c = lib.InferenceServerClient(server.url if door == "http" else f"127.0.0.1:{server.grpc_port}")
    texts = np.array([[b"hello world"], [b"The quick brown fox jumps over"], [b""], [b"a b c d"]],
                     dtype=object)

    def tensor(name, value, datatype):
        i = lib.InferInput(name, list(value.shape), datatype)
        i.set_data_from_numpy(value)
        return i

    tokens = c.infer("tokenizer", [text_input(lib, texts)])
    scores = c.infer("text_scorer", [tensor("INPUT_IDS", tokens.as_numpy("INPUT_IDS"), "INT64"),
                                     tensor("ATTENTION_MASK", tokens.as_numpy("ATTENTION_MASK"), "INT64")])
    labels = c.infer("score_label", [tensor("TOKEN_COUNT", scores.as_numpy("TOKEN_COUNT"), "FP32"),
                                     tensor("ID_SUM", scores.as_numpy("ID_SUM"), "INT64")])
    bls = c.infer("text_pipeline_bls", [text_input(lib, texts)])
    np.testing.assert_array_equal(bls.as_numpy("TOKEN_COUNT"), scores.as_numpy("TOKEN_COUNT"))
    np.testing.assert_array_equal(bls.as_numpy("MEAN_ID"), labels.as_numpy("MEAN_ID"))
    np.testing.assert_array_equal(bls.as_numpy("LABEL"), labels.as_numpy("LABEL"))
    assert bls.as_numpy("MEAN_ID").shape == (4, 1) and bls.as_numpy("LABEL").shape == (4, 1)
    assert [row[0] for row in bls.as_numpy("LABEL")] == [b"short", b"long", b"empty", b"short"]


def test_text_pipeline_bls_equals_the_ensemble_and_the_steps(server):
    texts = np.array([[b"hello world"], [b"The quick brown fox jumps"], [b""]], dtype=object)
    c = httpclient.InferenceServerClient(server.url)

    def run(model):
        i = httpclient.InferInput("TEXT", list(texts.shape), "BYTES")
        i.set_data_from_numpy(texts)
        return c.infer(model, [i])

    bls, ens = run("text_pipeline_bls"), run("text_pipeline")
    for name in ("TOKEN_COUNT", "MEAN_ID", "LABEL"):
        np.testing.assert_array_equal(bls.as_numpy(name), ens.as_numpy(name))
    assert [row[0] for row in bls.as_numpy("LABEL")] == [b"short", b"long", b"empty"]
