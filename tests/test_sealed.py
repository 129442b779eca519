"""Models encrypted at rest (sealed): model.onnx, model.pt and model.wasm stored as JWE (A256KW or
dir, A256GCM), decrypted in memory with --model-keys. Files are sealed here by an independent
implementation (the `cryptography` package, as KServe's confidential storage initializer writes
them) and by `tessera seal`. Triton's own client examples run against the sealed repository; a
marker inside the sealed models is then looked for in every file the server wrote."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import requests
import tritonclient.http as httpclient
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import aes_key_wrap

from tessera_testlib import REPO_ROOT, run_cli, start_server

pytestmark = pytest.mark.timeout(600)

QUICKSTART = REPO_ROOT / "model-repos" / "quickstart"
CLIENT_EXAMPLES = Path(__file__).resolve().parent / "third_party" / "client"
MARKER = "TESSERA-SEALED-" + secrets.token_hex(8)
KEYS = {"k1": os.urandom(32), "k2": os.urandom(32)}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwk_set(keys: dict[str, bytes]) -> str:
    return json.dumps({"keys": [{"kty": "oct", "kid": kid, "k": b64(key)} for kid, key in keys.items()]})


def seal(plain: bytes, kid: str, key: bytes) -> bytes:
    """A JWE compact serialization, A256KW + A256GCM, made without Tessera's code."""
    header = b64(json.dumps({"alg": "A256KW", "enc": "A256GCM", "kid": kid}).encode())
    cek, iv = os.urandom(32), os.urandom(12)
    sealed = AESGCM(cek).encrypt(iv, plain, header.encode())
    return ".".join([header, b64(aes_key_wrap(key, cek)), b64(iv), b64(sealed[:-16]), b64(sealed[-16:])]).encode()


def with_custom_section(component: bytes, name: str, data: bytes) -> bytes:
    """The component with a custom section appended (a component may end with one)."""
    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)
    payload = leb(len(name)) + name.encode() + data
    return component + b"\x00" + leb(len(payload)) + payload


def copy_model(repo: Path, source: str, name: str, model_file: str, content: bytes) -> None:
    (repo / name / "1").mkdir(parents=True)
    config = (QUICKSTART / source / "config.pbtxt").read_text().replace(f'name: "{source}"', f'name: "{name}"')
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / model_file).write_bytes(content)


@pytest.fixture(scope="module")
def sealed(tmp_path_factory, tessera_binary):
    root = tmp_path_factory.mktemp("sealed")
    repo = root / "repo"
    keys = root / "keys.json"
    keys.write_text(jwk_set(KEYS))
    os.chmod(keys, 0o600)
    onnx_model = onnx.load(QUICKSTART / "simple" / "1" / "model.onnx")
    onnx_model.doc_string = MARKER
    simple = onnx_model.SerializeToString()
    copy_model(repo, "simple", "simple", "model.onnx", seal(simple, "k1", KEYS["k1"]))
    copy_model(repo, "simple", "simple_wrong_key", "model.onnx", seal(simple, "k1", os.urandom(32)))
    copy_model(repo, "simple", "simple_no_key", "model.onnx", seal(simple, "k9", KEYS["k1"]))
    torch_plain = (QUICKSTART / "text_scorer_torch" / "1" / "model.pt").read_bytes()
    copy_model(repo, "text_scorer_torch", "text_scorer_torch", "model.pt", seal(torch_plain, "k2", KEYS["k2"]))
    copy_model(repo, "text_scorer_torch", "text_scorer_torch_plain", "model.pt", torch_plain)
    # The Wasm guest is sealed by `tessera seal` (alg dir), with the marker in a custom section.
    plain_wasm = root / "plain.wasm"
    wasm = (QUICKSTART / "add_sub_rust" / "1" / "model.wasm").read_bytes()
    plain_wasm.write_bytes(with_custom_section(wasm, "tessera-test", MARKER.encode()))
    copy_model(repo, "add_sub_rust", "add_sub_rust", "model.wasm", b"")
    cli = run_cli(["seal", str(plain_wasm), str(repo / "add_sub_rust" / "1" / "model.wasm"), "--keys", str(keys),
                   "--kid", "k2", "--direct"])
    assert cli.returncode == 0, cli.stderr
    plain_wasm.unlink()
    (repo / "sealed_py" / "1").mkdir(parents=True)
    (repo / "sealed_py" / "config.pbtxt").write_text('name: "sealed_py"\nbackend: "python"\n')
    (repo / "sealed_py" / "1" / "model.py").write_bytes(seal(b"# " + MARKER.encode() + b"\n", "k1", KEYS["k1"]))
    dirs = {name: root / name for name in ("cache", "tmp", "logs")}
    for d in dirs.values():
        d.mkdir()
    good = ["simple", "text_scorer_torch", "text_scorer_torch_plain", "add_sub_rust"]
    flags = ["--model-control-mode=explicit", *[f"--load-model={m}" for m in good], f"--model-keys={keys}",
             f"--wasm-cache-dir={dirs['cache']}", "--log-verbose=1"]
    srv = start_server(dirs["logs"], [repo], flags, env={"TMPDIR": str(dirs["tmp"])}, ready=good)
    try:
        yield srv, root
    finally:
        srv.stop_and_check()


@pytest.mark.parametrize("example, last", [("simple_http_infer_client.py", "15 - -1 = 16"),
                                           ("simple_grpc_infer_client.py", "PASS: infer")])
def test_tritons_client_examples_pass_on_a_sealed_model(sealed, example, last):
    srv, _ = sealed
    url = f"127.0.0.1:{srv.grpc_port if 'grpc' in example else srv.http_port}"
    run = subprocess.run([sys.executable, str(CLIENT_EXAMPLES / example), "-u", url], capture_output=True, text=True,
                         timeout=120)
    # Each example checks every answer and exits 1 at the first wrong one.
    assert run.returncode == 0, run.stdout + run.stderr
    assert last in run.stdout, run.stdout


def test_sealed_torchscript_and_wasm_models_answer_as_plain_ones(sealed):
    srv, _ = sealed
    client = httpclient.InferenceServerClient(srv.url)
    try:
        answers = []
        for model in ("text_scorer_torch", "text_scorer_torch_plain"):
            inputs = [httpclient.InferInput(f"INPUT__{i}", [1, 16], "INT64") for i in range(2)]
            for inp in inputs:
                inp.set_data_from_numpy(np.arange(16, dtype=np.int64).reshape(1, 16))
            result = client.infer(model, inputs)
            answers.append((result.as_numpy("OUTPUT__0").tolist(), result.as_numpy("OUTPUT__1").tolist()))
        assert answers[0] == answers[1]
        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
        for inp in inputs:
            inp.set_data_from_numpy(np.full((1, 16), 2.0, dtype=np.float32))
        result = client.infer("add_sub_rust", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 4.0))
    finally:
        client.close()


@pytest.mark.parametrize("model, reason", [
    ("simple_wrong_key", "its key could not be unwrapped with key id 'k1': a wrong key"),
    ("simple_no_key", "it is sealed with key id 'k9', and this server has no such key"),
    ("sealed_py", "sealed Python models are not served yet"),
])
def test_a_model_that_cannot_be_opened_is_unavailable_with_the_reason(sealed, model, reason):
    srv, _ = sealed
    r = requests.post(srv.http(f"/v2/repository/models/{model}/load"), timeout=120)
    assert r.status_code == 400, r.text
    assert reason in r.json()["error"], r.text
    index = requests.post(srv.http("/v2/repository/index"), json={}, timeout=30).json()
    state = next(m for m in index if m["name"] == model)
    assert state["state"] == "UNAVAILABLE" and reason in state["reason"], state
    assert requests.get(srv.http("/v2/models/simple/ready"), timeout=10).status_code == 200


def test_no_plaintext_of_a_sealed_model_is_written_anywhere(sealed):
    srv, root = sealed
    searched = 0
    for path in root.rglob("*"):
        if path.is_file():
            searched += 1
            assert MARKER.encode() not in path.read_bytes(), f"plaintext of a sealed model in {path}"
    assert any((root / "repo").rglob("model.onnx")) and searched >= 8
    assert not any((root / "cache").rglob("*.cwasm")), "a sealed component was compiled to the disk cache"
