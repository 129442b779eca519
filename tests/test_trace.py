"""Request tracing in Triton's mode (`--trace-config triton,file=...`): the trace file Tessera
writes is read by Triton's own trace summary tool (tests/third_party/triton_server), over HTTP and
gRPC, with ensembles' composing models and guests' BLS calls as child traces, tensors at level
TENSORS, one file per `log-frequency` traces, and the trace-setting API changing what is traced
while the server runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tessera_testlib import SIMPLE_IN0, SIMPLE_IN1, copy_model, simple_infer_inputs, wait_model_ready

TRACE_SUMMARY = Path(__file__).resolve().parent / "third_party" / "triton_server" / "qa" / "common" / "trace_summary.py"

pytestmark = pytest.mark.timeout(300)


def add_sub_inputs(lib, x: np.ndarray):
    inputs = [lib.InferInput("INPUT0", [1, 16], "FP32"), lib.InferInput("INPUT1", [1, 16], "FP32")]
    for i in inputs:
        i.set_data_from_numpy(x)
    return inputs


def traced_server(server_factory, repo: Path, trace_file: Path, *flags: str, models=("simple",)):
    for model in models:
        copy_model(repo, model)
    args = ["--trace-config", f"triton,file={trace_file}"]
    for flag in flags:
        args += ["--trace-config", flag]
    srv = server_factory(repo, args)
    for model in models:
        wait_model_ready(srv, model)
    return srv


def traces(path: Path) -> dict[int, dict]:
    """The file's objects merged by id, as Triton's summary tool merges them."""
    merged: dict[int, dict] = {}
    for obj in json.loads(path.read_text()):
        entry = merged.setdefault(obj["id"], {"timestamps": [], "tensors": []})
        for key in ("model_name", "model_version", "parent_id", "request_id"):
            if key in obj:
                entry[key] = obj[key]
        entry["timestamps"] += [(t["name"], t["ns"]) for t in obj.get("timestamps", [])]
        if "activity" in obj:
            entry["tensors"].append((obj["activity"], obj["tensor"]))
    return merged


def names(trace: dict) -> list[str]:
    return [name for name, _ in trace["timestamps"]]


def summary(*paths: Path) -> str:
    done = subprocess.run([sys.executable, str(TRACE_SUMMARY), *map(str, paths)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"Triton's trace_summary.py failed:\n{done.stderr}\n{done.stdout}"
    return done.stdout


def test_triton_summary_reads_requests_from_both_doors_ensembles_and_bls(server_factory, repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    models = ("simple", "text_pipeline", "tokenizer", "text_scorer", "score_label", "bls_add_sub", "add_sub")
    srv = traced_server(server_factory, repo, trace_file, "level=TIMESTAMPS", "rate=1", models=models)
    http = httpclient.InferenceServerClient(srv.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    http.infer("simple", simple_infer_inputs(httpclient), request_id="from-http")
    grpc.infer("simple", simple_infer_inputs(grpcclient), request_id="from-grpc")
    text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"a good day"]], dtype=object))
    http.infer("text_pipeline", [text])
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    bls = http.infer("bls_add_sub", add_sub_inputs(httpclient, x))
    np.testing.assert_array_equal(bls.as_numpy("OUTPUT0"), x + x)
    srv.stop_and_check()

    out = summary(trace_file)
    for model in ("simple", "text_pipeline", "tokenizer", "text_scorer", "score_label", "bls_add_sub", "add_sub"):
        assert f"Summary for {model} (1)" in out, out
    # The tool sums up HTTP and gRPC apart: simple once under each.
    assert out.count("Summary for simple (1): trace count = 1") == 2, out
    assert "HTTP infer request (avg)" in out and "GRPC infer request (avg)" in out, out

    by_id = traces(trace_file)
    top = {t["request_id"]: t for t in by_id.values() if t.get("request_id")}
    assert names(top["from-http"]) == ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START",
                                       "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END",
                                       "REQUEST_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
    assert names(top["from-grpc"])[:2] == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"]
    for trace in by_id.values():
        stamps = [ns for _, ns in trace["timestamps"]]
        assert stamps == sorted(stamps), f"trace {trace} goes back in time"

    def one(model: str) -> tuple[int, dict]:
        [(trace_id, trace)] = [(i, t) for i, t in by_id.items() if t.get("model_name") == model]
        return trace_id, trace

    pipeline_id, pipeline = one("text_pipeline")
    assert "QUEUE_START" not in names(pipeline), "an ensemble's own request queues nowhere"
    for step in ("tokenizer", "text_scorer", "score_label"):
        assert one(step)[1].get("parent_id") == pipeline_id, f"{step} is not a child of the ensemble's trace"
    guest_id, _ = one("bls_add_sub")
    assert one("add_sub")[1].get("parent_id") == guest_id, "the guest's BLS call is not a child of its trace"


def test_level_tensors_records_the_tensors_and_the_summary_shows_the_data_flow(server_factory, repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    srv = traced_server(server_factory, repo, trace_file, "level=TIMESTAMPS", "level=TENSORS", "rate=1")
    httpclient.InferenceServerClient(srv.url).infer("simple", simple_infer_inputs(httpclient))
    srv.stop_and_check()
    [trace] = traces(trace_file).values()
    seen = {(activity, tensor["name"]): tensor for activity, tensor in trace["tensors"]}
    queued = seen[("TENSOR_QUEUE_INPUT", "INPUT0")]
    assert queued == {"name": "INPUT0", "data": ",".join(map(str, SIMPLE_IN0)), "shape": "1,16", "dtype": "INT32"}
    assert ("TENSOR_BACKEND_INPUT", "INPUT1") in seen
    sums = [a + b for a, b in zip(SIMPLE_IN0, SIMPLE_IN1)]
    assert seen[("TENSOR_BACKEND_OUTPUT", "OUTPUT0")]["data"] == ",".join(map(str, sums))
    out = summary(trace_file)
    # The tool reads the values back into arrays and prints them.
    assert "Data Flow:" in out and "BACKEND_OUTPUT:" in out, out
    assert "OUTPUT1: [[-1  0  1  2" in out, out


def test_log_frequency_writes_a_complete_file_per_n_traces(server_factory, repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    srv = traced_server(server_factory, repo, trace_file, "level=TIMESTAMPS", "rate=1", "triton,log-frequency=2")
    client = httpclient.InferenceServerClient(srv.url)
    for _ in range(5):
        client.infer("simple", simple_infer_inputs(httpclient))
    srv.stop_and_check()
    files = sorted(tmp_path.glob("trace.json.*"))
    assert [f.name for f in files] == ["trace.json.0", "trace.json.1", "trace.json.2"], files
    assert [len(traces(f)) for f in files] == [2, 2, 1]
    assert "trace count = 2" in summary(files[0])


def test_the_setting_api_turns_tracing_on_per_model_and_counts_down(server_factory, repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    srv = traced_server(server_factory, repo, trace_file, models=("simple", "add_sub"))
    client = httpclient.InferenceServerClient(srv.url)
    x = np.ones((1, 16), dtype=np.float32)

    def drive():
        client.infer("simple", simple_infer_inputs(httpclient))
        client.infer("add_sub", add_sub_inputs(httpclient, x))

    drive()  # OFF: nothing traced
    settings = client.update_trace_settings("simple", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                                       "trace_count": "2"})
    assert settings["trace_level"] == ["TIMESTAMPS"] and settings["trace_count"] == "2", settings
    assert client.get_trace_settings()["trace_level"] == ["OFF"], "a model's setting changed the global one"
    for _ in range(3):
        drive()
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "2"})
    client.update_trace_settings("simple", {"trace_level": None, "trace_rate": None, "trace_count": None})
    assert client.get_trace_settings("simple")["trace_rate"] == "2", "a cleared model field kept its own value"
    for _ in range(2):
        drive()
    srv.stop_and_check()
    models = sorted(t.get("model_name") for t in traces(trace_file).values())
    # simple: its own 2 (count), then 1 of 2 under the global rate; add_sub: 1 of 2 under it.
    assert models == ["add_sub", "simple", "simple", "simple"], models
