#!/usr/bin/env python3
"""A cold start's time and memory: starts a server command, samples the RSS of the server and of
its compiler processes (any child of any of its threads) every 0.1 s, and stops the server once
every model in its repository index has left LOADING. With an empty compile cache
(TESSERA_WASM_CACHE_DIR pointing at a new directory) every guest compiles, so the peak is the
compiles'.

usage: cold_start.py HTTP_PORT -- COMMAND...
  e.g. TESSERA_WASM_CACHE_DIR=$(mktemp -d) bench/cold_start.py 18400 -- \\
         target/release/tessera serve --model-repository model-repos/quickstart --http-port 18400 \\
         --grpc-port 18401 --metrics-port 18402 --exit-on-error=false

Prints one line: ready_s (start to no model LOADING), peak_total_MiB (server plus compilers),
peak_server_MiB, server_at_ready_MiB, max_compilers (most compiler processes at once),
unavailable (models that failed to load). The server's stderr goes to cold_start.log in the
current directory. Gives up after 600 s.
"""
import os
import subprocess
import sys
import time
import urllib.request

from benchlib import rss_kib, tree  # bench/ is the script's own directory, so on sys.path


def index(port):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/repository/index", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=1) as response:
        return response.read().decode()


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    port, command = sys.argv[1], sys.argv[3:]
    started = time.monotonic()
    with open("cold_start.log", "w") as log:
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    peak_total = peak_server = most_compilers = 0
    listing = ""
    try:
        while time.monotonic() - started < 600:
            compilers = tree(server.pid) - {server.pid}
            most_compilers = max(most_compilers, len(compilers))
            own = rss_kib(server.pid)
            peak_server = max(peak_server, own)
            peak_total = max(peak_total, own + sum(rss_kib(c) for c in compilers))
            if server.poll() is not None:
                sys.exit(f"the server exited ({server.returncode}): see cold_start.log")
            try:
                listing = index(port)
                if '"state"' in listing and "LOADING" not in listing:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        ready_s = time.monotonic() - started
        print(
            f"ready_s={ready_s:.1f} peak_total_MiB={peak_total / 1024:.0f} peak_server_MiB={peak_server / 1024:.0f} "
            f"server_at_ready_MiB={rss_kib(server.pid) / 1024:.0f} max_compilers={most_compilers} "
            f"unavailable={listing.count('UNAVAILABLE')}"
        )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
