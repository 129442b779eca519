"""The test harness keeps its promise that every server it starts is stopped, on every path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera_testlib import copy_model, start_server


def servers_serving(repo: Path) -> list[int]:
    """PIDs of processes whose command line names `repo`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(repo).encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def test_a_server_whose_models_miss_their_readiness_window_is_stopped(tmp_path, tessera_binary):
    repo = tmp_path / "repo"
    copy_model(repo, "simple")
    with pytest.raises(pytest.fail.Exception, match="model 'nosuch' is ready"):
        start_server(tmp_path / "logs", [repo], ready=["simple", "nosuch"], ready_deadline=2)
    assert servers_serving(repo) == [], "the server outlived its failed start"
