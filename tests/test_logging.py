"""Log lines: `--log-format default|ISO8601` in Triton's formats and `json` (one object per line,
every line parses), the access line per request of `--log-requests`, guest log lines carrying the
model and the request id, and the format switched at run time through the logging extension."""

from __future__ import annotations

import json
import re

import requests
import tritonclient.http as httpclient

from tessera_testlib import copy_faulty, copy_model, wait_model_ready, wait_until

DEFAULT_LINE = re.compile(r'^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [\w.]+:\d+\] "')
ISO8601_LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [IWE] \d+ [\w.]+:\d+\] "')


def faulty_log(srv, request_id: str) -> None:
    body = {"id": request_id, "inputs": [
        {"name": "MODE", "shape": [1], "datatype": "BYTES", "data": ["log"]},
        {"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.0]},
    ]}
    r = requests.post(srv.http("/v2/models/faulty/infer"), json=body, timeout=30)
    assert r.status_code == 200, r.text


def server_lines(srv) -> list[str]:
    """The server's own lines (the harness writes the command line first, with `$ `)."""
    return [line for line in srv.log_text().splitlines() if not line.startswith("$ ")]


def json_lines(srv) -> list[dict]:
    lines = server_lines(srv)
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"a log line is not JSON: {line!r}") from None
    return parsed


def test_json_lines_all_parse_and_carry_model_and_request_id(server_factory, repo):
    copy_faulty(repo)
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--log-format", "json", "--log-requests", "true"])
    wait_model_ready(srv, "faulty")
    faulty_log(srv, "req-42")
    requests.post(srv.http("/v2/models/missing/infer"), json={}, timeout=30)
    wait_until(lambda: any(line.get("model") == "missing" for line in json_lines(srv)), 10, "the access lines", srv)
    lines = json_lines(srv)
    assert all({"time", "level", "message"} <= line.keys() for line in lines)
    [guest] = [line for line in lines if line["message"] == "faulty: error line for request 'req-42'"]
    assert (guest["level"], guest["model"], guest["request_id"]) == ("ERROR", "faulty", "req-42"), guest
    access = [line for line in lines if line["message"] == "inference request"]
    ok = [line for line in access if line.get("request_id") == "req-42"]
    assert len(ok) == 1 and ok[0]["model"] == "faulty" and ok[0]["status"] == "OK" and ok[0]["door"] == "http"
    assert isinstance(ok[0]["duration_us"], int), ok[0]
    missing = [line for line in access if line["model"] == "missing"]
    assert len(missing) == 1 and missing[0]["status"] == "Not found", missing
    # Without --log-requests there are none (the default).


def test_tritons_two_formats_and_a_switch_at_run_time(server_factory, repo):
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--log-format", "ISO8601", "--log-requests", "true"])
    wait_model_ready(srv, "simple")
    lines = server_lines(srv)
    assert lines and all(ISO8601_LINE.match(line) for line in lines), lines[:5]

    def line_about(model: str) -> str:
        requests.post(srv.http(f"/v2/models/{model}/infer"), json={}, timeout=30)
        wait_until(lambda: model in srv.log_text(), 10, f"the access line of {model}", srv)
        [line] = [line for line in server_lines(srv) if model in line]
        return line

    client = httpclient.InferenceServerClient(srv.url)
    assert client.get_log_settings()["log_format"] == "ISO8601"
    client.update_log_settings({"log_format": "json"})
    assert json.loads(line_about("first_missing"))["model"] == "first_missing"
    client.update_log_settings({"log_format": "default"})
    assert DEFAULT_LINE.match(line_about("second_missing"))


def test_the_default_format_is_tritons(server_factory, repo):
    copy_model(repo, "simple")
    srv = server_factory(repo, [])
    wait_model_ready(srv, "simple")
    lines = server_lines(srv)
    assert lines and all(DEFAULT_LINE.match(line) for line in lines), lines[:5]
    assert any(line.endswith('"model loaded" model="simple"') for line in lines), lines
