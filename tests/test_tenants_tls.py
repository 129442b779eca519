"""Tenants named by client certificates: HTTPS on the HTTP port (--http-use-ssl, client
certificates verified against --http-root-cert) and gRPC mutual TLS, with certificates made by the
test. A certificate from another authority never gets through the handshake, and the server keeps
serving."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tessera_testlib import copy_model, wait_until
from test_grpc_tls import pki, tls_client  # noqa: F401  (pki is a fixture)
from test_tenants import KEYS, grpc_simple_inputs, sha, simple_body, write_tenants

pytestmark = pytest.mark.timeout(300)


def cert_toml() -> str:
    return f"""
[[tenant]]
name = "by-cert"
models = ["simple"]
certificates = [{{ cn = "client" }}]

[[tenant]]
name = "alpha"
models = ["simple", "add_sub"]
keys = [{{ id = "alpha-1", sha256 = "{sha(KEYS['alpha'])}" }}]
"""


def test_https_client_certificates_and_keys_name_tenants(server_factory, tmp_path, pki):  # noqa: F811
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    copy_model(repo, "add_sub")
    path = write_tenants(tmp_path / "tenants.toml", cert_toml())
    srv = server_factory(repo, ["--tenants", str(path), "--http-use-ssl=true",
                                f"--http-server-cert={pki['server'][1]}", f"--http-server-key={pki['server'][0]}",
                                f"--http-root-cert={pki['ca'][1]}"], wait=False)
    ca = str(pki["ca"][1])
    base = f"https://127.0.0.1:{srv.port}"
    client = (str(pki["client"][1]), str(pki["client"][0]))
    wait_until(lambda: _status(f"{base}/v2/models/simple/ready", verify=ca, cert=client) == 200, 180, "ready", srv)
    # The certificate names the tenant: no key needed.
    r = requests.post(f"{base}/v2/models/simple/infer", json=simple_body(), verify=ca, cert=client, timeout=30)
    assert r.status_code == 200, r.text
    # by-cert may not call add_sub: it is not there for it.
    hidden = requests.get(f"{base}/v2/models/add_sub", verify=ca, cert=client, timeout=30)
    absent = requests.get(f"{base}/v2/models/nothing", verify=ca, cert=client, timeout=30)
    assert (hidden.status_code, hidden.text) == (absent.status_code, absent.text.replace("nothing", "add_sub"))
    # Without a certificate: a key works, nothing else does.
    keyed = requests.get(f"{base}/v2/models/add_sub", verify=ca, timeout=30,
                         headers={"Authorization": f"Bearer {KEYS['alpha']}"})
    assert keyed.status_code == 200, keyed.text
    anonymous = requests.get(f"{base}/v2/models/simple", verify=ca, timeout=30)
    assert anonymous.status_code == 401 and "client certificate" in anonymous.json()["error"]
    # A certificate from another authority fails the handshake; the server serves on.
    stranger = (str(pki["stranger"][1]), str(pki["stranger"][0]))
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{base}/v2/models/simple", verify=ca, cert=stranger, timeout=30)
    # Plain HTTP on the HTTPS port gets nothing.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{srv.port}/v2/health/live", timeout=10)
    assert requests.get(f"{base}/v2/health/live", verify=ca, timeout=30).status_code == 200


def _status(url: str, **kw) -> int:
    try:
        return requests.get(url, timeout=10, **kw).status_code
    except requests.exceptions.RequestException:
        return 0


def test_grpc_mutual_tls_certificates_name_tenants(server_factory, tmp_path, pki):  # noqa: F811
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    copy_model(repo, "add_sub")
    path = write_tenants(tmp_path / "tenants.toml", cert_toml())
    srv = server_factory(repo, ["--tenants", str(path), "--grpc-use-ssl-mutual=true",
                                f"--grpc-server-cert={pki['server'][1]}", f"--grpc-server-key={pki['server'][0]}",
                                f"--grpc-root-cert={pki['ca'][1]}"])
    c = tls_client(srv, pki, "client")
    wait_until(lambda: _ready(c, "simple"), 180, "simple ready", srv)
    out = c.infer("simple", grpc_simple_inputs())
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), 2 * np.arange(16).reshape(1, 16))
    assert not c.is_model_ready("add_sub")
    with pytest.raises(InferenceServerException) as e:
        c.get_model_metadata("add_sub")
    with pytest.raises(InferenceServerException) as absent:
        c.get_model_metadata("nothing")
    assert e.value.message() == absent.value.message().replace("nothing", "add_sub"), e.value
    c.close()
    # A certificate from another authority: no connection at all.
    c = tls_client(srv, pki, "stranger")
    with pytest.raises(InferenceServerException):
        c.is_server_live(client_timeout=5)
    c.close()
    c = tls_client(srv, pki, "client")
    assert c.is_server_live()
    c.close()


def _ready(client, model: str) -> bool:
    try:
        return client.is_model_ready(model)
    except InferenceServerException:
        return False
