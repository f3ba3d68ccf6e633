//! Test helpers shared by the slow path's tests: frames (Ethernet, IPv4, UDP, TCP, VXLAN), a
//! two-vPort policy with a VNET layer and its stateful and SNAT variants, and shorthands that
//! compile a frame and read the verdict. Test-only; not part of the crate's API.

use core::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use snic_time::Instant;
use snic_wire::stack::Stack;

use super::{DenyReason, SlowPath, SlowPathConfig, UnifiedFlow, Verdict};
use crate::key::{Direction, FlowKey, VPortId, extract};
use crate::policy::Field as F;
use crate::policy::{
    Action, LayerKind, LayerPolicy, Mac, Mapping, Matcher, Policy, Predicate, RouteTarget, Rule,
    TunnelKind, Underlay, VPortPolicy, Value,
};
use crate::transposition::{Encap, Op};

pub(crate) const UL_MAC: Mac = [0x02, 0, 0, 0, 0, 0x01];

pub(crate) const GW_MAC: Mac = [0x02, 0, 0, 0, 0, 0xfe];

pub(crate) const A_MAC: Mac = [0x02, 0, 0, 0, 0xa, 0x01];

pub(crate) const B_MAC: Mac = [0x02, 0, 0, 0, 0xb, 0x01];

pub(crate) const REMOTE_MAC: Mac = [0x02, 0, 0, 0, 0xc, 0x02];

pub(crate) const UL_PORT: u16 = 1;

pub(crate) const A_PORT: u16 = 2;

pub(crate) const B_PORT: u16 = 3;

pub(crate) const VNI: u32 = 42;

pub(crate) fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

pub(crate) const PA_LOCAL: [u8; 4] = [192, 0, 2, 1];

pub(crate) const PA_REMOTE: [u8; 4] = [192, 0, 2, 2];

pub(crate) const A_IP: [u8; 4] = [10, 0, 0, 1];

pub(crate) const B_IP: [u8; 4] = [10, 0, 0, 5];

pub(crate) const REMOTE_IP: [u8; 4] = [10, 0, 0, 2];

pub(crate) fn eth(dst: Mac, src: Mac, ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ty.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&(20 + payload.len() as u16).to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let c = snic_wire::checksum::data(&h);
    h[10..12].copy_from_slice(&(!c).to_be_bytes());
    h.extend_from_slice(payload);
    h
}

pub(crate) fn udp(sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + payload.len());
    u.extend_from_slice(&sp.to_be_bytes());
    u.extend_from_slice(&dp.to_be_bytes());
    u.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

pub(crate) fn tcp_seg(sp: u16, dp: u16, flags: u8) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sp.to_be_bytes());
    t[2..4].copy_from_slice(&dp.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&1024u16.to_be_bytes());
    t
}

/// An inner Ethernet/IPv4/UDP frame.
pub(crate) fn udp_frame(dmac: Mac, smac: Mac, s: [u8; 4], d: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    eth(dmac, smac, 0x0800, &ipv4(s, d, 17, &udp(sp, dp, b"data")))
}

/// An inner Ethernet/IPv4/TCP frame.
pub(crate) fn tcp_frame(
    dmac: Mac,
    smac: Mac,
    s: [u8; 4],
    d: [u8; 4],
    sp: u16,
    dp: u16,
    fl: u8,
) -> Vec<u8> {
    eth(dmac, smac, 0x0800, &ipv4(s, d, 6, &tcp_seg(sp, dp, fl)))
}

/// `inner` in VXLAN from `os` to `od`.
pub(crate) fn vxlan(os: [u8; 4], od: [u8; 4], vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut v = vec![0x08, 0, 0, 0];
    v.extend_from_slice(&(vni << 8).to_be_bytes());
    v.extend_from_slice(inner);
    eth(UL_MAC, GW_MAC, 0x0800, &ipv4(os, od, 17, &udp(49152, 4789, &v)))
}

pub(crate) fn key_of(frame: &[u8], port: u16, dir: Direction) -> FlowKey {
    extract(frame, &Stack::parse(frame), port, dir).expect("test frame has a key")
}

pub(crate) fn compile(
    sp: &mut SlowPath,
    now: Instant,
    frame: &[u8],
    port: u16,
) -> (FlowKey, Verdict) {
    let dir = sp.role(port).expect("port has a role");
    let k = key_of(frame, port, dir);
    let v = sp.compile(now, frame, &Stack::parse(frame), &k, k.hash_with(7));
    (k, v)
}

pub(crate) fn forward(v: Verdict) -> (UnifiedFlow, Option<UnifiedFlow>) {
    match v {
        Verdict::Forward { forward, reverse } => (forward, reverse),
        Verdict::Deny { reason, .. } => panic!("denied: {reason}"),
    }
}

pub(crate) fn deny(v: Verdict) -> (DenyReason, bool) {
    match v {
        Verdict::Deny { reason, cache } => (reason, cache),
        Verdict::Forward { forward, .. } => panic!("forwarded: {:?}", forward.key),
    }
}

pub(crate) fn rule(
    id: u32,
    priority: u32,
    dir: Option<Direction>,
    preds: Vec<Predicate>,
    action: Action,
) -> Rule {
    Rule { id, priority, dir, predicates: preds, action }
}

pub(crate) fn pred(field: crate::policy::Field, matcher: Matcher) -> Predicate {
    Predicate { field, matcher }
}

pub(crate) fn layer(name: &str, kind: LayerKind, rules: Vec<Rule>, default: Action) -> LayerPolicy {
    LayerPolicy { name: name.into(), kind, rules, default, mappings: Vec::new() }
}

pub(crate) fn remote_mapping() -> Mapping {
    Mapping { ca: IpAddr::from(REMOTE_IP), pa: IpAddr::from(PA_REMOTE), mac: REMOTE_MAC, vni: VNI }
}

pub(crate) fn vnet_layer() -> LayerPolicy {
    let mut l = layer(
        "vnet",
        LayerKind::Vnet,
        vec![
            rule(
                1,
                10,
                Some(Direction::Out),
                vec![],
                Action::Encap { kind: TunnelKind::Vxlan, vni: VNI },
            ),
            rule(2, 10, Some(Direction::In), vec![], Action::Decap),
        ],
        Action::Pass,
    );
    l.mappings.push(remote_mapping());
    l
}

pub(crate) fn vport(
    id: u16,
    port: u16,
    mac: Mac,
    ip: [u8; 4],
    layers: Vec<LayerPolicy>,
) -> VPortPolicy {
    VPortPolicy {
        id: VPortId(id),
        name: format!("vm{id}"),
        port,
        mac,
        ips: vec![IpAddr::from(ip)],
        vni: VNI,
        meter: None,
        layers,
    }
}

pub(crate) fn policy(a_layers: Vec<LayerPolicy>) -> Policy {
    Policy {
        underlay: Underlay {
            port: UL_PORT,
            ip: IpAddr::from(PA_LOCAL),
            mac: UL_MAC,
            gateway_mac: GW_MAC,
            vxlan_port: 4789,
            ttl: 64,
        },
        vports: vec![
            vport(1, A_PORT, A_MAC, A_IP, a_layers),
            vport(
                2,
                B_PORT,
                B_MAC,
                B_IP,
                vec![layer("acl", LayerKind::Acl, vec![], Action::Allow)],
            ),
        ],
        meters: Vec::new(),
        queues: Vec::new(),
    }
}

pub(crate) fn slow(p: Policy) -> SlowPath {
    SlowPath::new(Arc::new(p), SlowPathConfig::default())
}

pub(crate) fn encap_to_remote() -> Op {
    Op::PushEncap(Encap {
        kind: TunnelKind::Vxlan,
        src_mac: UL_MAC,
        dst_mac: GW_MAC,
        src_ip: IpAddr::from(PA_LOCAL),
        dst_ip: IpAddr::from(PA_REMOTE),
        vni: VNI,
        ttl: 64,
        udp_dst: 4789,
    })
}

/// ACL allowing outbound TCP to port 80 statefully, and nothing inbound.
pub(crate) fn stateful_policy() -> Policy {
    let acl = layer(
        "acl",
        LayerKind::Acl,
        vec![rule(
            1,
            10,
            Some(Direction::Out),
            vec![pred(F::L4Dst, Matcher::Exact(Value::Int(80)))],
            Action::AllowStateful,
        )],
        Action::Deny,
    );
    policy(vec![acl, vnet_layer()])
}

pub(crate) fn snat_policy(lo: u16, hi: u16) -> Policy {
    let nat = layer(
        "nat",
        LayerKind::Nat,
        vec![rule(
            1,
            1,
            Some(Direction::Out),
            vec![],
            Action::Snat { ip: v4(198, 51, 100, 1), ports: (lo, hi) },
        )],
        Action::Pass,
    );
    let route = layer(
        "route",
        LayerKind::Route,
        vec![rule(
            1,
            1,
            None,
            vec![pred(F::IpDst, Matcher::Prefix(v4(0, 0, 0, 0), 0))],
            Action::Route(RouteTarget::Uplink),
        )],
        Action::Pass,
    );
    policy(vec![layer("acl", LayerKind::Acl, vec![], Action::Allow), nat, route])
}
