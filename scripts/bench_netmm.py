#!/usr/bin/env python3
"""Networked matrix multiplication (`snic compute mm`) between two `snic serve` on loopback:
the time split of RecoNIC's Fig. 6 at several sizes, as a Markdown table.

    scripts/bench_netmm.py [--snic target/release/snic] [--sizes 256,512,1024] [--reps 3]

Starts two devices (`snic serve --rdma 127.0.0.1:PORT` and `127.0.0.2:PORT`), one peer 1
(`snic compute mm --serve`) on the first, and runs peer 2 (`--json`) on the second for every
size x dtype x mode (poll, interrupt, chained), `--reps` times each; prints the median of every
step, in ms, and GFLOP/s (GOP/s for i8) of the kernel and end to end. Everything it started is
stopped at the end.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--snic", default="target/release/snic")
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--dtypes", default="f32,i8")
    ap.add_argument("--modes", default="poll,interrupt,chained")
    ap.add_argument("--mem", default="dev_mem")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--udp", type=int, default=24_990)
    ap.add_argument("--tcp", type=int, default=28_990)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="snic-netmm-")
    socks = [os.path.join(d, "p1.sock"), os.path.join(d, "p2.sock")]
    procs = []
    try:
        for i, s in enumerate(socks):
            procs.append(subprocess.Popen(
                [a.snic, "serve", "--no-huge", "--on-board", "64M", "--socket", s,
                 "--rdma", f"127.0.0.{i + 1}:{a.udp}"],
                stdout=subprocess.DEVNULL))
        t = time.time()
        while not all(os.path.exists(s) for s in socks):
            if time.time() - t > 20:
                sys.exit("snic serve did not come up")
            time.sleep(0.05)
        peer1 = subprocess.Popen(
            [a.snic, "compute", "mm", "--serve", "--listen", f"127.0.0.1:{a.tcp}",
             "--socket", socks[0], "--timeout", "120"],
            stdout=subprocess.PIPE, text=True)
        procs.append(peer1)
        peer1.stdout.readline()
        rows = []
        for n in [int(x) for x in a.sizes.split(",")]:
            for dt in a.dtypes.split(","):
                for mode in a.modes.split(","):
                    flags = {"poll": [], "interrupt": ["--interrupt"], "chained": ["--chained"]}[mode]
                    runs = []
                    for _ in range(a.reps):
                        out = subprocess.run(
                            [a.snic, "compute", "mm", "--peer", f"127.0.0.1:{a.tcp}",
                             "--socket", socks[1], "-m", str(n), "-n", str(n), "-k", str(n),
                             "--dtype", dt, "-l", a.mem, "--json", "--timeout", "120"] + flags,
                            capture_output=True, text=True, timeout=600)
                        if out.returncode != 0:
                            sys.exit(f"{n} {dt} {mode}: {out.stdout}{out.stderr}")
                        r = json.loads(out.stdout)
                        if not r["verified"]:
                            sys.exit(f"{n} {dt} {mode}: not verified: {r}")
                        runs.append(r)
                    med = lambda k: statistics.median(r[k] for r in runs)
                    rows.append((n, dt, mode, runs[0]["reads"],
                                 *(med(k) / 1e6 for k in ["setup_ns", "fetch_ns", "kernel_ns",
                                                          "notify_ns", "write_back_ns",
                                                          "readback_ns", "total_ns"]),
                                 med("gops_kernel"), med("gops_total")))
        print("| M=N=K | dtype | mode | READs | set-up ms | fetch ms | kernel ms | notify ms "
              "| write-back ms | read-back ms | total ms | kernel G(FL)OP/s | end-to-end G(FL)OP/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            n, dt, mode, reads, *ms, gk, gt = r
            cells = " | ".join(f"{x:.3f}" for x in ms)
            print(f"| {n} | {dt} | {mode} | {reads} | {cells} | {gk:.2f} | {gt:.2f} |")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
