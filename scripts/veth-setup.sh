#!/bin/sh
# Veth pairs for PTF (or any packet test) against snic, like BMv2's veth_setup.sh:
#
#   ${PREFIX}0 <-> ${PREFIX}1,  ${PREFIX}2 <-> ${PREFIX}3,  ...   (N pairs)
#
# The test tool (PTF) takes the even ends, snic the odd ones:
#   snic run --port afpacket:veth1 --port afpacket:veth3 ...   (P4 ports 0, 1, ...)
#   ptf --interface 0@veth0 --interface 1@veth2 ...            (PTF ports 0, 1, ...)
#
# Usage (root; run it under `ip netns exec NS` to make the pairs inside a namespace):
#   scripts/veth-setup.sh up N [PREFIX]     create N pairs (PREFIX defaults to "veth"); an
#                                           existing pair of the same names is re-created
#   scripts/veth-setup.sh down N [PREFIX]   delete them (missing ones are not an error)
#
# So that a test sees only its own packets (PTF's verify_no_other_packets), every end gets:
# IPv6 off before it comes up (no router solicitations, MLD reports or DAD), no addresses,
# no ARP, no multicast; MTU 9500 (as BMv2's script). With ethtool there, the offloads BMv2's
# script turns off are off too (checksum, segmentation, receive coalescing, VLAN), so a frame
# crosses the pair as it was written.
#
# VLAN tags: whatever the offloads, the kernel moves the outer 802.1Q/802.1ad tag of a
# received frame into packet metadata; an AF_PACKET reader sees it only by asking for
# PACKET_AUXDATA and putting it back (PTF and libpcap do).
set -eu
cmd=${1:-}
n=${2:-}
prefix=${3:-veth}
t() { timeout -k 2 10 "$@"; }

case "$n" in
'' | *[!0-9]*)
    echo "usage: $0 up|down N [PREFIX]" >&2
    exit 2
    ;;
esac
# Interface names are at most 15 bytes.
last="${prefix}$((2 * n - 1))"
if [ "${#last}" -gt 15 ]; then
    echo "$0: interface name $last is longer than 15 characters" >&2
    exit 2
fi

quiet_end() {
    if [ -w "/proc/sys/net/ipv6/conf/$1/disable_ipv6" ]; then
        echo 1 >"/proc/sys/net/ipv6/conf/$1/disable_ipv6"
    fi
    t ip link set dev "$1" mtu 9500 arp off multicast off
    if command -v ethtool >/dev/null 2>&1; then
        # One feature at a time: ethtool refuses the whole list if one is fixed.
        for f in rx tx sg tso gso gro lro rxvlan txvlan rx-vlan-stag-hw-parse \
            tx-vlan-stag-hw-insert rxhash; do
            t ethtool -K "$1" "$f" off >/dev/null 2>&1 || true
        done
    else
        echo "$0: ethtool missing: offloads of $1 stay on (VLAN tags may be lost)" >&2
    fi
    t ip link set dev "$1" up
}

case "$cmd" in
up)
    i=0
    while [ "$i" -lt "$n" ]; do
        a="${prefix}$((2 * i))"
        b="${prefix}$((2 * i + 1))"
        if ip link show "$a" >/dev/null 2>&1; then
            t ip link del "$a"
        fi
        t ip link add "$a" type veth peer name "$b"
        quiet_end "$a"
        quiet_end "$b"
        i=$((i + 1))
    done
    echo "veth pairs up: ${prefix}0..${last} (test tool: even ends, snic: odd ends)"
    ;;
down)
    i=0
    while [ "$i" -lt "$n" ]; do
        a="${prefix}$((2 * i))"
        if ip link show "$a" >/dev/null 2>&1; then
            t ip link del "$a"
        fi
        i=$((i + 1))
    done
    ;;
*)
    echo "usage: $0 up|down N [PREFIX]" >&2
    exit 2
    ;;
esac
