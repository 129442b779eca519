"""Request tracing in OpenTelemetry mode (`--trace-config mode=opentelemetry`): spans exported as
OTLP/HTTP protobuf to a receiver here that decodes them with the official `opentelemetry-proto`
package, with Triton's span structure (InferRequest -> model -> compute; composing models and BLS
calls below their caller's model span), a client's `traceparent` made by the official W3C
propagator honoured over HTTP and gRPC, and a stalled or dead collector that never slows a request
and whose dropped spans are counted."""

from __future__ import annotations

import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tessera_testlib import REPO_ROOT, copy_model, simple_infer_inputs, wait_model_ready, wait_until

pytestmark = pytest.mark.timeout(300)


class OtlpReceiver:
    """An OTLP/HTTP collector on 127.0.0.1: keeps every span it is sent; `stall_s` makes each
    export wait that long before its answer."""

    def __init__(self, stall_s: float = 0.0):
        self.spans = []
        self.content_types = set()
        self.stall_s = stall_s
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                export = ExportTraceServiceRequest()
                export.ParseFromString(body)
                with receiver.lock:
                    receiver.content_types.add(self.headers["Content-Type"])
                    for resource_spans in export.resource_spans:
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend((resource_spans.resource, s) for s in scope_spans.spans)
                time.sleep(receiver.stall_s)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def named(self, name: str) -> list:
        with self.lock:
            return [span for _, span in self.spans if span.name == name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = OtlpReceiver()
    yield r
    r.close()


def otel_server(server_factory, repo, url: str, *flags: str, models=("simple",)):
    for model in models:
        copy_model(repo, model)
    args = []
    for flag in ("mode=opentelemetry", "level=TIMESTAMPS", f"opentelemetry,url={url}",
                 "opentelemetry,bsp_schedule_delay=50", *flags):
        args += ["--trace-config", flag]
    srv = server_factory(repo, args)
    for model in models:
        wait_model_ready(srv, model)
    return srv


def attributes(span) -> dict:
    return {a.key: (a.value.string_value if a.value.HasField("string_value") else a.value.int_value)
            for a in span.attributes}


def events(span) -> list[str]:
    return [e.name for e in span.events]


def test_spans_have_tritons_structure_for_requests_ensembles_and_bls(server_factory, repo, receiver):
    models = ("simple", "text_pipeline", "tokenizer", "text_scorer", "score_label", "bls_add_sub", "add_sub")
    srv = otel_server(server_factory, repo, receiver.url, "rate=1", "opentelemetry,resource=deployment=test",
                      models=models)
    client = httpclient.InferenceServerClient(srv.url)
    client.infer("simple", simple_infer_inputs(httpclient), request_id="r-1")
    text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"a good day"]], dtype=object))
    client.infer("text_pipeline", [text])
    x = np.ones((1, 16), dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    for i in inputs:
        i.set_data_from_numpy(x)
    client.infer("bls_add_sub", inputs)
    wait_until(lambda: len(receiver.named("add_sub")) == 1 and len(receiver.named("InferRequest")) == 3, 30,
               "the spans of three requests reached the collector", srv)
    assert receiver.content_types == {"application/x-protobuf"}

    [simple] = receiver.named("simple")
    roots = {r.span_id: r for r in receiver.named("InferRequest")}
    root = roots[simple.parent_span_id]
    assert root.parent_span_id == b"" and root.trace_id == simple.trace_id
    assert events(root)[:2] == ["HTTP_RECV_START", "HTTP_RECV_END"] and events(root)[-1] == "HTTP_SEND_END"
    assert events(simple) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert attributes(simple) == {"triton.model_name": "simple", "triton.model_version": 1, "triton.trace_id":
                                  attributes(simple)["triton.trace_id"], "triton.trace_parent_id": 0,
                                  "triton.request_id": "r-1"}
    compute = [c for c in receiver.named("compute") if c.parent_span_id == simple.span_id]
    assert len(compute) == 1 and events(compute[0]) == ["COMPUTE_START", "COMPUTE_INPUT_END",
                                                        "COMPUTE_OUTPUT_START", "COMPUTE_END"]
    assert root.start_time_unix_nano <= simple.start_time_unix_nano <= compute[0].start_time_unix_nano
    assert compute[0].end_time_unix_nano <= simple.end_time_unix_nano <= root.end_time_unix_nano
    resource = {a.key: a.value.string_value for a in receiver.spans[0][0].attributes}
    assert resource["service.name"] == "tessera" and resource["deployment"] == "test"

    [pipeline] = receiver.named("text_pipeline")
    for step in ("tokenizer", "text_scorer", "score_label"):
        [span] = receiver.named(step)
        assert (span.parent_span_id, span.trace_id) == (pipeline.span_id, pipeline.trace_id), step
        assert attributes(span)["triton.trace_parent_id"] == attributes(pipeline)["triton.trace_id"]
    [guest] = receiver.named("bls_add_sub")
    [called] = receiver.named("add_sub")
    assert (called.parent_span_id, called.trace_id) == (guest.span_id, guest.trace_id), "BLS call not under its caller"


def test_a_guests_own_spans_hang_under_its_compute_span(server_factory, repo, receiver):
    """The Rust telemetry probe (example-guests/telemetry_probe) opens `rust-work` and, under it,
    `rust-inner` with an event `step` carrying an attribute: exported as INTERNAL spans."""
    probe = REPO_ROOT / "target" / "guests" / "telemetry_probe" / "model.wasm"
    (repo / "probe" / "1").mkdir(parents=True)
    shutil.copy(probe, repo / "probe" / "1" / "model.wasm")
    (repo / "probe" / "config.pbtxt").write_text(
        'name: "probe"\nbackend: "wasm"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
    srv = otel_server(server_factory, repo, receiver.url, "rate=1", models=())
    wait_model_ready(srv, "probe")
    inp = httpclient.InferInput("INPUT0", [2], "FP32")
    inp.set_data_from_numpy(np.array([1, 2], dtype=np.float32))
    httpclient.InferenceServerClient(srv.url).infer("probe", [inp])
    wait_until(lambda: len(receiver.named("rust-inner")) == 1, 30, "the guest's spans arrived", srv)
    [model] = receiver.named("probe")
    [compute] = [c for c in receiver.named("compute") if c.parent_span_id == model.span_id]
    [work], [inner] = receiver.named("rust-work"), receiver.named("rust-inner")
    assert work.parent_span_id == compute.span_id and inner.parent_span_id == work.span_id
    assert work.trace_id == inner.trace_id == model.trace_id
    assert work.kind == inner.kind == 1  # SPAN_KIND_INTERNAL
    assert attributes(work) == {"lang": "rust"}
    [step] = inner.events
    assert step.name == "step" and {a.key: a.value.int_value for a in step.attributes} == {"n": 1}
    assert compute.start_time_unix_nano <= work.start_time_unix_nano <= inner.start_time_unix_nano
    assert inner.end_time_unix_nano <= work.end_time_unix_nano <= compute.end_time_unix_nano


def client_context() -> tuple[dict, object]:
    """A traceparent from the official SDK and W3C propagator, as an instrumented client sends it."""
    span = TracerProvider().get_tracer("client").start_span("client-call")
    from opentelemetry import trace as otel_trace
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=otel_trace.set_span_in_context(span))
    return carrier, span.get_span_context()


def test_a_clients_traceparent_is_honoured_over_both_doors_whatever_the_rate(server_factory, repo, receiver):
    # rate 1000: without a traceparent, these requests would not be traced.
    srv = otel_server(server_factory, repo, receiver.url)
    http_headers, http_context = client_context()
    httpclient.InferenceServerClient(srv.url).infer("simple", simple_infer_inputs(httpclient), headers=http_headers)
    grpc_headers, grpc_context = client_context()
    grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}").infer("simple", simple_infer_inputs(grpcclient),
                                                                         headers=grpc_headers)
    httpclient.InferenceServerClient(srv.url).infer("simple", simple_infer_inputs(httpclient))
    wait_until(lambda: len(receiver.named("InferRequest")) == 2, 30, "both requests' spans arrived", srv)
    for context in (http_context, grpc_context):
        [root] = [r for r in receiver.named("InferRequest") if r.trace_id == context.trace_id.to_bytes(16, "big")]
        assert root.parent_span_id == context.span_id.to_bytes(8, "big"), "the client's span is not the parent"
    time.sleep(0.3)  # a third, untraced request would have been exported by now
    assert len(receiver.named("InferRequest")) == 2


def dropped(srv) -> float:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    [line] = [ln for ln in text.splitlines() if ln.startswith("tessera_trace_spans_dropped_total ")]
    return float(line.split()[1])


def test_a_stalled_or_dead_collector_never_slows_a_request_and_drops_are_counted(server_factory, repo, tmp_path):
    stalled = OtlpReceiver(stall_s=5.0)
    try:
        srv = otel_server(server_factory, repo / "a", stalled.url, "rate=1", "opentelemetry,bsp_max_queue_size=4",
                          "opentelemetry,bsp_max_export_batch_size=2")
        client = httpclient.InferenceServerClient(srv.url)
        slowest = 0.0
        for _ in range(40):
            started = time.monotonic()
            client.infer("simple", simple_infer_inputs(httpclient))
            slowest = max(slowest, time.monotonic() - started)
        assert slowest < 1.0, f"a request waited {slowest:.2f}s on the stalled collector"
        wait_until(lambda: dropped(srv) > 0, 30, "the spans the full queue refused are counted", srv)
    finally:
        stalled.close()

    (repo / "b").mkdir()
    dead = f"127.0.0.1:{stalled.server.server_address[1]}/v1/traces"  # closed above: nothing listens
    srv = otel_server(server_factory, repo / "b", dead, "rate=1")
    client = httpclient.InferenceServerClient(srv.url)
    for _ in range(5):
        client.infer("simple", simple_infer_inputs(httpclient))
    wait_until(lambda: dropped(srv) >= 5 * 3, 30, "the spans the dead collector never took are counted", srv)
