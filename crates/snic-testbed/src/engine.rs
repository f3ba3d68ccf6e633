//! A bare RoCE engine as a testbed node: an [`Rnic`] and its memory on one port, with no
//! pipeline, no Ethernet and no neighbour table in between.
//!
//! What crosses the port are the engine's own packets: whole IP packets (IPv4 or IPv6, UDP,
//! RoCEv2, ICRC), exactly what [`Rnic::poll_transmit`] builds and [`Rnic::handle_packet`]
//! takes. Two of these on the ends of a [`snic_io::vlink`] are the smallest RDMA testbed: the
//! engine alone, over an impaired wire, on the simulated clock. (A whole NIC, which frames
//! those packets for an Ethernet wire and resolves its peers, is [`crate::NicDevice`].)
//!
//! A device may also *tamper* with what it sends, before the port takes it ([`Tamper`]): flip
//! a byte after the BTH (the receiver's ICRC check must catch it) or mark ECN Congestion
//! Experienced as a congested switch would (IPv4 header checksum fixed; the ICRC masks the
//! ECN bits, so the packet stays valid). The choices come from the device's own seeded RNG, so
//! a run stays reproducible.

use core::any::Any;
use core::fmt;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_io::port::{Port, PortCounters};
use snic_pipeline::{Batch, Counters, MAX_BATCH};
use snic_rdma::Rnic;
use snic_rdma::pkt::MAX_PACKET_LEN;
use snic_time::Instant;
use snic_wire::{ipv4, ipv6, roce, udp};

use crate::Device;

/// Most packets the engine sends in one [`Device::poll`]; the testbed polls again (and the
/// other nodes in between) while there is more, so an engine that never stops sending is the
/// testbed's livelock error, not a hang.
pub const TX_PER_POLL: usize = 4 * MAX_BATCH;

/// What a device does to its outgoing packets before its port takes them: each is a fraction
/// in `[0, 1]` of packets, drawn independently per packet.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tamper {
    /// Fraction of packets with one byte flipped somewhere after the BTH (extension headers,
    /// payload or the ICRC itself): the receiver must drop them as `BadIcrc`.
    pub corrupt: f64,
    /// Fraction of packets marked ECN Congestion Experienced (the IPv4 header checksum is
    /// recomputed; the ICRC does not cover the ECN bits).
    pub ce: f64,
}

/// What a [`RnicDevice`] did besides moving packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RnicDeviceCounters {
    /// Packets received from the port and handed to the engine.
    pub rx_packets: u64,
    /// Packets the engine produced (handed to the port, tampered with or not).
    pub tx_packets: u64,
    /// Packets [`Tamper::corrupt`] flipped a byte of.
    pub corrupted: u64,
    /// Packets [`Tamper::ce`] marked CE.
    pub ce_marked: u64,
    /// Packets the port did not take (a short send or an error).
    pub tx_dropped: u64,
    /// Port receive or send errors.
    pub port_errors: u64,
}

/// An [`Rnic`] on a port (see the module doc). `rnic` is public so a test can post verbs and
/// read memory between steps, at [`crate::Testbed::now`].
pub struct RnicDevice {
    name: String,
    port: Box<dyn Port>,
    /// The RoCE engine and its memory.
    pub rnic: Rnic,
    tamper: Tamper,
    rng: ChaCha8Rng,
    counters: RnicDeviceCounters,
    rx: Batch,
    tx: Batch,
    buf: Vec<u8>,
}

impl fmt::Debug for RnicDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RnicDevice")
            .field("name", &self.name)
            .field("port", &self.port.name())
            .field("tamper", &self.tamper)
            .field("counters", &self.counters)
            .field("rnic", &self.rnic.stats())
            .finish_non_exhaustive()
    }
}

impl RnicDevice {
    /// `rnic` on `port`, tampering with nothing.
    pub fn new(name: impl Into<String>, rnic: Rnic, port: Box<dyn Port>) -> Self {
        RnicDevice {
            name: name.into(),
            port,
            rnic,
            tamper: Tamper::default(),
            rng: ChaCha8Rng::seed_from_u64(0),
            counters: RnicDeviceCounters::default(),
            rx: Batch::new(MAX_BATCH),
            tx: Batch::new(MAX_BATCH),
            buf: vec![0; MAX_PACKET_LEN],
        }
    }

    /// Tamper with outgoing packets from now on, as `tamper` says, drawing from an RNG seeded
    /// with `seed`.
    pub fn set_tamper(&mut self, tamper: Tamper, seed: u64) {
        self.tamper = tamper;
        self.rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// The device's own counters (the engine's are [`Rnic::stats`]).
    pub fn device_counters(&self) -> RnicDeviceCounters {
        self.counters
    }

    /// The port.
    pub fn port(&self) -> &dyn Port {
        self.port.as_ref()
    }

    /// Hand the port's batch to it, counting what it did not take.
    fn flush_tx(&mut self, now: Instant) {
        if self.tx.is_empty() {
            return;
        }
        let n = self.tx.len();
        match self.port.send(now, &mut self.tx) {
            Ok(sent) => self.counters.tx_dropped += n.saturating_sub(sent) as u64,
            Err(_) => {
                self.counters.port_errors += 1;
                self.counters.tx_dropped += n as u64;
            }
        }
        self.tx.clear();
    }
}

/// Offset of the first byte after the BTH of an engine packet (IP, UDP, BTH), or `None` for
/// bytes that are not an IP packet.
fn after_bth(pkt: &[u8]) -> Option<usize> {
    let l3 = match pkt.first()? >> 4 {
        4 => ipv4::Packet::new_checked(pkt).ok()?.header_len(),
        // The engine sends no IPv6 extension headers.
        6 => ipv6::HEADER_LEN,
        _ => return None,
    };
    Some(l3 + udp::HEADER_LEN + roce::bth::HEADER_LEN)
}

/// Flip one byte at a random offset after the BTH (nothing when the packet ends there).
fn corrupt(rng: &mut ChaCha8Rng, pkt: &mut [u8]) -> bool {
    let Some(from) = after_bth(pkt).filter(|&f| f < pkt.len()) else { return false };
    let at = rng.gen_range(from..pkt.len());
    let x: u8 = rng.gen_range(1..=255);
    pkt[at] ^= x;
    true
}

/// Set ECN CE in the IP header, fixing the IPv4 header checksum.
fn mark_ce(pkt: &mut [u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => {
            let Ok(mut ip) = ipv4::Packet::new_checked(pkt) else { return false };
            ip.set_ecn(ipv4::ecn::CE);
            ip.fill_checksum();
            true
        }
        Some(6) => {
            let Ok(mut ip) = ipv6::Packet::new_checked(pkt) else { return false };
            ip.set_ecn(ipv4::ecn::CE);
            true
        }
        _ => false,
    }
}

impl Device for RnicDevice {
    fn name(&self) -> &str {
        &self.name
    }

    /// Receive everything due from the port into the engine, run its due timers, then send up
    /// to [`TX_PER_POLL`] of its packets (tampered with as [`Tamper`] says).
    fn poll(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        loop {
            self.rx.clear();
            let n = match self.port.recv(now, &mut self.rx) {
                Ok(n) => n,
                Err(_) => {
                    self.counters.port_errors += 1;
                    0
                }
            };
            if n == 0 {
                break;
            }
            for p in self.rx.iter() {
                self.rnic.handle_packet(now, p.data());
            }
            self.counters.rx_packets += n as u64;
            moved += n;
        }
        if self.rnic.poll_timeout().is_some_and(|t| t <= now) {
            self.rnic.handle_timeout(now);
        }
        let mut sent = 0;
        while sent < TX_PER_POLL {
            let Some(len) = self.rnic.poll_transmit(now, &mut self.buf) else { break };
            sent += 1;
            let pkt = &mut self.buf[..len];
            // Draw both numbers for every packet, so one impairment never shifts the other's
            // stream.
            let (rc, rm): (f64, f64) = (self.rng.r#gen(), self.rng.r#gen());
            if rm < self.tamper.ce && mark_ce(pkt) {
                self.counters.ce_marked += 1;
            }
            if rc < self.tamper.corrupt && corrupt(&mut self.rng, pkt) {
                self.counters.corrupted += 1;
            }
            self.tx.push_frame(pkt);
            if self.tx.is_full() {
                self.flush_tx(now);
            }
        }
        self.flush_tx(now);
        self.counters.tx_packets += sent as u64;
        moved + sent
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.port.poll_timeout(), self.rnic.poll_timeout()].into_iter().flatten().min()
    }

    fn counters(&self) -> Counters {
        Counters::default()
    }

    fn port_counters(&self) -> Vec<(String, PortCounters)> {
        vec![(self.port.name().to_string(), self.port.counters())]
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header of `len` bytes in all, TOS 0x02 (ECT0), checksum filled.
    fn v4(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[1] = 0x02;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        ipv4::Packet::new_checked(&mut p[..]).unwrap().fill_checksum();
        p
    }

    #[test]
    fn ce_marking_keeps_the_ipv4_checksum_true() {
        let mut p = v4(60);
        assert!(mark_ce(&mut p));
        let ip = ipv4::Packet::new_checked(&p[..]).unwrap();
        assert_eq!(ip.ecn(), ipv4::ecn::CE);
        assert!(ip.verify_checksum());
        let mut p6 = vec![0u8; 60];
        p6[0] = 0x60;
        p6[4..6].copy_from_slice(&20u16.to_be_bytes());
        assert!(mark_ce(&mut p6));
        assert_eq!(ipv6::Packet::new_checked(&p6[..]).unwrap().ecn(), ipv4::ecn::CE);
        assert!(!mark_ce(&mut [0u8; 4]));
    }

    #[test]
    fn corruption_flips_one_byte_after_the_bth_only() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let from = 20 + udp::HEADER_LEN + roce::bth::HEADER_LEN;
        for _ in 0..100 {
            let orig = v4(from + 16);
            let mut p = orig.clone();
            assert!(corrupt(&mut rng, &mut p));
            let diff: Vec<usize> = (0..p.len()).filter(|&i| p[i] != orig[i]).collect();
            assert_eq!(diff.len(), 1);
            assert!(diff[0] >= from, "{diff:?}");
        }
        // Nothing after the BTH: nothing to corrupt.
        let mut p = v4(from);
        assert!(!corrupt(&mut rng, &mut p));
        assert_eq!(p, v4(from));
    }
}
