//! Software segmentation cost (`offload::segment`) for one 64 000-byte TCP/IPv4 super-packet at
//! MSS 1398 (46 segments): plain, and tunnelled in VXLAN over an IPv4 outer header (outer UDP
//! checksum 0) and over an IPv6 one (outer UDP checksum computed per segment). Throughput is
//! in payload bytes, so criterion's rate is the segmentation rate of one core.
//!
//! Run: `cargo bench -p snic-pipeline --bench offload -- --warm-up-time 1 --measurement-time 3`

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use snic_pipeline::meta::{Gso, GsoKind, TunnelGso, TunnelGsoKind};
use snic_pipeline::offload::segment;
use snic_pipeline::{Batch, PacketBuf};

const PAYLOAD: usize = 64_000;
const MSS: u16 = 1398;

/// Ethernet + IPv4 + TCP (20-byte header) carrying `PAYLOAD` bytes; checksums left to
/// `segment`.
fn inner() -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((40 + PAYLOAD) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 1, 0]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend((0..PAYLOAD).map(|i| i as u8));
    f
}

/// `inner` in VXLAN (VNI 42) over IPv4 or IPv6, lengths for the whole super-packet.
fn vxlan(inner: &[u8], v6: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 2, 2, 2, 0, 0, 0, 1, 1];
    let udp_len = (16 + inner.len()) as u16;
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[17, 64]);
        f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&(20 + udp_len).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 100, 1, 192, 168, 100, 2]);
    }
    f.extend_from_slice(&[0xc0, 0x01, 0x12, 0xb5]);
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x08, 0, 0, 0, 0, 0, 42, 0]);
    f.extend_from_slice(inner);
    f
}

fn bench(c: &mut Criterion) {
    let inner = inner();
    let gso = Gso { kind: GsoKind::TcpV4, size: MSS, hdr_len: 54, tunnel: None };
    let mut cases = vec![("plain", PacketBuf::from_frame(&inner))];
    cases[0].1.meta.offload.gso = Some(gso);
    for (name, v6, ol) in [("vxlan4", false, 50u16), ("vxlan6", true, 70)] {
        let mut p = PacketBuf::from_frame(&vxlan(&inner, v6));
        let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: ol });
        p.meta.offload.gso = Some(Gso { hdr_len: 54 + ol, tunnel, ..gso });
        cases.push((name, p));
    }
    let mut g = c.benchmark_group("segment_64k");
    g.throughput(Throughput::Bytes(PAYLOAD as u64));
    let mut out = Batch::new(64);
    for (name, p) in &cases {
        g.bench_with_input(BenchmarkId::from_parameter(name), p, |b, p| {
            b.iter(|| {
                out.clear();
                let n = segment(black_box(p), &mut out).expect("segments");
                assert_eq!(n, PAYLOAD.div_ceil(usize::from(MSS)));
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
