//! Two RC NICs back to back through the public API: one QP and one buffer each, connected to
//! each other, and a link between them that can lose, duplicate, reorder and corrupt packets.

use std::net::IpAddr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use snic_dma::MemKind;
use snic_rdma::pkt;
use snic_rdma::*;
use snic_time::Instant;

pub const BUF: u64 = 1 << 20;

pub struct Side {
    pub nic: Rnic,
    pub qpn: u32,
    pub cq: CqId,
    pub buf: u64,
    pub mr: MrInfo,
    pub ip: IpAddr,
}

pub fn side(host: u8) -> Side {
    let ip: IpAddr = format!("10.0.0.{host}").parse().unwrap();
    let cfg = RnicConfig {
        local_ip: ip,
        host_pool: 4 << 20,
        on_chip: 0,
        on_board: 0,
        ..RnicConfig::default()
    };
    let mut nic = Rnic::new(cfg).unwrap();
    let pd = nic.alloc_pd();
    let buf = nic.alloc_buf(MemKind::Host, BUF, 64).unwrap();
    let mr = nic.reg_mr(pd, buf, BUF, Access::ALL).unwrap();
    let cq = nic.create_cq(4096);
    let qpn = nic
        .create_qp(QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 1024,
            placement: MemKind::Host,
            sq_sig_all: false,
        })
        .unwrap();
    Side { nic, qpn, cq, buf, mr, ip }
}

pub fn connect(e: &mut Side, peer: (u32, IpAddr), sq_psn: u32, rq_psn: u32, mut attr: QpAttr) {
    attr.access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    attr.dest_qpn = peer.0;
    attr.remote = Some(peer.1);
    attr.sq_psn = sq_psn;
    attr.rq_psn = rq_psn;
    e.nic.connect_rc(e.qpn, &attr, Instant::ZERO).unwrap();
}

pub fn pair(sq_psn: u32, attr: QpAttr) -> (Side, Side) {
    let (mut a, mut b) = (side(1), side(2));
    let (pa, pb) = ((a.qpn, a.ip), (b.qpn, b.ip));
    connect(&mut a, pb, sq_psn, 0x100, attr);
    connect(&mut b, pa, 0x100, sq_psn, attr);
    (a, b)
}

pub fn sge(s: &Side, off: u64, len: u32) -> SgList {
    SgList::one(Sge { addr: s.buf + off, len, lkey: s.mr.lkey })
}

pub fn remote(s: &Side, off: u64) -> Remote {
    Remote { addr: s.buf + off, rkey: s.mr.rkey }
}

pub fn poll_all(s: &mut Side) -> Vec<Cqe> {
    let mut out = Vec::new();
    let mut v = [Cqe {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        qpn: 0,
        src_qp: 0,
        imm: None,
        invalidated_rkey: None,
    }; 64];
    loop {
        let n = s.nic.poll_cq(s.cq, &mut v).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&v[..n]);
    }
}

/// A lossy, duplicating, reordering, corrupting link between two NICs.
pub struct Net {
    pub rng: ChaCha8Rng,
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    pub corrupt: f64,
    pub now: Instant,
}

impl Net {
    /// Move packets both ways until `done` or the engines go quiet with no timer. Returns
    /// whether `done` became true.
    pub fn run(
        &mut self,
        a: &mut Side,
        b: &mut Side,
        mut done: impl FnMut(&mut Side, &mut Side) -> bool,
    ) -> bool {
        let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
        for _ in 0..2_000_000 {
            if done(a, b) {
                return true;
            }
            let mut moved = false;
            for dir in 0..2 {
                let (src, dst) = if dir == 0 { (&mut *a, &mut *b) } else { (&mut *b, &mut *a) };
                let mut batch: Vec<Vec<u8>> = Vec::new();
                for _ in 0..32 {
                    let Some(n) = src.nic.poll_transmit(self.now, &mut buf) else { break };
                    batch.push(buf[..n].to_vec());
                }
                moved |= !batch.is_empty();
                if batch.len() > 1 && self.rng.gen_bool(self.reorder) {
                    let i = self.rng.gen_range(0..batch.len());
                    let j = self.rng.gen_range(0..batch.len());
                    batch.swap(i, j);
                }
                for mut p in batch {
                    if self.rng.gen_bool(self.loss) {
                        continue;
                    }
                    if self.rng.gen_bool(self.corrupt) {
                        let k = self.rng.gen_range(0..p.len());
                        p[k] ^= 0x40;
                    }
                    dst.nic.handle_packet(self.now, &p);
                    if self.rng.gen_bool(self.dup) {
                        dst.nic.handle_packet(self.now, &p);
                    }
                }
            }
            self.now += core::time::Duration::from_micros(1);
            if !moved {
                let t = [a.nic.poll_timeout(), b.nic.poll_timeout()].into_iter().flatten().min();
                match t {
                    Some(t) => {
                        if t > self.now {
                            self.now = t;
                        }
                        a.nic.handle_timeout(self.now);
                        b.nic.handle_timeout(self.now);
                    }
                    None => return done(a, b),
                }
            }
        }
        false
    }
}
