"""The system shared memory extension over HTTP and gRPC with tritonclient.utils.shared_memory:
inputs read from and outputs written into POSIX shm regions, status/unregister, bounds checks
and clear errors, and unregistering regions that requests are using."""

from __future__ import annotations

import base64
import os
import queue
import uuid

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, wait_model_ready

pytestmark = pytest.mark.timeout(120)

NBYTES = 16 * 4  # one [1, 16] INT32 tensor of the `simple` model


class Proto:
    """The same calls over either protocol."""

    def __init__(self, name: str, server):
        self.name = name
        self.mod = httpclient if name == "http" else grpcclient
        url = server.url if name == "http" else f"127.0.0.1:{server.grpc_port}"
        self.client = self.mod.InferenceServerClient(url)

    def inputs(self, in0, in1):
        """Each argument is an array (sent inline) or (region, offset) in shared memory."""
        result = []
        for name, spec in (("INPUT0", in0), ("INPUT1", in1)):
            t = self.mod.InferInput(name, [1, 16], "INT32")
            if isinstance(spec, tuple):
                t.set_shared_memory(spec[0], NBYTES, offset=spec[1])
            else:
                t.set_data_from_numpy(spec)
            result.append(t)
        return result

    def output(self, name, region=None, offset=0, byte_size=NBYTES):
        o = self.mod.InferRequestedOutput(name)
        if region is not None:
            o.set_shared_memory(region, byte_size, offset=offset)
        return o

    def status(self, region=""):
        s = self.client.get_system_shared_memory_status(region)
        if self.name == "grpc":
            return sorted(
                ({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size} for r in s.regions.values()),
                key=lambda r: r["name"],
            )
        return sorted(s, key=lambda r: r["name"])


@pytest.fixture(params=["http", "grpc"])
def proto(request, server):
    p = Proto(request.param, server)
    yield p
    p.client.unregister_system_shared_memory()
    p.client.close()


class Regions:
    """POSIX shm regions created for one test and destroyed after it."""

    def __init__(self):
        self.handles = []

    def create(self, size: int):
        tag = uuid.uuid4().hex[:10]
        handle = shm.create_shared_memory_region(f"r{tag}", f"/tessera_test_{tag}", size)
        self.handles.append(handle)
        return handle, f"/tessera_test_{tag}"

    def close(self):
        for h in self.handles:
            shm.destroy_shared_memory_region(h)


@pytest.fixture
def regions():
    r = Regions()
    yield r
    r.close()


def ab():
    return np.arange(16, dtype=np.int32).reshape(1, 16), np.full((1, 16), 5, dtype=np.int32)


def assert_works(p: Proto):
    a, b = ab()
    r = p.client.infer("simple", p.inputs(a, b))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def expect_error(fn, *needles):
    with pytest.raises(InferenceServerException) as info:
        fn()
    for n in needles:
        assert n in info.value.message(), info.value.message()
    return info.value


def test_inputs_and_outputs_in_shared_memory(proto, regions):
    a, b = ab()
    in_handle, in_key = regions.create(2 * NBYTES)
    out_handle, out_key = regions.create(2 * NBYTES)
    shm.set_shared_memory_region(in_handle, [a, b])
    proto.client.register_system_shared_memory("in", in_key, 2 * NBYTES)
    proto.client.register_system_shared_memory("out", out_key, 2 * NBYTES)
    assert proto.status() == [
        {"name": "in", "key": in_key, "offset": 0, "byte_size": 2 * NBYTES},
        {"name": "out", "key": out_key, "offset": 0, "byte_size": 2 * NBYTES},
    ]
    r = proto.client.infer(
        "simple",
        proto.inputs(("in", 0), ("in", NBYTES)),
        outputs=[proto.output("OUTPUT0", "out", 0), proto.output("OUTPUT1", "out", NBYTES)],
    )
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=0), a + b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=NBYTES), a - b)
    out0 = r.get_output("OUTPUT0")
    shape = list(out0["shape"]) if proto.name == "http" else list(out0.shape)
    assert shape == [1, 16]
    if proto.name == "http":
        assert "data" not in out0 and "parameters" not in out0
    else:
        assert r.get_response().raw_output_contents[0] == b""


def test_mixed_inline_and_shared_memory(proto, regions):
    """One input and one output in shm, the others inline: positions must still line up."""
    a, b = ab()
    handle, key = regions.create(3 * NBYTES)
    shm.set_shared_memory_region(handle, [b], offset=NBYTES)
    proto.client.register_system_shared_memory("mixed", key, 2 * NBYTES, offset=NBYTES)
    r = proto.client.infer(
        "simple",
        proto.inputs(a, ("mixed", 0)),
        outputs=[proto.output("OUTPUT0", "mixed", NBYTES), proto.output("OUTPUT1")],
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=2 * NBYTES), a + b)


def test_shared_memory_errors(proto, regions):
    a, b = ab()
    handle, key = regions.create(2 * NBYTES)
    shm.set_shared_memory_region(handle, [a, b])
    proto.client.register_system_shared_memory("r", key, 2 * NBYTES)

    err = expect_error(lambda: proto.client.register_system_shared_memory("r", key, NBYTES), "shared memory region 'r' already in manager")
    expect_error(lambda: proto.client.register_system_shared_memory("x", "/tessera_no_such_region", NBYTES),
                 "Unable to open shared memory region: '/tessera_no_such_region'")
    expect_error(lambda: proto.client.register_system_shared_memory("x", key, 4 * NBYTES), "failed to register shared memory region 'x'")
    expect_error(lambda: proto.client.register_system_shared_memory("x", "/../../etc/passwd", 8), "Unable to open shared memory region")
    # Triton 2.7x: the Python backend's own keys are not for clients.
    reserved = expect_error(
        lambda: proto.client.register_system_shared_memory("x", "/triton_python_backend_shm_region_7", 8),
        "cannot register shared memory region 'x' with key '/triton_python_backend_shm_region_7' as the key contains "
        "the reserved prefix 'triton_python_backend_shm_region_'")
    assert reserved.status() in ("400", "StatusCode.INVALID_ARGUMENT"), reserved.status()
    expect_error(lambda: proto.client.get_system_shared_memory_status("nope"), "Unable to find system shared memory region: 'nope'")

    err = expect_error(lambda: proto.client.infer("simple", proto.inputs(("nope", 0), b)), "Unable to find shared memory region: 'nope'")
    if proto.name == "grpc":
        assert err.status() == "StatusCode.NOT_FOUND"
    expect_error(lambda: proto.client.infer("simple", proto.inputs(("r", NBYTES + 8), b)),
                 "Invalid offset + byte size for shared memory region: 'r'")
    expect_error(lambda: proto.client.infer("simple", proto.inputs(("r", 4 * NBYTES), b)), "Invalid offset for shared memory region: 'r'")
    expect_error(
        lambda: proto.client.infer("simple", proto.inputs(a, b), outputs=[proto.output("OUTPUT0", "r", 0, byte_size=8)]),
        "should be at least 64 bytes to hold the results",
    )
    expect_error(
        lambda: proto.client.infer("simple", proto.inputs(a, b),
                                   outputs=[proto.output("OUTPUT0", "r", 0), proto.output("OUTPUT1", "r", 32)]),
        "overlap",
    )
    assert_works(proto)


def test_unregister_one_and_all(proto, regions):
    a, b = ab()
    handle, key = regions.create(2 * NBYTES)
    shm.set_shared_memory_region(handle, [a, b])
    for name in ("r1", "r2", "r3"):
        proto.client.register_system_shared_memory(name, key, 2 * NBYTES)
    proto.client.unregister_system_shared_memory("r1")
    proto.client.unregister_system_shared_memory("never-registered")
    assert [r["name"] for r in proto.status()] == ["r2", "r3"]
    expect_error(lambda: proto.client.infer("simple", proto.inputs(("r1", 0), b)), "Unable to find shared memory region: 'r1'")
    proto.client.unregister_system_shared_memory()
    assert proto.status() == []
    proto.client.register_system_shared_memory("r1", key, 2 * NBYTES)
    r = proto.client.infer("simple", proto.inputs(("r1", 0), ("r1", NBYTES)))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def test_unregistering_a_region_in_use_is_safe(server, regions):
    """Requests racing an unregister (and the client unlinking the region) either finish with
    the right answer or fail with a clear error; the server keeps serving."""
    p = Proto("grpc", server)
    a, b = ab()
    handle, key = regions.create(4 * NBYTES)
    shm.set_shared_memory_region(handle, [a, b])
    p.client.register_system_shared_memory("busy", key, 4 * NBYTES)
    results: queue.Queue = queue.Queue()
    n = 64
    for i in range(n):
        p.client.async_infer(
            "simple",
            p.inputs(("busy", 0), ("busy", NBYTES)),
            lambda result, error: results.put((result, error)),
            outputs=[p.output("OUTPUT0", "busy", 2 * NBYTES), p.output("OUTPUT1")],
        )
        if i == n // 2:
            p.client.unregister_system_shared_memory("busy")
    ok = failed = 0
    for _ in range(n):
        result, error = results.get(timeout=60)
        if error is None:
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            ok += 1
        else:
            assert "Unable to find shared memory region: 'busy'" in error.message(), error.message()
            failed += 1
    assert ok >= 1 and ok + failed == n
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=2 * NBYTES), a + b)
    assert_works(p)
    p.client.close()


def test_regions_are_shared_by_both_protocols(server, regions):
    """One registry behind both doors: registered over HTTP, used and listed over gRPC."""
    h = Proto("http", server)
    g = Proto("grpc", server)
    a, b = ab()
    handle, key = regions.create(2 * NBYTES)
    shm.set_shared_memory_region(handle, [a, b])
    h.client.register_system_shared_memory("shared", key, 2 * NBYTES)
    assert [r["name"] for r in g.status()] == ["shared"]
    r = g.client.infer("simple", g.inputs(("shared", 0), ("shared", NBYTES)))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    g.client.unregister_system_shared_memory()
    assert h.status() == []
    h.client.close()
    g.client.close()


def test_http_shared_memory_endpoints_raw(server, regions):
    handle, key = regions.create(NBYTES)
    base = server.base_url
    r = requests.post(f"{base}/v2/systemsharedmemory/region/raw/register", json={"byte_size": NBYTES}, timeout=10)
    assert r.status_code == 400 and "has no 'key' field" in r.json()["error"]
    r = requests.post(f"{base}/v2/systemsharedmemory/region/raw/register", data=b"{not json", timeout=10)
    # Triton's answer: rapidjson's words and offset, 500.
    assert (r.status_code, r.json()["error"]) == (
        500, "failed to parse the request JSON buffer: Missing a name for object member. at 1")
    r = requests.post(f"{base}/v2/systemsharedmemory/region/raw/register", json={"key": key, "byte_size": NBYTES}, timeout=10)
    assert r.status_code == 200, r.text
    r = requests.get(f"{base}/v2/systemsharedmemory/region/raw/status", timeout=10)
    assert r.json() == [{"name": "raw", "key": key, "offset": 0, "byte_size": NBYTES}]
    r = requests.get(f"{base}/v2/systemsharedmemory/region/other/status", timeout=10)
    assert r.status_code == 404
    assert requests.post(f"{base}/v2/systemsharedmemory/region/raw/unregister", timeout=10).status_code == 200
    assert requests.get(f"{base}/v2/systemsharedmemory/status", timeout=10).json() == []
    # CUDA shared memory on a machine without a GPU
    assert requests.get(f"{base}/v2/cudasharedmemory/status", timeout=10).json() == []
    assert requests.post(f"{base}/v2/cudasharedmemory/unregister", timeout=10).status_code == 200
    # The handle is checked before any GPU is looked at, as Triton does: 3 bytes are no cudaIpcMemHandle_t.
    r = requests.post(f"{base}/v2/cudasharedmemory/region/g/register",
                      json={"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64}, timeout=10)
    assert (r.status_code, r.json()["error"]) == (400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    for body, message in [
        ({"device_id": 0, "byte_size": 64}, "attempt to access non-existing object member 'raw_handle'"),
        ({"raw_handle": {}, "device_id": 0, "byte_size": 64}, "attempt to access non-existing object member 'b64'"),
        ({"raw_handle": {"b64": "AAAA"}, "byte_size": 64}, "attempt to access non-existing object member 'device_id'"),
        ({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": -1},
         "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ]:
        r = requests.post(f"{base}/v2/cudasharedmemory/region/g/register", json=body, timeout=10)
        assert (r.status_code, r.json()["error"]) == (500, message), body
    r = requests.post(f"{base}/v2/cudasharedmemory/region/g/register", timeout=10,
                      json={"raw_handle": {"b64": base64.b64encode(b"\0" * 64).decode()}, "device_id": 0, "byte_size": 64})
    assert r.status_code == 400 and r.json()["error"].startswith(
        "failed to register shared memory region: invalid args")


def test_client_shared_memory_is_refused_unless_allowed(server_factory, repo, regions):
    """Triton 2.7x's --allow-client-shm (default false): register and unregister are refused with
    501 / UNIMPLEMENTED on both doors, before the request is read; status stays open."""
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--allow-client-shm=false"])
    wait_model_ready(srv, "simple")
    message = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
    _, key = regions.create(NBYTES)
    for path in ("/v2/systemsharedmemory/region/r/register", "/v2/systemsharedmemory/unregister",
                 "/v2/cudasharedmemory/region/r/register", "/v2/systemsharedmemory/register"):
        r = requests.post(srv.http(path), data=b"not even json", timeout=10)
        assert (r.status_code, r.json()) == (501, {"error": message}), (path, r.text)
    assert requests.get(srv.http("/v2/systemsharedmemory/status"), timeout=10).status_code == 200
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    for call in (lambda: g.register_system_shared_memory("r", key, NBYTES), g.unregister_system_shared_memory):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert (e.value.status(), e.value.message()) == ("StatusCode.UNIMPLEMENTED", message)
    g.close()
