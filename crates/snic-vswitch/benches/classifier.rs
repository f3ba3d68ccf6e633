//! The per-layer rule classifier against a linear scan of the same rules, in the same run, on
//! one thread: ns per lookup for 1,000 rules of a realistic ACL mix, a 1,000-prefix route layer
//! (longest prefix match), the five-layer walk a flow setup does, and the cost of building a
//! 1,000-rule classifier (a policy update).
//!
//! It measures rule lookup only, not the rest of the slow path (actions, unified-flow
//! compilation, flow-table insertion). Every packet's answer is checked against the linear
//! scan before timing.

use core::net::{IpAddr, Ipv4Addr};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_vswitch::classifier::{Classifier, linear_lookup, lpm_len};
use snic_vswitch::key::Direction;
use snic_vswitch::policy::{Action, Field, Fields, Matcher, Predicate, Rule, Value};
use std::time::Duration;

const RULES: usize = 1000;
const PACKETS: usize = 4096;

fn ip(a: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn p(field: Field, matcher: Matcher) -> Predicate {
    Predicate { field, matcher }
}

/// Addresses live in 10.0.0.0/20 so that prefixes and packets meet.
fn host(rng: &mut ChaCha8Rng) -> u32 {
    0x0a00_0000 | rng.gen_range(0..0x1000u32)
}

const SERVICE_PORTS: [u64; 8] = [22, 53, 80, 443, 3306, 5432, 6379, 8080];

/// An ACL-like layer: host and subnet rules with ports, port ranges and protocol sets, and a
/// few catch-alls at the lowest priority.
fn acl_rules(rng: &mut ChaCha8Rng) -> Vec<Rule> {
    let mut rules = Vec::with_capacity(RULES);
    for id in 0..RULES as u32 {
        let priority = rng.gen_range(100..60_000);
        let tcp_udp = Matcher::Set(vec![Value::Int(6), Value::Int(17)]);
        let port = SERVICE_PORTS[rng.gen_range(0..SERVICE_PORTS.len())];
        let predicates = match rng.gen_range(0..100) {
            // A host and one of its services.
            0..40 => vec![
                p(Field::IpDst, Matcher::Prefix(ip(host(rng)), 32)),
                p(Field::IpProto, Matcher::Exact(Value::Int(6))),
                p(Field::L4Dst, Matcher::Exact(Value::Int(port))),
            ],
            // A client subnet to ephemeral ports.
            40..60 => vec![
                p(Field::IpSrc, Matcher::Prefix(ip(host(rng)), 24)),
                p(Field::IpProto, tcp_udp),
                p(Field::L4Dst, Matcher::Range(1024, 65535)),
            ],
            // A server subnet, TCP or UDP.
            60..80 => vec![
                p(Field::IpDst, Matcher::Prefix(ip(host(rng)), 24)),
                p(Field::IpProto, tcp_udp),
            ],
            // A port range for one protocol.
            80..92 => {
                let lo = rng.gen_range(1..60_000u64);
                vec![
                    p(Field::IpProto, Matcher::Exact(Value::Int(17))),
                    p(Field::L4Dst, Matcher::Range(lo, lo + rng.gen_range(0..100))),
                ]
            }
            // Source /16 with a source-port set.
            92..99 => vec![
                p(Field::IpSrc, Matcher::Prefix(ip(host(rng)), 16)),
                p(
                    Field::L4Src,
                    Matcher::Set(SERVICE_PORTS.iter().map(|n| Value::Int(*n)).collect()),
                ),
            ],
            // Catch-alls at the lowest priority.
            _ => {
                rules.push(Rule {
                    id,
                    priority: 65_000,
                    dir: None,
                    predicates: vec![p(Field::IpProto, Matcher::Exact(Value::Int(1)))],
                    action: Action::Allow,
                });
                continue;
            }
        };
        rules.push(Rule { id, priority, dir: None, predicates, action: Action::Allow });
    }
    rules.push(Rule {
        id: RULES as u32,
        priority: 65_535,
        dir: None,
        predicates: vec![],
        action: Action::Deny,
    });
    rules
}

/// A route layer: /32 host routes, /24 and /16 subnets and a default route.
fn route_rules(rng: &mut ChaCha8Rng) -> Vec<Rule> {
    let mut rules = Vec::with_capacity(RULES);
    for id in 0..RULES as u32 - 1 {
        let len = match rng.gen_range(0..100) {
            0..50 => 32,
            50..90 => 24,
            90..98 => 16,
            _ => 20,
        };
        rules.push(Rule {
            id,
            priority: rng.gen_range(0..4),
            dir: None,
            predicates: vec![p(Field::IpDst, Matcher::Prefix(ip(host(rng)), len))],
            action: Action::Pass,
        });
    }
    rules.push(Rule {
        id: RULES as u32,
        priority: 0,
        dir: None,
        predicates: vec![p(Field::IpDst, Matcher::Prefix(ip(0), 0))],
        action: Action::Pass,
    });
    rules
}

fn packets(rng: &mut ChaCha8Rng) -> Vec<Fields> {
    (0..PACKETS)
        .map(|_| {
            let proto = [6u8, 6, 6, 17, 17, 1][rng.gen_range(0..6)];
            let dport = if rng.gen_bool(0.6) {
                SERVICE_PORTS[rng.gen_range(0..SERVICE_PORTS.len())] as u16
            } else {
                rng.r#gen()
            };
            Fields {
                ethertype: 0x0800,
                ip_src: Some(ip(host(rng))),
                ip_dst: Some(ip(host(rng))),
                proto,
                l4_src: rng.r#gen(),
                l4_dst: dport,
                ..Fields::default()
            }
        })
        .collect()
}

/// One layer's rules, built, checked against the linear scan on every packet.
struct Layer {
    rules: Vec<Rule>,
    lpm: bool,
    classifier: Classifier,
}

impl Layer {
    fn new(rules: Vec<Rule>, lpm: bool, pkts: &[Fields]) -> Layer {
        let classifier = Classifier::build(&rules, lpm);
        // Packets decided by a specific rule, not by a catch-all or the default route.
        let mut specific = 0;
        for f in pkts {
            let want = linear_lookup(&rules, f, Direction::Out, lpm);
            assert_eq!(classifier.lookup(f, Direction::Out), want);
            specific +=
                usize::from(want.is_some_and(|i| {
                    rules[i].priority < 65_000 && (!lpm || lpm_len(&rules[i]) > 0)
                }));
        }
        eprintln!(
            "layer: {} rules, lpm {lpm}, {} shapes, {specific}/{} packets decided by a specific rule",
            rules.len(),
            classifier.shapes(Direction::Out),
            pkts.len()
        );
        Layer { rules, lpm, classifier }
    }
}

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let pkts = packets(&mut rng);
    let acl = Layer::new(acl_rules(&mut rng), false, &pkts);
    let route = Layer::new(route_rules(&mut rng), true, &pkts);

    for (name, layer) in [("acl_1000", &acl), ("route_1000", &route)] {
        let mut g = c.benchmark_group(name);
        let mut i = 0usize;
        g.bench_function("classifier", |b| {
            b.iter(|| {
                i = (i + 1) % PACKETS;
                black_box(layer.classifier.lookup(black_box(&pkts[i]), Direction::Out))
            })
        });
        let mut i = 0usize;
        g.bench_function("linear", |b| {
            b.iter(|| {
                i = (i + 1) % PACKETS;
                black_box(linear_lookup(
                    &layer.rules,
                    black_box(&pkts[i]),
                    Direction::Out,
                    layer.lpm,
                ))
            })
        });
        g.finish();
    }

    // Rebuilding a layer (what a policy update costs on the control plane).
    let mut g = c.benchmark_group("build_1000");
    g.bench_function("acl", |b| b.iter(|| Classifier::build(black_box(&acl.rules), false)));
    g.bench_function("route", |b| b.iter(|| Classifier::build(black_box(&route.rules), true)));
    g.finish();

    // A flow setup walks five layers of 1,000 rules: four ACL-like, one route.
    let mut layers: Vec<Layer> =
        (0..4).map(|_| Layer::new(acl_rules(&mut rng), false, &pkts)).collect();
    layers.push(route);
    let mut g = c.benchmark_group("five_layers_1000");
    let mut i = 0usize;
    g.bench_function("classifier", |b| {
        b.iter(|| {
            i = (i + 1) % PACKETS;
            let f = black_box(&pkts[i]);
            layers
                .iter()
                .map(|l| l.classifier.lookup(f, Direction::Out).unwrap_or(0))
                .sum::<usize>()
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
}

criterion_group! { name = benches; config = config(); targets = bench }
criterion_main!(benches);
