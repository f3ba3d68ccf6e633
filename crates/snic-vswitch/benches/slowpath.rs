//! Slow-path flow setups per second: `SlowPath::compile` of distinct flows through one vPort
//! with five layers of 1,000 rules each (ACL, NAT that mostly passes, ROUTE with 1,000
//! prefixes and longest prefix match, VNET with 1,000 mappings, METER), on one thread.
//!
//! - `udp_stateless`: UDP flows the ACL allows statelessly: the walk, the VXLAN encap
//!   transposition, no connection state. The target is at least 500k setups/s.
//! - `tcp_stateful_syn`: TCP SYNs the ACL allows statefully: the same walk plus the reverse
//!   flow and a connection-table insert per flow (a fresh slow path per batch, setup untimed).
//!
//! It does not measure the fast path, the flow-table insert or the exception queue.

use core::net::{IpAddr, Ipv4Addr};
use criterion::{BatchSize, Criterion, Throughput, black_box, criterion_group, criterion_main};
use snic_time::Instant;
use snic_vswitch::key::{Direction, FlowKey, VPortId, extract};
use snic_vswitch::policy::{
    Action, Field, LayerKind, LayerPolicy, Mapping, Matcher, MeterId, MeterSpec, Policy, Predicate,
    RouteTarget, Rule, TunnelKind, Underlay, VPortPolicy, Value,
};
use snic_vswitch::vfp::{SlowPath, SlowPathConfig, Verdict};
use snic_wire::stack::Stack;
use std::sync::Arc;
use std::time::Duration;

const RULES: u32 = 1000;
const FLOWS: usize = 4096;
const VNI: u32 = 42;
const VM_PORT: u16 = 2;
const VM_IP: [u8; 4] = [10, 0, 0, 1];
const VM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn ip(a: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn p(field: Field, matcher: Matcher) -> Predicate {
    Predicate { field, matcher }
}

fn rule(
    id: u32,
    priority: u32,
    dir: Option<Direction>,
    predicates: Vec<Predicate>,
    action: Action,
) -> Rule {
    Rule { id, priority, dir, predicates, action }
}

fn layer(name: &str, kind: LayerKind, rules: Vec<Rule>, default: Action) -> LayerPolicy {
    LayerPolicy { name: name.into(), kind, rules, default, mappings: Vec::new() }
}

/// Customer address `i` of the remote VMs: 10.1.0.0/22.
fn ca(i: u32) -> u32 {
    0x0a01_0000 | (i / 250) << 8 | (i % 250 + 1)
}

/// The ACL: 600 host denies from 172.16/12, 300 subnet allows (one of them covers the remote
/// VMs), 100 range denies elsewhere; default deny.
fn acl(allow: Action) -> LayerPolicy {
    let mut rules = Vec::new();
    for i in 0..RULES {
        let r = match i {
            0..600 => rule(
                i,
                100 + i,
                None,
                vec![
                    p(Field::IpSrc, Matcher::Prefix(ip(0xac10_0000 | (i * 13)), 32)),
                    p(Field::IpProto, Matcher::Exact(Value::Int(6))),
                    p(Field::L4Dst, Matcher::Exact(Value::Int(u64::from(i % 50 + 1)))),
                ],
                Action::Deny,
            ),
            600..900 => rule(
                i,
                1000 + i,
                Some(Direction::Out),
                vec![
                    p(Field::IpDst, Matcher::Prefix(ip(0x0a01_0000 | (i - 600) << 10), 22)),
                    p(Field::IpProto, Matcher::Set(vec![Value::Int(6), Value::Int(17)])),
                    p(Field::L4Dst, Matcher::Range(1024, 65535)),
                ],
                allow.clone(),
            ),
            _ => rule(
                i,
                50 + i,
                None,
                vec![
                    p(Field::IpDst, Matcher::Prefix(ip(0xc0a8_0000 | (i - 900) << 8), 24)),
                    p(Field::L4Src, Matcher::Range(0, 1023)),
                ],
                Action::Deny,
            ),
        };
        rules.push(r);
    }
    layer("acl", LayerKind::Acl, rules, Action::Deny)
}

/// NAT: 1,000 inbound VIP rules (DNAT); outbound traffic passes.
fn nat() -> LayerPolicy {
    let rules = (0..RULES)
        .map(|i| {
            rule(
                i,
                10,
                Some(Direction::In),
                vec![
                    p(Field::IpDst, Matcher::Exact(Value::Ip(ip(0xc612_0000 | i)))),
                    p(Field::L4Dst, Matcher::Exact(Value::Int(80))),
                ],
                Action::Dnat { backends: vec![(IpAddr::from(VM_IP), Some(8080))] },
            )
        })
        .collect();
    layer("nat", LayerKind::Nat, rules, Action::Pass)
}

/// ROUTE: 1,000 prefixes of several lengths (/16, /22, /24, /28) and a default route.
fn route() -> LayerPolicy {
    let mut rules = Vec::new();
    for i in 0..RULES - 1 {
        let (prefix, len, target) = match i % 4 {
            0 => (0x0a00_0000 | (i + 2) << 16, 16, RouteTarget::Uplink),
            1 => (0x0a01_0000 | (i / 4 % 64) << 10, 22, RouteTarget::Vnet),
            2 => (0x0a01_0000 | (i / 4 % 4) << 8, 24, RouteTarget::Vnet),
            _ => (0x0a01_0000 | (i / 4 % 4) << 8 | (i / 16 % 16) << 4, 28, RouteTarget::Vnet),
        };
        rules.push(rule(
            i,
            100,
            None,
            vec![p(Field::IpDst, Matcher::Prefix(ip(prefix), len))],
            Action::Route(target),
        ));
    }
    rules.push(rule(
        RULES - 1,
        100,
        None,
        vec![p(Field::IpDst, Matcher::Prefix(ip(0), 0))],
        Action::Route(RouteTarget::Uplink),
    ));
    layer("route", LayerKind::Route, rules, Action::Pass)
}

/// VNET: one encap rule per remote VM and its mapping (1,000 of each), and decap inbound.
fn vnet() -> LayerPolicy {
    let mut rules: Vec<Rule> = (0..RULES)
        .map(|i| {
            rule(
                i,
                10,
                Some(Direction::Out),
                vec![p(Field::IpDst, Matcher::Exact(Value::Ip(ip(ca(i)))))],
                Action::Encap { kind: TunnelKind::Vxlan, vni: VNI },
            )
        })
        .collect();
    rules.push(rule(RULES, 10, Some(Direction::In), vec![], Action::Decap));
    let mut l = layer("vnet", LayerKind::Vnet, rules, Action::Pass);
    l.mappings = (0..RULES)
        .map(|i| Mapping {
            ca: ip(ca(i)),
            pa: ip(0xc000_0200 | (i % 200 + 2)),
            mac: [2, 0, 0, 1, (i >> 8) as u8, i as u8],
            vni: VNI,
        })
        .collect();
    l
}

/// METER: 1,000 source-port rules over 16 meters.
fn meter() -> LayerPolicy {
    let rules = (0..RULES)
        .map(|i| {
            rule(
                i,
                10,
                None,
                vec![p(Field::L4Src, Matcher::Exact(Value::Int(u64::from(20_000 + i))))],
                Action::Meter(MeterId((i % 16) as u16)),
            )
        })
        .collect();
    layer("meter", LayerKind::Meter, rules, Action::Pass)
}

fn policy(allow: Action) -> Policy {
    Policy {
        underlay: Underlay {
            port: 1,
            ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            mac: [2, 0, 0, 0, 0, 0xaa],
            gateway_mac: [2, 0, 0, 0, 0, 0xfe],
            vxlan_port: 4789,
            ttl: 64,
        },
        vports: vec![VPortPolicy {
            id: VPortId(1),
            name: "vm1".into(),
            port: VM_PORT,
            mac: VM_MAC,
            ips: vec![IpAddr::from(VM_IP)],
            vni: VNI,
            meter: None,
            layers: vec![acl(allow), nat(), route(), vnet(), meter()],
        }],
        meters: (0..16)
            .map(|i| MeterSpec {
                name: format!("m{i}"),
                rate_bps: 1_000_000_000,
                burst_bytes: 65_536,
                exceed: Default::default(),
            })
            .collect(),
        queues: Vec::new(),
    }
}

/// Ethernet/IPv4/(UDP|TCP SYN) from the VM to remote VM `i % 1000`, unique per `i`.
fn frame(i: usize, tcp: bool) -> Vec<u8> {
    let l4_len = if tcp { 20 } else { 8 + 18 };
    let mut f = vec![0u8; 14 + 20 + l4_len];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xfe]);
    f[6..12].copy_from_slice(&VM_MAC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + l4_len) as u16;
    let dst = ca((i % RULES as usize) as u32).to_be_bytes();
    {
        let h = &mut f[14..34];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[8] = 64;
        h[9] = if tcp { 6 } else { 17 };
        h[12..16].copy_from_slice(&VM_IP);
        h[16..20].copy_from_slice(&dst);
        let c = snic_wire::checksum::data(h);
        h[10..12].copy_from_slice(&(!c).to_be_bytes());
    }
    let sport = 20_000 + (i * 7 % RULES as usize) as u16;
    let dport = 5_000 + i as u16;
    let l4 = &mut f[34..];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    if tcp {
        l4[12] = 5 << 4;
        l4[13] = 0x02;
    } else {
        l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    }
    f
}

struct Flow {
    frame: Vec<u8>,
    stack: Stack,
    key: FlowKey,
    hash: u64,
}

fn flows(tcp: bool) -> Vec<Flow> {
    (0..FLOWS)
        .map(|i| {
            let frame = frame(i, tcp);
            let stack = Stack::parse(&frame);
            let key = extract(&frame, &stack, VM_PORT, Direction::Out).expect("bench frame keys");
            let hash = key.hash_with(0x5eed);
            Flow { frame, stack, key, hash }
        })
        .collect()
}

fn run(sp: &mut SlowPath, flows: &[Flow], stateful: bool) {
    for f in flows {
        let v = sp.compile(Instant::ZERO, &f.frame, &f.stack, &f.key, f.hash);
        debug_assert!(
            matches!(v, Verdict::Forward { ref reverse, .. } if reverse.is_some() == stateful)
        );
        black_box(v);
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("slowpath_5x1000");
    g.sample_size(20).measurement_time(Duration::from_secs(8)).warm_up_time(Duration::from_secs(2));
    g.throughput(Throughput::Elements(FLOWS as u64));

    let udp = flows(false);
    let mut sp = SlowPath::new(Arc::new(policy(Action::Allow)), SlowPathConfig::default());
    // Every bench flow must take the full path: allowed, encapsulated, metered.
    for f in &udp {
        match sp.compile(Instant::ZERO, &f.frame, &f.stack, &f.key, f.hash) {
            Verdict::Forward { forward, reverse: None } => {
                assert!(forward.action.meter.is_some() && forward.action.egress == 1);
            }
            v => panic!("bench flow not forwarded statelessly: {v:?}"),
        }
    }
    g.bench_function("udp_stateless", |b| b.iter(|| run(&mut sp, &udp, false)));

    let tcp = flows(true);
    let stateful = Arc::new(policy(Action::AllowStateful));
    let fresh = || {
        SlowPath::new(
            stateful.clone(),
            SlowPathConfig { max_half_open: FLOWS, ..SlowPathConfig::default() },
        )
    };
    g.bench_function("tcp_stateful_syn", |b| {
        // The slow path is returned so that its drop is not timed.
        b.iter_batched(
            fresh,
            |mut sp| {
                run(&mut sp, &tcp, true);
                sp
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
