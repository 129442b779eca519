"""A model's own telemetry is bounded in bytes, not only in count: a real
guest (tests/guests/telemetry_bounds/model.py, Triton python-backend code) asks for a metric name,
a label name, a label value, a description and a histogram's buckets past their bounds, holds
families and then 1 KiB-labelled series until it is refused, and per request opens 300 spans full
of 1 KiB attributes. All with the server's default bounds (docs/scheduling.md "A model's own
metrics", docs/server.md "A guest's own spans"):

- each refusal reaches the guest as Triton's TritonModelException, naming the setting, and is
  counted in tessera_custom_metric_refused_total{model,reason};
- what the model adds to /metrics stays within custom_bytes_per_model (1 MiB);
- what its spans add to one request's trace stays within guest_span_bytes (64 KiB), the rest
  counted in tessera_guest_span_items_dropped_total{model,reason}.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tessera_testlib import start_server, wait_model_ready, wait_until

pytestmark = pytest.mark.timeout(900)

GUEST = Path(__file__).resolve().parent / "guests" / "telemetry_bounds" / "model.py"
MODEL = "bounds"
MIB = 1 << 20
SPAN_BYTES = 64 << 10
CONFIG = f"""name: "{MODEL}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""


@pytest.fixture(scope="module")
def bounded(tmp_path_factory, tessera_binary):
    root = tmp_path_factory.mktemp("telemetry-bounds")
    version = root / "repo" / MODEL / "1"
    version.mkdir(parents=True)
    shutil.copy(GUEST, version / "model.py")
    (root / "repo" / MODEL / "config.pbtxt").write_text(CONFIG)
    traces = root / "traces"
    traces.mkdir()
    flags = ["--model-control-mode=explicit", f"--load-model={MODEL}",
             "--trace-config", f"triton,file={traces / 'trace.json'}", "--trace-config", "triton,log-frequency=1",
             "--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS"]
    srv = start_server(root / "logs", [root / "repo"], flags)
    try:
        wait_model_ready(srv, MODEL, deadline=600)
        yield srv, traces
    finally:
        srv.stop_and_check()


def metrics_text(srv) -> str:
    return requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=30).text


def samples(text: str, name: str) -> list:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def refusals(srv) -> dict[str, str]:
    """What the guest logged as refused, by what it asked for."""
    out = {}
    for line in srv.log_text().splitlines():
        if "bounds refused " in line:
            what, message = line.split("bounds refused ", 1)[1].split(": ", 1)
            out.setdefault(what.split(" after ")[0], message)
    return out


def test_each_metric_bound_refuses_the_guest_with_the_setting_named_and_counts_it(bounded):
    srv, _ = bounded
    assert "bounds: accepted" not in srv.log_text(), srv.log_text()[-3000:]
    refused = refusals(srv)
    expected = {
        "name": "the name 'nnnn",
        "description": "the description of 'bounds_described' is longer than 4096 bytes "
                       "(--metrics-config custom_description_bytes)",
        "label name": "(--metrics-config custom_name_bytes)",
        "label value": "Error when creating Metric: the value of label 'i' is longer than 1024 bytes "
                       "(--metrics-config custom_label_value_bytes)",
        "buckets": "65 buckets, more than 64 (--metrics-config custom_buckets_per_histogram)",
        "families": f"model '{MODEL}' already holds 100 metric families (--metrics-config custom_families_per_model)",
        "bytes": f"model '{MODEL}' would add more than {MIB} bytes to /metrics "
                 "(--metrics-config custom_bytes_per_model)",
    }
    for what, needle in expected.items():
        assert what in refused, (what, refused)
        assert needle in refused[what], (what, refused[what])
    # The refusal never echoes the megabyte it refused.
    assert max(len(m) for m in refused.values()) < 300, refused
    counted = {s.labels["reason"]: s.value for s in samples(metrics_text(srv), "tessera_custom_metric_refused_total")
               if s.labels["model"] == MODEL}
    assert counted == {"name_bytes": 2, "description_bytes": 1, "label_value_bytes": 3, "buckets": 1,
                       "families": 1, "model_bytes": 1}, counted


def test_what_a_model_adds_to_metrics_stays_within_its_bytes(bounded):
    srv, _ = bounded
    text = metrics_text(srv)
    lines = text.splitlines(keepends=True)
    own = [line for line in lines if f'model="{MODEL}"' in line and not line.startswith("tessera_")]
    series = [line for line in own if line.startswith("bounds_gauge{")]
    # It held as many 1 KiB-labelled series as fit, and no more: ~900 of them.
    assert 800 < len(series) < 1000, len(series)
    headers = [line for line in lines if line.startswith("# ") and " bounds_" in line]
    added = sum(len(line.encode()) for line in own + headers)
    # Charged, not written: each value at its widest (24 bytes; these gauges read 0) and the
    # HELP and TYPE lines of the families the guest holds without a series.
    assert MIB - 64 * 1024 < added <= MIB, added
    # The probe's page was 315 MB; the server's own metrics are a few kilobytes here.
    assert len(text.encode()) < MIB + 256 * 1024, len(text.encode())


def trace_objects(trace_dir: Path) -> list[dict]:
    objects = []
    for path in sorted(trace_dir.glob("trace.json.*")):
        objects.extend(json.loads(path.read_text()))
    return objects


def test_a_requests_spans_stay_within_their_bytes_and_the_rest_is_counted(bounded):
    srv, trace_dir = bounded
    client = httpclient.InferenceServerClient(srv.url)
    inp = httpclient.InferInput("INPUT0", [3], "FP32")
    inp.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    np.testing.assert_array_equal(client.infer(MODEL, [inp], timeout=300).as_numpy("OUTPUT0"), [1, 2, 3])
    client.close()

    def spans():
        objects = trace_objects(trace_dir)
        ids = {o["id"] for o in objects if o.get("model_name") == MODEL}
        return [o for o in objects if "span" in o and o["id"] in ids]

    wait_until(lambda: spans(), 30, f"{MODEL}'s spans in the trace file", srv)
    objects = spans()
    written = sum(len(json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode()) + 1 for o in objects)
    # Unbounded, the request wrote ~21 MB of spans (256 spans of ~82 KB).
    assert written <= SPAN_BYTES, written
    assert written > SPAN_BYTES // 2, "the bound is what the file writes, not a much smaller estimate"
    assert len(objects) < 300
    dropped_in_spans = sum(o["span"]["attributes"].get("tessera.dropped", 0) for o in objects)
    assert dropped_in_spans > 0
    counted = {s.labels["reason"]: s.value
               for s in samples(metrics_text(srv), "tessera_guest_span_items_dropped_total")
               if s.labels["model"] == MODEL}
    # Every attribute and event a span lost, and every span not recorded, is counted.
    assert counted["request_bytes"] == dropped_in_spans + (300 - len(objects)), (counted, dropped_in_spans)
