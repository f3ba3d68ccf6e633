//! RoCEv2 over kernel UDP sockets: the transport that carries a [`Rnic`]'s packets between
//! processes and hosts.
//!
//! The engine speaks whole IP packets (IP + UDP + BTH ... + ICRC); a UDP socket speaks UDP
//! payloads. On the way out, [`RoceTransport::send`] strips the IP and UDP headers of each
//! packet the engine emits and sends the rest to the packet's destination address and port
//! **from a socket bound to the packet's UDP source port**, so the wire carries the QP-hash
//! source port the engine chose (and the ICRC, which covers that port, stays right). On the way
//! in, [`RoceTransport::recv`] puts back an IP header (IPv4 with identification 0, DF and TTL 64,
//! or IPv6) and a UDP header in front of each datagram, in place, and hands the packet to
//! [`Rnic::handle_packet`]. The IP TOS / traffic class byte travels both ways (IP_TOS sockopt on
//! send, IP_RECVTOS / IPV6_RECVTCLASS on receive), so ECN marks (CE) reach the engine.
//!
//! Batching: `sendmmsg(2)` / `recvmmsg(2)` of up to [`TransportOpts::batch`] datagrams, and,
//! where the kernel has them, UDP GSO (consecutive equal-sized packets to one destination from
//! one socket leave as one `UDP_SEGMENT` send that the kernel cuts into datagrams) and UDP GRO
//! (the kernel hands over several datagrams of one flow in one buffer with their size in a
//! control message).
//!
//! Sending never blocks and never loses an engine packet silently: when the socket buffer is
//! full (EAGAIN / ENOBUFS) the packets not taken stay queued inside the transport and go first
//! on the next call (`tx_retry` counts those occasions).
#![allow(
    unsafe_code,
    reason = "sendmmsg/recvmmsg/setsockopt/ppoll via libc; each block has a SAFETY comment"
)]

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use serde::Serialize;
use snic_rdma::Rnic;
use snic_rdma::pkt::MAX_PACKET_LEN;
use snic_rdma::verbs::MAX_SGE;
use snic_time::{Clock, Instant};
use snic_wire::ipv4::{self, IpProtocol};
use snic_wire::{ipv6, udp};

use snic_io::sys::poll::poll_in;
use snic_io::sys::sock::{
    empty_iovec, empty_mmsghdr, empty_sockaddr, from_sockaddr, is_full, is_refused_by_network,
    set_buffer, setsockopt_int, to_sockaddr,
};

/// Most datagrams (or GSO buffers) moved by one `sendmmsg` / `recvmmsg`; bigger
/// [`TransportOpts::batch`] values are clamped to it (the call's arrays live on the stack).
pub const MAX_BATCH: usize = 128;

/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS` on older kernels).
pub const GSO_MAX_SEGS: usize = 64;

/// Most UDP payload bytes in one GSO send: one IPv4 datagram's worth (65535 - 20 - 8), which
/// also fits IPv6.
pub const GSO_MAX_BYTES: usize = 65_507;

/// Socket buffer size asked for (send and receive): room for many full batches of
/// 4 KiB-MTU packets, so bursts of a long message do not overflow on loopback.
pub const SOCKET_BUFFER: libc::c_int = 16 << 20;

/// Headroom kept in front of every receive buffer for the rebuilt IP and UDP headers (IPv6 40 +
/// UDP 8).
pub(crate) const RX_ROOM: usize = 48;

/// Bytes of one transmit slot: one whole engine packet.
const TX_SLOT: usize = MAX_PACKET_LEN;

/// How the transport batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TransportOpts {
    /// Datagrams per `sendmmsg` / `recvmmsg` (1..=[`MAX_BATCH`]); also the most packets taken
    /// from the engine per [`RoceTransport::send`].
    pub batch: usize,
    /// Coalesce equal-sized consecutive packets into UDP GSO sends.
    pub gso: bool,
    /// Ask the kernel for UDP GRO on the receive socket.
    pub gro: bool,
}

impl Default for TransportOpts {
    fn default() -> Self {
        TransportOpts { batch: 64, gso: true, gro: true }
    }
}

/// Counters of a [`RoceTransport`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TransportStats {
    /// Datagrams handed to the kernel (each GSO segment counts).
    pub tx_datagrams: u64,
    /// UDP payload bytes handed to the kernel.
    pub tx_bytes: u64,
    /// Datagrams received and handed to the engine (each GRO segment counts).
    pub rx_datagrams: u64,
    /// UDP payload bytes received.
    pub rx_bytes: u64,
    /// GSO sends (messages carrying more than one segment).
    pub gso_sends: u64,
    /// Receive buffers that held more than one datagram (GRO).
    pub gro_buffers: u64,
    /// Times the socket buffer was full and packets stayed queued for the next call.
    pub tx_retry: u64,
    /// UDP source ports that could not be bound (their packets leave from the receive socket,
    /// with the ICRC recomputed for that port).
    pub sport_fallbacks: u64,
    /// GSO turned off because the kernel refused a GSO send.
    pub gso_fallbacks: u64,
    /// Engine packets dropped because the kernel refused them with a hard error (the error is
    /// also returned).
    pub tx_errors: u64,
    /// Engine packets the kernel refused for a reason a network can have at any time (a
    /// firewall's `EPERM`/`EACCES`, no route or host `EHOSTUNREACH`/`ENETUNREACH`/`ENETDOWN`,
    /// an ICMP error reported as `ECONNREFUSED`): counted as lost on the wire, not returned as
    /// an error. The RC protocol retransmits them. Only a refusal of the first message of a
    /// `sendmmsg` is reported as an error; a later one shows as a short count, and that message
    /// is sent again on the next call (counted in `tx_retry`).
    pub tx_lost: u64,
    /// Engine packets that were not IPv4/IPv6 + UDP of our family (a bug upstream; dropped).
    pub tx_malformed: u64,
    /// Datagrams larger than a receive buffer (dropped).
    pub rx_truncated: u64,
    /// Datagrams from a sender address of another family (dropped).
    pub rx_bad_peer: u64,
}

/// One transmit socket and the TOS byte it currently sends with.
#[derive(Debug)]
struct TxSock {
    sock: UdpSocket,
    /// The IP_TOS / IPV6_TCLASS value set on the socket (`None`: not set yet).
    tos: Option<u8>,
}

/// One engine packet waiting to be sent: its UDP payload (`len` bytes) starts in transmit
/// slot `i` at `off`; all of it is there unless `sg` says the rest is in engine memory.
#[derive(Debug, Clone, Copy)]
struct TxMeta {
    sock: usize,
    dst: SocketAddr,
    tos: u8,
    off: usize,
    len: usize,
    sg: Option<SgTail>,
}

/// The part of a scatter-gather packet that is not in its transmit slot: the slot holds
/// `in_slot` bytes (the RoCE headers), then come the payload ranges of engine memory and the
/// trailer (pad and ICRC).
#[derive(Debug, Clone, Copy)]
struct SgTail {
    in_slot: usize,
    ranges: [(u64, u32); MAX_SGE],
    nranges: usize,
    trailer: [u8; 8],
    trailer_len: usize,
}

impl TxMeta {
    /// Bytes of the packet in its transmit slot.
    fn in_slot(&self) -> usize {
        self.sg.map_or(self.len, |g| g.in_slot)
    }
}

/// Most iovecs of one packet: headers, one per SGE, trailer.
const MAX_IOV_PER_PKT: usize = MAX_SGE + 2;

/// Stands in for payload memory that went away while its packet waited (it then leaves with a
/// wrong ICRC and is dropped by the peer, which gets it again by retransmission).
static ZEROS: [u8; MAX_PACKET_LEN] = [0; MAX_PACKET_LEN];

/// RoCEv2 carried by kernel UDP sockets (see the module doc).
#[derive(Debug)]
pub struct RoceTransport {
    local: SocketAddr,
    opts: TransportOpts,
    rx: UdpSocket,
    gro_on: bool,
    gso_on: bool,
    /// `socks[0]` is the receive socket (a duplicate descriptor): the fallback sender.
    socks: Vec<TxSock>,
    sport_map: HashMap<u16, usize>,
    /// The last `sock_for` answer (source port, socket index).
    last_sport: Option<(u16, usize)>,
    tx_buf: Vec<u8>,
    pend: Vec<TxMeta>,
    rx_buf: Vec<u8>,
    rx_slot: usize,
    rx_scratch: RxScratch,
    stats: TransportStats,
}

/// Most transmit sockets (one per UDP source port in use); past it packets use the fallback.
const MAX_TX_SOCKETS: usize = 4096;

impl RoceTransport {
    /// Bind the receive socket on `local` (a specific address, the engine's `local_ip`, and the
    /// RoCE port the engine uses: 4791 on a real network). Non-blocking, TOS/traffic class
    /// reported on receive, UDP GRO when `opts.gro` and the kernel has it, big socket buffers.
    pub fn bind(local: SocketAddr, opts: TransportOpts) -> io::Result<Self> {
        Self::bind_rx(local, opts, None)
    }

    /// [`Self::bind`] for two processes of one host that use the same address (one GID, e.g.
    /// `::1`, the only IPv6 loopback address) and both take UDP port 4791 there, so that
    /// RoCEv2's destination port stays 4791 on the wire both ways: the receive socket is bound
    /// with `SO_REUSEPORT` (the other process's must be too), and with `from` set it is also
    /// connected to `from`, the peer's address and the UDP source port its QP sends from
    /// ([`snic_rdma::pkt::sport_for`] of its QPN and ours). The kernel hands a datagram to the
    /// socket whose connection matches its source before any unconnected one, so the peer's
    /// packets come to the connected socket and everything else (the packets this process
    /// sends to the peer) to the peer's unconnected one. One side of each pair connects, the
    /// other does not; the two QPs must send from different source ports (different QPNs).
    pub fn bind_shared(
        local: SocketAddr,
        from: Option<SocketAddr>,
        opts: TransportOpts,
    ) -> io::Result<Self> {
        Self::bind_rx(local, opts, Some(from))
    }

    /// [`Self::bind`] (`shared` `None`) or [`Self::bind_shared`] (`Some(from)`).
    fn bind_rx(
        local: SocketAddr,
        opts: TransportOpts,
        shared: Option<Option<SocketAddr>>,
    ) -> io::Result<Self> {
        if local.ip().is_unspecified() || local.port() == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "RoCE transport needs a specific local address (the GID) and port (the RoCE port)",
            ));
        }
        let rx = match shared {
            None => UdpSocket::bind(local)?,
            Some(from) => {
                let s = bind_reuseport(local)?;
                if let Some(f) = from {
                    s.connect(f)?;
                }
                s
            }
        };
        Self::adopt(rx, opts)
    }

    /// A transport over an already bound receive socket (one handed over by another process
    /// in a takeover), set up as [`Self::bind`] sets up its own.
    pub fn adopt(rx: UdpSocket, opts: TransportOpts) -> io::Result<Self> {
        let local = rx.local_addr()?;
        rx.set_nonblocking(true)?;
        let fd = rx.as_raw_fd();
        set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUFFER);
        set_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SOCKET_BUFFER);
        if local.is_ipv4() {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
            // DF and so identification 0: the IPv4 header the engine's ICRC assumed.
            let _ =
                setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO);
        } else {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        }
        let gro_on = opts.gro && setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        let batch = opts.batch.clamp(1, MAX_BATCH);
        let opts = TransportOpts { batch, ..opts };
        let rx_slot = RX_ROOM + if gro_on { 65_536 } else { MAX_PACKET_LEN };
        let fallback = TxSock { sock: rx.try_clone()?, tos: None };
        Ok(RoceTransport {
            local,
            opts,
            rx,
            gro_on,
            gso_on: opts.gso,
            socks: vec![fallback],
            sport_map: HashMap::new(),
            last_sport: None,
            tx_buf: vec![0; batch * TX_SLOT],
            pend: Vec::with_capacity(batch),
            rx_buf: vec![0; batch * rx_slot],
            rx_slot,
            rx_scratch: RxScratch::new(),
            stats: TransportStats::default(),
        })
    }

    /// The bound receive address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The options in force (batch clamped; `gso` false once the kernel refused GSO).
    pub fn opts(&self) -> TransportOpts {
        TransportOpts { gso: self.gso_on, gro: self.gro_on, ..self.opts }
    }

    /// Counters.
    pub fn stats(&self) -> TransportStats {
        self.stats
    }

    /// Engine packets queued because the socket buffer was full (sent first next time).
    pub fn tx_pending(&self) -> usize {
        self.pend.len()
    }

    /// The receive socket (to hand it to another process in a takeover).
    pub fn rx_socket(&self) -> &UdpSocket {
        &self.rx
    }

    /// The receive socket's descriptor (to wait on it together with others).
    pub fn rx_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// Take up to a batch of packets from the engine (`rnic.poll_transmit`) and send them.
    /// Returns the datagrams handed to the kernel by this call.
    ///
    /// Payloads are not copied: the engine writes only the headers into the transmit slot and
    /// each datagram goes out as iovecs [headers, payload ranges of engine memory, pad + ICRC].
    pub fn send(&mut self, rnic: &mut Rnic, now: Instant) -> io::Result<usize> {
        while self.pend.len() < self.opts.batch {
            let i = self.pend.len();
            let slot = &mut self.tx_buf[i * TX_SLOT..(i + 1) * TX_SLOT];
            let Some(sg) = rnic.poll_transmit_sg(now, slot) else { break };
            match self.take_sg_packet(i, &sg, rnic.mem()) {
                Some(m) => self.pend.push(m),
                None => self.stats.tx_malformed += 1,
            }
        }
        if self.pend.is_empty() {
            return Ok(0);
        }
        self.flush(Some(rnic.mem()))
    }

    /// [`Self::take_packet`] for a packet the engine built for a scatter-gather send: its
    /// headers are in slot `i`. Packets without payload, and those whose source port must be
    /// rewritten (the ICRC changes), are completed in the slot; the others keep their payload
    /// in engine memory.
    fn take_sg_packet(
        &mut self,
        i: usize,
        sg: &snic_rdma::pkt::TxSg,
        mem: &snic_dma::AddressSpace,
    ) -> Option<TxMeta> {
        let base = i * TX_SLOT;
        if sg.len > TX_SLOT || sg.hdr_len > sg.len {
            return None;
        }
        let h = out_headers(&self.tx_buf[base..base + sg.len])?;
        let fallback = self.sock_for(h.sport) == 0 && h.sport != self.local.port();
        if sg.payload().is_empty() || fallback {
            sg.assemble(mem, &mut self.tx_buf[base..base + sg.len])?;
            return self.take_packet(i, sg.len);
        }
        if h.dst.is_ipv4() != self.local.is_ipv4() || sg.hdr_len < h.off {
            return None;
        }
        // Check now that the ranges are memory (they are read again at the send).
        if sg.payload().iter().any(|&(a, l)| mem.slice(a, l as usize).is_err()) {
            return None;
        }
        let m = self.take_packet_parsed(i, h)?;
        Some(TxMeta {
            sg: Some(SgTail {
                in_slot: sg.hdr_len - h.off,
                ranges: sg.ranges,
                nranges: sg.npayload,
                trailer: sg.trailer,
                trailer_len: sg.trailer_len,
            }),
            ..m
        })
    }

    /// [`Self::send`] with any packet source: `next` writes one whole IP packet into the
    /// buffer it is given and returns its length, or `None` when it has nothing more. Used by
    /// tests and tools that inject hand-built packets.
    pub fn send_from(
        &mut self,
        mut next: impl FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<usize> {
        while self.pend.len() < self.opts.batch {
            let i = self.pend.len();
            let slot = &mut self.tx_buf[i * TX_SLOT..(i + 1) * TX_SLOT];
            let Some(n) = next(slot) else { break };
            match self.take_packet(i, n.min(TX_SLOT)) {
                Some(m) => self.pend.push(m),
                None => self.stats.tx_malformed += 1,
            }
        }
        if self.pend.is_empty() {
            return Ok(0);
        }
        self.flush(None)
    }

    /// Read the headers of the packet in slot `i` and find (or open) its socket.
    fn take_packet(&mut self, i: usize, n: usize) -> Option<TxMeta> {
        let base = i * TX_SLOT;
        let h = out_headers(&self.tx_buf[base..base + n])?;
        self.take_packet_parsed(i, h)
    }

    /// [`Self::take_packet`] with the headers read.
    fn take_packet_parsed(&mut self, i: usize, h: OutHeaders) -> Option<TxMeta> {
        let base = i * TX_SLOT;
        let n = h.off + h.len;
        if h.dst.is_ipv4() != self.local.is_ipv4() {
            return None;
        }
        let sock = self.sock_for(h.sport);
        if sock == 0 && h.sport != self.local.port() {
            // The datagram leaves with the receive socket's port: make the UDP header and the
            // ICRC (which covers the source port) say so.
            let pkt = &mut self.tx_buf[base..base + n];
            let u = h.off - udp::HEADER_LEN;
            pkt[u..u + 2].copy_from_slice(&self.local.port().to_be_bytes());
            snic_wire::roce::icrc::fill(pkt).ok()?;
        }
        Some(TxMeta {
            sock,
            dst: SocketAddr::new(h.dst, h.dport),
            tos: h.tos,
            off: base + h.off,
            len: h.len,
            sg: None,
        })
    }

    /// The socket bound to (local ip, `sport`), opened on first use; 0 (the receive socket)
    /// when the port cannot be bound.
    fn sock_for(&mut self, sport: u16) -> usize {
        // A QP sends every packet from one port: the last answer saves two hash lookups per
        // packet (2-3% of a sending benchmark's CPU).
        if let Some((p, i)) = self.last_sport
            && p == sport
        {
            return i;
        }
        let i = self.sock_for_lookup(sport);
        self.last_sport = Some((sport, i));
        i
    }

    /// [`Self::sock_for`] without the one-entry cache.
    fn sock_for_lookup(&mut self, sport: u16) -> usize {
        if let Some(&i) = self.sport_map.get(&sport) {
            return i;
        }
        let i = if sport == self.local.port() || self.socks.len() >= MAX_TX_SOCKETS {
            0
        } else {
            match open_tx_socket(SocketAddr::new(self.local.ip(), sport)) {
                Ok(sock) => {
                    self.socks.push(TxSock { sock, tos: None });
                    self.socks.len() - 1
                }
                Err(_) => 0,
            }
        };
        if i == 0 && sport != self.local.port() {
            self.stats.sport_fallbacks += 1;
        }
        self.sport_map.insert(sport, i);
        i
    }

    /// Set the socket's TOS / traffic class when it differs from what it sends with now.
    fn set_tos(&mut self, sock: usize, tos: u8) {
        let s = &mut self.socks[sock];
        if s.tos == Some(tos) {
            return;
        }
        let fd = s.sock.as_raw_fd();
        let r = if self.local.is_ipv4() {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TOS, libc::c_int::from(tos))
        } else {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, libc::c_int::from(tos))
        };
        // A refused TOS only loses the marks, not the packet; try again next time.
        s.tos = r.ok().map(|()| tos);
    }

    /// Send the queued packets: groups of one socket and TOS, each group one `sendmmsg` of
    /// GSO runs (or single datagrams). Leaves what the kernel did not take at the front of the
    /// queue.
    /// `mem` is the engine memory the scatter-gather packets' payloads are in.
    fn flush(&mut self, mem: Option<&snic_dma::AddressSpace>) -> io::Result<usize> {
        let mut done = 0;
        let mut sent = 0;
        let mut hard_err = None;
        let mut runs = [Run::default(); MAX_BATCH];
        while done < self.pend.len() {
            let (sock, tos) = (self.pend[done].sock, self.pend[done].tos);
            let mut end = done;
            while end < self.pend.len() && self.pend[end].sock == sock && self.pend[end].tos == tos
            {
                end += 1;
            }
            self.set_tos(sock, tos);
            let nruns = plan_runs(&self.pend[done..end], self.gso_on, &mut runs);
            let fd = self.socks[sock].sock.as_raw_fd();
            let r = send_runs(fd, &self.tx_buf, mem, &self.pend[done..end], &runs[..nruns]);
            match r {
                Ok(n) => {
                    for run in &runs[..n] {
                        count_sent(&mut self.stats, &self.pend[done + run.start..][..run.count]);
                    }
                    let pkts: usize = runs[..n].iter().map(|r| r.count).sum();
                    done += pkts;
                    sent += pkts;
                    if n < nruns {
                        self.stats.tx_retry += 1;
                        break;
                    }
                }
                Err(e) if is_full(&e) => {
                    self.stats.tx_retry += 1;
                    break;
                }
                Err(e)
                    if runs[0].count > 1
                        && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) =>
                {
                    // The kernel or the device refuses GSO: send datagram by datagram from now on.
                    self.gso_on = false;
                    self.stats.gso_fallbacks += 1;
                }
                Err(e) if is_refused_by_network(&e) => {
                    // The network said no to this message, as a lossy link would: its packets
                    // are lost (counted), the engine's retransmission recovers them.
                    self.stats.tx_lost += runs[0].count as u64;
                    done += runs[0].count;
                }
                Err(e) => {
                    // A hard error for the first message: drop its packets (counted) and go on
                    // with the rest; the error is returned once the queue is handled.
                    self.stats.tx_errors += runs[0].count as u64;
                    done += runs[0].count;
                    hard_err.get_or_insert(e);
                }
            }
        }
        self.compact(done);
        match hard_err {
            Some(e) => Err(e),
            None => Ok(sent),
        }
    }

    /// Drop the first `done` queued packets; move the rest (and their bytes) to the front.
    fn compact(&mut self, done: usize) {
        if done == 0 {
            return;
        }
        let rest = self.pend.len() - done;
        for k in 0..rest {
            let m = self.pend[done + k];
            let in_slot = m.off % TX_SLOT;
            let src = (done + k) * TX_SLOT + in_slot;
            let dst = k * TX_SLOT + in_slot;
            self.tx_buf.copy_within(src..src + m.in_slot(), dst);
            self.pend[k] = TxMeta { off: dst, ..m };
        }
        self.pend.truncate(rest);
    }

    /// Receive one `recvmmsg` batch and hand every datagram, as a whole IP packet, to
    /// `rnic.handle_packet`. Returns the datagrams handled.
    pub fn recv(&mut self, rnic: &mut Rnic, now: Instant) -> io::Result<usize> {
        self.recv_with(|pkt| rnic.handle_packet(now, pkt))
    }

    /// [`Self::recv`] with any packet sink: `f` gets each received datagram rebuilt as a whole
    /// IP packet (IP + UDP headers, source = the sender, destination = our bound address).
    pub fn recv_with(&mut self, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        let n = self.opts.batch;
        let fd = self.rx.as_raw_fd();
        let got = recv_batch(fd, &mut self.rx_buf, self.rx_slot, n, &mut self.rx_scratch)?;
        let mut handled = 0;
        for i in 0..got {
            let m = self.rx_scratch.metas[i];
            if m.truncated {
                self.stats.rx_truncated += 1;
                continue;
            }
            let Some(peer) = m.peer.filter(|p| p.is_ipv4() == self.local.is_ipv4()) else {
                self.stats.rx_bad_peer += 1;
                continue;
            };
            let seg = if m.seg == 0 { m.len.max(1) } else { m.seg };
            if m.len > seg {
                self.stats.gro_buffers += 1;
            }
            let base = i * self.rx_slot + RX_ROOM;
            let mut off = 0;
            // An empty datagram still goes in once (the engine counts it as malformed).
            loop {
                let len = seg.min(m.len - off);
                let start = base + off;
                // The headers go over the tail of the previous segment, already handled.
                let hl = write_in_headers(&mut self.rx_buf, start, len, peer, self.local, m.tos);
                f(&self.rx_buf[start - hl..start + len]);
                self.stats.rx_datagrams += 1;
                self.stats.rx_bytes += len as u64;
                handled += 1;
                off += len;
                if off >= m.len {
                    break;
                }
            }
        }
        Ok(handled)
    }

    /// Wait until the receive socket is readable or `timeout` passes (`None`: no limit).
    /// Returns true when it is readable.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        poll_in(self.rx.as_raw_fd(), timeout)
    }

    /// Run the engine over this transport in a busy loop: receive, run due timers, send; until
    /// `until(rnic)` holds (returns true) or `deadline` has passed on `clock` (returns false).
    pub fn drive(
        &mut self,
        rnic: &mut Rnic,
        clock: &dyn Clock,
        mut until: impl FnMut(&mut Rnic) -> bool,
        deadline: Duration,
    ) -> io::Result<bool> {
        let end = clock.now() + deadline;
        loop {
            let now = clock.now();
            let got = self.recv(rnic, now)?;
            if rnic.poll_timeout().is_some_and(|t| t <= now) {
                rnic.handle_timeout(now);
            }
            let sent = self.send(rnic, now)?;
            if until(rnic) {
                return Ok(true);
            }
            if now >= end {
                return Ok(false);
            }
            if got == 0 && sent == 0 {
                std::hint::spin_loop();
            }
        }
    }
}

fn count_sent(stats: &mut TransportStats, pkts: &[TxMeta]) {
    stats.tx_datagrams += pkts.len() as u64;
    stats.tx_bytes += pkts.iter().map(|p| p.len as u64).sum::<u64>();
    if pkts.len() > 1 {
        stats.gso_sends += 1;
    }
}

/// What the transport needs from an outgoing engine packet's IP and UDP headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OutHeaders {
    dst: IpAddr,
    sport: u16,
    dport: u16,
    tos: u8,
    /// Offset of the UDP payload.
    off: usize,
    /// UDP payload length.
    len: usize,
}

/// Read an outgoing IPv4/IPv6 + UDP packet's headers; `None` if it is not one.
fn out_headers(p: &[u8]) -> Option<OutHeaders> {
    let (dst, tos, l4) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < ipv4::HEADER_LEN || p.len() < ihl || p[9] != IpProtocol::UDP.0 {
                return None;
            }
            let d: [u8; 4] = p[16..20].try_into().ok()?;
            (IpAddr::V4(Ipv4Addr::from(d)), p[1], ihl)
        }
        6 => {
            if p.len() < ipv6::HEADER_LEN || p[6] != IpProtocol::UDP.0 {
                return None;
            }
            let d: [u8; 16] = p[24..40].try_into().ok()?;
            let tc = (p[0] << 4) | (p[1] >> 4);
            (IpAddr::V6(Ipv6Addr::from(d)), tc, ipv6::HEADER_LEN)
        }
        _ => return None,
    };
    let u = p.get(l4..l4 + udp::HEADER_LEN)?;
    let sport = u16::from_be_bytes([u[0], u[1]]);
    let dport = u16::from_be_bytes([u[2], u[3]]);
    let ulen = usize::from(u16::from_be_bytes([u[4], u[5]]));
    if ulen < udp::HEADER_LEN || l4 + ulen > p.len() {
        return None;
    }
    Some(OutHeaders {
        dst,
        sport,
        dport,
        tos,
        off: l4 + udp::HEADER_LEN,
        len: ulen - udp::HEADER_LEN,
    })
}

/// Write IP + UDP headers for the `len`-byte datagram at `buf[start..]` into the bytes just
/// before it; returns the header length. `start` is at least [`RX_ROOM`].
fn write_in_headers(
    buf: &mut [u8],
    start: usize,
    len: usize,
    peer: SocketAddr,
    local: SocketAddr,
    tos: u8,
) -> usize {
    let udp_len = udp::HEADER_LEN + len;
    let hl = match (peer.ip(), local.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = &mut buf[start - udp::HEADER_LEN - ipv4::HEADER_LEN..start - udp::HEADER_LEN];
            let mut ip = ipv4::Repr::new(s, d, IpProtocol::UDP, udp_len);
            ip.dscp = tos >> 2;
            ip.ecn = tos & 3;
            let mut p = ipv4::Packet::new_unchecked(h);
            ip.emit(&mut p);
            p.fill_checksum();
            ipv4::HEADER_LEN
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = &mut buf[start - udp::HEADER_LEN - ipv6::HEADER_LEN..start - udp::HEADER_LEN];
            let ip = ipv6::Repr {
                src_addr: s,
                dst_addr: d,
                next_header: IpProtocol::UDP,
                payload_len: udp_len,
                hop_limit: 64,
                traffic_class: tos,
                flow_label: 0,
            };
            ip.emit(&mut ipv6::Packet::new_unchecked(h));
            ipv6::HEADER_LEN
        }
        // Families were checked by the caller.
        _ => 0,
    };
    let u = udp::Repr { src_port: peer.port(), dst_port: local.port(), payload_len: len };
    u.emit(&mut udp::Packet::new_unchecked(&mut buf[start - udp::HEADER_LEN..start]));
    hl + udp::HEADER_LEN
}

// ----- socket plumbing shared with `blast` -----

/// One message of a `sendmmsg`: `count` consecutive datagrams from `start`, sent as one GSO
/// buffer of `seg`-byte segments when `count > 1`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Run {
    pub start: usize,
    pub count: usize,
    pub seg: usize,
}

/// Cut `pkts` (one socket, one TOS) into runs: with GSO, consecutive packets to one destination
/// with the first one's size (the last of a run may be shorter), within the kernel's segment
/// and byte limits. Returns the number of runs written (at most `runs.len()`; the packets past
/// them wait for the next call).
fn plan_runs(pkts: &[TxMeta], gso: bool, runs: &mut [Run]) -> usize {
    let mut i = 0;
    let mut n = 0;
    while i < pkts.len() && n < runs.len() {
        let first = pkts[i];
        let mut j = i + 1;
        let mut total = first.len;
        if gso && first.len > 0 {
            while j < pkts.len() && j - i < GSO_MAX_SEGS {
                let p = pkts[j];
                if p.dst != first.dst || p.len == 0 || p.len > first.len {
                    break;
                }
                if total + p.len > GSO_MAX_BYTES {
                    break;
                }
                total += p.len;
                j += 1;
                if p.len < first.len {
                    break;
                }
            }
        }
        runs[n] = Run { start: i, count: j - i, seg: first.len };
        n += 1;
        i = j;
    }
    n
}

/// One `sendmmsg` of `runs` over `pkts` (their slot bytes in `buf`, scatter-gather payloads in
/// `mem`). Returns the runs the kernel took.
fn send_runs(
    fd: RawFd,
    buf: &[u8],
    mem: Option<&snic_dma::AddressSpace>,
    pkts: &[TxMeta],
    runs: &[Run],
) -> io::Result<usize> {
    let mut iovs = [empty_iovec(); MAX_BATCH * MAX_IOV_PER_PKT];
    // Where each packet's iovecs start.
    let mut first = [0usize; MAX_BATCH + 1];
    let n = pkts.len().min(MAX_BATCH);
    let mut k = 0;
    // sendmmsg only reads through iov_base; the C API wants *mut.
    let iov =
        |d: &[u8]| libc::iovec { iov_base: d.as_ptr() as *mut libc::c_void, iov_len: d.len() };
    for (i, p) in pkts[..n].iter().enumerate() {
        first[i] = k;
        iovs[k] = iov(&buf[p.off..p.off + p.in_slot()]);
        k += 1;
        if let Some(g) = &p.sg {
            for &(a, l) in &g.ranges[..g.nranges] {
                let l = l as usize;
                let d =
                    mem.and_then(|m| m.slice(a, l).ok()).unwrap_or(&ZEROS[..l.min(ZEROS.len())]);
                iovs[k] = iov(d);
                k += 1;
            }
            iovs[k] = iov(&g.trailer[..g.trailer_len]);
            k += 1;
        }
    }
    first[n] = k;
    let mut names = [empty_sockaddr(); MAX_BATCH];
    let mut lens = [0 as libc::socklen_t; MAX_BATCH];
    let mut msgs = [Msg::default(); MAX_BATCH];
    for (j, r) in runs.iter().enumerate() {
        lens[j] = to_sockaddr(&pkts[r.start].dst, &mut names[j]);
        let end = (r.start + r.count).min(n);
        msgs[j] = Msg {
            start: first[r.start.min(n)],
            count: first[end] - first[r.start.min(n)],
            gso_seg: (r.count > 1).then_some(r.seg),
        };
    }
    let nr = runs.len().min(MAX_BATCH);
    sendmmsg_msgs(fd, &mut iovs[..k], &mut names[..nr], &lens[..nr], &msgs[..nr])
}

/// One message of [`sendmmsg_msgs`]: iovecs `start..start + count`, with a `UDP_SEGMENT`
/// control message of `gso_seg` when set.
#[derive(Debug, Clone, Copy, Default)]
struct Msg {
    start: usize,
    count: usize,
    gso_seg: Option<usize>,
}

/// The `sendmmsg` call: message `k` sends `iovs[runs[k].start..][..runs[k].count]` to
/// `names[k]`, with a `UDP_SEGMENT` control message when it has more than one datagram.
pub(crate) fn sendmmsg_runs(
    fd: RawFd,
    iovs: &mut [libc::iovec],
    names: &mut [libc::sockaddr_storage],
    name_lens: &[libc::socklen_t],
    runs: &[Run],
) -> io::Result<usize> {
    let mut msgs = [Msg::default(); MAX_BATCH];
    for (m, r) in msgs.iter_mut().zip(runs) {
        *m = Msg { start: r.start, count: r.count, gso_seg: (r.count > 1).then_some(r.seg) };
    }
    let nr = runs.len().min(MAX_BATCH);
    sendmmsg_msgs(fd, iovs, names, name_lens, &msgs[..nr])
}

/// The `sendmmsg` call over messages of any number of iovecs each.
fn sendmmsg_msgs(
    fd: RawFd,
    iovs: &mut [libc::iovec],
    names: &mut [libc::sockaddr_storage],
    name_lens: &[libc::socklen_t],
    runs: &[Msg],
) -> io::Result<usize> {
    let nr = runs.len().min(MAX_BATCH).min(names.len()).min(name_lens.len());
    if nr == 0 {
        return Ok(0);
    }
    let mut msgs = [empty_mmsghdr(); MAX_BATCH];
    let mut cmsgs = [[0u64; 4]; MAX_BATCH];
    for k in 0..nr {
        let r = runs[k];
        if r.start + r.count > iovs.len() || r.count == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "run outside the iovecs"));
        }
        let h = &mut msgs[k].msg_hdr;
        h.msg_name = (&mut names[k] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = name_lens[k];
        h.msg_iov = &mut iovs[r.start];
        h.msg_iovlen = r.count as _;
        if let Some(seg) = r.gso_seg {
            h.msg_control = cmsgs[k].as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is pure arithmetic on its argument.
            h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            // SAFETY: `h` points at `cmsgs[k]` (32 bytes, 8-aligned) which is at least
            // CMSG_SPACE(2) = 24 bytes long, so the first header and its 2 data bytes lie
            // inside it; FIRSTHDR is non-null because msg_controllen >= sizeof(cmsghdr).
            unsafe {
                let c = libc::CMSG_FIRSTHDR(h);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                let seg = u16::try_from(seg).unwrap_or(u16::MAX);
                core::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
    }
    loop {
        // SAFETY: `msgs[..nr]` point to names, iovecs and control buffers that are live and
        // unchanged for the call (the iovecs describe readable byte ranges of the caller's
        // buffers, checked in range above); the kernel reads them and writes only `msg_len`.
        let r = unsafe {
            libc::sendmmsg(fd, msgs.as_mut_ptr(), nr as libc::c_uint, libc::MSG_DONTWAIT)
        };
        if r >= 0 {
            return Ok(usize::try_from(r).unwrap_or(0).min(nr));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What `recvmmsg` said about one buffer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RxMeta {
    /// Bytes in the buffer.
    pub len: usize,
    /// GRO segment size (0: one datagram).
    pub seg: usize,
    /// TOS / traffic class of the datagram(s).
    pub tos: u8,
    /// Sender.
    pub peer: Option<SocketAddr>,
    /// The datagram did not fit.
    pub truncated: bool,
}

/// The arrays one `recvmmsg` call needs, kept from call to call: made afresh on the stack they
/// were about 40 KiB to zero per call, and a busy-polling receiver makes many calls that find
/// nothing (about 6% of a receiving `snic rdma` process went to that `memset`).
pub(crate) struct RxScratch {
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; 8]>,
    msgs: Vec<libc::mmsghdr>,
    /// What each filled buffer held (the caller reads `metas[..got]`).
    pub metas: Vec<RxMeta>,
}

// SAFETY: the raw pointers inside `iovs` and `msgs` are written by `recv_batch` just before the
// call that uses them and are never read otherwise: the arrays are reusable storage, not
// references held across calls, so moving them to another thread is as safe as moving bytes.
unsafe impl Send for RxScratch {}

impl RxScratch {
    /// Room for [`MAX_BATCH`] buffers.
    pub(crate) fn new() -> Self {
        RxScratch {
            iovs: vec![empty_iovec(); MAX_BATCH],
            names: vec![empty_sockaddr(); MAX_BATCH],
            cmsgs: vec![[0u64; 8]; MAX_BATCH],
            msgs: vec![empty_mmsghdr(); MAX_BATCH],
            metas: vec![RxMeta::default(); MAX_BATCH],
        }
    }
}

impl std::fmt::Debug for RxScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxScratch").finish_non_exhaustive()
    }
}

/// One `recvmmsg` into up to `want` buffers of `slot` bytes of `buf`, each filled from offset
/// [`RX_ROOM`] (room for headers in front); `sc.metas[..got]` then says what each holds.
/// Returns the buffers filled; 0 when nothing waits.
pub(crate) fn recv_batch(
    fd: RawFd,
    buf: &mut [u8],
    slot: usize,
    want: usize,
    sc: &mut RxScratch,
) -> io::Result<usize> {
    let n = want.min(MAX_BATCH).min(buf.len() / slot.max(1));
    if n == 0 || slot <= RX_ROOM {
        return Ok(0);
    }
    let RxScratch { iovs, names, cmsgs, msgs, metas: out } = sc;
    for (iov, b) in iovs.iter_mut().zip(buf.chunks_exact_mut(slot)).take(n) {
        let area = &mut b[RX_ROOM..];
        *iov = libc::iovec { iov_base: area.as_mut_ptr().cast(), iov_len: area.len() };
    }
    for k in 0..n {
        msgs[k] = empty_mmsghdr();
        let h = &mut msgs[k].msg_hdr;
        h.msg_name = (&mut names[k] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_iov = &mut iovs[k];
        h.msg_iovlen = 1;
        h.msg_control = cmsgs[k].as_mut_ptr().cast();
        h.msg_controllen = core::mem::size_of_val(&cmsgs[k]) as _;
    }
    let r = loop {
        // SAFETY: `msgs[..n]` point to distinct live names, control buffers and iovecs; the
        // iovecs describe disjoint writable ranges of `buf` (one per slot); all outlive the
        // call and nothing else touches them during it; `n <= MAX_BATCH` bounds the kernel's
        // writes to the arrays.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                core::ptr::null_mut(),
            )
        };
        if r >= 0 {
            break usize::try_from(r).unwrap_or(0).min(n);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused => return Ok(0),
            _ => return Err(e),
        }
    };
    for k in 0..r {
        let m = &msgs[k];
        let mut meta = RxMeta {
            len: m.msg_len as usize,
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            peer: from_sockaddr(&names[k], m.msg_hdr.msg_namelen),
            ..RxMeta::default()
        };
        // SAFETY: the header's control pointer and length describe `cmsgs[k]` as the kernel
        // left it; FIRSTHDR / NXTHDR stay within msg_controllen and DATA points inside the
        // current header, whose length we check before reading its data (unaligned reads).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
            while !c.is_null() {
                let (level, ty, clen) = ((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len as usize);
                let data = libc::CMSG_DATA(c);
                let dlen = clen.saturating_sub(libc::CMSG_LEN(0) as usize);
                if level == libc::IPPROTO_IP && ty == libc::IP_TOS && dlen >= 1 {
                    meta.tos = *data;
                } else if level == libc::IPPROTO_IPV6 && ty == libc::IPV6_TCLASS && dlen >= 4 {
                    meta.tos = core::ptr::read_unaligned(data.cast::<libc::c_int>()) as u8;
                } else if level == libc::SOL_UDP && ty == libc::UDP_GRO && dlen >= 4 {
                    let s = core::ptr::read_unaligned(data.cast::<libc::c_int>());
                    meta.seg = usize::try_from(s).unwrap_or(0);
                }
                c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
            }
        }
        out[k] = meta;
    }
    Ok(r)
}

/// A UDP socket bound to `addr` with `SO_REUSEPORT` set before the bind (so another socket of
/// the same user may bind the same address and port: [`RoceTransport::bind_shared`]).
fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    use std::os::fd::FromRawFd;
    let domain = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket(2) with constant arguments; it returns a new descriptor or -1.
    let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns; the UdpSocket closes it on drop.
    let sock = unsafe { UdpSocket::from_raw_fd(fd) };
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    let mut sa = empty_sockaddr();
    let len = to_sockaddr(&addr, &mut sa);
    // SAFETY: `sa` holds a valid sockaddr of `len` bytes for the call's duration.
    let r = unsafe { libc::bind(fd, (&raw const sa).cast::<libc::sockaddr>(), len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// A non-blocking UDP socket bound to `addr` for sending (big send buffer, DF on IPv4).
pub(crate) fn open_tx_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(addr)?;
    s.set_nonblocking(true)?;
    let fd = s.as_raw_fd();
    set_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SOCKET_BUFFER);
    if addr.is_ipv4() {
        // DF, so the kernel writes identification 0 as the engine's ICRC assumed.
        let _ = setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(dst: &str, len: usize) -> TxMeta {
        TxMeta { sock: 0, dst: dst.parse().unwrap(), tos: 0, off: 0, len, sg: None }
    }

    #[test]
    fn runs_group_equal_sizes_with_one_short_tail() {
        let a = "10.0.0.2:4791";
        let b = "10.0.0.3:4791";
        let pkts = [
            meta(a, 1000),
            meta(a, 1000),
            meta(a, 1000),
            meta(a, 300), // short tail closes the run
            meta(a, 1000),
            meta(b, 1000), // other destination
            meta(b, 1200), // bigger: new run
        ];
        let mut runs = [Run::default(); 8];
        let n = plan_runs(&pkts, true, &mut runs);
        let got: Vec<(usize, usize, usize)> =
            runs[..n].iter().map(|r| (r.start, r.count, r.seg)).collect();
        assert_eq!(got, vec![(0, 4, 1000), (4, 1, 1000), (5, 1, 1000), (6, 1, 1200)]);
        // Without GSO: one run per packet.
        assert_eq!(plan_runs(&pkts, false, &mut runs), pkts.len());
        // Byte and segment limits.
        let big: Vec<TxMeta> = (0..40).map(|_| meta(a, 4000)).collect();
        let n = plan_runs(&big, true, &mut runs);
        assert!(runs[..n].iter().all(|r| r.count * r.seg <= GSO_MAX_BYTES));
        assert_eq!(runs[..n].iter().map(|r| r.count).sum::<usize>(), 40);
        let small: Vec<TxMeta> = (0..100).map(|_| meta(a, 64)).collect();
        let n = plan_runs(&small, true, &mut runs);
        assert_eq!(runs[0].count, GSO_MAX_SEGS);
        assert_eq!(runs[..n].iter().map(|r| r.count).sum::<usize>(), 100);
    }

    #[test]
    fn out_headers_read_v4_and_reject_junk() {
        let path = snic_rdma::Path {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            sport: 0xC123,
            dport: 4791,
            dscp: 26,
            ecn: snic_rdma::pkt::ECN_CE,
        };
        let mut buf = [0u8; 256];
        let n = build_send_only(&mut buf, &path, 0x22, 7, b"payload");
        let h = out_headers(&buf[..n]).unwrap();
        assert_eq!(h.dst, path.dst);
        assert_eq!((h.sport, h.dport), (0xC123, 4791));
        assert_eq!(h.tos, (26 << 2) | 3);
        assert_eq!(h.off, 28);
        assert_eq!(h.len, n - 28);
        for cut in 0..n {
            assert!(out_headers(&buf[..cut]).is_none(), "cut {cut}");
        }
        assert!(out_headers(&[0x50; 64]).is_none());
    }

    /// Build a SEND ONLY packet with `payload` (the shape the engine emits).
    pub(crate) fn build_send_only(
        buf: &mut [u8],
        path: &snic_rdma::Path,
        dest_qp: u32,
        psn: u32,
        payload: &[u8],
    ) -> usize {
        use snic_wire::roce::{RoceRepr, bth, opcode};
        let r = RoceRepr::new(bth::Repr {
            opcode: opcode::RC_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: bth::PKEY_DEFAULT,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: true,
            psn,
        });
        snic_rdma::pkt::build(buf, path, &r, payload.len(), |b: &mut [u8]| -> Result<(), ()> {
            b.copy_from_slice(payload);
            Ok(())
        })
        .unwrap()
    }

    /// The retry path: packets left after a partial send move to the front with their bytes
    /// and go out intact on the next flush.
    #[test]
    fn kept_packets_survive_compaction_and_go_out_next() {
        let mut t = None;
        for _ in 0..100 {
            let p = 20_000 + rand::random::<u16>() % 20_000;
            if let Ok(x) = RoceTransport::bind(
                SocketAddr::new([127, 0, 0, 1].into(), p),
                TransportOpts::default(),
            ) {
                t = Some(x);
                break;
            }
        }
        let mut t = t.unwrap();
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let dst = sink.local_addr().unwrap();
        for i in 0..3usize {
            let off = i * TX_SLOT + 28;
            t.tx_buf[off..off + 10 + i].fill(b'a' + i as u8);
            t.pend.push(TxMeta { sock: 0, dst, tos: 0, off, len: 10 + i, sg: None });
        }
        // As if the kernel took only the first packet.
        t.compact(1);
        assert_eq!(t.pend.len(), 2);
        assert_eq!(t.pend[0].off, 28);
        assert_eq!(t.flush(None).unwrap(), 2);
        assert_eq!(t.tx_pending(), 0);
        let mut buf = [0u8; 64];
        for (i, c) in [(1usize, b'b'), (2, b'c')] {
            let n = sink.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &vec![c; 10 + i][..]);
        }
    }
}
