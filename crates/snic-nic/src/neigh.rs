//! The NIC's neighbour table: ARP (IPv4, RFC 826) and IPv6 Neighbor Discovery (RFC 4861) for
//! the NIC's own addresses, sans-IO.
//!
//! [`Neighbours`] is a state machine in the quinn-proto shape: [`Neighbours::resolve`] and
//! [`Neighbours::handle_frame`] take input, [`Neighbours::poll_transmit`] hands out the frames
//! to send (answers, solicitations, released packets, in FIFO order),
//! [`Neighbours::poll_timeout`] / [`Neighbours::handle_timeout`] run the retries and expiries.
//! It reads no clock (time is the `now` argument), does no I/O and spawns no thread.
//!
//! An entry goes through these states ([`State`]):
//!
//! - **Incomplete**: created by `resolve` for an unknown next hop. Packets are copied into its
//!   queue; a solicitation (ARP request to broadcast, or a Neighbor Solicitation to the
//!   solicited-node group) goes out every `retry_interval` until `solicit_tries` were sent.
//!   An answer makes it reachable and moves its queue to the transmit queue, framed; no answer
//!   makes it failed and drops its queue (each packet counted in `drop_unresolved`).
//! - **Reachable** for `reachable` after the last confirmation (an ARP reply, a solicited
//!   Neighbor Advertisement), then **Stale** (computed from `now`, no timer). Entries learned
//!   from a request or solicitation, or from an unsolicited advertisement, start stale
//!   (RFC 4861 section 7.2.3).
//! - **Probe**: `resolve` used a stale entry: the packet goes out at once and a unicast
//!   solicitation re-confirms the address, retried like a resolution; no answer after
//!   `solicit_tries` fails the entry.
//! - **Failed** for `failed_hold`: packets to it are dropped (`drop_unresolved`), then the entry
//!   is removed and the next packet starts a new resolution.
//!
//! Bounds: at most `capacity` entries (a new one evicts the oldest entry that is not
//! incomplete; when all are incomplete the packet is dropped, `drop_table_full`), at most
//! `queue_per_entry` packets per entry and `capacity * queue_per_entry` packets held in all
//! (queued or released and waiting to be sent), and at most [`Neighbours::control_limit`]
//! answers and solicitations waiting in the transmit queue (more are dropped, `drop_tx_full`).
//!
//! Not here: routing (every destination is on-link), duplicate address detection of our own
//! addresses, router discovery, VLAN tags (a tagged frame is ignored), Ethernet padding to
//! 60 bytes (ARP frames are 42 bytes; the port pads if the medium needs it).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use snic_time::Instant;
use snic_wire::ethernet::{self, EtherType, EthernetAddress};
use snic_wire::ipv4::IpProtocol;
use snic_wire::{arp, icmpv6, ipv6, ndisc};

/// Settings of a [`Neighbours`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighConfig {
    /// Most entries (resolved, pending or failed) the table keeps.
    pub capacity: usize,
    /// Most packets queued per entry while its resolution is pending.
    pub queue_per_entry: usize,
    /// Solicitations sent before a resolution fails (the first one included).
    pub solicit_tries: u32,
    /// Time between solicitations of one pending resolution.
    pub retry_interval: Duration,
    /// How long a resolved entry is used before it is confirmed again.
    pub reachable: Duration,
    /// How long a failed entry refuses packets before a new resolution may start.
    pub failed_hold: Duration,
}

impl Default for NeighConfig {
    /// 1024 entries, 64 packets each; 5 solicitations 100 ms apart; reachable 30 s; failed
    /// for 500 ms. Faster than the kernel's ARP (3 tries 1 s apart): a RoCE QP gives up after
    /// about half a second (timeout 14 = 67 ms, 7 retries), so a lost first solicitation must
    /// be retried well within that.
    fn default() -> Self {
        NeighConfig {
            capacity: 1024,
            queue_per_entry: 64,
            solicit_tries: 5,
            retry_interval: Duration::from_millis(100),
            reachable: Duration::from_secs(30),
            failed_hold: Duration::from_millis(500),
        }
    }
}

/// What [`Neighbours::resolve`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// The next hop is at this MAC: frame the packet and send it now.
    Ready(EthernetAddress),
    /// The packet was copied into the entry's queue; it leaves (framed) through
    /// [`Neighbours::poll_transmit`] once the address is known.
    Queued,
    /// The packet was dropped and counted (queue full, table full, resolution failed).
    Dropped,
}

/// Counters of a [`Neighbours`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct NeighCounters {
    /// ARP requests and neighbour solicitations sent (first tries and retries).
    pub solicits_sent: u64,
    /// ARP replies and neighbour advertisements sent (answers for our addresses).
    pub answers_sent: u64,
    /// Frames learned from (replies, advertisements, requests for our addresses).
    pub learned: u64,
    /// Resolutions that ended without an answer.
    pub failed: u64,
    /// Packets queued while a resolution was pending.
    pub queued: u64,
    /// Queued packets sent once their resolution completed.
    pub released: u64,
    /// Packets dropped because their entry's queue was full.
    pub drop_queue_full: u64,
    /// Packets dropped because their resolution failed (queued ones and new ones during the
    /// failed hold).
    pub drop_unresolved: u64,
    /// Packets dropped because the table was full of pending entries.
    pub drop_table_full: u64,
    /// ARP / ND frames ignored: malformed, not for us, or not acceptable (bad hop limit,
    /// checksum, ...).
    pub ignored: u64,
    /// Frames (answers, solicitations or released packets) dropped by
    /// [`Neighbours::poll_transmit`] because the caller's buffer was too small for them.
    pub drop_too_big: u64,
    /// Answers and solicitations dropped because [`Neighbours::control_limit`] of them were
    /// already waiting to be sent (the caller does not drain
    /// [`Neighbours::poll_transmit`]).
    pub drop_tx_full: u64,
    /// Packets [`Neighbours::resolve`] refused (and [`Neighbours::prepare`] calls, which carry
    /// none): `src` is not one of our addresses, `dst` and `src` are of different families, or
    /// `dst` is unspecified or one of ours.
    pub drop_bad_address: u64,
}

/// The state of a table entry, as [`Neighbours::entries`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum State {
    /// Being resolved: solicitations go out, packets wait in the entry's queue.
    Incomplete,
    /// Confirmed less than `reachable` ago.
    Reachable,
    /// Known but not confirmed for `reachable`: still used; the next use re-probes it.
    Stale,
    /// Used while stale: unicast solicitations are re-confirming it.
    Probe,
    /// Its resolution failed: packets to it are dropped until the hold ends.
    Failed,
}

/// One entry of the table, for a status dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The neighbour's IP address.
    pub ip: IpAddr,
    /// Its MAC, once known (`None` while incomplete or failed).
    pub mac: Option<EthernetAddress>,
    /// Where it stands.
    pub state: State,
    /// Packets waiting in its queue.
    pub queued: usize,
    /// Solicitations sent in the current resolution or probe.
    pub tries: u32,
}

/// Where an entry stands internally; stale is reachable past its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Incomplete,
    Reachable,
    Probe,
    Failed,
}

/// One entry's state.
#[derive(Debug)]
struct Slot {
    phase: Phase,
    mac: Option<EthernetAddress>,
    /// Our address that solicitations for this entry come from.
    src: IpAddr,
    /// Solicitations sent in the current resolution or probe.
    tries: u32,
    /// Incomplete, Probe: the next retry (or the failure). Reachable: when it turns stale.
    /// Failed: the end of the hold.
    deadline: Instant,
    /// Last creation or update; the oldest is evicted first.
    touched: Instant,
    /// Packets waiting for the resolution (only while incomplete).
    queue: VecDeque<Vec<u8>>,
}

/// A frame waiting in the transmit queue, built into the caller's buffer when polled.
#[derive(Debug)]
enum Tx {
    /// An ARP request (`target_ip` asked about, `sender_ip` ours).
    ArpRequest { eth_dst: EthernetAddress, sender_ip: Ipv4Addr, target_ip: Ipv4Addr },
    /// An ARP reply for our `sender_ip`.
    ArpReply {
        eth_dst: EthernetAddress,
        sender_ip: Ipv4Addr,
        target_mac: EthernetAddress,
        target_ip: Ipv4Addr,
    },
    /// A Neighbor Solicitation for `target` from `src` to `ip_dst`.
    Solicit { eth_dst: EthernetAddress, src: Ipv6Addr, ip_dst: Ipv6Addr, target: Ipv6Addr },
    /// A Neighbor Advertisement of our `target` (also the IPv6 source) to `ip_dst`.
    Advert { eth_dst: EthernetAddress, target: Ipv6Addr, ip_dst: Ipv6Addr, flags: u8 },
    /// A released IP packet.
    Packet { eth_dst: EthernetAddress, ethertype: EtherType, data: Vec<u8> },
}

/// Bytes of an ND message with one link-layer address option.
const ND_LEN: usize = ndisc::HEADER_LEN + ndisc::LLADDR_OPT_LEN;

impl Tx {
    fn len(&self) -> usize {
        ethernet::HEADER_LEN
            + match self {
                Tx::ArpRequest { .. } | Tx::ArpReply { .. } => arp::HEADER_LEN,
                Tx::Solicit { .. } | Tx::Advert { .. } => ipv6::HEADER_LEN + ND_LEN,
                Tx::Packet { data, .. } => data.len(),
            }
    }

    fn is_packet(&self) -> bool {
        matches!(self, Tx::Packet { .. })
    }

    /// Write the frame into `buf`, exactly [`Tx::len`] bytes long.
    fn emit(&self, mac: EthernetAddress, buf: &mut [u8]) {
        let (eth_dst, ethertype) = match self {
            Tx::ArpRequest { eth_dst, .. } | Tx::ArpReply { eth_dst, .. } => {
                (*eth_dst, EtherType::ARP)
            }
            Tx::Solicit { eth_dst, .. } | Tx::Advert { eth_dst, .. } => (*eth_dst, EtherType::IPV6),
            Tx::Packet { eth_dst, ethertype, .. } => (*eth_dst, *ethertype),
        };
        let eth = ethernet::Repr { src_addr: mac, dst_addr: eth_dst, ethertype };
        let mut frame = ethernet::Frame::new_unchecked(buf);
        eth.emit(&mut frame);
        let body = frame.payload_mut();
        match *self {
            Tx::ArpRequest { sender_ip, target_ip, .. } => {
                let r = arp::Repr {
                    operation: arp::Operation::Request,
                    source_hardware_addr: mac,
                    source_protocol_addr: sender_ip,
                    target_hardware_addr: EthernetAddress([0; 6]),
                    target_protocol_addr: target_ip,
                };
                r.emit(&mut arp::Packet::new_unchecked(body));
            }
            Tx::ArpReply { sender_ip, target_mac, target_ip, .. } => {
                let r = arp::Repr {
                    operation: arp::Operation::Reply,
                    source_hardware_addr: mac,
                    source_protocol_addr: sender_ip,
                    target_hardware_addr: target_mac,
                    target_protocol_addr: target_ip,
                };
                r.emit(&mut arp::Packet::new_unchecked(body));
            }
            Tx::Solicit { src, ip_dst, target, .. } => {
                let nd = ndisc::Repr::Solicit { target, source_lladdr: Some(mac) };
                emit_nd(body, src, ip_dst, &nd);
            }
            Tx::Advert { target, ip_dst, flags, .. } => {
                let nd = ndisc::Repr::Advert { flags, target, target_lladdr: Some(mac) };
                emit_nd(body, target, ip_dst, &nd);
            }
            Tx::Packet { ref data, .. } => body[..data.len()].copy_from_slice(data),
        }
    }
}

/// Write an IPv6 header (hop limit 255, RFC 4861 section 7.1) and the ND message `nd` with its
/// checksum into `body` (at least `ipv6::HEADER_LEN + nd.buffer_len()` bytes).
fn emit_nd(body: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, nd: &ndisc::Repr) {
    let ip = ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::ICMPV6,
        payload_len: nd.buffer_len(),
        hop_limit: 255,
        traffic_class: 0,
        flow_label: 0,
    };
    let mut p = ipv6::Packet::new_unchecked(&mut *body);
    ip.emit(&mut p);
    let msg = &mut p.payload_mut()[..nd.buffer_len()];
    // The caller sized `body` from `Tx::len`, so neither can fail; a failure would leave a
    // frame with a zero checksum, which receivers drop, never a panic.
    if nd.emit(msg).is_ok()
        && let Ok(mut m) = icmpv6::Packet::new_checked(msg)
    {
        m.fill_checksum(src, dst);
    }
}

/// The transmit queue: answers and solicitations (bounded by `control_limit`) and released
/// packets (bounded by the table's packet limit), in FIFO order.
#[derive(Debug)]
struct TxQueue {
    frames: VecDeque<Tx>,
    /// Answers and solicitations in `frames`.
    control: usize,
    control_limit: usize,
}

impl TxQueue {
    /// Queue a solicitation (`answer` false) or an answer, counted as sent, or as
    /// `drop_tx_full` when `control_limit` of them are waiting.
    fn push_control(&mut self, tx: Tx, answer: bool, c: &mut NeighCounters) {
        if self.control >= self.control_limit {
            c.drop_tx_full += 1;
            return;
        }
        self.control += 1;
        self.frames.push_back(tx);
        if answer {
            c.answers_sent += 1;
        } else {
            c.solicits_sent += 1;
        }
    }
}

/// The solicitation for `dst` from our `src`: to broadcast / the solicited-node group, or
/// unicast to `known` (a probe of a stale entry).
fn solicitation(dst: IpAddr, src: IpAddr, known: Option<EthernetAddress>) -> Option<Tx> {
    match (dst, src) {
        (IpAddr::V4(target_ip), IpAddr::V4(sender_ip)) => Some(Tx::ArpRequest {
            eth_dst: known.unwrap_or(EthernetAddress::BROADCAST),
            sender_ip,
            target_ip,
        }),
        (IpAddr::V6(target), IpAddr::V6(src)) => {
            let group = ndisc::solicited_node(target);
            Some(match known {
                Some(m) => Tx::Solicit { eth_dst: m, src, ip_dst: target, target },
                None => {
                    Tx::Solicit { eth_dst: ndisc::multicast_mac(group), src, ip_dst: group, target }
                }
            })
        }
        _ => None,
    }
}

/// The MAC a multicast or broadcast destination maps to, which needs no resolution.
fn group_mac(dst: IpAddr) -> Option<EthernetAddress> {
    match dst {
        IpAddr::V4(a) if a.is_broadcast() => Some(EthernetAddress::BROADCAST),
        IpAddr::V4(a) if a.is_multicast() => {
            let o = a.octets();
            Some(EthernetAddress([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]))
        }
        IpAddr::V6(a) if a.is_multicast() => Some(ndisc::multicast_mac(a)),
        _ => None,
    }
}

/// How a received frame updates an entry.
#[derive(Debug, Clone, Copy)]
struct Learn {
    /// The peer confirmed it is reachable (an ARP reply, a solicited advertisement).
    confirm: bool,
    /// The MAC may replace a different known one (ARP always; ND's Override flag).
    overrides: bool,
    /// Create the entry when there is none (a request or solicitation for our address).
    create: bool,
    /// Our address to solicit from, for a created entry.
    src: IpAddr,
}

/// What [`Neighbours::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Learned {
    Yes,
    /// An advertisement without Override named another MAC: not taken.
    Refused,
    /// No entry (and none could or should be created).
    No,
}

/// The neighbour table of a NIC with the MAC `mac` and the IP addresses `ips`.
#[derive(Debug)]
pub struct Neighbours {
    cfg: NeighConfig,
    mac: EthernetAddress,
    ips: Vec<IpAddr>,
    counters: NeighCounters,
    entries: BTreeMap<IpAddr, Slot>,
    tx: TxQueue,
    /// Packets held: in entry queues, or released and waiting in `tx`.
    held: usize,
}

impl Neighbours {
    /// An empty table.
    pub fn new(cfg: NeighConfig, mac: EthernetAddress, ips: &[IpAddr]) -> Self {
        let control_limit = cfg.capacity.saturating_mul(2).saturating_add(16);
        Neighbours {
            cfg,
            mac,
            ips: ips.to_vec(),
            counters: NeighCounters::default(),
            entries: BTreeMap::new(),
            tx: TxQueue { frames: VecDeque::new(), control: 0, control_limit },
            held: 0,
        }
    }

    /// Find the MAC of the on-link next hop `dst` for `packet` (an IP packet, no L2 header)
    /// that the NIC sends from its address `src`.
    ///
    /// A multicast or broadcast `dst` is `Ready` with its group MAC at once. `src` must be one
    /// of our addresses and of `dst`'s family, else the packet is dropped
    /// (`drop_bad_address`).
    pub fn resolve(&mut self, now: Instant, dst: IpAddr, src: IpAddr, packet: &[u8]) -> Resolve {
        if !self.addresses_ok(dst, src) {
            return Resolve::Dropped;
        }
        if let Some(m) = group_mac(dst) {
            return Resolve::Ready(m);
        }
        if let Some(slot) = self.entries.get_mut(&dst) {
            match (slot.phase, slot.mac) {
                (Phase::Reachable, Some(mac)) => {
                    // In use: the last entry a full table evicts.
                    slot.touched = now;
                    if now >= slot.deadline {
                        // Stale: use it, and re-confirm it with a unicast probe.
                        slot.phase = Phase::Probe;
                        slot.src = src;
                        slot.tries = 1;
                        slot.deadline = now.saturating_add(self.cfg.retry_interval);
                        if let Some(tx) = solicitation(dst, src, Some(mac)) {
                            self.tx.push_control(tx, false, &mut self.counters);
                        }
                    }
                    return Resolve::Ready(mac);
                }
                (Phase::Probe, Some(mac)) => return Resolve::Ready(mac),
                (Phase::Incomplete, _) => return self.enqueue(dst, packet),
                (Phase::Failed, _) if now < slot.deadline => {
                    self.counters.drop_unresolved += 1;
                    return Resolve::Dropped;
                }
                _ => {}
            }
            // A failed entry past its hold (or an inconsistent one): start over.
            self.entries.remove(&dst);
        }
        if !self.make_room() {
            self.counters.drop_table_full += 1;
            return Resolve::Dropped;
        }
        self.start(now, dst, src);
        self.enqueue(dst, packet)
    }

    /// `src` is ours and of `dst`'s family, `dst` is neither ours nor unspecified; else the
    /// refusal is counted (`drop_bad_address`).
    fn addresses_ok(&mut self, dst: IpAddr, src: IpAddr) -> bool {
        let ok = dst.is_ipv4() == src.is_ipv4()
            && self.ips.contains(&src)
            && !self.ips.contains(&dst)
            && !dst.is_unspecified();
        if !ok {
            self.counters.drop_bad_address += 1;
        }
        ok
    }

    /// A new incomplete entry for `dst` (room was made) and its first solicitation.
    fn start(&mut self, now: Instant, dst: IpAddr, src: IpAddr) {
        self.entries.insert(
            dst,
            Slot {
                phase: Phase::Incomplete,
                mac: None,
                src,
                tries: 1,
                deadline: now.saturating_add(self.cfg.retry_interval),
                touched: now,
                queue: VecDeque::new(),
            },
        );
        if let Some(tx) = solicitation(dst, src, None) {
            self.tx.push_control(tx, false, &mut self.counters);
        }
    }

    /// Start resolving the on-link `dst` (from our address `src`) before any packet needs it,
    /// as a connection's setup does: the first packets then find the MAC known instead of
    /// waiting (and overflowing the entry's queue). Does nothing for a group address, an entry
    /// that is already known or pending, or one still in its failed hold. Returns whether a
    /// resolution started; bad addresses are refused as in [`Neighbours::resolve`] (counted in
    /// `drop_bad_address`), and a table full of pending entries starts nothing.
    pub fn prepare(&mut self, now: Instant, dst: IpAddr, src: IpAddr) -> bool {
        if !self.addresses_ok(dst, src) {
            return false;
        }
        if group_mac(dst).is_some() {
            return false;
        }
        if let Some(slot) = self.entries.get(&dst) {
            let failed_and_over = slot.phase == Phase::Failed && now >= slot.deadline;
            if !failed_and_over {
                return false;
            }
            self.entries.remove(&dst);
        }
        if !self.make_room() {
            return false;
        }
        self.start(now, dst, src);
        true
    }

    /// Copy `packet` into the queue of the incomplete entry `dst`, within the bounds.
    fn enqueue(&mut self, dst: IpAddr, packet: &[u8]) -> Resolve {
        let limit = self.packet_limit();
        let Some(slot) = self.entries.get_mut(&dst) else { return Resolve::Dropped };
        if slot.queue.len() >= self.cfg.queue_per_entry || self.held >= limit {
            self.counters.drop_queue_full += 1;
            return Resolve::Dropped;
        }
        slot.queue.push_back(packet.to_vec());
        self.held += 1;
        self.counters.queued += 1;
        Resolve::Queued
    }

    /// Make room for one more entry: true when there is (evicting the oldest entry that is not
    /// incomplete if the table is full), false when every entry is incomplete.
    fn make_room(&mut self) -> bool {
        if self.entries.len() < self.cfg.capacity {
            return true;
        }
        let oldest = self
            .entries
            .iter()
            .filter(|(_, s)| s.phase != Phase::Incomplete)
            .min_by_key(|(ip, s)| (s.touched, **ip))
            .map(|(ip, _)| *ip);
        match oldest {
            Some(ip) => {
                // Not incomplete, so its queue is empty: nothing is dropped.
                self.entries.remove(&ip);
                self.entries.len() < self.cfg.capacity
            }
            None => false,
        }
    }

    /// Take one ARP or ND frame (the whole Ethernet frame) the pipeline delivered to the NIC.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        let done = match ethernet::Frame::new_checked(frame) {
            Ok(f) => {
                let (src, dst) = (f.src_addr(), f.dst_addr());
                if src == self.mac || !src.is_unicast() || !(dst == self.mac || dst.is_multicast())
                {
                    false
                } else if f.ethertype() == EtherType::ARP {
                    self.handle_arp(now, f.payload())
                } else if f.ethertype() == EtherType::IPV6 {
                    self.handle_nd(now, src, f.payload())
                } else {
                    false
                }
            }
            Err(_) => false,
        };
        if !done {
            self.counters.ignored += 1;
        }
    }

    /// An ARP packet; false when it is ignored.
    fn handle_arp(&mut self, now: Instant, body: &[u8]) -> bool {
        let Ok(p) = arp::Packet::new_checked(body) else { return false };
        let Ok(r) = arp::Repr::parse(&p) else { return false };
        let sha = r.source_hardware_addr;
        let (spa, tpa) = (r.source_protocol_addr, r.target_protocol_addr);
        if sha == self.mac
            || !sha.is_unicast()
            || self.ips.contains(&IpAddr::V4(spa))
            || spa.is_multicast()
            || spa.is_broadcast()
        {
            return false;
        }
        let for_us = r.operation == arp::Operation::Request && self.ips.contains(&IpAddr::V4(tpa));
        if spa.is_unspecified() {
            // An address probe (RFC 5227): defend our address, learn nothing.
            if !for_us {
                return false;
            }
            let tx = Tx::ArpReply { eth_dst: sha, sender_ip: tpa, target_mac: sha, target_ip: spa };
            self.tx.push_control(tx, true, &mut self.counters);
            return true;
        }
        let learn = Learn {
            confirm: r.operation == arp::Operation::Reply,
            overrides: true,
            create: for_us,
            src: IpAddr::V4(tpa),
        };
        let learned = self.learn(now, IpAddr::V4(spa), sha, learn) == Learned::Yes;
        if for_us {
            let tx = Tx::ArpReply { eth_dst: sha, sender_ip: tpa, target_mac: sha, target_ip: spa };
            self.tx.push_control(tx, true, &mut self.counters);
        }
        learned || for_us
    }

    /// An IPv6 packet that should be a Neighbor Solicitation or Advertisement, checked as RFC
    /// 4861 section 7.1 asks; false when it is ignored.
    fn handle_nd(&mut self, now: Instant, eth_src: EthernetAddress, body: &[u8]) -> bool {
        let Ok(ip) = ipv6::Packet::new_checked(body) else { return false };
        if ip.next_header() != IpProtocol::ICMPV6 || ip.hop_limit() != 255 {
            return false;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let msg = ip.payload();
        let Ok(icmp) = icmpv6::Packet::new_checked(msg) else { return false };
        if !icmp.verify_checksum(src, dst) || src.is_multicast() {
            return false;
        }
        let Ok(nd) = ndisc::Repr::parse(msg) else { return false };
        match nd {
            ndisc::Repr::Solicit { target, source_lladdr } => {
                if !self.ips.contains(&IpAddr::V6(target))
                    || (dst != target && dst != ndisc::solicited_node(target))
                {
                    return false;
                }
                if src.is_unspecified() {
                    // Duplicate address detection of our address: answer all nodes.
                    if source_lladdr.is_some() || !dst.is_multicast() {
                        return false;
                    }
                    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                    let tx = Tx::Advert {
                        eth_dst: ndisc::multicast_mac(all),
                        target,
                        ip_dst: all,
                        flags: ndisc::FLAG_OVERRIDE,
                    };
                    self.tx.push_control(tx, true, &mut self.counters);
                    return true;
                }
                if self.ips.contains(&IpAddr::V6(src)) {
                    return false;
                }
                if let Some(m) = source_lladdr {
                    if !m.is_unicast() || m == self.mac {
                        return false;
                    }
                    let learn =
                        Learn { confirm: false, overrides: true, create: true, src: target.into() };
                    self.learn(now, IpAddr::V6(src), m, learn);
                }
                let tx = Tx::Advert {
                    eth_dst: source_lladdr.unwrap_or(eth_src),
                    target,
                    ip_dst: src,
                    flags: ndisc::FLAG_SOLICITED | ndisc::FLAG_OVERRIDE,
                };
                self.tx.push_control(tx, true, &mut self.counters);
                true
            }
            ndisc::Repr::Advert { flags, target, target_lladdr } => {
                let solicited = flags & ndisc::FLAG_SOLICITED != 0;
                if (dst.is_multicast() && solicited) || self.ips.contains(&IpAddr::V6(target)) {
                    return false;
                }
                let Some(slot) = self.entries.get_mut(&IpAddr::V6(target)) else { return false };
                let Some(m) = target_lladdr else {
                    // No address: only a confirmation of the one we hold.
                    if solicited && slot.mac.is_some() && slot.phase != Phase::Failed {
                        slot.phase = Phase::Reachable;
                        slot.tries = 0;
                        slot.deadline = now.saturating_add(self.cfg.reachable);
                        slot.touched = now;
                        self.counters.learned += 1;
                        return true;
                    }
                    return false;
                };
                if !m.is_unicast() || m == self.mac {
                    return false;
                }
                let learn = Learn {
                    confirm: solicited,
                    overrides: flags & ndisc::FLAG_OVERRIDE != 0,
                    create: false,
                    src: IpAddr::V6(target),
                };
                self.learn(now, IpAddr::V6(target), m, learn) == Learned::Yes
            }
        }
    }

    /// Record that `ip` is at `mac` (counted in `learned`); an incomplete entry releases its
    /// queue to the transmit queue, framed.
    fn learn(&mut self, now: Instant, ip: IpAddr, mac: EthernetAddress, how: Learn) -> Learned {
        let until = if how.confirm { now.saturating_add(self.cfg.reachable) } else { now };
        if !self.entries.contains_key(&ip) {
            if !how.create || !self.make_room() {
                return Learned::No;
            }
            let slot = Slot {
                phase: Phase::Reachable,
                mac: Some(mac),
                src: how.src,
                tries: 0,
                deadline: until,
                touched: now,
                queue: VecDeque::new(),
            };
            self.entries.insert(ip, slot);
            self.counters.learned += 1;
            return Learned::Yes;
        }
        let Some(slot) = self.entries.get_mut(&ip) else { return Learned::No };
        let known = match slot.phase {
            Phase::Reachable | Phase::Probe => slot.mac,
            Phase::Incomplete | Phase::Failed => None,
        };
        if let Some(old) = known
            && old != mac
            && !how.overrides
        {
            // RFC 4861 section 7.2.5: keep the address, but it is no longer confirmed.
            if slot.phase == Phase::Reachable {
                slot.deadline = slot.deadline.min(now);
            }
            return Learned::Refused;
        }
        let changed = known != Some(mac);
        let was = slot.phase;
        slot.mac = Some(mac);
        slot.touched = now;
        if how.confirm || changed || was == Phase::Incomplete || was == Phase::Failed {
            slot.phase = Phase::Reachable;
            slot.tries = 0;
            slot.deadline = until;
        }
        // Else: the same address, unconfirmed; a reachable or probing entry stays as it is.
        self.counters.learned += 1;
        let ethertype = if ip.is_ipv4() { EtherType::IPV4 } else { EtherType::IPV6 };
        while let Some(data) = slot.queue.pop_front() {
            self.tx.frames.push_back(Tx::Packet { eth_dst: mac, ethertype, data });
            self.counters.released += 1;
        }
        Learned::Yes
    }

    /// Write the next frame to send into `buf`; its length, or `None` when nothing is due.
    ///
    /// A frame longer than `buf` is dropped (`drop_too_big`) and the next one is tried.
    pub fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        while let Some(tx) = self.tx.frames.pop_front() {
            if tx.is_packet() {
                self.held = self.held.saturating_sub(1);
            } else {
                self.tx.control = self.tx.control.saturating_sub(1);
            }
            let n = tx.len();
            match buf.get_mut(..n) {
                Some(out) => {
                    tx.emit(self.mac, out);
                    return Some(n);
                }
                None => self.counters.drop_too_big += 1,
            }
        }
        None
    }

    /// When the table next has work: [`Instant::ZERO`] while frames wait for
    /// [`Neighbours::poll_transmit`], else the earliest retry, failure or end of a failed hold
    /// ([`Neighbours::handle_timeout`]). A scan of the table (entries are few; this is not per
    /// packet).
    pub fn poll_timeout(&self) -> Option<Instant> {
        // Frames waiting to go out are due now ([`Instant::ZERO`]: "as soon as you can").
        let now = (self.tx_len() > 0).then_some(Instant::ZERO);
        let timers =
            self.entries.values().filter(|s| s.phase != Phase::Reachable).map(|s| s.deadline);
        timers.chain(now).min()
    }

    /// Run the timers due at `now`: retry solicitations, fail resolutions and probes that
    /// sent `solicit_tries` without an answer, remove failed entries whose hold ended.
    /// Spurious calls are no-ops.
    pub fn handle_timeout(&mut self, now: Instant) {
        let cfg = self.cfg;
        let tries = cfg.solicit_tries.max(1);
        let (tx, counters, held) = (&mut self.tx, &mut self.counters, &mut self.held);
        self.entries.retain(|ip, slot| {
            if slot.phase == Phase::Reachable || now < slot.deadline {
                return true;
            }
            if slot.phase == Phase::Failed {
                return false;
            }
            if slot.tries < tries {
                slot.tries += 1;
                slot.deadline = now.saturating_add(cfg.retry_interval);
                let known = if slot.phase == Phase::Probe { slot.mac } else { None };
                if let Some(s) = solicitation(*ip, slot.src, known) {
                    tx.push_control(s, false, counters);
                }
                return true;
            }
            counters.failed += 1;
            let n = slot.queue.len();
            counters.drop_unresolved += n as u64;
            *held = held.saturating_sub(n);
            slot.queue = VecDeque::new();
            slot.phase = Phase::Failed;
            slot.mac = None;
            slot.touched = now;
            slot.deadline = now.saturating_add(cfg.failed_hold);
            !cfg.failed_hold.is_zero()
        });
    }

    /// The counters.
    pub fn counters(&self) -> &NeighCounters {
        &self.counters
    }

    /// The settings.
    pub fn config(&self) -> &NeighConfig {
        &self.cfg
    }

    /// Our MAC.
    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }

    /// Our IP addresses.
    pub fn ips(&self) -> &[IpAddr] {
        &self.ips
    }

    /// Entries in the table (at most `capacity`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The neighbours whose MAC is known (reachable, stale or being probed), in address
    /// order: what a takeover carries ([`Self::adopt_known`]).
    pub fn known(&self) -> Vec<(IpAddr, EthernetAddress)> {
        let known = |s: &Slot| matches!(s.phase, Phase::Reachable | Phase::Probe);
        self.entries
            .iter()
            .filter(|(_, s)| known(s))
            .filter_map(|(ip, s)| Some((*ip, s.mac?)))
            .collect()
    }

    /// Enter neighbours another table knew ([`Self::known`]) as stale entries: used at once,
    /// confirmed by the usual probe. Counted in `learned`; entries beyond the capacity or of
    /// a family none of our addresses has are left out.
    pub fn adopt_known(&mut self, now: Instant, known: &[(IpAddr, EthernetAddress)]) {
        for &(ip, mac) in known {
            let Some(&src) = self.ips.iter().find(|a| a.is_ipv4() == ip.is_ipv4()) else {
                continue;
            };
            if self.ips.contains(&ip) || !mac.is_unicast() {
                continue;
            }
            let how = Learn { confirm: false, overrides: true, create: true, src };
            let _ = self.learn(now, ip, mac, how);
        }
    }

    /// The entry of `ip`, with its state at `now` (reachable or stale).
    pub fn entry(&self, now: Instant, ip: IpAddr) -> Option<Entry> {
        self.entries.get(&ip).map(|s| Self::describe(now, ip, s))
    }

    /// Every entry, in address order, with its state at `now`: a status dump.
    pub fn entries(&self, now: Instant) -> impl Iterator<Item = Entry> + '_ {
        self.entries.iter().map(move |(ip, s)| Self::describe(now, *ip, s))
    }

    fn describe(now: Instant, ip: IpAddr, s: &Slot) -> Entry {
        let state = match s.phase {
            Phase::Incomplete => State::Incomplete,
            Phase::Reachable if now >= s.deadline => State::Stale,
            Phase::Reachable => State::Reachable,
            Phase::Probe => State::Probe,
            Phase::Failed => State::Failed,
        };
        Entry { ip, mac: s.mac, state, queued: s.queue.len(), tries: s.tries }
    }

    /// Frames waiting in the transmit queue.
    pub fn tx_len(&self) -> usize {
        self.tx.frames.len()
    }

    /// Packets held: queued in incomplete entries, or released and waiting in the transmit
    /// queue. At most [`Neighbours::packet_limit`].
    pub fn held_packets(&self) -> usize {
        self.held
    }

    /// Most packets held at once: `capacity * queue_per_entry`.
    pub fn packet_limit(&self) -> usize {
        self.cfg.capacity.saturating_mul(self.cfg.queue_per_entry)
    }

    /// Most answers and solicitations waiting in the transmit queue at once:
    /// `2 * capacity + 16`.
    pub fn control_limit(&self) -> usize {
        self.tx.control_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_neighbours_carry_to_another_table_as_stale() {
        let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let ips: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap()];
        let mut a = Neighbours::new(NeighConfig::default(), mac, &ips);
        let peer = EthernetAddress([2, 0, 0, 0, 0, 2]);
        let how = Learn { confirm: true, overrides: true, create: true, src: ips[0] };
        let t = Instant::from_nanos(1_000);
        a.learn(t, "10.0.0.2".parse().unwrap(), peer, how);
        let known = a.known();
        assert_eq!(known, vec![("10.0.0.2".parse().unwrap(), peer)]);
        let mut b = Neighbours::new(NeighConfig::default(), mac, &ips);
        // An IPv6 neighbour has no address of its family here: left out.
        let v6 = ("fe80::2".parse().unwrap(), peer);
        b.adopt_known(t, &[known[0], v6]);
        let e = b.entry(t, known[0].0).expect("carried");
        assert_eq!((e.mac, e.state), (Some(peer), State::Stale));
        assert!(b.entry(t, v6.0).is_none());
    }
}
