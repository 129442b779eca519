#!/usr/bin/env python3
"""One sample of a server's own cost, for bench/perf.sh: CPU seconds used so far by the process
and its whole tree (Triton's python stub processes included), and the statistics extension's
success count, success time and execution count for one model. Two samples around a measurement
window give CPU per inference and server-side time per request, the figures that the load
generator sharing the box's cores does not blur.

usage: server_sample.py PID HTTP_PORT MODEL   ->  "cpu_s count ns executions" on stdout
"""
import json
import os
import sys
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def tree(pid):
    seen, todo = set(), [pid]
    while todo:
        p = todo.pop()
        seen.add(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return seen


def cpu_seconds(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / TICK


def private_kib(pid):
    """The process's private memory: Private_Clean + Private_Dirty of /proc/PID/smaps_rollup."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f.read().splitlines()[1:]:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0])
    return fields["Private_Clean"] + fields["Private_Dirty"]


def stats(port, model):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats", timeout=10) as r:
        versions = json.load(r)["model_stats"]
    count = sum(int(v["inference_stats"]["success"]["count"]) for v in versions)
    ns = sum(int(v["inference_stats"]["success"]["ns"]) for v in versions)
    executions = sum(int(v["execution_count"]) for v in versions)
    return count, ns, executions


def main():
    pid, port, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    count, ns, executions = stats(port, model)
    print(f"{cpu_seconds(pid):.2f} {count} {ns} {executions}")


if __name__ == "__main__":
    main()
