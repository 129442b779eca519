"""Tessera through NVIDIA's own Python client, tritonclient.http (sync, gevent async, asyncio).

Models (model-repos/quickstart): simple (INT32) and add_sub (FP32): OUTPUT0 = INPUT0 + INPUT1,
OUTPUT1 = INPUT0 - INPUT1, [-1, 16], max_batch_size 8; classifier: FP32 [-1, 4] -> [-1, 5] logits
[x0, x1, x2, x3, 0.5] with labels cat, dog, bird, fish, horse.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import QUICKSTART, simple_json_request

DTYPES = {"simple": (np.int32, "INT32"), "add_sub": (np.float32, "FP32")}
LABELS = ["cat", "dog", "bird", "fish", "horse"]


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    yield c
    c.close()


def make_data(model: str, batch: int = 1, seed: int = 0):
    dtype, _ = DTYPES[model]
    rng = np.random.default_rng(seed)
    if dtype is np.int32:
        a = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
        b = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    else:
        a = rng.standard_normal((batch, 16)).astype(np.float32)
        b = rng.standard_normal((batch, 16)).astype(np.float32)
    return a, b


def make_inputs(model: str, a, b, binary=(True, True)):
    _, tname = DTYPES[model]
    i0 = httpclient.InferInput("INPUT0", list(a.shape), tname)
    i0.set_data_from_numpy(a, binary_data=binary[0])
    i1 = httpclient.InferInput("INPUT1", list(b.shape), tname)
    i1.set_data_from_numpy(b, binary_data=binary[1])
    return [i0, i1]


def check_add_sub(result, model: str, a, b, outputs=("OUTPUT0", "OUTPUT1")):
    dtype, _ = DTYPES[model]
    expect = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    for name in outputs:
        got = result.as_numpy(name)
        assert got is not None, f"{name} missing from the response: {result.get_response()}"
        assert got.dtype == dtype, f"{name} dtype {got.dtype}, expected {dtype}"
        assert got.shape == a.shape, f"{name} shape {got.shape}, expected {a.shape}"
        if dtype is np.float32:
            np.testing.assert_allclose(got, expect[name], rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, expect[name])


# ---------------------------------------------------------------------------------------------
# Inference
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["simple", "add_sub"])
@pytest.mark.parametrize(
    "in_binary,out_binary",
    [(False, False), (True, True), (True, False), (False, True)],
    ids=["json-in-json-out", "binary-in-binary-out", "binary-in-json-out", "json-in-binary-out"],
)
def test_infer_json_and_binary(client, model, in_binary, out_binary):
    a, b = make_data(model)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=out_binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer(model, make_inputs(model, a, b, (in_binary, in_binary)), outputs=outputs)
    check_add_sub(result, model, a, b)
    resp = result.get_response()
    assert resp["model_name"] == model
    assert resp["model_version"] == "1"
    for out in resp["outputs"]:
        assert out["datatype"] == DTYPES[model][1]
        assert out["shape"] == [1, 16]
        if out_binary:
            assert "data" not in out
            assert out["parameters"]["binary_data_size"] == 16 * 4
        else:
            assert "data" in out


@pytest.mark.parametrize("model", ["simple", "add_sub"])
def test_infer_mixed_binary_and_json_inputs(client, model):
    a, b = make_data(model, seed=1)
    result = client.infer(model, make_inputs(model, a, b, (True, False)))
    check_add_sub(result, model, a, b)


def test_infer_without_requested_outputs_returns_all(client):
    # tritonclient then sets the request parameter binary_data_output=true.
    a, b = make_data("simple", seed=2)
    result = client.infer("simple", make_inputs("simple", a, b))
    check_add_sub(result, "simple", a, b)
    names = sorted(o["name"] for o in result.get_response()["outputs"])
    assert names == ["OUTPUT0", "OUTPUT1"]


@pytest.mark.parametrize("binary", [False, True])
def test_requested_output_subset(client, binary):
    a, b = make_data("add_sub", seed=3)
    result = client.infer(
        "add_sub", make_inputs("add_sub", a, b),
        outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)],
    )
    names = [o["name"] for o in result.get_response()["outputs"]]
    assert names == ["OUTPUT1"], f"asked only for OUTPUT1, got {names}"
    assert result.as_numpy("OUTPUT0") is None
    check_add_sub(result, "add_sub", a, b, outputs=("OUTPUT1",))


def test_request_id_is_echoed(client):
    a, b = make_data("simple")
    result = client.infer("simple", make_inputs("simple", a, b), request_id="my-request-42")
    assert result.get_response().get("id") == "my-request-42"
    result = client.infer("simple", make_inputs("simple", a, b))
    assert "id" not in result.get_response() or result.get_response()["id"] == ""


def test_explicit_model_version(client):
    a, b = make_data("simple", seed=4)
    result = client.infer("simple", make_inputs("simple", a, b), model_version="1")
    check_add_sub(result, "simple", a, b)
    assert result.get_response()["model_version"] == "1"


def test_batch_of_max_batch_size_works(client):
    a, b = make_data("add_sub", batch=8, seed=5)
    result = client.infer("add_sub", make_inputs("add_sub", a, b))
    check_add_sub(result, "add_sub", a, b)
    assert result.as_numpy("OUTPUT0").shape == (8, 16)


def test_batch_above_max_batch_size_fails_clearly(client):
    a, b = make_data("add_sub", batch=9, seed=6)
    with pytest.raises(InferenceServerException) as ei:
        client.infer("add_sub", make_inputs("add_sub", a, b))
    msg = ei.value.message()
    assert ei.value.status() == "400", f"status {ei.value.status()}: {msg}"
    assert "batch" in msg.lower() and "8" in msg, f"message should name the batch limit 8: {msg!r}"
    assert "add_sub" in msg, f"message should name the model: {msg!r}"
    # and the server still serves a batch within the limit
    a, b = make_data("add_sub", batch=2, seed=7)
    check_add_sub(client.infer("add_sub", make_inputs("add_sub", a, b)), "add_sub", a, b)


def test_batch_sizes_one_to_eight(client):
    for batch in range(1, 9):
        a, b = make_data("simple", batch=batch, seed=batch)
        check_add_sub(client.infer("simple", make_inputs("simple", a, b)), "simple", a, b)


def test_special_float_values_round_trip(client):
    a = np.array([[0.0, -0.0, 1.5, -2.25, 1e30, -1e-30, np.inf, -np.inf] * 2], dtype=np.float32)
    b = np.zeros((1, 16), dtype=np.float32)
    result = client.infer("add_sub", make_inputs("add_sub", a, b, (True, True)))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a)


def test_int32_extremes_over_json(client):
    a = np.array([[2**31 - 1, -(2**31), 0, 1] * 4], dtype=np.int32)
    b = np.zeros((1, 16), dtype=np.int32)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
    result = client.infer("simple", make_inputs("simple", a, b, (False, False)), outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a)


# ---------------------------------------------------------------------------------------------
# Classification extension
# ---------------------------------------------------------------------------------------------

def parse_class(entry) -> tuple[float, int, str]:
    s = entry.decode() if isinstance(entry, bytes) else str(entry)
    score, index, label = s.split(":", 2)
    return float(score), int(index), label


def test_labels_file_matches_expectation():
    assert (QUICKSTART / "classifier" / "labels.txt").read_text().split() == LABELS


@pytest.mark.parametrize("binary", [False, True])
def test_classification_top3(client, binary):
    x = np.array([[4, 3, 2, 1], [-1, 7, 2, 0]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(
        "classifier", [inp],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=3)],
    )
    out = result.as_numpy("OUTPUT0")
    assert out is not None
    assert out.shape == (2, 3), f"classification output shape {out.shape}, expected (2, 3)"
    meta = [o for o in result.get_response()["outputs"] if o["name"] == "OUTPUT0"][0]
    assert meta["datatype"] == "BYTES"
    rows = [[parse_class(e) for e in row] for row in out]
    # logits are [x0, x1, x2, x3, 0.5]
    assert [(i, l) for _, i, l in rows[0]] == [(0, "cat"), (1, "dog"), (2, "bird")]
    assert [s for s, _, _ in rows[0]] == pytest.approx([4.0, 3.0, 2.0])
    assert [(i, l) for _, i, l in rows[1]] == [(1, "dog"), (2, "bird"), (4, "horse")]
    assert [s for s, _, _ in rows[1]] == pytest.approx([7.0, 2.0, 0.5])


def test_classification_consistent_with_raw_logits(client):
    x = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    raw = client.infer("classifier", [inp]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(raw, [[0.1, 0.2, 0.3, 0.4, 0.5]], rtol=1e-6)
    cls = client.infer(
        "classifier", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=5)]
    ).as_numpy("OUTPUT0")
    parsed = [parse_class(e) for e in cls[0]]
    order = list(np.argsort(-raw[0], kind="stable"))
    assert [i for _, i, _ in parsed] == order
    assert [l for _, _, l in parsed] == [LABELS[i] for i in order]
    assert [s for s, _, _ in parsed] == pytest.approx([float(raw[0][i]) for i in order], rel=1e-5)


# ---------------------------------------------------------------------------------------------
# Compression
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("req_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("resp_alg", [None, "gzip", "deflate"])
def test_compression(client, req_alg, resp_alg):
    a, b = make_data("add_sub", batch=4, seed=8)
    result = client.infer(
        "add_sub", make_inputs("add_sub", a, b),
        request_compression_algorithm=req_alg, response_compression_algorithm=resp_alg,
    )
    check_add_sub(result, "add_sub", a, b)


def test_response_is_really_gzip_compressed(server):
    """Accept-Encoding: gzip must yield a gzip-encoded body (not just be tolerated)."""
    body = json.dumps(simple_json_request(batch=8)).encode()
    r = requests.post(
        server.http("/v2/models/simple/infer"), data=body,
        headers={"Accept-Encoding": "gzip", "Content-Type": "application/json"},
        stream=True, timeout=30,
    )
    assert r.status_code == 200
    assert r.headers.get("Content-Encoding") == "gzip", f"headers: {dict(r.headers)}"
    raw = r.raw.read(decode_content=False)
    doc = json.loads(gzip.decompress(raw))
    assert {o["name"] for o in doc["outputs"]} == {"OUTPUT0", "OUTPUT1"}


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/v2", None),
    ("GET", "/v2/models/simple", None),
    ("GET", "/v2/models/simple/config", None),
    ("GET", "/v2/models/simple/stats", None),
    ("POST", "/v2/repository/index", b"{}"),
])
def test_non_infer_responses_are_not_compressed(server, method, path, body):
    """tritonclient.http.aio uses aiohttp with auto_decompress=False, yet aiohttp sends
    'Accept-Encoding: gzip, deflate' on every request; the client only decompresses *infer*
    responses itself. Triton compresses only infer responses, so must a drop-in replacement."""
    r = requests.request(method, server.http(path), data=body, stream=True, timeout=10,
                         headers={"Accept-Encoding": "gzip, deflate"})
    assert r.status_code == 200
    assert r.headers.get("Content-Encoding") in (None, "identity"), (
        f"{method} {path} answered Content-Encoding {r.headers.get('Content-Encoding')!r}")
    json.loads(r.raw.read(decode_content=False))


def test_gzip_request_body_raw(server):
    body = gzip.compress(json.dumps(simple_json_request()).encode())
    r = requests.post(server.http("/v2/models/simple/infer"), data=body,
                      headers={"Content-Encoding": "gzip"}, timeout=30)
    assert r.status_code == 200, r.text
    outs = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert outs["OUTPUT0"] == [i + 1 for i in range(16)]


# ---------------------------------------------------------------------------------------------
# Health and metadata
# ---------------------------------------------------------------------------------------------

def test_health(client):
    assert client.is_server_live()
    assert client.is_server_ready()


def test_model_ready(client):
    for m in ("simple", "add_sub", "classifier"):
        assert client.is_model_ready(m), m
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "2")
    assert not client.is_model_ready("no_such_model")


def test_server_metadata(client):
    meta = client.get_server_metadata()
    assert meta["name"] == "tessera"
    assert isinstance(meta.get("version"), str) and meta["version"]
    assert isinstance(meta.get("extensions"), list)
    for ext in ("classification", "model_repository", "statistics", "binary_tensor_data"):
        assert ext in meta["extensions"], f"extension {ext!r} not advertised: {meta['extensions']}"


@pytest.mark.parametrize("model", ["simple", "add_sub"])
def test_model_metadata(client, model):
    meta = client.get_model_metadata(model)
    dt = DTYPES[model][1]
    assert meta["name"] == model
    assert "1" in meta["versions"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert sorted(meta["inputs"], key=lambda t: t["name"]) == [
        {"name": "INPUT0", "datatype": dt, "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": dt, "shape": [-1, 16]},
    ]
    assert sorted(meta["outputs"], key=lambda t: t["name"]) == [
        {"name": "OUTPUT0", "datatype": dt, "shape": [-1, 16]},
        {"name": "OUTPUT1", "datatype": dt, "shape": [-1, 16]},
    ]
    assert client.get_model_metadata(model, model_version="1")["name"] == model


def test_model_metadata_unknown_model(client):
    with pytest.raises(InferenceServerException) as ei:
        client.get_model_metadata("no_such_model")
    assert "no_such_model" in ei.value.message()


def test_model_config(client):
    cfg = client.get_model_config("simple")
    assert cfg["name"] == "simple"
    assert cfg["max_batch_size"] == 8
    assert cfg.get("platform") == "onnxruntime_onnx" or cfg.get("backend") == "onnxruntime"
    ins = {t["name"]: t for t in cfg["input"]}
    assert set(ins) == {"INPUT0", "INPUT1"}
    assert ins["INPUT0"]["data_type"] == "TYPE_INT32"
    assert ins["INPUT0"]["dims"] == [16]
    outs = {t["name"]: t for t in cfg["output"]}
    assert set(outs) == {"OUTPUT0", "OUTPUT1"}
    assert outs["OUTPUT1"]["data_type"] == "TYPE_INT32"
    cls = client.get_model_config("classifier")
    assert cls["output"][0]["label_filename"] == "labels.txt"


def _success(stats: dict, model: str) -> tuple[int, int]:
    entries = [s for s in stats["model_stats"] if s["name"] == model and s["version"] == "1"]
    assert len(entries) == 1, stats
    e = entries[0]
    return int(e["inference_stats"]["success"]["count"]), int(e["inference_count"])


def test_inference_statistics(client):
    before_ok, before_inf = _success(client.get_inference_statistics("simple"), "simple")
    a, b = make_data("simple", batch=2)
    for _ in range(3):
        client.infer("simple", make_inputs("simple", a, b))
    after = client.get_inference_statistics("simple")
    after_ok, after_inf = _success(after, "simple")
    assert after_ok == before_ok + 3, f"success count {before_ok} -> {after_ok}"
    assert after_inf == before_inf + 6, f"inference_count {before_inf} -> {after_inf} (3 requests of batch 2)"
    e = [s for s in after["model_stats"] if s["name"] == "simple"][0]
    assert int(e["inference_stats"]["success"]["ns"]) > 0
    assert int(e["last_inference"]) > 0
    # all-models form
    everything = client.get_inference_statistics()
    assert {"simple", "add_sub", "classifier"} <= {s["name"] for s in everything["model_stats"]}


# ---------------------------------------------------------------------------------------------
# Async clients
# ---------------------------------------------------------------------------------------------

def test_async_infer_gevent(server):
    c = httpclient.InferenceServerClient(server.url, concurrency=4, network_timeout=60.0)
    try:
        pending = []
        for i in range(8):
            a, b = make_data("simple", batch=1 + i % 3, seed=100 + i)
            pending.append((c.async_infer("simple", make_inputs("simple", a, b), request_id=f"r{i}"), a, b, i))
        for handle, a, b, i in pending:
            result = handle.get_result(timeout=60)
            check_add_sub(result, "simple", a, b)
            assert result.get_response()["id"] == f"r{i}"
    finally:
        c.close()


def test_aio_client(server):
    # NB: aiohttp sends "Accept-Encoding: gzip, deflate" by default and the aio client does not
    # auto-decompress: metadata responses must come back uncompressed (see test above).
    async def main():
        async with aiohttpclient.InferenceServerClient(server.url) as c:
            assert await c.is_server_live()
            assert await c.is_server_ready()
            assert await c.is_model_ready("add_sub")
            meta = await c.get_server_metadata()
            assert meta["name"] == "tessera"
            cases = [make_data("add_sub", batch=1 + i % 4, seed=200 + i) for i in range(6)]

            async def one(i, a, b):
                inputs = []
                for name, arr in (("INPUT0", a), ("INPUT1", b)):
                    inp = aiohttpclient.InferInput(name, list(arr.shape), "FP32")
                    inp.set_data_from_numpy(arr, binary_data=bool(i % 2))
                    inputs.append(inp)
                return await c.infer("add_sub", inputs, request_id=f"aio-{i}")

            results = await asyncio.gather(*(one(i, a, b) for i, (a, b) in enumerate(cases)))
            for i, ((a, b), result) in enumerate(zip(cases, results)):
                check_add_sub(result, "add_sub", a, b)
                assert result.get_response()["id"] == f"aio-{i}"
            with pytest.raises(InferenceServerException) as ei:
                a, b = cases[0]
                inp = aiohttpclient.InferInput("INPUT0", list(a.shape), "FP32")
                inp.set_data_from_numpy(a)
                await c.infer("no_such_model", [inp])
            assert "no_such_model" in ei.value.message()

    asyncio.run(main())
