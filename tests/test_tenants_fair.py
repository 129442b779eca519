"""Fair shares of a shared model: weighted fair queueing across tenants in the direct scheduler's
and the dynamic batcher's queues, fairness ids (x-gateway-inference-fairness-id) without a
tenants file, and today's first-come order without either. The model is an identity whose every
execution takes 250 ms on one instance, so the order of the answers is the order of the queue;
nothing here depends on how fast the machine is."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from tessera_testlib import slow_identity_config, wait_until, write_config_model
from test_tenants import sha, write_tenants

pytestmark = pytest.mark.timeout(300)

DELAY_MS = 250
KEYS = {"heavy": "heavy-key-0123456789", "light": "light-key-0123456789"}
SCHEDULERS = {"direct": "", "dynamic": "dynamic_batching { }", "sequence": "sequence_batching { }"}


def fair_toml(heavy_weight: int) -> str:
    return "".join(f"""
[[tenant]]
name = "{name}"
weight = {weight}
models = ["slow"]
keys = [{{ id = "{name}-1", sha256 = "{sha(KEYS[name])}" }}]
""" for name, weight in (("heavy", heavy_weight), ("light", 1)))


def start(server_factory, tmp_path, scheduler: str, tenants: str | None):
    repo = tmp_path / "repo"
    batch = 1 if scheduler else 0
    write_config_model(repo, "slow", slow_identity_config("slow", DELAY_MS, max_batch_size=batch, extra=scheduler))
    args = []
    if tenants is not None:
        args = ["--tenants", str(write_tenants(tmp_path / "tenants.toml", tenants))]
    srv = server_factory(repo, args)
    url = srv.http("/v2/models/slow/ready")
    headers = {"Authorization": f"Bearer {KEYS['heavy']}"}
    wait_until(lambda: requests.get(url, headers=headers, timeout=10).status_code == 200, 120, "slow ready", srv)
    return srv


def pending(srv) -> float:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{") and 'model="slow"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Flood:
    """Requests sent from threads; `done` lists (who, when answered, status) as answers come."""

    def __init__(self, srv, shape: list[int]):
        self.srv, self.shape = srv, shape
        self.done: list[tuple[str, float, int]] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.sequences = 0

    def send(self, who: str, count: int, headers: dict) -> None:
        def one():
            body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": self.shape, "data": [1]}]}
            # Every request its own sequence, for the sequence batcher (the others ignore it).
            with self.lock:
                self.sequences += 1
                body["parameters"] = {"sequence_id": self.sequences, "sequence_start": True, "sequence_end": True}
            r = requests.post(self.srv.http("/v2/models/slow/infer"), json=body, headers=headers, timeout=120)
            with self.lock:
                self.done.append((who, time.monotonic(), r.status_code))

        for _ in range(count):
            t = threading.Thread(target=one)
            t.start()
            self.threads.append(t)

    def join(self) -> list[tuple[str, float, int]]:
        for t in self.threads:
            t.join()
        assert all(status == 200 for _, _, status in self.done), self.done
        return sorted(self.done, key=lambda d: d[1])


def shape_for(scheduler: str) -> list[int]:
    return [1, 1] if scheduler else [1]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_weights_split_a_saturated_model_three_to_one(server_factory, tmp_path, scheduler):
    srv = start(server_factory, tmp_path, SCHEDULERS[scheduler], fair_toml(3))
    flood = Flood(srv, shape_for(SCHEDULERS[scheduler]))
    flood.send("heavy", 20, {"Authorization": f"Bearer {KEYS['heavy']}"})
    flood.send("light", 12, {"Authorization": f"Bearer {KEYS['light']}"})
    # Everything queued (one request may be running): from here both tenants stay backlogged
    # for the next 12 answers.
    wait_until(lambda: pending(srv) >= 26, 60, "the flood queued", srv)
    observed = time.monotonic()
    done = flood.join()
    after = [who for who, at, _ in done if at > observed][1:13]
    heavy = after.count("heavy")
    assert 8 <= heavy <= 10, f"heavy got {heavy} of 12 answers at weights 3:1: {after}"


def late_request_place(srv, shape: list[int], flood: dict, late: dict) -> int:
    """Sends 16 requests with `flood`'s headers, then, once a dozen are queued, one with `late`'s;
    returns how many answers came after the late one's."""
    sent = Flood(srv, shape)
    sent.send("flood", 16, flood)
    wait_until(lambda: pending(srv) >= 12, 60, "the flood queued", srv)
    sent.send("late", 1, late)
    order = [who for who, _, _ in sent.join()]
    return len(order) - 1 - order.index("late")


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_light_tenant_is_not_stuck_behind_a_flood(server_factory, tmp_path, scheduler):
    srv = start(server_factory, tmp_path, SCHEDULERS[scheduler], fair_toml(1))
    heavy, light = ({"Authorization": f"Bearer {KEYS[t]}"} for t in ("heavy", "light"))
    # Behind at most the execution running and one more, not behind the dozen queued before it.
    assert late_request_place(srv, shape_for(SCHEDULERS[scheduler]), heavy, light) >= 11


def test_fairness_ids_share_a_model_without_a_tenants_file(server_factory, tmp_path):
    srv = start(server_factory, tmp_path, "", None)
    ids = ({"x-gateway-inference-fairness-id": f"team-{t}"} for t in "ab")
    assert late_request_place(srv, [1], *ids) >= 11


def test_without_tenants_or_fairness_ids_the_queue_is_first_come(server_factory, tmp_path):
    # Today's behaviour, for comparison: the late request waits behind the whole flood.
    srv = start(server_factory, tmp_path, "", None)
    assert late_request_place(srv, [1], {}, {}) <= 3
