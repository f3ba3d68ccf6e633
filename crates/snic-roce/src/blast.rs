//! The raw UDP ceiling: send and receive equal-sized datagrams as fast as the kernel takes
//! them, with the same batching the RoCE transport uses (`sendmmsg` of `batch` datagrams, or
//! UDP GSO buffers cut into `batch` segments per call), so RDMA bandwidth over
//! [`crate::transport::RoceTransport`] can be set beside what plain UDP reaches on the same path.
//! `size` is the UDP payload of one datagram: for a RoCE packet, BTH (12) + extension headers
//! + payload + ICRC (4).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use serde::Serialize;

use crate::transport::{
    GSO_MAX_BYTES, GSO_MAX_SEGS, MAX_BATCH, RX_ROOM, RxScratch, SOCKET_BUFFER, open_tx_socket,
    recv_batch, sendmmsg_runs,
};
use snic_io::sys::poll::poll_in;
use snic_io::sys::sock::{
    empty_iovec, empty_sockaddr, is_full, set_buffer, setsockopt_int, to_sockaddr,
};

/// What a blast moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BlastReport {
    /// Datagrams sent (or received).
    pub datagrams: u64,
    /// UDP payload bytes sent (or received).
    pub bytes: u64,
    /// Nanoseconds from the first datagram to the last.
    pub elapsed_ns: u64,
}

impl BlastReport {
    /// Payload throughput in Gbit/s (0 when nothing was timed).
    pub fn gbits(&self) -> f64 {
        if self.elapsed_ns == 0 { 0.0 } else { self.bytes as f64 * 8.0 / self.elapsed_ns as f64 }
    }
    /// Datagram rate in millions per second (0 when nothing was timed).
    pub fn mpps(&self) -> f64 {
        if self.elapsed_ns == 0 {
            0.0
        } else {
            self.datagrams as f64 * 1e3 / self.elapsed_ns as f64
        }
    }
}

/// When a receiving blast is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BlastTarget {
    /// This many datagrams.
    Datagrams(u64),
    /// This many payload bytes.
    Bytes(u64),
}

/// Largest `size`: one IPv4 UDP datagram.
pub const MAX_DATAGRAM: usize = GSO_MAX_BYTES;

/// Send `count` datagrams of `size` payload bytes from a socket bound to `local` (port 0: any)
/// to `dst`: `batch` datagrams per `sendmmsg`, as GSO buffers when `gso`. A full socket buffer
/// is waited out (every datagram is handed to the kernel); the receiver may still drop some.
/// A kernel that refuses GSO is an error (a ceiling measured without it would mislead).
pub fn blast_send(
    local: SocketAddr,
    dst: SocketAddr,
    size: usize,
    count: u64,
    batch: usize,
    gso: bool,
) -> io::Result<BlastReport> {
    if size == 0 || size > MAX_DATAGRAM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("datagram size {size} outside 1..={MAX_DATAGRAM}"),
        ));
    }
    let batch = batch.clamp(1, MAX_BATCH);
    let sock = open_tx_socket(local)?;
    let fd = sock.as_raw_fd();
    // A recognisable pattern, so a receiver can tell a blast from stray traffic if it wants.
    let buf: Vec<u8> = (0..batch * size).map(|i| (i % 251) as u8).collect();
    let per_run = if gso { GSO_MAX_SEGS.min(GSO_MAX_BYTES / size).max(1) } else { 1 };
    let mut names = [empty_sockaddr(); MAX_BATCH];
    let mut lens = [0 as libc::socklen_t; MAX_BATCH];
    let mut runs = [crate::transport::Run::default(); MAX_BATCH];
    let start = std::time::Instant::now();
    let mut report = BlastReport::default();
    while report.datagrams < count {
        let n = usize::try_from(count - report.datagrams).unwrap_or(usize::MAX).min(batch);
        let mut iovs = [empty_iovec(); MAX_BATCH];
        for (i, iov) in iovs[..n].iter_mut().enumerate() {
            let d = &buf[i * size..(i + 1) * size];
            // sendmmsg only reads through iov_base; the C API wants *mut.
            *iov = libc::iovec { iov_base: d.as_ptr() as *mut libc::c_void, iov_len: size };
        }
        let mut nr = 0;
        let mut i = 0;
        while i < n {
            let c = per_run.min(n - i);
            runs[nr] = crate::transport::Run { start: i, count: c, seg: size };
            lens[nr] = to_sockaddr(&dst, &mut names[nr]);
            nr += 1;
            i += c;
        }
        // Hand the whole batch over, waiting out a full socket buffer.
        let mut first = 0;
        while first < nr {
            let base = runs[first].start;
            let mut rel = [crate::transport::Run::default(); MAX_BATCH];
            for (k, r) in runs[first..nr].iter().enumerate() {
                rel[k] = crate::transport::Run { start: r.start - base, ..*r };
            }
            match sendmmsg_runs(
                fd,
                &mut iovs[base..n],
                &mut names[first..nr],
                &lens[first..nr],
                &rel[..nr - first],
            ) {
                Ok(k) => {
                    for r in &runs[first..first + k] {
                        report.datagrams += r.count as u64;
                        report.bytes += (r.count * size) as u64;
                    }
                    first += k;
                    if k == 0 {
                        std::thread::yield_now();
                    }
                }
                Err(e) if is_full(&e) => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
    }
    report.elapsed_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    Ok(report)
}

/// The receiving end of a blast, bound before the sender starts.
#[derive(Debug)]
pub struct BlastReceiver {
    sock: UdpSocket,
    gro: bool,
}

impl BlastReceiver {
    /// Bind `bind` (port 0: any; see [`Self::local_addr`]), non-blocking, with a big receive
    /// buffer and UDP GRO when `gro` and the kernel has it.
    pub fn bind(bind: SocketAddr, gro: bool) -> io::Result<Self> {
        let sock = UdpSocket::bind(bind)?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUFFER);
        let gro = gro && setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        Ok(BlastReceiver { sock, gro })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Whether the kernel coalesces datagrams (GRO) for this socket.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// Receive until `target` is reached or `timeout` passes (counted from this call). Returns
    /// what arrived either way; the caller compares it with what was sent.
    pub fn run(&mut self, target: BlastTarget, timeout: Duration) -> io::Result<BlastReport> {
        let slot = RX_ROOM + 65_536;
        let batch = 64;
        let mut buf = vec![0u8; slot * batch];
        let mut sc = RxScratch::new();
        let call = std::time::Instant::now();
        let mut first: Option<std::time::Instant> = None;
        let mut last = call;
        let mut report = BlastReport::default();
        let done = |r: &BlastReport| match target {
            BlastTarget::Datagrams(n) => r.datagrams >= n,
            BlastTarget::Bytes(n) => r.bytes >= n,
        };
        while !done(&report) {
            let got = recv_batch(self.sock.as_raw_fd(), &mut buf, slot, batch, &mut sc)?;
            if got == 0 {
                let left = timeout.saturating_sub(call.elapsed());
                if left.is_zero() {
                    break;
                }
                poll_in(self.sock.as_raw_fd(), Some(left.min(Duration::from_millis(10))))?;
                continue;
            }
            let now = std::time::Instant::now();
            first.get_or_insert(now);
            last = now;
            for m in &sc.metas[..got] {
                if m.truncated {
                    continue;
                }
                let seg = if m.seg == 0 { m.len.max(1) } else { m.seg };
                report.datagrams += m.len.div_ceil(seg).max(1) as u64;
                report.bytes += m.len as u64;
            }
        }
        if let Some(f) = first {
            report.elapsed_ns = u64::try_from((last - f).as_nanos()).unwrap_or(u64::MAX);
        }
        Ok(report)
    }
}

/// Bind `bind` and receive a blast until `target` or `timeout` ([`BlastReceiver`] in one call;
/// use the receiver directly to learn an ephemeral port before the sender starts).
pub fn blast_recv(
    bind: SocketAddr,
    target: BlastTarget,
    timeout: Duration,
    gro: bool,
) -> io::Result<BlastReport> {
    BlastReceiver::bind(bind, gro)?.run(target, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        size: usize,
        count: u64,
        batch: usize,
        gso: bool,
        gro: bool,
    ) -> (BlastReport, BlastReport) {
        let mut rx = BlastReceiver::bind("127.0.0.1:0".parse().unwrap(), gro).unwrap();
        let dst = rx.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            rx.run(BlastTarget::Datagrams(count), Duration::from_secs(10)).unwrap()
        });
        let s = blast_send("127.0.0.1:0".parse().unwrap(), dst, size, count, batch, gso).unwrap();
        (s, t.join().unwrap())
    }

    #[test]
    fn blast_arrives_with_and_without_gso() {
        // Few enough datagrams that the 16 MiB receive buffer holds them all even if the
        // receiver thread is slow to start (no drops on loopback).
        for (gso, gro) in [(false, false), (true, true), (true, false)] {
            let (s, r) = run(1000, 500, 64, gso, gro);
            assert_eq!(s.datagrams, 500, "gso {gso}");
            assert_eq!(s.bytes, 500_000);
            assert_eq!(r.datagrams, 500, "gso {gso} gro {gro}");
            assert_eq!(r.bytes, 500_000);
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        let dst: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for size in [0, MAX_DATAGRAM + 1] {
            let e = blast_send(local, dst, size, 1, 1, false).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn receiver_times_out_with_what_it_has() {
        let r = blast_recv(
            "127.0.0.1:0".parse().unwrap(),
            BlastTarget::Bytes(1),
            Duration::from_millis(20),
            true,
        )
        .unwrap();
        assert_eq!(r, BlastReport::default());
    }
}
