"""gRPC over TLS, one-way and mutual (rustls), with certificates made by the test, on tritonclient."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, wait_model_ready


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.crt"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "2", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, cert


def make_leaf(d: Path, name: str, ca: tuple[Path, Path], *, server: bool) -> tuple[Path, Path]:
    key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt", d / f"{name}.ext"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    usage = "serverAuth" if server else "clientAuth"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   f"extendedKeyUsage={usage}\n" + ("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else ""))
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return key, cert


@pytest.fixture
def pki(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    ca = make_ca(d, "ca")
    other_ca = make_ca(d, "other-ca")
    return {
        "ca": ca,
        "server": make_leaf(d, "server", ca, server=True),
        "client": make_leaf(d, "client", ca, server=False),
        "stranger": make_leaf(d, "stranger", other_ca, server=False),
    }


def wait_exit(srv, deadline: float = 60) -> int:
    try:
        return srv.process.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server kept running although it should have exited:\n{srv.log_text()[-3000:]}", pytrace=False)


def tls_client(srv, pki, client: str | None) -> grpcclient.InferenceServerClient:
    kw = {"root_certificates": str(pki["ca"][1])}
    if client:
        kw.update(private_key=str(pki[client][0]), certificate_chain=str(pki[client][1]))
    return grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}", ssl=True, **kw)


def assert_simple_infer(c) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    np.testing.assert_array_equal(c.infer("simple", inputs).as_numpy("OUTPUT0"), a + a)


def test_grpc_tls_one_way(server_factory, tmp_path, pki):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--grpc-use-ssl=true", f"--grpc-server-cert={pki['server'][1]}",
                                f"--grpc-server-key={pki['server'][0]}"])
    wait_model_ready(srv, "simple")
    c = tls_client(srv, pki, None)
    assert c.is_server_live()
    assert_simple_infer(c)
    c.close()
    # A plaintext client gets no answer from a TLS door.
    plain = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    with pytest.raises(InferenceServerException):
        plain.is_server_live(client_timeout=5)
    plain.close()


def test_grpc_tls_mutual_refuses_unknown_clients(server_factory, tmp_path, pki):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    srv = server_factory(repo, ["--grpc-use-ssl-mutual=true", f"--grpc-server-cert={pki['server'][1]}",
                                f"--grpc-server-key={pki['server'][0]}", f"--grpc-root-cert={pki['ca'][1]}"])
    wait_model_ready(srv, "simple")
    c = tls_client(srv, pki, "client")
    assert_simple_infer(c)
    c.close()
    for who in (None, "stranger"):  # no certificate; one signed by another authority
        c = tls_client(srv, pki, who)
        with pytest.raises(InferenceServerException) as e:
            c.is_server_live(client_timeout=5)
        assert "UNAVAILABLE" in str(e.value) or "DEADLINE" in str(e.value), e.value
        c.close()
    # The door still serves the right client afterwards.
    c = tls_client(srv, pki, "client")
    assert c.is_server_live()
    c.close()


@pytest.mark.parametrize("flags, message", [
    (["--grpc-use-ssl=true"], "--grpc-use-ssl needs --grpc-server-cert"),
    (["--grpc-use-ssl-mutual=true", "--grpc-server-cert={cert}", "--grpc-server-key={key}"],
     "--grpc-use-ssl-mutual needs --grpc-root-cert"),
    (["--grpc-use-ssl=true", "--grpc-server-cert={key}", "--grpc-server-key={key}"], "gRPC TLS configuration"),
])
def test_grpc_tls_bad_flags_stop_the_start(server_factory, tmp_path, pki, flags, message):
    repo = tmp_path / "repo"
    repo.mkdir()
    flags = [f.format(cert=pki["server"][1], key=pki["server"][0]) for f in flags]
    srv = server_factory(repo, flags, expect_exit=True)
    assert wait_exit(srv) > 0
    assert message in srv.log_text(), srv.log_text()
