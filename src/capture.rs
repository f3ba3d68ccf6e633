//! `snic capture`: a live capture of a running snic's ports or of what leaves one of its
//! stages, written as pcapng (one Interface Description Block per port, Enhanced Packet Blocks
//! with nanosecond timestamps and the direction in their flags).
//!
//! # The run side
//!
//! A run with a control socket (`snic run --control`, or a whole NIC: `snic serve --port
//! --control`) keeps a [`CaptureHub`]. Every port is wrapped in a
//! [`CapturePort`], whose `recv` and `send` read one relaxed atomic (the hub's armed port mask)
//! per batch; the pipelines read their [`StageTaps`] mask once per batch. With no capture
//! running both masks are zero and nothing else happens: no per-packet work.
//!
//! While a capture runs, the worker that received (or is about to send) a batch copies the
//! frames the capture wants (its ports or stage, its filter) into a bounded queue
//! ([`QUEUE_FRAMES`] frames, [`QUEUE_BYTES`] bytes). A full queue is the capture's drop,
//! counted and reported at the end: the NIC's packets are never held up or dropped for it.
//! One capture runs at a time; its own thread (not the control server's) drains the queue into
//! the client's connection.
//!
//! # The stream (see ARCHITECTURE.md, "Live capture stream")
//!
//! The client sends one request line, `{"cmd":"capture","ports":[0],"stage":null,
//! "filter":"udp dst 4791","count":100,"duration_ms":5000}`. The server answers one JSON line:
//! `{"ok":false,"error":"..."}` (and closes), or `{"ok":true,"interfaces":[{"name":..},..]}`,
//! then binary records, little-endian:
//!
//! - `P` (0x50): interface `u16` (index into `interfaces`), direction `u8` (0 unknown,
//!   1 inbound, 2 outbound), timestamp `u64` (ns since the Unix epoch), original length `u32`,
//!   captured length `u32`, then the captured bytes.
//! - `E` (0x45): length `u32`, then a JSON object `{"captured":n,"dropped":m,"reason":".."}`:
//!   the last record.
//!
//! The client stops a capture early by shutting down its write side (what `snic capture`
//! does on SIGINT); the server then sends what it queued and the end record.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use snic_io::{Port, PortCaps, PortCounters};
use snic_pipeline::trace::{StageTaps, TapHandle, TapSink, TraceFilter};
use snic_pipeline::{Batch, PacketBuf};
use snic_time::Instant;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Frames a capture's queue holds before it drops (and counts) the next.
pub const QUEUE_FRAMES: usize = 4096;
/// Bytes a capture's queue holds before it drops (and counts) the next frame.
pub const QUEUE_BYTES: u64 = 32 << 20;
/// Longest frame a capture keeps whole; the rest of a longer one (a super-packet) is cut off
/// (its original length is kept).
pub const SNAPLEN: usize = 262_144;
/// Ports a capture can name (the bits of the armed mask).
pub const MAX_PORTS: usize = 64;

/// Record kind of a captured frame.
pub const REC_PACKET: u8 = b'P';
/// Record kind of the end of a capture.
pub const REC_END: u8 = b'E';
/// Bytes of a packet record's header, kind included.
pub const PACKET_HEADER: usize = 1 + 2 + 1 + 8 + 4 + 4;

/// Direction unknown (a stage capture).
pub const DIR_NONE: u8 = 0;
/// The port received the frame.
pub const DIR_IN: u8 = 1;
/// The port was handed the frame to send.
pub const DIR_OUT: u8 = 2;

/// The `capture` request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureRequest {
    /// Ports to capture (received and sent). Empty with no `stage`: every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// Capture what leaves this stage instead (its spec, `vswitch`, or its kind, `l2fwd`,
    /// or `#N` for the N-th stage from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Keep only frames matching this trace filter (`udp dst 4791`, `vni 5 and tcp`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Stop after this many frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Stop after this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// One captured frame on its way to the client.
#[derive(Debug)]
struct Frame {
    iface: u16,
    dir: u8,
    ts_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

/// The capture in progress.
#[derive(Debug)]
struct Session {
    /// Bit `i`: port `i` is captured.
    ports: u64,
    /// The tapped stage's index.
    stage: Option<usize>,
    filter: Option<TraceFilter>,
    /// `iface_of_port[i]`: the interface index of port `i` in the stream.
    iface_of_port: Vec<u16>,
    tx: SyncSender<Frame>,
    /// Frames accepted into the queue (at most `limit`).
    taken: AtomicU64,
    limit: u64,
    queued_bytes: AtomicU64,
    dropped: AtomicU64,
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl Session {
    /// Offer the frames of `pkts` (copies go to the queue; never blocks).
    fn offer(&self, iface: u16, dir: u8, pkts: &[PacketBuf]) {
        let ts_ns = now_ns();
        let mut scratch: Option<PacketBuf> = None;
        for p in pkts {
            if let Some(f) = &self.filter {
                // Re-parse a copy: a received frame is not parsed yet, and a stage may have
                // changed the headers since the parse stage ran.
                let s = scratch.get_or_insert_with(PacketBuf::new);
                s.set_frame(p.data());
                s.meta = p.meta.clone();
                s.meta.stack = snic_wire::stack::parse(p.data());
                if !f.matches(s) {
                    continue;
                }
            }
            if self.taken.fetch_add(1, Ordering::Relaxed) >= self.limit {
                self.taken.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            let cap = p.len().min(SNAPLEN);
            let bytes = self.queued_bytes.fetch_add(cap as u64, Ordering::Relaxed);
            let frame = Frame {
                iface,
                dir,
                ts_ns,
                orig_len: u32::try_from(p.len()).unwrap_or(u32::MAX),
                data: p.data().get(..cap).unwrap_or_default().to_vec(),
            };
            let full = bytes + cap as u64 > QUEUE_BYTES
                || matches!(self.tx.try_send(frame), Err(TrySendError::Full(_)));
            if full {
                self.queued_bytes.fetch_sub(cap as u64, Ordering::Relaxed);
                self.taken.fetch_sub(1, Ordering::Relaxed);
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The capture state of a run: the armed masks its ports and pipelines read, the ports' and
/// stages' names, and the capture in progress.
#[derive(Debug)]
pub struct CaptureHub {
    /// Bit `i`: port `i` is captured now. Read once per batch by every [`CapturePort`].
    ports_armed: AtomicU64,
    shared: Arc<Current>,
    taps: Arc<StageTaps>,
    names: Mutex<Vec<String>>,
    stages: Vec<String>,
    closed: AtomicBool,
}

/// The capture in progress, shared with the stage tap points.
#[derive(Debug, Default)]
struct Current(RwLock<Option<Arc<Session>>>);

impl Current {
    fn get(&self) -> Option<Arc<Session>> {
        self.0.read().map_or_else(|p| p.into_inner().clone(), |s| s.clone())
    }

    fn set(&self, s: Option<Arc<Session>>) {
        match self.0.write() {
            Ok(mut g) => *g = s,
            Err(p) => *p.into_inner() = s,
        }
    }
}

impl TapSink for Current {
    fn tap(&self, stage: usize, _name: &str, batch: &Batch) {
        if let Some(s) = self.get()
            && s.stage == Some(stage)
        {
            s.offer(0, DIR_OUT, batch.packets());
        }
    }
}

/// What a bad `capture` request is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureError(pub String);

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaptureError {}

/// A started capture: drain it with [`Capture::stream`].
#[derive(Debug)]
pub struct Capture {
    hub: Arc<CaptureHub>,
    session: Arc<Session>,
    rx: Receiver<Frame>,
    interfaces: Vec<String>,
    deadline: Option<std::time::Instant>,
}

impl CaptureHub {
    /// A hub for a run whose pipeline has `stages` (their spec strings, in order).
    pub fn new(stages: Vec<String>) -> Arc<Self> {
        let shared = Arc::new(Current::default());
        let taps = Arc::new(StageTaps::new(shared.clone()));
        Arc::new(CaptureHub {
            ports_armed: AtomicU64::new(0),
            shared,
            taps,
            names: Mutex::new(Vec::new()),
            stages,
            closed: AtomicBool::new(false),
        })
    }

    /// The stage tap points, for the run's configuration (`RunConfig::stage_taps`).
    pub fn stage_taps(&self) -> TapHandle {
        TapHandle(Some(self.taps.clone()))
    }

    /// Wrap every port (or every queue of every port; `nports` ports, in order) so that it
    /// can be captured.
    pub fn wrap(
        self: &Arc<Self>,
        ports: snic_io::runtime::OpenPorts,
        nports: usize,
    ) -> snic_io::runtime::OpenPorts {
        let mut i = 0usize;
        ports.map(|port| {
            let id = i % nports.max(1);
            i += 1;
            self.wrap_one(port, id)
        })
    }

    /// Wrap the ports of a one-pipeline snic (a NIC's: port `i` is `ports[i]`) so that they
    /// can be captured.
    pub fn wrap_ports(self: &Arc<Self>, ports: Vec<Box<dyn Port>>) -> Vec<Box<dyn Port>> {
        ports.into_iter().enumerate().map(|(id, port)| self.wrap_one(port, id)).collect()
    }

    /// Wrap port number `id` (a queue of it, when it has several), naming it after the first.
    fn wrap_one(self: &Arc<Self>, port: Box<dyn Port>, id: usize) -> Box<dyn Port> {
        if let Ok(mut names) = self.names.lock() {
            if names.len() <= id {
                names.resize(id + 1, String::new());
            }
            if names[id].is_empty() {
                names[id] = port.name().to_owned();
            }
        }
        Box::new(CapturePort { inner: port, id: id as u16, hub: Arc::clone(self) })
    }

    /// The names of the ports wrapped so far, by port number.
    pub fn port_names(&self) -> Vec<String> {
        self.names.lock().map_or_else(|p| p.into_inner().clone(), |n| n.clone())
    }

    /// The index of the stage `name` names: its spec (`l2fwd:0=1`), its kind (`l2fwd`, when
    /// only one stage has it) or `#N`.
    fn find_stage(&self, name: &str) -> Result<usize, CaptureError> {
        let list = || self.stages.join(", ");
        if let Some(n) = name.strip_prefix('#') {
            return n
                .parse::<usize>()
                .ok()
                .filter(|&i| i < self.stages.len())
                .ok_or_else(|| CaptureError(format!("no stage {name} (stages: {})", list())));
        }
        if let Some(i) = self.stages.iter().position(|s| s == name) {
            return Ok(i);
        }
        let kind = |s: &str| s.split(':').next().unwrap_or_default().to_owned();
        let hits: Vec<usize> =
            (0..self.stages.len()).filter(|&i| kind(&self.stages[i]) == name).collect();
        match hits.as_slice() {
            [i] => Ok(*i),
            [] => Err(CaptureError(format!("no stage \"{name}\" (stages: {})", list()))),
            _ => Err(CaptureError(format!(
                "stage \"{name}\" is ambiguous: name it by its spec or #N (stages: {})",
                list()
            ))),
        }
    }

    /// Start the capture `req` asks for, or say why not (unknown port or stage, bad filter,
    /// another capture running).
    pub fn start(self: &Arc<Self>, req: &CaptureRequest) -> Result<Capture, CaptureError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(CaptureError("the run is ending".into()));
        }
        let names = self.names.lock().map_or_else(|p| p.into_inner().clone(), |n| n.clone());
        let filter = match &req.filter {
            Some(f) => Some(TraceFilter::parse(f).map_err(|e| CaptureError(e.to_string()))?),
            None => None,
        };
        if req.count == Some(0) {
            return Err(CaptureError("count must be at least 1".into()));
        }
        if req.duration_ms == Some(0) {
            return Err(CaptureError("duration must be more than 0".into()));
        }
        let (ports, stage, interfaces, iface_of_port) = match &req.stage {
            Some(_) if !req.ports.is_empty() => {
                return Err(CaptureError("give ports or a stage, not both".into()));
            }
            Some(name) => {
                let i = self.find_stage(name)?;
                if i >= StageTaps::MAX_STAGES {
                    return Err(CaptureError(format!(
                        "only the first {} stages can be captured",
                        StageTaps::MAX_STAGES
                    )));
                }
                (0, Some(i), vec![format!("stage {i} ({})", self.stages[i])], Vec::new())
            }
            None => {
                let wanted: Vec<u16> = if req.ports.is_empty() {
                    (0..names.len().min(MAX_PORTS) as u16).collect()
                } else {
                    req.ports.clone()
                };
                let mut mask = 0u64;
                let mut ifaces = Vec::new();
                let mut of_port = vec![0u16; names.len()];
                for &p in &wanted {
                    let Some(name) = names.get(usize::from(p)) else {
                        return Err(CaptureError(format!(
                            "no port {p} (this snic has {} port(s): 0..{})",
                            names.len(),
                            names.len().saturating_sub(1)
                        )));
                    };
                    if usize::from(p) >= MAX_PORTS {
                        return Err(CaptureError(format!(
                            "only ports 0..{} can be captured",
                            MAX_PORTS - 1
                        )));
                    }
                    if mask & (1 << p) != 0 {
                        return Err(CaptureError(format!("port {p} given twice")));
                    }
                    mask |= 1 << p;
                    of_port[usize::from(p)] = ifaces.len() as u16;
                    ifaces.push(format!("port {p} ({name})"));
                }
                (mask, None, ifaces, of_port)
            }
        };
        let (tx, rx) = sync_channel(QUEUE_FRAMES);
        let session = Arc::new(Session {
            ports,
            stage,
            filter,
            iface_of_port,
            tx,
            taken: AtomicU64::new(0),
            limit: req.count.unwrap_or(u64::MAX),
            queued_bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        {
            let mut cur = self.shared.0.write().map_err(|_| CaptureError("poisoned".into()))?;
            if cur.is_some() {
                return Err(CaptureError(
                    "a capture is already running on this snic (one at a time)".into(),
                ));
            }
            *cur = Some(session.clone());
        }
        self.ports_armed.store(ports, Ordering::Release);
        self.taps.arm(stage.map_or(0, |i| 1u64 << i));
        let deadline =
            req.duration_ms.map(|ms| std::time::Instant::now() + Duration::from_millis(ms));
        Ok(Capture { hub: Arc::clone(self), session, rx, interfaces, deadline })
    }

    /// Frames of `pkts` port `id` received or was handed to send (`dir`), while it is armed.
    #[cold]
    #[inline(never)]
    fn tap_port(&self, id: u16, dir: u8, pkts: &[PacketBuf]) {
        if let Some(s) = self.shared.get()
            && s.ports & (1u64 << id) != 0
        {
            let iface = s.iface_of_port.get(usize::from(id)).copied().unwrap_or(0);
            s.offer(iface, dir, pkts);
        }
    }

    /// True when port `id` is being captured (one relaxed load: the per-batch cost).
    #[inline]
    fn port_armed(&self, id: u16) -> bool {
        self.ports_armed.load(Ordering::Relaxed) & (1u64 << (id & 63)) != 0
    }

    fn disarm(&self) {
        self.ports_armed.store(0, Ordering::Release);
        self.taps.arm(0);
        self.shared.set(None);
    }

    /// The run is over: a running capture ends (reason `run ended`) and no new one starts.
    /// Waits up to `wait` for the running capture to send its end record.
    pub fn close(&self, wait: Duration) {
        self.closed.store(true, Ordering::Release);
        let end = std::time::Instant::now() + wait;
        while self.shared.get().is_some() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// How a capture ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureEnd {
    /// Frames written to the client.
    pub captured: u64,
    /// Frames the capture could not keep up with (its queue was full).
    pub dropped: u64,
    /// `count`, `duration`, `stopped` (by the client), `run ended`, `client gone`.
    pub reason: String,
}

fn write_packet(w: &mut impl Write, f: &Frame) -> io::Result<()> {
    let mut h = [0u8; PACKET_HEADER];
    h[0] = REC_PACKET;
    h[1..3].copy_from_slice(&f.iface.to_le_bytes());
    h[3] = f.dir;
    h[4..12].copy_from_slice(&f.ts_ns.to_le_bytes());
    h[12..16].copy_from_slice(&f.orig_len.to_le_bytes());
    h[16..20].copy_from_slice(&(f.data.len() as u32).to_le_bytes());
    w.write_all(&h)?;
    w.write_all(&f.data)
}

fn write_end(w: &mut impl Write, end: &CaptureEnd) -> io::Result<()> {
    let doc = serde_json::to_vec(end).map_err(io::Error::other)?;
    w.write_all(&[REC_END])?;
    w.write_all(&(doc.len() as u32).to_le_bytes())?;
    w.write_all(&doc)?;
    w.flush()
}

impl Capture {
    /// Send the header, then frames until the count, the duration, the client (`stop` becomes
    /// true) or the run ends it; then the end record. The capture is disarmed before its
    /// queue is drained, so everything accepted is sent.
    pub fn stream(self, conn: &mut impl Write, stop: &AtomicBool) -> io::Result<CaptureEnd> {
        let header = serde_json::json!({
            "ok": true,
            "interfaces": self.interfaces.iter().map(|n| serde_json::json!({"name": n}))
                .collect::<Vec<_>>(),
        });
        let result = self.pump(conn, stop, &header);
        self.hub.disarm();
        result
    }

    /// Write one frame; returns 1 (the frames written).
    fn send(&self, w: &mut impl Write, f: Frame) -> io::Result<u64> {
        self.session.queued_bytes.fetch_sub(f.data.len() as u64, Ordering::Relaxed);
        write_packet(w, &f)?;
        Ok(1)
    }

    fn pump(
        &self,
        conn: &mut impl Write,
        stop: &AtomicBool,
        header: &serde_json::Value,
    ) -> io::Result<CaptureEnd> {
        let mut w = io::BufWriter::with_capacity(1 << 16, conn);
        writeln!(w, "{header}")?;
        w.flush()?;
        let mut captured = 0u64;
        let reason = loop {
            if stop.load(Ordering::Acquire) {
                break "stopped";
            }
            if self.hub.closed.load(Ordering::Acquire) {
                break "run ended";
            }
            let left =
                self.deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left == Some(Duration::ZERO) {
                break "duration";
            }
            if captured >= self.session.limit {
                break "count";
            }
            let wait = left.unwrap_or(Duration::MAX).min(Duration::from_millis(50));
            match self.rx.recv_timeout(wait) {
                Ok(f) => {
                    captured += self.send(&mut w, f)?;
                    // Batch up whatever else is queued before flushing.
                    while let Ok(f) = self.rx.try_recv() {
                        captured += self.send(&mut w, f)?;
                    }
                    w.flush()?;
                }
                Err(_) => w.flush()?,
            }
        };
        // Disarm, then send what was accepted before.
        self.hub.ports_armed.store(0, Ordering::Release);
        self.hub.taps.arm(0);
        self.hub.shared.set(None);
        while let Ok(f) = self.rx.try_recv() {
            captured += self.send(&mut w, f)?;
        }
        let end = CaptureEnd {
            captured,
            dropped: self.session.dropped.load(Ordering::Relaxed),
            reason: reason.to_owned(),
        };
        write_end(&mut w, &end)?;
        Ok(end)
    }
}

/// Serve one `capture` request on `conn`: a clear error line, or the stream on a thread of
/// its own (the control server goes on answering other requests meanwhile).
pub fn serve(hub: &Arc<CaptureHub>, req: &CaptureRequest, mut conn: UnixStream) {
    let cap = match hub.start(req) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(conn, "{}", crate::control::error_reply(&e.to_string()));
            return;
        }
    };
    let spawned = std::thread::Builder::new().name("snic-capture".into()).spawn(move || {
        let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
        let stop = Arc::new(AtomicBool::new(false));
        // The client asks to stop by shutting down its write side: a reader thread waits for
        // that (or for the connection to go) and sets `stop`.
        if let Ok(mut r) = conn.try_clone() {
            let _ = r.set_read_timeout(None);
            let stop = Arc::clone(&stop);
            let _ = std::thread::Builder::new().name("snic-capture-eof".into()).spawn(move || {
                let mut b = [0u8; 64];
                while matches!(r.read(&mut b), Ok(n) if n > 0) {}
                stop.store(true, Ordering::Release);
            });
        }
        match cap.stream(&mut conn, &stop) {
            Ok(end) => tracing::info!(
                "capture ended ({}): {} captured, {} dropped by capture",
                end.reason,
                end.captured,
                end.dropped
            ),
            Err(e) => tracing::info!("capture client went away: {e}"),
        }
        let _ = conn.shutdown(std::net::Shutdown::Both);
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the capture thread: {e}");
    }
}

/// The control server's handler of `capture` and `trace` requests for a run.
pub fn ops_handler(
    hub: Arc<CaptureHub>,
    target: crate::trace::TraceTarget,
) -> crate::control::OpsHandler {
    use crate::control::OpsRequest;
    Box::new(move |req, conn| match req {
        OpsRequest::Capture(c) => serve(&hub, &c, conn),
        OpsRequest::Trace(t) => crate::trace::serve(&target, &t, conn),
    })
}

/// A port whose received and sent frames a capture can copy. Costs one relaxed atomic load
/// per batch while no capture names it.
pub struct CapturePort {
    inner: Box<dyn Port>,
    id: u16,
    hub: Arc<CaptureHub>,
}

impl Port for CapturePort {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let before = batch.len();
        let n = self.inner.recv(now, batch)?;
        if n > 0 && self.hub.port_armed(self.id) {
            self.hub.tap_port(self.id, DIR_IN, batch.packets().get(before..).unwrap_or_default());
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        if !batch.is_empty() && self.hub.port_armed(self.id) {
            self.hub.tap_port(self.id, DIR_OUT, batch.packets());
        }
        self.inner.send(now, batch)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    fn is_exhausted(&self) -> bool {
        self.inner.is_exhausted()
    }

    fn caps(&self) -> PortCaps {
        self.inner.caps()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn counters(&self) -> PortCounters {
        self.inner.counters()
    }
    fn handover(&mut self) -> Option<io::Result<snic_io::handover::PortHandover>> {
        self.inner.handover()
    }
}

// ---------------------------------------------------------------------------------------------
// The client: `snic capture`.

/// Arguments of `snic capture`.
#[derive(Debug, clap::Args)]
pub struct CaptureArgs {
    /// The control socket of the running snic (`snic run --control PATH`, or `snic serve
    /// --port SPEC --control PATH`).
    #[arg(long, value_name = "PATH")]
    pub control: PathBuf,
    /// A port to capture (what it receives and what it is handed to send); repeat for more.
    /// Default: every port (unless --stage).
    #[arg(long = "port", value_name = "N")]
    pub ports: Vec<u16>,
    /// Capture what leaves this stage instead: its spec, its kind (`vswitch`) or `#N`.
    #[arg(long, value_name = "NAME")]
    pub stage: Option<String>,
    /// Keep only frames matching this filter (the trace filter language: 'udp dst 4791',
    /// 'ip src 10.0.0.1 and tcp dst 80', 'vni 5', 'layer vxlan').
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,
    /// Stop after this many frames.
    #[arg(short = 'c', long, value_name = "COUNT")]
    pub count: Option<u64>,
    /// Stop after this many seconds (default: until the count, SIGINT or the run's end).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// The pcapng file to write.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub write: PathBuf,
}

/// What the client read: the interfaces, the frames written and the end record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Interface names, in order.
    pub interfaces: Vec<String>,
    /// How it ended (`None`: the stream stopped without an end record).
    pub end: Option<CaptureEnd>,
    /// Frames written to the file.
    pub frames: u64,
}

/// Read a capture stream from `r` (after the request was sent) into a pcapng writer on `out`.
pub fn receive(r: &mut impl BufRead, out: impl Write) -> Result<Received> {
    use pcap_file::DataLink;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
    use pcap_file::pcapng::blocks::interface_description::{
        InterfaceDescriptionBlock, InterfaceDescriptionOption,
    };
    use std::borrow::Cow;
    let mut line = String::new();
    r.read_line(&mut line).context("reading the capture's answer")?;
    if line.is_empty() {
        bail!("the control socket closed without answering (is it a snic run?)");
    }
    let head: serde_json::Value =
        serde_json::from_str(line.trim_end()).context("the capture's answer is not JSON")?;
    if head.get("ok").and_then(serde_json::Value::as_bool) != Some(true) {
        let msg = head.get("error").and_then(serde_json::Value::as_str).unwrap_or("(no message)");
        bail!("{msg}");
    }
    let interfaces: Vec<String> = head
        .get("interfaces")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .map(|i| {
                    i.get("name").and_then(serde_json::Value::as_str).unwrap_or("?").to_owned()
                })
                .collect()
        })
        .unwrap_or_default();
    let mut w = PcapNgWriter::new(out).context("writing the pcapng header")?;
    for name in &interfaces {
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: SNAPLEN as u32,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Borrowed(name)),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        })
        .context("writing an interface block")?;
    }
    let mut frames = 0u64;
    let mut data = Vec::new();
    let end = loop {
        let mut kind = [0u8; 1];
        match r.read(&mut kind) {
            Ok(0) => break None,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("reading the capture stream"),
        }
        match kind[0] {
            REC_PACKET => {
                let mut h = [0u8; PACKET_HEADER - 1];
                r.read_exact(&mut h).context("reading a packet record")?;
                let iface = u16::from_le_bytes([h[0], h[1]]);
                let dir = h[2];
                let ts = u64::from_le_bytes(h[3..11].try_into().unwrap_or_default());
                let orig = u32::from_le_bytes(h[11..15].try_into().unwrap_or_default());
                let len = u32::from_le_bytes(h[15..19].try_into().unwrap_or_default()) as usize;
                if len > SNAPLEN || usize::from(iface) >= interfaces.len() {
                    bail!("bad packet record (interface {iface}, {len} bytes)");
                }
                data.resize(len, 0);
                r.read_exact(&mut data).context("reading a packet record")?;
                // epb_flags bits 0-1: 01 inbound, 10 outbound; no option when unknown.
                let flags = match dir {
                    DIR_IN => vec![EnhancedPacketOption::Flags(1)],
                    DIR_OUT => vec![EnhancedPacketOption::Flags(2)],
                    DIR_NONE => Vec::new(),
                    d => bail!("bad direction {d} in a packet record"),
                };
                w.write_pcapng_block(EnhancedPacketBlock {
                    interface_id: u32::from(iface),
                    timestamp: Duration::from_nanos(ts),
                    original_len: orig.max(len as u32),
                    data: Cow::Borrowed(&data),
                    options: flags,
                })
                .context("writing a packet block")?;
                frames += 1;
            }
            REC_END => {
                let mut n = [0u8; 4];
                r.read_exact(&mut n).context("reading the end record")?;
                let n = u32::from_le_bytes(n) as usize;
                if n > 1 << 16 {
                    bail!("bad end record ({n} bytes)");
                }
                let mut doc = vec![0u8; n];
                r.read_exact(&mut doc).context("reading the end record")?;
                break Some(serde_json::from_slice(&doc).context("bad end record")?);
            }
            k => bail!("bad record kind {k:#04x} in the capture stream"),
        }
    };
    w.into_inner().flush().context("writing the pcapng file")?;
    Ok(Received { interfaces, end, frames })
}

/// Entry point of `snic capture`.
pub fn run(args: CaptureArgs) -> Result<()> {
    let duration_ms = match args.duration {
        Some(d) if !(d > 0.0 && d.is_finite()) => bail!("--duration must be a positive number"),
        Some(d) => Some((d * 1000.0).ceil() as u64),
        None => None,
    };
    let req = CaptureRequest {
        ports: args.ports,
        stage: args.stage,
        filter: args.filter,
        count: args.count,
        duration_ms,
    };
    let r =
        capture_to(&args.control, &req, &args.write, &snic_io::signal::Signals::install()?.stop)?;
    match &r.end {
        Some(end) => eprintln!(
            "captured {}, dropped {} by capture ({}); {} interface(s) -> {}",
            end.captured,
            end.dropped,
            end.reason,
            r.interfaces.len(),
            args.write.display()
        ),
        None => eprintln!(
            "captured {} (the stream ended without its end record: the run stopped?) -> {}",
            r.frames,
            args.write.display()
        ),
    }
    Ok(())
}

/// Run the capture `req` against the control socket `control` into the pcapng file `path`;
/// setting `stop` ends it early (the frames so far are kept).
pub fn capture_to(
    control: &Path,
    req: &CaptureRequest,
    path: &Path,
    stop: &Arc<AtomicBool>,
) -> Result<Received> {
    let mut conn = UnixStream::connect(control).with_context(|| {
        format!(
            "cannot connect to control socket {} (is `snic run --control` running?)",
            control.display()
        )
    })?;
    let mut line = serde_json::to_value(req)?;
    if let Some(o) = line.as_object_mut() {
        o.insert("cmd".into(), "capture".into());
    }
    writeln!(conn, "{line}").context("sending the capture request")?;
    // SIGINT (or `stop`): shut down our write side; the server then sends the end record.
    let done = Arc::new(AtomicBool::new(false));
    if let Ok(c) = conn.try_clone() {
        let (stop, done) = (Arc::clone(stop), Arc::clone(&done));
        std::thread::Builder::new().name("snic-capture-stop".into()).spawn(move || {
            while !done.load(Ordering::Acquire) {
                if stop.load(Ordering::Acquire) {
                    let _ = c.shutdown(std::net::Shutdown::Write);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })?;
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let result = receive(&mut BufReader::new(&conn), io::BufWriter::new(file));
    done.store(true, Ordering::Release);
    if result.is_err() {
        let _ = std::fs::remove_file(path);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::{Block, PcapNgReader};
    use snic_io::null::NullPort;

    fn frame(n: u8, len: usize) -> Vec<u8> {
        let mut f = vec![n; len];
        f[12] = 0x08; // an EtherType that parses as IPv4 (and fails after)
        f[13] = 0x00;
        f
    }

    /// A hub with two null ports; returns the hub and the wrapped ports.
    fn hub_with_ports() -> (Arc<CaptureHub>, Vec<Box<dyn Port>>) {
        let hub = CaptureHub::new(vec!["parse:pass".into(), "l2fwd".into()]);
        let ports: Vec<Box<dyn Port>> = vec![Box::new(NullPort::new()), Box::new(NullPort::new())];
        let snic_io::runtime::OpenPorts::Shared(ports) =
            hub.wrap(snic_io::runtime::OpenPorts::Shared(ports), 2)
        else {
            panic!("shared ports stay shared")
        };
        (hub, ports)
    }

    fn send(port: &mut Box<dyn Port>, frames: &[Vec<u8>]) {
        let mut b = Batch::new(8);
        for f in frames {
            b.push_frame(f).unwrap();
        }
        port.send(Instant::ZERO, &mut b).unwrap();
    }

    /// Stream `cap` into bytes (the end comes from the count), decode them as the client does.
    fn round_trip(cap: Capture) -> (CaptureEnd, Received, Vec<u8>) {
        let mut wire = Vec::new();
        let end = cap.stream(&mut wire, &AtomicBool::new(false)).unwrap();
        let mut file = Vec::new();
        let got = receive(&mut &wire[..], &mut file).unwrap();
        (end, got, file)
    }

    #[test]
    fn a_port_capture_records_what_the_port_is_handed_with_its_direction() {
        let (hub, mut ports) = hub_with_ports();
        assert_eq!(hub.port_names(), ["null", "null"]);
        // Nothing armed: nothing is copied.
        send(&mut ports[1], &[frame(1, 60)]);
        let cap = hub
            .start(&CaptureRequest { ports: vec![1], count: Some(3), ..Default::default() })
            .unwrap();
        assert!(hub.start(&CaptureRequest::default()).unwrap_err().0.contains("already running"));
        send(&mut ports[0], &[frame(2, 60)]); // port 0 is not captured
        send(&mut ports[1], &[frame(3, 60), frame(4, 61)]);
        send(&mut ports[1], &[frame(5, 62), frame(6, 63)]); // the 4th frame is past the count
        let (end, got, file) = round_trip(cap);
        assert_eq!(end, CaptureEnd { captured: 3, dropped: 0, reason: "count".into() });
        assert_eq!(got.interfaces, ["port 1 (null)"]);
        assert_eq!(got.frames, 3);
        // The pcapng file: one IDB (Ethernet, ns resolution), three EPBs flagged outbound.
        let mut r = PcapNgReader::new(&file[..]).unwrap();
        let mut idbs = 0;
        let mut lens = Vec::new();
        while let Some(b) = r.next_block() {
            match b.unwrap() {
                Block::InterfaceDescription(i) => {
                    idbs += 1;
                    assert_eq!(i.linktype, pcap_file::DataLink::ETHERNET);
                }
                Block::EnhancedPacket(e) => {
                    assert_eq!(e.interface_id, 0);
                    assert!(e.options.iter().any(|o| matches!(
                        o,
                        pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption::Flags(2)
                    )));
                    lens.push(e.data.len());
                }
                _ => {}
            }
        }
        assert_eq!((idbs, lens), (1, vec![60, 61, 62]));
        // Disarmed after the end: a new capture may start.
        assert_eq!(hub.ports_armed.load(Ordering::Relaxed), 0);
        hub.start(&CaptureRequest::default()).unwrap();
    }

    #[test]
    fn a_full_queue_is_the_captures_drop_and_the_port_still_sends() {
        let (hub, mut ports) = hub_with_ports();
        let cap = hub.start(&CaptureRequest { ports: vec![0], ..Default::default() }).unwrap();
        let big = frame(7, 9000);
        let mut sent = 0;
        for _ in 0..(QUEUE_BYTES as usize / 9000 + 10) {
            send(&mut ports[0], std::slice::from_ref(&big));
            sent += 1;
        }
        assert_eq!(ports[0].counters().tx_packets, sent, "every frame left the port");
        let dropped = cap.session.dropped.load(Ordering::Relaxed);
        assert!(dropped >= 10, "the capture counted its own drops: {dropped}");
        let taken = cap.session.taken.load(Ordering::Relaxed);
        assert_eq!(taken + dropped, sent);
        hub.close(Duration::ZERO);
        let (end, got, _) = round_trip(cap);
        assert_eq!(end.reason, "run ended");
        assert_eq!((end.captured, end.dropped), (taken, dropped));
        assert_eq!(got.frames, taken);
    }

    #[test]
    fn a_filter_and_a_stage_choose_the_frames() {
        let (hub, _ports) = hub_with_ports();
        let cap = hub
            .start(&CaptureRequest {
                stage: Some("l2fwd".into()),
                filter: Some("udp dst 4791".into()),
                count: Some(1),
                ..Default::default()
            })
            .unwrap();
        let udp = snic_scenario::packet::build("Ether()/IP()/UDP(dport=4791)/Raw(len=20)").unwrap();
        let other = snic_scenario::packet::build("Ether()/IP()/UDP(dport=53)").unwrap();
        let mut b = Batch::new(8);
        b.push_frame(&other).unwrap();
        b.push_frame(&udp).unwrap();
        hub.taps.after_stage(hub.taps.armed(), 0, "parse:pass", &b); // not the tapped stage
        hub.taps.after_stage(hub.taps.armed(), 1, "l2fwd", &b);
        let (end, got, _) = round_trip(cap);
        assert_eq!((end.captured, got.interfaces), (1, vec!["stage 1 (l2fwd)".to_owned()]));
        for (req, msg) in [
            (
                CaptureRequest { stage: Some("nope".into()), ..Default::default() },
                "no stage \"nope\"",
            ),
            (CaptureRequest { ports: vec![2], ..Default::default() }, "no port 2"),
            (CaptureRequest { ports: vec![1, 1], ..Default::default() }, "port 1 given twice"),
            (CaptureRequest { duration_ms: Some(0), ..Default::default() }, "duration"),
        ] {
            assert!(hub.start(&req).unwrap_err().0.contains(msg), "{req:?}");
        }
    }

    #[test]
    fn the_client_refuses_error_answers_and_bad_streams() {
        let err = |bytes: &[u8]| receive(&mut &bytes[..], Vec::new()).unwrap_err().to_string();
        assert_eq!(err(b"{\"ok\":false,\"error\":\"no port 7\"}\n"), "no port 7");
        assert!(err(b"").contains("closed without answering"));
        let head = b"{\"ok\":true,\"interfaces\":[{\"name\":\"p\"}]}\n";
        let mut bad = head.to_vec();
        bad.push(b'Z');
        assert!(err(&bad).contains("bad record kind 0x5a"));
        let mut bad = head.to_vec();
        bad.extend_from_slice(&[REC_PACKET, 5, 0, 1]); // interface 5 of 1
        bad.extend_from_slice(&[0; 16]);
        assert!(err(&bad).contains("bad packet record"));
    }

    proptest::proptest! {
        /// Whatever follows a good header, the client gives frames or an error, never a panic.
        #[test]
        fn receive_never_panics(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut bytes = b"{\"ok\":true,\"interfaces\":[{\"name\":\"a\"},{\"name\":\"b\"}]}\n".to_vec();
            bytes.extend_from_slice(&tail);
            let _ = receive(&mut &bytes[..], Vec::new());
        }
    }
}
