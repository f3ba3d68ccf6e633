#!/bin/sh
# The forwarding gap of a vSwitch fast-path restart, or of a hitless upgrade, under TCP load
# (issue 19), between network namespaces (root; the topology of scripts/netns/vswitch_topo.sh,
# tag "hsb").
#
# Each run: `snic run --stage parse --stage vswitch` between vm-a and host-b, an iperf3 TCP
# stream vm-a -> host-b through the VXLAN tunnel for 6 s, host-b's underlay captured by dumpcap
# (headers only); 2.5 s in, `snic vswitch restart-fastpath --hold-ms HOLD`, or with
# MODE=upgrade a second `snic run ... --takeover SOCK` that takes the first one over (the
# first exits). Per run it prints:
#   - snic's drops over the run (every reason), iperf3's retransmits and the bytes moved;
#   - the gap: the longest pause between two tunnelled packets leaving snic within 1 s of the
#     restart, against the baseline: the longest pause within the 1 s before it (same run);
#   - the packets the slow path served alone and the flows the restart dropped.
# Then the medians over the runs.
#
# Usage (root): [MODE=restart|upgrade] scripts/bench_servicing.sh [SNIC_BINARY] [RUNS] [HOLD_MS]
#   defaults: restart, target/release/snic (build it with `cargo build --release -p snic`), 3,
#   300
set -eu
mode=${MODE:-restart}
snic=$(realpath "${1:-target/release/snic}")
runs=${2:-3}
hold=${3:-300}
here=$(dirname "$0")
policy=$(realpath "$here/../tests/data/vswitch/interop.toml")
tag=hsb
topo="$here/netns/vswitch_topo.sh"
dir=$(mktemp -d /tmp/snic-bench-servicing.XXXXXX)
cleanup() {
    for p in $(cat "$dir"/*.pid 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    sh "$topo" down "$tag" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
echo "load average: $(cat /proc/loadavg)"
echo "snic: $snic; $runs run(s); mode $mode; hold ${hold} ms"
for i in $(seq 1 "$runs"); do
    sh "$topo" up "$tag" >/dev/null
    sock="$dir/ctl.sock"
    rm -f "$sock"
    # Always run in the background: `exec` makes the background job's pid timeout's own, so
    # killing it stops snic.
    run_snic() {
        exec timeout -k 2 30 ip netns exec ${tag}sw "$snic" run --port afpacket:${tag}va \
            --port afpacket:${tag}ub --stage parse --stage vswitch --policy "$policy" \
            --control "$sock" --duration 20 "$@"
    }
    run_snic >"$dir/snic.out" 2>"$dir/snic.err" &
    echo $! >"$dir/snic.pid"
    n=0
    until "$snic" stats --control "$sock" 2>/dev/null | grep rx_packets >/dev/null; do
        n=$((n + 1)); [ $n -lt 100 ] || { echo "snic did not start"; cat "$dir/snic.err"; exit 1; }
        sleep 0.1
    done
    timeout 5 ip netns exec ${tag}vm ping -c 2 -i 0.2 10.0.0.2 >/dev/null
    timeout -k 2 20 ip netns exec ${tag}hb dumpcap -q -P -s 96 -i eth0 -f "udp port 4789" \
        -w "$dir/ul.pcap" >/dev/null 2>"$dir/dumpcap.err" &
    echo $! >"$dir/dumpcap.pid"
    timeout -k 2 20 ip netns exec ${tag}hb iperf3 -s -1 -B 10.0.0.2 >/dev/null 2>&1 &
    echo $! >"$dir/iperf3s.pid"
    sleep 1
    timeout -k 2 20 ip netns exec ${tag}vm iperf3 -c 10.0.0.2 -t 6 -J >"$dir/iperf3.json" &
    client=$!
    sleep 2.5
    "$snic" stats --control "$sock" >"$dir/before.json"
    t_restart=$(date +%s.%N)
    if [ "$mode" = upgrade ]; then
        run_snic --takeover "$sock" >"$dir/snic-new.out" 2>"$dir/snic-new.err" &
        echo $! >"$dir/snic-new.pid"
        echo '{"flushed": null}' >"$dir/restart.json"
    else
        "$snic" vswitch restart-fastpath --control "$sock" --hold-ms "$hold" --json \
            >"$dir/restart.json"
    fi
    wait "$client"
    sleep 0.5
    "$snic" stats --control "$sock" >"$dir/after.json"
    "$snic" vswitch show --control "$sock" --json >"$dir/show.json"
    kill "$(cat "$dir/dumpcap.pid")" 2>/dev/null || true
    sleep 0.5
    python3 - "$dir" "$t_restart" "$hold" "$i" "$mode" <<'EOF' | tee -a "$dir/results"
import json, struct, sys
d, t_restart, hold, run, mode = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def drops(f):
    v = json.load(open(f"{d}/{f}"))
    return sum(x for x in v.get("drops", {}).values() if isinstance(x, int))
after = json.load(open(f"{d}/after.json"))
# With MODE=upgrade the counters are the new process's, which start at the takeover.
takeover = after.get("takeover") or {}
ip = json.load(open(f"{d}/iperf3.json"))
show = json.load(open(f"{d}/show.json"))
restart = json.load(open(f"{d}/restart.json"))
ts = []
with open(f"{d}/ul.pcap", "rb") as f:
    hdr = f.read(24)
    endian = "<" if hdr[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = hdr[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    while True:
        rec = f.read(16)
        if len(rec) < 16:
            break
        sec, frac, incl, _ = struct.unpack(endian + "IIII", rec)
        data = f.read(incl)
        # Only what snic sent: source MAC 02:00:00:00:01:01 (snic's underlay).
        if data[6:12] == bytes([2, 0, 0, 0, 1, 1]):
            ts.append(sec + frac / (1e9 if nano else 1e6))
def max_gap(lo, hi):
    w = [t for t in ts if lo <= t <= hi]
    return max((b - a for a, b in zip(w, w[1:])), default=float("nan")) * 1e3, len(w)
gap, n_after = max_gap(t_restart, t_restart + 1.0)
base, n_before = max_gap(t_restart - 1.0, t_restart)
end = ip.get("end", {})
print(json.dumps({
    "run": int(run),
    "snic_drops": drops("after.json"),
    "snic_drops_across_restart": drops("after.json") - (0 if mode == "upgrade" else drops("before.json")),
    "takeover_gap_ms": takeover.get("gap_ms"),
    "iperf3_error": ip.get("error"),
    "iperf3_retransmits": end.get("sum_sent", {}).get("retransmits"),
    "iperf3_gbps": round(end.get("sum_received", {}).get("bits_per_second", 0) / 1e9, 3),
    "gap_ms": round(gap, 3), "baseline_gap_ms": round(base, 3),
    "pkts_1s_after": n_after, "pkts_1s_before": n_before,
    "slow_served": show["fast"]["slow_served"], "flushed": restart.get("flushed"),
    "closed": show["slow"]["closed"], "tcp_invalid": show["slow"]["tcp_invalid"],
}))
EOF
    for p in $(cat "$dir"/snic*.pid); do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -f "$dir"/*.pid
    sh "$topo" down "$tag" >/dev/null 2>&1 || true
done
python3 - "$dir/results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda k: statistics.median(r[k] for r in rows)
tk = [r["takeover_gap_ms"] for r in rows if r.get("takeover_gap_ms") is not None]
if tk:
    print(f"takeover gap reported by the new process (median): {statistics.median(tk):.1f} ms")
print(f"median of {len(rows)}: gap {med('gap_ms'):.1f} ms (baseline {med('baseline_gap_ms'):.1f} ms), "
      f"snic drops across the restart {med('snic_drops_across_restart')}, "
      f"iperf3 retransmits {med('iperf3_retransmits')}, {med('iperf3_gbps')} Gbit/s, "
      f"slow path served {med('slow_served')} packets")
EOF
echo "load average: $(cat /proc/loadavg)"
