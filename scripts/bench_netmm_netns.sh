#!/bin/sh
# Two snic NICs in namespaces joined by a veth (afpacket wire ports, TAP host netdevs), and
# `snic compute mm` across them: peer 1 in nmA, peer 2 in nmB, three runs of each argument
# string, one JSON line each. Root. Usage:
#   sudo SNIC=target/release/snic scripts/bench_netmm_netns.sh "-m 1024 -n 1024 -k 1024" ...
set -e
S=${SNIC:-target/release/snic}
D=$(mktemp -d)
ip netns add nmA; ip netns add nmB
trap 'kill $P1 $P2 $P3 2>/dev/null; sleep 1; ip netns del nmA; ip netns del nmB; rm -rf $D' EXIT
ip -n nmA link set lo up; ip -n nmB link set lo up
ip link add nmvA netns nmA type veth peer name nmvB netns nmB
ip netns exec nmA sysctl -qw net.ipv6.conf.nmvA.disable_ipv6=1
ip netns exec nmB sysctl -qw net.ipv6.conf.nmvB.disable_ipv6=1
ip -n nmA link set nmvA up; ip -n nmB link set nmvB up
ip netns exec nmA $S serve --no-huge --on-board 64M --socket $D/a.sock --port afpacket:nmvA --rdma-ip 10.79.0.11 --host-netdev snic0 >$D/a.out 2>&1 & P1=$!
ip netns exec nmB $S serve --no-huge --on-board 64M --socket $D/b.sock --port afpacket:nmvB --rdma-ip 10.79.0.12 --host-netdev snic0 >$D/b.out 2>&1 & P2=$!
sleep 2
ip -n nmA addr add 10.79.0.1/24 dev snic0; ip -n nmA link set snic0 up
ip -n nmB addr add 10.79.0.2/24 dev snic0; ip -n nmB link set snic0 up
ip netns exec nmA $S compute mm --serve --listen 10.79.0.1:18520 --socket $D/a.sock --timeout 120 >$D/p1.out 2>&1 & P3=$!
sleep 1
for args in "$@"; do
  for r in 1 2 3; do
    ip netns exec nmB timeout 120 $S compute mm --peer 10.79.0.1 --socket $D/b.sock --json $args
  done
done
kill $P3
