#!/usr/bin/env python3
"""Capture cost (issue 19): per-packet ns of `snic run --port gen --port null`.

- baseline: no control socket (no capture wrappers, no stage taps);
- off: with `--control` (every port wrapped, stage taps in the pipeline), no capture running;
- on (all): `snic capture` of both ports, no filter, written to /dev/null;
- on (filter): `snic capture --filter 'udp dst 1'` (every frame re-parsed, none kept).

off and both on phases are measured in the same process, one after the other, from the
run's own counters (`snic stats`: rx packets and elapsed seconds). Each figure is the median
of REPS runs. Usage: scripts/bench_capture.py [--snic target/release/snic] [--secs 3] [--reps 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

GEN = "gen:4000000000"


def stats(snic, sock):
    out = subprocess.run([snic, "stats", "--control", sock], check=True, capture_output=True)
    d = json.loads(out.stdout)
    return d["ports"][0]["rx_packets"], d["elapsed_secs"]


def rate_between(snic, sock, action):
    """Packets per second received while `action()` runs."""
    p0, t0 = stats(snic, sock)
    extra = action()
    p1, t1 = stats(snic, sock)
    return (p1 - p0) / (t1 - t0), extra


def baseline(snic, secs):
    out = subprocess.run(
        [snic, "run", "--port", GEN, "--port", "null", "--duration", str(secs), "--json"],
        check=True,
        capture_output=True,
    )
    d = json.loads(out.stdout)
    return d["ports"][0]["rx_packets"] / d["elapsed_secs"]


def one_run(snic, secs):
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "ctl.sock")
        run = subprocess.Popen(
            [snic, "run", "--port", GEN, "--port", "null", "--control", sock,
             "--duration", str(4 * secs + 10)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            time.sleep(1.0)  # warm up

            def capture(*extra):
                def go():
                    out = subprocess.run(
                        [snic, "capture", "--control", sock, "--duration", str(secs),
                         "-w", "/dev/null", *extra],
                        check=True,
                        capture_output=True,
                    )
                    return out.stderr.decode().strip()
                return go

            off, _ = rate_between(snic, sock, lambda: time.sleep(secs))
            on_all, msg_all = rate_between(snic, sock, capture())
            on_filter, msg_filter = rate_between(snic, sock, capture("--filter", "udp dst 1"))
            return off, on_all, on_filter, msg_all, msg_filter
        finally:
            run.terminate()
            run.wait()


def ns(rate):
    return 1e9 / rate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--snic", default="target/release/snic")
    ap.add_argument("--secs", type=float, default=3.0)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    rows = {"baseline": [], "off": [], "on (all)": [], "on (filter)": []}
    for i in range(a.reps):
        rows["baseline"].append(baseline(a.snic, a.secs))
        off, on_all, on_filter, msg_all, msg_filter = one_run(a.snic, a.secs)
        rows["off"].append(off)
        rows["on (all)"].append(on_all)
        rows["on (filter)"].append(on_filter)
        print(f"rep {i + 1}: base {rows['baseline'][-1] / 1e6:.3f} Mpps, off {off / 1e6:.3f}, "
              f"on {on_all / 1e6:.3f} [{msg_all}], filter {on_filter / 1e6:.3f} [{msg_filter}]")
    with open("/proc/loadavg") as f:
        load = f.read().strip()
    base = statistics.median(rows["baseline"])
    print(f"\nload average: {load}")
    print("| mode | Mpps (median of %d) | ns/packet | ns/packet over baseline |" % a.reps)
    print("|---|---|---|---|")
    for k, v in rows.items():
        m = statistics.median(v)
        print(f"| {k} | {m / 1e6:.3f} | {ns(m):.1f} | {ns(m) - ns(base):+.1f} |")


if __name__ == "__main__":
    main()
