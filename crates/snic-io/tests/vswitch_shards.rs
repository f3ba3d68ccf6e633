//! Two shards (two workers' pipelines) of one vSwitch: a stateful connection opened on one
//! shard has its replies arrive on the other (RSS over a NATed or asymmetric tuple does that);
//! the shared slow path knows the connection, so the reply is allowed there and the cached flows
//! of both shards are removed when the connection closes.

use etherparse::PacketBuilder;
use snic_pipeline::{Batch, DropReason, Pipeline, PortId};
use snic_time::Instant;
use snic_vswitch::engine::{VSwitch, VSwitchConfig};
use snic_vswitch::key::Direction;
use snic_vswitch::policy::default_policy;
use snic_vswitch::policy::{Action, LayerKind};
use snic_wire::stack::{Layer, Stack};

const VM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 5];

/// TCP 10.0.0.1:40000 <-> 10.0.0.5:`peer_port` with the flags `build` sets; `inbound` frames
/// come VXLAN-encapsulated from the peer's PA 192.168.100.5.
fn tcp(
    inbound: bool,
    peer_port: u16,
    build: fn(
        etherparse::PacketBuilderStep<etherparse::TcpHeader>,
    ) -> etherparse::PacketBuilderStep<etherparse::TcpHeader>,
) -> Vec<u8> {
    let (smac, dmac, src, dst, sp, dp) = if inbound {
        (PEER_MAC, VM_MAC, [10, 0, 0, 5], [10, 0, 0, 1], peer_port, 40000)
    } else {
        (VM_MAC, PEER_MAC, [10, 0, 0, 1], [10, 0, 0, 5], 40000, peer_port)
    };
    let b = build(PacketBuilder::ethernet2(smac, dmac).ipv4(src, dst, 64).tcp(sp, dp, 1, 65535));
    let mut inner = Vec::new();
    b.write(&mut inner, b"data").unwrap();
    if !inbound {
        return inner;
    }
    let mut payload = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
    payload.extend_from_slice(&inner);
    let o = PacketBuilder::ethernet2([2, 0, 0, 0, 2, 1], [2, 0, 0, 0, 1, 1])
        .ipv4([192, 168, 100, 5], [192, 168, 100, 1], 64)
        .udp(55555, 4789);
    let mut f = Vec::new();
    o.write(&mut f, &payload).unwrap();
    f
}

/// Run one frame through a pipeline at `t_ms`, from `port`; returns what left.
fn one(p: &mut Pipeline, t_ms: u64, port: u16, frame: &[u8]) -> Vec<(PortId, Vec<u8>)> {
    let mut b = Batch::new(8);
    b.push_frame(frame).unwrap().meta.ingress = PortId(port);
    p.process(Instant::from_millis(t_ms), &mut b);
    b.iter().map(|p| (p.meta.egress.unwrap(), p.data().to_vec())).collect()
}

fn drops(p: &Pipeline, r: DropReason) -> u64 {
    p.counters().stages.iter().map(|s| s.drops.get(r)).sum()
}

#[test]
fn replies_on_another_shard_follow_the_connection_and_close_everywhere() {
    // Default policy, but the ACL allows only outbound connections (and their replies).
    let mut policy = default_policy();
    for l in &mut policy.vports[0].layers {
        if l.kind == LayerKind::Acl {
            for r in &mut l.rules {
                r.dir = Some(Direction::Out);
                r.action = Action::AllowStateful;
            }
        }
    }
    let vs = VSwitch::new(policy, VSwitchConfig::default()).unwrap();
    let mut shard = [0, 1].map(|_| {
        let mut p = Pipeline::from_strs(&["parse"]).unwrap();
        p.push(Box::new(vs.stage().unwrap()));
        p
    });

    // SYN out on shard 0: encapsulated to the peer's PA.
    let out = one(&mut shard[0], 1, 0, &tcp(false, 80, |b| b.syn()));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, PortId(1));
    let st = Stack::parse(&out[0].1);
    assert_eq!(st.tunnel.map(|t| t.0), Some(Layer::Vxlan));
    assert_eq!(st.vni, Some(42));

    // SYN-ACK in on shard 1, which has never seen the flow: allowed as the connection's reply,
    // decapsulated and delivered to the VM.
    let back = one(&mut shard[1], 2, 1, &tcp(true, 80, |b| b.syn().ack(2)));
    assert_eq!(back.len(), 1, "the reply crosses on the other shard");
    assert_eq!(back[0].0, PortId(0));
    assert_eq!(&back[0].1[0..6], &VM_MAC);
    assert!(Stack::parse(&back[0].1).tunnel.is_none());
    assert!(vs.stats().slow.reverse_hits >= 1, "{:?}", vs.stats().slow);

    // An inbound connection attempt that is not a reply (another port) is denied on shard 1.
    let denied = one(&mut shard[1], 3, 1, &tcp(true, 81, |b| b.syn()));
    assert!(denied.is_empty());
    assert_eq!(drops(&shard[1], DropReason::PolicyDeny), 1);

    // Data both ways, then the close: FIN out (shard 0), FIN in (shard 1), last ACK out.
    assert_eq!(one(&mut shard[0], 4, 0, &tcp(false, 80, |b| b.ack(2))).len(), 1);
    assert_eq!(one(&mut shard[1], 5, 1, &tcp(true, 80, |b| b.ack(2))).len(), 1);
    assert_eq!(one(&mut shard[0], 6, 0, &tcp(false, 80, |b| b.fin().ack(2))).len(), 1);
    assert_eq!(one(&mut shard[1], 7, 1, &tcp(true, 80, |b| b.fin().ack(2))).len(), 1);
    assert_eq!(one(&mut shard[0], 8, 0, &tcp(false, 80, |b| b.ack(3))).len(), 1);
    let before = vs.stats();
    assert!(before.flows >= 2, "cached on both shards: {}", before.flows);

    // After time-wait (2 s), the slow path removes the connection's flows from every shard: the
    // shard that runs the timer uncaches its own, the other at its next batch.
    for (i, p) in shard.iter_mut().enumerate() {
        let mut b = Batch::new(8);
        p.process(Instant::from_millis(2_500 + i as u64), &mut b);
    }
    for (i, p) in shard.iter_mut().enumerate() {
        let mut b = Batch::new(8);
        p.process(Instant::from_millis(2_600 + i as u64), &mut b);
    }
    let after = vs.stats();
    let tcp_left = vs.dump_flows(Instant::from_secs(3), 100);
    assert!(
        tcp_left.iter().all(|f| !f.key.contains("proto=6,src=10.0.0.1:40000")
            && !f.key.contains("proto=6,src=10.0.0.5:80")),
        "the closed connection's flows are gone from both shards: {tcp_left:#?}"
    );
    assert!(after.fast.removed >= 2, "{:?}", after.fast);
    assert_eq!(after.slow.conns, 0, "{:?}", after.slow);
}
