"""A real two-node Ray cluster on this machine, for tests/test_ray_serve.py and bench/ray_serve.py.

Two `ray start --block` processes: a head node and a worker node, each a raylet of its own (its own
object store, node manager port, temp dir and logs), joined through the head's GCS. They stand for
two machines:

- Addresses. Ray rewrites a node address of 127.0.0.1 to the machine's "reachable" address (it
  asks the routing table, `resolve_ip_for_localhost`), so the nodes would talk over the machine's
  external interface. Every other loopback address is taken as given, so the head is 127.0.0.2
  and the worker 127.0.0.3: all of Ray's traffic stays on loopback, and the two nodes even have
  addresses of their own. (Some Ray processes listen on all interfaces; nothing connects to
  anything but these two addresses.) The driver (`ray.init`) names 127.0.0.2 as its own address,
  so it attaches to the head's raylet.
- Ports. The GCS, the ray-client server and each node's dashboard agent get free ports (the agent's
  default, 52365, would collide between two nodes on one machine); the rest are Ray's random ports.
- Size. One CPU per node (`--num-cpus=1`; Ray would otherwise claim every core for each node), a
  100 MB object store, no dashboard, usage stats off, one log monitor (the head's).
- Placement. Each node carries a custom resource naming it (`tessera_node_head`,
  `tessera_node_2`) that tasks, actors or deployments can ask for to pin themselves to a node.

Stopping only what we started: `ray stop` would kill every Ray process of the user on the machine
(another test run's cluster too), so it is never called. Each node's processes are found by a
marker in their environment (`TRAY_NODE=<the node's temp dir>`, inherited by everything its
`ray start` spawns; the raylet puts each worker in a process group of its own, and a worker whose
raylet died is re-parented, so neither the process group nor the process tree would find them
all). Each `ray start` runs with the parent-death signal set, so that a killed test run takes
its cluster down, in our session (a session of its own would be a separate autogroup for the
kernel's scheduler, which skews the benchmark). Stopping sends SIGTERM to each `ray start
--block` (which stops its node's processes: worker node first, then head), waits, then SIGKILLs
whatever carries the node's marker, and checks that nothing does. The nodes' temp dirs (session
logs) are removed afterwards unless `keep_dir` is set.

Readiness is polled, never slept for: each `ray start` prints "Ray runtime started." once its
node is up; then the driver connects and polls `ray.nodes()` until both nodes are alive with their
resources. Deadlines are sized for a loaded two-core machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

HEAD_IP = "127.0.0.2"
WORKER_IP = "127.0.0.3"
HEAD_RESOURCE = "tessera_node_head"
WORKER_RESOURCE = "tessera_node_2"

START_DEADLINE = 120.0  # each node's `ray start`, then both nodes seen alive by the driver
STOP_DEADLINE = 45.0  # SIGTERM to gone, per node (Ray drains for up to 30 s)
OBJECT_STORE_BYTES = 100_000_000

_PR_SET_PDEATHSIG = 1
NODE_MARKER = "TRAY_NODE"  # in each node's processes' environment: the node's temp dir


class RayClusterError(RuntimeError):
    pass


@dataclass
class RayNode:
    name: str
    ip: str
    resource: str
    temp_dir: Path
    log_path: Path
    process: subprocess.Popen
    argv: list[str]

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def pids(self) -> list[int]:
        """This node's live processes: `ray start`, GCS (head), raylet, agents, workers."""
        return marked_pids(NODE_MARKER, str(self.temp_dir))


@dataclass
class RayCluster:
    address: str  # the head's GCS, "127.0.0.2:PORT": ray.init(address=...), ray start --address=...
    head: RayNode
    worker: RayNode
    root: Path
    started_s: float = 0.0  # seconds from the first `ray start` to both nodes alive
    nodes_info: list[dict] = field(default_factory=list)  # ray.nodes() of the two, when connected

    def pids(self) -> list[int]:
        return self.head.pids() + self.worker.pids()

    @property
    def node_resources(self) -> tuple[str, str]:
        return (self.head.resource, self.worker.resource)

    def diagnostics(self) -> str:
        return diagnostics([self.head, self.worker])


def diagnostics(nodes: list[RayNode]) -> str:
    """Each node's `ray start` output and the tails of its raylet's and GCS's logs."""
    parts = []
    for node in nodes:
        parts.append(f"--- {node.name} ({' '.join(node.argv)}), exit {node.process.poll()}:\n"
                     f"{node.log_tail()}")
        for name in ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err"):
            for p in sorted(node.temp_dir.glob(f"session_*/logs/{name}")):
                text = p.read_text(errors="replace").strip().splitlines()[-15:]
                if text:
                    parts.append(f"--- {node.name} {name}:\n" + "\n".join(text))
    return "\n".join(parts)


def _ray_cli() -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marked_pids(key: str, value: str) -> list[int]:
    """Live processes whose environment has key=value (our own processes: /proc/PID/environ of
    other users' is unreadable, and skipped)."""
    needle = f"{key}={value}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":  # a zombie is gone in all but name
            out.append(int(entry))
    return out


def _child_setup() -> None:
    """In the `ray start` child before exec: SIGTERM when the thread that started it dies (a test
    run killed outright still takes its cluster down)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def node_env(extra: dict | None = None) -> dict:
    """The nodes' environment (their workers', so Serve's replicas', inherit it): ours less
    RAY_ADDRESS and TESSERA_* settings (an in-process Tessera server reads its flags from TESSERA_*
    variables as `tessera serve` does: tessera_testlib.server_env), usage stats off, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("TESSERA_")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.update(extra or {})
    return env


def _start_node(name: str, ip: str, resource: str, temp_dir: Path, extra: list[str], env: dict) -> RayNode:
    temp_dir.mkdir(parents=True)
    argv = _ray_cli() + [
        "start", "--block",
        f"--node-ip-address={ip}",
        "--num-cpus=1",
        "--num-gpus=0",
        f"--resources={json.dumps({resource: 1})}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        f"--temp-dir={temp_dir}",
        f"--dashboard-agent-listen-port={_free_port()}",
        "--disable-usage-stats",
        "--log-style=record", "--log-color=false",
    ] + extra
    log_path = temp_dir.parent / f"{name}.log"
    env = dict(env, **{NODE_MARKER: str(temp_dir)})
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(temp_dir), preexec_fn=_child_setup)
    return RayNode(name, ip, resource, temp_dir, log_path, proc, argv)


def _wait_started(node: RayNode, deadline: float) -> None:
    while time.monotonic() < deadline:
        if "Ray runtime started." in node.log_path.read_text(errors="replace"):
            return
        if node.process.poll() is not None:
            raise RayClusterError(f"`ray start` of the {node.name} node exited with {node.process.returncode}")
        time.sleep(0.1)
    raise RayClusterError(f"the {node.name} node did not start in {START_DEADLINE:.0f} s")


def _stop_node(node: RayNode, problems: list[str]) -> None:
    """SIGTERM to `ray start --block` (it stops its node's processes, the raylet its workers), then
    SIGKILL to whatever of the node is still there after a grace period."""
    if node.process.poll() is None:
        node.process.send_signal(signal.SIGTERM)
        try:
            node.process.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            problems.append(f"the {node.name} node's `ray start` ignored SIGTERM for {STOP_DEADLINE:.0f} s")
            node.process.kill()
            node.process.wait()
    if not _wait_gone(node, 15.0):
        left = node.pids()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not _wait_gone(node, 10.0):
            problems.append(f"the {node.name} node's processes survived SIGKILL: {node.pids()}")
        else:
            warnings.warn(f"Ray's {node.name} node left processes {left} running after it stopped; killed them")


def _wait_gone(node: RayNode, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while node.pids():
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def ray_cluster(*, env: dict | None = None, connect: bool = True, keep_dir: bool = False) -> Iterator[RayCluster]:
    """Start a head and a worker node, wait until both are up, yield the cluster; stop both on
    every path (a failure while starting included), checking that none of their processes is left.

    `env`: variables added to the nodes' environment (and so to every worker's: Ray and Serve
    settings read by actors, such as RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING).
    On a failure, TESSERA_KEEP_RAY_LOGS=1 keeps the nodes' temp dirs (their logs) for a look.

    With connect=True (the default) this process is the cluster's driver inside the block
    (`ray.init` attached to the head node), and `cluster.nodes_info` holds the two nodes'
    `ray.nodes()` entries."""
    # Short: Ray puts unix sockets under it, and a socket path is at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="tray-", dir="/tmp"))
    nodes: list[RayNode] = []
    connected = False
    failed = True
    try:
        t0 = time.monotonic()
        try:
            port = _free_port()
            penv = node_env(env)
            head = _start_node("head", HEAD_IP, HEAD_RESOURCE, root / "h", [
                "--head", f"--port={port}", "--include-dashboard=false",
                f"--ray-client-server-port={_free_port()}",
            ], penv)
            nodes.append(head)
            address = f"{HEAD_IP}:{port}"
            _wait_started(head, t0 + START_DEADLINE)
            worker = _start_node("worker", WORKER_IP, WORKER_RESOURCE, root / "w", [
                f"--address={address}",
                "--include-log-monitor=false",  # one per machine: the head's
            ], penv)
            nodes.append(worker)
            cluster = RayCluster(address, head, worker, root)
            _wait_started(worker, time.monotonic() + START_DEADLINE)
            if connect:
                import ray

                ray.init(address=address, _node_ip_address=HEAD_IP, log_to_driver=False,
                         logging_level="WARNING", configure_logging=False)
                connected = True
                cluster.nodes_info = wait_nodes_alive(time.monotonic() + START_DEADLINE)
        except Exception as e:
            raise RayClusterError(f"the Ray cluster did not start: {type(e).__name__}: {e}\n"
                                  f"{diagnostics(nodes)}") from e
        cluster.started_s = time.monotonic() - t0
        yield cluster
        failed = False
    finally:
        problems: list[str] = []
        if connected:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()
        for node in reversed(nodes):
            _stop_node(node, problems)
        if not keep_dir and not (failed and os.environ.get("TESSERA_KEEP_RAY_LOGS")):
            shutil.rmtree(root, ignore_errors=True)
        if problems and not failed:
            raise RayClusterError("; ".join(problems))


def wait_nodes_alive(deadline: float) -> list[dict]:
    """Poll ray.nodes() (this process is a driver) until the head and the worker node are both
    alive, each with its resource and a raylet of its own; returns their entries."""
    import ray

    last = []
    while time.monotonic() < deadline:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        last = alive
        by_resource = {r: [n for n in alive if n.get("Resources", {}).get(r)]
                       for r in (HEAD_RESOURCE, WORKER_RESOURCE)}
        if all(len(v) == 1 for v in by_resource.values()) and len(alive) == 2:
            head, worker = by_resource[HEAD_RESOURCE][0], by_resource[WORKER_RESOURCE][0]
            if (head["NodeID"] != worker["NodeID"]
                    and head["NodeManagerPort"] != worker["NodeManagerPort"]
                    and (head["NodeManagerAddress"], worker["NodeManagerAddress"]) == (HEAD_IP, WORKER_IP)):
                return [head, worker]
        time.sleep(0.2)
    summary = [(n.get("NodeManagerAddress"), n.get("NodeManagerPort"), n.get("Resources")) for n in last]
    raise RayClusterError(f"two alive nodes not seen in time; alive: {summary}")


if __name__ == "__main__":
    # A smoke run: start, show the nodes, stop.
    with ray_cluster() as c:
        print(f"up in {c.started_s:.1f} s at {c.address}")
        for n in c.nodes_info:
            print(n["NodeManagerAddress"], n["NodeManagerPort"], n["NodeID"][:12],
                  {k: v for k, v in n["Resources"].items() if not k.startswith("node:")})
        print("pids:", c.head.pids(), c.worker.pids())
    print("stopped")
