"""Bodies past the size limit (--http-max-input-size; Triton's default is 64 MiB): refused with 400
or 413 and an error message, whether the length is announced or chunked, counted after
decompression; a Content-Length the body never fills does not make the server allocate it. Each
case then proves the server still serves a good request. At most ~70 MiB is sent."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time

import pytest

from tessera_testlib import (
    EXPECT,
    TesseraServer,
    error_message,
    assert_serves,
    post_infer,
    quickstart_repo,
    simple_json_request,
    start_server,
)


def _raw_post(server: TesseraServer, path: str, headers: dict, chunks, total_timeout: float = 60.0):
    """Send a request over a raw socket from a sender thread while reading the response.

    Returns (status or None, response bytes, send error or None). The server may answer early and
    close the connection mid-upload; that is fine (a reset is reported, never raised)."""
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=total_timeout)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.http_port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "Connection: close\r\n\r\n"
    send_error: list = []

    def sender():
        try:
            sock.sendall(head.encode())
            for c in chunks:
                sock.sendall(c)
        except OSError as e:
            send_error.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    data = b""
    deadline = time.monotonic() + total_timeout
    try:
        while time.monotonic() < deadline:
            try:
                piece = sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not piece:
                break
            data += piece
            if b"\r\n\r\n" in data:
                head_part, _, rest = data.partition(b"\r\n\r\n")
                cl = [l for l in head_part.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(rest) >= int(cl[0].split(b":")[1]):
                    break
    finally:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        t.join(timeout=30)
    status = None
    if data.startswith(b"HTTP/1."):
        status = int(data.split(b" ", 2)[1])
    return status, data, (send_error[0] if send_error else None)


def _body_of(raw: bytes) -> bytes:
    return raw.partition(b"\r\n\r\n")[2]


def test_oversized_body_is_rejected(server):
    """~70 MiB: a *valid* infer request padded by a huge id. Triton's default
    --http-max-input-size is 64 MiB; a server without any limit would answer 200 here."""
    pad = 70 * 1024 * 1024
    prefix = json.dumps(simple_json_request())[:-1].encode() + b', "id": "'
    suffix = b'"}'
    total = len(prefix) + pad + len(suffix)
    block = b"x" * (1024 * 1024)

    def chunks():
        yield prefix
        for _ in range(pad // len(block)):
            yield block
        yield suffix

    status, raw, _ = _raw_post(server, "/v2/models/simple/infer",
                               {"Content-Type": "application/json", "Content-Length": str(total)}, chunks())
    if status is not None:
        assert status in EXPECT["body_too_large"], f"HTTP {status} for a {total}-byte body: {raw[:300]!r}"
        if status != 413 or _body_of(raw):
            msg = json.loads(_body_of(raw))["error"]
            assert msg.strip()
    # else: the server cut the connection before we could read an answer; acceptable if it survives.
    assert_serves(server)


def test_oversized_chunked_body_is_rejected(server):
    pad = 70 * 1024 * 1024
    block = b"x" * (1024 * 1024)

    def chunks():
        first = json.dumps(simple_json_request())[:-1].encode() + b', "id": "'
        yield b"%x\r\n%s\r\n" % (len(first), first)
        for _ in range(pad // len(block)):
            yield b"%x\r\n%s\r\n" % (len(block), block)
        yield b'2\r\n"}\r\n0\r\n\r\n'

    status, raw, _ = _raw_post(server, "/v2/models/simple/infer",
                               {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}, chunks())
    if status is not None:
        assert status in EXPECT["body_too_large"], f"HTTP {status}: {raw[:300]!r}"
    assert_serves(server)


SMALL_LIMIT = 1 << 20  # 1 MiB


@pytest.fixture(scope="module")
def small_limit_server(tmp_path_factory, tessera_binary):
    """A server with --http-max-input-size 1 MiB (Triton's flag; default 64 MiB)."""
    srv = start_server(tmp_path_factory.mktemp("small-limit"), [quickstart_repo()],
                       ["--http-max-input-size", str(SMALL_LIMIT)], name="small-limit", ready=["simple"])
    yield srv
    srv.stop_and_check()


def _padded_request(pad: int) -> bytes:
    """A valid infer request for simple whose JSON is padded to ~pad bytes by a long id."""
    return json.dumps(simple_json_request(id="x" * pad)).encode()


def test_small_limit_accepts_body_under_limit(small_limit_server):
    srv = small_limit_server
    body = _padded_request(SMALL_LIMIT - 4096)
    assert len(body) < SMALL_LIMIT
    r = post_infer(srv, "simple", body)
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["id"]) == SMALL_LIMIT - 4096


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_small_limit_rejects_body_over_limit(small_limit_server, chunked):
    srv = small_limit_server
    body = _padded_request(2 * SMALL_LIMIT)
    if chunked:
        step = 64 * 1024
        chunks = [b"%x\r\n%s\r\n" % (len(body[i:i + step]), body[i:i + step]) for i in range(0, len(body), step)]
        chunks.append(b"0\r\n\r\n")
        headers = {"Transfer-Encoding": "chunked"}
    else:
        chunks = [body]
        headers = {"Content-Length": str(len(body))}
    status, raw, _ = _raw_post(srv, "/v2/models/simple/infer", headers, chunks)
    assert status is not None, f"no HTTP answer to a {len(body)}-byte body over the {SMALL_LIMIT}-byte limit"
    assert status in EXPECT["body_too_large"], f"HTTP {status}: {raw[:300]!r}"
    assert json.loads(_body_of(raw))["error"].strip()
    assert_serves(srv)


def test_small_limit_applies_after_decompression(small_limit_server):
    """A gzip bomb: 8 KiB on the wire, 8 MiB once inflated; the limit counts the inflated size."""
    srv = small_limit_server
    bomb = gzip.compress(_padded_request(8 * SMALL_LIMIT))
    assert len(bomb) < SMALL_LIMIT // 8
    r = post_infer(srv, "simple", bomb, headers={"Content-Encoding": "gzip"})
    assert r.status_code in EXPECT["body_too_large"], f"HTTP {r.status_code}: {r.text[:300]!r}"
    error_message(r)
    assert_serves(srv)


def test_lying_content_length_then_close(server):
    """Content-Length promises 1 GiB, a few KB arrive, then the client hangs up: the server must
    neither allocate the promised size up front and die, nor stop serving others."""
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
    try:
        sock.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1073741824\r\n\r\n" + b"{" * 4096)
    finally:
        sock.close()
    assert_serves(server)
