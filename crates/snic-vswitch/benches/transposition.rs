//! Header transposition cost per packet, on a 64-byte IPv4/UDP frame:
//! - `vxlan_encap_v4` / `vxlan_encap_v6`: push a VXLAN encapsulation (then strip it again with
//!   `pull_front`, a pointer move, so every iteration starts from the same frame without a copy);
//! - `nvgre_encap_v4`: the same with NVGRE;
//! - `dnat`: set ip.dst + l4.dst (incremental IPv4 and UDP checksum updates);
//! - `decap_dnat`: pop the VXLAN outer headers of a 114-byte frame, then DNAT the inner one
//!   (the packet is restored by copying 50 bytes of outer header back in front).
//!
//! Run: `cargo bench -p snic-vswitch --bench transposition -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use snic_pipeline::PacketBuf;
use snic_vswitch::policy::TunnelKind;
use snic_vswitch::transposition::{Encap, Op, Transposition};
use snic_wire::checksum;
use snic_wire::stack::Stack;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 64-byte Ethernet/IPv4/UDP frame with valid checksums.
fn udp64() -> Vec<u8> {
    let payload = [0x5au8; 22];
    let mut f = vec![0u8; 14 + 20 + 8];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 22).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[192, 168, 1, 100]);
    let c = !checksum::data(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f.extend_from_slice(&payload);
    let src = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let dst = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 100));
    let c = checksum::upper_layer(&src, &dst, 17, &f[34..]);
    f[40..42].copy_from_slice(&c.to_be_bytes());
    assert_eq!(f.len(), 64);
    f
}

fn encap(kind: TunnelKind, v6: bool) -> Encap {
    let (src_ip, dst_ip) = if v6 {
        (
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
        )
    } else {
        (IpAddr::V4(Ipv4Addr::new(10, 1, 1, 1)), IpAddr::V4(Ipv4Addr::new(10, 1, 1, 2)))
    };
    Encap {
        kind,
        src_mac: [2, 0, 0, 0, 1, 1],
        dst_mac: [2, 0, 0, 0, 1, 0xfe],
        src_ip,
        dst_ip,
        vni: 42,
        ttl: 64,
        udp_dst: 4789,
    }
}

fn packet(frame: &[u8]) -> PacketBuf {
    let mut p = PacketBuf::from_frame(frame);
    p.meta.stack = Stack::parse(frame);
    p
}

fn bench(c: &mut Criterion) {
    let frame = udp64();
    let mut g = c.benchmark_group("transposition");
    g.throughput(Throughput::Elements(1));

    for (name, kind, v6) in [
        ("vxlan_encap_v4", TunnelKind::Vxlan, false),
        ("vxlan_encap_v6", TunnelKind::Vxlan, true),
        ("nvgre_encap_v4", TunnelKind::Nvgre, false),
    ] {
        let t = Transposition::new(vec![Op::PushEncap(encap(kind, v6))]).unwrap();
        let grow = t.growth().unwrap() as usize;
        let mut p = packet(&frame);
        let mut hash = 0u32;
        g.bench_function(name, |b| {
            b.iter(|| {
                hash = hash.wrapping_add(0x9e37_79b9);
                t.apply(black_box(&mut p), hash).unwrap();
                black_box(p.data()[20]);
                p.pull_front(grow).unwrap();
            })
        });
    }

    let dnat = Transposition::new(vec![
        Op::SetIpDst(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5))),
        Op::SetL4Dst(8080),
    ])
    .unwrap();
    let mut p = packet(&frame);
    g.bench_function("dnat", |b| {
        b.iter(|| {
            dnat.apply(black_box(&mut p), 1).unwrap();
        })
    });

    // Decap + DNAT: restore the 50 outer bytes in front after each run.
    let vx = Transposition::new(vec![Op::PushEncap(encap(TunnelKind::Vxlan, false))]).unwrap();
    let mut outer = packet(&frame);
    vx.apply(&mut outer, 7).unwrap();
    let outer_frame = outer.data().to_vec();
    let head: [u8; 50] = outer_frame[..50].try_into().unwrap();
    let decap = Transposition::new(vec![
        Op::PopOuter,
        Op::SetIpDst(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5))),
        Op::SetL4Dst(8080),
    ])
    .unwrap();
    let mut p = packet(&outer_frame);
    g.bench_function("decap_dnat", |b| {
        b.iter(|| {
            decap.apply(black_box(&mut p), 1).unwrap();
            p.push_front(50).unwrap().copy_from_slice(&head);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
