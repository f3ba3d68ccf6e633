//! Workers: the code that moves batches between ports and pipelines.
//!
//! - [`PortSet::round`] is the one drive loop: receive a batch from each port in turn and hand
//!   it to a [`Handler`]. [`Inline`] runs the batch through a pipeline and transmits what it
//!   decided; the runtime's dispatch handler spreads it over worker threads instead.
//! - [`Node`] is one pipeline with its [`PortSet`], driven by one thread. The testbed runs nodes
//!   on the simulated clock; the runtime, with one worker, runs the same loop on the real clock.
//! - [`WorkerPool`] runs N pipelines on N threads behind bounded queues; the runtime's I/O loop
//!   owns the ports, spreads packets by RSS hash (all packets of a flow go to one worker) and
//!   transmits what the workers hand back. A full queue is a counted drop, never a block.
//!
//! Counting follows the pipeline's contract: the pipeline counts packets received and every
//! drop inside it; the I/O side counts, in its own [`Counters`] (ports table only), packets
//! transmitted and packets that could not be (`tx_queue_full`, `tx_error`), and packets that
//! never entered a pipeline (`pipeline_full`, `rx_error`). Merged with
//! [`Counters::merge`], every packet is accounted for exactly once.
//!
//! Tracing follows the same split: for a traced packet (`meta.trace`), [`transmit`] records the
//! last step of its path in the caller's [`TraceRing`] under the stage name
//! [`snic_pipeline::trace::TX_STAGE`]: `sent out port N (name)`, `segmented into K
//! segments for port N`, or `dropped at port N: reason`. An untraced packet costs one branch;
//! events are only built (and allocate) for traced packets.

use crate::port::{Port, PortCaps, PortCounters};
use crate::vnet::VnetHdr;
use snic_pipeline::gro;
use snic_pipeline::meta::Offload;
use snic_pipeline::offload::{self, OffloadError};
use snic_pipeline::trace::{TX_STAGE, TraceEvent, TraceRing, TraceWhat};
use snic_pipeline::{Batch, Counters, DropReason, MAX_BATCH, PacketBuf, Pipeline, PortId};
use snic_time::{Clock, Instant, MonotonicClock};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Hand the packets of a processed `batch` to their egress ports, in order, and count the
/// outcome in `io`. Flooded packets (`PortId::FLOOD`) are copied to every port but their
/// ingress. `tx` holds one reusable batch per port. Traced packets get their transmit step
/// recorded in `trace`. Leaves `batch` empty.
pub fn transmit(
    now: Instant,
    batch: &mut Batch,
    ports: &mut [Box<dyn Port>],
    tx: &mut [Batch],
    io: &mut Counters,
    trace: &mut TraceRing,
) {
    // Flooded packets: copy to every other port (copies go into recycled buffers).
    for p in batch.iter() {
        let Some(egress) = p.meta.egress else {
            continue;
        };
        if !egress.is_flood() {
            continue;
        }
        for (j, t) in tx.iter_mut().enumerate() {
            if j == usize::from(p.meta.ingress.0) {
                continue;
            }
            if t.is_full() {
                send_one(now, &mut ports[j], t, j, io, trace);
            }
            if let Some(c) = t.push_frame(p.data()) {
                c.meta = p.meta.clone();
            }
        }
    }
    for (j, t) in tx.iter_mut().enumerate() {
        let id = PortId(j as u16);
        loop {
            batch.drain_into(t, |p| p.meta.egress == Some(id));
            if t.is_empty() {
                break;
            }
            let full = t.is_full();
            send_one(now, &mut ports[j], t, j, io, trace);
            if !full {
                break;
            }
        }
    }
    // What is left: flooded originals (already copied) and packets for ports that do not exist.
    for p in batch.iter() {
        let (port, reason) = match p.meta.egress {
            Some(e) if e.is_flood() => continue,
            Some(e) => (e, DropReason::TxError),
            None => (p.meta.ingress, DropReason::NoEgress),
        };
        io.port_mut(port).tx_drops.add(reason);
        if p.meta.trace {
            trace_tx(trace, p.meta.seq, TraceWhat::TxDropped { port, reason });
        }
    }
    batch.clear();
    for (j, t) in tx.iter_mut().enumerate() {
        if !t.is_empty() {
            send_one(now, &mut ports[j], t, j, io, trace);
        }
    }
}

/// Record the transmit step of a traced packet (only called for traced packets).
#[cold]
fn trace_tx(trace: &mut TraceRing, seq: u64, what: TraceWhat) {
    trace.push(TraceEvent { seq, stage: TX_STAGE.to_owned(), what });
}

fn send_one(
    now: Instant,
    port: &mut Box<dyn Port>,
    t: &mut Batch,
    j: usize,
    io: &mut Counters,
    trace: &mut TraceRing,
) {
    let caps = port.caps();
    if caps.gso && t.len() > 1 {
        // GRO: a port that takes super-packets gets consecutive TCP segments of a flow as one
        // (VXLAN-encapsulated ones too when it takes them whole); one that does not take them
        // whole gets consecutive VXLAN datagrams of a flow as one UDP GSO buffer.
        let mut merged = gro::coalesce(t, caps.tunnel_gso);
        if !caps.tunnel_gso && t.len() > 1 && caps.merges_udp_tunnel {
            merged += gro::coalesce_udp_tunnel(t);
        }
        if merged > 0 {
            io.port_mut(PortId(j as u16)).gro_coalesced += merged as u64;
        }
    }
    if t.iter().any(|p| needs_software(p, caps)) {
        SEGMENTS.with(|cell| match cell.try_borrow_mut() {
            Ok(mut out) => send_offloaded(now, port, t, j, io, trace, caps, &mut out),
            // Not re-entered in practice; a fresh batch rather than a panic if it ever is.
            Err(_) => send_offloaded(now, port, t, j, io, trace, caps, &mut Batch::new(MAX_BATCH)),
        });
    } else {
        send_direct(now, port, t, j, io, trace);
    }
}

/// Whether `p` must go through [`send_offloaded`]: any offload state when the port has no GSO
/// capability; a tunnelled super-packet unless the port takes it whole ([`tunnel_whole`]).
fn needs_software(p: &PacketBuf, caps: PortCaps) -> bool {
    if !caps.gso {
        return p.meta.offload != Offload::default();
    }
    p.meta.offload.gso.is_some_and(|g| g.tunnel.is_some()) && !tunnel_whole(p, caps)
}

/// Whether the tunnelled super-packet `p` leaves whole through a port with `caps`: the port
/// negotiated UDP-tunnel GSO and the virtio-net tunnel header can describe the packet.
fn tunnel_whole(p: &PacketBuf, caps: PortCaps) -> bool {
    caps.tunnel_gso && VnetHdr::tunnel_whole(&p.meta.offload, p.data())
}

thread_local! {
    /// Scratch batch of [`send_offloaded`], one per transmitting thread, so that segmenting
    /// reuses its buffers instead of allocating them per call.
    static SEGMENTS: std::cell::RefCell<Batch> = std::cell::RefCell::new(Batch::new(MAX_BATCH));
}

/// The NIC's TSO/checksum offload done in software. When the port cannot take super-packets
/// or partial checksums (no `caps.gso`: pcap, UDP tunnel, virtual link), super-packets are cut
/// into MTU-sized, fully checksummed segments and partial checksums are completed, in order.
/// Tunnelled super-packets (VXLAN/NVGRE pushed by the vSwitch on a guest's TSO packet) that
/// the port cannot take whole (a TAP port with UDP-tunnel GSO takes VXLAN/IPv4 ones whole):
/// on a port with GSO capability (AF_PACKET) a VXLAN one becomes one `GSO_UDP_L4` buffer of
/// ready VXLAN datagrams ([`offload::udp_tunnel_gso`], counted per super-packet in the port's
/// `tunnel_udp_gso`), which the kernel cuts; an NVGRE one, or any for a port without GSO, is
/// cut here ("tunnel TSO", counted in `tunnel_segmented`). On a port with GSO capability the
/// other packets keep their offload state. Packets that need no segmenting move into `out` by
/// buffer swap (no copy); segments are written into `out`'s reused buffers.
#[allow(clippy::too_many_arguments, reason = "the transmit helpers' shared arguments plus two")]
fn send_offloaded(
    now: Instant,
    port: &mut Box<dyn Port>,
    t: &mut Batch,
    j: usize,
    io: &mut Counters,
    trace: &mut TraceRing,
    caps: PortCaps,
    out: &mut Batch,
) {
    let id = PortId(j as u16);
    let soft = !caps.gso;
    let failed = |p: &PacketBuf, io: &mut Counters, trace: &mut TraceRing| {
        io.port_mut(id).tx_drops.add(DropReason::OffloadFailed);
        if p.meta.trace {
            let what = TraceWhat::TxDropped { port: id, reason: DropReason::OffloadFailed };
            trace_tx(trace, p.meta.seq, what);
        }
    };
    out.clear();
    for p in t.packets_mut() {
        let tunnelled = p.meta.offload.gso.is_some_and(|g| g.tunnel.is_some());
        if p.meta.offload.gso.is_some() && (soft || (tunnelled && !tunnel_whole(p, caps))) {
            loop {
                // A port with GSO takes a VXLAN super-packet as UDP GSO buffers (usually one);
                // NVGRE, and whatever the layout refuses, is segmented.
                let (r, udp_gso) = match tunnelled && !soft {
                    true => match offload::udp_tunnel_gso(p, out) {
                        Err(e) if !matches!(e, OffloadError::NoRoom { .. }) => {
                            (offload::segment(p, out), false)
                        }
                        r => (r, true),
                    },
                    false => (offload::segment(p, out), false),
                };
                match r {
                    Ok(segments) => {
                        if udp_gso {
                            io.port_mut(id).tunnel_udp_gso += 1;
                        } else if tunnelled {
                            io.port_mut(id).tunnel_segmented += 1;
                        }
                        if p.meta.trace {
                            let what = TraceWhat::Segmented { port: id, segments };
                            trace_tx(trace, p.meta.seq, what);
                        }
                        break;
                    }
                    Err(OffloadError::NoRoom { .. }) if !out.is_empty() => {
                        send_direct(now, port, out, j, io, trace);
                    }
                    Err(_) => {
                        failed(p, io, trace);
                        break;
                    }
                }
            }
            continue;
        }
        if soft {
            if p.meta.offload.csum_partial.is_some() && offload::complete_checksum(p).is_err() {
                failed(p, io, trace);
                continue;
            }
            p.meta.offload = Offload::default();
        }
        if out.is_full() {
            send_direct(now, port, out, j, io, trace);
        }
        // Not full now: the packet moves over (its slot in `t` gets a spare, dropped below).
        out.push_swap(p);
    }
    if !out.is_empty() {
        send_direct(now, port, out, j, io, trace);
    }
    t.clear();
}

fn send_direct(
    now: Instant,
    port: &mut Box<dyn Port>,
    t: &mut Batch,
    j: usize,
    io: &mut Counters,
    trace: &mut TraceRing,
) {
    let id = PortId(j as u16);
    // Frames the port cannot take: larger than its frame size, unless it takes super-packets
    // and this is one. A port that states no size (0) takes anything.
    let caps = port.caps();
    if caps.max_frame > 0 {
        let c = io.port_mut(id);
        t.retain(|p| {
            let fits = p.len() <= caps.max_frame || (caps.gso && p.meta.offload.gso.is_some());
            if !fits {
                c.tx_drops.add(DropReason::TooBig);
                if p.meta.trace {
                    let what = TraceWhat::TxDropped { port: id, reason: DropReason::TooBig };
                    trace_tx(trace, p.meta.seq, what);
                }
            }
            fits
        });
        if t.is_empty() {
            return;
        }
    }
    let (sent, reason) = match port.send(now, t) {
        Ok(n) => (n.min(t.len()), DropReason::TxQueueFull),
        Err(_) => (0, DropReason::TxError),
    };
    let c = io.port_mut(id);
    for (i, p) in t.iter().enumerate() {
        if i < sent {
            c.tx(p.len());
        } else {
            c.tx_drops.add(reason);
        }
        if p.meta.trace {
            let what = if i < sent {
                TraceWhat::Sent { port: id, name: port.name().to_owned() }
            } else {
                TraceWhat::TxDropped { port: id, reason }
            };
            trace_tx(trace, p.meta.seq, what);
        }
    }
    t.clear();
}

/// Receive from `port` (index `j`) into `rx`, stamping the ingress port. Returns how many
/// packets arrived; a receive error is counted once as `rx_error`.
pub fn receive(
    now: Instant,
    port: &mut dyn Port,
    j: usize,
    rx: &mut Batch,
    io: &mut Counters,
) -> usize {
    let start = rx.len();
    if let Err(_e) = port.recv(now, rx) {
        io.port_mut(PortId(j as u16)).rx_drops.add(DropReason::RxError);
    }
    let id = PortId(j as u16);
    for p in &mut rx.packets_mut()[start..] {
        p.meta.ingress = id;
    }
    rx.len() - start
}

/// A node's ports with their receive and transmit batches and the I/O side's counters. The one
/// receive -> process -> transmit loop ([`PortSet::round`]) runs over it, for a [`Node`] (the
/// testbed, on simulated time) and for the runtime's I/O loop (on the real clock, with its
/// pipeline inline or its workers behind a [`Handler`] that dispatches).
#[derive(Debug)]
pub struct PortSet {
    ports: Vec<Box<dyn Port>>,
    rx: Batch,
    tx: Vec<Batch>,
    io: Counters,
}

/// What [`PortSet::round`] hands each received batch to.
pub trait Handler {
    /// Whether port `port` may be read this round (a replay source waits while the workers are
    /// busy). Every port, by default.
    fn accepts(&self, port: usize) -> bool {
        let _ = port;
        true
    }

    /// Take the batch `rx` just received: process it and transmit through `out`, or pass it on.
    /// Whatever stays in `rx` is discarded.
    fn handle(&mut self, now: Instant, rx: &mut Batch, out: &mut Egress<'_>);
}

/// The transmit side of a [`PortSet`], lent to a [`Handler`].
#[derive(Debug)]
pub struct Egress<'a> {
    ports: &'a mut [Box<dyn Port>],
    tx: &'a mut [Batch],
    io: &'a mut Counters,
}

impl Egress<'_> {
    /// [`transmit`] a processed batch through these ports.
    pub fn transmit(&mut self, now: Instant, batch: &mut Batch, trace: &mut TraceRing) {
        transmit(now, batch, self.ports, self.tx, self.io, trace);
    }

    /// The I/O side's counters (for drops before any pipeline, such as `pipeline_full`).
    pub fn io(&mut self) -> &mut Counters {
        self.io
    }
}

/// The handler of a node whose pipeline runs on the thread that polls its ports.
#[derive(Debug)]
pub struct Inline<'a> {
    /// The pipeline every batch runs through.
    pub pipeline: &'a mut Pipeline,
    /// Where the transmit step of traced packets is recorded.
    pub trace: &'a mut TraceRing,
}

impl Handler for Inline<'_> {
    fn handle(&mut self, now: Instant, rx: &mut Batch, out: &mut Egress<'_>) {
        self.pipeline.process(now, rx);
        out.transmit(now, rx, self.trace);
    }
}

impl PortSet {
    /// `ports` (port `i` is `PortId(i)`), receiving batches of up to `batch_size` packets.
    pub fn new(ports: Vec<Box<dyn Port>>, batch_size: usize) -> Self {
        let tx = ports.iter().map(|_| Batch::new(MAX_BATCH)).collect();
        PortSet { ports, rx: Batch::new(batch_size), tx, io: Counters::default() }
    }

    /// One round: receive a batch from each port `handler` accepts, in turn, and hand it to
    /// `handler`. Returns how many packets were received.
    pub fn round(&mut self, now: Instant, handler: &mut impl Handler) -> usize {
        let mut total = 0;
        for j in 0..self.ports.len() {
            if !handler.accepts(j) {
                continue;
            }
            self.rx.clear();
            let n = receive(now, self.ports[j].as_mut(), j, &mut self.rx, &mut self.io);
            if n == 0 {
                continue;
            }
            total += n;
            let mut out = Egress { ports: &mut self.ports, tx: &mut self.tx, io: &mut self.io };
            handler.handle(now, &mut self.rx, &mut out);
        }
        total
    }

    /// Stages holding packets (a vSwitch exception queue, a shaper) release them when due, even
    /// when nothing arrived: when `pipeline` has packets due at `now`, run it on an empty batch
    /// and transmit what it releases: `Some(released)`. `None` when nothing was due.
    pub fn release_held(
        &mut self,
        now: Instant,
        pipeline: &mut Pipeline,
        trace: &mut TraceRing,
    ) -> Option<usize> {
        if !pipeline.wants_poll(now) {
            return None;
        }
        self.rx.clear();
        pipeline.process(now, &mut self.rx);
        let released = self.rx.len();
        transmit(now, &mut self.rx, &mut self.ports, &mut self.tx, &mut self.io, trace);
        Some(released)
    }

    /// [`transmit`] a processed batch through these ports.
    pub fn transmit(&mut self, now: Instant, batch: &mut Batch, trace: &mut TraceRing) {
        transmit(now, batch, &mut self.ports, &mut self.tx, &mut self.io, trace);
    }

    /// The ports, in `PortId` order.
    pub fn ports(&self) -> &[Box<dyn Port>] {
        &self.ports
    }

    /// The ports, mutably (to flush them).
    pub fn ports_mut(&mut self) -> &mut [Box<dyn Port>] {
        &mut self.ports
    }

    /// The I/O side's counters: transmits, transmit drops, drops before any pipeline.
    pub fn io(&self) -> &Counters {
        &self.io
    }

    /// The I/O side's counters, mutably.
    pub fn io_mut(&mut self) -> &mut Counters {
        &mut self.io
    }

    /// Each port's name and own counters.
    pub fn port_counters(&self) -> Vec<(String, PortCounters)> {
        self.ports.iter().map(|p| (p.name().to_string(), p.counters())).collect()
    }

    /// Each port's own counters, in `PortId` order.
    pub fn port_counters_only(&self) -> Vec<PortCounters> {
        self.ports.iter().map(|p| p.counters()).collect()
    }

    /// Flush every port; the first error is returned after trying them all. Frames a port
    /// counted as sent and, flushing, found it could not send (left on a transmit ring: its
    /// `tx_packets` went down) move from transmitted to `tx_queue_full` drops here too, so the
    /// report agrees with the port.
    pub fn flush(&mut self) -> io::Result<()> {
        let mut first = Ok(());
        for (j, p) in self.ports.iter_mut().enumerate() {
            let before = p.counters();
            if let Err(e) = p.flush()
                && first.is_ok()
            {
                first = Err(e);
            }
            let after = p.counters();
            let unsent = before.tx_packets.saturating_sub(after.tx_packets);
            if unsent > 0 {
                let c = self.io.port_mut(PortId(j as u16));
                c.tx_packets = c.tx_packets.saturating_sub(unsent);
                c.tx_bytes = c
                    .tx_bytes
                    .saturating_sub(before.tx_bytes - after.tx_bytes.min(before.tx_bytes));
                for _ in 0..unsent {
                    c.tx_drops.add(DropReason::TxQueueFull);
                }
            }
        }
        first
    }
}

/// One pipeline and its ports, driven by one thread.
#[derive(Debug)]
pub struct Node {
    name: String,
    pub(crate) pipeline: Pipeline,
    pub(crate) ports: PortSet,
    pub(crate) trace: TraceRing,
}

/// Most transmit-step trace events a [`Node`] keeps (as many as a pipeline keeps by default).
pub const TX_TRACE_CAPACITY: usize = 1024;

impl Node {
    /// A node running `pipeline` over `ports` (port `i` is `PortId(i)`), receiving batches of
    /// up to `batch_size` packets (capped at [`MAX_BATCH`]).
    pub fn new(
        name: impl Into<String>,
        pipeline: Pipeline,
        ports: Vec<Box<dyn Port>>,
        batch_size: usize,
    ) -> Self {
        Node {
            name: name.into(),
            pipeline,
            ports: PortSet::new(ports, batch_size),
            trace: TraceRing::new(TX_TRACE_CAPACITY),
        }
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One round: receive a batch from each port in turn, process it, transmit the result; then
    /// let stages release packets they hold that are due. Returns how many packets were received
    /// or released (released packets are progress: the testbed keeps settling while they flow).
    pub fn poll(&mut self, now: Instant) -> usize {
        let Node { pipeline, ports, trace, .. } = self;
        let received = ports.round(now, &mut Inline { pipeline, trace });
        received + ports.release_held(now, pipeline, trace).unwrap_or(0)
    }

    /// Take the trace events recorded so far: the pipeline's and the transmit step's, grouped
    /// by packet sequence number, each packet's pipeline events before its transmit events.
    pub fn drain_trace(&mut self) -> Vec<TraceEvent> {
        let mut ev: Vec<TraceEvent> = self.pipeline.drain_trace().collect();
        ev.extend(self.trace.drain());
        // Stable: within one packet, the pipeline's stage order, then the transmit step.
        ev.sort_by_key(|e| e.seq);
        ev
    }

    /// The earliest [`Port::poll_timeout`] of the node's ports and of its pipeline's stages.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ports
            .ports()
            .iter()
            .filter_map(|p| p.poll_timeout())
            .chain(self.pipeline.poll_timeout())
            .min()
    }

    /// True when every port that reports exhaustion has (finite sources are done). Ports that
    /// never exhaust (sinks, sockets) are ignored only if `finite` marks them so.
    pub fn finite_sources_exhausted(&self, finite: &[bool]) -> bool {
        self.ports.ports().iter().zip(finite).filter(|(_, f)| **f).all(|(p, _)| p.is_exhausted())
    }

    /// The poll descriptors of the ports that have one.
    pub fn poll_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        out.extend(self.ports.ports().iter().filter_map(|p| p.poll_fd()));
    }

    /// Pipeline counters merged with the I/O side's (transmit and receive-side drops).
    pub fn counters(&self) -> Counters {
        let mut c = self.pipeline.counters();
        c.merge(self.ports.io());
        c
    }

    /// Each port's name and own counters.
    pub fn port_counters(&self) -> Vec<(String, PortCounters)> {
        self.ports.port_counters()
    }

    /// Flush the ports and the pipeline's capture stages.
    pub fn flush(&mut self) -> io::Result<()> {
        let first = self.ports.flush();
        let second = self.pipeline.flush();
        first.and(second)
    }

    /// The pipeline (for control-plane changes between rounds).
    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }
}

/// Shortest wait of a worker whose stages hold packets (so an idle worker does not spin).
const HELD_POLL_MIN: Duration = Duration::from_micros(100);

/// How often a worker publishes a counter snapshot for live stats.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// One worker thread's handle.
#[derive(Debug)]
struct WorkerHandle {
    to: SyncSender<Batch>,
    in_flight: usize,
    thread: Option<JoinHandle<Pipeline>>,
    snapshot: Arc<Mutex<Counters>>,
}

/// N pipelines on N threads, fed through bounded queues, handing processed batches back.
#[derive(Debug)]
pub struct WorkerPool {
    workers: Vec<WorkerHandle>,
    /// Processed batches: (worker, batch, solicited). Unsolicited batches carry packets a
    /// worker's stages released on their own (a shaper, an exception queue) and do not count
    /// against `in_flight`.
    done: Receiver<(usize, Batch, bool)>,
    in_flight: usize,
    spare: Vec<Batch>,
    batch_size: usize,
    queue_depth: usize,
}

impl WorkerPool {
    /// Start one thread per pipeline. Each worker's input queue holds `queue_depth` batches.
    pub fn start(
        pipelines: Vec<Pipeline>,
        queue_depth: usize,
        batch_size: usize,
        clock: MonotonicClock,
    ) -> io::Result<Self> {
        let (done_tx, done) = mpsc::channel();
        let mut workers = Vec::with_capacity(pipelines.len());
        for (k, mut pipeline) in pipelines.into_iter().enumerate() {
            let (to, from) = mpsc::sync_channel::<Batch>(queue_depth.max(1));
            let done_tx = done_tx.clone();
            let snapshot = Arc::new(Mutex::new(pipeline.counters()));
            let snap = snapshot.clone();
            let thread =
                std::thread::Builder::new().name(format!("snic-worker-{k}")).spawn(move || {
                    let mut last = clock.now();
                    loop {
                        // A pipeline holding packets is polled again soon even without input.
                        let wait = match pipeline.poll_timeout() {
                            Some(t) => {
                                let now = clock.now();
                                t.saturating_duration_since(now).clamp(HELD_POLL_MIN, PUBLISH_EVERY)
                            }
                            None => PUBLISH_EVERY,
                        };
                        match from.recv_timeout(wait) {
                            Ok(mut batch) => {
                                let now = clock.now();
                                pipeline.process(now, &mut batch);
                                if done_tx.send((k, batch, true)).is_err() {
                                    break;
                                }
                            }
                            Err(RecvTimeoutError::Timeout) => {
                                let now = clock.now();
                                if pipeline.wants_poll(now) {
                                    let mut b = Batch::new(batch_size);
                                    pipeline.process(now, &mut b);
                                    if !b.is_empty() && done_tx.send((k, b, false)).is_err() {
                                        break;
                                    }
                                }
                            }
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                        let now = clock.now();
                        if now - last >= PUBLISH_EVERY {
                            last = now;
                            if let Ok(mut s) = snap.lock() {
                                *s = pipeline.counters();
                            }
                        }
                    }
                    pipeline
                })?;
            workers.push(WorkerHandle { to, in_flight: 0, thread: Some(thread), snapshot });
        }
        Ok(WorkerPool {
            workers,
            done,
            in_flight: 0,
            spare: Vec::new(),
            batch_size,
            queue_depth: queue_depth.max(1),
        })
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// True with no workers.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Batches handed to workers and not yet returned.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// True when every worker's queue has room for `extra` more batches. The runtime reads
    /// replay sources (files, generators) only then, so they are paced by the workers instead
    /// of overflowing their queues.
    pub fn has_room(&self, extra: usize) -> bool {
        self.workers.iter().all(|w| w.in_flight + extra <= self.queue_depth)
    }

    /// An empty batch for staging packets (recycled).
    pub fn take_batch(&mut self) -> Batch {
        self.spare.pop().unwrap_or_else(|| Batch::new(self.batch_size))
    }

    /// Give back a batch that is no longer needed.
    pub fn give_batch(&mut self, mut b: Batch) {
        b.clear();
        self.spare.push(b);
    }

    /// Queue `batch` to worker `k`. On a full queue the batch comes back (the caller counts
    /// its packets as `pipeline_full` drops); never blocks.
    pub fn submit(&mut self, k: usize, batch: Batch) -> Result<(), Batch> {
        let Some(w) = self.workers.get_mut(k) else { return Err(batch) };
        match w.to.try_send(batch) {
            Ok(()) => {
                w.in_flight += 1;
                self.in_flight += 1;
                Ok(())
            }
            Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) => Err(b),
        }
    }

    /// A processed batch and the worker that processed it, if one is ready (waiting at most
    /// `wait`).
    pub fn completed(&mut self, wait: Duration) -> Option<(usize, Batch)> {
        let r = if wait.is_zero() {
            self.done.try_recv().ok()
        } else {
            self.done.recv_timeout(wait).ok()
        };
        let (k, b, solicited) = r?;
        if solicited {
            self.in_flight = self.in_flight.saturating_sub(1);
            if let Some(w) = self.workers.get_mut(k) {
                w.in_flight = w.in_flight.saturating_sub(1);
            }
        }
        Some((k, b))
    }

    /// The latest counter snapshots of every worker, merged.
    pub fn snapshot(&self) -> Counters {
        let mut c = Counters::default();
        for w in &self.workers {
            if let Ok(s) = w.snapshot.lock() {
                c.merge(&s);
            }
        }
        c
    }

    /// Stop the workers (after the caller drained [`WorkerPool::completed`]) and return their
    /// pipelines.
    pub fn join(mut self) -> Vec<Pipeline> {
        let mut out = Vec::with_capacity(self.workers.len());
        for w in &mut self.workers {
            // Replacing the sender with a dead one disconnects the worker's queue.
            let (dead, _) = mpsc::sync_channel(0);
            let to = core::mem::replace(&mut w.to, dead);
            drop(to);
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take()
                && let Ok(p) = t.join()
            {
                out.push(p);
            }
        }
        out
    }
}

/// What one queue worker shares with the thread that watches the run.
#[derive(Debug, Default)]
struct QueueShared {
    /// Packets the worker received so far (the watcher's idle-exit clock).
    received: AtomicU64,
    /// The worker's thread has ended (set on every way out, a panic included): before the
    /// stop flag, that means it died.
    exited: AtomicBool,
    /// Packets the worker's pipeline holds (a shaper, an exception queue), as of its last idle
    /// round.
    pending: AtomicUsize,
    /// The worker's finite sources (if it has any) are all exhausted, as of its last idle round.
    sources_done: AtomicBool,
    /// The worker's counters as last published: pipeline and I/O side merged, and each port's
    /// own counters.
    snapshot: Mutex<(Counters, Vec<PortCounters>)>,
}

#[derive(Debug)]
struct QueueHandle {
    shared: Arc<QueueShared>,
    thread: Option<JoinHandle<(Node, Option<io::Error>)>>,
}

/// Worker threads that each own one queue of every port (see [`crate::spec::PortSpec::open_queues`])
/// and run the whole loop themselves: receive from their queues, run their pipeline, transmit
/// on their own queue of the egress port, and wait in `poll(2)` on their own descriptors when
/// idle. There is no I/O thread, no RSS dispatch and so no `pipeline_full` drop: the kernel (or
/// the port) spreads the flows over the queues. Each worker is a [`Node`] on the real clock.
///
/// Workers publish their counters every 100 ms ([`QueuePool::snapshot`]), count what they
/// receive ([`QueuePool::received`], for an idle timeout), and stop when asked
/// ([`QueuePool::join`]), releasing what their stages still hold first. A worker that ends
/// on its own (an I/O error, a panic) shows at once in [`QueuePool::any_exited`], so the
/// watcher stops the run with its error rather than carry on with its queues unserved.
#[derive(Debug)]
pub struct QueuePool {
    workers: Vec<QueueHandle>,
    stop: Arc<AtomicBool>,
    names: Vec<String>,
}

/// Longest a stopping queue worker waits for its stages to release packets they hold.
const HELD_DRAIN_LIMIT: Duration = Duration::from_secs(10);

impl QueuePool {
    /// Start one thread per node. `finite[i]` says whether port `i` is a finite source (its
    /// exhaustion may end the run); `idle_wait` is the longest `poll(2)` wait of an idle worker;
    /// `rx_coalesce` the receive coalescing delay
    /// ([`crate::runtime::RunConfig::rx_coalesce_us`]). Every node must have the same ports, in
    /// the same order (queue `k` of each port in node `k`).
    pub fn start(
        nodes: Vec<Node>,
        finite: &[bool],
        clock: MonotonicClock,
        idle_wait: Duration,
        rx_coalesce: Duration,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let names = nodes
            .first()
            .map(|n| n.ports.ports().iter().map(|p| p.name().to_string()).collect())
            .unwrap_or_default();
        let mut workers = Vec::with_capacity(nodes.len());
        for (k, node) in nodes.into_iter().enumerate() {
            let shared = Arc::new(QueueShared {
                snapshot: Mutex::new((node.counters(), node.ports.port_counters_only())),
                ..Default::default()
            });
            let (sh, st, fin) = (Arc::clone(&shared), Arc::clone(&stop), finite.to_vec());
            let spawned =
                std::thread::Builder::new().name(format!("snic-worker-{k}")).spawn(move || {
                    let _exit = ExitFlag(&sh.exited);
                    queue_worker(node, &fin, &sh, &st, clock, idle_wait, rx_coalesce)
                });
            match spawned {
                Ok(t) => workers.push(QueueHandle { shared, thread: Some(t) }),
                Err(e) => {
                    // Stop the ones already running before reporting.
                    stop.store(true, Ordering::Relaxed);
                    for w in &mut workers {
                        if let Some(t) = w.thread.take() {
                            let _ = t.join();
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(QueuePool { workers, stop, names })
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// True with no workers.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// The ports' names (worker 0's queues), in `PortId` order.
    pub fn port_names(&self) -> &[String] {
        &self.names
    }

    /// Packets received by every worker so far.
    pub fn received(&self) -> u64 {
        self.workers.iter().map(|w| w.shared.received.load(Ordering::Relaxed)).sum()
    }

    /// Packets the workers' stages hold, as of their last idle round.
    pub fn pending(&self) -> usize {
        self.workers.iter().map(|w| w.shared.pending.load(Ordering::Relaxed)).sum()
    }

    /// True when a worker's thread has ended. Workers only end when told to stop, so before
    /// [`QueuePool::join`] this means one died (an I/O error, a panic); `join` reports why.
    pub fn any_exited(&self) -> bool {
        self.workers.iter().any(|w| w.shared.exited.load(Ordering::Acquire))
    }

    /// True when every worker's finite sources are exhausted (false when no port is finite).
    pub fn sources_done(&self) -> bool {
        self.workers.iter().all(|w| w.shared.sources_done.load(Ordering::Relaxed))
    }

    /// The latest counter snapshots of every worker, each read once: pipeline and I/O counters
    /// merged, each port's own counters merged over its queues, and each worker's own queues
    /// of every port summed (in worker order). Read together, the last two add up.
    pub fn snapshot(&self) -> (Counters, Vec<PortCounters>, Vec<PortCounters>) {
        let mut c = Counters::default();
        let mut ports = vec![PortCounters::default(); self.names.len()];
        let mut per_worker = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            match w.shared.snapshot.lock() {
                Ok(s) => {
                    c.merge(&s.0);
                    crate::runtime::merge_worker(&mut ports, &mut per_worker, &s.1);
                }
                // A poisoned snapshot (its worker panicked): the worker keeps its place.
                Err(_) => per_worker.push(PortCounters::default()),
            }
        }
        (c, ports, per_worker)
    }

    /// Stop the workers and return their nodes (in worker order) and the first I/O error a
    /// worker stopped on, if any.
    pub fn join(mut self) -> (Vec<Node>, Option<io::Error>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut nodes = Vec::with_capacity(self.workers.len());
        let mut first = None;
        for (k, w) in self.workers.iter_mut().enumerate() {
            match w.thread.take().map(JoinHandle::join) {
                Some(Ok((node, err))) => {
                    nodes.push(node);
                    if let Some(e) = err {
                        first.get_or_insert(e);
                    }
                }
                Some(Err(payload)) => {
                    let why = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "no message".into());
                    first.get_or_insert(io::Error::other(format!(
                        "queue worker {k} panicked: {why}"
                    )));
                }
                None => {}
            }
        }
        (nodes, first)
    }
}

impl Drop for QueuePool {
    fn drop(&mut self) {
        // Never leave workers running behind a pool that was not joined.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sets its flag when dropped: when the worker's thread ends, however it ends.
struct ExitFlag<'a>(&'a AtomicBool);

impl Drop for ExitFlag<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The window over which receive coalescing measures a loop's rate.
const BUSY_WINDOW: Duration = Duration::from_millis(1);
/// Frames per [`BUSY_WINDOW`] from which a loop is busy (64 kpps): a flood, not a ping or a
/// request and its answer.
const BUSY_FRAMES: u64 = 64;

/// Receive coalescing ([`crate::runtime::RunConfig::rx_coalesce_us`]), adaptive as a NIC's
/// interrupt moderation is: a loop that has been receiving at least [`BUSY_FRAMES`] frames per
/// [`BUSY_WINDOW`] and is woken from its idle wait within a window of its last frame waits
/// `delay` before it reads, so that frames gather into fuller batches and a busy link wakes it
/// less often. A trickle (pings, requests and their answers below 64 kpps) is never delayed,
/// nor is the first frame after a quiet millisecond.
#[derive(Debug, Clone)]
pub(crate) struct Moderation {
    delay: Duration,
    /// Start of the current window and the frames received in it.
    window: Option<(Instant, u64)>,
    /// The last full window reached [`BUSY_FRAMES`].
    was_busy: bool,
    /// When the loop last received.
    last: Option<Instant>,
}

impl Moderation {
    pub(crate) fn new(delay: Duration) -> Moderation {
        Moderation { delay, window: None, was_busy: false, last: None }
    }

    /// The loop received `n` frames at `now`.
    pub(crate) fn received(&mut self, now: Instant, n: usize) {
        let n = n as u64;
        self.window = match self.window {
            Some((start, count)) if now.saturating_duration_since(start) < BUSY_WINDOW => {
                Some((start, count + n))
            }
            Some((start, count)) => {
                // A window that ended long ago says nothing about the rate now.
                let just_ended = now.saturating_duration_since(start) < 2 * BUSY_WINDOW;
                self.was_busy = just_ended && count >= BUSY_FRAMES;
                Some((now, n))
            }
            None => Some((now, n)),
        };
        self.last = Some(now);
    }

    /// Whether a wake-up at `now` waits: the loop is busy and last received within a window.
    pub(crate) fn waits(&self, now: Instant) -> bool {
        let recent = self.last.is_some_and(|l| now.saturating_duration_since(l) < BUSY_WINDOW);
        let busy = self.was_busy || self.window.is_some_and(|(_, c)| c >= BUSY_FRAMES);
        !self.delay.is_zero() && recent && busy
    }

    /// After an idle wait that ended at `now` (`woken`: a descriptor is readable): wait the
    /// delay when [`Moderation::waits`]. (The kernel's timer slack, 50 us by default, comes on
    /// top of the delay.)
    pub(crate) fn after_wait(&self, now: Instant, woken: bool) {
        if woken && self.waits(now) {
            std::thread::sleep(self.delay);
        }
    }
}

/// One queue worker's loop (see [`QueuePool`]).
fn queue_worker(
    mut node: Node,
    finite: &[bool],
    shared: &QueueShared,
    stop: &AtomicBool,
    clock: MonotonicClock,
    idle_wait: Duration,
    rx_coalesce: Duration,
) -> (Node, Option<io::Error>) {
    let mut fds = Vec::new();
    node.poll_fds(&mut fds);
    let has_finite = finite.iter().any(|f| *f);
    let publish = |node: &Node| {
        if let Ok(mut s) = shared.snapshot.lock() {
            *s = (node.counters(), node.ports.port_counters_only());
        }
    };
    let mut last_publish = clock.now();
    let mut error = None;
    let mut moderation = Moderation::new(rx_coalesce);
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        let received = {
            let Node { pipeline, ports, trace, .. } = &mut node;
            ports.round(now, &mut Inline { pipeline, trace })
        };
        let released = node.ports.release_held(now, &mut node.pipeline, &mut node.trace);
        if received > 0 {
            shared.received.fetch_add(received as u64, Ordering::Relaxed);
        }
        if now - last_publish >= PUBLISH_EVERY {
            last_publish = now;
            publish(&node);
        }
        if received > 0 || released.is_some_and(|n| n > 0) {
            moderation.received(now, received);
            continue;
        }
        shared.pending.store(node.pipeline.pending(), Ordering::Relaxed);
        if has_finite {
            let done = node.finite_sources_exhausted(finite);
            shared.sources_done.store(done, Ordering::Relaxed);
        }
        // Idle: sleep until a queue is readable, something a stage or port holds is due, or
        // `idle_wait` (which also bounds how late the stop flag is seen).
        let wait = match node.poll_timeout() {
            Some(t) => t.saturating_duration_since(now).clamp(HELD_POLL_MIN, idle_wait),
            None => idle_wait,
        };
        match crate::sys::poll::wait_readable(&fds, wait) {
            Ok(woken) => moderation.after_wait(clock.now(), woken),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    // Stopping: what the stages still hold is released (when due) and transmitted.
    let deadline = clock.now() + HELD_DRAIN_LIMIT;
    while node.pipeline.pending() > 0 && clock.now() < deadline {
        let now = clock.now();
        if node.ports.release_held(now, &mut node.pipeline, &mut node.trace).is_none() {
            std::thread::sleep(HELD_POLL_MIN);
        }
    }
    shared.pending.store(node.pipeline.pending(), Ordering::Relaxed);
    publish(&node);
    (node, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::null::NullPort;
    use crate::vlink::{LinkConfig, VLink};

    /// Receive coalescing waits only in a busy spell (64 frames in a millisecond) and within a
    /// millisecond of the last frame; a trickle, a quiet spell and a zero delay never wait. The
    /// wait itself: at least the delay (a sleep never ends early).
    #[test]
    fn coalescing_waits_only_in_a_busy_spell() {
        let us = Instant::from_micros;
        let delay = Duration::from_micros(50);
        // A ping-pong: a frame every 100 us is a trickle.
        let mut m = Moderation::new(delay);
        for i in 0..100 {
            m.received(us(i * 100), 1);
        }
        assert!(!m.waits(us(9_950)), "a trickle waited");
        // A flood: 64 frames every 100 us.
        let mut m = Moderation::new(delay);
        for i in 0..30 {
            m.received(us(i * 100), 64);
        }
        assert!(m.waits(us(2_950)), "a flood did not wait");
        assert!(!m.waits(us(2_900 + 1_000)), "waited a millisecond after the last frame");
        // A quiet spell after the flood, then one frame: read at once.
        m.received(us(50_000), 1);
        assert!(!m.waits(us(50_010)), "waited for the first frame after a quiet spell");
        // Busy within the first window already.
        let mut m = Moderation::new(delay);
        m.received(us(0), 64);
        assert!(m.waits(us(10)));
        assert!(!Moderation::new(Duration::ZERO).waits(us(10)));
        let mut off = Moderation::new(Duration::ZERO);
        off.received(us(0), 256);
        assert!(!off.waits(us(10)), "waited with coalescing off");
        let t = std::time::Instant::now();
        m.after_wait(us(10), true);
        assert!(t.elapsed() >= delay);
    }

    /// A TCP/IPv4 super-packet (as a veth peer hands it over with GSO metadata) bound for a port
    /// without offload leaves as MSS-sized segments whose checksums verify and whose payloads
    /// join back to the original; a partial checksum is completed.
    #[test]
    fn super_packets_to_a_port_without_offload_are_segmented_in_software() {
        use snic_pipeline::meta::{Gso, GsoKind};
        let payload: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut frame = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 5201, 1_000, 64_000)
            .ack(7)
            .write(&mut frame, &payload)
            .unwrap();
        let (a, mut b) = VLink::symmetric("l", LinkConfig::default(), 1);
        assert!(!a.caps().gso);
        let mut ports: Vec<Box<dyn Port>> = vec![Box::new(a)];
        let mut tx = vec![Batch::new(MAX_BATCH)];
        let mut io = Counters::default();
        let mut batch = Batch::new(4);
        let p = batch.push_frame(&frame).unwrap();
        p.meta.egress = Some(PortId(0));
        p.meta.offload.gso =
            Some(Gso { kind: GsoKind::TcpV4, size: 1448, hdr_len: 54, tunnel: None });
        p.meta.trace = true;
        p.meta.seq = 3;
        let mut trace = TraceRing::new(64);
        transmit(Instant::ZERO, &mut batch, &mut ports, &mut tx, &mut io, &mut trace);
        // Traced: segmented, then every segment (same sequence number) sent.
        let ev: Vec<String> = trace.drain().map(|e| e.to_string()).collect();
        let nseg = 20_000usize.div_ceil(1448);
        assert_eq!(ev.len(), 1 + nseg, "{ev:?}");
        assert_eq!(ev[0], format!("#3 tx: segmented into {nseg} segments for port 0"));
        assert!(ev[1..].iter().all(|e| e.starts_with("#3 tx: sent out port 0 (")), "{ev:?}");
        let mut rx = Batch::new(MAX_BATCH);
        b.recv(Instant::ZERO, &mut rx).unwrap();
        assert_eq!(rx.len(), 20_000usize.div_ceil(1448));
        let mut joined = Vec::new();
        let mut next_seq = 1_000u32;
        for seg in rx.iter() {
            assert!(seg.len() <= 14 + 20 + 20 + 1448);
            let sliced = etherparse::SlicedPacket::from_ethernet(seg.data()).unwrap();
            let Some(etherparse::NetSlice::Ipv4(ip)) = sliced.net else { panic!("not ipv4") };
            let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else {
                panic!("not tcp")
            };
            let ip_hdr = ip.header().to_header();
            assert_eq!(ip_hdr.header_checksum, ip_hdr.calc_header_checksum());
            let want = tcp.to_header().calc_checksum_ipv4(&ip_hdr, tcp.payload()).unwrap();
            assert_eq!(tcp.checksum(), want);
            assert_eq!(tcp.sequence_number(), next_seq);
            next_seq += tcp.payload().len() as u32;
            joined.extend_from_slice(tcp.payload());
        }
        assert_eq!(joined, payload);
        assert_eq!(io.port(PortId(0)).unwrap().tx_packets, rx.len() as u64);
    }

    /// A port that takes every frame into a "ring" and, flushing, finds the last `stuck` of
    /// them never left (as a transmit ring on a downed link): it moves them from sent to
    /// dropped in its own counters.
    #[derive(Debug)]
    struct Stuck {
        counters: PortCounters,
        last: Vec<usize>,
        stuck: usize,
    }

    impl Port for Stuck {
        fn name(&self) -> &str {
            "stuck"
        }
        fn recv(&mut self, _: Instant, _: &mut Batch) -> io::Result<usize> {
            Ok(0)
        }
        fn send(&mut self, _: Instant, b: &mut Batch) -> io::Result<usize> {
            for p in b.iter() {
                self.counters.count_tx(p.len());
                self.last.push(p.len());
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            for len in self.last.drain(..).rev().take(self.stuck) {
                self.counters.tx_packets -= 1;
                self.counters.tx_bytes -= len as u64;
                self.counters.tx_dropped += 1;
            }
            Ok(())
        }
        fn caps(&self) -> crate::PortCaps {
            crate::PortCaps { gso: false, max_frame: 1518, ..Default::default() }
        }
        fn counters(&self) -> PortCounters {
            self.counters
        }
    }

    /// Frames a port finds unsent when flushed leave the I/O counters' transmits for
    /// `tx_queue_full` drops, so the report agrees with the port; other ports are untouched.
    #[test]
    fn flush_moves_what_a_port_could_not_send_to_drops() {
        let stuck = Stuck { counters: PortCounters::default(), last: Vec::new(), stuck: 2 };
        let mut set = PortSet::new(vec![Box::new(NullPort::new()), Box::new(stuck)], 64);
        let mut b = Batch::new(MAX_BATCH);
        for (i, len) in [60usize, 70, 80, 90, 100].into_iter().enumerate() {
            let p = b.push_frame(&vec![i as u8; len]).unwrap();
            p.meta.egress = Some(PortId(1));
        }
        set.transmit(Instant::ZERO, &mut b, &mut TraceRing::new(0));
        assert_eq!(set.io().port(PortId(1)).unwrap().tx_packets, 5);
        set.flush().unwrap();
        let mut want = snic_pipeline::counters::PortCounters {
            port: 1,
            tx_packets: 3,
            tx_bytes: 60 + 70 + 80,
            ..Default::default()
        };
        want.tx_drops.add(DropReason::TxQueueFull);
        want.tx_drops.add(DropReason::TxQueueFull);
        assert_eq!(set.io().port(PortId(1)), Some(&want));
        assert_eq!(set.io().port(PortId(0)).map(|c| c.tx_packets).unwrap_or(0), 0);
        let c = set.port_counters_only()[1];
        assert_eq!((c.tx_packets, c.tx_bytes, c.tx_dropped), (3, 210, 2));
    }

    /// A port with the given capabilities that records what it was handed: each frame with
    /// its offload state.
    type Sent = std::sync::Arc<Mutex<Vec<(Vec<u8>, Offload)>>>;

    #[derive(Debug)]
    struct GsoSink(Sent, crate::PortCaps);

    /// An AF_PACKET-like port: super-packets (GSO) but no UDP-tunnel GSO.
    const GSO: crate::PortCaps =
        crate::PortCaps { gso: true, max_frame: 1518, tunnel_gso: false, merges_udp_tunnel: true };

    impl Port for GsoSink {
        fn name(&self) -> &str {
            "gso-sink"
        }
        fn recv(&mut self, _: Instant, _: &mut Batch) -> io::Result<usize> {
            Ok(0)
        }
        fn send(&mut self, _: Instant, b: &mut Batch) -> io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend(b.iter().map(|p| (p.data().to_vec(), p.meta.offload)));
            }
            Ok(b.len())
        }
        fn caps(&self) -> crate::PortCaps {
            self.1
        }
    }

    /// A 5000-byte TCP payload, its inner Ethernet/IPv4/TCP frame, and that frame in
    /// VXLAN/UDP/IPv4 with a zero outer UDP checksum (as snic sends it).
    fn tunnelled_super_packet() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
        let mut inner = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 5201, 77, 64_000)
            .ack(7)
            .write(&mut inner, &payload)
            .unwrap();
        let mut vx = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
        vx.extend_from_slice(&inner);
        let mut tunnelled = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 2, 2])
            .ipv4([192, 168, 100, 1], [192, 168, 100, 2], 64)
            .udp(0xc001, 4789)
            .write(&mut tunnelled, &vx)
            .unwrap();
        tunnelled[40..42].copy_from_slice(&[0, 0]);
        (payload, inner, tunnelled)
    }

    /// The frames of `t` (a tunnelled super-packet with its offload state) sent to a port with
    /// `caps`, and the counters.
    fn send_tunnelled(caps: crate::PortCaps, frames: &[(&[u8], Offload)]) -> (Sent, Counters) {
        let sent: Sent = Default::default();
        let mut ports: Vec<Box<dyn Port>> = vec![Box::new(GsoSink(sent.clone(), caps))];
        let mut tx = vec![Batch::new(MAX_BATCH)];
        let mut io = Counters::default();
        let mut batch = Batch::new(4);
        for (f, off) in frames {
            let p = batch.push_frame(f).unwrap();
            p.meta.egress = Some(PortId(0));
            p.meta.offload = *off;
        }
        transmit(Instant::ZERO, &mut batch, &mut ports, &mut tx, &mut io, &mut TraceRing::new(8));
        (sent, io)
    }

    /// Check the VXLAN/IPv4 segment `f` (number `i` of a super-packet from sequence 77), with
    /// `outer` whether its outer headers are to be checked too; returns its TCP payload.
    fn check_vxlan_segment(f: &[u8], i: usize, outer: bool) -> Vec<u8> {
        let o = etherparse::SlicedPacket::from_ethernet(f).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = o.net else { panic!("outer ipv4") };
        let Some(etherparse::TransportSlice::Udp(udp)) = o.transport else { panic!("udp") };
        if outer {
            let ip_hdr = ip.header().to_header();
            assert_eq!(ip_hdr.header_checksum, ip_hdr.calc_header_checksum());
            assert_eq!(usize::from(ip_hdr.total_len), f.len() - 14);
            assert_eq!(ip_hdr.identification, i as u16);
            assert_eq!(usize::from(udp.length()), f.len() - 34);
            assert_eq!(udp.checksum(), 0);
        }
        assert_eq!(&f[42..50], &[0x08, 0, 0, 0, 0, 0, 42, 0]);
        let s = etherparse::SlicedPacket::from_ethernet(&f[50..]).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = s.net else { panic!("inner ipv4") };
        let Some(etherparse::TransportSlice::Tcp(tcp)) = s.transport else { panic!("tcp") };
        let ip_hdr = ip.header().to_header();
        assert_eq!(ip_hdr.header_checksum, ip_hdr.calc_header_checksum());
        assert_eq!(usize::from(ip_hdr.total_len), f.len() - 64, "inner length of segment {i}");
        let want = tcp.to_header().calc_checksum_ipv4(&ip_hdr, tcp.payload()).unwrap();
        assert_eq!(tcp.checksum(), want, "inner TCP checksum of segment {i}");
        assert_eq!(tcp.sequence_number(), 77 + 1398 * i as u32);
        tcp.payload().to_vec()
    }

    /// Tunnel TSO: a VXLAN-encapsulated super-packet is segmented in software for a port
    /// without GSO capability, and counted.
    #[test]
    fn tunnelled_super_packets_are_segmented_for_ports_without_gso() {
        use snic_pipeline::meta::{Gso, GsoKind, TunnelGso, TunnelGsoKind};
        let (payload, _, tunnelled) = tunnelled_super_packet();
        let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 });
        let gso = Gso { kind: GsoKind::TcpV4, size: 1398, hdr_len: 104, tunnel };
        let tun = Offload { csum_partial: Some((84, 16)), gso: Some(gso) };
        let (sent, io) =
            send_tunnelled(crate::PortCaps { gso: false, ..GSO }, &[(&tunnelled, tun)]);
        let sent = sent.lock().unwrap();
        let nseg = 5000usize.div_ceil(1398);
        assert_eq!(sent.len(), nseg);
        let mut joined = Vec::new();
        for (i, (f, off)) in sent.iter().enumerate() {
            assert_eq!(*off, Offload::default());
            assert!(f.len() <= 1518, "segment {i} fits the port's frame size");
            joined.extend(check_vxlan_segment(f, i, true));
        }
        assert_eq!(joined, payload);
        let c = io.port(PortId(0)).unwrap();
        assert_eq!((c.tx_packets, c.tunnel_segmented, c.tunnel_udp_gso), (nseg as u64, 1, 0));
    }

    /// The AF_PACKET fallback: for a port that takes super-packets but not UDP-tunnel ones, a
    /// VXLAN-encapsulated super-packet leaves as one UDP GSO buffer of ready VXLAN datagrams
    /// (counted in `tunnel_udp_gso`), while a plain super-packet and a partial checksum in the
    /// same batch pass untouched, in order. Cut at its `gso_size`, the buffer's UDP payload
    /// gives the software segments' datagrams.
    #[test]
    fn tunnelled_super_packets_become_udp_gso_buffers_for_gso_ports() {
        use snic_pipeline::meta::{Gso, GsoKind, TunnelGso, TunnelGsoKind};
        let (payload, inner, tunnelled) = tunnelled_super_packet();
        let plain_gso = Gso { kind: GsoKind::TcpV4, size: 1398, hdr_len: 54, tunnel: None };
        let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 });
        let tun_gso = Gso { hdr_len: 104, tunnel, ..plain_gso };
        let partial = Offload { csum_partial: Some((34, 16)), gso: None };
        let plain = Offload { csum_partial: Some((34, 16)), gso: Some(plain_gso) };
        let tun = Offload { csum_partial: Some((84, 16)), gso: Some(tun_gso) };
        let head = inner[..100].to_vec();
        let (sent, io) =
            send_tunnelled(GSO, &[(&inner, plain), (&tunnelled, tun), (&head, partial)]);
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[0], (inner.clone(), plain));
        assert_eq!(sent[2], (head, partial));
        let (buf, off) = &sent[1];
        // Pieces of VXLAN header + inner Ethernet, IPv4, TCP (20 bytes) + 1398.
        let piece = 8 + 14 + 20 + 20 + 1398;
        let udp_gso = Gso { kind: GsoKind::UdpL4, size: piece as u16, hdr_len: 42, tunnel: None };
        assert_eq!(*off, Offload { csum_partial: Some((34, 6)), gso: Some(udp_gso) });
        assert_eq!(usize::from(u16::from_be_bytes([buf[16], buf[17]])), buf.len() - 14);
        assert_eq!(usize::from(u16::from_be_bytes([buf[38], buf[39]])), buf.len() - 34);
        // What the virtio-net header says to the kernel: UDP_L4 with NEEDS_CSUM at 34 + 6.
        let h = VnetHdr::from_offload(off, buf);
        assert_eq!((h.flags, h.gso_type), (crate::vnet::FLAG_NEEDS_CSUM, crate::vnet::GSO_UDP_L4));
        assert_eq!((h.csum_start, h.csum_offset, h.gso_size), (34, 6, piece as u16));
        // Cut at gso_size: the software segments' UDP payloads, byte for byte.
        let mut want = Batch::new(8);
        let mut p = PacketBuf::from_frame(&tunnelled);
        p.meta.offload = tun;
        let nseg = offload::segment(&p, &mut want).unwrap();
        let pieces: Vec<&[u8]> = buf[42..].chunks(piece).collect();
        assert_eq!(pieces.len(), nseg);
        let mut joined = Vec::new();
        for (i, (piece, seg)) in pieces.iter().zip(want.iter()).enumerate() {
            assert_eq!(*piece, &seg.data()[42..], "piece {i}");
            let mut f = buf[..42].to_vec();
            f.extend_from_slice(piece);
            // The lengths the kernel writes per datagram (it also numbers the IDs, computes
            // both checksums: not checked here).
            let len = f.len();
            f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
            f[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
            joined.extend(check_vxlan_segment(&f, i, false));
        }
        assert_eq!(joined, payload);
        let c = io.port(PortId(0)).unwrap();
        assert_eq!((c.tx_packets, c.tunnel_segmented, c.tunnel_udp_gso), (3, 0, 1));
    }

    /// Consecutive VXLAN datagrams of one flow (what the vSwitch makes of a guest's MTU-sized
    /// segments) leave a port without UDP-tunnel GSO as one UDP GSO buffer, counted in
    /// `gro_coalesced`; the same datagrams leave a port without GSO one by one.
    #[test]
    fn vxlan_datagrams_merge_into_udp_gso_buffers_for_gso_ports() {
        use snic_pipeline::meta::{Gso, GsoKind, TunnelGso, TunnelGsoKind};
        let (_, _, tunnelled) = tunnelled_super_packet();
        let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 });
        let gso = Gso { kind: GsoKind::TcpV4, size: 1398, hdr_len: 104, tunnel };
        let mut p = PacketBuf::from_frame(&tunnelled);
        p.meta.offload = Offload { csum_partial: Some((84, 16)), gso: Some(gso) };
        let mut segs = Batch::new(8);
        let n = offload::segment(&p, &mut segs).unwrap();
        let dgrams: Vec<Vec<u8>> = segs.iter().map(|p| p.data().to_vec()).collect();
        let frames: Vec<(&[u8], Offload)> =
            dgrams.iter().map(|d| (&d[..], Offload::default())).collect();
        let (sent, io) = send_tunnelled(GSO, &frames);
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 1);
        let (buf, off) = &sent[0];
        let size = (dgrams[0].len() - 42) as u16;
        let udp_gso = Gso { kind: GsoKind::UdpL4, size, hdr_len: 42, tunnel: None };
        assert_eq!(*off, Offload { csum_partial: Some((34, 6)), gso: Some(udp_gso) });
        let joined: Vec<u8> = dgrams.iter().flat_map(|d| d[42..].to_vec()).collect();
        assert_eq!(&buf[42..], &joined[..]);
        let c = io.port(PortId(0)).unwrap();
        assert_eq!((c.tx_packets, c.gro_coalesced), (1, n as u64 - 1));
        let (sent, io) = send_tunnelled(crate::PortCaps { gso: false, ..GSO }, &frames);
        let sent = sent.lock().unwrap();
        assert_eq!(sent.iter().map(|s| s.0.clone()).collect::<Vec<_>>(), dgrams);
        assert_eq!(io.port(PortId(0)).unwrap().gro_coalesced, 0);
    }

    /// Tunnel GSO: a port that negotiated UDP-tunnel GSO gets the VXLAN super-packet whole, with
    /// its offload state, and nothing is counted as segmented; an NVGRE one (no virtio-net
    /// tunnel type describes it) is still segmented, and counted.
    #[test]
    fn tunnelled_super_packets_leave_whole_through_tunnel_gso_ports() {
        use snic_pipeline::meta::{Gso, GsoKind, TunnelGso, TunnelGsoKind};
        let (_, _, tunnelled) = tunnelled_super_packet();
        let mut gre = tunnelled.clone();
        // The same bytes claimed as NVGRE: segmenting fails on them, which is counted as an
        // offload failure; what matters here is that it is not sent whole.
        gre[23] = 47;
        let vxlan = TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 };
        let gso = Gso { kind: GsoKind::TcpV4, size: 1398, hdr_len: 104, tunnel: Some(vxlan) };
        let tun = Offload { csum_partial: Some((84, 16)), gso: Some(gso) };
        let nvgre = TunnelGso { kind: TunnelGsoKind::Nvgre, outer_len: 50 };
        let gre_off = Offload { gso: Some(Gso { tunnel: Some(nvgre), ..gso }), ..tun };

        let sent: Sent = Default::default();
        let mut ports: Vec<Box<dyn Port>> =
            vec![Box::new(GsoSink(sent.clone(), crate::PortCaps { tunnel_gso: true, ..GSO }))];
        let mut tx = vec![Batch::new(MAX_BATCH)];
        let mut io = Counters::default();
        let mut batch = Batch::new(4);
        for (f, off) in [(&tunnelled, tun), (&gre, gre_off)] {
            let p = batch.push_frame(f).unwrap();
            p.meta.egress = Some(PortId(0));
            p.meta.offload = off;
        }
        transmit(Instant::ZERO, &mut batch, &mut ports, &mut tx, &mut io, &mut TraceRing::new(8));
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 1, "only the VXLAN super-packet leaves, whole");
        assert_eq!(sent[0], (tunnelled.clone(), tun));
        let c = io.port(PortId(0)).unwrap();
        assert_eq!(c.tunnel_segmented, 0);
        assert_eq!(c.tx_drops.get(DropReason::OffloadFailed), 1);
        // The header the TAP port writes for it: TCPv4 in a UDP tunnel over IPv4, offsets of the
        // outer UDP header and the inner IP header.
        let h = VnetHdr::from_offload(&tun, &tunnelled);
        assert_eq!(h.gso_type, crate::vnet::GSO_TCPV4 | crate::vnet::GSO_UDP_TUNNEL_IPV4);
        assert_eq!((h.outer_th, h.inner_nh, h.csum_start, h.gso_size), (34, 64, 84, 1398));
    }

    fn stamped(b: &mut Batch, frames: &[(u8, Option<PortId>)], ingress: u16) {
        for (tag, egress) in frames {
            let p = b.push_frame(&[*tag; 60]).unwrap();
            p.meta.egress = *egress;
            p.meta.ingress = PortId(ingress);
        }
    }

    #[test]
    fn transmit_routes_floods_and_counts() {
        let (a0, mut b0) = VLink::symmetric("l0", LinkConfig::default(), 1);
        let (a1, mut b1) = VLink::symmetric("l1", LinkConfig::default(), 1);
        let mut ports: Vec<Box<dyn Port>> =
            vec![Box::new(a0), Box::new(a1), Box::new(NullPort::new())];
        let mut tx: Vec<Batch> = (0..3).map(|_| Batch::new(MAX_BATCH)).collect();
        let mut io = Counters::default();
        let mut b = Batch::new(16);
        stamped(
            &mut b,
            &[
                (1, Some(PortId(1))),
                (2, Some(PortId::FLOOD)),
                (3, Some(PortId(0))),
                (4, Some(PortId(9))),
            ],
            2,
        );
        transmit(Instant::ZERO, &mut b, &mut ports, &mut tx, &mut io, &mut TraceRing::new(8));
        assert!(b.is_empty());
        let mut rx = Batch::new(16);
        b0.recv(Instant::ZERO, &mut rx).unwrap();
        assert_eq!(rx.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![2, 3]);
        rx.clear();
        b1.recv(Instant::ZERO, &mut rx).unwrap();
        assert_eq!(rx.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(io.port(PortId(0)).unwrap().tx_packets, 2);
        assert_eq!(io.port(PortId(1)).unwrap().tx_packets, 2);
        // The flood did not go back out of its ingress (port 2).
        assert_eq!(io.port(PortId(2)).map_or(0, |p| p.tx_packets), 0);
        assert_eq!(io.port(PortId(9)).unwrap().tx_drops.get(DropReason::TxError), 1);
    }

    #[test]
    fn frames_larger_than_the_port_takes_are_counted_too_big() {
        let (a, mut b) = VLink::symmetric("l", LinkConfig::default(), 1);
        let mut ports: Vec<Box<dyn Port>> = vec![Box::new(a)];
        let mut tx = vec![Batch::new(MAX_BATCH)];
        let mut io = Counters::default();
        let mut batch = Batch::new(4);
        batch.push_frame(&[1u8; 9216]).unwrap().meta.egress = Some(PortId(0));
        batch.push_frame(&[2u8; 9217]).unwrap().meta.egress = Some(PortId(0));
        transmit(Instant::ZERO, &mut batch, &mut ports, &mut tx, &mut io, &mut TraceRing::new(8));
        let mut rx = Batch::new(4);
        b.recv(Instant::ZERO, &mut rx).unwrap();
        assert_eq!(rx.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![9216]);
        let c = io.port(PortId(0)).unwrap();
        assert_eq!(c.tx_packets, 1);
        assert_eq!(c.tx_drops.get(DropReason::TooBig), 1);
    }

    /// The transmit step of traced packets: one sent (its event names the port), one too big
    /// for the port (dropped, with the reason); untraced packets record nothing.
    #[test]
    fn traced_packets_record_the_port_that_sent_or_dropped_them() {
        let (a, mut b) = VLink::symmetric("l", LinkConfig::default(), 1);
        let mut ports: Vec<Box<dyn Port>> = vec![Box::new(a)];
        let name = ports[0].name().to_owned();
        let mut tx = vec![Batch::new(MAX_BATCH)];
        let mut io = Counters::default();
        let mut trace = TraceRing::new(8);
        let mut batch = Batch::new(4);
        for (seq, len, traced) in
            [(7, 60, true), (8, 9217, true), (9, 60, false), (10, 9217, false)]
        {
            let p = batch.push_frame(&vec![seq as u8; len]).unwrap();
            p.meta.egress = Some(PortId(0));
            p.meta.seq = seq;
            p.meta.trace = traced;
        }
        transmit(Instant::ZERO, &mut batch, &mut ports, &mut tx, &mut io, &mut trace);
        let mut rx = Batch::new(4);
        b.recv(Instant::ZERO, &mut rx).unwrap();
        assert_eq!(rx.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![7, 9]);
        let mut ev: Vec<TraceEvent> = trace.drain().collect();
        ev.sort_by_key(|e| e.seq);
        assert_eq!(
            ev,
            vec![
                TraceEvent {
                    seq: 7,
                    stage: "tx".into(),
                    what: TraceWhat::Sent { port: PortId(0), name: name.clone() }
                },
                TraceEvent {
                    seq: 8,
                    stage: "tx".into(),
                    what: TraceWhat::TxDropped { port: PortId(0), reason: DropReason::TooBig }
                },
            ]
        );
        assert_eq!(ev[0].to_string(), format!("#7 tx: sent out port 0 ({name})"));
        assert_eq!(ev[1].to_string(), "#8 tx: dropped at port 0: too_big");
        let c = io.port(PortId(0)).unwrap();
        assert_eq!((c.tx_packets, c.tx_drops.get(DropReason::TooBig)), (2, 2));
    }

    /// A node's trace holds a packet's pipeline events, then its transmit step.
    #[test]
    fn node_trace_ends_with_the_transmit_step() {
        let (a0, mut b0) = VLink::symmetric("l0", LinkConfig::default(), 1);
        let mut pipeline = Pipeline::from_strs(&["l2fwd"]).unwrap();
        pipeline.set_trace_filter(Some(snic_pipeline::TraceFilter::parse("seq 2").unwrap()));
        let ports: Vec<Box<dyn Port>> = vec![Box::new(a0), Box::new(NullPort::new())];
        let mut node = Node::new("n", pipeline, ports, 8);
        let mut b = Batch::new(4);
        stamped(&mut b, &[(1, None), (2, None), (3, None)], 1);
        assert_eq!(b0.send(Instant::ZERO, &mut b).unwrap(), 3);
        assert_eq!(node.poll(Instant::ZERO), 3);
        let ev: Vec<String> = node.drain_trace().iter().map(|e| e.to_string()).collect();
        assert_eq!(
            ev,
            vec![
                "#2 input: selected for trace (not parsed yet)",
                "#2 l2fwd: forwarded to port 1 (static)",
                "#2 tx: sent out port 1 (null)",
            ]
        );
        assert!(node.drain_trace().is_empty());
    }

    #[test]
    fn pool_processes_and_returns_batches() {
        let pipes = (0..2).map(|_| Pipeline::from_strs(&["l2fwd"]).unwrap()).collect();
        let mut pool = WorkerPool::start(pipes, 2, 32, MonotonicClock::new()).unwrap();
        for k in 0..2 {
            let mut b = pool.take_batch();
            stamped(&mut b, &[(k as u8, None)], 0);
            pool.submit(k, b).unwrap();
        }
        let mut got = 0;
        while pool.in_flight() > 0 {
            if let Some((_, b)) = pool.completed(Duration::from_secs(5)) {
                // Default l2fwd map sends port 0 to port 1.
                assert_eq!(b.packets()[0].meta.egress, Some(PortId(1)));
                got += 1;
                pool.give_batch(b);
            }
        }
        assert_eq!(got, 2);
        let pipes = pool.join();
        let mut c = Counters::default();
        for p in &pipes {
            c.merge(&p.counters());
        }
        assert_eq!(c.port(PortId(0)).unwrap().rx_packets, 2);
    }
}
