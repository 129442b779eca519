"""Queue time read the way an operator reads it: PromQL over two scrapes of /metrics (parsed with
prometheus_client), with two models loaded and one driven. The per-model formula and the Helm
chart's autoscaling rule must equal the server's own mean queue time within 5%; Triton's chart
rule, which averages per-model ratios, under-reports by about the number of loaded models
(server#8979), and the test shows it."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tessera_testlib import slow_identity_config, wait_model_ready, write_config_model

pytestmark = pytest.mark.timeout(180)

ADAPTER_VALUES = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "prometheus-adapter-values.yaml"
# Triton's chart rule (deploy/k8s-onnx/.../values.yaml and the GKE/AWS charts, up to 2.7x).
TRITON_RULE = ("avg(delta(nv_inference_queue_duration_us{<<.LabelMatchers>>}[30s]) / "
               "(1 + delta(nv_inference_request_success{<<.LabelMatchers>>}[30s]))) by (<<.GroupBy>>)")
DELAY_MS = 20
CONCURRENCY = 4
REQUESTS = 32

ONE_INSTANCE = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"


# ---------------------------------------------------------------------------------------------
# The PromQL subset the rules use, evaluated over two scrapes
# ---------------------------------------------------------------------------------------------

TOKEN = re.compile(r'\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_:][A-Za-z0-9_:]*)|("(?:[^"\\]|\\.)*")|(!=|[(){}\[\],=/+*-]))')


class PromQL:
    """Instant evaluation of `sum|avg(...) by (...)`, `delta|rate|increase(sel[w])`,
    `clamp_min(v, n)`, `+ - * /` and numbers over two scrapes taken `seconds` apart: with two
    samples, a range function sees exactly their difference. Vectors map label sets to values;
    binary operations match identical label sets, as PromQL's one-to-one matching does."""

    def __init__(self, before: dict, after: dict, seconds: float):
        self.before, self.after, self.seconds = before, after, seconds

    def evaluate(self, text: str):
        self.tokens = [next(t for t in m.groups() if t is not None) for m in TOKEN.finditer(text)]
        assert "".join(self.tokens) == re.sub(r"\s+", "", text), f"cannot tokenize {text!r}"
        self.at = 0
        value = self.expr()
        assert self.at == len(self.tokens), f"trailing {self.tokens[self.at:]}"
        return value

    def peek(self):
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected=None):
        token = self.tokens[self.at]
        assert expected is None or token == expected, f"expected {expected}, got {token}"
        self.at += 1
        return token

    def left_to_right(self, operand, operators: tuple[str, ...]):
        """operand (op operand)*, folded from the left: one precedence level."""
        value = operand()
        while self.peek() in operators:
            op = self.take()
            value = binary(value, operand(), op)
        return value

    def expr(self):
        return self.left_to_right(self.term, ("+", "-"))

    def term(self):
        return self.left_to_right(self.factor, ("/", "*"))

    def labels(self) -> list[str]:
        self.take("(")
        names = []
        while self.peek() != ")":
            names.append(self.take())
            if self.peek() == ",":
                self.take()
        self.take(")")
        return names

    def factor(self):
        token = self.take()
        if re.fullmatch(r"\d+(\.\d+)?", token):
            return float(token)
        if token == "(":
            value = self.expr()
            self.take(")")
            return value
        if token in ("sum", "avg"):
            by = self.labels() if self.peek() == "by" and self.take() else None
            self.take("(")
            inner = self.expr()
            self.take(")")
            if by is None and self.peek() == "by":
                self.take()
                by = self.labels()
            return aggregate(token, inner, by or [])
        if token in ("delta", "increase", "rate"):
            self.take("(")
            name, matchers = self.selector()
            self.take("[")
            while self.take() != "]":
                pass
            self.take(")")
            return self.range_function(token, name, matchers)
        if token == "clamp_min":
            self.take("(")
            value = self.expr()
            self.take(",")
            floor = float(self.take())
            self.take(")")
            return {k: max(v, floor) for k, v in value.items()}
        self.at -= 1
        name, matchers = self.selector()
        return {k: v for k, v in self.after.get(name, {}).items() if matches(k, matchers)}

    def selector(self):
        name = self.take()
        matchers = []
        if self.peek() == "{":
            self.take()
            while self.peek() != "}":
                label, op, value = self.take(), self.take(), self.take()
                matchers.append((label, op, value[1:-1]))
                if self.peek() == ",":
                    self.take()
            self.take("}")
        return name, matchers

    def range_function(self, function, name, matchers):
        result = {}
        for labels, now in self.after.get(name, {}).items():
            if matches(labels, matchers) and labels in self.before.get(name, {}):
                change = now - self.before[name][labels]
                result[labels] = change / self.seconds if function == "rate" else change
        return result


def matches(labels: frozenset, matchers) -> bool:
    d = dict(labels)
    return all((d.get(k, "") == v) == (op == "=") for k, op, v in matchers)


def aggregate(function, vector: dict, by: list[str]) -> dict:
    groups: dict = {}
    for labels, value in vector.items():
        key = frozenset((k, v) for k, v in labels if k in by)
        groups.setdefault(key, []).append(value)
    return {k: (sum(v) if function == "sum" else sum(v) / len(v)) for k, v in groups.items()}


def binary(left, right, op):
    apply = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
             "/": lambda a, b: a / b if b else float("inf") if a else float("nan")}[op]
    if isinstance(left, float) and isinstance(right, float):
        return apply(left, right)
    if isinstance(left, float):
        return {k: apply(left, v) for k, v in right.items()}
    if isinstance(right, float):
        return {k: apply(v, right) for k, v in left.items()}
    return {k: apply(v, right[k]) for k, v in left.items() if k in right}


def test_the_promql_subset_computes_what_prometheus_would():
    before = {"c": {frozenset({("m", "a"), ("pod", "p")}): 10.0, frozenset({("m", "b"), ("pod", "p")}): 0.0}}
    after = {"c": {frozenset({("m", "a"), ("pod", "p")}): 40.0, frozenset({("m", "b"), ("pod", "p")}): 0.0}}
    q = PromQL(before, after, 10.0)
    assert q.evaluate('sum(rate(c{pod="p"}[30s])) by (pod)') == {frozenset({("pod", "p")}): 3.0}
    assert q.evaluate('avg(delta(c[30s]) / (1 + delta(c[30s]))) by (pod)') == {
        frozenset({("pod", "p")}): pytest.approx(30 / 31 / 2)}
    assert q.evaluate('clamp_min(sum(delta(c{m!="a"}[1m])), 0.5)') == {frozenset(): 0.5}


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------

def scrape(srv) -> dict:
    """name -> {labels: value}, with the pod labels Prometheus' Kubernetes discovery would add."""
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    series: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = frozenset({**s.labels, "namespace": "ns", "pod": "tessera-0"}.items())
            # prometheus_client names every counter sample `<family>_total`; PromQL sees the
            # name as exposed (Triton's counters have no such suffix).
            name = family.name if s.name == family.name + "_total" and s.name not in text else s.name
            series.setdefault(name, {})[labels] = s.value
    return series


def queue_stats(srv, model: str) -> tuple[int, int]:
    stats = requests.get(srv.http(f"/v2/models/{model}/stats"), timeout=10).json()["model_stats"][0]
    queue = stats["inference_stats"]["queue"]
    return int(queue["count"]), int(queue["ns"])


def drive(srv, model: str) -> None:
    def one(_):
        client = httpclient.InferenceServerClient(srv.url)
        inp = httpclient.InferInput("INPUT0", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], dtype=np.int32))
        for _ in range(REQUESTS // CONCURRENCY):
            client.infer(model, [inp])
        client.close()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(one, range(CONCURRENCY)))


def test_queue_time_from_two_scrapes_is_the_true_mean(server_factory, repo):
    for name, delay in (("busy", DELAY_MS), ("idle", 0)):
        write_config_model(repo, name, slow_identity_config(name, delay, extra=ONE_INSTANCE))
    srv = server_factory(repo)
    wait_model_ready(srv, "busy")
    wait_model_ready(srv, "idle")

    count0, ns0 = queue_stats(srv, "busy")
    before, t0 = scrape(srv), time.monotonic()
    drive(srv, "busy")
    after, t1 = scrape(srv), time.monotonic()
    count1, ns1 = queue_stats(srv, "busy")
    assert count1 - count0 == REQUESTS
    true_mean_us = (ns1 - ns0) / 1000 / REQUESTS
    # One instance, four callers: most requests wait for others' executions.
    assert true_mean_us > DELAY_MS * 1000 / 2, true_mean_us

    q = PromQL(before, after, t1 - t0)
    per_model = q.evaluate('rate(nv_inference_queue_duration_us{model="busy"}[30s]) / '
                           'rate(nv_inference_request_success{model="busy"}[30s])')
    assert list(per_model.values()) == [pytest.approx(true_mean_us, rel=0.05)]

    rule = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"][0]["metricsQuery"]

    def per_pod(query: str) -> float:
        query = query.replace("<<.LabelMatchers>>", 'namespace="ns",pod="tessera-0"').replace("<<.GroupBy>>", "pod")
        (value,) = q.evaluate(query).values()
        return value

    assert per_pod(rule) == pytest.approx(true_mean_us, rel=0.05), "the chart's rule reads the true mean"
    triton = per_pod(TRITON_RULE)
    assert triton < 0.6 * true_mean_us, f"Triton's rule read {triton} against {true_mean_us}: the idle model halves it"
