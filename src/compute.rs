//! `snic compute mm`: networked matrix multiplication, RecoNIC's lookaside example (its Fig. 6),
//! host-driven, between two hosts each with its own snic (`snic serve` with RDMA on).
//!
//! Peer 1 (`--serve`) holds A (M x K) and B (K x N), generated from the seed, in its host
//! memory or on-board device memory (`-l`), under MRs its peer may READ, and a buffer for C its
//! peer may WRITE. Peer 2 (`--peer ADDR`) connects a QP to peer 1's, fetches A and B with RDMA
//! READs posted in one batch (one doorbell) into its own snic's device memory, polls its CQ,
//! hands the GEMM command to the lookaside kernel, waits for its status (polling, or the
//! kernel's interrupt with `--interrupt`), reads C back to host memory by C2H DMA on a queue,
//! and checks it against A x B computed on the host from the same seed (i8 exactly; f32 within
//! the rounding bound of a K-term dot product). It prints the time of each step, as the
//! figure splits it: connection set-up, RDMA fetch, kernel, notification (status observed
//! minus kernel run time), read-back.
//!
//! # The out-of-band exchange
//!
//! One TCP connection (default port 18520), as perftest's: JSON lines, each at most
//! [`MAX_LINE`] bytes, one per message ([`Msg`], tagged by `"msg"`):
//!
//! ```text
//! peer 2 -> peer 1  {"msg":"request","version":1,"m":..,"n":..,"k":..,"dtype":"f32","seed":..,
//!                    "mem":"host_mem","qpn":..,"ip":"10.0.0.2","mtu":0}
//! peer 1 -> peer 2  {"msg":"ready","qpn":..,"ip":"10.0.0.1","a":{"addr":..,"rkey":..,"len":..},
//!                    "b":{..},"c":{..}}        (or {"msg":"error","message":"..."})
//! peer 2 -> peer 1  {"msg":"done","verified":true}
//! ```
//!
//! Both QPs start at PSN 0. Peer 1 keeps its MRs and QP until `done` (or the connection
//! closes), then frees them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use snic_compute::netmm::{Mismatch, matrix, verify};
use snic_compute::{KernelCmd, dtype, ids, status};
use snic_host::{
    ChainRead, ChainWrite, DevKind, Device, Dir, HostBuf, Placement, QueueOpts, RDMA_MAX_BATCH,
    RDMA_MAX_MSG, RdmaOp, RdmaSge, RdmaWr, WC_CHAIN, WC_SUCCESS, rdma_access,
};

/// Version of the exchange ([`Msg::Request::version`]).
pub const VERSION: u32 = 1;
/// Longest line of the exchange, bytes.
pub const MAX_LINE: usize = 64 * 1024;
/// Largest dimension.
const MAX_DIM: u32 = 16_384;
/// Most bytes of A, B and C together.
const MAX_BYTES: u64 = 1 << 30;
/// Most bytes one C2H descriptor moves on read-back.
const C2H_CHUNK: u64 = 1 << 20;

/// Arguments of `snic compute`.
#[derive(Debug, clap::Args)]
pub struct ComputeArgs {
    #[command(subcommand)]
    cmd: ComputeCmd,
}

#[derive(Debug, clap::Subcommand)]
enum ComputeCmd {
    /// Networked matrix multiplication (RecoNIC Fig. 6): peer 2 fetches A and B from peer 1 by
    /// RDMA READ into its snic's device memory, runs the GEMM kernel there, reads C back by DMA.
    Mm(MmArgs),
}

/// Element type of A and B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// i8 x i8 -> i32 C.
    I8,
    /// f32.
    F32,
}

impl Dtype {
    fn code(self) -> u64 {
        match self {
            Dtype::I8 => dtype::I8,
            Dtype::F32 => dtype::F32,
        }
    }
    fn size(self) -> u64 {
        match self {
            Dtype::I8 => 1,
            Dtype::F32 => 4,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Dtype::I8 => "i8",
            Dtype::F32 => "f32",
        }
    }
}

/// Where peer 1 keeps A, B and C (and its QP's rings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemLoc {
    /// Host memory registered with snic.
    #[value(name = "host_mem")]
    HostMem,
    /// On-board device memory.
    #[value(name = "dev_mem")]
    DevMem,
}

impl MemLoc {
    fn name(self) -> &'static str {
        match self {
            MemLoc::HostMem => "host_mem",
            MemLoc::DevMem => "dev_mem",
        }
    }
}

/// Arguments of `snic compute mm`.
#[derive(Debug, clap::Args)]
pub struct MmArgs {
    /// Be peer 1: hold A and B, serve peers on `--listen`.
    #[arg(long, conflicts_with = "peer")]
    serve: bool,
    /// Peer 1's exchange address (HOST or HOST:PORT; port 18520 by default).
    #[arg(long, value_name = "ADDR", required_unless_present = "serve")]
    peer: Option<String>,
    /// Where peer 1 listens.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:18520")]
    listen: SocketAddr,
    /// Serve one peer, then exit (with --serve).
    #[arg(long, requires = "serve")]
    once: bool,
    /// Rows of A and C.
    #[arg(short, value_name = "M", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DIM)))]
    m: u32,
    /// Columns of B and C.
    #[arg(short, value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DIM)))]
    n: u32,
    /// Columns of A, rows of B.
    #[arg(short, value_name = "K", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DIM)))]
    k: u32,
    /// Element type.
    #[arg(long, value_enum, default_value = "f32")]
    dtype: Dtype,
    /// Where peer 1 keeps A and B (asked of it by peer 2).
    #[arg(short = 'l', long = "mem", value_enum, default_value = "host_mem")]
    mem: MemLoc,
    /// Wait for the kernel's status (and the read-back's completion) by interrupt, not polling.
    #[arg(long)]
    interrupt: bool,
    /// One chained command instead of the host driving each step: peer 2's snic READs A and
    /// B, runs the kernel and WRITEs C back to peer 1 by itself (one doorbell, one
    /// completion); C is then read back by DMA too, and peer 1 checks the C it was written.
    #[arg(long, conflicts_with = "serve")]
    chained: bool,
    /// Seed of A and B.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest RDMA READ, bytes (K/M suffixes); more are used when the batch would be too long.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = crate::serve::parse_size)]
    chunk: u64,
    /// Path MTU (0: the largest the route to the peer carries).
    #[arg(long, default_value_t = 0)]
    mtu: u32,
    /// The local snic's setup socket [default: as `snic serve`].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// This side's RoCE address [default: the local snic's RDMA address].
    #[arg(long, value_name = "IP")]
    local_ip: Option<IpAddr>,
    /// Give up after this many seconds of any one step.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    timeout: u64,
    /// Print one JSON object (peer 2) instead of the table.
    #[arg(long)]
    json: bool,
}

/// Run `snic compute`.
pub fn run(args: ComputeArgs) -> Result<()> {
    match args.cmd {
        ComputeCmd::Mm(a) if a.serve => serve(&a),
        ComputeCmd::Mm(a) => {
            let r = client(&a)?;
            print_report(&a, &r);
            if r.mismatch.is_some() {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The exchange
// ---------------------------------------------------------------------------------------------

/// A memory region the peer may use: `len` bytes at `addr` under `rkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    /// First byte (host IOVA or device address of peer 1's snic).
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Bytes.
    pub len: u64,
}

/// One message of the exchange (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case", deny_unknown_fields)]
pub enum Msg {
    /// Peer 2 asks for a problem and gives its QP.
    Request {
        /// [`VERSION`].
        version: u32,
        /// Rows of A.
        m: u32,
        /// Columns of B.
        n: u32,
        /// Columns of A.
        k: u32,
        /// Element type.
        dtype: Dtype,
        /// Seed of A and B.
        seed: u64,
        /// Where peer 1 keeps them.
        mem: MemLoc,
        /// Peer 2's QP.
        qpn: u32,
        /// Peer 2's RoCE address.
        ip: IpAddr,
        /// Path MTU (0: the route's).
        mtu: u32,
    },
    /// Peer 1's QP and regions.
    Ready {
        /// Peer 1's QP.
        qpn: u32,
        /// Peer 1's RoCE address.
        ip: IpAddr,
        /// A (READ).
        a: Region,
        /// B (READ).
        b: Region,
        /// C's place on peer 1 (WRITE).
        c: Region,
    },
    /// Peer 2 is finished.
    Done {
        /// Whether C verified.
        verified: bool,
        /// Whether peer 2 wrote C into peer 1's C region (then peer 1 checks it too).
        #[serde(default)]
        c_written: bool,
    },
    /// The sender cannot go on.
    Error {
        /// Why.
        message: String,
    },
}

/// Why the exchange failed.
#[derive(Debug)]
pub enum ExchangeError {
    /// The connection failed.
    Io(std::io::Error),
    /// The peer closed the connection before a whole message.
    Closed,
    /// A line longer than [`MAX_LINE`].
    TooLong,
    /// A line that is not a message.
    Malformed(serde_json::Error),
    /// A message out of turn.
    Unexpected {
        /// What was expected.
        want: &'static str,
        /// What came (its tag).
        got: &'static str,
    },
    /// The peer reported an error.
    Peer(String),
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Io(e) => write!(f, "exchange: {e}"),
            ExchangeError::Closed => f.write_str("exchange: the peer closed the connection"),
            ExchangeError::TooLong => write!(f, "exchange: a line longer than {MAX_LINE} bytes"),
            ExchangeError::Malformed(e) => write!(f, "exchange: not a message: {e}"),
            ExchangeError::Unexpected { want, got } => {
                write!(f, "exchange: expected {want}, got {got}")
            }
            ExchangeError::Peer(m) => write!(f, "the peer says: {m}"),
        }
    }
}

impl std::error::Error for ExchangeError {}

impl Msg {
    /// The message's tag.
    pub fn tag(&self) -> &'static str {
        match self {
            Msg::Request { .. } => "request",
            Msg::Ready { .. } => "ready",
            Msg::Done { .. } => "done",
            Msg::Error { .. } => "error",
        }
    }

    /// One line (JSON and a newline).
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("messages always serialize");
        s.push('\n');
        s
    }

    /// The message of one line (without or with its newline).
    pub fn from_line(line: &[u8]) -> Result<Msg, ExchangeError> {
        if line.len() > MAX_LINE {
            return Err(ExchangeError::TooLong);
        }
        serde_json::from_slice(line).map_err(ExchangeError::Malformed)
    }
}

/// Read one message; `Ok(None)` at a clean end of the stream.
pub fn read_msg(r: &mut impl BufRead) -> Result<Option<Msg>, ExchangeError> {
    let mut line = Vec::new();
    let n = r.take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line).map_err(ExchangeError::Io)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(if line.len() > MAX_LINE {
            ExchangeError::TooLong
        } else {
            ExchangeError::Closed
        });
    }
    Msg::from_line(&line).map(Some)
}

/// Read one message, which must be there; an `error` message becomes [`ExchangeError::Peer`].
fn expect_msg(r: &mut impl BufRead) -> Result<Msg, ExchangeError> {
    match read_msg(r)? {
        None => Err(ExchangeError::Closed),
        Some(Msg::Error { message }) => Err(ExchangeError::Peer(message)),
        Some(m) => Ok(m),
    }
}

fn send_msg(w: &mut impl Write, m: &Msg) -> Result<(), ExchangeError> {
    w.write_all(m.to_line().as_bytes()).and_then(|()| w.flush()).map_err(ExchangeError::Io)
}

// ---------------------------------------------------------------------------------------------
// The data
// ---------------------------------------------------------------------------------------------

/// Bytes of A, B and C, checked against [`MAX_BYTES`].
fn sizes(m: u32, n: u32, k: u32, dt: Dtype) -> Result<(u64, u64, u64), String> {
    let (m, n, k) = (u64::from(m), u64::from(n), u64::from(k));
    let (a, b, c) = (m * k * dt.size(), k * n * dt.size(), m * n * 4);
    if [m, n, k].iter().any(|&d| d == 0 || d > u64::from(MAX_DIM)) {
        return Err(format!("dimensions {m}x{n}x{k}: each 1 ..= {MAX_DIM}"));
    }
    if a + b + c > MAX_BYTES {
        return Err(format!("A, B and C take {} bytes, more than {MAX_BYTES}", a + b + c));
    }
    Ok((a, b, c))
}

// ---------------------------------------------------------------------------------------------
// Both sides
// ---------------------------------------------------------------------------------------------

fn open_device(a: &MmArgs, name: &str) -> Result<Device> {
    let sock = a.socket.clone().unwrap_or_else(snic_device::default_socket_path);
    Device::connect(&sock, name).with_context(|| {
        format!("connecting to snic at {} (is `snic serve` running?)", sock.display())
    })
}

/// This side's RoCE address: `--local-ip`, else the local snic's RDMA address.
fn local_ip(a: &MmArgs, dev: &Device) -> Result<IpAddr> {
    if let Some(ip) = a.local_ip {
        return Ok(ip);
    }
    let st = dev.stats().context("asking snic for its RDMA address")?;
    let addr = st["rdma"]["addr"].as_str().context(
        "the local snic has no RDMA address (start it with --rdma ADDR, or --port and --rdma-ip)",
    )?;
    let sa: SocketAddr = addr.parse().with_context(|| format!("snic's RDMA address {addr:?}"))?;
    Ok(sa.ip())
}

// ---------------------------------------------------------------------------------------------
// Peer 1
// ---------------------------------------------------------------------------------------------

/// What peer 1 holds for one peer; freed on drop (QP first, then MRs, then memory).
struct Held<'d> {
    dev: &'d Device,
    qpn: Option<u32>,
    lkeys: Vec<u32>,
    dev_allocs: Vec<u64>,
    host: Vec<HostBuf>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(q) = self.qpn {
            let _ = self.dev.rdma_destroy_qp(q);
        }
        for &l in &self.lkeys {
            let _ = self.dev.rdma_dereg_mr(l);
        }
        for &d in &self.dev_allocs {
            let _ = self.dev.free_device(d);
        }
        self.host.clear();
    }
}

impl<'d> Held<'d> {
    /// A region of `bytes` in `mem` holding `data` (zeros when empty), under an MR with
    /// `access`.
    fn region(&mut self, mem: MemLoc, bytes: u64, data: &[u8], access: u32) -> Result<Region> {
        let addr = match mem {
            MemLoc::HostMem => {
                let b = self.dev.alloc_host(bytes as usize)?;
                b.write(0, data)?;
                let iova = b.iova();
                self.host.push(b);
                iova
            }
            MemLoc::DevMem => {
                let d = self.dev.alloc_device(DevKind::OnBoard, bytes, 4096)?;
                self.dev_allocs.push(d);
                if !data.is_empty() {
                    self.dev.write_device(d, data)?;
                }
                d
            }
        };
        let (lkey, rkey) = self.dev.rdma_reg_mr(addr, bytes, access)?;
        self.lkeys.push(lkey);
        Ok(Region { addr, rkey, len: bytes })
    }
}

fn serve(a: &MmArgs) -> Result<()> {
    let dev = open_device(a, "snic-compute-mm-peer1")?;
    let ip = local_ip(a, &dev)?;
    let listener =
        TcpListener::bind(a.listen).with_context(|| format!("listening on {}", a.listen))?;
    println!("snic compute mm: peer 1 on {} (RoCE {ip}), waiting for peers", a.listen);
    let _ = std::io::stdout().flush();
    loop {
        let (conn, from) = listener.accept().context("accepting a peer")?;
        let r = serve_one(a, &dev, ip, conn);
        match &r {
            Ok((req, verified)) => println!(
                "served {req} for {from}: {}",
                if *verified { "verified" } else { "NOT verified" }
            ),
            Err(e) => eprintln!("snic compute mm: peer {from}: {e:#}"),
        }
        // Flushed now: a script reads it while this process waits for the next peer.
        let _ = std::io::stdout().flush();
        if a.once {
            return r.map(|_| ()).with_context(|| format!("serving {from}"));
        }
    }
}

/// Serve one peer: returns a description of its problem and whether it verified C.
fn serve_one(a: &MmArgs, dev: &Device, ip: IpAddr, conn: TcpStream) -> Result<(String, bool)> {
    let t = Duration::from_secs(a.timeout);
    conn.set_read_timeout(Some(t))?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    let (version, m, n, k, dtype, seed, mem, qpn, peer_ip, mtu) = match expect_msg(&mut r)? {
        Msg::Request { version, m, n, k, dtype, seed, mem, qpn, ip, mtu } => {
            (version, m, n, k, dtype, seed, mem, qpn, ip, mtu)
        }
        other => bail!(ExchangeError::Unexpected { want: "request", got: other.tag() }),
    };
    let what = format!("{m}x{n}x{k} {} ({})", dtype.name(), mem.name());
    let mut held =
        Held { dev, qpn: None, lkeys: Vec::new(), dev_allocs: Vec::new(), host: Vec::new() };
    let ready = (|| -> Result<Msg> {
        ensure!(version == VERSION, "exchange version {version} (this peer speaks {VERSION})");
        let (a_len, b_len, c_len) = sizes(m, n, k, dtype).map_err(anyhow::Error::msg)?;
        let am = matrix(seed, 1, (a_len / dtype.size()) as usize, dtype.code());
        let bm = matrix(seed, 2, (b_len / dtype.size()) as usize, dtype.code());
        let ra = held.region(mem, a_len, &am, rdma_access::REMOTE_READ)?;
        let rb = held.region(mem, b_len, &bm, rdma_access::REMOTE_READ)?;
        let write = rdma_access::LOCAL_WRITE | rdma_access::REMOTE_WRITE;
        let rc = held.region(mem, c_len, &[], write)?;
        let qp = match mem {
            MemLoc::HostMem => {
                let rings = dev.alloc_host(64 << 10)?;
                let q = dev.rdma_create_qp(Placement::Host(&rings), 16)?;
                held.host.push(rings);
                q
            }
            MemLoc::DevMem => dev.rdma_create_qp(Placement::OnBoard, 16)?,
        };
        held.qpn = Some(qp.qpn);
        dev.rdma_connect(qp.qpn, qpn, peer_ip, mtu)?;
        Ok(Msg::Ready { qpn: qp.qpn, ip, a: ra, b: rb, c: rc })
    })();
    let ready = match ready {
        Ok(m) => m,
        Err(e) => {
            let _ = send_msg(&mut w, &Msg::Error { message: format!("{e:#}") });
            return Err(e);
        }
    };
    send_msg(&mut w, &ready)?;
    // Hold everything until the peer is done: its fetch, kernel and read-back each have
    // `--timeout` on its side.
    r.get_ref().set_read_timeout(Some(t.saturating_mul(4)))?;
    let (verified, c_written) = match read_msg(&mut r)? {
        Some(Msg::Done { verified, c_written }) => (verified, c_written),
        None => (false, false),
        Some(Msg::Error { message }) => bail!(ExchangeError::Peer(message)),
        Some(other) => bail!(ExchangeError::Unexpected { want: "done", got: other.tag() }),
    };
    let mut what = what;
    if c_written {
        let Msg::Ready { c: rc, .. } = &ready else { unreachable!("ready is a Ready") };
        let mut c = vec![0u8; rc.len as usize];
        match mem {
            // A, B and C are the first three host buffers (`Held::region`).
            MemLoc::HostMem => held.host[2].read(0, &mut c)?,
            MemLoc::DevMem => dev.read_device(rc.addr, &mut c)?,
        }
        let am = matrix(seed, 1, (m * k) as usize, dtype.code());
        let bm = matrix(seed, 2, (k * n) as usize, dtype.code());
        let dims = (m as usize, n as usize, k as usize);
        what += &match verify(dims, dtype.code(), &am, &bm, &c) {
            None => ", the C written back verified".to_string(),
            Some(x) => format!(
                ", the C written back differs at row {} col {}: got {}, want {}",
                x.row, x.col, x.got, x.want
            ),
        };
    }
    drop(held);
    Ok((what, verified))
}

// ---------------------------------------------------------------------------------------------
// Peer 2
// ---------------------------------------------------------------------------------------------

/// What one run of peer 2 measured and found.
#[derive(Debug, Clone, Serialize)]
pub struct MmReport {
    m: u32,
    n: u32,
    k: u32,
    dtype: Dtype,
    mem: MemLoc,
    interrupt: bool,
    /// One chained command (snic drove fetch, kernel and write-back).
    chained: bool,
    /// RDMA READs posted (one batch, one doorbell).
    reads: usize,
    /// Bytes fetched.
    fetched: u64,
    setup_ns: u64,
    fetch_ns: u64,
    kernel_ns: u64,
    notify_ns: u64,
    /// Chained: the WRITE of C to peer 1 (0 otherwise).
    write_back_ns: u64,
    readback_ns: u64,
    /// fetch + kernel + notify + write-back + read-back.
    total_ns: u64,
    /// 2·M·N·K over the kernel's time, 10^9 per second (GOP/s for i8).
    gops_kernel: f64,
    /// 2·M·N·K over the total.
    gops_total: f64,
    verified: bool,
    mismatch: Option<Mismatch>,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

fn connect_peer(spec: &str) -> Result<TcpStream> {
    let with_port = if spec.parse::<SocketAddr>().is_ok()
        || spec.rsplit_once(':').is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok())
    {
        spec.to_string()
    } else {
        format!("{spec}:18520")
    };
    let addrs: Vec<SocketAddr> =
        with_port.to_socket_addrs().with_context(|| format!("peer address {spec:?}"))?.collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(|| anyhow::anyhow!("peer {spec:?}: no address"), |e| e.into()))
        .with_context(|| format!("connecting to peer 1 at {with_port}"))
}

/// The timed steps between set-up and read-back.
struct Steps {
    fetch: Duration,
    kernel: Duration,
    notify: Duration,
    write_back: Duration,
}

/// RecoNIC's steps 2-7 driven by the host: the READs as one batch (one doorbell), poll the CQ
/// until all completed, the kernel command, its status (polled or by interrupt).
fn host_driven(
    dev: &Device,
    qpn: u32,
    wrs: &[RdmaWr],
    cmd: &KernelCmd,
    t: Duration,
) -> Result<Steps> {
    let t_fetch = Instant::now();
    dev.rdma_post_batch(qpn, wrs)?;
    let mut done = 0;
    while done < wrs.len() {
        let left = t.checked_sub(t_fetch.elapsed()).context("the RDMA READs timed out")?;
        let cqes = dev.rdma_wait_cq(qpn, (wrs.len() - done) as u32, left)?;
        for c in &cqes {
            ensure!(c.status == WC_SUCCESS, "READ {} completed with {}", c.wr_id, c.status_name);
        }
        done += cqes.len();
    }
    let fetch = t_fetch.elapsed();

    let t_kernel = Instant::now();
    dev.kernel_submit(cmd)?;
    let st = dev.kernel_wait(cmd.kernel, cmd.workload, t)?;
    let observed = t_kernel.elapsed();
    ensure!(st.is_ok(), "the GEMM kernel failed: {}", status::name(st.status));
    let kernel = Duration::from_nanos(st.busy_ns);
    // What the host waited beyond the kernel's own run: the command's way to the compute
    // worker and the status's way back (poll or interrupt).
    let notify = observed.saturating_sub(kernel);
    Ok(Steps { fetch, kernel, notify, write_back: Duration::ZERO })
}

/// The same as one chained command: snic READs, runs the kernel and WRITEs C to peer 1's
/// `rc` by itself; the host waits for the one completion.
fn chained(
    dev: &Device,
    qpn: u32,
    wrs: &[RdmaWr],
    cmd: &KernelCmd,
    rc: Region,
    lkey: u32,
    t: Duration,
) -> Result<Steps> {
    let reads: Vec<ChainRead> = wrs
        .iter()
        .filter_map(|w| match w.op {
            RdmaOp::Read { remote_addr, rkey } => {
                Some(ChainRead { remote_addr, rkey, local: w.local })
            }
            _ => None,
        })
        .collect();
    let c = cmd.addr_args()[2];
    let write = ChainWrite {
        local: RdmaSge { addr: c.addr, lkey, len: c.len as u32 },
        remote_addr: rc.addr,
        rkey: rc.rkey,
    };
    let t0 = Instant::now();
    dev.rdma_chain(qpn, 77, &reads, cmd, Some(write))?;
    let cqe = loop {
        let left = t.checked_sub(t0.elapsed()).context("the chained command timed out")?;
        let got = dev.rdma_wait_cq(qpn, 1, left)?;
        if let Some(c) = got.into_iter().find(|c| c.opcode == WC_CHAIN) {
            break c;
        }
    };
    let observed = t0.elapsed();
    let rep = cqe.chain.context("a chain completion without its report")?;
    ensure!(
        cqe.status == WC_SUCCESS && rep.outcome == "done",
        "the chained command ended {} (kernel status {})",
        rep.outcome,
        status::name(rep.kernel_status)
    );
    let (fetch, kernel, write_back) = (
        Duration::from_nanos(rep.fetch_ns),
        Duration::from_nanos(rep.kernel_ns),
        Duration::from_nanos(rep.write_ns),
    );
    let notify = observed.saturating_sub(fetch + kernel + write_back);
    Ok(Steps { fetch, kernel, notify, write_back })
}

fn client(a: &MmArgs) -> Result<MmReport> {
    let peer = a.peer.as_deref().context("--peer ADDR is required")?;
    let t = Duration::from_secs(a.timeout);
    let dt = a.dtype;
    let (a_len, b_len, c_len) = sizes(a.m, a.n, a.k, dt).map_err(anyhow::Error::msg)?;
    let t_setup = Instant::now();

    // Step 1: set up the device side and the connection.
    let dev = open_device(a, "snic-compute-mm-peer2")?;
    let ip = local_ip(a, &dev)?;
    let base = dev.alloc_device(DevKind::OnBoard, a_len + b_len + c_len, 4096)?;
    let (da, db, dc) = (base, base + a_len, base + a_len + b_len);
    // A and B land in it; a chained command also WRITEs C from it.
    let (lkey, _) = dev.rdma_reg_mr(base, a_len + b_len + c_len, rdma_access::LOCAL_WRITE)?;
    let qp = dev.rdma_create_qp(Placement::OnBoard, RDMA_MAX_BATCH as u32)?;
    // C comes back by C2H DMA on a queue into this host buffer.
    let host_c = dev.alloc_host(c_len as usize)?;
    let c2h_descs = c_len.div_ceil(C2H_CHUNK) as usize;
    let ring = c2h_descs.next_power_of_two().clamp(2, 32_768) as u32;
    let mut queue = dev.open_queue(QueueOpts {
        ring_size: ring,
        cmpt_size: (2 * ring).min(32_768),
        interrupt: a.interrupt,
        ..QueueOpts::default()
    })?;
    ensure!(c2h_descs <= ring as usize, "C needs {c2h_descs} descriptors, more than a ring holds");
    dev.kernel_set_interrupt(ids::GEMM, a.interrupt)?;

    let conn = connect_peer(peer)?;
    conn.set_read_timeout(Some(t))?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    let req = Msg::Request {
        version: VERSION,
        m: a.m,
        n: a.n,
        k: a.k,
        dtype: dt,
        seed: a.seed,
        mem: a.mem,
        qpn: qp.qpn,
        ip,
        mtu: a.mtu,
    };
    send_msg(&mut w, &req)?;
    let (peer_qpn, peer_ip, ra, rb, rc) = match expect_msg(&mut r)? {
        Msg::Ready { qpn, ip, a, b, c } => (qpn, ip, a, b, c),
        other => bail!(ExchangeError::Unexpected { want: "ready", got: other.tag() }),
    };
    ensure!(
        ra.len == a_len && rb.len == b_len && rc.len == c_len,
        "peer 1 offers A, B and C of {}, {} and {} bytes",
        ra.len,
        rb.len,
        rc.len
    );
    dev.rdma_connect(qp.qpn, peer_qpn, peer_ip, a.mtu)?;
    let setup = t_setup.elapsed();

    // The READs: A then B, at most `chunk` bytes each, one batch.
    let total = a_len + b_len;
    let most = if a.chained { snic_nic::offload::MAX_READS } else { RDMA_MAX_BATCH } as u64;
    let chunk = a.chunk.max(total.div_ceil(most - 2)).min(u64::from(RDMA_MAX_MSG));
    let mut wrs = Vec::new();
    for (remote, local, len) in [(ra, da, a_len), (rb, db, b_len)] {
        let mut off = 0;
        while off < len {
            let l = chunk.min(len - off);
            let sge = RdmaSge { addr: local + off, lkey, len: l as u32 };
            wrs.push(RdmaWr::read(wrs.len() as u64, sge, remote.addr + off, remote.rkey));
            off += l;
        }
    }
    let cmd = KernelCmd::new(ids::GEMM, 1)
        .addr(da, a_len)
        .addr(db, b_len)
        .addr(dc, c_len)
        .scalar(u64::from(a.m))
        .scalar(u64::from(a.n))
        .scalar(u64::from(a.k))
        .scalar(dt.code())
        .scalar(0);

    let steps = if a.chained {
        chained(&dev, qp.qpn, &wrs, &cmd, rc, lkey, t)?
    } else {
        host_driven(&dev, qp.qpn, &wrs, &cmd, t)?
    };

    // Step 8: C back to host memory, C2H DMA.
    let t_back = Instant::now();
    let mut off = 0;
    while off < c_len {
        let l = C2H_CHUNK.min(c_len - off);
        queue
            .post(Dir::C2h, &snic_host::Descriptor::new(dc + off, host_c.iova() + off, l as u32))?;
        off += l;
    }
    queue.doorbell(Dir::C2h);
    let mut got = 0;
    let mut cmpt = vec![snic_host::Completion::default(); c2h_descs];
    while got < c2h_descs {
        let left = t.checked_sub(t_back.elapsed()).context("the read-back timed out")?;
        let n = queue.wait(&mut cmpt[got..], left)?;
        for c in &cmpt[got..got + n] {
            let ok = snic_host::Status::from_code(c.status) == Some(snic_host::Status::Ok);
            ensure!(ok && c.dir == Dir::C2h.code(), "read-back DMA failed: {c:?}");
        }
        got += n;
    }
    let readback = t_back.elapsed();

    // Check.
    let mut c = vec![0u8; c_len as usize];
    host_c.read(0, &mut c)?;
    let am = matrix(a.seed, 1, (a_len / dt.size()) as usize, dt.code());
    let bm = matrix(a.seed, 2, (b_len / dt.size()) as usize, dt.code());
    let dims = (a.m as usize, a.n as usize, a.k as usize);
    let mismatch = verify(dims, dt.code(), &am, &bm, &c);
    let done = Msg::Done { verified: mismatch.is_none(), c_written: a.chained };
    let _ = send_msg(&mut w, &done);
    // Peer 1 frees its side (and checks a C written back) once it has `done`: wait for it to
    // close, so that a next run does not race it.
    let _ = read_msg(&mut r);

    let Steps { fetch, kernel, notify, write_back } = steps;
    let ops = 2.0 * f64::from(a.m) * f64::from(a.n) * f64::from(a.k);
    let total_t = fetch + kernel + notify + write_back + readback;
    let per_s = |d: Duration| if d.is_zero() { 0.0 } else { ops / d.as_secs_f64() / 1e9 };
    Ok(MmReport {
        m: a.m,
        n: a.n,
        k: a.k,
        dtype: dt,
        mem: a.mem,
        interrupt: a.interrupt,
        chained: a.chained,
        reads: wrs.len(),
        fetched: total,
        setup_ns: ns(setup),
        fetch_ns: ns(fetch),
        kernel_ns: ns(kernel),
        notify_ns: ns(notify),
        write_back_ns: ns(write_back),
        readback_ns: ns(readback),
        total_ns: ns(total_t),
        gops_kernel: per_s(kernel),
        gops_total: per_s(total_t),
        verified: mismatch.is_none(),
        mismatch,
    })
}

fn print_report(a: &MmArgs, r: &MmReport) {
    if a.json {
        println!("{}", serde_json::to_string(r).expect("reports serialize"));
        return;
    }
    let ms = |v: u64| v as f64 / 1e6;
    let unit = if r.dtype == Dtype::I8 { "GOP/s" } else { "GFLOP/s" };
    println!(
        "networked mm {}x{}x{} {}: A, B in peer 1's {}, {} READs in one batch, {}",
        r.m,
        r.n,
        r.k,
        r.dtype.name(),
        r.mem.name(),
        r.reads,
        if r.chained {
            "chained"
        } else if r.interrupt {
            "interrupt"
        } else {
            "poll"
        }
    );
    let gbit = if r.fetch_ns == 0 { 0.0 } else { r.fetched as f64 * 8.0 / r.fetch_ns as f64 };
    println!("  connection set-up {:>10.3} ms", ms(r.setup_ns));
    println!(
        "  RDMA fetch        {:>10.3} ms  ({} bytes, {gbit:.2} Gbit/s)",
        ms(r.fetch_ns),
        r.fetched
    );
    println!("  kernel            {:>10.3} ms  ({:.2} {unit})", ms(r.kernel_ns), r.gops_kernel);
    println!("  notification      {:>10.3} ms", ms(r.notify_ns));
    if r.chained {
        println!("  write-back (WRITE){:>10.3} ms", ms(r.write_back_ns));
    }
    println!("  read-back (C2H)   {:>10.3} ms", ms(r.readback_ns));
    println!(
        "  total             {:>10.3} ms  ({:.2} {unit} end to end)",
        ms(r.total_ns),
        r.gops_total
    );
    match &r.mismatch {
        None => println!("verified"),
        Some(x) => {
            println!("mismatch at row {} col {}: got {}, want {}", x.row, x.col, x.got, x.want)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_bad_lines_are_typed_errors() {
        let req = Msg::Request {
            version: VERSION,
            m: 3,
            n: 5,
            k: 7,
            dtype: Dtype::I8,
            seed: 9,
            mem: MemLoc::DevMem,
            qpn: 0x11,
            ip: "10.0.0.2".parse().unwrap(),
            mtu: 0,
        };
        let line = req.to_line();
        assert!(
            line.contains(r#""msg":"request""#) && line.contains(r#""mem":"dev_mem""#),
            "{line}"
        );
        assert_eq!(Msg::from_line(line.as_bytes()).unwrap(), req);
        let mut r = BufReader::new(line.as_bytes());
        assert_eq!(read_msg(&mut r).unwrap(), Some(req));
        assert!(read_msg(&mut r).unwrap().is_none());

        for bad in [
            &b"{\"msg\":\"nope\"}\n"[..],
            b"not json\n",
            b"{\"msg\":\"done\"}\n",
            b"{\"msg\":\"done\",\"verified\":true,\"x\":1}\n",
        ] {
            let e = read_msg(&mut BufReader::new(bad)).unwrap_err();
            assert!(matches!(e, ExchangeError::Malformed(_)), "{e}");
        }
        let e = read_msg(&mut BufReader::new(&b"{\"msg\":\"done\""[..])).unwrap_err();
        assert!(matches!(e, ExchangeError::Closed), "{e}");
        let long = vec![b' '; MAX_LINE + 10];
        let e = read_msg(&mut BufReader::new(&long[..])).unwrap_err();
        assert!(matches!(e, ExchangeError::TooLong), "{e}");
        let err = Msg::Error { message: "no memory".into() }.to_line();
        let e = expect_msg(&mut BufReader::new(err.as_bytes())).unwrap_err();
        assert!(matches!(&e, ExchangeError::Peer(m) if m == "no memory"), "{e}");
    }

    #[test]
    fn data_is_seeded_and_verify_finds_the_first_wrong_element() {
        assert_eq!(matrix(5, 1, 16, Dtype::F32.code()), matrix(5, 1, 16, Dtype::F32.code()));
        assert_ne!(matrix(5, 1, 16, Dtype::I8.code()), matrix(5, 2, 16, Dtype::I8.code()));
        let f = matrix(5, 1, 1000, Dtype::F32.code());
        assert!(f.chunks(4).all(|w| {
            let v = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            (-1.0..1.0).contains(&v)
        }));
        for dt in [Dtype::I8, Dtype::F32] {
            let (m, n, k) = (3, 4, 5);
            let a = matrix(2, 1, m * k, dt.code());
            let b = matrix(2, 2, k * n, dt.code());
            let mut c = Vec::new();
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0f64;
                    for l in 0..k {
                        let e = |v: &[u8], x: usize| match dt {
                            Dtype::I8 => f64::from(v[x] as i8),
                            Dtype::F32 => f64::from(f32::from_le_bytes(
                                v[4 * x..4 * x + 4].try_into().unwrap(),
                            )),
                        };
                        s += e(&a, i * k + l) * e(&b, l * n + j);
                    }
                    match dt {
                        Dtype::I8 => c.extend_from_slice(&(s as i32).to_le_bytes()),
                        Dtype::F32 => c.extend_from_slice(&(s as f32).to_le_bytes()),
                    }
                }
            }
            assert_eq!(verify((m, n, k), dt.code(), &a, &b, &c), None, "{dt:?}");
            c[4 * (2 * n + 1) + 3] ^= 0x40;
            let x = verify((m, n, k), dt.code(), &a, &b, &c).expect("a mismatch");
            assert_eq!((x.row, x.col), (2, 1), "{dt:?}");
        }
    }

    #[test]
    fn sizes_are_bounded() {
        assert_eq!(sizes(2, 3, 4, Dtype::F32), Ok((32, 48, 24)));
        assert!(sizes(0, 3, 4, Dtype::I8).is_err());
        assert!(sizes(MAX_DIM, MAX_DIM, MAX_DIM, Dtype::F32).is_err());
    }
}
