#!/bin/sh
# The vSwitch interop topology of tests/netns_vswitch.rs, for trying `snic run --stage vswitch`
# by hand. Namespace addresses only; nothing is routed outside the three namespaces.
#
#   netns ${TAG}vm:  eth0 10.0.0.1/24, MTU 1450, MAC 02:00:00:00:00:0a, default via 10.0.0.254
#        ==(veth)== ${TAG}va in netns ${TAG}sw     (snic's port 0: the VM side)
#   netns ${TAG}sw:  ${TAG}ub, MAC 02:00:00:00:01:01  (snic's port 1: the underlay)
#        ==(veth)== netns ${TAG}hb: eth0 192.168.100.2/24, MAC 02:00:00:00:02:02
#                                   vxlan42 (VNI 42, local .2, remote 192.168.100.1, port 4789,
#                                   MTU 1450, MAC 02:00:00:00:00:0b) 10.0.0.2/24
#
# Usage (root):
#   scripts/netns/vswitch_topo.sh up [TAG]      create (TAG defaults to "snv"); TX offloads off
#   scripts/netns/vswitch_topo.sh kernel [TAG]  stand in for snic with the kernel: a bridge of
#                                               ${TAG}va and a VXLAN device on ${TAG}ub (to check
#                                               the host-b side without snic)
#   scripts/netns/vswitch_topo.sh down [TAG]    delete everything the other commands made
# Then, for example (policy: tests/data/vswitch/interop.toml):
#   ip netns exec snvsw snic run --port afpacket:snvva --port afpacket:snvub \
#       --stage parse --stage vswitch --policy tests/data/vswitch/interop.toml \
#       --control /tmp/snv.sock --duration 60
#   ip netns exec snvvm ping -c 3 10.0.0.2
#   ip netns exec snvhb ping -c 3 192.168.100.10      # the VIP, DNATed to 10.0.0.1
set -eu
cmd=${1:-}
tag=${2:-snv}
vm=${tag}vm sw=${tag}sw hb=${tag}hb va=${tag}va ub=${tag}ub
t() { timeout -k 2 10 "$@"; }
# Turn TX checksum and segmentation offloads off, when ethtool is there.
nooffload() {
    if command -v ethtool >/dev/null 2>&1; then
        t ip netns exec "$1" ethtool -K "$2" tx off tso off gso off >/dev/null
    else
        echo "ethtool missing: offloads of $2 in $1 stay on" >&2
    fi
}

case "$cmd" in
up)
    for n in "$vm" "$sw" "$hb"; do
        t ip netns add "$n"
        t ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        t ip netns exec "$n" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
        t ip -n "$n" link set lo up
    done
    t ip link add "$va" netns "$sw" type veth peer name eth0 netns "$vm"
    t ip link add "$ub" netns "$sw" address 02:00:00:00:01:01 type veth \
        peer name eth0 netns "$hb" address 02:00:00:00:02:02
    # vm-a
    t ip -n "$vm" link set eth0 address 02:00:00:00:00:0a mtu 1450 up
    t ip -n "$vm" addr add 10.0.0.1/24 dev eth0
    t ip -n "$vm" route add default via 10.0.0.254
    t ip -n "$vm" neigh replace 10.0.0.254 lladdr 02:00:00:00:00:fe dev eth0 nud permanent
    nooffload "$vm" eth0
    # snic's namespace: two bare ports
    t ip -n "$sw" link set "$va" up
    t ip -n "$sw" link set "$ub" up
    # host-b
    t ip -n "$hb" link set eth0 up
    t ip -n "$hb" addr add 192.168.100.2/24 dev eth0
    t ip -n "$hb" neigh replace 192.168.100.1 lladdr 02:00:00:00:01:01 dev eth0 nud permanent
    t ip -n "$hb" neigh replace 192.168.100.10 lladdr 02:00:00:00:01:01 dev eth0 nud permanent
    t ip -n "$hb" link add vxlan42 address 02:00:00:00:00:0b mtu 1450 type vxlan id 42 \
        local 192.168.100.2 remote 192.168.100.1 dstport 4789 dev eth0
    t ip -n "$hb" addr add 10.0.0.2/24 dev vxlan42
    t ip -n "$hb" link set vxlan42 up
    nooffload "$hb" eth0
    nooffload "$hb" vxlan42
    echo "ports (in netns $sw): afpacket:$va afpacket:$ub"
    ;;
kernel)
    t ip -n "$sw" link add br0 type bridge
    t ip -n "$sw" addr add 192.168.100.1/24 dev "$ub"
    t ip -n "$sw" neigh replace 192.168.100.2 lladdr 02:00:00:00:02:02 dev "$ub" nud permanent
    t ip -n "$sw" link add vxlan42 mtu 1450 type vxlan id 42 local 192.168.100.1 \
        remote 192.168.100.2 dstport 4789 dev "$ub"
    t ip -n "$sw" link set vxlan42 master br0
    t ip -n "$sw" link set "$va" master br0
    t ip -n "$sw" link set vxlan42 up
    t ip -n "$sw" link set br0 up
    ;;
down)
    for n in "$vm" "$sw" "$hb"; do
        t ip netns del "$n" 2>/dev/null || true
    done
    ;;
*)
    echo "usage: $0 up|kernel|down [TAG]" >&2
    exit 2
    ;;
esac
