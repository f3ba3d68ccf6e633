#!/bin/bash
# Forwarding benchmark between namespaces (issue 18): sender ns --veth-- forwarder ns --veth--
# receiver ns. The sender (scripts/fwd/blast.c) offers 64-byte UDP frames of 256 flows for DUR
# seconds; the forwarder in the middle moves them from its first veth to its second; the
# receiver's interface counts what arrived. Forwarders, run in turn (interleaved, RUNS times):
#   c        the classic C AF_PACKET recvmmsg/sendmmsg forwarder (scripts/fwd/fwd.c), batch 64
#   snic:N   `snic run --port KIND:A --port KIND:B --workers N $SNIC_ARGS` (KIND=$PORT_KIND)
#   snic-mmsg:N  the same with SNIC_AFPACKET_MODE=mmsg (AF_PACKET on recvmmsg/sendmmsg, no ring)
#   snic-txring:N  the same with SNIC_AFPACKET_MODE=tx-ring (transmit ring too)
#   snic-v2:N  the same with SNIC_AFPACKET_MODE=v2 (the TPACKET_V2 receive ring, the default)
#   snic-v3:N  the same with SNIC_AFPACKET_MODE=v3 (the TPACKET_V3 block ring)
#   xdp:N    snic with AF_XDP ports (`--port afxdp:A --port afxdp:B`), whatever PORT_KIND says
# Per run it prints the frames the sender offered (its interface's tx counter), the frames that
# reached the receiver namespace (its interface's rx counter), delivered/offered, delivered kpps
# and the forwarder's own drop report; then the medians per forwarder and the ratio to `c`.
#
# MODE=ping measures latency instead: the sender and receiver interfaces get addresses, and per
# run `ping -c PING -i 0.01` crosses the forwarder (both ways); it prints the RTT avg and mdev
# and the medians of the per-run averages. A quiet link is what the TPACKET_V3 block timeout
# (up to 1 ms per hop) shows on.
#
# QUEUES=N makes every veth N-queue (numrxqueues/numtxqueues), so AF_XDP with --workers N gets
# one socket per queue (the per-worker queue path) instead of one socket and the RSS I/O loop.
#
# Root. Environment (defaults in brackets):
#   SNIC [target/release/snic]   DUR seconds per run [5]   RUNS [3]
#   FWDS forwarders, in run order ["c snic:1 snic:2"]   PORT_KIND [afpacket] (e.g. afxdp)
#   SNIC_ARGS extra `snic run` arguments [none]   FLOWS [256]   SIZE frame bytes, no FCS [64]
#   PIN_SENDER / PIN_FWD   CPU lists for taskset (default: no pinning)
#   MODE [flood] or ping   PING pings per run [200]   QUEUES veth queues [1]
#   KEEP_LOGS=1 keeps the per-run logs (their directory is printed)
# Example:
#   sudo DUR=5 scripts/bench_fwd.sh
#   sudo PORT_KIND=afxdp FWDS="c snic:1 snic:2" scripts/bench_fwd.sh
#   sudo QUEUES=2 FWDS="c snic:1 snic:2 xdp:1 xdp:2" scripts/bench_fwd.sh
#   sudo MODE=ping FWDS="c snic:1 snic-v2:1 snic-mmsg:1 xdp:1" scripts/bench_fwd.sh
set -eu
cd "$(dirname "$0")/.."
SNIC=${SNIC:-target/release/snic}
DUR=${DUR:-5}
RUNS=${RUNS:-3}
FWDS=${FWDS:-c snic:1 snic:2}
PORT_KIND=${PORT_KIND:-afpacket}
SNIC_ARGS=${SNIC_ARGS:-}
FLOWS=${FLOWS:-256}
SIZE=${SIZE:-64}
MODE=${MODE:-flood}
PING=${PING:-200}
QUEUES=${QUEUES:-1}
[ "$(id -u)" = 0 ] || { echo "bench_fwd.sh: needs root (namespaces, AF_PACKET)" >&2; exit 1; }
case " $FWDS " in *" snic"*) [ -x "$SNIC" ] || { echo "no snic binary at $SNIC" >&2; exit 1; } ;; esac

tag=$(( $$ % 100000 ))
NS_S=fpr-s-$tag NS_F=fpr-f-$tag NS_R=fpr-r-$tag
IF_S=fprs$tag IF_FA=fprfa$tag IF_FB=fprfb$tag IF_R=fprr$tag
D=$(mktemp -d /tmp/fpr-bench.XXXXXX)
FPID=
cleanup() {
    [ -n "$FPID" ] && kill -INT "$FPID" 2>/dev/null && sleep 0.5 && kill -KILL "$FPID" 2>/dev/null
    ip netns del "$NS_S" 2>/dev/null || true
    ip netns del "$NS_F" 2>/dev/null || true
    ip netns del "$NS_R" 2>/dev/null || true
    if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "logs kept in $D"; else rm -rf "$D"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O2 -Wall -o "$D/blast" scripts/fwd/blast.c
cc -O2 -Wall -o "$D/fwd" scripts/fwd/fwd.c

for ns in $NS_S $NS_F $NS_R; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
q="numrxqueues $QUEUES numtxqueues $QUEUES"
# shellcheck disable=SC2086
ip link add "$IF_S" netns "$NS_S" $q type veth peer name "$IF_FA" netns "$NS_F" $q
# shellcheck disable=SC2086
ip link add "$IF_FB" netns "$NS_F" $q type veth peer name "$IF_R" netns "$NS_R" $q
for pair in "$NS_S $IF_S" "$NS_F $IF_FA" "$NS_F $IF_FB" "$NS_R $IF_R"; do
    set -- $pair
    ip netns exec "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1"
    ip -n "$1" link set "$2" up
done

if [ "$MODE" = ping ]; then
    ip -n "$NS_S" addr add 10.251.0.1/24 dev "$IF_S"
    ip -n "$NS_R" addr add 10.251.0.2/24 dev "$IF_R"
fi

ctr() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"; }
pin() { if [ -n "$1" ]; then echo "taskset -c $1"; fi; }

# One run of forwarder $1; appends "name offered delivered drops" to $D/results.
run_one() {
    local name=$1 r=$2 log=$D/$1.$2.log
    case $name in
    c) ip netns exec "$NS_F" $(pin "${PIN_FWD:-}") "$D/fwd" "$IF_FA" "$IF_FB" >"$log" 2>&1 & ;;
    snic:*|snic-mmsg:*|snic-txring:*|snic-v2:*|snic-v3:*|xdp:*)
        # snic-mmsg: AF_PACKET ports on recvmmsg/sendmmsg instead of a receive ring;
        # snic-txring: V3 rings both ways; snic-v2: the TPACKET_V2 receive ring (the
        # default); snic-v3: the TPACKET_V3 block ring.
        local mode=default kind=$PORT_KIND
        case $name in
        snic-mmsg:*) mode=mmsg ;; snic-txring:*) mode=tx-ring ;; snic-v2:*) mode=v2 ;;
        snic-v3:*) mode=v3 ;;
        xdp:*) kind=afxdp ;;
        esac
        # shellcheck disable=SC2086
        ip netns exec "$NS_F" env SNIC_AFPACKET_MODE=$mode $(pin "${PIN_FWD:-}") "$SNIC" run --json \
            --port "$kind:$IF_FA" --port "$kind:$IF_FB" --workers "${name#*:}" \
            $SNIC_ARGS >"$log" 2>"$log.err" & ;;
    *) echo "unknown forwarder $name" >&2; exit 1 ;;
    esac
    FPID=$!
    sleep 1.5
    kill -0 "$FPID" 2>/dev/null || { echo "forwarder $name died:"; cat "$log" "$log.err" 2>/dev/null; exit 1; }
    if [ "$MODE" = ping ]; then
        # rtt min/avg/max/mdev = a/b/c/d ms
        local rtt
        rtt=$(ip netns exec "$NS_S" ping -q -c "$PING" -i 0.01 -W 1 10.251.0.2 2>&1 | sed -n 's|.* = \([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\) ms|\2 \4|p')
        kill -INT "$FPID"
        wait "$FPID" || true
        FPID=
        [ -n "$rtt" ] || rtt="0 0"
        set -- $rtt
        printf '%-12s %d  rtt avg %8.3f ms  mdev %8.3f ms\n' "$name" "$r" "$1" "$2"
        echo "$name $1 $2" >>"$D/results"
        return
    fi
    local tx0 txd0 rx0 tx1 txd1 rx1
    tx0=$(ctr "$NS_S" "$IF_S" tx_packets); txd0=$(ctr "$NS_S" "$IF_S" tx_dropped)
    rx0=$(ctr "$NS_R" "$IF_R" rx_packets)
    ip netns exec "$NS_S" $(pin "${PIN_SENDER:-}") "$D/blast" "$IF_S" "$DUR" -f "$FLOWS" -s "$SIZE" >"$D/blast.$name.$r" 2>&1
    sleep 0.5
    tx1=$(ctr "$NS_S" "$IF_S" tx_packets); txd1=$(ctr "$NS_S" "$IF_S" tx_dropped)
    rx1=$(ctr "$NS_R" "$IF_R" rx_packets)
    kill -INT "$FPID"
    wait "$FPID" || true
    FPID=
    local offered=$((tx1 - tx0)) delivered=$((rx1 - rx0)) vethdrop=$((txd1 - txd0)) drops
    if [ "$offered" = 0 ]; then
        # A veth in NAPI mode (an XDP program on the peer) may not count tx_packets: use what
        # the sender says it sent.
        offered=$(awk '{print $2}' "$D/blast.$name.$r")
    fi
    case $name in
    c) drops=$(sed -n 's/.*send failures \([0-9]*\), kernel drops A \([0-9]*\) B \([0-9]*\).*/kernel \2+\3 sendfail \1/p' "$log") ;;
    *) drops=$(jq -r '"total \(.drops_total) kernel \([.ports[].device | (.rx_kernel_drops // 0) + (.rx_ring_full // 0) + (.rx_fill_empty // 0) + (.tx_ring_full // 0)] | add) \(.drops | to_entries | map("\(.key)=\(.value)") | join(","))"' "$log" 2>/dev/null || echo "?") ;;
    esac
    printf '%-8s %d %10d %10d %6.3f %8.1f  veth-drop %d  fwd: %s\n' "$name" "$r" "$offered" "$delivered" \
        "$(echo "$delivered $offered" | awk '{print $2 ? $1 / $2 : 0}')" \
        "$(echo "$delivered $DUR" | awk '{print $1 / $2 / 1000}')" "$vethdrop" "${drops:-?}"
    echo "$name $offered $delivered" >>"$D/results"
}

echo "bench_fwd: $DUR s per run, $RUNS runs, forwarders: $FWDS, port kind $PORT_KIND, $FLOWS flows, $SIZE-byte frames"
echo "kernel $(uname -r), $(nproc) CPUs, loadavg before: $(cat /proc/loadavg)"
[ "$MODE" = ping ] || echo "name     run    offered  delivered  ratio     kpps"
for r in $(seq 1 "$RUNS"); do
    for f in $FWDS; do run_one "$f" "$r"; done
done
echo "loadavg after: $(cat /proc/loadavg)"
echo "medians over $RUNS runs:"
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
if [ "$MODE" = ping ]; then
    for f in $FWDS; do
        avg=$(awk -v f="$f" '$1 == f {print $2}' "$D/results" | median)
        mdev=$(awk -v f="$f" '$1 == f {print $3}' "$D/results" | median)
        printf '%-12s rtt avg %8.3f ms  mdev %8.3f ms\n' "$f" "$avg" "$mdev"
    done
    exit 0
fi
cmed=
case " $FWDS " in *" c "*)
    cmed=$(awk '$1 == "c" {print $3}' "$D/results" | median | awk -v d="$DUR" '{printf "%.1f", $1 / d / 1000}') ;;
esac
for f in $FWDS; do
    off=$(awk -v f="$f" '$1 == f {print $2}' "$D/results" | median)
    del=$(awk -v f="$f" '$1 == f {print $3}' "$D/results" | median)
    ratio=$(awk -v f="$f" '$1 == f {print ($2 ? $3 / $2 : 0)}' "$D/results" | median)
    kpps=$(echo "$del $DUR" | awk '{printf "%.1f", $1 / $2 / 1000}')
    vs=
    [ -n "$cmed" ] && [ "$f" != c ] && vs=$(echo "$kpps $cmed" | awk '{printf "  %s/c %.2f", "x", $1 / $2}' | sed "s/x/$f/")
    printf '%-8s offered %10s delivered %10s  delivered/offered %.3f  %8s kpps%s\n' "$f" "$off" "$del" "$ratio" "$kpps" "$vs"
done
