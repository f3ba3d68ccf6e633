//! Two RC NICs back to back through the public API: one QP and one buffer each, connected to
//! each other, and a link between them that can lose, duplicate, reorder and corrupt packets.

#![allow(dead_code, reason = "each test binary uses a part of the shared kit")]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_rdma::testing::{End, EndOpts, Pair, advance_to_timer};
use snic_rdma::*;
use snic_time::Instant;

/// A connected to B, built and connected with `attr` (its access is set here); A sends from
/// `sq_psn`, B from 0x100.
pub fn pair(sq_psn: u32, mut attr: QpAttr) -> (End, End) {
    attr.access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let opts = EndOpts {
        host_pool: 4 << 20,
        buf_len: 1 << 20,
        cq_depth: 4096,
        max_send_wr: 64,
        max_recv_wr: 1024,
        ..EndOpts::default()
    };
    let p = Pair::new(&opts, attr, [sq_psn, 0x100]);
    (p.a, p.b)
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

/// QP attributes for tests that lose or corrupt packets on purpose: 1 KiB path MTU, a short
/// timeout, seven retries, four outstanding READs or atomics each way.
pub fn retrying_attr() -> QpAttr {
    QpAttr {
        path_mtu: Mtu::M1024,
        timeout: 8,
        retry_cnt: 7,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..QpAttr::default()
    }
}

impl Net {
    /// A link that delivers every packet once and in order, its clock at `now`.
    pub fn clean(now: Instant) -> Net {
        Net {
            rng: ChaCha8Rng::seed_from_u64(1),
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            now,
        }
    }

    /// Move packets both ways until `done` or the engines go quiet with no timer. Returns
    /// whether `done` became true.
    pub fn run(
        &mut self,
        a: &mut End,
        b: &mut End,
        mut done: impl FnMut(&mut End, &mut End) -> bool,
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
            if !moved && !advance_to_timer([&mut a.nic, &mut b.nic], &mut self.now) {
                return done(a, b);
            }
        }
        false
    }
}
