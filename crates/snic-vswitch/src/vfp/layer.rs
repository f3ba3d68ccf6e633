//! The layer walk: how [`SlowPath::compile`] turns the first packet of a flow into flows. The
//! policy is precomputed per layer (classifiers, VNET mappings) with the indexes that find a
//! packet's vPort; the walk runs the vPort's layers in order (outbound) or in reverse (inbound)
//! and yields a plan (entry and exit hops, the addresses and ports before and after NAT,
//! stateful or not, the SNAT binding, the meter), from which the forward flow, the key of its
//! replies and the reverse flow are built, each with its transposition.
//!
//! It changes no state: it peeks at the SNAT pools for a free port ([`super::snat`]), and
//! [`SlowPath::compile`] opens the connection ([`super::conn`]) and takes the port.

use core::net::IpAddr;

use hashbrown::HashMap;
use snic_wire::stack::{Layer, Stack};

use super::snat::SnatBinding;
use super::{DenyReason, FlowAction, SlowPath, UnifiedFlow};
use crate::classifier::Classifier;
use crate::key::{Direction, FlowKey, KeyFlags, VPortId, from_ip};
use crate::policy::{
    Action, Field, Fields, LayerKind, Mac, Mapping, Matcher, MeterId, Policy, RouteTarget,
    TunnelKind, Value,
};
use crate::transposition::{Encap, Op, Transposition};

/// How a packet enters or leaves the vSwitch, seen from one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    /// The VM side of a vPort (index in `Policy::vports`).
    VPort(usize),
    /// The underlay, tunnelled to or from a remote provider address.
    Tunnel {
        kind: TunnelKind,
        /// The remote provider address.
        pa: IpAddr,
        vni: u32,
        /// The remote customer MAC (inner Ethernet destination towards it).
        mac: Mac,
    },
    /// The underlay, plain (internet / VIP traffic), through the gateway.
    Uplink,
}

/// Addresses and ports of a packet (inner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tuple {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
}

/// The first packet of a flow, as much of it as the walk reads (kept by connections so a new
/// policy can re-walk them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Origin {
    pub(super) key: FlowKey,
    pub(super) eth_src: Mac,
    pub(super) eth_dst: Mac,
    pub(super) ethertype: u16,
    pub(super) tunnel: Option<Layer>,
    pub(super) flow_hash: u64,
}

impl Origin {
    pub(super) fn new(frame: &[u8], stack: &Stack, key: &FlowKey, flow_hash: u64) -> Origin {
        let inner = stack.innermost();
        let mac_at = |at: usize| -> Mac {
            frame.get(at..at + 6).and_then(|s| s.try_into().ok()).unwrap_or([0; 6])
        };
        let (eth_dst, eth_src) = match inner.eth {
            Some(o) => (mac_at(usize::from(o)), mac_at(usize::from(o) + 6)),
            None => ([0; 6], [0; 6]),
        };
        Origin {
            key: *key,
            eth_src,
            eth_dst,
            ethertype: inner.ethertype,
            tunnel: if key.is_tunnel() { stack.tunnel.map(|t| t.0) } else { None },
            flow_hash,
        }
    }

    fn fields(&self) -> Fields {
        let k = &self.key;
        Fields {
            eth_src: self.eth_src,
            eth_dst: self.eth_dst,
            ethertype: self.ethertype,
            ip_src: Some(k.src_ip()),
            ip_dst: Some(k.dst_ip()),
            proto: k.proto,
            l4_src: k.src_port,
            l4_dst: k.dst_port,
            vni: k.vni(),
            outer_src: k.outer_src_ip(),
            outer_dst: k.outer_dst_ip(),
        }
    }
}

/// The outcome of a successful walk: everything the flows are built from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    vport: usize,
    entry: Hop,
    exit: Hop,
    orig: Tuple,
    fin: Tuple,
    pub(super) stateful: bool,
    pub(super) snat: Option<SnatBinding>,
    meter: Option<MeterId>,
}

/// One layer, precomputed for lookups.
#[derive(Debug, Clone)]
struct CompiledLayer {
    classifier: Classifier,
    /// VNET mappings by (VNI, customer address as the key stores it).
    mappings: HashMap<(u32, [u8; 16]), Mapping>,
}

/// The policy, precomputed: per-layer classifiers and the vPort indexes.
#[derive(Debug, Clone, Default)]
pub(super) struct Compiled {
    /// Per vPort (same index as `Policy::vports`), per layer.
    layers: Vec<Vec<CompiledLayer>>,
    pub(super) by_port: HashMap<u16, usize>,
    by_vni_ip: HashMap<(u32, [u8; 16]), usize>,
    by_vni_mac: HashMap<(u32, Mac), usize>,
    by_ip: HashMap<[u8; 16], usize>,
    by_id: HashMap<VPortId, usize>,
    /// (vPort, layer, rule) of the DNAT rules that can apply inbound (VIP ownership), by the
    /// address of their exact `ip.dst` predicate ...
    vip_by_ip: HashMap<[u8; 16], Vec<(usize, usize, usize)>>,
    /// ... and those without one (checked one by one).
    vip_rules: Vec<(usize, usize, usize)>,
}

impl Compiled {
    pub(super) fn build(p: &Policy) -> Compiled {
        let mut c = Compiled::default();
        for (vi, v) in p.vports.iter().enumerate() {
            c.by_port.entry(v.port).or_insert(vi);
            c.by_id.entry(v.id).or_insert(vi);
            c.by_vni_mac.entry((v.vni, v.mac)).or_insert(vi);
            for ip in &v.ips {
                c.by_vni_ip.entry((v.vni, from_ip(*ip))).or_insert(vi);
                c.by_ip.entry(from_ip(*ip)).or_insert(vi);
            }
            let mut layers = Vec::with_capacity(v.layers.len());
            for (li, l) in v.layers.iter().enumerate() {
                let mut mappings = HashMap::with_capacity(l.mappings.len());
                for m in &l.mappings {
                    mappings.entry((m.vni, from_ip(m.ca))).or_insert(*m);
                }
                for (ri, r) in l.rules.iter().enumerate() {
                    if matches!(r.action, Action::Dnat { .. }) && r.dir != Some(Direction::Out) {
                        let vip = r.predicates.iter().find_map(|p| match p.matcher {
                            Matcher::Exact(Value::Ip(ip)) if p.field == Field::IpDst => Some(ip),
                            _ => None,
                        });
                        match vip {
                            Some(ip) => {
                                c.vip_by_ip.entry(from_ip(ip)).or_default().push((vi, li, ri))
                            }
                            None => c.vip_rules.push((vi, li, ri)),
                        }
                    }
                }
                layers.push(CompiledLayer {
                    classifier: Classifier::build(&l.rules, l.kind == LayerKind::Route),
                    mappings,
                });
            }
            c.layers.push(layers);
        }
        c
    }
}

fn has_ports(proto: u8) -> bool {
    proto == 6 || proto == 17
}

fn layer_index(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
}

impl SlowPath {
    /// The vPort a packet belongs to and its direction.
    fn resolve(&self, o: &Origin, f: &Fields) -> Result<(usize, Direction), DenyReason> {
        let k = &o.key;
        let c = &self.compiled;
        if let Some(&vi) = c.by_port.get(&k.port) {
            return Ok((vi, Direction::Out));
        }
        if k.port != self.policy.underlay.port {
            return Err(DenyReason::NoVPort);
        }
        // A DNAT rule that matches the packet owns it (a VIP); for tunnelled packets only the
        // vPorts of the packet's VNI.
        let vip = |vni: Option<u32>| {
            let exact = c.vip_by_ip.get(&k.dst).map_or(&[][..], Vec::as_slice);
            exact.iter().chain(&c.vip_rules).find_map(|&(vi, li, ri)| {
                let v = self.policy.vports.get(vi)?;
                if vni.is_some_and(|n| n != v.vni) {
                    return None;
                }
                let rule = v.layers.get(li)?.rules.get(ri)?;
                rule.matches(f, Direction::In).then_some(vi)
            })
        };
        let vi = if k.is_tunnel() {
            c.by_vni_ip
                .get(&(k.vni, k.dst))
                .or_else(|| c.by_vni_mac.get(&(k.vni, o.eth_dst)))
                .copied()
                .or_else(|| vip(Some(k.vni)))
        } else {
            c.by_ip.get(&k.dst).copied().or_else(|| vip(None))
        };
        vi.map(|vi| (vi, Direction::In)).ok_or(DenyReason::NoVPort)
    }

    /// Walk the layers of the packet's vPort. `reuse` is the SNAT binding the connection
    /// already holds (a re-walk keeps it when the new policy still allows it).
    pub(super) fn walk(&self, o: &Origin, reuse: Option<SnatBinding>) -> Result<Plan, DenyReason> {
        let mut f = o.fields();
        let (vi, dir) = self.resolve(o, &f)?;
        let vport = self.policy.vports.get(vi).ok_or(DenyReason::NoVPort)?;
        let clayers = self.compiled.layers.get(vi).ok_or(DenyReason::NoVPort)?;
        let k = &o.key;
        let orig = Tuple { src: k.src_ip(), dst: k.dst_ip(), sport: k.src_port, dport: k.dst_port };
        let ports = has_ports(k.proto) && !k.is_arp();
        let entry = match dir {
            // A VM's own tunnels: the key describes the inner frame, the ops would edit the
            // outer one.
            Direction::Out if k.is_tunnel() => return Err(DenyReason::UnsupportedTunnel),
            Direction::Out => Hop::VPort(vi),
            Direction::In => match (k.outer_src_ip(), o.tunnel) {
                (None, _) => Hop::Uplink,
                (Some(pa), Some(Layer::Vxlan)) => {
                    Hop::Tunnel { kind: TunnelKind::Vxlan, pa, vni: k.vni, mac: o.eth_src }
                }
                (Some(pa), Some(Layer::Nvgre)) => {
                    Hop::Tunnel { kind: TunnelKind::Nvgre, pa, vni: k.vni, mac: o.eth_src }
                }
                (Some(_), _) => return Err(DenyReason::UnsupportedTunnel),
            },
        };
        let mut stateful = false;
        let mut snat = None;
        let mut meter = None;
        let mut route: Option<RouteTarget> = None;
        let mut route_layer = false;
        let mut encap: Option<(TunnelKind, u32, usize)> = None;
        let mut decapped = false;
        let n = vport.layers.len().min(clayers.len());
        for step in 0..n {
            let li = match dir {
                Direction::Out => step,
                Direction::In => n - 1 - step,
            };
            let (layer, cl) = (&vport.layers[li], &clayers[li]);
            if layer.kind == LayerKind::Route {
                if dir == Direction::In {
                    continue;
                }
                route_layer = true;
            }
            let (action, rule_id) =
                match cl.classifier.lookup(&f, dir).and_then(|i| layer.rules.get(i)) {
                    Some(r) => (&r.action, Some(r.id)),
                    None => (&layer.default, None),
                };
            match action {
                Action::Pass | Action::Allow => {}
                Action::Deny => {
                    return Err(DenyReason::Acl { layer: layer_index(li), rule: rule_id });
                }
                Action::AllowStateful => stateful = true,
                Action::Encap { kind, vni } => {
                    if dir == Direction::Out {
                        encap = Some((*kind, *vni, li));
                    }
                }
                Action::Decap => {
                    // Plain packets (VIP traffic) have nothing to strip.
                    if dir == Direction::In && k.is_tunnel() {
                        let ok = k.vni == vport.vni
                            && cl
                                .mappings
                                .get(&(k.vni, k.src))
                                .is_some_and(|m| Some(m.pa) == k.outer_src_ip());
                        if !ok {
                            return Err(DenyReason::Spoofed);
                        }
                        decapped = true;
                        f.vni = None;
                        f.outer_src = None;
                        f.outer_dst = None;
                    }
                }
                Action::Dnat { backends } => {
                    if backends.is_empty() {
                        continue;
                    }
                    let i = (o.flow_hash % backends.len() as u64) as usize;
                    if let Some(&(ip, port)) = backends.get(i) {
                        f.ip_dst = Some(ip);
                        if let (Some(p), true) = (port, ports) {
                            f.l4_dst = p;
                        }
                        stateful = true;
                    }
                }
                Action::Snat { ip, ports: (lo, hi) } => {
                    if dir == Direction::Out {
                        f.ip_src = Some(*ip);
                        stateful = true;
                        if ports {
                            let port = match reuse {
                                Some(b)
                                    if b.ip == *ip
                                        && b.proto == k.proto
                                        && (*lo..=*hi).contains(&b.port) =>
                                {
                                    b.port
                                }
                                _ => self
                                    .pool(*ip, k.proto)
                                    .map_or(Some((*lo).min(*hi)), |p| p.peek(*lo, *hi))
                                    .filter(|_| lo <= hi)
                                    .ok_or(DenyReason::SnatExhausted)?,
                            };
                            f.l4_src = port;
                            snat = Some(SnatBinding { ip: *ip, proto: k.proto, port });
                        }
                    }
                }
                Action::Route(t) => {
                    if *t == RouteTarget::Drop {
                        return Err(DenyReason::RouteDrop);
                    }
                    route = Some(*t);
                }
                Action::Meter(m) => meter = Some(*m),
            }
        }
        let fin = Tuple {
            src: f.ip_src.unwrap_or(orig.src),
            dst: f.ip_dst.unwrap_or(orig.dst),
            sport: f.l4_src,
            dport: f.l4_dst,
        };
        let exit = match dir {
            Direction::In => {
                if k.is_tunnel() && !decapped {
                    return Err(DenyReason::Spoofed);
                }
                Hop::VPort(vi)
            }
            Direction::Out => match route {
                None if route_layer => return Err(DenyReason::NoRoute),
                Some(RouteTarget::Uplink) => Hop::Uplink,
                Some(RouteTarget::VPort(id)) => {
                    Hop::VPort(*self.compiled.by_id.get(&id).ok_or(DenyReason::NoRoute)?)
                }
                Some(RouteTarget::Drop) => return Err(DenyReason::RouteDrop),
                None | Some(RouteTarget::Vnet) => {
                    let (kind, vni, li) = encap.ok_or(DenyReason::NoMapping)?;
                    let m = clayers
                        .get(li)
                        .and_then(|cl| cl.mappings.get(&(vni, from_ip(fin.dst))))
                        .ok_or(DenyReason::NoMapping)?;
                    Hop::Tunnel { kind, pa: m.pa, vni, mac: m.mac }
                }
            },
        };
        Ok(Plan { vport: vi, entry, exit, orig, fin, stateful, snat, meter })
    }

    /// The forward flow (for `o.key`) of a plan, the key of its replies, and for a stateful
    /// plan the reverse flow (what the replies get).
    pub(super) fn build_flows(
        &self,
        o: &Origin,
        p: &Plan,
    ) -> Result<(UnifiedFlow, FlowKey, Option<UnifiedFlow>), DenyReason> {
        let vport = self.policy.vports.get(p.vport).ok_or(DenyReason::NoVPort)?;
        let k = &o.key;
        let track_tcp = k.proto == 6 && !k.is_arp();
        let action = |transposition: Transposition, egress: u16| FlowAction {
            transposition,
            egress,
            vport: vport.id,
            meter: p.meter,
            vport_meter: vport.meter,
            track_tcp,
        };
        // Forward: from the entry hop, translated orig -> fin, to the exit hop.
        let (fops, fegress) = self.ops(p.entry, p.orig, p.fin, p.exit)?;
        let forward = UnifiedFlow { key: *k, action: action(fops, fegress) };
        // Reverse: the reply arrives at the exit hop addressed to fin, leaves by the entry hop.
        let swap = |t: Tuple| Tuple { src: t.dst, dst: t.src, sport: t.dport, dport: t.sport };
        let rkey = self.arrival_key(p.exit, swap(p.fin), k);
        let reverse = if p.stateful {
            let (rops, regress) = self.ops(p.exit, swap(p.fin), swap(p.orig), p.entry)?;
            Some(UnifiedFlow { key: rkey, action: action(rops, regress) })
        } else {
            None
        };
        Ok((forward, rkey, reverse))
    }

    /// The key of a packet with tuple `t` arriving by `hop` (protocol and ARP-ness from `like`).
    fn arrival_key(&self, hop: Hop, t: Tuple, like: &FlowKey) -> FlowKey {
        let u = &self.policy.underlay;
        let mut k = FlowKey {
            proto: like.proto,
            flags: like.flags & KeyFlags::ARP,
            src_port: t.sport,
            dst_port: t.dport,
            ..FlowKey::default()
        };
        k.set_src_ip(t.src);
        k.set_dst_ip(t.dst);
        match hop {
            Hop::VPort(vi) => {
                k.port = self.policy.vports.get(vi).map_or(0, |v| v.port);
                k.set_direction(Direction::Out);
            }
            Hop::Tunnel { pa, vni, .. } => {
                k.port = u.port;
                k.set_direction(Direction::In);
                k.set_tunnel(Some((pa, u.ip, vni)));
            }
            Hop::Uplink => {
                k.port = u.port;
                k.set_direction(Direction::In);
            }
        }
        k
    }

    /// The transposition of a packet entering by `from` with tuple `a`, translated to tuple
    /// `b`, leaving by `to`; and its egress port. Pops, then modifies, then pushes.
    fn ops(
        &self,
        from: Hop,
        a: Tuple,
        b: Tuple,
        to: Hop,
    ) -> Result<(Transposition, u16), DenyReason> {
        let u = &self.policy.underlay;
        let (egress, eth_src, eth_dst, push) = match to {
            Hop::VPort(vi) => {
                let v = self.policy.vports.get(vi).ok_or(DenyReason::NoVPort)?;
                (v.port, None, v.mac, None)
            }
            Hop::Tunnel { kind, pa, vni, mac } => {
                let e = Encap {
                    kind,
                    src_mac: u.mac,
                    dst_mac: u.gateway_mac,
                    src_ip: u.ip,
                    dst_ip: pa,
                    vni,
                    ttl: u.ttl,
                    udp_dst: u.vxlan_port,
                };
                (u.port, None, mac, Some(e))
            }
            Hop::Uplink => (u.port, Some(u.mac), u.gateway_mac, None),
        };
        // Exactly sized: the vector becomes the transposition's boxed slice without a realloc.
        let pop = matches!(from, Hop::Tunnel { .. });
        let n = usize::from(pop)
            + usize::from(eth_src.is_some())
            + 1
            + usize::from(a.src != b.src)
            + usize::from(a.dst != b.dst)
            + usize::from(a.sport != b.sport)
            + usize::from(a.dport != b.dport)
            + usize::from(push.is_some());
        let mut ops = Vec::with_capacity(n);
        if pop {
            ops.push(Op::PopOuter);
        }
        if let Some(m) = eth_src {
            ops.push(Op::SetEthSrc(m));
        }
        ops.push(Op::SetEthDst(eth_dst));
        if a.src != b.src {
            ops.push(Op::SetIpSrc(b.src));
        }
        if a.dst != b.dst {
            ops.push(Op::SetIpDst(b.dst));
        }
        if a.sport != b.sport {
            ops.push(Op::SetL4Src(b.sport));
        }
        if a.dport != b.dport {
            ops.push(Op::SetL4Dst(b.dport));
        }
        if let Some(e) = push {
            ops.push(Op::PushEncap(e));
        }
        let x = Transposition::new(ops).map_err(|_| DenyReason::BadTransposition)?;
        Ok((x, egress))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Field as F;
    use crate::tcp;
    use crate::vfp::testutil::*;
    use proptest::prelude::*;
    use snic_time::Instant;

    fn o4(ip: IpAddr) -> [u8; 4] {
        match ip {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(_) => unreachable!("tests use IPv4"),
        }
    }

    #[test]
    fn outbound_vxlan_encap_flow_has_exact_ops() {
        let mut p = policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::Allow),
            vnet_layer(),
            layer(
                "meter",
                LayerKind::Meter,
                vec![rule(1, 1, None, vec![], Action::Meter(MeterId(3)))],
                Action::Pass,
            ),
        ]);
        p.vports[0].meter = Some(MeterId(9));
        let mut sp = slow(p);
        assert_eq!(sp.role(A_PORT), Some(Direction::Out));
        assert_eq!(sp.role(UL_PORT), Some(Direction::In));
        assert_eq!(sp.role(9), None);
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 53);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let (fwd, rev) = forward(v);
        assert_eq!(rev, None, "plain allow is not stateful");
        assert_eq!(fwd.key, k);
        assert_eq!(fwd.action.transposition.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
        assert_eq!(fwd.action.egress, UL_PORT);
        assert_eq!(fwd.action.vport, VPortId(1));
        assert_eq!(fwd.action.meter, Some(MeterId(3)));
        assert_eq!(fwd.action.vport_meter, Some(MeterId(9)));
        assert!(!fwd.action.track_tcp);
        assert_eq!(sp.stats().conns, 0);
        // No mapping for the destination.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, [10, 0, 0, 9], 5000, 53);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1),
            (DenyReason::NoMapping, true)
        );
        let s = sp.stats();
        assert_eq!((s.compiled, s.denied), (1, 1));
    }

    #[test]
    fn outbound_arp_is_encapsulated_by_target_address() {
        let mut sp = slow(policy(vec![vnet_layer()]));
        let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1];
        arp.extend_from_slice(&A_MAC);
        arp.extend_from_slice(&A_IP);
        arp.extend_from_slice(&[0; 6]);
        arp.extend_from_slice(&REMOTE_IP);
        let f = eth([0xff; 6], A_MAC, 0x0806, &arp);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        assert!(k.is_arp());
        let (fwd, _) = forward(v);
        assert_eq!(fwd.action.transposition.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
    }

    #[test]
    fn inbound_decap_checks_vni_and_outer_source() {
        let mut sp =
            slow(policy(vec![layer("acl", LayerKind::Acl, vec![], Action::Allow), vnet_layer()]));
        let inner = udp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 53, 5000);
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI, &inner);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, UL_PORT);
        assert!(k.is_tunnel());
        let (fwd, rev) = forward(v);
        assert_eq!(rev, None);
        assert_eq!(fwd.action.transposition.ops(), &[Op::PopOuter, Op::SetEthDst(A_MAC)]);
        assert_eq!((fwd.action.egress, fwd.action.vport), (A_PORT, VPortId(1)));
        // Outer source is not the PA mapped to the inner source.
        let f = vxlan([192, 0, 2, 99], PA_LOCAL, VNI, &inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::Spoofed, true)
        );
        // Inner source not mapped at all.
        let inner2 = udp_frame(A_MAC, REMOTE_MAC, [10, 0, 0, 77], A_IP, 53, 5000);
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI, &inner2);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::Spoofed, true)
        );
        // Another VNI: no vPort there.
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI + 1, &inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::NoVPort, true)
        );
        // Plain inbound to an address nobody owns.
        let f = udp_frame(UL_MAC, GW_MAC, [8, 8, 8, 8], [10, 9, 9, 9], 53, 5000);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::NoVPort, true)
        );
    }

    /// `inner` in NVGRE (GRE key = VSID << 8 | flow id) from `os` to `od`.
    fn nvgre(os: [u8; 4], od: [u8; 4], vsid: u32, inner: &[u8]) -> Vec<u8> {
        let mut g = vec![0x20, 0x00, 0x65, 0x58];
        g.extend_from_slice(&(vsid << 8 | 0x17).to_be_bytes());
        g.extend_from_slice(inner);
        eth(UL_MAC, GW_MAC, 0x0800, &ipv4(os, od, 47, &g))
    }

    #[test]
    fn inbound_stateful_nvgre_reply_is_re_encapsulated() {
        let acl = layer(
            "acl",
            LayerKind::Acl,
            vec![rule(
                3,
                1,
                Some(Direction::In),
                vec![pred(F::L4Dst, Matcher::Exact(Value::Int(22)))],
                Action::AllowStateful,
            )],
            Action::Deny,
        );
        let mut sp = slow(policy(vec![acl, vnet_layer()]));
        let inner = tcp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 50000, 22, tcp::flags::SYN);
        let f = nvgre(PA_REMOTE, PA_LOCAL, VNI, &inner);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, UL_PORT);
        assert_eq!(k.vni(), Some(VNI));
        let (fwd, rev) = forward(v);
        assert_eq!(fwd.action.transposition.ops(), &[Op::PopOuter, Op::SetEthDst(A_MAC)]);
        let rev = rev.expect("stateful");
        let reply = tcp_frame(REMOTE_MAC, A_MAC, A_IP, REMOTE_IP, 22, 50000, 0x12);
        assert_eq!(rev.key, key_of(&reply, A_PORT, Direction::Out));
        let Op::PushEncap(e) = encap_to_remote() else { unreachable!() };
        let back = Op::PushEncap(Encap { kind: TunnelKind::Nvgre, ..e });
        assert_eq!(rev.action.transposition.ops(), &[Op::SetEthDst(REMOTE_MAC), back]);
        assert_eq!(rev.action.egress, UL_PORT);
        // The VM's own reply, compiled: the reverse flow, although its outbound ACL denies all.
        let (f2, _) = forward(compile(&mut sp, Instant::ZERO, &reply, A_PORT).1);
        assert_eq!(f2, rev);
        // A VM sending its own VXLAN is refused.
        let own = vxlan(A_IP, REMOTE_IP, 7, &udp_frame(A_MAC, REMOTE_MAC, A_IP, REMOTE_IP, 1, 2));
        let mut own = own;
        own[6..12].copy_from_slice(&A_MAC);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &own, A_PORT).1),
            (DenyReason::UnsupportedTunnel, true)
        );
    }

    #[test]
    fn tunnelled_packet_no_layer_decapsulates_is_spoofed() {
        let mut sp = slow(policy(vec![layer("acl", LayerKind::Acl, vec![], Action::Allow)]));
        let inner = udp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 53, 5000);
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI, &inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::Spoofed, true)
        );
    }

    #[test]
    fn acl_deny_names_layer_and_rule() {
        let acl = layer(
            "acl",
            LayerKind::Acl,
            vec![
                rule(
                    7,
                    10,
                    None,
                    vec![pred(F::L4Dst, Matcher::Exact(Value::Int(53)))],
                    Action::Deny,
                ),
                rule(
                    8,
                    20,
                    None,
                    vec![pred(F::IpProto, Matcher::Exact(Value::Int(17)))],
                    Action::Allow,
                ),
            ],
            Action::Deny,
        );
        let mut sp = slow(policy(vec![
            layer("meter", LayerKind::Meter, vec![], Action::Pass),
            acl,
            vnet_layer(),
        ]));
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 53);
        let r = deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1);
        assert_eq!(r, (DenyReason::Acl { layer: 1, rule: Some(7) }, true));
        assert_eq!(r.0.name(), "acl");
        // UDP elsewhere: allowed by rule 8.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 54);
        forward(compile(&mut sp, Instant::ZERO, &f, A_PORT).1);
        // TCP: the layer default denies.
        let f = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 80, tcp::flags::SYN);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1),
            (DenyReason::Acl { layer: 1, rule: None }, true)
        );
        assert_eq!(sp.stats().conns, 0, "a denied SYN opens nothing");
    }

    #[test]
    fn stateful_allow_installs_the_exact_reverse_flow() {
        let mut sp = slow(stateful_policy());
        let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40000, 80, tcp::flags::SYN);
        let (k, v) = compile(&mut sp, Instant::ZERO, &syn, A_PORT);
        let (fwd, rev) = forward(v);
        let rev = rev.expect("stateful");
        assert_eq!(fwd.key, k);
        assert!(fwd.action.track_tcp && rev.action.track_tcp);
        assert_eq!(fwd.action.transposition.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
        // The reply as it really arrives: tunnelled from the remote PA.
        let reply_inner = tcp_frame(
            A_MAC,
            REMOTE_MAC,
            REMOTE_IP,
            A_IP,
            80,
            40000,
            tcp::flags::SYN | tcp::flags::ACK,
        );
        let reply = vxlan(PA_REMOTE, PA_LOCAL, VNI, &reply_inner);
        let rk = key_of(&reply, UL_PORT, Direction::In);
        assert_eq!(rev.key, rk);
        assert_eq!(rev.action.transposition.ops(), &[Op::PopOuter, Op::SetEthDst(A_MAC)]);
        assert_eq!((rev.action.egress, rev.action.vport), (A_PORT, VPortId(1)));
        let s = sp.stats();
        assert_eq!((s.conns, s.half_open), (1, 1));
        // The reply, compiled on a worker that lacks it, gets the reverse flow although the
        // inbound ACL denies everything.
        let (f2, r2) = forward(sp.compile(Instant::ZERO, &reply, &Stack::parse(&reply), &rk, 1));
        assert_eq!(f2, rev);
        assert_eq!(r2, Some(fwd));
        assert_eq!(sp.stats().reverse_hits, 1);
        assert_eq!(sp.stats().half_open, 1, "SYN-ACK: still half-open");
        // A non-matching inbound packet (another source port) is denied by the inbound ACL.
        let other_inner = tcp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 81, 40000, tcp::flags::SYN);
        let other = vxlan(PA_REMOTE, PA_LOCAL, VNI, &other_inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &other, UL_PORT).1),
            (DenyReason::Acl { layer: 0, rule: None }, true)
        );
    }

    #[test]
    fn dnat_backend_is_stable_per_flow_and_spread() {
        let vip = v4(203, 0, 113, 10);
        let backends = vec![
            (IpAddr::from(A_IP), Some(8080)),
            (v4(10, 0, 0, 3), Some(8080)),
            (v4(10, 0, 0, 4), None),
        ];
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![rule(
                1,
                1,
                Some(Direction::In),
                vec![
                    pred(F::IpDst, Matcher::Exact(Value::Ip(vip))),
                    pred(F::L4Dst, Matcher::Exact(Value::Int(80))),
                ],
                Action::Dnat { backends: backends.clone() },
            )],
            Action::Pass,
        );
        // The VNET layer's decap rule matches plain VIP traffic too: nothing to strip.
        let mut sp = slow(policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::Allow),
            nat,
            vnet_layer(),
        ]));
        let mut seen = [0usize; 3];
        for i in 0..64u16 {
            let f = tcp_frame(
                UL_MAC,
                GW_MAC,
                [198, 51, 100, 7],
                o4(vip),
                30000 + i,
                80,
                tcp::flags::SYN,
            );
            let k = key_of(&f, UL_PORT, Direction::In);
            let h = k.hash_with(99);
            let want = (h % 3) as usize;
            seen[want] += 1;
            let (fwd, rev) = forward(sp.compile(Instant::ZERO, &f, &Stack::parse(&f), &k, h));
            let (ip, port) = backends[want];
            let mut ops = vec![Op::SetEthDst(A_MAC), Op::SetIpDst(ip)];
            if let Some(p) = port {
                ops.push(Op::SetL4Dst(p));
            }
            assert_eq!(fwd.action.transposition.ops(), &ops[..]);
            assert_eq!(fwd.action.egress, A_PORT);
            // The reply from the DIP, as the VM sends it.
            let rf = tcp_frame(
                GW_MAC,
                A_MAC,
                o4(ip),
                [198, 51, 100, 7],
                port.unwrap_or(80),
                30000 + i,
                0x12,
            );
            let rev = rev.expect("dnat is stateful");
            assert_eq!(rev.key, key_of(&rf, A_PORT, Direction::Out));
            let mut rops = vec![Op::SetEthSrc(UL_MAC), Op::SetEthDst(GW_MAC), Op::SetIpSrc(vip)];
            if port.is_some() {
                rops.push(Op::SetL4Src(80));
            }
            assert_eq!(rev.action.transposition.ops(), &rops[..]);
            assert_eq!(rev.action.egress, UL_PORT);
            // Stable: the same flow compiled again (retransmitted SYN) gets the same backend.
            let (again, _) = forward(sp.compile(Instant::ZERO, &f, &Stack::parse(&f), &k, h));
            assert_eq!(again, fwd);
        }
        assert!(seen.iter().all(|&n| n > 5), "backends unevenly used: {seen:?}");
        // A VIP port the rule does not cover finds no vPort.
        let f = tcp_frame(UL_MAC, GW_MAC, [198, 51, 100, 7], o4(vip), 30000, 81, tcp::flags::SYN);
        assert_eq!(deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1).0, DenyReason::NoVPort);
    }

    /// `f` after `x` (via the real transposition code).
    fn apply(x: &Transposition, f: &[u8]) -> Vec<u8> {
        let mut p = snic_pipeline::PacketBuf::from_frame(f);
        p.meta.stack = Stack::parse(f);
        x.apply(&mut p, 0x1234).expect("transposition applies");
        p.data().to_vec()
    }

    /// The reply a peer sends back to frame `f`: MACs, IPv4 addresses and L4 ports swapped at
    /// every level, except the outer UDP ports of a tunnel (the reply goes to UDP 4789 too).
    /// Swapping keeps every checksum valid.
    fn reply_to(f: &[u8]) -> Vec<u8> {
        let mut r = f.to_vec();
        let st = Stack::parse(f);
        let mut swap = |a: usize, b: usize, n: usize| {
            for i in 0..n {
                r.swap(a + i, b + i);
            }
        };
        let levels = [Some((st.outer, st.inner.is_some())), st.inner.map(|h| (h, false))];
        for (h, tunnel) in levels.into_iter().flatten() {
            if let Some(e) = h.eth {
                swap(usize::from(e), usize::from(e) + 6, 6);
            }
            if let Some((Layer::Ipv4, o)) = h.l3 {
                swap(usize::from(o) + 12, usize::from(o) + 16, 4);
            }
            if let Some((Layer::Udp | Layer::Tcp, o)) = h.l4
                && !tunnel
            {
                swap(usize::from(o), usize::from(o) + 2, 2);
            }
        }
        r
    }

    #[test]
    fn applied_forward_and_reverse_flows_round_trip_through_snat_and_vxlan() {
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![rule(
                1,
                1,
                Some(Direction::Out),
                vec![],
                Action::Snat { ip: IpAddr::from([10, 0, 0, 100]), ports: (2000, 2010) },
            )],
            Action::Pass,
        );
        let mut sp = slow(policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::Allow),
            nat,
            vnet_layer(),
        ]));
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 53);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let (fwd, rev) = forward(v);
        let rev = rev.expect("snat is stateful");
        // What leaves: VXLAN to the remote PA, inner source translated.
        let out = apply(&fwd.action.transposition, &f);
        let wire = key_of(&out, UL_PORT, Direction::Out);
        assert_eq!(wire.outer_dst_ip(), Some(IpAddr::from(PA_REMOTE)));
        assert_eq!(wire.vni(), Some(VNI));
        assert_eq!((wire.src_ip(), wire.src_port), (IpAddr::from([10, 0, 0, 100]), 2000));
        // The peer's reply to exactly those bytes hits the reverse flow ...
        let back = reply_to(&out);
        assert_eq!(key_of(&back, UL_PORT, Direction::In), rev.key);
        assert_eq!(rev.key, wire.mirror(UL_PORT));
        // ... which delivers to the VM the reply of its own packet.
        let delivered = apply(&rev.action.transposition, &back);
        assert_eq!(key_of(&delivered, A_PORT, Direction::In), k.mirror(A_PORT));
        assert_eq!(&delivered[..6], &A_MAC);
    }

    #[test]
    fn route_longest_prefix_wins_and_targets_apply() {
        let route = layer(
            "route",
            LayerKind::Route,
            vec![
                rule(
                    1,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))],
                    Action::Route(RouteTarget::Uplink),
                ),
                rule(
                    2,
                    100,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 1, 0, 0), 16))],
                    Action::Route(RouteTarget::Drop),
                ),
                rule(
                    3,
                    200,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 1, 2, 0), 24))],
                    Action::Route(RouteTarget::VPort(VPortId(2))),
                ),
                rule(
                    4,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 2), 32))],
                    Action::Route(RouteTarget::Vnet),
                ),
            ],
            Action::Pass,
        );
        let mut sp = slow(policy(vec![route, vnet_layer()]));
        let go = |sp: &mut SlowPath, d: [u8; 4]| {
            compile(sp, Instant::ZERO, &udp_frame(GW_MAC, A_MAC, A_IP, d, 1, 2), A_PORT).1
        };
        let (fwd, _) = forward(go(&mut sp, [10, 2, 0, 1]));
        assert_eq!(fwd.action.transposition.ops(), &[Op::SetEthSrc(UL_MAC), Op::SetEthDst(GW_MAC)]);
        assert_eq!(fwd.action.egress, UL_PORT);
        assert_eq!(deny(go(&mut sp, [10, 1, 9, 9])), (DenyReason::RouteDrop, true));
        let (fwd, _) = forward(go(&mut sp, [10, 1, 2, 3]));
        assert_eq!(fwd.action.transposition.ops(), &[Op::SetEthDst(B_MAC)]);
        assert_eq!((fwd.action.egress, fwd.action.vport), (B_PORT, VPortId(1)));
        let (fwd, _) = forward(go(&mut sp, REMOTE_IP));
        assert_eq!(fwd.action.transposition.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
        assert_eq!(deny(go(&mut sp, [11, 0, 0, 1])), (DenyReason::NoRoute, true));
    }

    /// One vPort with every kind of layer: all traffic stateful; SNAT to the internet, DNAT
    /// from a VIP, VXLAN inside 10/8.
    fn full_policy() -> Policy {
        let vip = v4(203, 0, 113, 10);
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![
                rule(
                    1,
                    1,
                    Some(Direction::Out),
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))],
                    Action::Pass,
                ),
                rule(
                    2,
                    2,
                    Some(Direction::Out),
                    vec![],
                    Action::Snat { ip: v4(198, 51, 100, 1), ports: (1024, 65535) },
                ),
                rule(
                    3,
                    1,
                    Some(Direction::In),
                    vec![pred(F::IpDst, Matcher::Exact(Value::Ip(vip)))],
                    Action::Dnat { backends: vec![(IpAddr::from(A_IP), Some(8080))] },
                ),
            ],
            Action::Pass,
        );
        let route = layer(
            "route",
            LayerKind::Route,
            vec![
                rule(
                    1,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))],
                    Action::Route(RouteTarget::Vnet),
                ),
                rule(
                    2,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(0, 0, 0, 0), 0))],
                    Action::Route(RouteTarget::Uplink),
                ),
            ],
            Action::Pass,
        );
        policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::AllowStateful),
            nat,
            route,
            vnet_layer(),
            layer("meter", LayerKind::Meter, vec![], Action::Pass),
        ])
    }

    proptest! {
        /// For every kind of stateful flow, the real transpositions compose: the peer's reply to
        /// the bytes the forward flow emits carries the reverse flow's key, and the reverse flow
        /// turns it into the reply of the original packet, delivered where that came from.
        #[test]
        fn reverse_flow_undoes_forward_flow(
            scenario in 0u8..3,
            tcp in any::<bool>(),
            sport in 1u16..,
            dport in 1u16..,
            public in (11u32..=99).prop_flat_map(|a| (Just(a), any::<u32>())),
        ) {
            let mut sp = slow(full_policy());
            let l4 = |s: [u8; 4], d: [u8; 4], dm: Mac, sm: Mac| {
                if tcp {
                    tcp_frame(dm, sm, s, d, sport, dport, tcp::flags::SYN)
                } else {
                    udp_frame(dm, sm, s, d, sport, dport)
                }
            };
            let public = (public.0 << 24 | public.1 & 0x00ff_ffff).to_be_bytes();
            let (f, port, dir_back) = match scenario {
                // VM to a remote VM (VXLAN).
                0 => (l4(A_IP, REMOTE_IP, GW_MAC, A_MAC), A_PORT, Direction::In),
                // VM to the internet (SNAT, uplink).
                1 => (l4(A_IP, public, GW_MAC, A_MAC), A_PORT, Direction::In),
                // Internet client to the VIP (DNAT).
                _ => (l4(public, [203, 0, 113, 10], UL_MAC, GW_MAC), UL_PORT, Direction::Out),
            };
            let (k, v) = compile(&mut sp, Instant::ZERO, &f, port);
            let (fwd, rev) = forward(v);
            let rev = rev.expect("everything is stateful here");
            prop_assert_eq!(fwd.action.track_tcp, tcp);
            let out = apply(&fwd.action.transposition, &f);
            let reply = reply_to(&out);
            let arrive = rev.key.port;
            prop_assert_eq!(key_of(&reply, arrive, rev.key.direction()), rev.key);
            let back = apply(&rev.action.transposition, &reply);
            prop_assert_eq!(rev.action.egress, port);
            prop_assert_eq!(key_of(&back, port, dir_back), k.mirror(port));
            prop_assert_eq!(sp.stats().conns, 1);
        }
    }
}
