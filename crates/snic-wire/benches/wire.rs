//! Micro-benchmarks of the `snic-wire` fast paths: the Internet checksum, the whole-frame walk
//! (`stack::parse`) and the RoCEv2 ICRC.
//!
//! - `checksum/{64,1500}`: `checksum::data` over 64 and 1500 bytes (throughput in bytes).
//! - `parse/{udp64,vxlan_tcp,roce_write1024}`: `stack::parse` on a 64-byte Ethernet/IPv4/UDP
//!   frame, a VXLAN-in-UDP frame carrying Ethernet/IPv4/TCP, and a RoCEv2 RC RDMA WRITE ONLY
//!   (BTH + RETH, 1024-byte payload, valid ICRC) (throughput in frames).
//! - `icrc_compute/{64,1024,4096}` and `icrc_verify/{64,1024,4096}`: `roce::icrc::compute` and
//!   `roce::icrc::verify` on RDMA WRITE ONLY packets with those payload sizes (throughput in the
//!   bytes from the IP header through the ICRC, what the functions read).
//!
//! Every frame is built with the crate's own `Repr::emit` APIs and checked once (it parses whole,
//! its checksums and ICRC verify) before anything is timed, so a broken builder cannot produce
//! flattering numbers.
//!
//! Run: `cargo bench -p snic-wire --bench wire -- --warm-up-time 1 --measurement-time 3`

use core::net::{IpAddr, Ipv4Addr};
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snic_wire::ethernet::{self, EtherType, EthernetAddress};
use snic_wire::ipv4::{self, IpProtocol};
use snic_wire::roce::{self, bth, ext, icrc, opcode};
use snic_wire::stack::{self, Layer};
use snic_wire::tcp::{self, Flags, SackBlocks};
use snic_wire::{checksum, udp, vxlan};

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0b]);
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const VTEP_A: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 1);
const VTEP_B: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 2);

/// Ethernet + IPv4 (no options) around an L4 message of `l4_len` bytes; `fill_l4` writes the L4
/// header and payload into its slice. The IPv4 header checksum is filled after.
fn eth_ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: IpProtocol,
    l4_len: usize,
    fill_l4: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let ip = ipv4::Repr::new(src, dst, proto, l4_len);
    let ip_off = ethernet::HEADER_LEN;
    let l4_off = ip_off + ip.header_len();
    let mut buf = vec![0u8; l4_off + l4_len];
    ethernet::Repr { src_addr: MAC_A, dst_addr: MAC_B, ethertype: EtherType::IPV4 }
        .emit(&mut ethernet::Frame::new_unchecked(&mut buf[..]));
    let mut p = ipv4::Packet::new_unchecked(&mut buf[ip_off..]);
    ip.emit(&mut p);
    p.fill_checksum();
    fill_l4(&mut buf[l4_off..]);
    buf
}

/// Ethernet/IPv4/UDP with `body_len` bytes of UDP payload written by `fill_body`. The UDP
/// checksum is filled when `csum` (RoCEv2 senders leave it zero, as rxe does).
fn eth_ipv4_udp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ports: (u16, u16),
    body_len: usize,
    csum: bool,
    fill_body: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let u = udp::Repr { src_port: ports.0, dst_port: ports.1, payload_len: body_len };
    eth_ipv4(src, dst, IpProtocol::UDP, u.buffer_len(), |l4| {
        let mut p = udp::Packet::new_unchecked(l4);
        u.emit(&mut p);
        fill_body(p.payload_mut());
        if csum {
            p.fill_checksum(&IpAddr::V4(src), &IpAddr::V4(dst));
        }
    })
}

/// (a) The 64-byte Ethernet/IPv4/UDP frame: 14 + 20 + 8 + 22 bytes of payload, no FCS.
fn udp64() -> Vec<u8> {
    let body = 64 - ethernet::HEADER_LEN - ipv4::HEADER_LEN - udp::HEADER_LEN;
    eth_ipv4_udp(IP_A, IP_B, (40000, 9000), body, true, |b| b.fill(0xab))
}

/// An Ethernet/IPv4/TCP frame (ACK|PSH with a timestamps option, 32-byte header) carrying
/// `payload`.
fn tcp_frame(payload: &[u8]) -> Vec<u8> {
    let t = tcp::Repr {
        src_port: 40000,
        dst_port: 443,
        seq_number: 0x1000_0000,
        ack_number: 0x2000_0000,
        flags: Flags::ACK | Flags::PSH,
        window_len: 502,
        urgent_at: 0,
        max_seg_size: None,
        window_scale: None,
        sack_permitted: false,
        timestamps: Some((0x0102_0304, 0x0506_0708)),
        sack_ranges: SackBlocks::EMPTY,
        payload_len: payload.len(),
    };
    eth_ipv4(IP_A, IP_B, IpProtocol::TCP, t.buffer_len(), |l4| {
        let mut p = tcp::Packet::new_unchecked(l4);
        t.emit(&mut p);
        p.payload_mut().copy_from_slice(payload);
        p.fill_checksum(&IpAddr::V4(IP_A), &IpAddr::V4(IP_B));
    })
}

/// (b) Outer Ethernet/IPv4/UDP(4789)/VXLAN(VNI 0x1234) around an inner Ethernet/IPv4/TCP frame
/// with 64 bytes of TCP payload (outer UDP checksum zero, as VTEPs usually send it).
fn vxlan_tcp() -> Vec<u8> {
    let inner = tcp_frame(&[0x5a; 64]);
    let v = vxlan::Repr { vni: 0x1234 };
    eth_ipv4_udp(
        VTEP_A,
        VTEP_B,
        (49152, vxlan::UDP_PORT),
        v.buffer_len() + inner.len(),
        false,
        |b| {
            let (h, rest) = b.split_at_mut(vxlan::HEADER_LEN);
            v.emit(&mut vxlan::Packet::new_unchecked(h)).expect("VXLAN header");
            rest.copy_from_slice(&inner);
        },
    )
}

/// (c) and the ICRC inputs: Ethernet/IPv4/UDP(4791)/BTH(RC RDMA WRITE ONLY)/RETH/payload/ICRC,
/// payload `payload_len` bytes (padded to 4 as the BTH pad count says), ICRC filled.
fn roce_write(payload_len: usize) -> Vec<u8> {
    let pad = (4 - payload_len % 4) % 4;
    let b = bth::Repr {
        opcode: opcode::RC_RDMA_WRITE_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: u8::try_from(pad).expect("pad < 4"),
        pkey: bth::PKEY_DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: 0x12,
        ack_req: true,
        psn: 0x64,
    };
    let reth = ext::RethRepr {
        va: 0x7f00_0000_1000,
        rkey: 0x1234,
        dma_len: u32::try_from(payload_len).expect("payload fits u32"),
    };
    let hdrs = b.buffer_len() + reth.buffer_len();
    let body_len = hdrs + payload_len + pad + roce::ICRC_LEN;
    let mut f = eth_ipv4_udp(IP_A, IP_B, (49152, roce::UDP_PORT), body_len, false, |body| {
        let (h, rest) = body.split_at_mut(bth::HEADER_LEN);
        b.emit(&mut bth::Header::new_unchecked(h)).expect("BTH");
        let (r, rest) = rest.split_at_mut(ext::RETH_LEN);
        reth.emit(&mut ext::Reth::new_unchecked(r)).expect("RETH");
        for (i, byte) in rest[..payload_len].iter_mut().enumerate() {
            *byte = i as u8;
        }
    });
    icrc::fill(&mut f[ethernet::HEADER_LEN..]).expect("ICRC fill");
    f
}

/// Fail loudly, before timing, if a frame does not parse whole into the expected layers.
fn check_parses(name: &str, frame: &[u8], want: &[Layer]) {
    let s = stack::parse(frame);
    assert!(s.is_ok(), "{name}: {:?}", s.error());
    let got: Vec<Layer> = s.layers().iter().map(|l| l.layer).collect();
    assert_eq!(got, want, "{name}: layers");
}

fn bench_checksum(c: &mut Criterion) {
    let mut g = c.benchmark_group("checksum");
    for len in [64usize, 1500] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::from_parameter(len), &data, |b, d| {
            b.iter(|| checksum::data(black_box(&d[..])))
        });
    }
    g.finish();
}

fn bench_parse(c: &mut Criterion) {
    use Layer::*;
    let udp = udp64();
    assert_eq!(udp.len(), 64);
    check_parses("udp64", &udp, &[Eth, Ipv4, Udp]);
    let vx = vxlan_tcp();
    check_parses("vxlan_tcp", &vx, &[Eth, Ipv4, Udp, Vxlan, Eth, Ipv4, Tcp]);
    let rw = roce_write(1024);
    check_parses("roce_write1024", &rw, &[Eth, Ipv4, Udp, Bth, Reth]);
    assert_eq!(stack::parse(&rw).verify_icrc(&rw), Some(Ok(())), "roce_write1024: ICRC");

    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    for (name, frame) in [("udp64", &udp), ("vxlan_tcp", &vx), ("roce_write1024", &rw)] {
        g.bench_with_input(BenchmarkId::from_parameter(name), frame, |b, f| {
            b.iter(|| stack::parse(black_box(&f[..])))
        });
    }
    g.finish();
}

fn bench_icrc(c: &mut Criterion) {
    let sizes = [64usize, 1024, 4096];
    let frames: Vec<(usize, Vec<u8>)> = sizes.iter().map(|&n| (n, roce_write(n))).collect();
    for (n, f) in &frames {
        check_parses(
            "roce_write",
            f,
            &[Layer::Eth, Layer::Ipv4, Layer::Udp, Layer::Bth, Layer::Reth],
        );
        let ip = &f[ethernet::HEADER_LEN..];
        assert_eq!(icrc::verify(ip), Ok(()), "payload {n}: ICRC");
        // The control: one flipped payload bit must fail verification.
        let mut bad = f.clone();
        bad[f.len() - roce::ICRC_LEN - 1] ^= 1;
        assert!(icrc::verify(&bad[ethernet::HEADER_LEN..]).is_err(), "payload {n}: control");
    }

    for (group, verify) in [("icrc_compute", false), ("icrc_verify", true)] {
        let mut g = c.benchmark_group(group);
        for (n, f) in &frames {
            // compute/verify read the IP header through the ICRC.
            let ip = &f[ethernet::HEADER_LEN..];
            g.throughput(Throughput::Bytes(ip.len() as u64));
            g.bench_with_input(BenchmarkId::from_parameter(n), ip, |b, ip| {
                if verify {
                    b.iter(|| icrc::verify(black_box(ip)))
                } else {
                    b.iter(|| icrc::compute(black_box(ip)))
                }
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench_checksum, bench_parse, bench_icrc);
criterion_main!(benches);
