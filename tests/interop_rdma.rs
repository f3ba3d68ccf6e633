//! Interop of the RDMA engine's packets: two `snic_rdma::Rnic`s exchange, in memory, a workload
//! that makes the engine send every opcode it has (SEND first/middle/last/only, with immediate,
//! with invalidate; WRITE first/middle/last/only, with immediate; READ request and responses
//! first/middle/last/only; CMP_SWAP, FETCH_ADD; ACK, atomic ACK; NAKs for a PSN sequence error
//! (one dropped packet), RNR (a SEND without a RECV) and a remote access error (a bad rkey on a
//! second QP); a CNP (one packet marked CE)), once over IPv4 and once over IPv6. Every packet
//! goes to a pcap (link type RAW: records start at the IP header), which two dissectors nobody
//! here wrote then read:
//! - scapy (`tests/interop_rdma.py`): every packet is IP/UDP 4791/BTH and its ICRC trailer is the
//!   one scapy's RoCE layer computes;
//! - tshark: no malformed packet, no expert error (IP and UDP checksums checked), every BTH
//!   decoded with the opcode scapy saw and an RC opcode name (Wireshark 4.0 has no name for the
//!   RoCEv2 CNP, opcode 0x81: it says "Unknown (129)" without an error, which is accepted for
//!   CNPs only).
//!
//! The workload also checks that the operations did what they should (CQE statuses, data moved),
//! so a packet mix that only looks right cannot pass.
//!
//! Missing python3/scapy or tshark: skipped with a message, a failure when `CI` is set.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use snic_rdma::testing::{End, EndOpts, advance_to_timer, connect_qp, ip};
use snic_rdma::{
    Access, Cqe, FLUSH_GLOBAL, FLUSH_PERSISTENT, FlushLevel, MrInfo, Mtu, QpAttr, RecvWr, Remote,
    SendWr, SgList, WcOpcode, WcStatus, WrOp,
};
use snic_time::Instant;
use snic_wire::roce::opcode as op;

const TEST: &str = "interop_rdma";

/// Bytes of each NIC's data buffer (one MR).
const BUF: u64 = 256 << 10;
/// A message that takes three packets at the path MTU (first, middle, last).
const LONG: u32 = 2 * 1024 + 500;
/// A message that takes one packet.
const SHORT: u32 = 100;

/// One NIC of the pair: the kit's `End` (PD, data buffer and MR, a CQ, a first QP), which it
/// derefs to, and every CQE polled so far.
struct Nic {
    end: End,
    cqes: Vec<Cqe>,
}

impl Deref for Nic {
    type Target = End;
    fn deref(&self) -> &End {
        &self.end
    }
}

impl DerefMut for Nic {
    fn deref_mut(&mut self) -> &mut End {
        &mut self.end
    }
}

impl Nic {
    fn new(v6: bool, host: u8, seed: u8) -> Nic {
        let opts = EndOpts {
            host_pool: 4 << 20,
            on_chip: 64 << 10,
            on_board: 1 << 20,
            buf_len: BUF,
            cq_depth: 256,
            recv_cq_depth: Some(256),
            max_send_wr: 64,
            max_recv_wr: 64,
            v6,
            ..EndOpts::default()
        };
        let mut end = End::new(host, &opts);
        let pattern: Vec<u8> =
            (0..BUF).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        end.nic.mem_mut().write(end.buf, &pattern).expect("fill buffer");
        Nic { end, cqes: Vec::new() }
    }

    fn read(&self, off: u64, len: usize) -> Vec<u8> {
        self.nic.mem().slice(self.buf + off, len).expect("read buffer").to_vec()
    }

    /// Another QP like the first.
    fn create_qp(&mut self) -> u32 {
        let init = self.init;
        self.nic.create_qp(init).expect("create qp")
    }

    fn poll(&mut self) {
        let polled = self.end.poll_all();
        self.cqes.extend(polled);
    }

    fn cqe(&self, wr_id: u64) -> Option<&Cqe> {
        self.cqes.iter().find(|c| c.wr_id == wr_id)
    }
}

/// Connect `qa` of `a` with `qb` of `b` (RESET -> INIT -> RTR -> RTS on both sides).
fn connect(a: &mut Nic, qa: u32, b: &mut Nic, qb: u32, psn_ab: u32, psn_ba: u32) {
    let attr = QpAttr {
        access: Access::ALL,
        path_mtu: Mtu::M1024,
        max_dest_rd_atomic: 16,
        // 10 us: the RNR phase does not wait long.
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..QpAttr::default()
    };
    connect_qp(&mut a.end.nic, qa, qb, b.ip, psn_ab, psn_ba, attr);
    connect_qp(&mut b.end.nic, qb, qa, a.ip, psn_ba, psn_ab, attr);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    AtoB,
    BtoA,
}

/// What to do with a packet in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Deliver,
    /// Lost on the link (it is still captured: it was sent).
    Drop,
}

/// The two NICs, a virtual clock and the capture.
struct Bed {
    a: Nic,
    b: Nic,
    now: Instant,
    capture: Vec<Vec<u8>>,
}

impl Bed {
    /// Move packets both ways (through `tamper`) and run timers until `done` holds and nothing
    /// is left to send.
    fn pump(
        &mut self,
        what: &str,
        mut tamper: impl FnMut(Dir, &mut Vec<u8>) -> Fate,
        done: impl Fn(&Bed) -> bool,
    ) {
        let mut buf = vec![0u8; snic_rdma::pkt::MAX_PACKET_LEN];
        for _ in 0..200_000 {
            let mut moved = false;
            for dir in [Dir::AtoB, Dir::BtoA] {
                let (src, dst) = match dir {
                    Dir::AtoB => (&mut self.a, &mut self.b),
                    Dir::BtoA => (&mut self.b, &mut self.a),
                };
                while let Some(n) = src.nic.poll_transmit(self.now, &mut buf) {
                    let mut p = buf[..n].to_vec();
                    let fate = tamper(dir, &mut p);
                    if fate == Fate::Deliver {
                        dst.nic.handle_packet(self.now, &p);
                    }
                    self.capture.push(p);
                    moved = true;
                }
            }
            self.a.poll();
            self.b.poll();
            if !moved && done(self) {
                return;
            }
            // Time moves on in small steps while packets flow (pacing), and jumps to the next
            // deadline when nothing does.
            self.now += Duration::from_nanos(200);
            if !moved {
                let nics = [&mut self.a.nic, &mut self.b.nic];
                let timer = advance_to_timer(nics, &mut self.now);
                assert!(timer, "{what}: stuck with no packet and no timer");
            }
        }
        panic!(
            "{what}: not done after 200000 rounds; A stats {:?}, B stats {:?}",
            self.a.nic.stats(),
            self.b.nic.stats()
        );
    }
}

/// Set ECN CE on an IPv4 or IPv6 packet (fixing the IPv4 header checksum; the ICRC masks it).
fn mark_ce(p: &mut [u8]) {
    if p[0] >> 4 == 4 {
        p[1] |= 0b11;
        let hl = usize::from(p[0] & 0x0f) * 4;
        p[10] = 0;
        p[11] = 0;
        let mut sum: u32 =
            p[..hl].chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    } else {
        // Traffic class is bits 4..12 of the first word: ECN is bits 4..6 of byte 1.
        p[1] |= 0b11 << 4;
    }
}

fn bth_opcode(p: &[u8]) -> u8 {
    let at = if p[0] >> 4 == 4 { usize::from(p[0] & 0x0f) * 4 } else { 40 } + 8;
    p[at]
}

/// Run the workload and return the captured packets.
fn workload(v6: bool) -> Vec<Vec<u8>> {
    let mut a = Nic::new(v6, 1, 1);
    let mut b = Nic::new(v6, 2, 101);
    let now = Instant::from_millis(1);
    let (qa, qb) = (a.qpn, b.qpn);
    // PSNs just before the 24-bit wrap, so the workload crosses it.
    connect(&mut a, qa, &mut b, qb, 0xff_fff0, 0x12_3456);
    let (qa2, qb2) = (a.create_qp(), b.create_qp());
    connect(&mut a, qa2, &mut b, qb2, 100, 200);

    // Two small MRs at B for the SENDs with invalidate to invalidate.
    let (pd, buf) = (b.pd, b.buf);
    let inv: Vec<MrInfo> = (0..2)
        .map(|i| b.nic.reg_mr(pd, buf + 200_000 + i * 64, 64, Access::ALL).expect("inv mr"))
        .collect();
    let mut bed = Bed { a, b, now, capture: Vec::new() };

    // --- Every operation, once long (3 packets) and once short (1 packet). ---
    // B's receive buffers: 8 KiB apart from offset 64 KiB.
    let recv_off = |i: u64| 65_536 + i * 8192;
    let recvs: Vec<RecvWr> =
        (0..8).map(|i| RecvWr { wr_id: 1000 + i, sgl: bed.b.sge(recv_off(i), 8192) }).collect();
    bed.b.nic.post_recv_batch(qb, &recvs, bed.now).expect("post recvs");
    let a_src = |i: u64| i * 4096; // A's sources, 4 KiB apart
    let w_dst = |i: u64| 160_000 + i * 4096; // B's WRITE targets
    let r_src = |i: u64| 180_000 + i * 4096; // B's READ sources
    let r_dst = |i: u64| 100_000 + i * 4096; // A's READ destinations
    let atomic_off = 220_000u64; // B's atomic word (8-aligned)
    let atomic_word = bed.b.buf + atomic_off;
    bed.b.nic.mem_mut().write_u64(atomic_word, 40).unwrap();
    let sz = |i: u64| if i.is_multiple_of(2) { LONG } else { SHORT };
    let mut wrs = Vec::new();
    let mut push = |op: WrOp, sgl: SgList| {
        let id = wrs.len() as u64 + 1;
        wrs.push(SendWr::new(id, op, sgl));
    };
    for i in 0..2u64 {
        let s = bed.a.sge(a_src(i), sz(i));
        push(WrOp::Send, s);
    }
    for i in 2..4u64 {
        let s = bed.a.sge(a_src(i), sz(i));
        push(WrOp::SendImm { imm: 0xabcd_0000 + i as u32 }, s);
    }
    for i in 4..6u64 {
        let s = bed.a.sge(a_src(i), sz(i));
        push(WrOp::SendInv { rkey: inv[i as usize - 4].rkey }, s);
    }
    for i in 6..8u64 {
        let s = bed.a.sge(a_src(i), sz(i));
        push(WrOp::Write { remote: bed.b.remote(w_dst(i - 6)) }, s);
    }
    for i in 8..10u64 {
        let s = bed.a.sge(a_src(i), sz(i));
        push(WrOp::WriteImm { remote: bed.b.remote(w_dst(i - 6)), imm: 0x1234_0000 + i as u32 }, s);
    }
    for i in 10..12u64 {
        let s = bed.a.sge(r_dst(i - 10), sz(i));
        push(WrOp::Read { remote: bed.b.remote(r_src(i - 10)) }, s);
    }
    let at1 = bed.a.sge(120_000, 8);
    push(WrOp::CmpSwap { remote: bed.b.remote(atomic_off), compare: 40, swap: 1000 }, at1);
    let at2 = bed.a.sge(120_008, 8);
    push(WrOp::FetchAdd { remote: bed.b.remote(atomic_off), add: 5 }, at2);
    // IBTA 1.5: an ATOMIC WRITE to the next word, a FLUSH of the WRITE targets.
    let aw = WrOp::AtomicWrite { remote: bed.b.remote(atomic_off + 8), value: ATOMIC_WRITE_VALUE };
    push(aw, SgList::empty());
    let placement = FLUSH_GLOBAL | FLUSH_PERSISTENT;
    let fl = WrOp::Flush {
        remote: bed.b.remote(w_dst(0)),
        len: 8192,
        level: FlushLevel::Range,
        placement,
    };
    push(fl, SgList::empty());
    let n_ops = wrs.len() as u64;
    bed.a.nic.post_send_batch(qa, &wrs, bed.now).expect("post sends");
    bed.pump(
        "every operation",
        |_, _| Fate::Deliver,
        |bed| {
            (1..=n_ops).all(|id| bed.a.cqe(id).is_some())
                && (1000..1008).all(|id| bed.b.cqe(id).is_some())
        },
    );
    for id in 1..=n_ops {
        assert_eq!(bed.a.cqe(id).unwrap().status, WcStatus::Success, "send WR {id}");
    }
    for i in 0..8u64 {
        let c = bed.b.cqe(1000 + i).unwrap();
        assert_eq!(c.status, WcStatus::Success, "recv {i}: {c:?}");
    }
    // RECVs are consumed in order: SEND x2, SEND_IMM x2, SEND_INV x2, WRITE_IMM x2.
    for (k, i) in [0u64, 1, 2, 3, 4, 5].into_iter().enumerate() {
        let c = bed.b.cqe(1000 + k as u64).unwrap();
        assert_eq!(c.byte_len, sz(i), "recv {k} length");
        assert_eq!(c.opcode, WcOpcode::Recv);
        let want_imm = (2..4).contains(&i).then_some(0xabcd_0000 + i as u32);
        assert_eq!(c.imm, want_imm, "recv {k} imm");
        let want_inv = (4..6).contains(&i).then(|| inv[i as usize - 4].rkey);
        assert_eq!(c.invalidated_rkey, want_inv, "recv {k} invalidated rkey");
        assert_eq!(
            bed.b.read(recv_off(k as u64), sz(i) as usize),
            bed.a.read(a_src(i), sz(i) as usize),
            "recv {k} data"
        );
    }
    for (k, i) in [8u64, 9].into_iter().enumerate() {
        let c = bed.b.cqe(1006 + k as u64).unwrap();
        assert_eq!(c.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(c.imm, Some(0x1234_0000 + i as u32));
    }
    for i in 6..10u64 {
        assert_eq!(
            bed.b.read(w_dst(i - 6), sz(i) as usize),
            bed.a.read(a_src(i), sz(i) as usize),
            "WRITE {i} data"
        );
    }
    for i in 10..12u64 {
        assert_eq!(
            bed.a.read(r_dst(i - 10), sz(i) as usize),
            bed.b.read(r_src(i - 10), sz(i) as usize),
            "READ {i} data"
        );
    }
    let word = |n: &Nic, off: u64| n.nic.mem().read_u64(n.buf + off).unwrap();
    assert_eq!(word(&bed.a, 120_000), 40, "CMP_SWAP returns the old value");
    assert_eq!(word(&bed.a, 120_008), 1000, "FETCH_ADD returns the swapped value");
    assert_eq!(word(&bed.b, atomic_off), 1005, "atomics applied once each");
    assert_eq!(word(&bed.b, atomic_off + 8), ATOMIC_WRITE_VALUE, "ATOMIC WRITE landed");
    let n = bed.b.nic.stats();
    assert_eq!((n.atomic_writes_executed, n.flushes_executed), (1, 1));

    // --- PSN sequence error: the first packet of a 3-packet WRITE is lost. ---
    let wr =
        SendWr::new(50, WrOp::Write { remote: bed.b.remote(w_dst(5)) }, bed.a.sge(a_src(12), LONG));
    bed.a.nic.post_send(qa, &wr, bed.now).unwrap();
    let mut dropped = false;
    bed.pump(
        "sequence NAK",
        |dir, p| {
            if !dropped && dir == Dir::AtoB && bth_opcode(p) == op::RC_RDMA_WRITE_FIRST {
                dropped = true;
                return Fate::Drop;
            }
            Fate::Deliver
        },
        |bed| bed.a.cqe(50).is_some(),
    );
    assert_eq!(bed.a.cqe(50).unwrap().status, WcStatus::Success);
    assert!(bed.b.nic.stats().seq_naks_sent >= 1, "{:?}", bed.b.nic.stats());
    assert_eq!(bed.b.read(w_dst(5), LONG as usize), bed.a.read(a_src(12), LONG as usize));

    // --- RNR: a SEND with no RECV posted, then the RECV. ---
    let wr = SendWr::new(60, WrOp::Send, bed.a.sge(a_src(13), SHORT));
    bed.a.nic.post_send(qa, &wr, bed.now).unwrap();
    bed.pump("RNR NAK", |_, _| Fate::Deliver, |bed| bed.a.nic.stats().rnr_naks_rcvd >= 1);
    let wr = RecvWr { wr_id: 1060, sgl: bed.b.sge(recv_off(7) + 4096, 4096) };
    bed.b.nic.post_recv(qb, &wr, bed.now).unwrap();
    bed.pump(
        "RNR retry",
        |_, _| Fate::Deliver,
        |bed| bed.a.cqe(60).is_some() && bed.b.cqe(1060).is_some(),
    );
    assert_eq!(bed.a.cqe(60).unwrap().status, WcStatus::Success);
    assert_eq!(bed.b.cqe(1060).unwrap().byte_len, SHORT);

    // --- ECN CE on one packet: B answers with a CNP. ---
    let wr = SendWr::new(
        70,
        WrOp::Write { remote: bed.b.remote(w_dst(6)) },
        bed.a.sge(a_src(14), SHORT),
    );
    bed.a.nic.post_send(qa, &wr, bed.now).unwrap();
    let mut marked = false;
    bed.pump(
        "CNP",
        |dir, p| {
            if !marked && dir == Dir::AtoB {
                marked = true;
                mark_ce(p);
            }
            Fate::Deliver
        },
        |bed| bed.a.cqe(70).is_some() && bed.a.nic.stats().cnps_rcvd >= 1,
    );
    assert_eq!(bed.a.cqe(70).unwrap().status, WcStatus::Success);
    assert!(bed.b.nic.stats().cnps_sent >= 1);

    // --- Remote access error: a WRITE with a bad rkey on the second QP. ---
    let bad = Remote { addr: bed.b.buf, rkey: bed.b.mr.rkey ^ 0x100 };
    let wr = SendWr::new(80, WrOp::Write { remote: bad }, bed.a.sge(0, SHORT));
    bed.a.nic.post_send(qa2, &wr, bed.now).unwrap();
    bed.pump("remote access NAK", |_, _| Fate::Deliver, |bed| bed.a.cqe(80).is_some());
    let c = bed.a.cqe(80).unwrap();
    assert_eq!((c.status, c.qpn), (WcStatus::RemAccessErr, qa2));
    assert!(bed.b.nic.stats().rem_access_naks_sent >= 1);
    let _ = qb2;

    bed.capture
}

/// Write packets that start at their IP header to a pcap of link type RAW.
fn write_raw_pcap(path: &Path, packets: &[Vec<u8>]) {
    use pcap_file::DataLink;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let file = std::fs::File::create(path).expect("create pcap");
    let header = PcapHeader { datalink: DataLink::RAW, ..PcapHeader::default() };
    let mut w = PcapWriter::with_header(file, header).expect("pcap writer");
    for (i, p) in packets.iter().enumerate() {
        let ts = Duration::from_micros(1_700_000_000_000_000 + i as u64);
        let len = u32::try_from(p.len()).expect("packet fits u32");
        w.write_packet(&PcapPacket::new(ts, len, p)).expect("write packet");
    }
}

/// Opcodes the workload must produce (CNP included).
const EXPECTED: &[u8] = &[
    op::RC_SEND_FIRST,
    op::RC_SEND_MIDDLE,
    op::RC_SEND_LAST,
    op::RC_SEND_LAST_WITH_IMMEDIATE,
    op::RC_SEND_ONLY,
    op::RC_SEND_ONLY_WITH_IMMEDIATE,
    op::RC_SEND_LAST_WITH_INVALIDATE,
    op::RC_SEND_ONLY_WITH_INVALIDATE,
    op::RC_RDMA_WRITE_FIRST,
    op::RC_RDMA_WRITE_MIDDLE,
    op::RC_RDMA_WRITE_LAST,
    op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    op::RC_RDMA_WRITE_ONLY,
    op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    op::RC_RDMA_READ_REQUEST,
    op::RC_RDMA_READ_RESPONSE_FIRST,
    op::RC_RDMA_READ_RESPONSE_MIDDLE,
    op::RC_RDMA_READ_RESPONSE_LAST,
    op::RC_RDMA_READ_RESPONSE_ONLY,
    op::RC_ACKNOWLEDGE,
    op::RC_ATOMIC_ACKNOWLEDGE,
    op::RC_COMPARE_SWAP,
    op::RC_FETCH_ADD,
    op::RC_FLUSH,
    op::RC_ATOMIC_WRITE,
    op::CNP,
];

/// The value of the workload's ATOMIC WRITE.
const ATOMIC_WRITE_VALUE: u64 = 0x0102_0304_0506_0708;

/// The IBTA 1.5 layouts, byte by byte (neither scapy 2.x nor Wireshark 4.0 decodes FLUSH and
/// ATOMIC WRITE): FLUSH is BTH, FETH (26 reserved bits, selectivity level in bits 5:4, placement
/// type in bits 3:0), RETH, no payload, ICRC; ATOMIC WRITE is BTH, RETH with DMA length 8, the
/// 8 bytes, ICRC. Returns how many of each it checked.
fn check_ibta15_layout(packets: &[Vec<u8>]) -> (usize, usize) {
    let (mut flushes, mut writes) = (0, 0);
    for p in packets {
        let at = if p[0] >> 4 == 4 { usize::from(p[0] & 0x0f) * 4 } else { 40 } + 8;
        let r = &p[at..];
        match r[0] {
            op::RC_FLUSH => {
                assert_eq!(r.len(), 12 + 4 + 16 + 4, "FLUSH length");
                assert_eq!(r[1] & 0x30, 0, "FLUSH has no pad");
                assert_eq!(&r[12..15], &[0, 0, 0], "FETH reserved bits");
                let (sel, plt) = (r[15] >> 4, r[15] & 0x0f);
                assert!(sel <= 1 && (1..=3).contains(&plt), "FETH {:#04x}", r[15]);
                assert_eq!(u32::from_be_bytes(r[28..32].try_into().unwrap()), 8192, "RETH len");
                flushes += 1;
            }
            op::RC_ATOMIC_WRITE => {
                assert_eq!(r.len(), 12 + 16 + 8 + 4, "ATOMIC WRITE length");
                assert_eq!(r[1] & 0x30, 0, "ATOMIC WRITE has no pad");
                assert_eq!(u32::from_be_bytes(r[24..28].try_into().unwrap()), 8, "RETH len");
                assert_eq!(u64::from_be_bytes(r[12..20].try_into().unwrap()) % 8, 0, "aligned");
                assert_eq!(&r[28..36], &ATOMIC_WRITE_VALUE.to_le_bytes(), "the 8 bytes");
                writes += 1;
            }
            _ => {}
        }
    }
    (flushes, writes)
}

/// scapy: every packet dissects as IP/UDP 4791/BTH with the ICRC scapy computes; returns the
/// per-packet opcodes scapy saw.
fn check_scapy(dir: &Path, pcap: &Path, n: usize) -> Vec<u8> {
    let json = dir.join("scapy.json");
    common::run_ok(
        Command::new("python3")
            .arg(common::root().join("tests/interop_rdma.py"))
            .arg(pcap)
            .arg(&json),
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("read json"))
        .expect("json parses");
    let packets = v["packets"].as_array().expect("packets");
    assert_eq!(packets.len(), n, "scapy read another number of packets");
    let mut problems = Vec::new();
    let mut opcodes = Vec::new();
    let mut syndromes = BTreeSet::new();
    for p in packets {
        for pr in p["problems"].as_array().expect("problems") {
            problems.push(format!("packet {}: {}", p["index"], pr.as_str().unwrap_or("?")));
        }
        if p["icrc_ok"] != Value::Bool(true) {
            problems.push(format!("packet {}: ICRC not confirmed by scapy", p["index"]));
        }
        opcodes.push(p["opcode"].as_u64().map_or(0xff, |o| o as u8));
        if let Some(s) = p["syndrome"].as_u64() {
            syndromes.insert((p["opcode"].as_u64().unwrap_or(0) as u8, s as u8));
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
    let counts: BTreeMap<u8, usize> = opcodes.iter().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(*o).or_default() += 1;
        m
    });
    let named: Vec<String> = counts.iter().map(|(o, n)| format!("{} x{n}", op::name(*o))).collect();
    eprintln!("{} packets: {}", opcodes.len(), named.join(", "));
    for o in EXPECTED {
        assert!(counts.contains_key(o), "no {} packet in the capture: {counts:?}", op::name(*o));
    }
    let acks: Vec<u8> =
        syndromes.iter().filter(|(o, _)| *o == op::RC_ACKNOWLEDGE).map(|(_, s)| *s).collect();
    assert!(acks.iter().any(|s| s >> 5 == 0), "no positive ACK: {acks:x?}");
    assert!(acks.contains(&0x60), "no PSN sequence error NAK: {acks:x?}");
    assert!(acks.iter().any(|s| s >> 5 == 1), "no RNR NAK: {acks:x?}");
    assert!(acks.contains(&0x62), "no remote access error NAK: {acks:x?}");
    opcodes
}

fn check_tshark(pcap: &Path, scapy_opcodes: &[u8]) {
    let mut base = vec![
        "-n".to_owned(),
        "-r".to_owned(),
        pcap.display().to_string(),
        "-o".to_owned(),
        "ip.check_checksum:TRUE".to_owned(),
        "-o".to_owned(),
        "udp.check_checksum:TRUE".to_owned(),
    ];
    for h in common::tshark_payload_heuristics() {
        base.push("--disable-protocol".to_owned());
        base.push(h);
    }
    let out = common::run_ok(Command::new("tshark").args(&base).args([
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "infiniband.bth.opcode",
        "-e",
        "_ws.malformed",
        "-e",
        "_ws.expert.severity",
        "-e",
        "_ws.expert.message",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), scapy_opcodes.len(), "tshark read another number of packets");
    // Expert severity "error" (PI_ERROR).
    const ERROR: u64 = 0x0080_0000;
    let mut problems = Vec::new();
    for (line, want) in lines.iter().zip(scapy_opcodes) {
        let f: Vec<&str> = line.split('|').collect();
        assert_eq!(f.len(), 5, "tshark line {line:?}");
        let opc = f[1].parse::<u8>().ok();
        if opc != Some(*want) {
            problems.push(format!("frame {}: tshark opcode {:?}, scapy {want}", f[0], f[1]));
        }
        if !f[2].is_empty() {
            problems.push(format!("frame {}: malformed: {}", f[0], f[2]));
        }
        let errors = f[3].split(',').filter_map(|s| s.parse::<u64>().ok()).any(|s| s >= ERROR);
        if errors {
            problems.push(format!("frame {}: expert error: {}", f[0], f[4]));
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));

    // Opcode names from the full decode: every RC packet has an RC name; only CNPs are unknown.
    let out = common::run_ok(Command::new("tshark").args(&base).arg("-V"));
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> =
        text.lines().filter_map(|l| l.trim_start().strip_prefix("Opcode: ")).collect();
    assert_eq!(names.len(), scapy_opcodes.len(), "one BTH opcode line per packet");
    for (name, o) in names.iter().zip(scapy_opcodes) {
        let ok = if *o == op::CNP {
            *name == "Unknown (129)" || name.contains("CNP") || name.contains("Congestion")
        } else if matches!(*o, op::RC_FLUSH | op::RC_ATOMIC_WRITE) {
            // IBTA 1.5 opcodes: Wireshark 4.0 has no name for them (checked byte by byte in
            // `check_ibta15_layout`); a later one names them as RC.
            *name == format!("Unknown ({o})") || name.starts_with("Reliable Connection (RC) - ")
        } else {
            name.starts_with("Reliable Connection (RC) - ") && name.ends_with(&format!("({o})"))
        };
        assert!(ok, "opcode {o:#x} ({}) decoded as {name:?}", op::name(*o));
    }
}

fn run(v6: bool) {
    let name = if v6 { "interop-rdma-v6" } else { "interop-rdma-v4" };
    let packets = workload(v6);
    assert!(packets.iter().all(|p| (p[0] >> 4 == 6) == v6), "IP version of the capture");
    let (flushes, writes) = check_ibta15_layout(&packets);
    assert!(flushes >= 1 && writes >= 1, "FLUSH {flushes}, ATOMIC WRITE {writes}");
    let scapy = common::have_scapy(TEST);
    let tshark = common::have_tshark(TEST);
    if !scapy && !tshark {
        return;
    }
    let dir = common::temp_dir(name);
    let pcap = dir.join("rdma.pcap");
    write_raw_pcap(&pcap, &packets);
    let opcodes = if scapy {
        check_scapy(&dir, &pcap, packets.len())
    } else {
        packets.iter().map(|p| bth_opcode(p)).collect()
    };
    if tshark {
        check_tshark(&pcap, &opcodes);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One packet of every opcode in `EXPECTED` (plus NAK syndromes, a CE mark) built with
/// `pkt::build` alone, without the requester and responder: checks the packet layer on its
/// own, and that the checks above would see what they look for.
fn built_packets(v6: bool) -> Vec<Vec<u8>> {
    use snic_rdma::pkt::{self, Path};
    use snic_wire::roce::ext::{
        AethRepr, AtomicAckEthRepr, AtomicEthRepr, IethRepr, ImmDtRepr, NakCode, RethRepr, Syndrome,
    };
    use snic_wire::roce::opcode::ExtHeader;
    use snic_wire::roce::{RoceRepr, bth};
    let path = Path {
        src: ip(v6, 1),
        dst: ip(v6, 2),
        sport: pkt::sport_for(0x11, 0x12),
        dport: snic_wire::roce::UDP_PORT,
        dscp: 26,
        ecn: pkt::ECN_ECT0,
    };
    let syndromes = [
        Syndrome::Ack { credits: 31 },
        Syndrome::Nak(NakCode::PsnSequenceError),
        Syndrome::RnrNak { timer: 1 },
        Syndrome::Nak(NakCode::RemoteAccessError),
    ];
    let mut jobs: Vec<(u8, Option<Syndrome>, u8)> =
        EXPECTED.iter().map(|&o| (o, None, pkt::ECN_ECT0)).collect();
    jobs.extend(syndromes.iter().map(|&s| (op::RC_ACKNOWLEDGE, Some(s), pkt::ECN_ECT0)));
    jobs.push((op::RC_RDMA_WRITE_ONLY, None, pkt::ECN_CE));
    let mut out = Vec::new();
    for (i, (code, syn, ecn)) in jobs.into_iter().enumerate() {
        let info = op::lookup(code).expect("opcode in the table");
        let has = |e: ExtHeader| info.ext.contains(&e);
        let mut r = RoceRepr::new(bth::Repr {
            opcode: code,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: bth::PKEY_DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: 0x12,
            ack_req: true,
            psn: (0xff_fffe + i as u32) & 0xff_ffff,
        });
        r.reth = has(ExtHeader::Reth).then_some(RethRepr {
            va: 0x10_0000_1000,
            rkey: 0x1234,
            dma_len: 3000,
        });
        r.aeth = has(ExtHeader::Aeth)
            .then_some(AethRepr { syndrome: syn.unwrap_or(Syndrome::Ack { credits: 31 }), msn: 7 });
        r.atomic_eth = has(ExtHeader::AtomicEth).then_some(AtomicEthRepr {
            va: 0x10_0000_2000,
            rkey: 0x1234,
            swap_add: 5,
            compare: 40,
        });
        r.atomic_ack_eth =
            has(ExtHeader::AtomicAckEth).then_some(AtomicAckEthRepr { orig_data: 40 });
        r.imm_dt = has(ExtHeader::ImmDt).then_some(ImmDtRepr { imm: 0xabcd });
        r.ieth = has(ExtHeader::Ieth).then_some(IethRepr { rkey: 0x4321 });
        r.feth = has(ExtHeader::Feth)
            .then_some(snic_wire::roce::ext::FethRepr { placement_type: 3, selectivity_level: 0 });
        if code == op::RC_ATOMIC_WRITE {
            r.reth = Some(RethRepr { va: 0x10_0000_2008, rkey: 0x1234, dma_len: 8 });
        }
        let len = info.fixed_payload_len().unwrap_or(1 + i * 37 % 1024);
        let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
        let p = Path { ecn, ..path };
        let n = pkt::build(&mut buf, &p, &r, len, |b: &mut [u8]| -> Result<(), ()> {
            for (k, x) in b.iter_mut().enumerate() {
                *x = (k as u8).wrapping_mul(31).wrapping_add(i as u8);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("build {}: {e:?}", op::name(code)));
        buf.truncate(n);
        out.push(buf);
    }
    out
}

fn run_built(v6: bool) {
    let packets = built_packets(v6);
    let scapy = common::have_scapy(TEST);
    let tshark = common::have_tshark(TEST);
    let dir = common::temp_dir(if v6 { "interop-rdma-built-v6" } else { "interop-rdma-built-v4" });
    let pcap = dir.join("built.pcap");
    write_raw_pcap(&pcap, &packets);
    let opcodes = if scapy {
        let o = check_scapy(&dir, &pcap, packets.len());
        // A negative control: scapy must flag a flipped payload bit.
        let mut bad = packets.clone();
        let last = bad.last_mut().unwrap();
        let at = last.len() - 6;
        last[at] ^= 0x10;
        let bad_pcap = dir.join("bad.pcap");
        write_raw_pcap(&bad_pcap, &bad);
        let json = dir.join("bad.json");
        common::run_ok(
            Command::new("python3")
                .arg(common::root().join("tests/interop_rdma.py"))
                .arg(&bad_pcap)
                .arg(&json),
        );
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let verdicts: Vec<&Value> =
            v["packets"].as_array().unwrap().iter().map(|p| &p["icrc_ok"]).collect();
        assert_eq!(verdicts.last(), Some(&&Value::Bool(false)), "scapy missed a bad ICRC");
        assert!(verdicts[..verdicts.len() - 1].iter().all(|v| **v == Value::Bool(true)));
        o
    } else {
        packets.iter().map(|p| bth_opcode(p)).collect()
    };
    if tshark {
        check_tshark(&pcap, &opcodes);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pkt_build_of_every_opcode_passes_scapy_and_tshark_ipv4() {
    run_built(false);
}

#[test]
fn pkt_build_of_every_opcode_passes_scapy_and_tshark_ipv6() {
    run_built(true);
}

#[test]
fn every_engine_opcode_passes_scapy_and_tshark_ipv4() {
    run(false);
}

#[test]
fn every_engine_opcode_passes_scapy_and_tshark_ipv6() {
    run(true);
}
