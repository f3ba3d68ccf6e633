//! The policy model of the VFP slow path: vPorts, their ordered layers, rules, predicates and
//! actions, the VNET mappings, meters and the underlay.
//!
//! These are plain data, and [`default_policy`] is the embedded default. The submodules check,
//! change, read and write them: [`validate`] (semantic checks) and [`edit`] (edits applied as
//! one transaction) are what the engine uses; [`toml`] (the policy file), [`cli`] (the
//! command-line forms of rules, layers, mappings and actions) and [`wire`] (edits as documents)
//! are what only the control plane uses. [`crate::vfp`] walks them for the first packet of each flow and compiles the result
//! into a unified flow.
//!
//! Semantics:
//! - Each vPort has layers, walked in order for outbound packets (VM to network) and in reverse
//!   order for inbound ones. In each layer the first matching rule wins: lowest `priority`
//!   first, then lowest `id`. A rule with `dir` set applies to that direction only. When no rule
//!   matches, the layer's `default` applies.
//! - Predicates of a layer see the packet as the earlier layers left it (a NAT rewrite is seen
//!   by the layers after it). All predicates of a rule must match.
//! - In a `route` layer the matching rule with the longest `ip.dst` prefix wins (longest prefix
//!   match); priority breaks ties.

pub mod cli;
pub mod edit;
mod text;
pub mod toml;
pub mod validate;
pub mod wire;

use crate::key::{Direction, VPortId};
use core::fmt;
use core::net::{IpAddr, Ipv4Addr};

/// Index of a meter in [`Policy::meters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MeterId(pub u16);

/// A MAC address.
pub type Mac = [u8; 6];

/// The whole policy of one vSwitch: what the control plane installs as one transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    /// The provider network side.
    pub underlay: Underlay,
    /// Virtual ports, each with its layers. Ids are unique.
    pub vports: Vec<VPortPolicy>,
    /// Meters (token buckets) that rules and vPorts refer to by [`MeterId`] (index).
    pub meters: Vec<MeterSpec>,
    /// Egress queues with ECN marking, per pipeline port.
    pub queues: Vec<QueueSpec>,
}

/// The underlay (provider) network: where encapsulated traffic leaves and arrives.
#[derive(Debug, Clone, PartialEq)]
pub struct Underlay {
    /// Pipeline port of the uplink.
    pub port: u16,
    /// This host's provider address (outer source of encapsulated packets).
    pub ip: IpAddr,
    /// This host's MAC on the underlay (outer Ethernet source).
    pub mac: Mac,
    /// Next hop's MAC on the underlay (outer Ethernet destination).
    pub gateway_mac: Mac,
    /// UDP destination port of VXLAN (default 4789).
    pub vxlan_port: u16,
    /// TTL / hop limit of outer headers (default 64).
    pub ttl: u8,
}

impl Default for Underlay {
    fn default() -> Self {
        Underlay {
            port: 1,
            ip: IpAddr::V4(core::net::Ipv4Addr::UNSPECIFIED),
            mac: [0; 6],
            gateway_mac: [0xff; 6],
            vxlan_port: 4789,
            ttl: 64,
        }
    }
}

/// A virtual port (a VM's NIC) and its policy.
#[derive(Debug, Clone, PartialEq)]
pub struct VPortPolicy {
    /// Unique id.
    pub id: VPortId,
    /// A name for dumps and errors.
    pub name: String,
    /// Pipeline port the VM is attached to (its packets arrive there; inbound ones leave there).
    pub port: u16,
    /// The VM's MAC.
    pub mac: Mac,
    /// The VM's customer addresses.
    pub ips: Vec<IpAddr>,
    /// The virtual network the VM is in (VNI / VSID).
    pub vni: u32,
    /// Meter applied to all of the vPort's traffic, if any.
    pub meter: Option<MeterId>,
    /// Layers, in outbound order.
    pub layers: Vec<LayerPolicy>,
}

/// What a layer does. The kind decides which actions its rules may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// Allow / deny / stateful allow.
    Acl,
    /// Encapsulation: customer address to provider address mapping.
    Vnet,
    /// DNAT (VIP to DIP, with a hash choice among DIPs) and SNAT (with port allocation).
    Nat,
    /// Longest prefix match on the inner destination.
    Route,
    /// Meter / QoS class assignment.
    Meter,
}

impl LayerKind {
    /// Every kind.
    pub const ALL: [LayerKind; 5] =
        [LayerKind::Acl, LayerKind::Vnet, LayerKind::Nat, LayerKind::Route, LayerKind::Meter];

    /// `"acl"`, `"vnet"`, `"nat"`, `"route"`, `"meter"`.
    pub const fn name(self) -> &'static str {
        match self {
            LayerKind::Acl => "acl",
            LayerKind::Vnet => "vnet",
            LayerKind::Nat => "nat",
            LayerKind::Route => "route",
            LayerKind::Meter => "meter",
        }
    }

    /// The kind called `name`.
    pub fn from_name(name: &str) -> Option<LayerKind> {
        LayerKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One layer of a vPort.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerPolicy {
    /// Unique within the vPort.
    pub name: String,
    /// What the layer does.
    pub kind: LayerKind,
    /// Rules; order in the vector does not matter (priority, then id, decide).
    pub rules: Vec<Rule>,
    /// What happens when no rule matches: `Deny` for an ACL by default, `Pass` otherwise.
    pub default: Action,
    /// VNET layers: customer address to provider address mappings.
    pub mappings: Vec<Mapping>,
}

/// A rule: when every predicate matches, do the action.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Unique within the layer; names the rule for removal and in dumps.
    pub id: u32,
    /// Lower goes first.
    pub priority: u32,
    /// Only for this direction, when set.
    pub dir: Option<Direction>,
    /// All must match.
    pub predicates: Vec<Predicate>,
    /// What to do.
    pub action: Action,
}

/// A field of the packet a predicate reads. `Ip*`, ports and protocol are the inner
/// (customer) headers of a tunnelled packet; `Outer*` and `Vni` are the tunnel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Inner Ethernet source (`eth.src`).
    EthSrc,
    /// Inner Ethernet destination (`eth.dst`).
    EthDst,
    /// Inner EtherType (`eth.type`).
    EtherType,
    /// Inner IP source (`ip.src`).
    IpSrc,
    /// Inner IP destination (`ip.dst`).
    IpDst,
    /// IP protocol (`ip.proto`).
    IpProto,
    /// L4 source port (`l4.src`, also `tcp.src`/`udp.src`).
    L4Src,
    /// L4 destination port (`l4.dst`).
    L4Dst,
    /// Tunnel VNI (`vni`).
    Vni,
    /// Outer IP source (`outer.ip.src`).
    OuterIpSrc,
    /// Outer IP destination (`outer.ip.dst`).
    OuterIpDst,
}

impl Field {
    /// Every field.
    pub const ALL: [Field; 11] = [
        Field::EthSrc,
        Field::EthDst,
        Field::EtherType,
        Field::IpSrc,
        Field::IpDst,
        Field::IpProto,
        Field::L4Src,
        Field::L4Dst,
        Field::Vni,
        Field::OuterIpSrc,
        Field::OuterIpDst,
    ];

    /// The name used in TOML and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Field::EthSrc => "eth.src",
            Field::EthDst => "eth.dst",
            Field::EtherType => "eth.type",
            Field::IpSrc => "ip.src",
            Field::IpDst => "ip.dst",
            Field::IpProto => "ip.proto",
            Field::L4Src => "l4.src",
            Field::L4Dst => "l4.dst",
            Field::Vni => "vni",
            Field::OuterIpSrc => "outer.ip.src",
            Field::OuterIpDst => "outer.ip.dst",
        }
    }

    /// The field called `name` (also accepts `tcp.src`, `udp.dst`... as aliases of `l4.*`).
    pub fn from_name(name: &str) -> Option<Field> {
        match name {
            "tcp.src" | "udp.src" => Some(Field::L4Src),
            "tcp.dst" | "udp.dst" => Some(Field::L4Dst),
            _ => Field::ALL.into_iter().find(|f| f.name() == name),
        }
    }
}

/// A value a predicate compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value {
    /// An IP address.
    Ip(IpAddr),
    /// A MAC address.
    Mac(Mac),
    /// A number (ports, protocol, EtherType, VNI).
    Int(u64),
}

/// How a predicate matches its field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Matcher {
    /// Equal to the value.
    Exact(Value),
    /// An IP address inside the prefix (address, prefix length).
    Prefix(IpAddr, u8),
    /// A number in the inclusive range.
    Range(u64, u64),
    /// Equal to one of the values.
    Set(Vec<Value>),
}

/// One test of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Predicate {
    /// The field read.
    pub field: Field,
    /// How it must match.
    pub matcher: Matcher,
}

/// Tunnel encapsulations of the VNET layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TunnelKind {
    /// VXLAN (UDP 4789), RFC 7348.
    #[default]
    Vxlan,
    /// NVGRE (GRE with key = VSID << 8 | flow id), RFC 7637.
    Nvgre,
}

/// Where a `route` rule sends the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteTarget {
    /// Through the virtual network: the VNET layer encapsulates to the provider address of the
    /// (inner) destination.
    Vnet,
    /// Out of the uplink without encapsulation (internet / NAT traffic), to the gateway MAC.
    Uplink,
    /// To another local vPort directly.
    VPort(VPortId),
    /// Nowhere (a blackhole route).
    Drop,
}

/// What a rule does. Which actions a layer may use depends on its [`LayerKind`]; `Pass` and
/// `Deny` fit every layer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Continue with the next layer.
    Pass,
    /// Drop the packet (and do not cache anything that lets it through).
    Deny,
    /// ACL: allow this direction only.
    Allow,
    /// ACL: allow, and allow the replies of this connection in the other direction.
    AllowStateful,
    /// VNET: encapsulate towards the provider address mapped to the inner destination.
    Encap {
        /// VXLAN or NVGRE.
        kind: TunnelKind,
        /// The VNI / VSID to put in the tunnel header.
        vni: u32,
    },
    /// VNET: strip the tunnel (inbound), checking the VNI and the outer source against the
    /// layer's mappings.
    Decap,
    /// NAT: destination NAT from a virtual IP to one of the backends (DIPs), chosen by a hash of
    /// the flow, so one flow always reaches the same DIP. Stateful: replies are translated back.
    Dnat {
        /// Backends: address and optional port (none keeps the port).
        backends: Vec<(IpAddr, Option<u16>)>,
    },
    /// NAT: source NAT to `ip` with a source port allocated from `ports` (inclusive). Stateful.
    Snat {
        /// Public address.
        ip: IpAddr,
        /// First and last port to allocate from.
        ports: (u16, u16),
    },
    /// ROUTE: where the packet goes.
    Route(RouteTarget),
    /// METER: meter each flow with this meter (a per-flow token bucket).
    Meter(MeterId),
}

/// A customer address reachable through the virtual network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// Customer address (inner).
    pub ca: IpAddr,
    /// Provider address of the host that has it (outer destination).
    pub pa: IpAddr,
    /// MAC of the customer address (inner Ethernet destination after encapsulation).
    pub mac: Mac,
    /// Virtual network of the mapping.
    pub vni: u32,
}

/// What a meter does with packets over its rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Exceed {
    /// Drop them (counted).
    #[default]
    Drop,
    /// Set ECN CE on ECT packets and let them through; drop non-ECT ones (counted).
    Mark,
}

/// A token-bucket meter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MeterSpec {
    /// Name for dumps.
    pub name: String,
    /// Rate in bits per second.
    pub rate_bps: u64,
    /// Bucket depth in bytes.
    pub burst_bytes: u64,
    /// What happens above the rate.
    pub exceed: Exceed,
}

/// An egress queue on a pipeline port: shaped to a rate, marking ECN CE when deep.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueSpec {
    /// Pipeline port whose egress this queue shapes.
    pub port: u16,
    /// Drain rate in bits per second.
    pub rate_bps: u64,
    /// Depth in packets from which ECT packets are marked CE instead of being dropped.
    pub ecn_threshold: usize,
    /// Most packets queued; beyond it packets are dropped (counted).
    pub limit: usize,
}

impl Policy {
    /// The vPort with this id.
    pub fn vport(&self, id: VPortId) -> Option<&VPortPolicy> {
        self.vports.iter().find(|v| v.id == id)
    }

    /// The vPort attached to pipeline port `port`.
    pub fn vport_on_port(&self, port: u16) -> Option<&VPortPolicy> {
        self.vports.iter().find(|v| v.port == port)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Pass => f.write_str("pass"),
            Action::Deny => f.write_str("deny"),
            Action::Allow => f.write_str("allow"),
            Action::AllowStateful => f.write_str("allow-stateful"),
            Action::Encap { kind: TunnelKind::Vxlan, vni } => write!(f, "encap vxlan vni {vni}"),
            Action::Encap { kind: TunnelKind::Nvgre, vni } => write!(f, "encap nvgre vsid {vni}"),
            Action::Decap => f.write_str("decap"),
            Action::Dnat { backends } => {
                f.write_str("dnat")?;
                for (ip, port) in backends {
                    match port {
                        Some(p) => write!(f, " {}", core::net::SocketAddr::new(*ip, *p))?,
                        None => write!(f, " {ip}")?,
                    }
                }
                Ok(())
            }
            Action::Snat { ip, ports } => write!(f, "snat {ip} {}-{}", ports.0, ports.1),
            Action::Route(RouteTarget::Vnet) => f.write_str("route vnet"),
            Action::Route(RouteTarget::Uplink) => f.write_str("route uplink"),
            Action::Route(RouteTarget::VPort(v)) => write!(f, "route vport {}", v.0),
            Action::Route(RouteTarget::Drop) => f.write_str("route drop"),
            Action::Meter(m) => write!(f, "meter {}", m.0),
        }
    }
}

/// The packet fields predicates read, taken from a packet as the earlier layers left it.
/// `None` for fields the packet does not have (no IP header, not tunnelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fields {
    /// Inner Ethernet source.
    pub eth_src: Mac,
    /// Inner Ethernet destination.
    pub eth_dst: Mac,
    /// Inner EtherType.
    pub ethertype: u16,
    /// Inner IP source (ARP: sender protocol address).
    pub ip_src: Option<IpAddr>,
    /// Inner IP destination (ARP: target protocol address).
    pub ip_dst: Option<IpAddr>,
    /// IP protocol (0 when there is none).
    pub proto: u8,
    /// L4 source port (ICMP echo: identifier).
    pub l4_src: u16,
    /// L4 destination port (ICMP echo: identifier).
    pub l4_dst: u16,
    /// Tunnel VNI.
    pub vni: Option<u32>,
    /// Outer IP source.
    pub outer_src: Option<IpAddr>,
    /// Outer IP destination.
    pub outer_dst: Option<IpAddr>,
}

/// True when `ip` is inside `prefix/len` (same family only).
pub fn in_prefix(ip: IpAddr, prefix: IpAddr, len: u8) -> bool {
    match (ip, prefix) {
        (IpAddr::V4(a), IpAddr::V4(p)) if len <= 32 => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            u32::from(a) & mask == u32::from(p) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(p)) if len <= 128 => {
            let mask = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            u128::from(a) & mask == u128::from(p) & mask
        }
        _ => false,
    }
}

impl Fields {
    /// The value of `field`, when the packet has it.
    pub fn get(&self, field: Field) -> Option<Value> {
        Some(match field {
            Field::EthSrc => Value::Mac(self.eth_src),
            Field::EthDst => Value::Mac(self.eth_dst),
            Field::EtherType => Value::Int(u64::from(self.ethertype)),
            Field::IpSrc => Value::Ip(self.ip_src?),
            Field::IpDst => Value::Ip(self.ip_dst?),
            Field::IpProto => Value::Int(u64::from(self.proto)),
            Field::L4Src => Value::Int(u64::from(self.l4_src)),
            Field::L4Dst => Value::Int(u64::from(self.l4_dst)),
            Field::Vni => Value::Int(u64::from(self.vni?)),
            Field::OuterIpSrc => Value::Ip(self.outer_src?),
            Field::OuterIpDst => Value::Ip(self.outer_dst?),
        })
    }
}

impl Predicate {
    /// The reference semantics of a predicate (the classifier must agree with it): a field the
    /// packet lacks matches nothing.
    pub fn matches(&self, f: &Fields) -> bool {
        let Some(v) = f.get(self.field) else { return false };
        match (&self.matcher, v) {
            (Matcher::Exact(want), v) => *want == v,
            (Matcher::Prefix(p, len), Value::Ip(ip)) => in_prefix(ip, *p, *len),
            (Matcher::Range(lo, hi), Value::Int(n)) => *lo <= n && n <= *hi,
            (Matcher::Set(vals), v) => vals.contains(&v),
            _ => false,
        }
    }
}

impl Rule {
    /// True when the rule applies to direction `dir` and every predicate matches.
    pub fn matches(&self, f: &Fields, dir: Direction) -> bool {
        self.dir.is_none_or(|d| d == dir) && self.predicates.iter().all(|p| p.matches(f))
    }
}

/// The embedded default policy, used by tests, benches and `snic vswitch` without a file:
///
/// - underlay on pipeline port 1: PA 192.168.100.1, MAC 02:00:00:00:01:01, gateway
///   02:00:00:00:02:01, VXLAN port 4789, TTL 64; no meters, no queues;
/// - vPort 0 `vm-a` on pipeline port 0: MAC 02:00:00:00:00:01, CA 10.0.0.1, VNI 42, with the
///   layers, in outbound order:
///   - `acl` (acl, default deny): rule 1 allow-stateful, both directions (allow all);
///   - `nat` (nat, default pass): no rules;
///   - `route` (route, default pass): rule 1 out, `ip.dst` 10.0.0.0/8 -> route vnet;
///   - `vnet` (vnet, default pass): mappings 10.0.0.N -> PA 192.168.100.N, MAC
///     02:00:00:00:00:NN (N in hex), VNI 42, for N = 2..=254; rule 1 out: encap vxlan VNI 42;
///     rule 2 in: decap;
///   - `meter` (meter, default pass): no rules.
pub fn default_policy() -> Policy {
    let mappings = (2u8..=254)
        .map(|n| Mapping {
            ca: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
            pa: IpAddr::V4(Ipv4Addr::new(192, 168, 100, n)),
            mac: [2, 0, 0, 0, 0, n],
            vni: 42,
        })
        .collect();
    let layer = |name: &str, kind, default, rules, mappings| LayerPolicy {
        name: name.to_owned(),
        kind,
        rules,
        default,
        mappings,
    };
    let rule = |id, dir, predicates, action| Rule { id, priority: 0, dir, predicates, action };
    let vport = VPortPolicy {
        id: VPortId(0),
        name: "vm-a".to_owned(),
        port: 0,
        mac: [2, 0, 0, 0, 0, 1],
        ips: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
        vni: 42,
        meter: None,
        layers: vec![
            layer(
                "acl",
                LayerKind::Acl,
                Action::Deny,
                vec![rule(1, None, vec![], Action::AllowStateful)],
                vec![],
            ),
            layer("nat", LayerKind::Nat, Action::Pass, vec![], vec![]),
            layer(
                "route",
                LayerKind::Route,
                Action::Pass,
                vec![rule(
                    1,
                    Some(Direction::Out),
                    vec![Predicate {
                        field: Field::IpDst,
                        matcher: Matcher::Prefix(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8),
                    }],
                    Action::Route(RouteTarget::Vnet),
                )],
                vec![],
            ),
            layer(
                "vnet",
                LayerKind::Vnet,
                Action::Pass,
                vec![
                    rule(
                        1,
                        Some(Direction::Out),
                        vec![],
                        Action::Encap { kind: TunnelKind::Vxlan, vni: 42 },
                    ),
                    rule(2, Some(Direction::In), vec![], Action::Decap),
                ],
                mappings,
            ),
            layer("meter", LayerKind::Meter, Action::Pass, vec![], vec![]),
        ],
    };
    Policy {
        underlay: Underlay {
            port: 1,
            ip: IpAddr::V4(Ipv4Addr::new(192, 168, 100, 1)),
            mac: [2, 0, 0, 0, 1, 1],
            gateway_mac: [2, 0, 0, 0, 2, 1],
            vxlan_port: 4789,
            ttl: 64,
        },
        vports: vec![vport],
        meters: Vec::new(),
        queues: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::toml::{parse_policy, to_toml};
    use super::validate::validate;
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn default_policy_is_valid_and_as_documented() {
        let p = default_policy();
        validate(&p).unwrap();
        assert_eq!(parse_policy(&to_toml(&p), "default").unwrap(), p);
        let v = &p.vports[0];
        let names: Vec<&str> = v.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["acl", "nat", "route", "vnet", "meter"]);
        let maps = &v.layers[3].mappings;
        assert_eq!(maps.len(), 253);
        assert_eq!(
            maps[0],
            Mapping {
                ca: v4(10, 0, 0, 2),
                pa: v4(192, 168, 100, 2),
                mac: [2, 0, 0, 0, 0, 2],
                vni: 42
            }
        );
        assert_eq!(maps[252].ca, v4(10, 0, 0, 254));
        assert_eq!((p.underlay.port, p.underlay.ip), (1, v4(192, 168, 100, 1)));
    }
}
