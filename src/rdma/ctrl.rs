//! The TCP control connection between client and server: how it is made (resolve, connect,
//! accept), its framing ([`Ctrl`]) and its message tags.

use anyhow::{Context, Result, anyhow, bail, ensure};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The TCP control connection: length-prefixed frames of little-endian `u64` words. Blocking
/// reads and writes are bounded by the timeout; during a benchmark the socket is polled without
/// blocking so the engine keeps running.
#[derive(Debug)]
pub(super) struct Ctrl {
    pub(super) s: TcpStream,
    inbuf: Vec<u8>,
    pub(super) timeout: Duration,
    nonblocking: bool,
}

impl Ctrl {
    pub(super) fn new(s: TcpStream, timeout: Duration) -> Result<Ctrl> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(Ctrl { s, inbuf: Vec::new(), timeout, nonblocking: false })
    }

    /// A control connection taken over from another process, with the bytes it had read
    /// and not yet taken as frames. The socket is non-blocking from here on, as
    /// [`Self::try_recv`] leaves it.
    pub(super) fn resume(s: TcpStream, timeout: Duration, inbuf: Vec<u8>) -> Result<Ctrl> {
        let mut c = Ctrl::new(s, timeout)?;
        c.s.set_nonblocking(true)?;
        c.nonblocking = true;
        c.inbuf = inbuf;
        Ok(c)
    }

    /// Bytes read and not yet taken as frames (a takeover carries them over).
    pub(super) fn pending(&self) -> &[u8] {
        &self.inbuf
    }

    pub(super) fn send(&mut self, words: &[u64]) -> Result<()> {
        let mut b = Vec::with_capacity(8 * (words.len() + 1));
        b.extend_from_slice(&(words.len() as u64).to_le_bytes());
        for w in words {
            b.extend_from_slice(&w.to_le_bytes());
        }
        let deadline = std::time::Instant::now() + self.timeout;
        let mut rest = &b[..];
        while !rest.is_empty() {
            match self.s.write(rest) {
                Ok(0) => bail!("the peer closed the control connection"),
                Ok(n) => rest = &rest[n..],
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    ensure!(std::time::Instant::now() < deadline, "control connection stalled");
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => return Err(e).context("control connection"),
            }
        }
        Ok(())
    }

    /// One frame, if a whole one has arrived; never blocks.
    pub(super) fn try_recv(&mut self) -> Result<Option<Vec<u64>>> {
        if let Some(m) = self.take_frame()? {
            return Ok(Some(m));
        }
        if !self.nonblocking {
            // From here on the socket stays non-blocking: one read per look, no mode switches.
            self.s.set_nonblocking(true)?;
            self.nonblocking = true;
        }
        let mut tmp = [0u8; 4096];
        let r = loop {
            match self.s.read(&mut tmp) {
                Ok(0) => break Err(anyhow!("the peer closed the control connection")),
                Ok(n) => {
                    self.inbuf.extend_from_slice(&tmp[..n]);
                    if n < tmp.len() {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break Err(anyhow!(e).context("control connection")),
            }
        };
        r?;
        self.take_frame()
    }

    fn take_frame(&mut self) -> Result<Option<Vec<u64>>> {
        let Some(head) = self.inbuf.get(..8) else { return Ok(None) };
        let n = u64::from_le_bytes(head.try_into()?);
        ensure!(n <= 4096, "bad control frame ({n} words)");
        let total = 8 + 8 * n as usize;
        if self.inbuf.len() < total {
            return Ok(None);
        }
        let words = self.inbuf[8..total]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        self.inbuf.drain(..total);
        Ok(Some(words))
    }

    /// One frame read with exact reads: nothing after it is consumed, so the QP exchange that
    /// follows the hello finds its bytes on the stream.
    pub(super) fn recv_exact(&mut self) -> Result<Vec<u64>> {
        ensure!(
            self.inbuf.is_empty() && !self.nonblocking,
            "control bytes buffered before the QP exchange"
        );
        let mut head = [0u8; 8];
        self.s.read_exact(&mut head).map_err(|e| match e.kind() {
            ErrorKind::UnexpectedEof => {
                anyhow!("the client closed the connection before its hello")
            }
            _ => anyhow!(e).context("waiting for the client's hello"),
        })?;
        let n = u64::from_le_bytes(head);
        ensure!(n <= 64, "bad hello ({n} words): not a `snic rdma` client");
        let mut body = vec![0u8; 8 * n as usize];
        self.s.read_exact(&mut body).context("waiting for the client's hello")?;
        Ok(body
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect())
    }

    /// One frame, waiting at most the timeout (the engine is not driven meanwhile).
    pub(super) fn recv(&mut self) -> Result<Vec<u64>> {
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            if let Some(m) = self.try_recv()? {
                return Ok(m);
            }
            if std::time::Instant::now() >= deadline {
                bail!("timed out after {:?} waiting for the peer", self.timeout);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Control message tags (first word of a frame after the hello).
pub(super) mod tag {
    /// Client: run one size: `[RUN, size, iters]`.
    pub const RUN: u64 = 1;
    /// Server: ready for the size.
    pub const READY: u64 = 2;
    /// A side finished its part of the size: `[DONE]`.
    pub const DONE: u64 = 3;
    /// Client: the figures of the size, `[RESULT, f64 bits...]`.
    pub const RESULT: u64 = 4;
    /// Server: verification outcome `[VERDICT, ok, first bad offset]`.
    pub const VERDICT: u64 = 5;
    /// Client: no more sizes.
    pub const END: u64 = 6;
}

pub(super) fn expect_tag(m: &[u64], t: u64) -> Result<()> {
    match m.first() {
        Some(&x) if x == t => Ok(()),
        Some(&x) => bail!("protocol error: expected message {t}, got {x}"),
        None => bail!("protocol error: empty message"),
    }
}

pub(super) fn resolve(host: &str, port: u16, ipv6: bool) -> Result<SocketAddr> {
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host:?}"))?
        .collect();
    all.iter()
        .find(|a| a.is_ipv6() == ipv6)
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| anyhow!("{host:?} has no address"))
}

pub(super) fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = None;
    while std::time::Instant::now() < deadline {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
        // perftest gives up at once; retrying lets a script start both sides together.
        std::thread::sleep(Duration::from_millis(50));
    }
    let why = last.map_or_else(|| "timed out".to_string(), |e| e.to_string());
    bail!("could not connect to the server at {addr} within {timeout:?}: {why}")
}

pub(super) fn accept(port: u16, ipv6: bool, timeout: Duration) -> Result<TcpStream> {
    let any: IpAddr =
        if ipv6 { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { IpAddr::V4(Ipv4Addr::UNSPECIFIED) };
    let l =
        TcpListener::bind((any, port)).with_context(|| format!("cannot listen on TCP {port}"))?;
    l.set_nonblocking(true)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                ensure!(
                    std::time::Instant::now() < deadline,
                    "no client connected to TCP port {port} within {timeout:?}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("accept"),
        }
    }
}

pub(super) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
