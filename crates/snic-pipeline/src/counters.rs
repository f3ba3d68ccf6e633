//! Packet and drop counters per stage and per port.
//!
//! Counters are plain `u64` fields and arrays indexed by [`DropReason::index`]: counting is an
//! increment, never a hash or an allocation. Each worker owns its own [`Counters`]; a monitor sums
//! them with [`Counters::merge`]. A snapshot serialises to JSON (only non-zero drop reasons are
//! written, keyed by their stable names) and prints as an aligned table.
//!
//! Invariant (checked by tests): for every stage,
//! `packets_in + created == packets_out + sum(drops) + held + local`, where `created` counts the
//! packets the stage made itself (a P4 program's multicast replicas and clones: one packet in,
//! several out; zero for every other stage), `held` is what a stage keeps
//! queued right now (a vSwitch exception queue, a shaper; zero for stages that never hold
//! packets) and `local` counts the packets the stage delivered to the device itself
//! ([`PortId::LOCAL`]: the RoCE engine, the neighbour responder). [`StageCounters::balanced`]
//! checks it.
//! A stage that classifies (`classify`) also counts each packet it was handed by the class it
//! gave ([`ClassCounts`]), so there `packets_in == classes.rdma + classes.other`.

use crate::drop::{DROP_REASONS, DropReason};
use crate::meta::{Class, PortId};
use core::fmt;
use serde::ser::{Serialize, SerializeMap, Serializer};

/// One counter per drop reason.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DropCounts(pub [u64; DROP_REASONS]);

impl Default for DropCounts {
    fn default() -> Self {
        DropCounts([0; DROP_REASONS])
    }
}

impl fmt::Debug for DropCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (key, n) in self.nonzero() {
            m.entry(&format_args!("{key}"), &n);
        }
        m.finish()
    }
}

impl DropCounts {
    /// Count one drop.
    #[inline]
    pub fn add(&mut self, reason: DropReason) {
        self.0[reason.index()] += 1;
    }

    /// Drops counted for `reason`. Every `Malformed(e)` with the same kind of `e` shares a slot.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }

    /// Sum of every reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Add `other` slot by slot.
    pub fn merge(&mut self, other: &DropCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    /// The non-zero slots with their keys (`malformed.truncated`, `no_egress`, ...).
    pub fn nonzero(&self) -> impl Iterator<Item = (crate::drop::SlotKey, u64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, n)| **n != 0)
            .filter_map(|(i, n)| DropReason::slot_key(i).map(|k| (k, *n)))
    }
}

impl Serialize for DropCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (key, n) in self.nonzero() {
            m.serialize_entry(&key.to_string(), &n)?;
        }
        m.end()
    }
}

/// Packets a stage classified, by the class it gave them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassCounts {
    /// Classified as RDMA (RoCEv2 with an RC opcode, or a CNP).
    pub rdma: u64,
    /// Classified as anything else.
    pub other: u64,
}

impl ClassCounts {
    /// Count one packet given `class` (`Unclassified` is not a decision and is not counted).
    #[inline]
    pub fn add(&mut self, class: Class) {
        match class {
            Class::Rdma => self.rdma += 1,
            Class::Other => self.other += 1,
            Class::Unclassified => {}
        }
    }

    /// Packets counted, every class.
    pub fn total(&self) -> u64 {
        self.rdma + self.other
    }

    /// True when nothing was counted (a stage that does not classify).
    pub fn is_zero(&self) -> bool {
        self.total() == 0
    }

    /// Add `other`'s counts to these.
    pub fn merge(&mut self, other: &ClassCounts) {
        self.rdma += other.rdma;
        self.other += other.other;
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Counters of one stage.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StageCounters {
    /// The stage's name (`"parse"`, `"l2fwd"`, ...).
    pub name: String,
    /// Packets handed to the stage.
    pub packets_in: u64,
    /// Packets the stage passed on.
    pub packets_out: u64,
    /// Bytes of the packets handed to the stage.
    pub bytes_in: u64,
    /// Packets the stage dropped, by reason.
    pub drops: DropCounts,
    /// Non-fatal problems that did not drop a packet (a pcap write that failed, a full MAC table).
    pub errors: u64,
    /// Packets the stage holds right now (taken from one batch, to be released into a later
    /// one): a gauge, not a running total. Zero for stages that never hold packets.
    #[serde(skip_serializing_if = "is_zero")]
    pub held: u64,
    /// Packets the stage delivered to the device itself ([`PortId::LOCAL`]): taken out of the
    /// pipeline for the RoCE engine or the neighbour responder. Zero for most stages.
    #[serde(skip_serializing_if = "is_zero")]
    pub local: u64,
    /// Packets the stage made itself beside the ones it was handed (a P4 program's multicast
    /// replicas and clones): they join `packets_in` on the left of the invariant. Zero for most
    /// stages.
    #[serde(skip_serializing_if = "is_zero")]
    pub created: u64,
    /// Packets the stage classified, by class (only the classify stage counts these; in JSON
    /// only when non-zero).
    #[serde(skip_serializing_if = "ClassCounts::is_zero")]
    pub classes: ClassCounts,
}

impl StageCounters {
    /// Empty counters for the stage `name`.
    pub fn new(name: impl Into<String>) -> Self {
        StageCounters { name: name.into(), ..Default::default() }
    }

    /// The stage's invariant: `packets_in + created == packets_out + drops + held + local`.
    pub fn balanced(&self) -> bool {
        self.packets_in + self.created
            == self.packets_out + self.drops.total() + self.held + self.local
    }

    /// Add `other`'s counts to these.
    pub fn merge(&mut self, other: &StageCounters) {
        self.packets_in += other.packets_in;
        self.packets_out += other.packets_out;
        self.bytes_in += other.bytes_in;
        self.errors += other.errors;
        self.held += other.held;
        self.local += other.local;
        self.created += other.created;
        self.drops.merge(&other.drops);
        self.classes.merge(&other.classes);
    }
}

/// Counters of one port, as seen by the pipeline and the I/O layer.
///
/// `rx_drops` are packets dropped before they entered the pipeline (no buffer, receive error,
/// pipeline full); `tx_drops` are packets the pipeline decided to send that did not leave (queue
/// full, transmit error, too big). Drops inside the pipeline are counted by the stage that made
/// them, not here, so that each drop is counted exactly once.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PortCounters {
    /// The port.
    pub port: u16,
    /// Packets received (entered the pipeline).
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Receive-side drops by reason.
    pub rx_drops: DropCounts,
    /// Transmit-side drops by reason.
    pub tx_drops: DropCounts,
    /// Tunnelled super-packets (a guest's TSO packet the vSwitch encapsulated) this port could
    /// not take whole, segmented in software before transmit (the fallback of tunnel GSO).
    #[serde(skip_serializing_if = "is_zero")]
    pub tunnel_segmented: u64,
    /// Tunnelled super-packets (VXLAN) this port could not take whole, handed to it instead as
    /// UDP GSO buffers of ready VXLAN datagrams for the kernel to cut (AF_PACKET underlays).
    #[serde(skip_serializing_if = "is_zero")]
    pub tunnel_udp_gso: u64,
    /// Received TCP segments merged into super-packets before transmit (GRO), and VXLAN
    /// datagrams merged into UDP GSO buffers for a port without UDP-tunnel GSO, not counting
    /// the first of each.
    #[serde(skip_serializing_if = "is_zero")]
    pub gro_coalesced: u64,
}

impl PortCounters {
    /// Count one received packet of `bytes` bytes.
    #[inline]
    pub fn rx(&mut self, bytes: usize) {
        self.rx_packets += 1;
        self.rx_bytes += bytes as u64;
    }

    /// Count one transmitted packet of `bytes` bytes.
    #[inline]
    pub fn tx(&mut self, bytes: usize) {
        self.tx_packets += 1;
        self.tx_bytes += bytes as u64;
    }

    /// Add `other`'s counts to these.
    pub fn merge(&mut self, other: &PortCounters) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.rx_drops.merge(&other.rx_drops);
        self.tx_drops.merge(&other.tx_drops);
        self.tunnel_segmented += other.tunnel_segmented;
        self.tunnel_udp_gso += other.tunnel_udp_gso;
        self.gro_coalesced += other.gro_coalesced;
    }
}

/// All counters of one pipeline (or, after [`Counters::merge`], of several).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// One entry per stage, in pipeline order.
    pub stages: Vec<StageCounters>,
    /// One entry per port seen, indexed by port number.
    pub ports: Vec<PortCounters>,
}

impl Counters {
    /// The counters of `port`, growing the table the first time a port is seen (the only
    /// allocation, once per port, never per packet in the steady state).
    #[inline]
    pub fn port_mut(&mut self, port: PortId) -> &mut PortCounters {
        let i = usize::from(port.0);
        if i >= self.ports.len() {
            let start = self.ports.len();
            self.ports
                .extend((start..=i).map(|p| PortCounters { port: p as u16, ..Default::default() }));
        }
        &mut self.ports[i]
    }

    /// The counters of `port`, if it was seen.
    pub fn port(&self, port: PortId) -> Option<&PortCounters> {
        self.ports.get(usize::from(port.0))
    }

    /// The counters of the first stage called `name`.
    pub fn stage(&self, name: &str) -> Option<&StageCounters> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// Packets classified, by class, summed over every stage that classifies.
    pub fn classified(&self) -> ClassCounts {
        let mut c = ClassCounts::default();
        for s in &self.stages {
            c.merge(&s.classes);
        }
        c
    }

    /// Every drop counted anywhere (stages and ports).
    pub fn total_drops(&self) -> u64 {
        self.stages.iter().map(|s| s.drops.total()).sum::<u64>()
            + self.ports.iter().map(|p| p.rx_drops.total() + p.tx_drops.total()).sum::<u64>()
    }

    /// Packets the stages made themselves (P4 multicast replicas and clones), summed: what
    /// left plus what was dropped is what arrived plus this.
    pub fn created_total(&self) -> u64 {
        self.stages.iter().map(|s| s.created).sum()
    }

    /// Drops for `reason` summed over every stage and port.
    pub fn drops_for(&self, reason: DropReason) -> u64 {
        self.stages.iter().map(|s| s.drops.get(reason)).sum::<u64>()
            + self
                .ports
                .iter()
                .map(|p| p.rx_drops.get(reason) + p.tx_drops.get(reason))
                .sum::<u64>()
    }

    /// Add `other` (another worker's counters) to these. Stages are matched by position (workers
    /// run the same pipeline); stages or ports only `other` has are appended.
    pub fn merge(&mut self, other: &Counters) {
        for (i, s) in other.stages.iter().enumerate() {
            match self.stages.get_mut(i) {
                Some(mine) => mine.merge(s),
                None => self.stages.push(s.clone()),
            }
        }
        for p in &other.ports {
            self.port_mut(PortId(p.port)).merge(p);
        }
    }

    /// Set every count to zero, keeping stage names and the port table.
    pub fn reset(&mut self) {
        for s in &mut self.stages {
            *s = StageCounters::new(core::mem::take(&mut s.name));
        }
        for p in &mut self.ports {
            *p = PortCounters { port: p.port, ..Default::default() };
        }
    }
}

impl fmt::Display for Counters {
    /// An aligned table: one row per stage, one per port that counted anything, each followed by
    /// one indented row per non-zero drop reason.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<16} {:>14} {:>14} {:>16} {:>12} {:>10}",
            "stage", "in", "out", "bytes_in", "drops", "errors"
        )?;
        for s in &self.stages {
            writeln!(
                f,
                "{:<16} {:>14} {:>14} {:>16} {:>12} {:>10}",
                s.name,
                s.packets_in,
                s.packets_out,
                s.bytes_in,
                s.drops.total(),
                s.errors
            )?;
            if s.created != 0 {
                writeln!(f, "  created {:<27} {:>14}", "(replicas, clones)", s.created)?;
            }
            if !s.classes.is_zero() {
                writeln!(f, "  class {:<29} {:>14}", "rdma", s.classes.rdma)?;
                writeln!(f, "  class {:<29} {:>14}", "other", s.classes.other)?;
            }
            for (key, n) in s.drops.nonzero() {
                writeln!(f, "  drop {:<30} {:>14}", key.to_string(), n)?;
            }
        }
        if !self.ports.is_empty() {
            writeln!(
                f,
                "{:<16} {:>14} {:>16} {:>14} {:>16} {:>10} {:>10}",
                "port", "rx", "rx_bytes", "tx", "tx_bytes", "rx_drops", "tx_drops"
            )?;
            for p in self
                .ports
                .iter()
                .filter(|p| **p != PortCounters { port: p.port, ..Default::default() })
            {
                writeln!(
                    f,
                    "{:<16} {:>14} {:>16} {:>14} {:>16} {:>10} {:>10}",
                    p.port,
                    p.rx_packets,
                    p.rx_bytes,
                    p.tx_packets,
                    p.tx_bytes,
                    p.rx_drops.total(),
                    p.tx_drops.total()
                )?;
                for (key, n) in p.rx_drops.nonzero() {
                    writeln!(f, "  rx drop {:<27} {:>14}", key.to_string(), n)?;
                }
                for (key, n) in p.tx_drops.nonzero() {
                    writeln!(f, "  tx drop {:<27} {:>14}", key.to_string(), n)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_wire::Error as WireError;

    fn sample() -> Counters {
        let mut c = Counters { stages: vec![StageCounters::new("parse")], ports: vec![] };
        let s = &mut c.stages[0];
        s.packets_in = 10;
        s.packets_out = 7;
        s.bytes_in = 640;
        s.drops.add(DropReason::Malformed(WireError::Truncated { need: 14, got: 2 }));
        s.drops.add(DropReason::Malformed(WireError::Truncated { need: 20, got: 9 }));
        s.drops.add(DropReason::NoEgress);
        c.port_mut(PortId(1)).rx(64);
        c.port_mut(PortId(1)).tx_drops.add(DropReason::TxQueueFull);
        c
    }

    /// A classify stage's counters: 3 RDMA (one of them dropped), 2 other.
    fn classified() -> Counters {
        let mut c = sample();
        let mut s = StageCounters::new("classify");
        s.packets_in = 5;
        s.packets_out = 4;
        for class in [Class::Rdma, Class::Other, Class::Rdma, Class::Unclassified, Class::Rdma] {
            s.classes.add(class);
        }
        s.classes.add(Class::Other);
        s.drops.add(DropReason::BadIcrc);
        c.stages.push(s);
        c
    }

    #[test]
    fn class_counts_merge_serialise_and_print() {
        let mut a = classified();
        assert_eq!(a.classified(), ClassCounts { rdma: 3, other: 2 });
        a.merge(&classified());
        assert_eq!(a.stage("classify").unwrap().classes, ClassCounts { rdma: 6, other: 4 });
        assert_eq!(a.classified().total(), 10);
        let v: serde_json::Value = serde_json::to_value(&a).unwrap();
        assert_eq!(v["stages"][1]["classes"], serde_json::json!({"rdma": 6, "other": 4}));
        // A stage that classifies nothing has no `classes` key.
        assert!(v["stages"][0].get("classes").is_none(), "{v}");
        let text = a.to_string();
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("  class ")).collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert!(rows[0].starts_with("  class rdma") && rows[0].ends_with(" 6"), "{text}");
        assert!(rows[1].starts_with("  class other") && rows[1].ends_with(" 4"), "{text}");
        a.reset();
        assert!(a.classified().is_zero());
    }

    #[test]
    fn merge_sums_and_ports_grow() {
        let mut a = sample();
        let b = sample();
        a.merge(&b);
        assert_eq!(a.stages.len(), 1);
        assert_eq!(a.stages[0].packets_in, 20);
        assert_eq!(a.stages[0].bytes_in, 1280);
        assert_eq!(a.stages[0].drops.get(DropReason::Malformed(WireError::BadChecksum)), 0);
        assert_eq!(
            a.stages[0].drops.get(DropReason::Malformed(WireError::Truncated { need: 0, got: 0 })),
            4
        );
        assert_eq!(a.ports.len(), 2);
        assert_eq!(a.ports[0].port, 0);
        assert_eq!(a.port(PortId(1)).unwrap().rx_bytes, 128);
        assert_eq!(a.total_drops(), 8);
        assert_eq!(a.drops_for(DropReason::TxQueueFull), 2);
    }

    #[test]
    fn json_has_named_nonzero_drops() {
        let c = sample();
        let v: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert_eq!(v["stages"][0]["name"], "parse");
        assert_eq!(v["stages"][0]["drops"]["malformed.truncated"], 2);
        assert_eq!(v["stages"][0]["drops"]["no_egress"], 1);
        assert_eq!(v["stages"][0]["drops"].as_object().unwrap().len(), 2);
        assert_eq!(v["ports"][1]["tx_drops"]["tx_queue_full"], 1);
        assert_eq!(v["ports"][1]["rx_packets"], 1);
    }

    #[test]
    fn display_is_a_table() {
        let text = sample().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("stage"));
        assert!(lines[1].starts_with("parse"));
        assert!(lines[1].contains(" 10 ") && lines[1].contains(" 640 "));
        assert!(text.contains("drop malformed.truncated"));
        assert!(text.contains("tx drop tx_queue_full"));
        // Port 1 has a row; port 0 counted nothing and has none.
        assert!(text.lines().any(|l| l.starts_with("1 ")));
        assert!(!text.lines().any(|l| l.starts_with("0 ")));
        // Columns align: every stage row has the same width as the header.
        assert_eq!(lines[0].len(), lines[1].len());
    }

    #[test]
    fn reset_keeps_names() {
        let mut c = sample();
        c.reset();
        assert_eq!(c.stages[0].name, "parse");
        assert_eq!(c.total_drops(), 0);
        assert_eq!(c.ports.len(), 2);
    }
}
