"""Tenants at the door (--tenants): identities, allow-lists that hide models, roles, BLS as the
calling tenant, admission (429 / RESOURCE_EXHAUSTED), audit lines, per-tenant metrics, and a
tenants file that changes without a restart. Real server, tritonclient and requests over
127.0.0.1; certificates and the fair queues are in test_tenants_fair.py."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, slow_identity_config, wait_until, write_config_model

pytestmark = pytest.mark.timeout(300)

KEYS = {"alpha": "alpha-key-0123456789", "beta": "beta-key-0123456789", "ops": "ops-key-0123456789",
        "limited": "limited-key-0123456789"}


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def tenants_toml(keys: dict[str, str] = KEYS, extra: str = "") -> str:
    return f"""
[[tenant]]
name = "alpha"
models = ["simple", "bls_router", "classifier", "add_sub", "slow*"]
keys = [{{ id = "alpha-1", sha256 = "{sha(keys['alpha'])}" }}]

[[tenant]]
name = "beta"
models = ["simple", "slow*"]
roles = ["infer", "statistics"]
max_in_flight = 2
keys = [{{ id = "beta-1", sha256 = "{sha(keys['beta'])}" }}]

[[tenant]]
name = "ops"
models = ["*"]
roles = ["infer", "repository", "statistics", "shared-memory", "trace", "logging", "metrics"]
keys = [{{ id = "ops-1", sha256 = "{sha(keys['ops'])}" }}]

[[tenant]]
name = "limited"
models = ["simple"]
rate = 0.05
burst = 2
keys = [{{ id = "limited-1", sha256 = "{sha(keys['limited'])}" }}]
{extra}
"""


def write_tenants(path: Path, text: str) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path


def metrics_url(srv) -> str:
    return f"http://127.0.0.1:{srv.metrics_port}/metrics"


def auth(tenant: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def simple_body() -> dict:
    data = list(range(16))
    return {"inputs": [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": data} for n in ("INPUT0", "INPUT1")]}


def grpc_simple_inputs() -> list:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(a)
    return inputs


@pytest.fixture
def tenant_server(server_factory, tmp_path):
    repo = tmp_path / "repo"
    for model in ("simple", "add_sub", "classifier", "bls_router"):
        copy_model(repo, model)
    write_config_model(repo, "slow", slow_identity_config("slow", 1500))
    path = write_tenants(tmp_path / "tenants.toml", tenants_toml())
    srv = server_factory(repo, ["--tenants", str(path), "--log-requests", "true"])
    for model in ("simple", "bls_router", "slow"):
        wait_ready_as(srv, model, "ops")
    srv.tenants_path = path
    return srv


def wait_ready_as(srv, model: str, tenant: str) -> None:
    """A model's readiness is a tenant's question: anonymous callers get 401."""
    url = srv.http(f"/v2/models/{model}/ready")
    wait_until(lambda: requests.get(url, headers=auth(tenant), timeout=10).status_code == 200, 120,
               f"{model} ready", srv)


def test_calls_without_a_known_identity_are_refused_and_say_what_was_missing(tenant_server):
    srv = tenant_server
    url = srv.http("/v2/models/simple/infer")
    missing = requests.post(url, json=simple_body(), timeout=30)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "requires an API key ('Authorization: Bearer <key>')" in missing.json()["error"]
    wrong = requests.post(url, json=simple_body(), headers={"Authorization": "Bearer alpha-key-012345678"}, timeout=30)
    assert wrong.status_code == 401 and wrong.json()["error"] == "the API key is not valid"
    for secret in [*KEYS.values(), "alpha-1", "alpha"]:
        assert secret not in wrong.text and secret not in missing.text
    malformed = requests.post(url, json=simple_body(), headers={"Authorization": "Basic YWxwaGE="}, timeout=30)
    assert malformed.status_code == 401 and "expected 'Bearer <key>'" in malformed.json()["error"]
    # OpenAI's shape on /v1.
    v1 = requests.get(srv.http("/v1/models"), timeout=30)
    assert v1.status_code == 401 and v1.json()["error"]["type"] == "authentication_error"
    # The server's health stays open, a model's readiness does not; the right key serves.
    assert requests.get(srv.http("/v2/health/ready"), timeout=30).status_code == 200
    assert requests.get(srv.http("/v2/models/simple/ready"), timeout=30).status_code == 401
    ok = requests.post(url, json=simple_body(), headers=auth("alpha"), timeout=30)
    assert ok.status_code == 200, ok.text
    # gRPC: metadata.
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", grpc_simple_inputs())
    assert "UNAUTHENTICATED" in str(e.value.status()) and "requires an API key" in e.value.message()
    out = client.infer("simple", grpc_simple_inputs(), headers={"authorization": f"Bearer {KEYS['alpha']}"})
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), 2 * np.arange(16).reshape(1, 16))
    assert client.is_server_live()
    client.close()


def test_a_model_outside_the_allow_list_answers_as_if_it_did_not_exist(tenant_server):
    srv = tenant_server
    # beta may call simple and slow*, not add_sub: every route answers for add_sub exactly what
    # it answers for a model that is not there at all.
    for route, method in [("", "get"), ("/ready", "get"), ("/config", "get"), ("/stats", "get"),
                          ("/infer", "post"), ("/versions/1", "get"), ("/trace/setting", "get")]:
        def call(model: str, who: str):
            return getattr(requests, method)(srv.http(f"/v2/models/{model}{route}"), headers=auth(who),
                                             json=simple_body() if method == "post" else None, timeout=30)
        hidden, absent = call("add_sub", "beta"), call("no_such_model", "beta")
        assert hidden.status_code == absent.status_code, (route, hidden.text, absent.text)
        assert hidden.text == absent.text.replace("no_such_model", "add_sub"), (route, hidden.text)
        assert call("add_sub", "ops").status_code == 200 or route == "/infer"
    index = requests.post(srv.http("/v2/repository/index"), headers=auth("ops"), timeout=30).json()
    assert {m["name"] for m in index} == {"simple", "add_sub", "classifier", "bls_router", "slow"}
    stats = requests.get(srv.http("/v2/models/stats"), headers=auth("beta"), timeout=30).json()
    assert {m["name"] for m in stats["model_stats"]} == {"simple", "slow"}
    # gRPC too.
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    beta = {"authorization": f"Bearer {KEYS['beta']}"}
    errors = []
    for model in ("add_sub", "no_such_model"):
        with pytest.raises(InferenceServerException) as e:
            client.get_model_metadata(model, headers=beta)
        errors.append((e.value.status(), e.value.message().replace(model, "M")))
    assert errors[0] == errors[1], errors
    assert not client.is_model_ready("add_sub", headers=beta)
    assert client.is_model_ready("add_sub", headers={"authorization": f"Bearer {KEYS['ops']}"})
    client.close()
    # OpenAI's model list is the tenant's too.
    listed = requests.get(srv.http("/v1/models"), headers=auth("beta"), timeout=30).json()["data"]
    assert all(m["id"] in {"simple", "slow"} for m in listed), listed


def test_roles_guard_the_apis_besides_inference(tenant_server):
    srv = tenant_server
    for path, method, body in [("/v2/repository/index", "post", None), ("/v2/models/stats", "get", None),
                               ("/v2/systemsharedmemory/status", "get", None), ("/v2/trace/setting", "get", None),
                               ("/v2/logging", "get", None)]:
        denied = getattr(requests, method)(srv.http(path), headers=auth("alpha"), json=body, timeout=30)
        assert denied.status_code == 403, (path, denied.text)
        assert "tenant 'alpha' may not use the" in denied.json()["error"] and "it needs role" in denied.json()["error"]
        assert getattr(requests, method)(srv.http(path), headers=auth("ops"), json=body, timeout=30).status_code == 200
    # Loading with file overrides needs its own role, which ops does not have (control mode is
    # none, but the role comes first).
    load = requests.post(srv.http("/v2/repository/models/simple/load"), headers=auth("ops"),
                         json={"parameters": {"file:1/model.onnx": "AAAA"}}, timeout=30)
    assert load.status_code == 403 and "repository-files" in load.json()["error"], load.text
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    with pytest.raises(InferenceServerException) as e:
        client.get_model_repository_index(headers={"authorization": f"Bearer {KEYS['alpha']}"})
    assert "PERMISSION_DENIED" in str(e.value.status()), e.value
    client.close()


def test_bls_calls_reach_only_what_the_calling_tenant_may_call(tenant_server, server_factory, tmp_path):
    srv = tenant_server
    url = srv.http("/v2/models/bls_router/infer")

    def route(values, who):
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": values}]}
        return requests.post(url, json=body, headers=auth(who), timeout=60)

    # [4, 3, 2, 1] goes to add_sub, which alpha may call; [-1, 7, 2, 0] goes to simple.
    assert route([4, 3, 2, 1], "alpha").status_code == 200
    assert route([-1, 7, 2, 0], "alpha").status_code == 200
    # A tenant for whom bls_router may call classifier and simple but not add_sub.
    write_tenants(srv.tenants_path, tenants_toml().replace('models = ["simple", "bls_router", "classifier", "add_sub", '
                                                           '"slow*"]', 'models = ["simple", "bls_router", "classifier"]'))
    wait_until(lambda: route([4, 3, 2, 1], "alpha").status_code != 200, 10, "the new allow-list", srv)
    refused = route([4, 3, 2, 1], "alpha")
    assert refused.status_code in (400, 404, 500) and "add_sub" in refused.text and "not found" in refused.text
    assert route([-1, 7, 2, 0], "alpha").status_code == 200
    # Ops may call everything: the router's own allow-list decides.
    assert route([4, 3, 2, 1], "ops").status_code == 200


def test_admission_refuses_over_the_cap_and_the_rate_at_once(tenant_server):
    srv = tenant_server
    slow = srv.http("/v2/models/slow/infer")
    body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [7]}]}
    before = requests.get(srv.http("/v2/models/slow/stats"), headers=auth("ops"), timeout=30).json()
    count_before = before["model_stats"][0]["inference_count"]
    results = []

    def one():
        results.append(requests.post(slow, json=body, headers=auth("beta"), timeout=60).status_code)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    # Both of beta's places are taken while the slow model runs (1.5 s each, one instance).
    wait_until(lambda: requests.get(metrics_url(srv), timeout=10).text.count('tessera_tenant_in_flight{tenant="beta"} 2'),
               10, "beta's two requests in flight", srv)
    third = requests.post(slow, json=body, headers=auth("beta"), timeout=60)
    # Answered while an admitted request still runs (the second ends 3 s after the first began):
    # it did not wait for the queue.
    assert len(results) < 2, "the refusal came only after the admitted requests had finished"
    assert third.status_code == 429 and third.headers["retry-after"] == "1", third.text
    assert "maximum of 2 requests in flight" in third.json()["error"]
    for t in threads:
        t.join()
    assert results == [200, 200]
    after = requests.get(srv.http("/v2/models/slow/stats"), headers=auth("ops"), timeout=30).json()
    assert after["model_stats"][0]["inference_count"] == count_before + 2, "the refused request reached the model"
    # The rate: a burst of 2, then 429 with Retry-After, on both doors.
    simple = srv.http("/v2/models/simple/infer")
    codes = [requests.post(simple, json=simple_body(), headers=auth("limited"), timeout=30) for _ in range(3)]
    assert [c.status_code for c in codes] == [200, 200, 429], [c.text for c in codes]
    assert int(codes[2].headers["retry-after"]) >= 1 and "over its rate" in codes[2].json()["error"]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", grpc_simple_inputs(), headers={"authorization": f"Bearer {KEYS['limited']}"})
    assert "RESOURCE_EXHAUSTED" in str(e.value.status()) and "over its rate" in e.value.message()
    # A stream admits each request: beta's third request in flight is answered in-stream.
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)),
                        headers={"authorization": f"Bearer {KEYS['beta']}"})
    slow_input = grpcclient.InferInput("INPUT0", [1], "INT32")
    slow_input.set_data_from_numpy(np.array([3], dtype=np.int32))
    for i in range(3):
        client.async_stream_infer("slow", [slow_input], request_id=f"s{i}")
    answers = [got.get(timeout=60) for _ in range(3)]
    client.stop_stream()
    errors = [str(error) for _, error in answers if error is not None]
    assert len(errors) == 1 and "maximum of 2 requests in flight" in errors[0], errors
    client.close()
    # Everyone else is served meanwhile.
    assert requests.post(simple, json=simple_body(), headers=auth("alpha"), timeout=30).status_code == 200


def metric_samples(srv, headers=None) -> dict:
    text = requests.get(metrics_url(srv), headers=headers, timeout=30).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_access_lines_and_metrics_name_the_tenant_and_never_the_key(tenant_server):
    srv = tenant_server
    requests.post(srv.http("/v2/models/simple/infer"), json=simple_body(), headers=auth("alpha"), timeout=30)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    client.infer("simple", grpc_simple_inputs(), headers={"authorization": f"Bearer {KEYS['beta']}"})
    client.close()
    wait_until(lambda: 'tenant="beta"' in srv.log_text(), 10, "access lines", srv)
    lines = [line for line in srv.log_text().splitlines() if "inference request" in line]
    http_line = next(line for line in lines if 'tenant="alpha"' in line)
    for part in ('key_id="alpha-1"', 'peer="127.0.0.1:', 'door="http"'):
        assert part in http_line, http_line
    grpc_line = next(line for line in lines if 'tenant="beta"' in line)
    for part in ('key_id="beta-1"', 'peer="127.0.0.1:', 'door="grpc"'):
        assert part in grpc_line, grpc_line
    for key in KEYS.values():
        assert key not in srv.log_text()
    samples = metric_samples(srv)
    assert samples[("tessera_tenant_requests_total", (("tenant", "alpha"),))] >= 1
    assert samples[("tessera_tenant_queue_requests_total", (("tenant", "beta"),))] >= 1
    assert ("tessera_tenant_refusals_total", (("reason", "rate"), ("tenant", "limited"))) in samples
    tenants = {dict(labels).get("tenant") for (name, labels) in samples if name.startswith("tessera_tenant_")}
    assert tenants <= {"alpha", "beta", "ops", "limited", None}, tenants


def test_a_revoked_key_is_refused_within_two_seconds_and_a_bad_file_keeps_the_last_good(tenant_server):
    srv = tenant_server
    url = srv.http("/v2/models/simple/infer")
    assert requests.post(url, json=simple_body(), headers=auth("alpha"), timeout=30).status_code == 200
    rotated = dict(KEYS, alpha="alpha-key-rotated-999")
    write_tenants(srv.tenants_path, tenants_toml(rotated))
    written = time.monotonic()
    while requests.post(url, json=simple_body(), headers=auth("alpha"), timeout=30).status_code == 200:
        assert time.monotonic() - written < 2.0, "the revoked key still works 2 s after the change"
        time.sleep(0.05)
    new = requests.post(url, json=simple_body(), headers={"Authorization": "Bearer alpha-key-rotated-999"}, timeout=30)
    assert new.status_code == 200
    # A file that does not parse: the last good configuration stays, the reason is logged and counted.
    write_tenants(srv.tenants_path, tenants_toml(rotated) + "\n[[tenant]]\nname = \"x\"\nbogus = 1\n")
    wait_until(lambda: "keeping the last good tenants configuration" in srv.log_text(), 10, "the reload error", srv)
    assert "unknown field `bogus`" in srv.log_text()
    assert requests.post(url, json=simple_body(), headers={"Authorization": "Bearer alpha-key-rotated-999"},
                         timeout=30).status_code == 200
    samples = metric_samples(srv)
    assert samples[("tessera_tenants_reloads_total", (("result", "error"),))] == 1
    assert samples[("tessera_tenants_reloads_total", (("result", "ok"),))] >= 1


def test_metrics_can_be_closed_to_all_but_the_metrics_role(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    path = write_tenants(tmp_path / "tenants.toml", 'open = ["health"]\n' + tenants_toml())
    srv = server_factory(repo, ["--tenants", str(path), "--log-format", "json", "--log-requests", "true"])
    assert requests.get(metrics_url(srv), timeout=30).status_code == 401
    assert requests.get(metrics_url(srv), headers=auth("alpha"), timeout=30).status_code == 403
    ok = requests.get(metrics_url(srv), headers=auth("ops"), timeout=30)
    assert ok.status_code == 200 and "tessera_tenant_requests_total" in ok.text
    # The JSON access line carries the same fields.
    wait_ready_as(srv, "simple", "ops")
    requests.post(srv.http("/v2/models/simple/infer"), json=simple_body(), headers=auth("beta"), timeout=30)
    wait_until(lambda: '"key_id":"beta-1"' in srv.log_text(), 10, "the JSON access line", srv)
    [line] = [json.loads(x) for x in srv.log_text().splitlines() if '"key_id":"beta-1"' in x]
    assert line["tenant"] == "beta" and line["peer"].startswith("127.0.0.1:") and line["model"] == "simple", line


@pytest.mark.parametrize("text, message", [
    (tenants_toml() + f'\n[[tenant]]\nname = "copy"\nkeys = [{{ id = "c", sha256 = "{sha(KEYS["beta"])}" }}]\n',
     "tenant 'copy': key 'c' is already listed (as key 'beta-1')"),
    (tenants_toml() + '\ncolour = "red"\n', "unknown field `colour`"),
    ('[[tenant]]\nname = "a"\nkeys = [{ id = "k", sha256 = "abc" }]\n', "sha256 must be 64 hexadecimal digits"),
])
def test_a_bad_tenants_file_stops_the_start_with_what_is_wrong(server_factory, tmp_path, text, message):
    repo = tmp_path / "repo"
    repo.mkdir()
    path = write_tenants(tmp_path / "tenants.toml", text)
    srv = server_factory(repo, ["--tenants", str(path)], expect_exit=True)
    assert srv.process.wait(timeout=60) != 0
    assert message in srv.log_text(), srv.log_text()[-2000:]


def test_a_world_readable_file_warns_and_failed_attempts_are_throttled_not_valid_ones(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    path = tmp_path / "tenants.toml"
    path.write_text(tenants_toml())
    os.chmod(path, 0o644)
    srv = server_factory(repo, ["--tenants", str(path)])
    wait_ready_as(srv, "simple", "ops")
    assert "is readable by every user of this machine" in srv.log_text()
    url = srv.http("/v2/models/simple/infer")
    codes: dict[int, int] = {}
    lock = threading.Lock()

    def attacker():
        with requests.Session() as s:
            for i in range(1000):
                try:
                    code = s.post(url, json={}, headers={"Authorization": f"Bearer guess-{i}"}, timeout=30).status_code
                except requests.ConnectionError:
                    # A refused request's unread body may cost the client its connection.
                    code = 0
                with lock:
                    codes[code] = codes.get(code, 0) + 1

    attackers = [threading.Thread(target=attacker) for _ in range(2)]
    attack_started = time.monotonic()
    for t in attackers:
        t.start()
    try:
        with requests.Session() as s:
            valid = [s.post(url, json=simple_body(), headers=auth("alpha"), timeout=30).status_code for _ in range(50)]
    finally:
        for t in attackers:
            t.join()
    assert valid == [200] * 50, "a valid client was refused during the attack"
    assert codes.get(429, 0) > 0 and set(codes) <= {0, 401, 429}, codes
    attack_took = time.monotonic() - attack_started
    reports = [line for line in srv.log_text().splitlines() if "authentication failed" in line]
    # One line at the first failure, then at most one per 10 s.
    assert 1 <= len(reports) <= 2 + attack_took / 10, (attack_took, reports)
    samples = metric_samples(srv)
    assert samples[("tessera_tenant_auth_failures_total", (("reason", "throttled"),))] == codes[429], json.dumps(codes)
