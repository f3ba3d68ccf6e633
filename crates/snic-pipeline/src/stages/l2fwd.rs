//! `l2fwd`: layer-2 forwarding, by a static port map or by MAC learning.
//!
//! - **Static** (`l2fwd`, `l2fwd:0=1,1=0`): each ingress port has a fixed egress port. The default
//!   map with two ports is 0 <-> 1. A packet from a port with no entry is left without egress (the
//!   pipeline then drops it as `no_egress`).
//! - **Learning** (`l2fwd:learn`): the source MAC of every packet is learned against its ingress
//!   port in a bounded table (fixed capacity, entries older than the age limit are expired by
//!   `now`). A unicast destination that was learned is forwarded to its port; an unknown,
//!   broadcast or multicast destination is flooded.
//!
//! **Flood** is modelled as the reserved egress [`PortId::FLOOD`]: the I/O layer sends such a
//! packet out of every port except `meta.ingress` (copying it per port). One output decision per
//! packet keeps the batch size fixed and the stage allocation-free.
//!
//! A packet is never sent back out of its ingress port: that is a drop, `loop_prevented`. A frame
//! shorter than an Ethernet header is a drop, `malformed.truncated`.

use crate::drop::DropReason;
use crate::meta::PortId;
use crate::stage::{Stage, StageCtx};
use crate::trace::TraceWhat;
use crate::{Batch, PacketBuf};
use core::time::Duration;
use hashbrown::HashMap;
use snic_time::Instant;
use snic_wire::Error as WireError;

/// A MAC address.
pub type Mac = [u8; 6];

/// One learned MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Learned {
    port: PortId,
    seen: Instant,
}

/// A bounded MAC-address table: MAC -> port, with ageing.
#[derive(Debug, Clone)]
pub struct MacTable {
    map: HashMap<Mac, Learned>,
    capacity: usize,
    max_age: Duration,
    last_sweep: Instant,
}

impl MacTable {
    /// A table of at most `capacity` entries, each expiring `max_age` after it was last seen.
    /// All memory is reserved here, none later.
    pub fn new(capacity: usize, max_age: Duration) -> Self {
        let capacity = capacity.max(1);
        MacTable {
            map: HashMap::with_capacity(capacity),
            capacity,
            max_age,
            last_sweep: Instant::ZERO,
        }
    }

    /// Entries in the table (including expired ones not yet swept).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The port `mac` was learned on, unless it is unknown or expired at `now`.
    pub fn lookup(&self, now: Instant, mac: &Mac) -> Option<PortId> {
        self.map
            .get(mac)
            .filter(|e| now.saturating_duration_since(e.seen) < self.max_age)
            .map(|e| e.port)
    }

    /// Learn (or refresh) `mac` on `port`. Returns `false` when the table is full of live
    /// entries and `mac` is new (the entry is not learned; the packet is still forwarded).
    pub fn learn(&mut self, now: Instant, mac: Mac, port: PortId) -> bool {
        if let Some(e) = self.map.get_mut(&mac) {
            *e = Learned { port, seen: now };
            return true;
        }
        if self.map.len() >= self.capacity {
            self.sweep(now);
            if self.map.len() >= self.capacity {
                return false;
            }
        }
        self.map.insert(mac, Learned { port, seen: now });
        true
    }

    /// Remove expired entries. Runs at most once per age period so a full table of live entries
    /// costs one scan per period, not one per packet.
    fn sweep(&mut self, now: Instant) {
        if self.last_sweep != Instant::ZERO
            && now.saturating_duration_since(self.last_sweep) < self.max_age
        {
            return;
        }
        self.last_sweep = now;
        let max_age = self.max_age;
        self.map.retain(|_, e| now.saturating_duration_since(e.seen) < max_age);
    }
}

/// How [`L2Fwd`] decides.
#[derive(Debug, Clone)]
pub enum L2Mode {
    /// Egress by ingress port: `map[ingress] = Some(egress)`.
    Static(Vec<Option<PortId>>),
    /// MAC learning, with flooding for unknown and group destinations.
    Learn(MacTable),
}

/// The `l2fwd` stage.
#[derive(Debug, Clone)]
pub struct L2Fwd {
    mode: L2Mode,
}

/// Default MAC-table capacity.
pub const DEFAULT_MAC_CAPACITY: usize = 4096;
/// Default MAC-table entry age limit.
pub const DEFAULT_MAC_AGE: Duration = Duration::from_secs(300);

impl L2Fwd {
    /// Static forwarding with the given `(ingress, egress)` pairs.
    pub fn with_map(pairs: &[(u16, u16)]) -> Self {
        let n = pairs.iter().map(|(i, _)| usize::from(*i) + 1).max().unwrap_or(0);
        let mut map = vec![None; n];
        for (i, e) in pairs {
            map[usize::from(*i)] = Some(PortId(*e));
        }
        L2Fwd { mode: L2Mode::Static(map) }
    }

    /// The default static map: 0 <-> 1.
    pub fn pair() -> Self {
        Self::with_map(&[(0, 1), (1, 0)])
    }

    /// MAC learning with a table of `capacity` entries aged after `max_age`.
    pub fn learning(capacity: usize, max_age: Duration) -> Self {
        L2Fwd { mode: L2Mode::Learn(MacTable::new(capacity, max_age)) }
    }

    /// The mode (and, when learning, the table).
    pub fn mode(&self) -> &L2Mode {
        &self.mode
    }

    fn forward(
        &mut self,
        now: Instant,
        p: &mut PacketBuf,
        ctx: &mut StageCtx<'_>,
    ) -> Result<(), DropReason> {
        let ingress = p.meta.ingress;
        let (egress, how) = match &mut self.mode {
            L2Mode::Static(map) => match map.get(usize::from(ingress.0)).copied().flatten() {
                Some(e) => (e, "static"),
                None => {
                    ctx.trace(p, || TraceWhat::Note("no static egress for this port"));
                    return Ok(());
                }
            },
            L2Mode::Learn(table) => {
                let d = p.data();
                let (Some(dst), Some(src)) = (d.get(0..6), d.get(6..12)) else {
                    return Err(DropReason::Malformed(WireError::Truncated {
                        need: 14,
                        got: d.len(),
                    }));
                };
                let mut dst_mac = [0u8; 6];
                dst_mac.copy_from_slice(dst);
                let mut src_mac = [0u8; 6];
                src_mac.copy_from_slice(src);
                // Group (multicast/broadcast) source addresses are never learned.
                if src_mac[0] & 1 == 0 && !table.learn(now, src_mac, ingress) {
                    ctx.error();
                }
                if dst_mac[0] & 1 != 0 {
                    (PortId::FLOOD, "flood")
                } else {
                    match table.lookup(now, &dst_mac) {
                        Some(port) => (port, "learned"),
                        None => (PortId::FLOOD, "flood"),
                    }
                }
            }
        };
        if egress == ingress {
            return Err(DropReason::LoopPrevented);
        }
        p.meta.egress = Some(egress);
        if egress.is_flood() {
            ctx.trace(p, || TraceWhat::Flooded);
        } else {
            ctx.trace(p, || TraceWhat::Forwarded { port: egress, how });
        }
        Ok(())
    }
}

impl Stage for L2Fwd {
    fn name(&self) -> &str {
        "l2fwd"
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        ctx.each(batch, |p, ctx| self.forward(now, p, ctx));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::StageCounters;
    use crate::trace::TraceRing;

    fn frame(dst: Mac, src: Mac) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[0u8; 46]);
        f
    }

    const A: Mac = [0x02, 0, 0, 0, 0, 0xa];
    const B: Mac = [0x02, 0, 0, 0, 0, 0xb];
    const BCAST: Mac = [0xff; 6];

    fn run(
        stage: &mut L2Fwd,
        now: Instant,
        pkts: &[(u16, Vec<u8>)],
    ) -> (Vec<Option<PortId>>, StageCounters) {
        let mut b = Batch::new(16);
        for (port, f) in pkts {
            b.push_frame(f).unwrap().meta.ingress = PortId(*port);
        }
        let mut c = StageCounters::new("l2fwd");
        let mut ring = TraceRing::new(4);
        stage.process(now, &mut b, &mut StageCtx::new(&mut c, &mut ring));
        (b.iter().map(|p| p.meta.egress).collect(), c)
    }

    #[test]
    fn static_pair_and_unknown_port() {
        let mut s = L2Fwd::pair();
        let f = frame(B, A);
        let (eg, c) = run(&mut s, Instant::ZERO, &[(0, f.clone()), (1, f.clone()), (2, f.clone())]);
        assert_eq!(eg, vec![Some(PortId(1)), Some(PortId(0)), None]);
        assert_eq!(c.drops.total(), 0);
    }

    #[test]
    fn static_self_map_is_loop_prevented() {
        let mut s = L2Fwd::with_map(&[(0, 0), (1, 2)]);
        let f = frame(B, A);
        let (eg, c) = run(&mut s, Instant::ZERO, &[(0, f.clone()), (1, f)]);
        assert_eq!(eg, vec![Some(PortId(2))]);
        assert_eq!(c.drops.get(DropReason::LoopPrevented), 1);
    }

    #[test]
    fn learning_floods_then_forwards_and_prevents_loops() {
        let mut s = L2Fwd::learning(16, Duration::from_secs(10));
        let t0 = Instant::from_secs(1);
        // A on port 0 talks to unknown B: flood. Then B answers from port 1: A is known.
        let (eg, _) = run(&mut s, t0, &[(0, frame(B, A)), (1, frame(A, B))]);
        assert_eq!(eg, vec![Some(PortId::FLOOD), Some(PortId(0))]);
        // Now both known; broadcast still floods; a packet to A arriving on A's port loops.
        let (eg, c) = run(&mut s, t0, &[(0, frame(B, A)), (1, frame(BCAST, B)), (0, frame(A, B))]);
        assert_eq!(eg, vec![Some(PortId(1)), Some(PortId::FLOOD)]);
        assert_eq!(c.drops.get(DropReason::LoopPrevented), 1);
        // B moved to port 0 in the last packet (learned before the lookup).
        let L2Mode::Learn(t) = s.mode() else { panic!("learning mode") };
        assert_eq!(t.lookup(t0, &B), Some(PortId(0)));
        // Entries age out.
        assert_eq!(t.lookup(t0 + Duration::from_secs(11), &A), None);
    }

    #[test]
    fn learning_table_is_bounded_and_sweeps_expired() {
        let mut t = MacTable::new(2, Duration::from_secs(5));
        let now = Instant::from_secs(1);
        assert!(t.learn(now, A, PortId(0)));
        assert!(t.learn(now, B, PortId(1)));
        assert!(!t.learn(now, [0x02, 0, 0, 0, 0, 0xc], PortId(2)));
        assert_eq!(t.len(), 2);
        // After the age limit, the expired entries are swept and the new MAC fits.
        let later = now + Duration::from_secs(6);
        assert!(t.learn(later, [0x02, 0, 0, 0, 0, 0xc], PortId(2)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn learning_counts_full_table_and_truncated_frames() {
        let mut s = L2Fwd::learning(1, Duration::from_secs(10));
        let (eg, c) = run(
            &mut s,
            Instant::from_secs(1),
            &[(0, frame(B, A)), (1, frame(A, B)), (0, vec![1, 2, 3])],
        );
        assert_eq!(eg, vec![Some(PortId::FLOOD), Some(PortId(0))]);
        assert_eq!(c.errors, 1, "B could not be learned");
        assert_eq!(c.drops.get(DropReason::Malformed(WireError::Truncated { need: 0, got: 0 })), 1);
    }
}
