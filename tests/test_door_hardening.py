"""The doors when the process runs out of file descriptors: a client past what the server can
open is refused at once (HTTP 503 with a message, gRPC closed), not left hanging in the backlog,
the connections already open keep being served, and new ones are taken again once descriptors
free up (host/src/execution/accept.rs)."""

from __future__ import annotations

import socket
import time

import pytest
import requests

from tessera_testlib import copy_model, tessera_bin, wait_model_ready, wait_until

pytestmark = pytest.mark.timeout(180)

OPEN_FILES = 128


def test_out_of_descriptors_refuses_new_clients_at_once_and_recovers(server_factory, repo, tmp_path):
    copy_model(repo, "simple")
    wrapper = tmp_path / "tessera-limited"
    wrapper.write_text(f'#!/bin/sh\nulimit -n {OPEN_FILES}\nexec "{tessera_bin()}" "$@"\n')
    wrapper.chmod(0o755)
    # Connection caps above what the descriptors allow, so that the descriptors run out first.
    srv = server_factory(repo, ["--http-max-connections=1000", "--grpc-max-connections=1000"], bin_path=wrapper)
    wait_model_ready(srv, "simple")
    held: list[socket.socket] = []
    refusal = None
    try:
        for _ in range(OPEN_FILES):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            started = time.monotonic()
            answer = s.recv(4096)
            assert time.monotonic() - started < 5, "a client waited instead of being answered"
            if b" 503 " in answer.split(b"\r\n")[0]:
                refusal = answer
                s.close()
                break
            assert b" 200 " in answer.split(b"\r\n")[0], answer[:200]
            held.append(s)
        assert refusal is not None, f"{len(held)} connections open and none refused"
        assert b"the server is out of file descriptors; retry later" in refusal, refusal
        # A connection opened before keeps being served.
        held[0].sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 200 " in held[0].recv(4096).split(b"\r\n")[0]
    finally:
        for s in held:
            s.close()
    # Descriptors free again: new clients are served.
    wait_until(lambda: requests.get(srv.http("/v2/health/live"), timeout=5).status_code == 200, 15,
               "served again once connections closed", srv)
    log = srv.log_text()
    assert "out of file descriptors" in log
    assert log.count("refusing new connections until some close") <= 3, "the warning is rate-limited"
