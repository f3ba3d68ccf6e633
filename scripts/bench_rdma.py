#!/usr/bin/env python3
"""RDMA over loopback UDP, side by side with the raw UDP ceiling, in one run.

For each size, runs `snic rdma <op> --server` and `--client 127.0.0.1` (two processes) for
WRITE, READ, SEND and the raw UDP blaster (`snic rdma blast`, same packet sizes and batching),
and prints a markdown table of average bandwidth (Gb/s) and each op's ratio to the blaster.
Also: 8-byte WRITE/READ latency, and 4 KiB WRITE with one doorbell per WQE vs per 64 WQEs.

Usage: scripts/bench_rdma.py [path/to/snic] (build with `cargo build --release` first).

Issue 18's figure (RDMA at the UDP ceiling): `scripts/bench_rdma.py target/release/snic --ceiling`
runs only 64 KiB WRITE, READ, SEND and the blaster, ROUNDS (3) interleaved rounds (the blaster
before and after each round's ops), and prints each run, the medians, each op's ratio to the
blaster's median, the median of its per-round ratios and the load average before and after;
first over loopback, then (as root) between two network namespaces joined by a veth (`hrd-a`
10.19.0.1 -- `hrd-b` 10.19.0.2, MTU 9000: path MTU 4096 as on loopback), removed at the end
whatever happens. `--no-netns` skips the second part, `--netns-only` the first.
"""
import json
import os
import statistics
import subprocess
import sys
import time

ARGS = [x for x in sys.argv[1:] if not x.startswith("--")]
FLAGS = {x for x in sys.argv[1:] if x.startswith("--")}
SNIC = os.path.abspath(ARGS[0] if ARGS else "target/release/snic")
SIZES = [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
port = [25100]


# Where the two processes run: (command prefix of the server, of the client, server address).
PLACE = {"srv": [], "cli": [], "addr": "127.0.0.1"}

# CPU pinning (taskset, `PIN=1`): server on CPU 0, client on CPU 1, for every op and the blaster
# alike. By default placement is left to the scheduler, as in the figures before 2026-11-27
# evening; it sometimes starts both processes on one CPU and separates them only after 50-100
# ms (see BENCHMARKS.md, "Issue 18's three misses, looked at once more"). Set in main().
PIN = {"srv": [], "cli": []}


def run(op, extra, size, iters):
    port[0] += 1
    udp, tcp = port[0], port[0] + 3000
    server_extra = ["--lat"] if "--lat" in extra else []
    srv = subprocess.Popen(PLACE["srv"] + PIN["srv"]
                           + [SNIC, "rdma", op, "--server", "--port", str(udp), "-p", str(tcp)]
                           + server_extra,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        out = subprocess.run(PLACE["cli"] + PIN["cli"]
                             + [SNIC, "rdma", op, "--client", PLACE["addr"], "--port", str(udp),
                                "-p", str(tcp), "-s", str(size), "-n", str(iters),
                                "--report-gbits", "--json", "--timeout", "20"] + extra,
                             capture_output=True, text=True, timeout=120)
    finally:
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def ceiling(label, rounds=3, size=65536):
    """64 KiB WRITE / READ / SEND / blast, `rounds` interleaved rounds; medians and ratios.

    The shared host's rate drifts between runs (the blaster alone has moved 15-47 Gb/s from one
    run to the next), so each round runs the blaster before and after its three ops and each op
    is also compared with the mean of those two: the median of these per-round ratios is
    printed beside the ratio of medians."""
    ops = ["write", "read", "send"]
    n = iters_for(size)
    print(f"### {label}: {size // 1024} KiB, {n} messages per run, load average {loadavg()}\n")
    got = {op: [] for op in ops + ["blast"]}
    ratio = {op: [] for op in ops}
    for r in range(rounds):
        bw = {}
        for op in ["blast"] + ops + ["blast2"]:
            v = run(op.rstrip("2"), [], size, n)
            bw[op] = v["bw_avg"] if v else float("nan")
        ceil = (bw["blast"] + bw["blast2"]) / 2
        got["blast"].append(ceil)
        for op in ops:
            got[op].append(bw[op])
            ratio[op].append(bw[op] / ceil)
        print(f"round {r + 1}: blast {bw['blast']:.2f} / {bw['blast2']:.2f}, "
              + ", ".join(f"{op} {bw[op]:.2f} ({bw[op] / ceil:.2f})" for op in ops), flush=True)
    med = {op: statistics.median(v) for op, v in got.items()}
    b = med["blast"]
    print()
    print("| op | Gb/s per run | median Gb/s | vs blast median | per-round ratios | median ratio |")
    print("|---|---|---:|---:|---|---:|")
    for op in ops + ["blast"]:
        runs = " / ".join(f"{x:.2f}" for x in got[op])
        if op == "blast":
            print(f"| BLAST (mean of the round's two) | {runs} | {b:.2f} | 1 | | |")
            continue
        rs = " / ".join(f"{x:.2f}" for x in ratio[op])
        print(f"| {op.upper()} | {runs} | {med[op]:.2f} | {med[op] / b:.2f} | {rs} "
              f"| {statistics.median(ratio[op]):.2f} |")
    print(f"\nload average after: {loadavg()}\n", flush=True)


def with_netns(body):
    """Run `body()` with the server in `hrd-b` and the client in `hrd-a`, joined by a veth."""
    a, b = "hrd-a", "hrd-b"

    def sh(*cmd):
        subprocess.run(list(cmd), check=True)

    def cleanup():
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)

    cleanup()
    try:
        for ns in (a, b):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "hrd-a0", "netns", a, "type", "veth", "peer", "name", "hrd-b0",
           "netns", b)
        for ns, dev, ip in ((a, "hrd-a0", "10.19.0.1/24"), (b, "hrd-b0", "10.19.0.2/24")):
            sh("ip", "-n", ns, "addr", "add", ip, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "mtu", "9000", "up")
        PLACE.update(srv=["ip", "netns", "exec", b], cli=["ip", "netns", "exec", a],
                     addr="10.19.0.2")
        body()
    finally:
        PLACE.update(srv=[], cli=[], addr="127.0.0.1")
        cleanup()


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
    if os.environ.get("PIN", "0") == "1" and (os.cpu_count() or 1) >= 2:
        PIN.update(srv=["taskset", "-c", "0"], cli=["taskset", "-c", "1"])
    print(f"placement: {'server on CPU 0, client on CPU 1' if PIN['srv'] else 'unpinned'}\n")
    if "--ceiling" in FLAGS:
        rounds = int(os.environ.get("ROUNDS", "3"))
        if "--netns-only" not in FLAGS:
            ceiling("loopback", rounds)
        if "--no-netns" not in FLAGS:
            if os.geteuid() != 0:
                print("two namespaces over a veth: skipped (needs root)")
            else:
                with_netns(lambda: ceiling("two namespaces over a veth (MTU 9000)", rounds))
        return
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
