"""A model's own metrics and spans (WIT interface `telemetry`) from every SDK: the same probe in
Rust (example-guests/telemetry_probe), Python (pb_utils), JavaScript and C (tests/guests/
telemetry_*). Per request each counts itself in `probe_requests_total`, observes 2.5 in the
histogram `probe_value` and opens a span `<lang>-work` with a child `<lang>-inner` that has an
event `step`. /metrics is read with prometheus_client's parser, the spans from Triton's trace file.
(Triton's own python_backend custom_metrics example runs in test_triton_examples.py; OpenTelemetry
export of guest spans in test_trace_otel.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tessera_testlib import REPO_ROOT, GuestBuild, start_server, wait_model_ready, wait_until

pytestmark = pytest.mark.timeout(900)

TESTS = Path(__file__).resolve().parent
RUST_PROBE = REPO_ROOT / "target" / "guests" / "telemetry_probe" / "model.wasm"
LANGS = {"rust": "telemetry_rust", "python": "telemetry_py", "js": "telemetry_js", "c": "telemetry_c"}
IO = """max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, Path]:
    """The JavaScript and C probes built here, the Rust one by scripts/build-guests.sh."""
    if not RUST_PROBE.is_file():
        pytest.fail(f"{RUST_PROBE} is missing: run scripts/build-guests.sh (scripts/setup.sh runs it)", pytrace=False)
    out = tmp_path_factory.mktemp("telemetry-probes")
    js = GuestBuild(TESTS / "guests" / "telemetry_js", out / "telemetry_js.wasm", out)
    c = GuestBuild(TESTS / "guests" / "telemetry_c", out / "telemetry_c.wasm", out)
    return {"rust": RUST_PROBE, "js": js.wait(), "c": c.wait()}


def lay_out(repo: Path, probes: dict[str, Path], langs=LANGS) -> None:
    for lang, name in langs.items():
        version = repo / name / "1"
        version.mkdir(parents=True)
        if lang == "python":
            shutil.copy(TESTS / "guests" / "telemetry_py" / "model.py", version / "model.py")
            backend = "python"
        else:
            shutil.copy(probes[lang], version / "model.wasm")
            backend = "wasm"
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "{backend}"\n{IO}')


def infer(srv, model: str) -> None:
    client = httpclient.InferenceServerClient(srv.url)
    inp = httpclient.InferInput("INPUT0", [3], "FP32")
    inp.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    np.testing.assert_array_equal(client.infer(model, [inp]).as_numpy("OUTPUT0"), [1, 2, 3])
    client.close()


def scrape(srv) -> dict:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(family, name: str, **labels) -> float | None:
    for s in family.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def trace_objects(trace_dir: Path) -> list[dict]:
    objects = []
    for path in sorted(trace_dir.glob("trace.json.*")):
        objects.extend(json.loads(path.read_text()))
    return objects


@pytest.fixture(scope="module")
def telemetry_server(probes, tmp_path_factory, tessera_binary):
    root = tmp_path_factory.mktemp("telemetry")
    repo = root / "repo"
    lay_out(repo, probes)
    trace_dir = root / "traces"
    trace_dir.mkdir()
    flags = ["--model-control-mode=explicit", *[f"--load-model={m}" for m in LANGS.values()],
             "--trace-config", f"triton,file={trace_dir / 'trace.json'}", "--trace-config", "triton,log-frequency=1",
             "--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS"]
    srv = start_server(root / "logs", [repo], flags)
    try:
        for model in LANGS.values():
            wait_model_ready(srv, model, deadline=600)
        yield srv, trace_dir
    finally:
        srv.stop_and_check()


@pytest.mark.parametrize("lang", list(LANGS))
def test_a_guests_metrics_reach_metrics_labelled_with_its_model(telemetry_server, lang):
    srv, _ = telemetry_server
    model = LANGS[lang]
    for _ in range(2):
        infer(srv, model)
    families = scrape(srv)
    own = {"model": model, "version": "1", "lang": lang}
    # prometheus_client names a counter family without its `_total`.
    counter = families["probe_requests"]
    assert counter.type == "counter" and counter.documentation == "Requests the probe saw"
    assert sample(counter, "probe_requests_total", **own) == 2
    histogram = families["probe_value"]
    assert histogram.type == "histogram"
    assert sample(histogram, "probe_value_bucket", le="1", **own) == 0
    assert sample(histogram, "probe_value_bucket", le="10", **own) == 2
    assert sample(histogram, "probe_value_sum", **own) == 5.0


@pytest.mark.parametrize("lang", list(LANGS))
def test_a_guests_spans_nest_under_its_request_in_the_trace_file(telemetry_server, lang):
    srv, trace_dir = telemetry_server
    model = LANGS[lang]
    infer(srv, model)

    def spans_of_model():
        objects = trace_objects(trace_dir)
        ids = {o["id"] for o in objects if o.get("model_name") == model}
        return [o["span"] for o in objects if "span" in o and o["id"] in ids]

    wait_until(lambda: len(spans_of_model()) >= 2, 30, f"{model}'s spans in the trace file", srv)
    spans = {s["name"]: s for s in spans_of_model()}
    work, inner = spans[f"{lang}-work"], spans[f"{lang}-inner"]
    assert "parent_span_id" not in work, "a child of the model's compute span"
    assert inner["parent_span_id"] == work["span_id"]
    assert work["attributes"] == {"lang": lang}
    assert [e["name"] for e in inner["events"]] == ["step"]
    assert work["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= work["end_ns"]


def test_python_guests_get_tritons_refusals(telemetry_server):
    srv, _ = telemetry_server
    refused = [line.split("probe refused: ", 1)[1] for line in srv.log_text().splitlines() if "probe refused: " in line]
    assert len(refused) == 5, refused
    for message in (
        "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
        "monotonically by non-negative values.",
        "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
        "Failed to create metric. Missing required buckets.",
        "Error when creating MetricFamily: 'nv_inference_count': names beginning with 'nv_' or 'tessera_' are "
        "the server's",
        "Error when creating Metric: label 'model' is set by the server to the model's own ('telemetry_py'), not "
        "'someone_else'",
    ):
        assert any(line.startswith(message) for line in refused), (message, refused)
    assert "probe: accepted what should be refused" not in srv.log_text()


def test_an_unloaded_models_series_leave_metrics(telemetry_server):
    srv, _ = telemetry_server
    infer(srv, "telemetry_c")
    assert sample(scrape(srv)["probe_requests"], "probe_requests_total", model="telemetry_c") is not None
    assert requests.post(srv.http("/v2/repository/models/telemetry_c/unload"), timeout=30).status_code == 200
    wait_until(lambda: sample(scrape(srv)["probe_requests"], "probe_requests_total", model="telemetry_c") is None,
               30, "telemetry_c's series gone", srv)
    # Everyone else's stay.
    assert sample(scrape(srv)["probe_requests"], "probe_requests_total", model="telemetry_rust") is not None


def test_a_model_past_its_series_cap_fails_to_load_and_the_refusal_is_counted(server_factory, repo, probes):
    lay_out(repo, probes, {"rust": "telemetry_rust"})
    srv = server_factory(repo, ["--metrics-config=custom_series_per_model=1", "--exit-on-error=false"])
    wait_until(lambda: any(e["name"] == "telemetry_rust" and e.get("state") == "UNAVAILABLE"
                           for e in requests.post(srv.http("/v2/repository/index"), json={}, timeout=10).json()),
               120, "telemetry_rust's load to fail", srv)
    index = requests.post(srv.http("/v2/repository/index"), json={}, timeout=10).json()
    reason = next(e["reason"] for e in index if e["name"] == "telemetry_rust")
    assert "model 'telemetry_rust' already has 1 metric series (--metrics-config custom_series_per_model)" in reason, \
        reason
    refused = scrape(srv)["tessera_custom_metric_refused"]
    assert sample(refused, "tessera_custom_metric_refused_total", model="telemetry_rust", reason="series") >= 1
