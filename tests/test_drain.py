"""The SIGTERM drain and the connections that hold slots: at the signal
both doors stop taking connections at once while the requests already sent on open connections
are all answered, and the server exits 0 without a panic; gRPC connections idle between calls
are closed (gracefully) after --grpc-max-connection-idle while busy ones are not; HTTP sockets
that never send a request are closed after --http-header-read-timeout; an in-process stream cut
by stop() ends with an error saying so."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import h2.config
import h2.connection
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tessera_testlib import (assert_no_panic, connection_refused, slow_identity_config, wait_model_ready, wait_until,
                             write_config_model)

from test_lifecycle import write_repeat

pytestmark = pytest.mark.timeout(180)

SLOW_MS = 3000


def write_slow(repo, name: str = "slow", delay_ms: int = SLOW_MS) -> None:
    write_config_model(repo, name, slow_identity_config(name, delay_ms,
                                                        extra="instance_group [ { count: 8 kind: KIND_CPU } ]\n"))


def keep_alive_connection(port: int) -> socket.socket:
    """A connection that has been served once and is now an idle keep-alive one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(s).startswith(b"HTTP/1.1 200"), "warm-up"
    return s


def read_response(s: socket.socket) -> bytes:
    """One response (its head and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed before answering: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                   if line.startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk, "closed inside the body"
        body += chunk
    return head + b"\r\n\r\n" + body


def slow_infer(value: int) -> bytes:
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [value]}]})
    return (f"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}").encode()


def test_sigterm_refuses_new_connections_at_once_and_answers_every_request_already_sent(server_factory, repo):
    write_slow(repo)
    srv = server_factory(repo, ["--exit-timeout-secs=30", "--http-keepalive-timeout=600"])
    wait_model_ready(srv, "slow")
    connections = [keep_alive_connection(srv.http_port) for _ in range(12)]
    # Four requests sent first (executing, 3 s each, by the time the signal comes) ...
    for i, c in enumerate(connections[:4]):
        c.sendall(slow_infer(i))
    # ... and eight written on idle keep-alive connections while the server is stopped, so that it
    # cannot have read them when it sees the signal.
    os.kill(srv.process.pid, signal.SIGSTOP)
    try:
        for i, c in enumerate(connections[4:], start=4):
            c.sendall(slow_infer(i) if i % 2 else b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        srv.process.send_signal(signal.SIGTERM)
    finally:
        os.kill(srv.process.pid, signal.SIGCONT)
    signalled = time.monotonic()
    # Both doors refuse new clients at once, long before the requests in flight are done.
    wait_until(lambda: connection_refused(srv.http_port) and connection_refused(srv.grpc_port), 2, "new connections refused", srv)
    assert time.monotonic() - signalled < SLOW_MS / 1000, "the doors kept accepting while requests ran"
    for i, c in enumerate(connections):
        c.settimeout(30)
        answer = read_response(c)
        assert answer.startswith(b"HTTP/1.1 200"), (i, answer[:300])
        if i < 4 or i % 2:
            assert f'"data":[{i}]'.encode() in answer.replace(b" ", b""), (i, answer)
            # Answered after the signal: the connection's last answer says so.
            assert b"connection: close" in answer.lower(), (i, answer[:300])
        assert c.recv(1) == b"", "the connection closes after its last answer"
        c.close()
    rc = srv.process.wait(timeout=30)
    srv.mark_stopped(rc)
    log = srv.log_text()
    assert rc == 0, log[-2000:]
    assert_no_panic(log)
    assert "draining: not ready, not taking connections" in log
    assert "still in flight" not in log


def h2_connection(port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def h2_call(sock: socket.socket, conn: h2.connection.H2Connection, path: str, message: bytes) -> dict:
    """One unary gRPC call on an open HTTP/2 connection; its headers and trailers."""
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":authority", "x"), (":path", path),
                               ("content-type", "application/grpc"), ("te", "trailers")])
    conn.send_data(stream, b"\0" + len(message).to_bytes(4, "big") + message, end_stream=True)
    sock.sendall(conn.data_to_send())
    answer: dict[str, str] = {}
    while True:
        data = sock.recv(65536)
        assert data, "the connection closed during the call"
        for event in conn.receive_data(data):
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                answer.update({k.decode(): v.decode() for k, v in event.headers})
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                sock.sendall(conn.data_to_send())
                return answer
        sock.sendall(conn.data_to_send())


def closed_after(sock: socket.socket, timeout: float) -> tuple[float, bool]:
    """Seconds until the server closes the connection, answering its pings meanwhile (as every
    gRPC client does; the server's graceful close waits for that answer), and whether it said
    GOAWAY first. Reads raw frames: the h2 library stops at a GOAWAY."""
    started = time.monotonic()
    sock.settimeout(timeout)
    goaway = False
    pending = b""
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, socket.timeout, TimeoutError):
            data = b""
        if not data:
            return time.monotonic() - started, goaway
        pending += data
        while len(pending) >= 9 and len(pending) >= 9 + int.from_bytes(pending[:3], "big"):
            length, kind, flags = int.from_bytes(pending[:3], "big"), pending[3], pending[4]
            payload, pending = pending[9:9 + length], pending[9 + length:]
            goaway |= kind == 7
            if kind == 6 and not flags & 1:  # PING: answer it
                try:
                    sock.sendall((8).to_bytes(3, "big") + bytes([6, 1]) + bytes(4) + payload)
                except OSError:
                    pass


SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive"
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def slow_infer_message(value: int) -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="slow")
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([value], dtype=np.int32).tobytes())
    return request.SerializeToString()


def established(port: int) -> int:
    """Open TCP connections whose local end is `port` (the server's side of a door's connections)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 01: ESTABLISHED
                    count += 1
    return count


def test_a_grpc_connection_idle_between_calls_is_closed_and_a_busy_one_is_not(server_factory, repo):
    write_slow(repo, delay_ms=2500)
    srv = server_factory(repo, ["--grpc-max-connection-idle=1000"])
    wait_model_ready(srv, "slow")
    # One call, then silence: closed (GOAWAY first) about a second later, not two hours.
    sock, conn = h2_connection(srv.grpc_port)
    assert h2_call(sock, conn, SERVER_LIVE, b"").get("grpc-status") == "0"
    took, goaway = closed_after(sock, 15)
    assert 0.9 <= took < 5, f"the idle connection was closed after {took:.1f}s"
    assert goaway, "closed without GOAWAY: its client could not tell it from a failure"
    sock.close()
    # A call of 2.5 s, longer than the idle time: its connection stays open and takes the next
    # call; the idle clock counts from the end of the last one.
    sock, conn = h2_connection(srv.grpc_port)
    assert h2_call(sock, conn, MODEL_INFER, slow_infer_message(7)).get("grpc-status") == "0"
    assert h2_call(sock, conn, SERVER_LIVE, b"").get("grpc-status") == "0", "the busy connection was closed"
    took, _ = closed_after(sock, 15)
    assert 0.9 <= took < 5, f"closed {took:.1f}s after its last call"
    sock.close()
    # A Triton client's channel reconnects by itself after its idle connection was closed.
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    assert client.is_server_live()
    wait_until(lambda: established(srv.grpc_port) == 0, 15, "the idle channel's connection closed", srv)
    assert client.is_server_live(), "a tritonclient channel works again after the idle close"
    client.close()


def test_a_grpc_connection_stays_open_across_calls_without_a_pause_as_long_as_the_idle_time(
        server_factory, repo):
    srv = server_factory(repo, ["--grpc-max-connection-idle=1000"])
    sock, conn = h2_connection(srv.grpc_port)
    started = time.monotonic()
    calls = 0
    # Calls 0.2 s apart for 3 s, three times the idle time: all on the one connection.
    while time.monotonic() - started < 3:
        assert h2_call(sock, conn, SERVER_LIVE, b"").get("grpc-status") == "0", f"call {calls}"
        calls += 1
        time.sleep(0.2)  # the client's pace, not a wait for the server
    assert calls >= 10
    sock.close()


def test_an_http_socket_that_never_sends_a_request_is_closed_after_the_header_timeout(server_factory, repo):
    srv = server_factory(repo, ["--http-header-read-timeout=1", "--http-keepalive-timeout=600"])
    silent = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    used = keep_alive_connection(srv.http_port)
    started = time.monotonic()
    silent.settimeout(15)
    assert silent.recv(1) == b"", "the silent socket was closed"
    took = time.monotonic() - started
    assert took < 5, f"a silent socket held its slot {took:.1f}s (--http-header-read-timeout=1)"
    # A used keep-alive connection is kept for --http-keepalive-timeout, not the header's second.
    used.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(used).startswith(b"HTTP/1.1 200")
    silent.close()
    used.close()


def long_stream_inputs(count: int = 40, delay_ms: int = 500) -> dict:
    return {"IN": np.arange(count, dtype=np.int32), "DELAY": np.full(count, delay_ms, dtype=np.uint32),
            "WAIT": np.array([0], dtype=np.uint32)}


def test_an_in_process_stream_cut_by_stop_ends_with_an_error(repo):
    import tessera.tritonserver as tritonserver

    write_repeat(repo)
    server = tritonserver.Server(model_repository=str(repo), exit_timeout=1, log_info=False)
    server.start(wait_until_ready=True, timeout=120)
    model = server.model("slow_repeat")
    # 40 responses 0.5 s apart: 20 s, far past the exit timeout.
    iterator = model.infer(inputs=long_stream_inputs(), raise_on_error=False)
    raising = model.infer(inputs=long_stream_inputs())
    got: list = []
    raised: list = []

    def read() -> None:
        got.extend(iterator)

    def read_raising() -> None:
        try:
            for _ in raising:
                pass
        except tritonserver.TritonError as e:
            raised.append(e)

    readers = [threading.Thread(target=read), threading.Thread(target=read_raising)]
    for reader in readers:
        reader.start()
    wait_until(lambda: len(got) >= 1, 30, "the stream's first response")
    server.stop()
    for reader in readers:
        reader.join(30)
        assert not reader.is_alive()
    assert 1 <= len(got) < 40
    last = got[-1]
    assert last.final, "the cut ends the stream"
    assert isinstance(last.error, tritonserver.UnavailableError), last
    assert "stopped before the request finished" in str(last.error), last.error
    assert all(r.error is None and not r.final for r in got[:-1]), "only the last response is the cut"
    assert len(raised) == 1 and isinstance(raised[0], tritonserver.UnavailableError), raised
