//! Fuzz target `rdma_packets`: arbitrary packets into two connected `snic_rdma::Rnic`s.
//!
//! Setup (fresh for every input): NICs A and B, one RC QP each, connected (path MTU 256, so
//! messages take several packets). A is in RTS with outstanding WQEs of every kind (SEND, SEND
//! with immediate, SEND with invalidate, WRITE, WRITE with immediate, READ, CMP_SWAP,
//! FETCH_ADD), B has RECVs posted; nothing has been sent yet. B's rings live in on-chip device
//! memory, A's in host memory. Each NIC's data buffer is bigger than its MRs: the bytes around
//! and between the MRs, and a remote-read-only MR, are guard bytes nothing may ever change.
//!
//! Input, byte 0 (mode): bit 0 IPv6 instead of IPv4; bit 1 start the PSNs just before the
//! 24-bit wrap; bit 2 "raw": the rest of the input is one packet handed to both NICs as is,
//! then both are pumped. Otherwise the rest is records, by the low 2 bits of a control byte:
//! - `0`: raw packet: `len u8`, bytes; to A (bit 2 clear) or B.
//! - `1`: wrapped packet: `len u8`, bytes = the RoCE part without ICRC (BTH, extension headers,
//!   payload). It gets a valid IP header (from the target's peer to the target), UDP to 4791
//!   and a correct ICRC, so it passes the packet checks and reaches the requester / responder.
//!   To A (bit 2 clear) or B; bit 3 set keeps the BTH destination QP as given, clear sets it
//!   to the target's QP; bit 4 sets ECN CE.
//! - `2`: pump `1 + (ctl >> 2)` rounds: every packet each NIC sends goes to the other, 100 ns
//!   per round.
//! - `3`: time: advance by `(next byte + 1) << (ctl >> 2 & 15)` ns and run both NICs' timers;
//!   bit 6 also posts another RECV at B, bit 7 another WRITE at A.
//!
//! Checked, besides "never panics": after every step the guard bytes of both NICs are
//! unchanged.

#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use snic_dma::MemKind;
use snic_rdma::testing::{EndOpts, connect_qp};
use snic_rdma::{Access, MrInfo, Mtu, QpAttr, RecvWr, Remote, Rnic, SendWr, SgList, Sge, WrOp};
use snic_time::Instant;
use snic_wire::roce::icrc;

/// Each NIC's data buffer; the MRs cover parts of it.
const BUF: u64 = 16 << 10;
/// The read-write MR: `[MR_OFF, MR_OFF + MR_LEN)`.
const MR_OFF: u64 = 1024;
const MR_LEN: u64 = 8192;
/// A remote-read-only MR (no local write): nothing may write it either.
const RO_OFF: u64 = 10 << 10;
const RO_LEN: u64 = 1024;
/// A small MR for SEND with invalidate to invalidate.
const INV_OFF: u64 = 12 << 10;
const INV_LEN: u64 = 256;

struct Nic {
    rnic: Rnic,
    ip: IpAddr,
    qpn: u32,
    buf: u64,
    mr: MrInfo,
    ro: MrInfo,
    inv: MrInfo,
    /// The buffer as it was after setup.
    initial: Vec<u8>,
}

impl Nic {
    fn new(v6: bool, host: u8, rings: MemKind, seed: u8) -> Nic {
        let opts = EndOpts {
            host_pool: 256 << 10,
            on_chip: 64 << 10,
            on_board: 0,
            max_send_wr: 32,
            max_recv_wr: 32,
            placement: rings,
            v6,
            ..EndOpts::default()
        };
        let mut rnic = Rnic::new(opts.config(host)).expect("rnic");
        let pd = rnic.alloc_pd();
        let scq = rnic.create_cq(64);
        let rcq = rnic.create_cq(64);
        let buf = rnic.alloc_buf(MemKind::Host, BUF, 64).expect("buffer");
        let pattern: Vec<u8> = (0..BUF).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect();
        rnic.mem_mut().write(buf, &pattern).expect("fill");
        let mr = rnic.reg_mr(pd, buf + MR_OFF, MR_LEN, Access::ALL).expect("mr");
        let ro = rnic.reg_mr(pd, buf + RO_OFF, RO_LEN, Access::REMOTE_READ).expect("ro mr");
        let inv = rnic.reg_mr(pd, buf + INV_OFF, INV_LEN, Access::ALL).expect("inv mr");
        let qpn = rnic.create_qp(opts.qp_init(pd, scq, rcq)).expect("qp");
        Nic { ip: rnic.config().local_ip, rnic, qpn, buf, mr, ro, inv, initial: pattern }
    }

    fn sge(&self, off: u64, len: u32) -> SgList {
        SgList::one(Sge { addr: self.mr.addr + off, len, lkey: self.mr.lkey })
    }

    /// Every byte of the buffer outside the read-write MR and the invalidate MR is as it was.
    /// (Slice comparisons: a byte loop would spend the run in the coverage callbacks.)
    fn check_guards(&self) {
        let now = self.rnic.mem().slice(self.buf, BUF as usize).expect("buffer");
        let guards = [(0, MR_OFF), (MR_OFF + MR_LEN, INV_OFF), (INV_OFF + INV_LEN, BUF)];
        for (s, e) in guards.map(|(s, e)| (s as usize, e as usize)) {
            if now[s..e] != self.initial[s..e] {
                let i = (s..e).find(|&i| now[i] != self.initial[i]).unwrap_or(s);
                panic!("guard byte {i:#x} changed: {:#04x} -> {:#04x}", self.initial[i], now[i]);
            }
        }
    }
}

struct Bed {
    a: Nic,
    b: Nic,
    now: Instant,
    pkt: Vec<u8>,
    writes: u64,
}

impl Bed {
    fn new(mode: u8) -> Bed {
        let v6 = mode & 1 != 0;
        let (pab, pba) = if mode & 2 != 0 { (0xff_fffa, 0xff_fffc) } else { (0, 0) };
        let now = Instant::from_millis(1);
        let mut a = Nic::new(v6, 1, MemKind::Host, 0x11);
        let mut b = Nic::new(v6, 2, MemKind::OnChip, 0x77);
        let (qa, qb) = (a.qpn, b.qpn);
        let attr = QpAttr {
            access: Access::ALL,
            path_mtu: Mtu::M256,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            timeout: 8,
            retry_cnt: 3,
            rnr_retry: 3,
            max_rd_atomic: 4,
            ..QpAttr::default()
        };
        connect_qp(&mut a.rnic, qa, qb, b.ip, pab, pba, attr);
        connect_qp(&mut b.rnic, qb, qa, a.ip, pba, pab, attr);
        // RECVs at B (and one at A, for anything B might send).
        for i in 0..6u64 {
            let wr = RecvWr { wr_id: 100 + i, sgl: b.sge(i * 1024, 1024) };
            b.rnic.post_recv(qb, &wr, now).expect("recv");
        }
        let wr = RecvWr { wr_id: 200, sgl: a.sge(7 * 1024, 1024) };
        a.rnic.post_recv(qa, &wr, now).expect("recv");
        // One WQE of every kind at A, targets in B's MRs.
        let r = |off: u64| Remote { addr: b.mr.addr + off, rkey: b.mr.rkey };
        let ro = Remote { addr: b.ro.addr, rkey: b.ro.rkey };
        let wrs = [
            SendWr::new(1, WrOp::Send, a.sge(0, 600)),
            SendWr::new(2, WrOp::SendImm { imm: 7 }, a.sge(600, 40)),
            SendWr::new(3, WrOp::SendInv { rkey: b.inv.rkey }, a.sge(640, 300)),
            SendWr::new(4, WrOp::Write { remote: r(4096) }, a.sge(1000, 700)),
            SendWr::new(5, WrOp::WriteImm { remote: r(5000), imm: 9 }, a.sge(1700, 20)),
            SendWr::new(6, WrOp::Read { remote: r(6000) }, a.sge(2048, 600)),
            SendWr::new(7, WrOp::Read { remote: ro }, a.sge(2700, 300)),
            SendWr::new(8, WrOp::CmpSwap { remote: r(7000), compare: 0, swap: 5 }, a.sge(3072, 8)),
            SendWr::new(9, WrOp::FetchAdd { remote: r(7008), add: 3 }, a.sge(3080, 8)),
            SendWr::new(10, WrOp::Send, SgList::empty()),
        ];
        a.rnic.post_send_batch(qa, &wrs, now).expect("post");
        Bed { a, b, now, pkt: vec![0u8; snic_rdma::pkt::MAX_PACKET_LEN], writes: 0 }
    }

    fn check(&self) {
        self.a.check_guards();
        self.b.check_guards();
    }

    fn pump(&mut self, rounds: usize) {
        for _ in 0..rounds {
            for _ in 0..64 {
                let Some(n) = self.a.rnic.poll_transmit(self.now, &mut self.pkt) else { break };
                self.b.rnic.handle_packet(self.now, &self.pkt[..n]);
            }
            for _ in 0..64 {
                let Some(n) = self.b.rnic.poll_transmit(self.now, &mut self.pkt) else { break };
                self.a.rnic.handle_packet(self.now, &self.pkt[..n]);
            }
            self.now += core::time::Duration::from_nanos(100);
            self.a.rnic.handle_timeout(self.now);
            self.b.rnic.handle_timeout(self.now);
        }
    }

    /// `roce` (BTH onwards, without ICRC) behind IP/UDP from `to`'s peer, with a correct ICRC.
    fn wrap(&self, to_b: bool, keep_qpn: bool, ce: bool, roce: &[u8]) -> Option<Vec<u8>> {
        let (dst, src) = if to_b { (&self.b, &self.a) } else { (&self.a, &self.b) };
        let mut r = roce.to_vec();
        if !keep_qpn && r.len() >= 8 {
            r[5..8].copy_from_slice(&dst.qpn.to_be_bytes()[1..]);
        }
        r.extend_from_slice(&[0; 4]);
        let udp_len = u16::try_from(8 + r.len()).ok()?;
        let mut p = match (src.ip, dst.ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = vec![0u8; 20];
                h[0] = 0x45;
                h[1] = if ce { 3 } else { 2 };
                h[2..4].copy_from_slice(&(udp_len.checked_add(20)?).to_be_bytes());
                h[6] = 0x40;
                h[8] = 64;
                h[9] = 17;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                let mut sum: u32 =
                    h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
                while sum >> 16 != 0 {
                    sum = (sum & 0xffff) + (sum >> 16);
                }
                h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
                h
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut h = vec![0u8; 40];
                h[0] = 0x60;
                h[1] = if ce { 0x30 } else { 0x20 };
                h[4..6].copy_from_slice(&udp_len.to_be_bytes());
                h[6] = 17;
                h[7] = 64;
                h[8..24].copy_from_slice(&s.octets());
                h[24..40].copy_from_slice(&d.octets());
                h
            }
            _ => return None,
        };
        p.extend_from_slice(&0xc000u16.to_be_bytes());
        p.extend_from_slice(&4791u16.to_be_bytes());
        p.extend_from_slice(&udp_len.to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&r);
        icrc::fill(&mut p).ok()?;
        Some(p)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else { return };
    let mut bed = Bed::new(mode);
    if mode & 4 != 0 {
        let now = bed.now;
        bed.a.rnic.handle_packet(now, rest);
        bed.b.rnic.handle_packet(now, rest);
        bed.check();
        bed.pump(8);
        bed.check();
        return;
    }
    while let Some((&ctl, tail)) = rest.split_first() {
        rest = tail;
        match ctl & 3 {
            0 | 1 => {
                let Some((&len, tail)) = rest.split_first() else { break };
                let n = usize::from(len).min(tail.len());
                let (bytes, tail) = tail.split_at(n);
                rest = tail;
                let to_b = ctl & 4 != 0;
                let pkt = if ctl & 3 == 0 {
                    Some(bytes.to_vec())
                } else {
                    bed.wrap(to_b, ctl & 8 != 0, ctl & 16 != 0, bytes)
                };
                if let Some(p) = pkt {
                    let now = bed.now;
                    if to_b {
                        bed.b.rnic.handle_packet(now, &p);
                    } else {
                        bed.a.rnic.handle_packet(now, &p);
                    }
                }
            }
            2 => bed.pump(1 + usize::from(ctl >> 2)),
            _ => {
                let Some((&step, tail)) = rest.split_first() else { break };
                rest = tail;
                let ns = (u64::from(step) + 1) << u32::from((ctl >> 2) & 15);
                bed.now += core::time::Duration::from_nanos(ns);
                let now = bed.now;
                if ctl & 0x40 != 0 {
                    let wr = RecvWr { wr_id: 300, sgl: bed.b.sge(6 * 1024, 1024) };
                    let _ = bed.b.rnic.post_recv(bed.b.qpn, &wr, now);
                }
                if ctl & 0x80 != 0 {
                    bed.writes += 1;
                    let remote = Remote { addr: bed.b.mr.addr + 4096, rkey: bed.b.mr.rkey };
                    let wr =
                        SendWr::new(1000 + bed.writes, WrOp::Write { remote }, bed.a.sge(0, 300));
                    let _ = bed.a.rnic.post_send(bed.a.qpn, &wr, now);
                }
                bed.a.rnic.handle_timeout(now);
                bed.b.rnic.handle_timeout(now);
            }
        }
        bed.check();
    }
    bed.pump(4);
    bed.check();
});
