#!/usr/bin/env python3
"""One sample of a server's own cost, for bench/lib.sh and bench/perf.sh: CPU seconds used so
far by the process and its whole tree (Triton's python stub processes included), and the
statistics extension's success count, success time and execution count for one model. Two
samples around a measurement window give CPU per inference and server-side time per request,
the figures that the load generator sharing the box's cores does not blur.

usage: server_sample.py PID HTTP_PORT MODEL   ->  "cpu_s count ns executions" on stdout
"""
import sys

from benchlib import cpu_seconds, stats  # bench/ is the script's own directory, so on sys.path


def main():
    pid, port, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    count, ns, executions = stats(port, model)
    print(f"{cpu_seconds(pid):.2f} {count} {ns} {executions}")


if __name__ == "__main__":
    main()
