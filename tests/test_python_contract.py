"""The python backend's contract on Tessera: every case of
tests/python_contract/cases.py (and cases_*.py beside it) against one server serving
tests/python_contract/models, the same models and cases run.py runs against the real Triton 2.51.

A case this server fails by design is in cases.EXPECT (with why): it passes here when it fails as
expected, and fails here when it passes (the entry no longer holds). The server runs with explicit
model control, as the finalize case unloads and reloads a model, and with the two environment
variables the environment cases read (cases_async_env.py), both granted to guests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tessera_testlib import start_server

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "python_contract"))

import cases  # noqa: E402
import run  # noqa: E402

pytestmark = pytest.mark.timeout(900)
MODELS = HERE / "python_contract" / "models"
# A cold start builds every model.py (numpy guests: tens of seconds each on a busy machine).
LOAD_DEADLINE = 900.0
CASES = run.load_cases()


@pytest.fixture(scope="module")
def contract_server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("python-contract"), [MODELS],
                       ["--model-control-mode", "explicit", "--load-model", "*",
                        "--guest-env", "CONTRACT_GREETING,CONTRACT_SECRET"],
                       env={"CONTRACT_GREETING": "hello", "CONTRACT_SECRET": "s3cr3t"},
                       deadline=LOAD_DEADLINE, name="contract",
                       ready=sorted(p.name for p in MODELS.iterdir() if (p / "config.pbtxt").is_file()),
                       ready_deadline=LOAD_DEADLINE)
    ctx = cases.Ctx(http_url=srv.base_url, grpc_url=f"127.0.0.1:{srv.grpc_port}", server="tessera",
                    log_path=str(srv.log_path))
    yield srv, ctx
    ctx.close()
    srv.stop_and_check()


@pytest.mark.parametrize("name", [name for name, _, _ in CASES])
def test_case(contract_server, name):
    srv, ctx = contract_server
    fn = next(fn for n, _, fn in CASES if n == name)
    outcome, _, detail = run.run_case(ctx, name, fn)
    srv.assert_alive()
    if outcome == "skip":
        pytest.skip(detail)
    assert outcome in ("pass", "expected"), f"{name}: {outcome}: {detail}"
