#!/usr/bin/env python3
"""RDMA over loopback UDP, side by side with the raw UDP ceiling, in one run.

For each size, runs `snic rdma <op> --server` and `--client 127.0.0.1` (two processes) for
WRITE, READ, SEND and the raw UDP blaster (`snic rdma blast`, same packet sizes and batching),
and prints a markdown table of average bandwidth (Gb/s) and each op's ratio to the blaster.
Also: 8-byte WRITE/READ latency, and 4 KiB WRITE with one doorbell per WQE vs per 64 WQEs.

Usage: scripts/bench_rdma.py [path/to/snic] (build with `cargo build --release` first).
"""
import json
import subprocess
import sys
import time

SNIC = sys.argv[1] if len(sys.argv) > 1 else "target/release/snic"
SIZES = [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
port = [25100]


def run(op, extra, size, iters):
    port[0] += 1
    udp, tcp = port[0], port[0] + 3000
    server_extra = ["--lat"] if "--lat" in extra else []
    srv = subprocess.Popen([SNIC, "rdma", op, "--server", "--port", str(udp), "-p", str(tcp)]
                           + server_extra,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        out = subprocess.run([SNIC, "rdma", op, "--client", "127.0.0.1", "--port", str(udp),
                              "-p", str(tcp), "-s", str(size), "-n", str(iters),
                              "--report-gbits", "--json", "--timeout", "20"] + extra,
                             capture_output=True, text=True, timeout=120)
    finally:
        srv.wait(timeout=30)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def iters_for(size):
    # About 1 GiB per run at large sizes, at least 20k messages at small ones.
    return max(200, min(200_000, (1 << 30) // size // 4 if size >= 4096 else 100_000))


def sweep(extra):
    print(f"| size | WRITE Gb/s | READ Gb/s | SEND Gb/s | UDP blast Gb/s | WRITE/blast | READ/blast | SEND/blast |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        n = iters_for(size)
        r = {op: run(op, extra if op != "blast" else [], size, n)
             for op in ["write", "read", "send", "blast"]}
        bw = {op: (v["bw_avg"] if v else float("nan")) for op, v in r.items()}
        b = bw["blast"]
        print(f"| {size} | {bw['write']:.2f} | {bw['read']:.2f} | {bw['send']:.2f} | {b:.2f} | "
              f"{bw['write']/b:.2f} | {bw['read']/b:.2f} | {bw['send']/b:.2f} |", flush=True)
    print()


def main():
    print("One doorbell per WQE (perftest's default posting):\n")
    sweep([])
    print("One doorbell per 64 WQEs (the blaster's batching: 64 datagrams per send call):\n")
    sweep(["--batch", "64"])
    print("| latency, 8 B | t_min us | t_typical us | t_avg us | 99% us | 99.9% us |")
    print("|---|---:|---:|---:|---:|---:|")
    for op in ["write", "read"]:
        v = run(op, ["--lat"], 8, 20000)
        if v:
            print(f"| {op.upper()} | {v['t_min_us']:.2f} | {v['t_typical_us']:.2f} | "
                  f"{v['t_avg_us']:.2f} | {v['p99_us']:.2f} | {v['p999_us']:.2f} |")
        else:
            print(f"| {op.upper()} | failed |")
    print()
    print("| 4 KiB WRITE | MB/s | Mpps |")
    print("|---|---:|---:|")
    res = {}
    for b in [1, 64]:
        port[0] += 1
        v = run("write", ["--batch", str(b), "-t", "128"], 4096, 100_000)
        res[b] = v
        if v:
            print(f"| one doorbell per {b} WQE(s) | {v['bw_avg'] * 1e9 / 8 / 2**20:.0f} | "
                  f"{v['msg_rate_mpps']:.3f} |")
    if res.get(1) and res.get(64):
        print(f"\nbatch/single message rate: {res[64]['msg_rate_mpps'] / res[1]['msg_rate_mpps']:.2f}x")


if __name__ == "__main__":
    main()
