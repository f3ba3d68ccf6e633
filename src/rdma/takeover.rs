//! A new `snic rdma --server` process taking over a running one's connection mid-run (a
//! hitless upgrade): `--handover PATH` on the running server, `--takeover PATH` on the new.
//!
//! The running server listens at PATH ([`crate::handover::Channel`]) and looks for a
//! connection at its safe points: while it waits for the client's next message, between two
//! rounds of I/O of its engine (between sizes, or in the middle of a WRITE / READ / atomic
//! bandwidth size, where the client drives and the server's responder serves it). When one
//! comes it pauses ([`offer`]) and sends one document ([`Doc`]): the engine's state
//! ([`snic_rdma::RnicExport`]: QP, MR, CQs), the plan and where its loop is ([`Phase`]), the
//! control bytes read and not yet handled; with three descriptors: its RoCE UDP socket, its
//! TCP control connection, and a file holding the buffer's bytes. The new process
//! ([`resume`]) checks that it runs the same benchmark with the same layout, builds its engine
//! as the old one did and imports the state, and answers `ready`; the old answers `committed`
//! and exits 0 ("handed over"); the new waits for the old to be gone (its end of the channel
//! closes) so that the UDP source ports its transport binds are free, and serves on to the end.
//! The client sees a pause: the packets it sent meanwhile queue in the socket or are lost and
//! sent again.
//!
//! Rollback: the new process touches neither socket before `committed`. If it refuses (another
//! benchmark, another layout), fails or dies before `ready`, the old one resumes where it
//! paused, its engine untouched by the export.
//!
//! The new process reports the gap, from the old one's pause to its own first round of I/O
//! (wall clock: the two processes' monotonic clocks have different origins), and what the
//! client's retransmissions did at its engine after it: on stderr at the end, and in the
//! `--json` rows as `handover`.

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::{Deserialize, Serialize};
use serde_json::json;
use snic_rdma::{MrInfo, RdmaStats, RnicExport};
use snic_roce::cm::QpInfo;
use snic_roce::transport::{RoceTransport, TransportOpts};
use snic_time::{Clock, MonotonicClock};
use std::io::Write;
use std::net::{IpAddr, TcpStream, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::args::RdmaArgs;
use super::ctrl::Ctrl;
use super::plan::Plan;
use super::server::{handover_listener, serve};
use super::side::{Side, engine};
use crate::handover::Channel;

/// Version of [`Doc`]; both processes must agree.
const DOC_VERSION: u64 = 1;
/// Longest the old server waits, paused, for the new one's answer.
const READY_WAIT: Duration = Duration::from_secs(10);
/// Longest the new server waits for the old one to exit after `committed`.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// Where the server loop is at a safe point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Phase {
    /// In the middle of a size (`size`, `iters`): READY was sent, the client's DONE not yet
    /// received. `None`: between sizes.
    pub(super) round: Option<(u32, u64)>,
    /// Every size so far verified.
    pub(super) all_ok: bool,
}

/// The numbers and keys of a side's objects, as the new process finds them after the import.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct SideIds {
    pub(super) qpn: u32,
    pub(super) scq: u32,
    pub(super) rcq: u32,
    pub(super) mr: MrInfo,
    pub(super) remote: QpInfo,
    pub(super) sends_done: u64,
}

/// What the old server sends (descriptors beside it: UDP socket, TCP connection, buffer
/// file).
#[derive(Debug, Serialize, Deserialize)]
struct Doc {
    snic_rdma_takeover: u64,
    op: String,
    lat: bool,
    udp_port: u16,
    mem_device: bool,
    plan: [u64; 8],
    phase: Phase,
    local_ip: IpAddr,
    side: SideIds,
    ctrl_pending: Vec<u8>,
    /// When the old server paused (nanoseconds since the Unix epoch).
    paused_unix_ns: u64,
    engine: RnicExport,
}

/// The old server handed over: it ends here (exit 0).
#[derive(Debug)]
pub(super) struct HandedOver {
    /// From the pause to the new server's `ready`.
    to_ready: Duration,
}

impl std::fmt::Display for HandedOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "handed over to the new server ({:.1} ms paused until it was ready); exiting",
            self.to_ready.as_secs_f64() * 1e3
        )
    }
}

impl std::error::Error for HandedOver {}

/// The takeover as the new server saw it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gap {
    /// From the old server's pause to this one's first round of I/O.
    pub(super) gap: Duration,
}

impl Gap {
    /// The gap and the engine counters that show the client's retransmissions after it (this
    /// engine's counters start at the takeover).
    pub(super) fn json(&self, st: &RdmaStats) -> serde_json::Value {
        json!({
            "gap_ms": self.gap.as_secs_f64() * 1e3,
            "dup_requests": st.dup_requests,
            "out_of_seq_dropped": st.out_of_seq_dropped,
            "seq_naks_sent": st.seq_naks_sent,
        })
    }

    /// One line for stderr.
    pub(super) fn summary(&self, st: &RdmaStats) -> String {
        format!(
            "takeover gap: {:.1} ms from the old server's pause to this one's resume; after it \
             {} duplicate and {} out-of-sequence packets arrived (the client's retransmissions), \
             {} sequence NAKs sent",
            self.gap.as_secs_f64() * 1e3,
            st.dup_requests,
            st.out_of_seq_dropped,
            st.seq_naks_sent
        )
    }
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The old server at a safe point with a new one on `ch`: pause, send the state, and wait for
/// `ready`. Returns `Err(HandedOver)` once committed; `Ok(())` when the new one refused or
/// failed (then this one serves on as before).
pub(super) fn offer(s: &mut Side, ch: &Channel, phase: Phase) -> Result<()> {
    let paused = SystemTime::now();
    let t0 = std::time::Instant::now();
    let reply = send_state(s, ch, phase, paused)
        .and_then(|()| ch.recv(READY_WAIT).context("waiting for the new server"));
    match reply {
        Ok((m, _)) if m.get("ready") == Some(&json!(true)) => {
            let to_ready = t0.elapsed();
            match ch.send(&json!({ "committed": true }), &[]) {
                Ok(()) => return Err(HandedOver { to_ready }.into()),
                Err(e) => eprintln!("takeover: cannot commit ({e}); serving on"),
            }
        }
        Ok((m, _)) => {
            let why = m.get("refused").and_then(|v| v.as_str()).unwrap_or("no reason given");
            eprintln!("takeover refused by the new server: {why}; serving on");
        }
        Err(e) => eprintln!("takeover failed: {e:#}; serving on"),
    }
    Ok(())
}

fn send_state(s: &mut Side, ch: &Channel, phase: Phase, paused: SystemTime) -> Result<()> {
    let engine = s.rnic.export(s.clock.now()).map_err(|e| anyhow!("export: {e}"))?;
    let bytes = s.mem_read(s.mr.addr, usize::try_from(s.mr.len)?)?;
    // The buffer goes in an unlinked file: only its descriptor is passed.
    let path = std::env::temp_dir().join(format!("snic-rdma-takeover-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("buffer file {}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    f.write_all(bytes).context("buffer file")?;
    let doc = Doc {
        snic_rdma_takeover: DOC_VERSION,
        op: s.plan.op.name().to_string(),
        lat: s.plan.lat,
        udp_port: s.tx.local_addr().port(),
        mem_device: s.mr.addr & snic_dma::DEVICE_ADDR_PREFIX != 0,
        plan: s.plan.encode(),
        phase,
        local_ip: s.tx.local_addr().ip(),
        side: SideIds {
            qpn: s.qpn,
            scq: s.scq.0,
            rcq: s.rcq.0,
            mr: s.mr,
            remote: s.remote,
            sends_done: s.sends_done,
        },
        ctrl_pending: s.ctrl.pending().to_vec(),
        paused_unix_ns: unix_ns(paused),
        engine,
    };
    let doc = serde_json::to_value(&doc).context("takeover document")?;
    let fds = [s.tx.rx_socket().as_fd(), s.ctrl.s.as_fd(), f.as_fd()];
    ch.send(&doc, &fds).context("sending the state")?;
    Ok(())
}

/// What the new server built from the document before it says `ready`; the sockets are not
/// touched until the old one commits.
struct Adopted {
    rnic: snic_rdma::Rnic,
    /// The clock the state was imported on (the side goes on with it).
    clock: MonotonicClock,
    plan: Plan,
    phase: Phase,
    ids: SideIds,
    ctrl_pending: Vec<u8>,
    paused_unix_ns: u64,
    udp: OwnedFd,
    tcp: OwnedFd,
}

/// The new server: take over from the one listening at `path`, then serve to the end (and
/// listen for a later upgrade itself with `--handover`, once the old server is gone).
pub(super) fn resume(a: &RdmaArgs, path: &Path, timeout: Duration) -> Result<()> {
    let ch = connect(path, timeout)?;
    let (doc, fds) = ch.recv(timeout).context("waiting for the old server's state")?;
    let ad = match adopt(a, doc, fds) {
        Ok(ad) => ad,
        Err(e) => {
            let _ = ch.send(&json!({ "refused": format!("{e:#}") }), &[]);
            return Err(e.context("takeover refused"));
        }
    };
    ch.send(&json!({ "ready": true }), &[]).context("telling the old server")?;
    let (m, _) = ch.recv(timeout).context("waiting for the old server to commit")?;
    ensure!(m.get("committed") == Some(&json!(true)), "the old server did not commit: {m}");
    // The old process exits now; its transmit sockets hold UDP ports this one binds.
    match ch.recv(EXIT_WAIT) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => eprintln!("takeover: the old server did not exit cleanly ({e}); going on"),
        Ok((m, _)) => eprintln!("takeover: unexpected message after commit: {m}"),
    }
    let opts = TransportOpts { gso: !a.no_gso, gro: !a.no_gso, ..TransportOpts::default() };
    let tx = RoceTransport::adopt(UdpSocket::from(ad.udp), opts).context("RoCE socket")?;
    let ctrl = Ctrl::resume(TcpStream::from(ad.tcp), timeout, ad.ctrl_pending)?;
    let mut side = Side::adopted(ad.rnic, ad.clock, tx, ctrl, ad.ids, ad.plan, timeout);
    side.listener = handover_listener(a)?;
    let gap = Duration::from_nanos(unix_ns(SystemTime::now()).saturating_sub(ad.paused_unix_ns));
    let g = Gap { gap };
    eprintln!(
        "took over from the old server at {}: gap {:.1} ms",
        path.display(),
        gap.as_secs_f64() * 1e3
    );
    serve(side, a, ad.phase, Some(g))
}

fn connect(path: &Path, timeout: Duration) -> Result<Channel> {
    let end = std::time::Instant::now() + timeout;
    loop {
        match Channel::connect(path) {
            Ok(c) => return Ok(c),
            Err(e) if std::time::Instant::now() >= end => {
                return Err(e).context("no server to take over from");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Check the document against this process's arguments, build the engine as the old one
/// built its own and import the state.
fn adopt(a: &RdmaArgs, doc: serde_json::Value, fds: Vec<OwnedFd>) -> Result<Adopted> {
    let version = doc.get("snic_rdma_takeover").and_then(serde_json::Value::as_u64);
    ensure!(
        version == Some(DOC_VERSION),
        "takeover document version {version:?} (this is {DOC_VERSION})"
    );
    let d: Doc = serde_json::from_value(doc).context("takeover document")?;
    let [udp, tcp, mem]: [OwnedFd; 3] =
        fds.try_into().map_err(|v: Vec<OwnedFd>| anyhow!("{} descriptors, not 3", v.len()))?;
    let plan = Plan::decode(&d.plan)?;
    ensure!(
        d.op == a.op.name() && plan.op == a.op,
        "the old server runs `{}`, this one `{}`: take over with the same operation",
        d.op,
        a.op.name()
    );
    ensure!(d.lat == a.lat, "the old server and this one disagree on --lat");
    ensure!(d.udp_port == a.port, "the old server uses UDP port {} (here {})", d.udp_port, a.port);
    ensure!(
        d.mem_device == a.mem.kind().is_device(),
        "the old server's buffer is in other memory (--mem)"
    );
    let (mut rnic, addr) = engine(plan, a, d.local_ip)?;
    ensure!(
        addr == d.side.mr.addr,
        "the buffer lands at {addr:#x} here, at {:#x} in the old server",
        d.side.mr.addr
    );
    let len = usize::try_from(d.side.mr.len)?;
    let mut bytes = vec![0u8; len];
    std::fs::File::from(mem).read_exact_at(&mut bytes, 0).context("the buffer's bytes")?;
    rnic.mem_mut().write(addr, &bytes).map_err(|e| anyhow!("buffer: {e}"))?;
    let clock = MonotonicClock::new();
    rnic.import(&d.engine, clock.now()).map_err(|e| anyhow!("import: {e}"))?;
    if rnic.qp(d.side.qpn).is_none() {
        bail!("the state has no QP {:#x}", d.side.qpn);
    }
    Ok(Adopted {
        rnic,
        clock,
        plan,
        phase: d.phase,
        ids: d.side,
        ctrl_pending: d.ctrl_pending,
        paused_unix_ns: d.paused_unix_ns,
        udp,
        tcp,
    })
}
