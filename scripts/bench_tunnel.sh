#!/bin/sh
# TCP through VXLAN encapsulation (issue 18, section 2): snic's vSwitch against the kernel's
# bridge + vxlan device in snic's place, same topology as scripts/netns/vswitch_topo.sh:
#
#   vm (eth0 10.0.0.1, MTU 1450) ==veth== snic / kernel ==underlay== hb (eth0 192.168.100.2,
#   vxlan42 VNI 42 10.0.0.2)
#
# Modes, each in a fresh topology:
#   kernel     the kernel's bridge + vxlan device in snic's place, veth underlay (the baseline)
#   snic-tap   snic, underlay a TAP device snic opens and this script moves into hb's namespace
#              (snic keeps its descriptor): UDP-tunnel GSO, super-packets cross whole
#   snic-veth  snic, veth underlay (AF_PACKET): PACKET_VNET_HDR takes no UDP-tunnel GSO, so a
#              tunnelled super-packet leaves as one GSO_UDP_L4 buffer of ready VXLAN datagrams
#              (tunnel_udp_gso) and runs of VXLAN datagrams merge into such buffers
#              (gro_coalesced); the kernel cuts them
# Each with vm's TX offloads on (TSO/GSO super-packets) and off. iperf3 -t SECS vm -> hb,
# RUNS rounds interleaved; prints every figure, the medians and the ratios to the kernel.
#
# Usage (root): scripts/bench_tunnel.sh [SNIC_BINARY]   (default target/release/snic)
#   env: RUNS (3), SECS (5), MODES ("kernel snic-tap snic-veth"), TAG (fpt)
set -eu
snic=${1:-target/release/snic}
runs=${RUNS:-3}
secs=${SECS:-5}
modes=${MODES:-"kernel snic-tap snic-veth"}
tag=${TAG:-fpt}
here=$(cd "$(dirname "$0")/.." && pwd)
policy=$here/tests/data/vswitch/interop.toml
vm=${tag}vm sw=${tag}sw hb=${tag}hb va=${tag}va ub=${tag}ub
sock=/tmp/${tag}-bench.sock
out=$(mktemp -d /tmp/${tag}-bench.XXXXXX)
t() { timeout -k 2 10 "$@"; }
snic_pid=

down() {
    [ -n "$snic_pid" ] && kill "$snic_pid" 2>/dev/null && wait "$snic_pid" 2>/dev/null
    snic_pid=
    for n in "$vm" "$sw" "$hb"; do ip netns del "$n" 2>/dev/null || true; done
}
trap 'down; rm -rf "$out"' EXIT INT TERM

# Namespaces, vm's veth and everything of hb but its underlay link.
up_common() {
    for n in "$vm" "$sw" "$hb"; do
        t ip netns add "$n"
        t ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        t ip netns exec "$n" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
        t ip -n "$n" link set lo up
    done
    t ip link add "$va" netns "$sw" type veth peer name eth0 netns "$vm"
    t ip -n "$vm" link set eth0 address 02:00:00:00:00:0a mtu 1450 up
    t ip -n "$vm" addr add 10.0.0.1/24 dev eth0
    t ip -n "$vm" route add default via 10.0.0.254
    t ip -n "$vm" neigh replace 10.0.0.254 lladdr 02:00:00:00:00:fe dev eth0 nud permanent
    t ip -n "$sw" link set "$va" up
}

# hb's side once its underlay link is in its namespace as eth0.
up_hb() {
    t ip -n "$hb" link set eth0 address 02:00:00:00:02:02 up
    t ip -n "$hb" addr add 192.168.100.2/24 dev eth0
    t ip -n "$hb" neigh replace 192.168.100.1 lladdr 02:00:00:00:01:01 dev eth0 nud permanent
    t ip -n "$hb" link add vxlan42 address 02:00:00:00:00:0b mtu 1450 type vxlan id 42 \
        local 192.168.100.2 remote 192.168.100.1 dstport 4789 dev eth0
    t ip -n "$hb" addr add 10.0.0.2/24 dev vxlan42
    t ip -n "$hb" link set vxlan42 up
    for d in eth0 vxlan42; do
        t ip netns exec "$hb" ethtool -K "$d" tx off tso off gso off >/dev/null
    done
}

start_snic() {
    rm -f "$sock"
    ip netns exec "$sw" "$snic" run --port "afpacket:$va" --port "$1" --stage parse \
        --stage vswitch --policy "$policy" --control "$sock" --duration 600 \
        >"$out/snic.out" 2>"$out/snic.err" &
    snic_pid=$!
    i=0
    until "$snic" stats --control "$sock" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -gt 100 ] && { cat "$out/snic.err" >&2; echo "snic did not start" >&2; exit 1; }
        sleep 0.1
    done
}

setup() {
    down
    up_common
    case "$1" in
    kernel | snic-veth)
        t ip link add "$ub" netns "$sw" address 02:00:00:00:01:01 type veth \
            peer name eth0 netns "$hb"
        t ip -n "$sw" link set "$ub" up
        up_hb
        if [ "$1" = kernel ]; then
            t ip -n "$sw" link add br0 type bridge
            t ip -n "$sw" addr add 192.168.100.1/24 dev "$ub"
            t ip -n "$sw" neigh replace 192.168.100.2 lladdr 02:00:00:00:02:02 dev "$ub" \
                nud permanent
            t ip -n "$sw" link add vxlan42 mtu 1450 type vxlan id 42 local 192.168.100.1 \
                remote 192.168.100.2 dstport 4789 dev "$ub"
            t ip -n "$sw" link set vxlan42 master br0
            t ip -n "$sw" link set "$va" master br0
            t ip -n "$sw" link set vxlan42 up
            t ip -n "$sw" link set br0 up
        else
            start_snic "afpacket:$ub"
        fi
        ;;
    snic-tap)
        start_snic "tap:$ub"
        t ip -n "$sw" link set "$ub" netns "$hb"
        t ip -n "$hb" link set "$ub" name eth0
        up_hb
        ;;
    esac
}

# One iperf3 run vm -> hb; prints Gbit/s.
measure() {
    ip netns exec "$vm" ethtool -K eth0 tx "$1" tso "$1" gso "$1" >/dev/null
    timeout -k 2 $((secs + 15)) ip netns exec "$hb" iperf3 -s -1 -B 10.0.0.2 >/dev/null 2>&1 &
    srv=$!
    sleep 0.5
    ip netns exec "$vm" ping -c 1 -W 2 10.0.0.2 >/dev/null 2>&1 || true
    timeout -k 2 $((secs + 10)) ip netns exec "$vm" iperf3 -c 10.0.0.2 -t "$secs" -J \
        >"$out/iperf.json" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    python3 -c 'import json,sys
try: print("%.3f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e9))
except Exception: print("0.000")' "$out/iperf.json"
}

echo "# bench_tunnel: $runs rounds, iperf3 -t $secs vm -> hb; loadavg: $(cat /proc/loadavg)"
for r in $(seq 1 "$runs"); do
    for m in $modes; do
        setup "$m"
        for o in on off; do
            g=$(measure "$o")
            extra=
            if [ -n "$snic_pid" ]; then
                extra=$("$snic" stats --control "$sock" 2>/dev/null | python3 -c '
import json,sys
v=json.load(sys.stdin); p=v.get("ports",[])
f=lambda k: sum(x.get(k,0) for x in p)
print("tunnel_segmented=%d tunnel_udp_gso=%d gro_coalesced=%d tx=%d" % (f("tunnel_segmented"), f("tunnel_udp_gso"), f("gro_coalesced"), f("tx_packets")))' 2>/dev/null || true)
            fi
            echo "round $r $m offloads-$o $g Gbit/s $extra"
            echo "$m $o $g" >>"$out/all"
        done
    done
done
echo "# loadavg after: $(cat /proc/loadavg)"
python3 - "$out/all" <<'EOF'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for m, o in {(r[0], r[1]) for r in rows}:
    med[(m, o)] = statistics.median(float(r[2]) for r in rows if r[0] == m and r[1] == o)
for o in ("on", "off"):
    k = med.get(("kernel", o))
    for m in sorted({r[0] for r in rows}):
        v = med.get((m, o))
        if v is None:
            continue
        ratio = " ratio %.3f" % (v / k) if k and m != "kernel" else ""
        print("median offloads-%s %-9s %.3f Gbit/s%s" % (o, m, v, ratio))
EOF
