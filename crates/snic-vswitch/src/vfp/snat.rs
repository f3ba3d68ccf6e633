//! SNAT port allocation: a pool of the 65,536 ports of each (public address, protocol), kept as
//! a bitmap searched from just past the last port taken, and the binding of a connection to its
//! port.
//!
//! The walk ([`super::layer`]) picks a free port, or keeps a connection's port when it walks the
//! policy again; the port is taken when the connection opens and freed when it goes. This module
//! does not rewrite packets (the flows' transpositions do).

use core::fmt;
use core::net::IpAddr;

use super::SlowPath;
use super::conn::Conn;

/// An allocated SNAT port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct SnatBinding {
    pub(super) ip: IpAddr,
    pub(super) proto: u8,
    pub(super) port: u16,
}

/// A set of 65,536 ports of one (public address, protocol).
#[derive(Clone)]
pub(super) struct PortPool {
    bits: Box<[u64; 1024]>,
    cursor: u16,
    used: u32,
}

impl fmt::Debug for PortPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortPool").field("used", &self.used).finish()
    }
}

impl PortPool {
    fn new() -> PortPool {
        PortPool { bits: Box::new([0; 1024]), cursor: 0, used: 0 }
    }

    pub(super) fn is_used(&self, port: u16) -> bool {
        let p = usize::from(port);
        self.bits[p / 64] & (1 << (p % 64)) != 0
    }

    /// A free port in `lo..=hi`, searching from the cursor and wrapping.
    pub(super) fn peek(&self, lo: u16, hi: u16) -> Option<u16> {
        if lo > hi {
            return None;
        }
        let start = self.cursor.clamp(lo, hi);
        self.scan(start, hi).or_else(|| if start > lo { self.scan(lo, start - 1) } else { None })
    }

    /// The first free port in `from..=to`, skipping full words.
    fn scan(&self, from: u16, to: u16) -> Option<u16> {
        let mut p = u32::from(from);
        let to = u32::from(to);
        while p <= to {
            let w = self.bits[(p / 64) as usize];
            if w == u64::MAX {
                p = (p / 64 + 1) * 64;
                continue;
            }
            if w & (1 << (p % 64)) == 0 {
                return u16::try_from(p).ok();
            }
            p += 1;
        }
        None
    }

    /// Where the next search starts.
    pub(super) fn cursor(&self) -> u16 {
        self.cursor
    }

    /// Start the next search at `port` (a pool carried over from another process).
    pub(super) fn set_cursor(&mut self, port: u16) {
        self.cursor = port;
    }

    pub(super) fn mark(&mut self, port: u16) {
        if !self.is_used(port) {
            let p = usize::from(port);
            self.bits[p / 64] |= 1 << (p % 64);
            self.used += 1;
        }
        self.cursor = port.wrapping_add(1);
    }

    fn free(&mut self, port: u16) {
        if self.is_used(port) {
            let p = usize::from(port);
            self.bits[p / 64] &= !(1 << (p % 64));
            self.used -= 1;
        }
    }
}

/// No SNAT pool.
pub(super) const NO_POOL: u16 = u16::MAX;

impl SlowPath {
    /// The SNAT binding of a connection.
    pub(super) fn snat_of(&self, c: &Conn) -> Option<SnatBinding> {
        let ((ip, proto), _) = self.pools.get(usize::from(c.snat_pool))?;
        Some(SnatBinding { ip: *ip, proto: *proto, port: c.snat_port })
    }

    /// The pool of `(ip, proto)`, made on first use; `None` when there are too many pools.
    pub(super) fn pool_id(&mut self, ip: IpAddr, proto: u8) -> Option<u16> {
        if let Some(&id) = self.pool_ids.get(&(ip, proto)) {
            return Some(id);
        }
        let id = u16::try_from(self.pools.len()).ok().filter(|&i| i != NO_POOL)?;
        self.pools.push(((ip, proto), PortPool::new()));
        self.pool_ids.insert((ip, proto), id);
        Some(id)
    }

    pub(super) fn pool(&self, ip: IpAddr, proto: u8) -> Option<&PortPool> {
        let &id = self.pool_ids.get(&(ip, proto))?;
        self.pools.get(usize::from(id)).map(|(_, p)| p)
    }

    pub(super) fn free_snat(&mut self, b: SnatBinding) {
        if let Some(&id) = self.pool_ids.get(&(b.ip, b.proto))
            && let Some((_, pool)) = self.pools.get_mut(usize::from(id))
            && pool.is_used(b.port)
        {
            pool.free(b.port);
            self.snat_in_use -= 1;
        }
    }

    /// Move a connection's SNAT binding from `old` to `new`.
    pub(super) fn rebind_snat(&mut self, old: Option<SnatBinding>, new: Option<SnatBinding>) {
        if old == new {
            return;
        }
        if let Some(b) = old {
            self.free_snat(b);
        }
        if let Some(b) = new
            && let Some(id) = self.pool_id(b.ip, b.proto)
            && let Some((_, pool)) = self.pools.get_mut(usize::from(id))
        {
            if !pool.is_used(b.port) {
                self.snat_in_use += 1;
            }
            pool.mark(b.port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{Direction, FlowKey};
    use crate::transposition::Op;
    use crate::vfp::testutil::*;
    use crate::vfp::{DenyReason, Verdict};
    use proptest::prelude::*;
    use snic_time::Instant;
    use snic_wire::stack::Stack;

    #[test]
    fn snat_ports_are_unique_and_freed_on_close() {
        let mut sp = slow(snat_policy(1024, 1026));
        let mut keys = Vec::new();
        for i in 0..3u16 {
            let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 5000 + i, 53);
            let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
            let (fwd, rev) = forward(v);
            assert_eq!(
                fwd.action.transposition.ops(),
                &[
                    Op::SetEthSrc(UL_MAC),
                    Op::SetEthDst(GW_MAC),
                    Op::SetIpSrc(v4(198, 51, 100, 1)),
                    Op::SetL4Src(1024 + i),
                ]
            );
            let rev = rev.expect("snat is stateful");
            let reply = udp_frame(UL_MAC, GW_MAC, [8, 8, 8, 8], [198, 51, 100, 1], 53, 1024 + i);
            assert_eq!(rev.key, key_of(&reply, UL_PORT, Direction::In));
            assert_eq!(
                rev.action.transposition.ops(),
                &[Op::SetEthDst(A_MAC), Op::SetIpDst(IpAddr::from(A_IP)), Op::SetL4Dst(5000 + i)]
            );
            keys.push((k, rev.key));
        }
        assert_eq!(sp.stats().snat_in_use, 3);
        let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 6000, 53);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1),
            (DenyReason::SnatExhausted, false)
        );
        // The reverse entry of the second flow ages out: the connection goes, its port is free.
        let mut removals = Vec::new();
        sp.on_evicted(&keys[1].1, &mut removals);
        assert_eq!(removals, vec![keys[1].0]);
        let s = sp.stats();
        assert_eq!((s.snat_in_use, s.conns, s.closed), (2, 2, 1));
        let (_, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let (fwd, _) = forward(v);
        assert_eq!(fwd.action.transposition.ops().last(), Some(&Op::SetL4Src(1025)));
    }

    proptest! {
        /// The port pool hands out each free port of the range once, in any order of
        /// allocations and frees, and never a port outside the range.
        #[test]
        fn port_pool_matches_a_set(ops in proptest::collection::vec((any::<bool>(), 0u16..40), 1..300)) {
            let (lo, hi) = (1000u16, 1031u16);
            let mut pool = PortPool::new();
            let mut model = std::collections::BTreeSet::new();
            for (alloc, pick) in ops {
                if alloc {
                    match pool.peek(lo, hi) {
                        Some(p) => {
                            prop_assert!((lo..=hi).contains(&p));
                            prop_assert!(model.insert(p), "port {} handed out twice", p);
                            pool.mark(p);
                        }
                        None => prop_assert_eq!(model.len(), usize::from(hi - lo + 1)),
                    }
                } else {
                    let p = lo + pick;
                    pool.free(p);
                    model.remove(&p);
                }
                prop_assert_eq!(pool.used as usize, model.len());
            }
        }

        /// SNAT bindings of live connections are unique and counted, whatever the order of
        /// new flows and evictions.
        #[test]
        fn snat_bindings_stay_unique(ops in proptest::collection::vec((any::<bool>(), 0u16..24), 1..120)) {
            let mut sp = slow(snat_policy(3000, 3015));
            let mut live: std::collections::HashMap<u16, (FlowKey, FlowKey, u16)> = Default::default();
            for (open, sport) in ops {
                let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 7000 + sport, 53);
                let k = key_of(&f, A_PORT, Direction::Out);
                if open {
                    match sp.compile(Instant::ZERO, &f, &Stack::parse(&f), &k, 0) {
                        Verdict::Forward { forward, reverse: Some(rev) } => {
                            let port = rev.key.dst_port;
                            if let Some(old) = live.get(&sport) {
                                prop_assert_eq!(old.2, port, "a live flow keeps its port");
                            }
                            live.insert(sport, (forward.key, rev.key, port));
                        }
                        Verdict::Deny { reason, .. } => {
                            prop_assert_eq!(reason, DenyReason::SnatExhausted);
                            prop_assert_eq!(live.len(), 16);
                        }
                        v => prop_assert!(false, "unexpected {:?}", v),
                    }
                } else if let Some((fk, _, _)) = live.remove(&sport) {
                    let mut rem = Vec::new();
                    sp.on_evicted(&fk, &mut rem);
                    prop_assert_eq!(rem.len(), 1);
                }
                let ports: std::collections::HashSet<u16> = live.values().map(|v| v.2).collect();
                prop_assert_eq!(ports.len(), live.len());
                prop_assert_eq!(sp.stats().snat_in_use as usize, live.len());
                prop_assert_eq!(sp.stats().conns as usize, live.len());
            }
        }
    }
}
