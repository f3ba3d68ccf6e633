#!/usr/bin/env python3
"""Two snic NICs over a veth, against the bare veth, in one run (issue 12; root only).

Two network namespaces joined by a veth pair. First each namespace runs one NIC
(`snic serve --port afpacket:VETH --host-netdev snic0 --rdma-ip IP`) and the script measures
through both NICs: iperf3 TCP between the host netdevs, RDMA WRITE/READ bandwidth at 64 KiB
and 1 MiB and 8-byte WRITE latency between host programs (`rdma_peer` bench roles, QPs over
the NICs' setup sockets). Then it stops the NICs, puts the addresses straight on the veths and
measures the baselines: the raw UDP blaster (`snic rdma blast`, the RoCE packet sizes of the
same path MTU) and iperf3 over the bare veth. Median of REPS runs each; markdown tables with
ratios at the end, and the NICs' final counters (`--counters FILE` keeps them as JSON).

Usage (after `cargo build --release -p snic --bins && cargo build --release -p snic-host
--example rdma_peer`):

    sudo scripts/bench_nic.py [--target DIR] [--mtu 1500,9000] [--reps 3] [--secs 3]
        [--window 16] [--iperf-secs 5] [--counters FILE]
"""
import argparse
import atexit
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ID = os.getpid()
NS = [f"snbenchA{ID}", f"snbenchB{ID}"]
VETH = [f"sbA{ID}"[:15], f"sbB{ID}"[:15]]
HOST = ["10.79.0.1", "10.79.0.2"]
ROCE = ["10.79.0.11", "10.79.0.12"]
SIZES = [65536, 1 << 20]
procs = []


def sh(*args, timeout=30, check=True, ns=None):
    cmd = (["ip", "netns", "exec", NS[ns]] if ns is not None else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stderr}{r.stdout}")
    return r.stdout


def popen(ns, args, **kw):
    p = subprocess.Popen(["ip", "netns", "exec", NS[ns]] + args, **kw)
    procs.append(p)
    return p


def stop(p, grace=5.0):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def topology(mtu):
    for ns in NS:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", VETH[0], "netns", NS[0], "type", "veth", "peer", "name", VETH[1],
       "netns", NS[1])
    for i in range(2):
        sh("sysctl", "-qw", f"net.ipv6.conf.{VETH[i]}.disable_ipv6=1", ns=i)
        sh("ip", "-n", NS[i], "link", "set", VETH[i], "mtu", str(mtu), "up")


def ping(ns, ip):
    """Wait (up to 10 s) until `ip` answers: the first frames may wait for ARP."""
    for _ in range(10):
        if subprocess.run(["ip", "netns", "exec", NS[ns], "ping", "-c", "1", "-W", "1", ip],
                          capture_output=True).returncode == 0:
            return
    raise RuntimeError(f"{ip} does not answer pings from {NS[ns]}")


def cpu(pids):
    """(CPU ticks of processes `pids`, busy ticks of the machine, all ticks of the machine)."""
    own = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                v = f.read().rsplit(")", 1)[1].split()
            own += int(v[11]) + int(v[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return own, sum(t) - t[3] - t[4], sum(t)


def cpu_share(before, after):
    """Of the machine's CPU time in between: the share of `pids` and the share busy at all."""
    total = max(1, after[2] - before[2])
    return (after[0] - before[0]) / total, (after[1] - before[1]) / total


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def iperf(server_ip, secs):
    srv = popen(1, ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.4)
    try:
        out = sh("iperf3", "-J", "-t", str(secs), "-c", server_ip, timeout=secs + 20, ns=0,
                 check=False)
        v = json.loads(out)
        return (v["end"]["sum_received"]["bits_per_second"] / 1e9,
                v["end"]["sum_sent"].get("retransmits", 0))
    except (ValueError, KeyError):
        return None, None
    finally:
        try:
            srv.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop(srv)


class Nic:
    def __init__(self, snic, i, tmp):
        self.sock = os.path.join(tmp, f"nic{i}.sock")
        self.out_path = os.path.join(tmp, f"nic{i}.out")
        self.p = popen(i, [snic, "serve", "--no-huge", "--workers", "1", "--socket", self.sock,
                           "--port", f"afpacket:{VETH[i]}", "--host-netdev", "snic0",
                           "--rdma-ip", ROCE[i]],
                       stdout=open(self.out_path, "w"), stderr=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if k != "RUST_LOG"})

    def output(self):
        with open(self.out_path) as f:
            return f.read()

    def finish(self):
        stop(self.p)
        lines = [l for l in self.output().splitlines() if l.startswith("{")]
        return json.loads(lines[-1]) if lines else {}


def rdma(peer, tmp, role, size, n, secs, window=16):
    """One bench run: a sink in namespace 1, `role` in namespace 0; returns its JSON."""
    sink = popen(1, ["timeout", "60", peer, os.path.join(tmp, "nic1.sock"), "sink", "on-chip",
                     ROCE[0], str(size)],
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True)
    act = popen(0, ["timeout", "60", peer, os.path.join(tmp, "nic0.sock"), role, "on-chip",
                    ROCE[1], str(size), str(n), str(secs), str(window)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
    try:
        la, lb = act.stdout.readline(), sink.stdout.readline()
        if not (la.startswith("QP ") and lb.startswith("QP ")):
            raise RuntimeError(f"QP lines: {la!r} {lb!r} {act.stderr.read()} {sink.stderr.read()}")
        act.stdin.write(lb)
        act.stdin.flush()
        sink.stdin.write(la)
        sink.stdin.flush()
        out, err = act.communicate(timeout=70)
        sink.stdin.write("END\n")
        sink.stdin.flush()
        sink.communicate(timeout=10)
    finally:
        stop(act, 1)
        stop(sink, 1)
    js = [l for l in out.splitlines() if l.startswith("{")]
    if act.returncode != 0 or not js:
        print(f"  {role} {size}: failed: {out}{err}", file=sys.stderr)
        return None
    return json.loads(js[-1])


def blast(snic, size, mtu, n):
    srv = popen(1, [snic, "rdma", "blast", "--server", "--timeout", "30"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        out = sh(snic, "rdma", "blast", "--client", HOST[1], "-s", str(size), "-n", str(n),
                 "--mtu", str(mtu), "--report-gbits", "--json", "--timeout", "30", timeout=60,
                 ns=0, check=False)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    finally:
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop(srv)


def path_mtu(link_mtu):
    # What the NIC derives from its wire port (rxe's rule): the largest IB MTU whose packet
    # (IP 20 + UDP 8 + BTH 12 + RETH 16 + payload + ICRC 4) fits the link.
    return max(m for m in (256, 512, 1024, 2048, 4096) if m + 60 <= link_mtu)


def variant(a, mtu, tmp):
    print(f"== MTU {mtu}: two NICs", file=sys.stderr, flush=True)
    topology(mtu)
    res = {"mtu": mtu, "pmtu": path_mtu(mtu)}
    nics = [Nic(a.snic, i, tmp) for i in range(2)]
    t0 = time.time()
    while not all("snic serve: NIC" in n.output() for n in nics):
        if time.time() - t0 > 20 or any(n.p.poll() is not None for n in nics):
            raise RuntimeError("the NICs did not start: " + " | ".join(n.output() for n in nics))
        time.sleep(0.1)
    for i in range(2):
        sh("ip", "addr", "add", f"{HOST[i]}/24", "dev", "snic0", ns=i)
        sh("ip", "link", "set", "snic0", "mtu", str(mtu), "up", ns=i)
    time.sleep(1.2)  # the NIC's TAP port re-reads its MTU once a second
    ping(0, HOST[1])
    sh("ping", "-c", "1", "-W", "2", "-M", "do", "-s", str(mtu - 28), HOST[1], ns=0)
    runs = [iperf(HOST[1], a.iperf_secs) for _ in range(a.reps)]
    res["tcp_nic"] = median([r[0] for r in runs])
    res["tcp_nic_retr"] = median([r[1] for r in runs])
    pids = [n.p.pid for n in nics]
    for role in ["bw-write", "bw-read"]:
        for size in SIZES:
            c0 = cpu(pids)
            rs = [rdma(a.peer, tmp, role, size, (1 << 30) // size, a.secs, a.window) for _ in range(a.reps)]
            nic_cpu, busy = cpu_share(c0, cpu(pids))
            res[f"{role}-{size}"] = median([r and r["gbps"] for r in rs])
            res[f"{role}-{size}-cpu"] = (nic_cpu, busy)
            print(f"  {role} {size}: {[r and r['gbps'] for r in rs]}; both NICs' processes "
                  f"{nic_cpu:.0%} of the machine's CPU, machine busy {busy:.0%}",
                  file=sys.stderr, flush=True)
    lat = [rdma(a.peer, tmp, "lat-write", 8, 2000, a.secs) for _ in range(a.reps)]
    for k in ["min_us", "median_us", "p99_us"]:
        res[f"lat-{k}"] = median([r and r[k] for r in lat])
    res["counters"] = [n.finish() for n in nics]

    print(f"== MTU {mtu}: bare veth", file=sys.stderr, flush=True)
    for i in range(2):
        sh("ip", "addr", "add", f"{HOST[i]}/24", "dev", VETH[i], ns=i)
    ping(0, HOST[1])
    for size in SIZES:
        # The bytes of the RDMA run's budget, so both send about as much.
        n = max(1, (256 << 20) // size)
        rs = [blast(a.snic, size, res["pmtu"], n) for _ in range(a.reps)]
        res[f"blast-{size}"] = median([r and r["bw_avg"] for r in rs])
        print(f"  blast {size}: {[r and r['bw_avg'] for r in rs]}", file=sys.stderr, flush=True)
    runs = [iperf(HOST[1], a.iperf_secs) for _ in range(a.reps)]
    res["tcp_veth"] = median([r[0] for r in runs])
    res["tcp_veth_retr"] = median([r[1] for r in runs])
    for ns in NS:
        sh("ip", "netns", "del", ns)
    return res


def counters_note(c):
    """The counters that tell what bounded a run."""
    out = []
    for i, st in enumerate(c):
        eng = st.get("rdma", {}).get("engine", {})
        nic = st.get("nic", {})
        keys = {k: v for k, v in eng.items() if isinstance(v, (int, float)) and v and (
            "retr" in k or "drop" in k or "nak" in k or "timeout" in k or "dup" in k
            or "packets" in k)}
        out.append(f"NIC {i}: engine {keys}; nic {json.dumps(nic, separators=(',', ':'))}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=os.environ.get("CARGO_TARGET_DIR", "target"))
    ap.add_argument("--mtu", default="1500,9000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--secs", type=float, default=3.0, help="bound of one RDMA bandwidth run")
    ap.add_argument("--window", type=int, default=16, help="outstanding RDMA WRs (1..=64)")
    ap.add_argument("--iperf-secs", type=int, default=5)
    ap.add_argument("--counters", help="write the NICs' final counters here (JSON)")
    a = ap.parse_args()
    a.snic = os.path.abspath(os.path.join(a.target, "release/snic"))
    a.peer = os.path.abspath(os.path.join(a.target, "release/examples/rdma_peer"))
    for p in [a.snic, a.peer]:
        if not os.access(p, os.X_OK):
            sys.exit(f"{p} missing: build with cargo build --release first")
    if os.geteuid() != 0:
        sys.exit("needs root (namespaces, veth)")
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    start = time.time()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-nic-") as tmp:
        for mtu in [int(m) for m in a.mtu.split(",")]:
            results.append(variant(a, mtu, tmp))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}, {a.reps} runs each (median), "
          f"{time.time() - start:.0f} s\n")
    print("| MTU (path MTU) | what | two snic NICs | baseline | ratio |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        m = f"{r['mtu']} ({r['pmtu']})"
        for size in SIZES:
            b = r[f"blast-{size}"]
            for role, op in [("bw-write", "WRITE"), ("bw-read", "READ")]:
                v = r[f"{role}-{size}"]
                print(f"| {m} | RDMA {op} {size >> 10} KiB, Gb/s (vs UDP blast) | {v:.2f} | "
                      f"{b:.2f} | {v / b:.2f} |")
        t, tv = r["tcp_nic"], r["tcp_veth"]
        print(f"| {m} | TCP iperf3 {a.iperf_secs} s, Gb/s (vs bare veth) | {t:.2f} | {tv:.2f} | "
              f"{t / tv:.2f} |")
    print("\n| MTU | 8-byte WRITE post-to-completion | min us | median us | p99 us |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['mtu']} | through both NICs, verbs over the setup socket | "
              f"{r['lat-min_us']:.1f} | {r['lat-median_us']:.1f} | {r['lat-p99_us']:.1f} |")
    print("\nCPU during the RDMA bandwidth runs (share of the machine's 2 vCPUs: both NIC "
          "processes / everything busy):")
    for r in results:
        print(f"- MTU {r['mtu']}: " + ", ".join(
            f"{role[3:].upper()} {size >> 10} KiB {r[f'{role}-{size}-cpu'][0]:.0%} / "
            f"{r[f'{role}-{size}-cpu'][1]:.0%}"
            for role in ["bw-write", "bw-read"] for size in SIZES))
    print("\nTCP retransmits (median): " + ", ".join(
        f"MTU {r['mtu']}: NICs {r['tcp_nic_retr']}, veth {r['tcp_veth_retr']}" for r in results))
    for r in results:
        print(f"\nCounters at the end, MTU {r['mtu']}:")
        for line in counters_note(r["counters"]):
            print("- " + line)
    if a.counters:
        with open(a.counters, "w") as f:
            json.dump({str(r["mtu"]): r["counters"] for r in results}, f, indent=1)


if __name__ == "__main__":
    main()
