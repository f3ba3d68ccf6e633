#!/usr/bin/env python3
"""Cost of the Prometheus endpoint (issue 19): per-packet time of `snic run` with and without
`--metrics`, scraped every 100 ms, in the same run of this script.

    python3 scripts/bench_metrics.py [--snic target/release/snic] [--packets 3000000] [--rounds 3]

Each round runs, in turn:
  off     snic run --port gen:N --port null --json
  on      the same with --metrics 127.0.0.1:0, and a client scraping /metrics every 100 ms
Per-packet ns = elapsed_secs * 1e9 / packets received (the run's own --json figures). The
table gives the median of the rounds per mode and the ratio on/off, with the load average.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


def run(snic, packets, metrics):
    cmd = [snic, "run", "--port", f"gen:{packets}", "--port", "null", "--json"]
    if metrics:
        cmd += ["--metrics", "127.0.0.1:0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scrapes = [0, 0]  # done, bytes
    stop = threading.Event()

    def scraper():
        url = None
        for line in p.stderr:
            if url is None and "http://" in line:
                url = line.split("http://", 1)[1].strip()
                break
        if url is None:
            return
        threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
        while not stop.is_set():
            try:
                with urllib.request.urlopen("http://" + url, timeout=2) as r:
                    scrapes[1] += len(r.read())
                    scrapes[0] += 1
            except OSError:
                pass
            stop.wait(0.1)

    t = threading.Thread(target=scraper if metrics else lambda: [None for _ in p.stderr], daemon=True)
    t.start()
    # stderr belongs to the thread (it finds the address there): communicate() would race it.
    out = p.stdout.read()
    p.wait()
    stop.set()
    if p.returncode != 0:
        sys.exit(f"snic run failed: {cmd}")
    doc = json.loads(out)
    rx = doc["ports"][0]["rx_packets"]
    return doc["elapsed_secs"] * 1e9 / rx, rx, scrapes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--snic", default="target/release/snic")
    ap.add_argument("--packets", type=int, default=3_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    res = {"off": [], "on": []}
    scrapes = []
    for r in range(a.rounds):
        for mode in ("off", "on"):
            ns, rx, sc = run(a.snic, a.packets, mode == "on")
            res[mode].append(ns)
            if mode == "on":
                scrapes.append(sc)
            print(f"round {r + 1} {mode:>3}: {ns:7.1f} ns/packet ({rx} packets)"
                  + (f", {sc[0]} scrapes of {sc[1] // max(sc[0], 1)} bytes" if mode == "on" else ""),
                  flush=True)
    off, on = statistics.median(res["off"]), statistics.median(res["on"])
    load = open("/proc/loadavg").read().split()[:3]
    print(f"\nmedian of {a.rounds}: off {off:.1f} ns/packet, on (scraped every 100 ms) "
          f"{on:.1f} ns/packet, on/off {on / off:.3f}; load average {' '.join(load)}")


if __name__ == "__main__":
    main()
