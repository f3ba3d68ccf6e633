#!/usr/bin/env bash
# RDMA WRITE / READ goodput under random loss between two network namespaces (issue 18).
#
# Topology: fpr-a (10.18.1.1) -- veth -- fpr-m (router) -- veth -- fpr-b (10.18.2.1), MTU 1500
# (path MTU 1024). In the middle namespace an nftables rule on the forward hook drops LOSS % of
# the RoCE datagrams (UDP destination port $PORT, both directions: requests and responses/ACKs
# all go to the RoCE port) at random: `numgen random mod 1000 < LOSS*10 drop`.
# For each loss rate, engine and op, `snic rdma OP --server` runs in fpr-b and `--client` in
# fpr-a, 64 KiB messages; three runs, the median goodput (MB/s, perftest's BW average) is
# printed with its ratio to the loss-free median of the same engine and op, plus the client's
# retransmission counters. The engines take turns within each loss rate, so their figures come
# from the same run.
#
# Usage (root): scripts/bench_rdma_loss.sh [path/to/snic] [iterations] [loss%...]
#   e.g. scripts/bench_rdma_loss.sh target/release/snic 300 0 1 5
# ENGINES: `name=flags` items separated by `;` (default
# `default=;fixed=--fixed-window`: the default path window against the fixed 1024-packet
# window without loss probes); the flags go to both `snic rdma` processes, and FLAGS to every
# engine. Namespaces are removed on exit whatever happens.
set -euo pipefail

SNIC=$(realpath "${1:-target/release/snic}")
N=${2:-1000}
shift 2 2>/dev/null || shift $#
LOSSES=("$@")
[ ${#LOSSES[@]} -eq 0 ] && LOSSES=(0 1 5)
PORT=24791
TCP=24800
A=fpr-a M=fpr-m B=fpr-b

cleanup() {
    for ns in $A $M $B; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup

for ns in $A $M $B; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add fpr-a0 netns $A type veth peer name fpr-ma netns $M
ip link add fpr-b0 netns $B type veth peer name fpr-mb netns $M
ip -n $A addr add 10.18.1.1/24 dev fpr-a0
ip -n $M addr add 10.18.1.2/24 dev fpr-ma
ip -n $M addr add 10.18.2.2/24 dev fpr-mb
ip -n $B addr add 10.18.2.1/24 dev fpr-b0
for x in "$A fpr-a0" "$M fpr-ma" "$M fpr-mb" "$B fpr-b0"; do
    set -- $x
    ip -n "$1" link set "$2" up
done
ip -n $A route add default via 10.18.1.2
ip -n $B route add default via 10.18.2.2
ip netns exec $M sysctl -qw net.ipv4.ip_forward=1
ip netns exec $M nft add table inet fprloss
ip netns exec $M nft 'add chain inet fprloss fwdc { type filter hook forward priority 0 ; }'

set_loss() {
    ip netns exec $M nft flush chain inet fprloss fwdc
    local permille
    permille=$(python3 -c "print(int(round(float('$1') * 10)))")
    if [ "$permille" -gt 0 ]; then
        ip netns exec $M nft add rule inet fprloss fwdc udp dport $PORT \
            numgen random mod 1000 '<' "$permille" counter drop
    fi
}

# One run: prints "bw_MBps retransmits timeouts seq_naks".
one() {
    local op=$1 flags=$2
    # shellcheck disable=SC2086
    ip netns exec $B timeout -k 2 120 "$SNIC" rdma "$op" --server --port $PORT -p $TCP \
        --timeout 60 $flags ${FLAGS:-} >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    local out
    # shellcheck disable=SC2086
    out=$(ip netns exec $A timeout -k 2 120 "$SNIC" rdma "$op" --client 10.18.2.1 --port $PORT \
        -p $TCP -s 65536 -n "$N" --timeout 60 --json $flags ${FLAGS:-} 2>/dev/null | tail -1) || true
    wait $srv 2>/dev/null || true
    python3 - "$out" <<'EOF'
import json, sys
try:
    v = json.loads(sys.argv[1])
except Exception:
    print("nan - - -"); sys.exit()
s = v.get("engine", {}) if isinstance(v.get("engine"), dict) else {}
def g(k):
    for d in (v, s, v.get("stats", {}) if isinstance(v.get("stats"), dict) else {}):
        if k in d:
            return d[k]
    return "-"
print(v["bw_avg"], g("retransmits"), g("timeouts"), g("seq_naks_rcvd"))
EOF
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

IFS=';' read -r -a ENG <<< "${ENGINES:-default=;fixed=--fixed-window}"
echo "engines: ${ENG[*]}; flags: ${FLAGS:-none}; load average before: $(cat /proc/loadavg)"
echo
echo "| loss | engine | op | runs MB/s | median MB/s | vs loss-free | retransmits (last run) | timeouts |"
echo "|---:|---|---|---|---:|---:|---:|---:|"
declare -A base
for loss in "${LOSSES[@]}"; do
    set_loss "$loss"
    for eng in "${ENG[@]}"; do
        name=${eng%%=*} flags=${eng#*=}
        for op in write read; do
            runs=() last=""
            for _ in 1 2 3; do
                last=$(one "$op" "$flags")
                runs+=("$(echo "$last" | cut -d' ' -f1)")
            done
            med=$(printf '%s\n' "${runs[@]}" | median)
            [ "$loss" = 0 ] && base[$name.$op]=$med
            ratio=$(python3 -c "import sys; b, m = sys.argv[1:3]; print('%.2f' % (float(m) / float(b)) if b != 'nan' else '-')" "${base[$name.$op]:-nan}" "$med")
            echo "| $loss% | $name | $op | ${runs[*]} | $med | $ratio | $(echo "$last" | cut -d' ' -f2) | $(echo "$last" | cut -d' ' -f3) |"
        done
    done
done
echo
echo "load average after: $(cat /proc/loadavg)"
