//! Test frames built byte by byte: Ethernet/IPv4/UDP, TCP, VXLAN, RoCEv2 RDMA WRITE with a real
//! ICRC. Shared by the pipeline's tests and benches and by other crates' tests.

use crate::Batch;
use core::net::{IpAddr, Ipv4Addr};
use snic_wire::checksum;

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
pub const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// Fills `batch` from fuzz input laid out as frames, each a little-endian u16 length and that
/// many bytes, until the input ends, a length runs past it, or the batch is full. Returns the
/// frames pushed, in order, for the target to compare its output with.
pub fn push_length_prefixed(batch: &mut Batch, mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    while data.len() >= 2 && !batch.is_full() {
        let n = usize::from(u16::from_le_bytes([data[0], data[1]]));
        let Some(f) = data.get(2..2 + n) else { break };
        batch.push_frame(f);
        frames.push(f.to_vec());
        data = &data[2 + n..];
    }
    frames
}

pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + payload.len()).unwrap();
    let mut h = vec![0x45, 0x00];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = !checksum::data(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn l4_checksum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, msg: &mut [u8], at: usize) {
    let c = checksum::upper_layer(&IpAddr::V4(src), &IpAddr::V4(dst), proto, msg);
    msg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// An IPv4/UDP datagram (with UDP checksum unless `zero_csum`).
pub fn ipv4_udp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sp: u16,
    dp: u16,
    payload: &[u8],
    zero_csum: bool,
) -> Vec<u8> {
    let len = u16::try_from(8 + payload.len()).unwrap();
    let mut u = Vec::new();
    u.extend_from_slice(&sp.to_be_bytes());
    u.extend_from_slice(&dp.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    if !zero_csum {
        l4_checksum(src, dst, 17, &mut u, 6);
    }
    ipv4(src, dst, 17, &u)
}

/// An IPv4/TCP segment (ACK|PSH, 20-byte header, correct checksum).
pub fn ipv4_tcp(src: Ipv4Addr, dst: Ipv4Addr, sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sp.to_be_bytes());
    t.extend_from_slice(&dp.to_be_bytes());
    t.extend_from_slice(&1000u32.to_be_bytes());
    t.extend_from_slice(&2000u32.to_be_bytes());
    t.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    l4_checksum(src, dst, 6, &mut t, 16);
    ipv4(src, dst, 6, &t)
}

/// 64-byte Ethernet/IPv4/UDP frame (14 + 20 + 8 + 22 bytes of payload), without FCS.
pub fn udp64(sp: u16, dp: u16) -> Vec<u8> {
    eth(MAC_B, MAC_A, 0x0800, &ipv4_udp(IP_A, IP_B, sp, dp, &[0xab; 22], false))
}

/// Ethernet/IPv4/TCP frame.
pub fn tcp_frame(sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    eth(MAC_B, MAC_A, 0x0800, &ipv4_tcp(IP_A, IP_B, sp, dp, payload))
}

/// Outer Ethernet/IPv4/UDP(4789)/VXLAN(vni) around `inner` (an Ethernet frame).
pub fn vxlan(vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut v = vec![0x08, 0, 0, 0];
    v.extend_from_slice(&(vni << 8).to_be_bytes());
    v.extend_from_slice(inner);
    let outer_ip = ipv4_udp(
        Ipv4Addr::new(192, 168, 0, 1),
        Ipv4Addr::new(192, 168, 0, 2),
        49152,
        4789,
        &v,
        true,
    );
    eth(MAC_B, MAC_A, 0x0800, &outer_ip)
}

/// Parameters of a RoCEv2 RDMA WRITE ONLY.
#[derive(Debug, Clone, Copy)]
pub struct Write {
    pub udp_src: u16,
    pub dest_qp: u32,
    pub psn: u32,
    pub va: u64,
    pub rkey: u32,
    pub payload_len: usize,
    pub solicited: bool,
    pub ack_req: bool,
}

impl Default for Write {
    fn default() -> Self {
        Write {
            udp_src: 0xc000,
            dest_qp: 0x11,
            psn: 0x123456,
            va: 0x1000_2000_3000,
            rkey: 0xcafe_babe,
            payload_len: 64,
            solicited: true,
            ack_req: true,
        }
    }
}

/// Ethernet/IPv4/UDP(4791)/BTH(RDMA WRITE ONLY)/RETH/payload/ICRC, ICRC correct unless
/// `corrupt_icrc`.
pub fn roce_write(w: Write, corrupt_icrc: bool) -> Vec<u8> {
    let mut bth = vec![0x0a]; // RC RDMA WRITE ONLY
    bth.push(if w.solicited { 0x80 } else { 0 });
    bth.extend_from_slice(&0xffffu16.to_be_bytes());
    bth.push(0);
    bth.extend_from_slice(&w.dest_qp.to_be_bytes()[1..]);
    bth.push(if w.ack_req { 0x80 } else { 0 });
    bth.extend_from_slice(&w.psn.to_be_bytes()[1..]);
    // RETH
    bth.extend_from_slice(&w.va.to_be_bytes());
    bth.extend_from_slice(&w.rkey.to_be_bytes());
    bth.extend_from_slice(&u32::try_from(w.payload_len).unwrap().to_be_bytes());
    bth.extend((0..w.payload_len).map(|i| i as u8));
    bth.extend_from_slice(&[0; 4]); // ICRC
    let mut ip = ipv4_udp(IP_A, IP_B, w.udp_src, 4791, &bth, true);
    snic_wire::roce::icrc::fill(&mut ip).unwrap();
    if corrupt_icrc {
        let n = ip.len();
        ip[n - 1] ^= 0x55;
    }
    eth(MAC_B, MAC_A, 0x0800, &ip)
}
