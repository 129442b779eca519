"""Connections that hold server resources without finishing: headers, bodies and keep-alive
connections that stall are closed after their timeouts, clients past the connection cap are
answered at once (HTTP) or fail fast (gRPC), connections run on the threads asked for, a server at
a low file limit keeps answering, and a gRPC stream nobody reads does not make the server buffer
its responses."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import (REPEAT_CONFIG, at_once, assert_serves_grpc, assert_simple_infers, copy_faulty,
                             copy_model, grpc_stream_responses, slow_identity_config, status_kib, tessera_bin,
                             wait_model_ready, write_config_model)

# ---------------------------------------------------------------------------------------------
# Connections that stall: header, body and keep-alive timeouts, and the connection cap
# ---------------------------------------------------------------------------------------------

def connect(srv) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.http_port), timeout=15)
    return s


def closed_within(s: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Waits for the server to close `s`; returns (closed, what it sent before closing)."""
    s.settimeout(seconds)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return True, data
            data += chunk
    except (socket.timeout, TimeoutError):
        return False, data
    except ConnectionResetError:
        return True, data


@pytest.fixture
def impatient(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    write_config_model(repo, "slow", slow_identity_config("slow", 2500))
    srv = server_factory(repo, ["--http-header-read-timeout=1", "--http-body-read-timeout=1",
                                "--http-keepalive-timeout=1", "--http-max-connections=4"])
    wait_model_ready(srv, "simple")
    wait_model_ready(srv, "slow")
    return srv


def assert_slots_come_back(srv) -> None:
    """Once held connections close, their slots are given back: a real client is served again
    (the server notices each close on its own schedule, hence the bounded poll)."""
    deadline = time.monotonic() + 10
    while requests.get(srv.http("/v2/health/live"), timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "connection slots were not given back"
        time.sleep(0.05)
    assert_simple_infers(srv, httpclient)


def test_idle_and_half_sent_connections_are_closed(impatient):
    idle = connect(impatient)
    half = connect(impatient)
    half.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Le")
    started = time.monotonic()
    assert closed_within(idle, 10)[0], "an idle connection stayed open"
    assert closed_within(half, 10)[0], "a half-sent header kept its connection"
    assert time.monotonic() - started < 8
    # A keep-alive connection that is used stays open across requests.
    with requests.Session() as session:
        for _ in range(3):
            assert session.get(impatient.http("/v2/health/live"), timeout=10).status_code == 200
    assert_simple_infers(impatient, httpclient)


def test_a_silent_grpc_connection_is_closed(impatient):
    """gRPC connections that make no call (nothing sent, or only the HTTP/2 preface and settings)
    are closed after --http-header-read-timeout (1 s here), so they cannot pile up to the
    connection cap; one that calls is served."""
    silent = [socket.create_connection(("127.0.0.1", impatient.grpc_port), timeout=15) for _ in range(3)]
    h2_only = socket.create_connection(("127.0.0.1", impatient.grpc_port), timeout=15)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    h2_only.sendall(conn.data_to_send())
    started = time.monotonic()
    assert all(closed_within(s, 10)[0] for s in [*silent, h2_only]), "a gRPC connection with no call stayed open"
    assert time.monotonic() - started < 8
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{impatient.grpc_port}")
    assert client.is_server_live(), "a client that calls is served"
    time.sleep(2)  # past the timeout: a connection that has made a call stays
    assert client.is_server_live()
    client.close()


def test_a_trickled_body_fails_its_request_with_a_message(impatient):
    s = connect(impatient)
    s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000\r\n\r\n{\"inputs\": [")
    closed, data = closed_within(s, 10)
    assert data.startswith(b"HTTP/1.1 400"), data[:200]
    assert b"--http-body-read-timeout" in data, data
    assert_simple_infers(impatient, httpclient)


def test_a_long_request_outlives_the_idle_timeout(impatient):
    # 2.5 s of execution on a connection whose idle timeout is 1 s: in flight, so not cut.
    c = httpclient.InferenceServerClient(f"127.0.0.1:{impatient.http_port}")
    inp = httpclient.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([41], dtype=np.int32))
    assert c.infer("slow", [inp]).as_numpy("OUTPUT0").tolist() == [41]
    c.close()


def test_clients_past_the_connection_cap_are_answered_not_left_hanging(impatient):
    held = [connect(impatient) for _ in range(4)]
    for s in held:  # a header begun: held until the 1 s header timeout
        s.sendall(b"G")
    # Once the server has accepted the four, the next client is answered 503 at once.
    deadline = time.monotonic() + 0.8
    while True:
        started = time.monotonic()
        r = requests.get(impatient.http("/v2/health/live"), timeout=10)
        assert time.monotonic() - started < 1
        if r.status_code == 503:
            break
        assert time.monotonic() < deadline, "the fifth connection was served although four were held"
    assert "--http-max-connections" in r.json()["error"], r.text
    for s in held:
        s.close()
    assert_slots_come_back(impatient)


def connection_threads(srv) -> list[str]:
    """Names of the server's threads that run connections."""
    tasks = Path(f"/proc/{srv.process.pid}/task")
    names = [(t / "comm").read_text().strip() for t in tasks.iterdir()]
    return sorted(n for n in names if n.startswith("tessera-conn"))


def test_connections_run_on_the_threads_asked_for(server_factory, tmp_path):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    # Triton's flag is an alias of --connection-thread-count.
    three = server_factory(repo, ["--http-thread-count", "3"])
    wait_model_ready(three, "simple")
    assert connection_threads(three) == ["tessera-conn-0", "tessera-conn-1", "tessera-conn-2"]
    # Six clients of each door at once, each on its own connection, spread over the three threads.
    assert at_once(lambda: assert_simple_infers(three, httpclient) or True, 6) == [True] * 6
    assert at_once(lambda: assert_serves_grpc(three) or True, 6) == [True] * 6
    # 0: connections run on the server's shared runtime, as on a one-CPU box.
    shared = server_factory(repo, ["--connection-thread-count", "0"])
    wait_model_ready(shared, "simple")
    assert connection_threads(shared) == []
    assert at_once(lambda: assert_simple_infers(shared, httpclient) or True, 6) == [True] * 6
    assert at_once(lambda: assert_serves_grpc(shared) or True, 6) == [True] * 6


def test_grpc_clients_past_the_connection_cap_fail_fast(server_factory, tmp_path):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--grpc-max-connections=2"])
    wait_model_ready(srv, "simple")
    url = f"127.0.0.1:{srv.grpc_port}"
    # Each client on a connection of its own (gRPC shares one between identical channels otherwise).
    own = [("grpc.use_local_subchannel_pool", 1)]
    held = [grpcclient.InferenceServerClient(url, channel_args=own) for _ in range(2)]
    for c in held:
        assert c.is_server_live()  # each holds one connection
    extra = grpcclient.InferenceServerClient(url, channel_args=own)
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as e:
        extra.is_server_live(client_timeout=10)
    assert time.monotonic() - started < 5 and "UNAVAILABLE" in str(e.value), e.value
    extra.close()
    held.pop().close()
    deadline = time.monotonic() + 10
    while True:
        c = grpcclient.InferenceServerClient(url, channel_args=own)
        try:
            if c.is_server_live(client_timeout=2):
                break
        except InferenceServerException:
            assert time.monotonic() < deadline, "the freed gRPC slot was not given back"
        finally:
            c.close()
    for c in held:
        assert c.is_server_live()
        c.close()


def test_a_server_at_a_256_file_limit_keeps_answering_past_250_stalled_connections(server_factory, tmp_path):
    """The measured failure: with the process's file limit at 256, 250 idle connections made real
    clients hang. The default connection cap is half the file limit, so clients past it are
    answered 503 at once (HTTP) while gRPC, with slots of its own, keeps serving."""
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    wrapper = tmp_path / "tessera-at-256-files"
    wrapper.write_text(f'#!/bin/sh\nulimit -n 256 || exit 99\nexec "{tessera_bin()}" "$@"\n')
    wrapper.chmod(0o755)
    srv = server_factory(repo, bin_path=wrapper)
    wait_model_ready(srv, "simple")
    assert "Max open files            256" in Path(f"/proc/{srv.process.pid}/limits").read_text()
    stalled = [connect(srv) for _ in range(250)]
    try:
        # Half the file limit is the default cap: the server holds at most 128 and answers the rest
        # 503 (one more when the readiness probe's connection still held a slot as they arrived).
        refused, deadline = set(), time.monotonic() + 10
        while len(refused) < 250 - 128 and time.monotonic() < deadline:
            ready, _, _ = select.select([s for s in stalled if s not in refused], [], [], 0.5)
            refused.update(ready)
        assert len(refused) >= 250 - 128, f"only {len(refused)} of 250 stalled connections were answered"
        assert all(s.recv(100).startswith(b"HTTP/1.1 503") for s in refused)
        # Real clients get an answer, not a hang: HTTP a 503 naming the cap (or, if a slot came
        # free meanwhile, the inference), gRPC its inference.
        started = time.monotonic()
        c = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}", network_timeout=10)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for inp in inputs:
            inp.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        try:
            assert c.infer("simple", inputs).as_numpy("OUTPUT0").tolist() == [[2] * 16]
        except InferenceServerException as e:
            assert "--http-max-connections" in str(e), e
        c.close()
        assert time.monotonic() - started < 5
        assert_serves_grpc(srv)
    finally:
        for s in stalled:
            s.close()
    assert_slots_come_back(srv)


def rss_rise_mib(srv, before_kib: int, seconds: float) -> int:
    """The most the server's RSS rose above `before_kib` while sampled every 0.1 s for `seconds`."""
    peak = before_kib
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, status_kib(srv, "VmRSS"))
        time.sleep(0.1)
    return (peak - before_kib) // 1024


def open_unread_stream(srv, model: str, inputs) -> socket.socket:
    """Sends one request (`inputs`: (name, datatype, array)) on a gRPC stream over a raw HTTP/2
    connection that then reads no response: h2 takes the bytes but never acknowledges them, so the
    server's flow-control window to it closes. Returns once the responses have used that window
    up (the model is then producing into the server's buffers); the caller closes the socket."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    for name, datatype, values in inputs:
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.append(len(values))
        if datatype == "BYTES":
            raw = b"".join(len(v).to_bytes(4, "little") + v for v in values)
        else:
            raw = values.tobytes()
        request.raw_input_contents.append(raw)
    payload = request.SerializeToString()
    data = b"\0" + len(payload).to_bytes(4, "big") + payload
    sock = socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=30)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                               (":path", "/inference.GRPCInferenceService/ModelStreamInfer"),
                               ("content-type", "application/grpc"), ("te", "trailers")])
    sock.sendall(conn.data_to_send())
    sock.settimeout(0.05)
    sent = 0
    while sent < len(data):
        room = min(conn.local_flow_control_window(stream), conn.max_outbound_frame_size, len(data) - sent)
        if room > 0:
            conn.send_data(stream, data[sent:sent + room])
            sent += room
        else:
            # Window updates for what we send; the responses are read by h2 but their flow
            # control is never acknowledged, so the server's window to us closes.
            try:
                conn.receive_data(sock.recv(65536))
            except socket.timeout:
                pass
        sock.sendall(conn.data_to_send())
    # Responses arrive until the window the server was given is used up: then it is stalled.
    window = conn.local_settings.initial_window_size
    received, deadline = 0, time.monotonic() + 20
    while received < window - 1024 and time.monotonic() < deadline:
        try:
            events = conn.receive_data(sock.recv(65536))
        except socket.timeout:
            continue
        received += sum(e.flow_controlled_length for e in events if isinstance(e, h2.events.DataReceived))
    assert received >= window - 1024, f"only {received} bytes of responses arrived"
    return sock


def test_a_stream_nobody_reads_does_not_make_the_server_buffer_its_responses(server_factory, tmp_path):
    """A decoupled model producing two million responses to a gRPC client that reads none: the
    producer waits once the request's small buffer (and HTTP/2's window) is full. Before that
    back-pressure the server buffered every response (1,003 MiB of RSS within 2 s, here)."""
    repo = tmp_path / "repo"
    write_config_model(repo, "repeat_int32", REPEAT_CONFIG.format(name="repeat_int32"))
    srv = server_factory(repo)
    wait_model_ready(srv, "repeat_int32")
    n = 2_000_000
    before = status_kib(srv, "VmRSS")
    sock = open_unread_stream(srv, "repeat_int32", [("IN", "INT32", np.arange(n, dtype=np.int32)),
                                                    ("DELAY", "UINT32", np.zeros(n, dtype=np.uint32)),
                                                    ("WAIT", "UINT32", np.zeros(1, dtype=np.uint32))])
    try:
        # The model now produces as fast as it can be made to. Watch the server's memory.
        rise_mib = rss_rise_mib(srv, before, 3)
    finally:
        sock.close()
    print(f"RSS rise with a stalled reader: {rise_mib} MiB")
    # The request itself (16 MiB of inputs, decoded) is most of what remains.
    assert rise_mib < 256, f"the server's RSS rose by {rise_mib} MiB for a stream nobody reads"
    assert_serves_grpc_model(srv)


def test_a_stream_nobody_reads_holds_a_wasm_model_only_until_its_time_limit(server_factory, tmp_path):
    """The Wasm `repeat` guest (one instance, a 1 s time limit) streaming two million responses
    to a client that reads none: its send waits for the reader only until the execution's
    deadline, then fails and closes that request, so the instance is free again and the next
    client is answered. Before, the send waited for ever and so did every later request."""
    repo = tmp_path / "repo"
    copy_model(repo, "repeat")
    cfg = repo / "repeat" / "config.pbtxt"
    cfg.write_text(cfg.read_text()
                   + 'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
                   + 'parameters { key: "max_execute_ms" value: { string_value: "1000" } }\n')
    srv = server_factory(repo)
    wait_model_ready(srv, "repeat")
    sock = open_unread_stream(srv, "repeat", [("IN", "INT32", np.arange(2_000_000, dtype=np.int32))])
    try:
        started = time.monotonic()
        inputs = [grpcclient.InferInput("IN", [3], "INT32")]
        inputs[0].set_data_from_numpy(np.array([7, 8, 9], dtype=np.int32))
        got = grpc_stream_responses(f"127.0.0.1:{srv.grpc_port}", "repeat", inputs, ["OUT", "IDX"], timeout=20)
        assert got == [(7, 0), (8, 1), (9, 2)]
        # It waited for the stalled execution's 1 s, not for ever.
        assert time.monotonic() - started < 10
    finally:
        sock.close()
    assert "the caller of this request has not read its responses" in srv.log_text()
    srv.assert_alive()


def test_a_stream_nobody_reads_buffers_about_the_guests_memory_at_most(server_factory, tmp_path):
    """`faulty` (decoupled, 16 MiB of memory) streams 1,000 responses of 1 MiB to a gRPC client
    that reads none. The server keeps about max_memory_bytes of them for the reader, then the
    guest's send waits (until its deadline); before, every buffer on the way filled up (64 + 64
    responses, and 256 encoded in the gRPC stream): some 384 MiB for one request."""
    repo = tmp_path / "repo"
    copy_faulty(repo, "faulty_stream", "model_transaction_policy { decoupled: true }\n"
                "instance_group [ { count: 1 kind: KIND_CPU } ]\n")
    cfg = repo / "faulty_stream" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('string_value: "67108864"', 'string_value: "16777216"')
                   .replace('string_value: "500"', 'string_value: "2000"'))
    srv = server_factory(repo)
    wait_model_ready(srv, "faulty_stream")
    before = status_kib(srv, "VmRSS")
    sock = open_unread_stream(srv, "faulty_stream", [("MODE", "BYTES", [b"stream_big"]),
                                                     ("INPUT0", "FP32", np.array([1000, 1 << 18], dtype=np.float32))])
    try:
        rise_mib = rss_rise_mib(srv, before, 2.5)  # past its 2 s limit: all it will buffer is buffered
    finally:
        sock.close()
    print(f"RSS rise with a stalled reader of 1 MiB responses: {rise_mib} MiB")
    assert rise_mib < 128, f"the server's RSS rose by {rise_mib} MiB for one stream nobody reads"
    srv.assert_alive()


def assert_serves_grpc_model(srv) -> None:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    assert c.is_model_ready("repeat_int32")
    c.close()
