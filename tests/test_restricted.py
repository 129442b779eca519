"""Triton's restricted APIs (`--http-restricted-api`, `--grpc-restricted-protocol`) on the real
binary, with tritonclient over HTTP and gRPC. Status codes and messages are those tritonserver
2.51 answers (checked side by side with ../shared/reference/triton)."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import READY_DEADLINE, copy_model, run_cli, start_server, wait_until

HEADER = "Tok-Name"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("restricted")
    repo = tmp / "repo"
    copy_model(repo, "add_sub")
    srv = start_server(tmp, [repo], [
        f"--http-restricted-api=statistics,model-config:{HEADER}=secret",
        "--http-restricted-api=model-repository:admin=root",
        "--grpc-restricted-protocol=statistics,inference:tok-name=secret",
    ], ready=["add_sub"])
    yield srv
    srv.stop_and_check()


def add_sub_inputs(module):
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", [1, 16], "FP32"), module.InferInput("INPUT1", [1, 16], "FP32")]
    for i in inputs:
        i.set_data_from_numpy(x)
    return inputs


def test_http_restricted_categories_need_the_header(server):
    base = server.base_url
    for path in ("/v2/models/stats", "/v2/models/add_sub/stats", "/v2/models/add_sub/versions/1/config"):
        for headers in ({}, {HEADER: "wrong"}):
            r = requests.get(base + path, headers=headers)
            assert r.status_code == 403, path
            assert r.json() == {"error": f"This API is restricted, expecting header '{HEADER}'"}
        # Header names are case-insensitive; the value must match exactly.
        assert requests.get(base + path, headers={HEADER.lower(): "secret"}).status_code == 200, path
    r = requests.post(base + "/v2/repository/index")
    assert r.status_code == 403 and "expecting header 'admin'" in r.json()["error"]
    assert requests.post(base + "/v2/repository/index", headers={"admin": "root"}).status_code == 200
    # Categories not listed stay open: health, metadata, inference.
    client = httpclient.InferenceServerClient(server.url)
    assert client.is_server_ready() and client.get_model_metadata("add_sub")["name"] == "add_sub"
    np.testing.assert_array_equal(client.infer("add_sub", add_sub_inputs(httpclient)).as_numpy("OUTPUT1"),
                                  np.zeros((1, 16)))
    with pytest.raises(InferenceServerException, match="This API is restricted"):
        client.get_inference_statistics("add_sub")
    assert client.get_inference_statistics("add_sub", headers={HEADER: "secret"})["model_stats"]


def test_grpc_restricted_protocols_need_the_prefixed_metadata(server):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    for headers in (None, {"tok-name": "secret"}, {"triton-grpc-protocol-tok-name": "wrong"}):
        with pytest.raises(InferenceServerException) as ei:
            client.infer("add_sub", add_sub_inputs(grpcclient), headers=headers)
        assert ei.value.status() == "StatusCode.UNAVAILABLE"
        assert ei.value.message() == "This protocol is restricted, expecting header 'triton-grpc-protocol-tok-name'"
    good = {"triton-grpc-protocol-tok-name": "secret"}
    out = client.infer("add_sub", add_sub_inputs(grpcclient), headers=good).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, 2 * np.arange(16, dtype=np.float32).reshape(1, 16))
    assert client.get_inference_statistics("add_sub", headers=good).model_stats
    # gRPC's restrictions are its own: model-config is restricted over HTTP only.
    assert client.get_model_config("add_sub").config.name == "add_sub"
    assert client.is_server_live()


@pytest.mark.parametrize("flag, why", [
    ("--http-restricted-api=statistics",
     "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got statistics"),
    ("--http-restricted-api=stats:k=v", "unknown restricted api 'stats'"),
    ("--grpc-restricted-protocol=trace:k=v --grpc-restricted-protocol=trace:j=w",
     "restricted protocol 'trace' can not be specified in multiple config groups"),
])
def test_malformed_restriction_flags_stop_startup_with_tritons_message(tmp_path, flag, why):
    r = run_cli(["serve", "--model-repository", str(tmp_path), *flag.split()])
    assert r.returncode != 0 and why in r.stderr


# Every category Triton defines, with one call of each door that belongs to it.
CATEGORIES = ["health", "metadata", "inference", "shared-memory", "model-config", "model-repository",
              "statistics", "trace", "logging"]

HTTP_CALLS = {
    "health": ("GET", "/v2/health/ready", None),
    "metadata": ("GET", "/v2/models/add_sub", None),
    "inference": ("POST", "/v2/models/add_sub/infer",
                  {"inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}
                              for n in ("INPUT0", "INPUT1")]}),
    "shared-memory": ("GET", "/v2/systemsharedmemory/status", None),
    "model-config": ("GET", "/v2/models/add_sub/config", None),
    "model-repository": ("POST", "/v2/repository/index", {}),
    "statistics": ("GET", "/v2/models/add_sub/stats", None),
    "trace": ("GET", "/v2/trace/setting", None),
    "logging": ("GET", "/v2/logging", None),
}


def grpc_calls(client):
    return {
        "health": lambda h: client.is_server_live(headers=h),
        "metadata": lambda h: client.get_model_metadata("add_sub", headers=h),
        "inference": lambda h: client.infer("add_sub", add_sub_inputs(grpcclient), headers=h),
        "shared-memory": lambda h: client.get_system_shared_memory_status(headers=h),
        "model-config": lambda h: client.get_model_config("add_sub", headers=h),
        "model-repository": lambda h: client.get_model_repository_index(headers=h),
        "statistics": lambda h: client.get_inference_statistics("add_sub", headers=h),
        "trace": lambda h: client.get_trace_settings(headers=h),
        "logging": lambda h: client.get_log_settings(headers=h),
    }


@pytest.fixture(scope="module")
def every_category(tmp_path_factory):
    """Each category restricted on both doors with a key of its own."""
    tmp = tmp_path_factory.mktemp("restricted-all")
    repo = tmp / "repo"
    copy_model(repo, "add_sub")
    flags = [f"--http-restricted-api={c}:key-{c}=v-{c}" for c in CATEGORIES]
    flags += [f"--grpc-restricted-protocol={c}:key-{c}=v-{c}" for c in CATEGORIES]
    # Health itself is restricted: readiness is asked with its header.
    srv = start_server(tmp, [repo], flags, wait=False)
    ready = {"key-health": "v-health"}
    try:
        wait_until(lambda: requests.get(srv.http("/v2/models/add_sub/ready"), headers=ready,
                                        timeout=5).status_code == 200, READY_DEADLINE, "add_sub is ready", srv)
    except BaseException:
        srv.stop()
        raise
    yield srv
    srv.stop_and_check()


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_http_category_is_refused_without_its_header_and_served_with_it(every_category, category):
    method, path, body = HTTP_CALLS[category]
    url = every_category.base_url + path

    def call(headers):
        return requests.request(method, url, json=body, headers=headers, timeout=30)

    for headers in ({}, {f"key-{category}": "wrong"}, {f"key-{other}": f"v-{other}" for other in CATEGORIES
                                                        if other != category}):
        r = call(headers)
        assert r.status_code == 403, (category, headers, r.status_code)
        assert r.json() == {"error": f"This API is restricted, expecting header 'key-{category}'"}
    r = call({f"key-{category}": f"v-{category}"})
    assert r.status_code == 200, (category, r.status_code, r.text)


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_grpc_category_is_refused_without_its_metadata_and_served_with_it(every_category, category):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{every_category.grpc_port}")
    try:
        call = grpc_calls(client)[category]
        key = f"triton-grpc-protocol-key-{category}"
        for headers in (None, {key: "wrong"}, {f"key-{category}": f"v-{category}"}):
            with pytest.raises(InferenceServerException) as ei:
                call(headers)
            assert ei.value.status() == "StatusCode.UNAVAILABLE", (category, headers)
            assert ei.value.message() == f"This protocol is restricted, expecting header '{key}'"
        call({key: f"v-{category}"})
    finally:
        client.close()
