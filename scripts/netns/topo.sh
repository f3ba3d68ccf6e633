#!/bin/sh
# Two network namespaces joined through the root namespace, for trying `snic run` by hand.
#
#   netns ${TAG}a: veth 10.199.99.1/24 == ${TAG}oa (root ns)
#   netns ${TAG}b: veth 10.199.99.2/24 == ${TAG}ob (root ns)
#
# Usage (root):
#   scripts/netns/topo.sh up [TAG]      create (TAG defaults to "snicx"); kernel offloads stay on
#   scripts/netns/topo.sh bridge [TAG]  join the two outer veths with a Linux bridge instead
#   scripts/netns/topo.sh down [TAG]    delete everything the other commands made
# Then, for example:
#   snic run --port afpacket:snicxoa --port afpacket:snicxob
#   ip netns exec snicxa ping -c 3 10.199.99.2
#   ip netns exec snicxb iperf3 -s -1 & ip netns exec snicxa iperf3 -c 10.199.99.2 -t 5
set -eu
cmd=${1:-}
tag=${2:-snicx}
t() { timeout -k 2 10 "$@"; }

case "$cmd" in
up)
    for s in a b; do
        t ip netns add "${tag}$s"
        t ip link add "${tag}o$s" type veth peer name "${tag}i$s"
        t ip link set "${tag}i$s" netns "${tag}$s"
        t ip link set "${tag}o$s" up
    done
    t ip -n "${tag}a" addr add 10.199.99.1/24 dev "${tag}ia"
    t ip -n "${tag}b" addr add 10.199.99.2/24 dev "${tag}ib"
    for s in a b; do
        t ip -n "${tag}$s" link set "${tag}i$s" up
        t ip -n "${tag}$s" link set lo up
    done
    echo "ports: afpacket:${tag}oa afpacket:${tag}ob"
    ;;
bridge)
    t ip link add "${tag}br" type bridge
    t ip link set "${tag}oa" master "${tag}br"
    t ip link set "${tag}ob" master "${tag}br"
    t ip link set "${tag}br" up
    ;;
down)
    t ip link del "${tag}br" 2>/dev/null || true
    for s in a b; do
        t ip link del "${tag}o$s" 2>/dev/null || true
        t ip netns del "${tag}$s" 2>/dev/null || true
    done
    ;;
*)
    echo "usage: $0 up|bridge|down [TAG]" >&2
    exit 2
    ;;
esac
