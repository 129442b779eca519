"""Command line: flags, help, the tritonserver personality, exit-on-error, start-up failures, signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest
import requests
import tritonclient.http as httpclient

from tessera_testlib import (
    STARTUP_DEADLINE,
    assert_no_panic,
    build_argv,
    copy_model,
    free_ports,
    model_ready,
    quickstart_repo,
    run_cli,
    server_env,
    tail,
    tessera_bin,
    wait_model_ready,
)


def local_args(*extra: str) -> list[str]:
    """serve + loopback address + free ports (so nothing ever binds a public interface or a fixed port)."""
    http, grpc, metrics = free_ports(3)
    return ["serve", "--http-address", "127.0.0.1", "--http-port", str(http), "--grpc-port", str(grpc),
            "--metrics-port", str(metrics), *extra]


# ---------------------------------------------------------------------------------------------
# Flags and help
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--no-such-flag", "--no-such-flag=1", "--http-prot"])
def test_unknown_flag_fails_and_names_it(flag):
    cp = run_cli(local_args("--model-repository", str(quickstart_repo()), flag))
    assert cp.returncode != 0, f"unknown flag {flag} accepted; stdout={cp.stdout!r}"
    name = flag.split("=")[0]
    assert name in cp.stderr, f"stderr does not name {name}: {cp.stderr!r}"


def test_help():
    cp = run_cli(["--help"])
    assert cp.returncode == 0, cp.stderr
    assert "serve" in cp.stdout
    cp = run_cli(["serve", "--help"])
    assert cp.returncode == 0, cp.stderr
    for flag in ("--model-repository", "--http-port", "--grpc-port", "--metrics-port", "--model-control-mode",
                 "--load-model", "--repository-poll-secs", "--strict-model-config", "--exit-on-error"):
        assert flag in cp.stdout, f"serve --help does not document {flag}"


def test_missing_model_repository_fails():
    cp = run_cli(local_args())
    assert cp.returncode != 0
    assert "model-repository" in cp.stderr or "model-store" in cp.stderr, cp.stderr


def test_nonexistent_model_repository_fails(tmp_path):
    missing = tmp_path / "does-not-exist"
    cp = run_cli(local_args("--model-repository", str(missing)), timeout=STARTUP_DEADLINE)
    assert cp.returncode != 0
    assert str(missing) in cp.stdout + cp.stderr, cp.stderr


@pytest.mark.parametrize("args,needle", [
    (["--model-control-mode", "sometimes"], "sometimes"),
    (["--http-port", "notaport"], "notaport"),
    (["--repository-poll-secs", "-3"], "-3"),
    (["--exit-on-error", "maybe"], "maybe"),
    (["--metrics-config", "histogram_latencies"], "<setting>=<value>. Got histogram_latencies"),
    (["--metrics-config", "summary_quantiles=0.5"], "'0.5' has no ':'"),
])
def test_invalid_flag_values(args, needle):
    cp = run_cli(local_args("--model-repository", str(quickstart_repo()), *args))
    assert cp.returncode != 0, f"{args} accepted"
    assert needle in cp.stderr, f"stderr does not mention {needle!r}: {cp.stderr!r}"


# ---------------------------------------------------------------------------------------------
# Personalities and aliases
# ---------------------------------------------------------------------------------------------

def test_tritonserver_symlink_reports_triton(server_factory, tmp_path):
    link = tmp_path / "bin" / "tritonserver"
    link.parent.mkdir()
    os.symlink(tessera_bin(), link)
    # invoked the way Triton users do: no subcommand, --flag=value
    srv = server_factory(quickstart_repo(), bin_path=link, subcommand=None, triton_style=True)
    wait_model_ready(srv, "simple")
    c = httpclient.InferenceServerClient(srv.url)
    try:
        meta = c.get_server_metadata()
        assert meta["name"] == "triton", meta
        assert c.is_model_ready("simple")
    finally:
        c.close()
    assert requests.get(srv.http("/v2"), timeout=10).json()["name"] == "triton"


def test_binary_name_reports_tessera(server):
    assert requests.get(server.http("/v2"), timeout=10).json()["name"] == "tessera"


def test_model_store_alias(server_factory):
    srv = server_factory(quickstart_repo(), ["--log-verbose", "1"], repo_flag="--model-store")
    wait_model_ready(srv, "simple")
    wait_model_ready(srv, "add_sub")


def test_equals_style_flags(server_factory):
    srv = server_factory(quickstart_repo(), ["--model-control-mode=explicit", "--load-model=add_sub"],
                         triton_style=True)
    wait_model_ready(srv, "add_sub")
    assert not model_ready(srv, "simple")


# ---------------------------------------------------------------------------------------------
# --exit-on-error
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def broken_repo(repo):
    copy_model(repo, "simple")
    copy_model(repo, "add_sub", "broken", config='name: "broken"\nbackend: "onnxruntime"\nmax_batch_size: : 8\n')
    return repo


def wait_exit(srv, deadline=STARTUP_DEADLINE) -> int:
    try:
        return srv.process.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server kept running {deadline}s although it should have exited; log tail:\n"
                    f"{tail(srv.log_text())}", pytrace=False)


def test_exit_on_error_true_exits_on_broken_model(server_factory, broken_repo):
    srv = server_factory(broken_repo, ["--exit-on-error", "true"], expect_exit=True)
    rc = wait_exit(srv)
    assert rc != 0 and rc > 0, f"exit code {rc}"
    log = srv.log_text()
    assert_no_panic(log)
    assert "broken" in log, f"the log does not name the failing model:\n{tail(log)}"


def test_exit_on_error_default_is_true_like_triton(server_factory, broken_repo):
    srv = server_factory(broken_repo, expect_exit=True)
    rc = wait_exit(srv)
    assert rc > 0, f"exit code {rc}"


def test_exit_on_error_false_keeps_serving(server_factory, broken_repo):
    srv = server_factory(broken_repo, ["--exit-on-error", "false"])
    wait_model_ready(srv, "simple")
    assert not model_ready(srv, "broken")
    r = requests.post(srv.http("/v2/repository/index"), data="{}", timeout=10)
    states = {e["name"]: e.get("state") for e in r.json()}
    assert states.get("simple") == "READY" and states.get("broken") == "UNAVAILABLE", states


def test_exit_on_error_true_with_good_models_serves(server_factory):
    srv = server_factory(quickstart_repo(), ["--exit-on-error", "true"])
    wait_model_ready(srv, "classifier")


# ---------------------------------------------------------------------------------------------
# Start-up failures and signals
# ---------------------------------------------------------------------------------------------

def test_http_port_in_use_fails(tmp_path):
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        _, grpc, metrics = free_ports(3)
        argv = build_argv(tessera_bin(), [quickstart_repo()], port, grpc, metrics)
        try:
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=STARTUP_DEADLINE,
                                stdin=subprocess.DEVNULL, env=server_env())
        except subprocess.TimeoutExpired:
            pytest.fail(f"server did not exit although its HTTP port {port} was taken", pytrace=False)
    finally:
        busy.close()
    out = cp.stdout + cp.stderr
    assert_no_panic(out)
    assert cp.returncode != 0
    assert str(port) in out or "in use" in out.lower(), out[-2000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_cleanly(server_factory, sig):
    srv = server_factory(quickstart_repo())
    wait_model_ready(srv, "simple")
    srv.process.send_signal(sig)
    try:
        rc = srv.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server still running 20s after {sig.name}", pytrace=False)
    srv.mark_stopped(rc)
    assert rc == 0, f"exit code {rc} after {sig.name}; log tail:\n{tail(srv.log_text())}"
    with pytest.raises(requests.ConnectionError):
        requests.get(srv.http("/v2/health/live"), timeout=5)
