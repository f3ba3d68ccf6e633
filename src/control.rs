//! The control socket of a running `snic run`: its protocol, its server and the client calls
//! that `snic stats` and `snic vswitch` make.
//!
//! A `snic run --control PATH` listens on a Unix stream socket at `PATH`. One exchange per
//! connection: the client writes one request line (a JSON object, see [`Request`]) and shuts
//! down its write side; the server reads it (at most [`MAX_REQUEST`] bytes, within
//! [`REQUEST_TIMEOUT`]), answers with one JSON document followed by a newline and closes the
//! connection. An empty request (the client sends nothing) is answered with the counters
//! document alone, as the first version of the protocol did, so clients that only read keep
//! working. Every other answer is `{"ok":true, ...}` or `{"ok":false,"error":"..."}`.
//!
//! The server is one thread handling one client at a time; it never touches the data path
//! beyond what its handler does (the counters are a snapshot the run loop refreshes; vSwitch
//! commands go through the vSwitch's own control API). It does not authenticate: access is
//! whatever the socket file's permissions allow.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest request the server reads (1 MiB); a longer one is refused with an error answer.
pub const MAX_REQUEST: usize = 1 << 20;

/// How long the server waits for a client's whole request. A client that sends nothing in
/// this time gets the counters document (the first protocol's clients only read).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a client waits for the answer (policy changes wait for every shard's batch).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Most flows one `vswitch.dump-flows` request may ask for.
pub const MAX_DUMP_LIMIT: usize = 100_000;

fn default_dump_limit() -> usize {
    1000
}

/// Longest window a fast-path restart may hold the slow path alone (10 s).
pub const MAX_HOLD_MS: u64 = 10_000;

fn default_hold_ms() -> u64 {
    100
}

fn default_top() -> usize {
    10
}

/// What `vswitch.top-flows` ranks flows by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopBy {
    /// Packets the flow served.
    #[default]
    Packets,
    /// Bytes the flow served.
    Bytes,
}

/// One request on the control socket: `{"cmd": "...", ...}`. Unknown fields of the requests
/// that take arguments are refused (a misspelt `limit` is an error, not the default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", deny_unknown_fields)]
pub enum Request {
    /// `{"cmd":"stats"}`: the counters, as `{"ok":true,"counters":{...}}`.
    #[serde(rename = "stats")]
    Stats,
    /// `{"cmd":"upgrade","channel":"/path.sock"}`: a new process asks to take this one over
    /// (`snic run --takeover`); this process connects to the new one's takeover channel at
    /// `channel` and hands over there (see `crate::upgrade`). Answer: `{"ok":true}` once the
    /// run is asked to pause.
    #[serde(rename = "upgrade")]
    Upgrade {
        /// The new process's takeover channel.
        channel: String,
    },
    /// `{"cmd":"vswitch.show"}`: the vSwitch counters, as `{"ok":true,"vswitch":{...}}`.
    #[serde(rename = "vswitch.show")]
    VSwitchShow,
    /// `{"cmd":"vswitch.dump-flows","limit":N}`: up to `limit` cached flows (default 1000, at
    /// most [`MAX_DUMP_LIMIT`]), as `{"ok":true,"count":n,"flows":[...]}`; with `"text":true`
    /// as `"lines":[...]` in `ovs-appctl dpctl/dump-flows` style instead.
    #[serde(rename = "vswitch.dump-flows")]
    DumpFlows {
        /// Most flows to return.
        #[serde(default = "default_dump_limit")]
        limit: usize,
        /// One formatted line per flow instead of JSON objects.
        #[serde(default)]
        text: bool,
    },
    /// `{"cmd":"vswitch.top-flows","n":N,"by":"packets"}`: the `n` cached flows (GFT entries)
    /// that served the most packets (or `"bytes"`), most first (default 10, at most
    /// [`MAX_DUMP_LIMIT`]), as `{"ok":true,"by":..,"total":flows,"flows":[...]}` (each as in
    /// `vswitch.dump-flows`). Ranking reads the whole table on the control thread.
    #[serde(rename = "vswitch.top-flows")]
    TopFlows {
        /// How many flows.
        #[serde(default = "default_top")]
        n: usize,
        /// The ranking.
        #[serde(default)]
        by: TopBy,
    },
    /// `{"cmd":"vswitch.policy"}`: the policy in force as TOML text,
    /// `{"ok":true,"generation":g,"policy":"..."}`.
    #[serde(rename = "vswitch.policy")]
    Policy,
    /// `{"cmd":"vswitch.apply","edits":[...]}`: change the policy; all edits are one
    /// transaction. Answer: `{"ok":true,"generation":g,"vports":[{"id":v,"epoch":e}],"removed":n}`.
    #[serde(rename = "vswitch.apply")]
    Apply {
        /// The edits, applied in order, all or none.
        edits: Vec<Edit>,
    },
    /// `{"cmd":"vswitch.restart-fastpath","hold_ms":N}`: drop and rebuild every shard's flow
    /// table; for `hold_ms` (default 100, at most [`MAX_HOLD_MS`]) the slow path serves every
    /// packet, then flows are cached again as their packets come. Connections, SNAT bindings
    /// and policy are kept. Answer: `{"ok":true,"restarts":n,"shards":s,"flushed":f,
    /// "fastpath_off_until_ns":t,"hold_ms":h}`.
    #[serde(rename = "vswitch.restart-fastpath")]
    RestartFastpath {
        /// How long the slow path alone serves every packet, in milliseconds.
        #[serde(default = "default_hold_ms")]
        hold_ms: u64,
    },
    /// `{"cmd":"p4.cli","text":"table_add ..."}`: `simple_switch_CLI` commands (one a line)
    /// for the run's `p4` stage, each applied to every worker's switch between batches, all
    /// or none; the lines run in order and stop at the first refused one. Answer:
    /// `{"ok":true,"output":"..."}` with what `simple_switch_CLI` prints.
    #[serde(rename = "p4.cli")]
    P4 {
        /// The command lines.
        text: String,
    },
    /// `{"cmd":"stream.list"}`: the run's streaming-kernel stages, their registers (each
    /// worker's value) and where their results are. Answer: `{"ok":true,"kernels":[...]}`.
    #[serde(rename = "stream.list")]
    StreamList,
    /// `{"cmd":"stream.reg","stage":"telemetry","reg":"enable","value":0}`: read (no
    /// `value`) or write a register of a kernel stage, named or numbered. A write is checked
    /// at once and applied by every worker before its next batch. Answer:
    /// `{"ok":true,"reg":..,"index":i,"values":[per worker]}`.
    #[serde(rename = "stream.reg")]
    StreamReg {
        /// The kernel stage (`telemetry`, `crypt.1`).
        stage: String,
        /// Register name or number.
        reg: String,
        /// The value to write; none reads.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<u32>,
    },
    /// `{"cmd":"stream.key","stage":"crypt","slot":0,"key":"HEX"}`: load a key (64 hex
    /// digits; empty clears the slot). The key is never echoed or logged.
    #[serde(rename = "stream.key")]
    StreamKey {
        /// The kernel stage.
        stage: String,
        /// Key slot.
        slot: u32,
        /// The key, hex.
        key: String,
    },
    /// `{"cmd":"stream.table","stage":"telemetry","limit":N}`: the telemetry tables of every
    /// worker, decoded from their results memory, up to `limit` flows each (default 1000, at
    /// most [`MAX_DUMP_LIMIT`]). Answer: `{"ok":true,"workers":[{header, device_addr,
    /// flows}]}`.
    #[serde(rename = "stream.table")]
    StreamTable {
        /// The kernel stage.
        stage: String,
        /// Most flows per worker.
        #[serde(default = "default_dump_limit")]
        limit: usize,
    },
    /// `{"cmd":"ebpf.list"}`: the run's `xdp:` stages, their programs, maps and action
    /// counters. Answer: `{"ok":true,"stages":[...]}`.
    #[serde(rename = "ebpf.list")]
    EbpfList,
    /// `{"cmd":"ebpf.load","stage":0,"path":"/abs/prog.o","section":"xdp"}`: hot swap. The
    /// server reads, verifies and prepares the object, then every worker picks the new
    /// program up between two batches; a refusal changes nothing. Answer:
    /// `{"ok":true,"program":..,"insns":n,"verify_us":t,"swap_us":t,"maps":[{"name","kept"}]}`.
    #[serde(rename = "ebpf.load")]
    EbpfLoad {
        /// Which `xdp:` stage (0 = the first).
        #[serde(default)]
        stage: usize,
        /// The object file, as the server sees it (the CLI sends an absolute path).
        path: String,
        /// The program's ELF section; none picks the object's XDP program.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        section: Option<String>,
        /// Load a NIC-core (`snic/core`) program into this slot of a `snic serve` instead
        /// (`stage` is then ignored): kernel `EBPF` runs it with `s0` = the slot.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        core: Option<usize>,
    },
    /// `{"cmd":"ebpf.map","stage":0,"map":"hits","op":"dump|update|delete","key":..,
    /// "value":..,"flags":0}`: read or change a map of an `xdp:` stage (keys and values as
    /// the CLI takes them, see `snic ebpf`). Answer (dump):
    /// `{"ok":true,"count":n,"entries":[{"key","values":[per worker]}]}`.
    #[serde(rename = "ebpf.map")]
    EbpfMap {
        /// Which `xdp:` stage.
        #[serde(default)]
        stage: usize,
        /// The map's name.
        map: String,
        /// `dump`, `update` or `delete`.
        op: String,
        /// The key (update, delete).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The value (update).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
        /// `BPF_ANY` (0), `BPF_NOEXIST` (1) or `BPF_EXIST` (2).
        #[serde(default)]
        flags: u64,
        /// Most entries a dump returns (default 1000, at most [`MAX_DUMP_LIMIT`]).
        #[serde(default = "default_dump_limit")]
        limit: usize,
    },
    /// `{"cmd":"ebpf.events","stage":0,"max":N}`: take up to `max` records from the ring
    /// buffers of an `xdp:` stage's maps. Answer: `{"ok":true,"records":[{"map","data":hex}]}`.
    #[serde(rename = "ebpf.events")]
    EbpfEvents {
        /// Which `xdp:` stage.
        #[serde(default)]
        stage: usize,
        /// Most records to take.
        max: usize,
    },
    /// `{"cmd":"ebpf.trace","stage":0}`: the `bpf_trace_printk` lines kept since the last
    /// request. Answer: `{"ok":true,"lines":[...]}`.
    #[serde(rename = "ebpf.trace")]
    EbpfTrace {
        /// Which `xdp:` stage.
        #[serde(default)]
        stage: usize,
    },
}

pub use snic_vswitch::policy::wire::Edit;

/// The operator's requests that take the connection over (`capture` streams frames) or are
/// answered apart from the counters and control planes (`trace`): `{"cmd":"capture",...}`
/// ([`crate::capture::CaptureRequest`]), `{"cmd":"trace",...}`
/// ([`crate::trace::TraceRequest`]). A server started with [`ControlServer::spawn_with_ops`]
/// hands them to its ops handler with the connection; others refuse them as unknown commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd")]
pub enum OpsRequest {
    /// `{"cmd":"capture","ports":[0],"stage":..,"filter":..,"count":N,"duration_ms":T}`:
    /// a live capture, streamed (see [`crate::capture`]).
    #[serde(rename = "capture")]
    Capture(crate::capture::CaptureRequest),
    /// `{"cmd":"trace","port":0,"packet":"eth()/ipv4()/udp()"}` or `"hex":"..."`: what every
    /// stage would do with the packet, without sending it. Answer: `{"ok":true,"steps":[..]}`.
    #[serde(rename = "trace")]
    Trace(crate::trace::TraceRequest),
}

/// The commands [`OpsRequest`] knows.
pub const OPS_COMMANDS: [&str; 2] = ["capture", "trace"];

/// `Some` when `line` is an ops request (its `cmd` is one of [`OPS_COMMANDS`]): the request or
/// why it is bad; `None` for every other line.
pub fn parse_ops(line: &[u8]) -> Option<Result<OpsRequest, RequestError>> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let cmd = v.get("cmd")?.as_str()?;
    if !OPS_COMMANDS.contains(&cmd) {
        return None;
    }
    Some(serde_json::from_value(v).map_err(|e| RequestError::Bad(e.to_string())))
}

/// Handles an [`OpsRequest`]: it owns the connection and writes its own answer.
pub type OpsHandler = Box<dyn FnMut(OpsRequest, UnixStream) + Send>;

/// What the server read from one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// Nothing (empty request, or the client sent nothing in time): answer with the counters
    /// document alone.
    Counters,
    /// A request.
    Request(Request),
}

/// Why a request could not be read. Its `Display` is what the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// More than [`MAX_REQUEST`] bytes.
    TooLarge,
    /// Part of a request arrived, then nothing more before [`REQUEST_TIMEOUT`].
    Incomplete {
        /// Bytes received.
        got: usize,
    },
    /// Not valid UTF-8 JSON of a known request.
    Bad(String),
    /// The connection failed.
    Io(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::TooLarge => {
                write!(f, "request larger than {MAX_REQUEST} bytes")
            }
            RequestError::Incomplete { got } => write!(
                f,
                "incomplete request: {got} bytes and no newline or end of stream within {} ms",
                REQUEST_TIMEOUT.as_millis()
            ),
            RequestError::Bad(why) => write!(f, "bad request: {why}"),
            RequestError::Io(why) => write!(f, "reading the request: {why}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Parse one request's bytes (without its trailing newline). Empty or blank means
/// [`Incoming::Counters`].
pub fn parse_request(bytes: &[u8]) -> Result<Incoming, RequestError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| RequestError::Bad(format!("not UTF-8 ({e})")))?
        .trim();
    if text.is_empty() {
        return Ok(Incoming::Counters);
    }
    serde_json::from_str::<Request>(text)
        .map(Incoming::Request)
        .map_err(|e| RequestError::Bad(e.to_string()))
}

/// Read one request line from `conn`: up to the first newline or the end of the stream, at
/// most [`MAX_REQUEST`] bytes, all within `timeout` (parse it with [`parse_request`]). Nothing
/// at all within `timeout` is an empty line (an empty request).
pub fn read_line(conn: &mut UnixStream, timeout: Duration) -> Result<Vec<u8>, RequestError> {
    let deadline = std::time::Instant::now() + timeout;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return timed_out(buf);
        }
        conn.set_read_timeout(Some(left)).map_err(|e| RequestError::Io(e.to_string()))?;
        match conn.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let got = chunk.get(..n).unwrap_or_default();
                let line_end = got.iter().position(|&b| b == b'\n');
                let take = line_end.map_or(got, |i| got.get(..i).unwrap_or_default());
                if buf.len() + take.len() > MAX_REQUEST {
                    return Err(RequestError::TooLarge);
                }
                buf.extend_from_slice(take);
                if line_end.is_some() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return timed_out(buf);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(RequestError::Io(e.to_string())),
        }
    }
    Ok(buf)
}

fn timed_out(buf: Vec<u8>) -> Result<Vec<u8>, RequestError> {
    if buf.iter().all(u8::is_ascii_whitespace) {
        Ok(Vec::new())
    } else {
        Err(RequestError::Incomplete { got: buf.len() })
    }
}

/// `{"ok":false,"error":msg}` as text.
pub fn error_reply(msg: &str) -> String {
    serde_json::json!({"ok": false, "error": msg}).to_string()
}

/// Send `request` (empty: the counters document) and return the answer's text, checked to be
/// JSON.
fn exchange(path: &Path, request: &[u8]) -> Result<String> {
    if request.len() > MAX_REQUEST {
        bail!(
            "request of {} bytes is larger than the control socket accepts ({MAX_REQUEST} bytes)",
            request.len()
        );
    }
    let mut stream = UnixStream::connect(path).with_context(|| {
        format!(
            "cannot connect to control socket {} (is `snic run --control` running?)",
            path.display()
        )
    })?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
    if !request.is_empty() {
        stream.write_all(request).context("writing to control socket")?;
        stream.write_all(b"\n").context("writing to control socket")?;
    }
    stream.shutdown(std::net::Shutdown::Write).context("closing the request")?;
    let mut doc = String::new();
    stream.read_to_string(&mut doc).context("reading from control socket")?;
    let doc = doc.trim_end().to_owned();
    // Check it is the JSON we expect before handing it on.
    serde_json::from_str::<Value>(&doc)
        .context("control socket sent something that is not JSON")?;
    Ok(doc)
}

/// Fetch the counters document from a control socket (an empty request).
pub fn query(path: &Path) -> Result<String> {
    exchange(path, b"")
}

/// Send `request` and return the answer when it is `{"ok":true,...}`; an `{"ok":false}`
/// answer becomes an error carrying the server's message.
pub fn request(path: &Path, request: &Request) -> Result<Value> {
    let line = serde_json::to_vec(request).context("encoding the request")?;
    let doc = exchange(path, &line)?;
    let v: Value = serde_json::from_str(&doc).context("control socket answer")?;
    match v.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(v),
        Some(false) => {
            let msg = v.get("error").and_then(Value::as_str).unwrap_or("(no message)");
            bail!("{msg}")
        }
        None => bail!("control socket answer has no \"ok\" field: {doc}"),
    }
}

/// The server side: a thread answering each connection with `handler(incoming)`.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    /// The socket file's device and inode as bound: the file is removed on drop only if it is
    /// still this one (a process that took this one over may have bound the path anew).
    bound: Option<(u64, u64)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Bind `path` (replacing a stale socket file) and start answering connections: each
    /// client's request is read ([`read_line`], [`parse_request`]) and answered with `handler`'s document; a
    /// request that cannot be read is answered with `{"ok":false,"error":...}`.
    pub fn spawn<F>(path: &Path, handler: F) -> Result<Self>
    where
        F: FnMut(Incoming) -> String + Send + 'static,
    {
        Self::spawn_with_ops(path, handler, None)
    }

    /// [`ControlServer::spawn`], with `ops` handling the [`OpsRequest`]s (`capture`, `trace`):
    /// it is handed the connection and answers on it itself.
    pub fn spawn_with_ops<F>(
        path: &Path,
        mut handler: F,
        mut ops: Option<OpsHandler>,
    ) -> Result<Self>
    where
        F: FnMut(Incoming) -> String + Send + 'static,
    {
        if path.exists() {
            // Only replace a socket nobody answers on: never delete a live one or a regular file.
            if UnixStream::connect(path).is_ok() {
                bail!("control socket {} is in use by another process", path.display());
            }
            let meta = std::fs::symlink_metadata(path)?;
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                bail!("{} exists and is not a socket", path.display());
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("cannot bind control socket {}", path.display()))?;
        let bound = file_id(path);
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("snic-control".into()).spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.set_write_timeout(Some(REPLY_TIMEOUT));
                        let line = read_line(&mut conn, REQUEST_TIMEOUT);
                        let op = match (&line, ops.as_mut()) {
                            (Ok(l), Some(ops)) => parse_ops(l).map(|r| (r, ops)),
                            // A server without an ops handler names what would answer them.
                            (Ok(l), None) if parse_ops(l).is_some() => {
                                let mut doc = error_reply(
                                    "capture and trace are answered by a NIC with ports \
                                     (`snic run`, or `snic serve --port`); this one has none",
                                );
                                doc.push('\n');
                                let _ = conn.write_all(doc.as_bytes());
                                continue;
                            }
                            _ => None,
                        };
                        let mut doc = match (op, line) {
                            (Some((Ok(req), ops)), _) => {
                                ops(req, conn);
                                continue;
                            }
                            (Some((Err(e), _)), _) | (None, Err(e)) => error_reply(&e.to_string()),
                            (None, Ok(l)) => match parse_request(&l) {
                                Ok(incoming) => handler(incoming),
                                Err(e) => error_reply(&e.to_string()),
                            },
                        };
                        doc.push('\n');
                        if let Err(e) = conn.write_all(doc.as_bytes()) {
                            tracing::debug!("control client went away: {e}");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::warn!("control socket accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
        Ok(ControlServer { path: path.to_owned(), bound, stop, thread: Some(thread) })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.bound.is_some() && file_id(&self.path) == self.bound {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The device and inode of the file at `path`, if there is one.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::AtomicU64;

    fn sock(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("snic-ctl-{name}-{}.sock", std::process::id()))
    }

    /// A server that answers the counters with `{"packets":n}` and echoes requests back.
    fn echo_server(path: &Path, n: Arc<AtomicU64>) -> ControlServer {
        ControlServer::spawn(path, move |incoming| match incoming {
            Incoming::Counters => format!("{{\"packets\":{}}}", n.load(Ordering::Relaxed)),
            Incoming::Request(r) => json!({"ok": true, "echo": r}).to_string(),
        })
        .unwrap()
    }

    #[test]
    fn control_socket_round_trip_returns_the_current_snapshot() {
        let path = sock("snapshot");
        let n = Arc::new(AtomicU64::new(7));
        let server = echo_server(&path, Arc::clone(&n));
        assert_eq!(query(&path).unwrap(), "{\"packets\":7}");
        n.store(8, Ordering::Relaxed);
        assert_eq!(query(&path).unwrap(), "{\"packets\":8}");
        // A second server on a live socket is refused.
        assert!(ControlServer::spawn(&path, |_| String::new()).is_err());
        drop(server);
        assert!(!path.exists(), "socket file removed on drop");
        assert!(query(&path).is_err());
    }

    /// A server whose path was bound anew by another (a process that took this one over)
    /// leaves the new socket file alone when it goes.
    #[test]
    fn a_server_does_not_remove_a_socket_file_bound_after_it() {
        let path = sock("rebound");
        let old = echo_server(&path, Arc::new(AtomicU64::new(1)));
        std::fs::remove_file(&path).unwrap();
        let new = echo_server(&path, Arc::new(AtomicU64::new(2)));
        drop(old);
        assert_eq!(query(&path).unwrap(), "{\"packets\":2}");
        drop(new);
        assert!(!path.exists());
    }

    #[test]
    fn a_client_that_only_reads_gets_the_counters_after_the_timeout() {
        let path = sock("oldclient");
        let _server = echo_server(&path, Arc::new(AtomicU64::new(3)));
        // The first protocol's client: connect and read, never write nor shut down.
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(REQUEST_TIMEOUT * 3)).unwrap();
        let mut doc = String::new();
        s.read_to_string(&mut doc).unwrap();
        assert_eq!(doc, "{\"packets\":3}\n");
    }

    #[test]
    fn requests_round_trip_through_the_socket() {
        let path = sock("requests");
        let _server = echo_server(&path, Arc::new(AtomicU64::new(0)));
        let req = Request::Apply {
            edits: vec![
                Edit::AddRule { vport: 0, layer: "acl".into(), rule: "id=9 action=deny".into() },
                Edit::Replace { policy: "x = 1\n".into(), file: Some("p.toml".into()) },
            ],
        };
        let v = request(&path, &req).unwrap();
        assert_eq!(
            v["echo"],
            json!({"cmd": "vswitch.apply", "edits": [
                {"op": "add-rule", "vport": 0, "layer": "acl", "rule": "id=9 action=deny"},
                {"op": "replace", "policy": "x = 1\n", "file": "p.toml"},
            ]})
        );
        let v = request(&path, &Request::DumpFlows { limit: 5, text: true }).unwrap();
        assert_eq!(v["echo"], json!({"cmd": "vswitch.dump-flows", "limit": 5, "text": true}));
    }

    #[test]
    fn a_client_refuses_to_send_a_request_over_the_cap() {
        let path = sock("cap");
        let _server = echo_server(&path, Arc::new(AtomicU64::new(0)));
        let big = Edit::Replace { policy: "#".repeat(MAX_REQUEST), file: None };
        let e = request(&path, &Request::Apply { edits: vec![big] }).unwrap_err();
        assert!(
            e.to_string().ends_with("is larger than the control socket accepts (1048576 bytes)"),
            "{e}"
        );
    }

    #[test]
    fn an_error_answer_becomes_an_error_with_the_server_message() {
        let path = sock("errors");
        let _server = ControlServer::spawn(&path, |_| error_reply("no such layer \"x\"")).unwrap();
        let e = request(&path, &Request::Policy).unwrap_err();
        assert_eq!(e.to_string(), "no such layer \"x\"");
    }

    /// Send raw bytes, shut down the write side, return the answer.
    fn raw(path: &Path, bytes: &[u8]) -> Value {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        // A big request may be refused before it is all written: ignore write errors.
        let _ = s.write_all(bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut doc = String::new();
        s.read_to_string(&mut doc).unwrap();
        serde_json::from_str(doc.trim_end()).unwrap()
    }

    #[test]
    fn bad_and_oversized_requests_get_error_answers_and_the_server_goes_on() {
        let path = sock("bad");
        let _server = echo_server(&path, Arc::new(AtomicU64::new(1)));
        let v = raw(&path, b"{\"cmd\":\"vswitch.frobnicate\"}\n");
        assert_eq!(v["ok"], false);
        let msg = v["error"].as_str().unwrap();
        assert!(msg.starts_with("bad request: unknown variant `vswitch.frobnicate`"), "{msg}");
        // A misspelt field is refused rather than silently defaulted.
        let v = raw(&path, b"{\"cmd\":\"vswitch.dump-flows\",\"limt\":5}");
        assert!(v["error"].as_str().unwrap().contains("unknown field `limt`"), "{v}");
        let v = raw(&path, b"\xff\xfe\n");
        assert!(v["error"].as_str().unwrap().starts_with("bad request: not UTF-8"), "{v}");
        let mut big = vec![b' '; MAX_REQUEST];
        big.extend_from_slice(b"{}");
        let v = raw(&path, &big);
        assert_eq!(v, json!({"ok": false, "error": "request larger than 1048576 bytes"}));
        // Exactly at the cap is read (blank: the counters).
        let v = raw(&path, &vec![b' '; MAX_REQUEST]);
        assert_eq!(v, json!({"packets": 1}));
        // Only the first line counts.
        let v = raw(&path, b"{\"cmd\":\"stats\"}\ngarbage");
        assert_eq!(v, json!({"ok": true, "echo": {"cmd": "stats"}}));
        assert_eq!(query(&path).unwrap(), "{\"packets\":1}");
    }

    #[test]
    fn parse_request_knows_every_command_and_edit() {
        let p = |s: &str| parse_request(s.as_bytes());
        assert_eq!(p("  \n"), Ok(Incoming::Counters));
        assert_eq!(p(r#"{"cmd":"stats"}"#), Ok(Incoming::Request(Request::Stats)));
        assert_eq!(p(r#"{"cmd":"vswitch.show"}"#), Ok(Incoming::Request(Request::VSwitchShow)));
        assert_eq!(
            p(r#"{"cmd":"vswitch.restart-fastpath"}"#),
            Ok(Incoming::Request(Request::RestartFastpath { hold_ms: 100 }))
        );
        assert_eq!(
            p(r#"{"cmd":"vswitch.restart-fastpath","hold_ms":7}"#),
            Ok(Incoming::Request(Request::RestartFastpath { hold_ms: 7 }))
        );
        assert_eq!(
            p(r#"{"cmd":"vswitch.dump-flows"}"#),
            Ok(Incoming::Request(Request::DumpFlows { limit: 1000, text: false }))
        );
        let edits = r#"{"cmd":"vswitch.apply","edits":[
            {"op":"add-rule","vport":0,"layer":"acl","rule":"id=3 action=deny"},
            {"op":"remove-rule","vport":0,"layer":"acl","id":3},
            {"op":"add-layer","vport":1,"layer":"name=acl2 kind=acl","position":1},
            {"op":"add-layer","vport":1,"layer":"name=acl3 kind=acl"},
            {"op":"remove-layer","vport":0,"name":"acl2"},
            {"op":"add-mapping","vport":0,"layer":"vnet","mapping":"ca=10.0.0.9"},
            {"op":"remove-mapping","vport":0,"layer":"vnet","ca":"10.0.0.9"},
            {"op":"replace","policy":"[underlay]\n"}]}"#;
        let Ok(Incoming::Request(Request::Apply { edits })) = p(edits) else {
            panic!("apply does not parse")
        };
        let ops: Vec<&str> = edits.iter().map(Edit::op).collect();
        assert_eq!(
            ops,
            [
                "add-rule",
                "remove-rule",
                "add-layer",
                "add-layer",
                "remove-layer",
                "add-mapping",
                "remove-mapping",
                "replace"
            ]
        );
        assert_eq!(
            edits[2],
            Edit::AddLayer { vport: 1, layer: "name=acl2 kind=acl".into(), position: Some(1) }
        );
        assert_eq!(edits[7], Edit::Replace { policy: "[underlay]\n".into(), file: None });
        // Wrong types and missing fields are errors, not panics or defaults.
        assert!(
            p(r#"{"cmd":"vswitch.apply","edits":[{"op":"remove-rule","vport":0,"layer":"a"}]}"#)
                .unwrap_err()
                .to_string()
                .contains("missing field `id`")
        );
        assert!(p(r#"{"cmd":"vswitch.apply","edits":[{"op":"remove-layer","vport":70000,"name":"a"}]}"#)
            .is_err());
        assert_eq!(
            p(r#"{"cmd":"ebpf.load","path":"/x.o"}"#),
            Ok(Incoming::Request(Request::EbpfLoad {
                stage: 0,
                path: "/x.o".into(),
                section: None,
                core: None
            }))
        );
        assert_eq!(
            p(
                r#"{"cmd":"ebpf.map","stage":1,"map":"hits","op":"update","key":"0","value":"7","flags":1}"#
            ),
            Ok(Incoming::Request(Request::EbpfMap {
                stage: 1,
                map: "hits".into(),
                op: "update".into(),
                key: Some("0".into()),
                value: Some("7".into()),
                flags: 1,
                limit: 1000
            }))
        );
        assert!(
            p(r#"{"cmd":"ebpf.events"}"#).unwrap_err().to_string().contains("missing field `max`")
        );
        assert!(p(r#"{"nocmd":1}"#).unwrap_err().to_string().contains("missing field `cmd`"));
        assert!(p("[1,2]").is_err());
    }

    /// A server without an ops handler (`snic serve` without ports) says what would answer a
    /// capture, instead of a serde message about an unknown variant.
    #[test]
    fn ops_requests_to_a_server_without_ports_are_told_why() {
        let path = sock("noops");
        let _server = echo_server(&path, Arc::new(AtomicU64::new(0)));
        let mut c = UnixStream::connect(&path).unwrap();
        c.write_all(b"{\"cmd\":\"capture\",\"ports\":[0]}\n").unwrap();
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut c, &mut answer).unwrap();
        assert!(answer.contains("\"ok\":false"), "{answer}");
        assert!(answer.contains("answered by a NIC with ports"), "{answer}");
    }

    #[test]
    fn ops_requests_are_told_apart_from_the_others() {
        assert_eq!(parse_ops(br#"{"cmd":"stats"}"#), None);
        assert_eq!(parse_ops(b"not json"), None);
        let Some(Ok(OpsRequest::Capture(c))) =
            parse_ops(br#"{"cmd":"capture","ports":[1],"filter":"vni 5","count":9}"#)
        else {
            panic!("capture parses")
        };
        assert_eq!((c.ports, c.filter.as_deref(), c.count), (vec![1], Some("vni 5"), Some(9)));
        let Some(Ok(OpsRequest::Trace(t))) = parse_ops(br#"{"cmd":"trace","port":2,"hex":"00"}"#)
        else {
            panic!("trace parses")
        };
        assert_eq!((t.port, t.hex.as_deref()), (2, Some("00")));
        let e = parse_ops(br#"{"cmd":"capture","cont":1}"#).unwrap().unwrap_err();
        assert!(e.to_string().contains("unknown field `cont`"), "{e}");
    }

    proptest::proptest! {
        /// Whatever bytes a client sends, parsing gives an answer or an error, never a panic.
        #[test]
        fn parse_request_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_request(&bytes);
        }

        /// Every request survives encoding and parsing unchanged.
        #[test]
        fn requests_round_trip(limit in 0usize..200_000, text: bool, vport: u16, id: u32, rule in "[ -~]{0,40}") {
            for r in [
                Request::DumpFlows { limit, text },
                Request::Apply { edits: vec![
                    Edit::AddRule { vport, layer: rule.clone(), rule: rule.clone() },
                    Edit::RemoveRule { vport, layer: rule.clone(), id },
                ] },
            ] {
                let line = serde_json::to_vec(&r).unwrap();
                proptest::prop_assert_eq!(parse_request(&line), Ok(Incoming::Request(r)));
            }
        }
    }
}
