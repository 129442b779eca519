"""Fixtures that run the real Tessera binary.

- ``server``: the session-wide server on model-repos/quickstart (models add_sub, simple, classifier),
  checked after every test for a crash or a panic so that the culprit test is the one reported.
- ``server_factory``: starts function-scoped servers on custom repositories / flags.
- ``repo``: an empty model repository directory under tmp_path.

The binary is $TESSERA_BIN or target/debug/tessera; if it is missing the tests fail (never skip).

scripts/test.sh runs the suite on two pytest-xdist workers (`-n 2`): each file runs whole on
one worker, so its module fixtures start once; the files whose clients hard-code
ports 8000-8002 share one worker, one after another; every worker's servers share one compile
cache (`wasm_cache`), and servers sharing a cache compile each guest once between them.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tessera_testlib import (
    TesseraServer,
    quickstart_repo,
    start_server,
    tessera_bin,
)

QUICKSTART_MODELS = ("add_sub", "simple", "classifier")

# Their clients talk to Triton's and PyTriton's default ports, 8000-8002.
FIXED_PORT_FILES = {"test_deploy.py", "test_deploy_image.py", "test_pytriton_examples.py", "test_triton_examples.py",
                    "test_triton_openai_frontend.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist: whole files to a worker (their module fixtures start once), and the files that
    need fixed ports (8000-8002, and 9000 for Triton's OpenAI frontend) together, one after another."""
    from xdist.scheduler import LoadScopeScheduling

    class Files(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ports-8000-8002" if Path(path).name in FIXED_PORT_FILES else path

    return Files(config, log)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller, or a run without workers
        config.tessera_wasm_cache = Path(tempfile.mkdtemp(prefix="tessera-test-wasm-cache-"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist: each worker gets the controller's compile cache directory."""
    node.workerinput["tessera_wasm_cache"] = str(node.config.tessera_wasm_cache)


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(config.tessera_wasm_cache, ignore_errors=True)


@pytest.fixture(scope="session")
def tessera_binary() -> Path:
    return tessera_bin()


@pytest.fixture(scope="session")
def _quickstart_server(tmp_path_factory, tessera_binary) -> TesseraServer:
    srv = start_server(tmp_path_factory.mktemp("quickstart-server"), [quickstart_repo()], name="quickstart",
                       ready=QUICKSTART_MODELS)
    yield srv
    srv.stop_and_check()


@pytest.fixture
def server(_quickstart_server: TesseraServer) -> TesseraServer:
    """The shared quickstart server. Before: it must be up. After: still up, no new panic in its log."""
    srv = _quickstart_server
    assert srv.is_running(), (
        f"the shared quickstart server died before this test (code {srv.process.poll()}); see {srv.log_path}"
    )
    srv.assert_no_new_panic()  # anything earlier belongs to earlier tests (already reported)
    yield srv
    srv.assert_no_new_panic()
    assert srv.is_running(), (
        f"the shared quickstart server exited during this test (code {srv.process.poll()}); see {srv.log_path}"
    )


class ServerFactory:
    """Starts servers for one test; all are stopped and checked (no crash, no panic) at teardown."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.servers: list[tuple[TesseraServer, bool]] = []

    def __call__(self, repos, extra_args=(), *, expect_exit: bool = False, **kw) -> TesseraServer:
        """Start and wait for liveness; with expect_exit=True, don't wait (the test expects it to exit)."""
        if isinstance(repos, (str, Path)):
            repos = [repos]
        if expect_exit:
            kw["wait"] = False
        srv = start_server(self.log_dir, repos, extra_args, name=f"server{len(self.servers)}", **kw)
        self.servers.append((srv, not expect_exit))
        return srv

    def close(self) -> None:
        errors = []
        for srv, expect_running in self.servers:
            try:
                srv.stop_and_check(expect_running=expect_running)
            except AssertionError as e:
                errors.append(f"{srv.argv}: {e}")
        assert not errors, "\n\n".join(errors)


@pytest.fixture
def server_factory(tmp_path, tessera_binary) -> ServerFactory:
    factory = ServerFactory(tmp_path / "logs")
    yield factory
    factory.close()


@pytest.fixture(scope="session")
def wasm_cache(request) -> Path:
    """A --wasm-cache-dir for the run's servers, apart from the user's cache (a compiled Python
    guest takes ~35 MB) and removed after the run. One for the whole run, every worker's: the
    cache is keyed by each component's content, so every guest is compiled once however many
    modules load it."""
    workerinput = getattr(request.config, "workerinput", None)
    return Path(workerinput["tessera_wasm_cache"]) if workerinput else request.config.tessera_wasm_cache


@pytest.fixture
def repo(tmp_path) -> Path:
    d = tmp_path / "repo"
    d.mkdir()
    return d
