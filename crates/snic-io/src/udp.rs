//! The UDP tunnel port: Ethernet frames carried one per datagram between two snic processes.
//!
//! The socket is bound to the local address and connected to the remote one, so datagrams from
//! anyone else are filtered out by the kernel. It is non-blocking; receive and transmit are
//! batched with `recvmmsg(2)` / `sendmmsg(2)`, straight into and out of the batch's packet
//! buffers (no copy, no allocation). A datagram larger than a packet buffer's receive area, or
//! an empty one, is counted in `rx_errors` and dropped. When the socket buffer is full, the
//! frames that did not fit are counted in `tx_dropped`: `send` never blocks.
#![allow(unsafe_code, reason = "recvmmsg/sendmmsg through libc; each block has a SAFETY comment")]

use crate::port::{Port, PortCaps, PortCounters};
use crate::sys::sock::{empty_iovec, empty_mmsghdr, is_transient, set_buffer};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// Most datagrams moved by one `recvmmsg`/`sendmmsg` call.
const MMSG_BATCH: usize = 64;

/// A UDP tunnel endpoint.
#[derive(Debug)]
pub struct UdpPort {
    name: String,
    socket: UdpSocket,
    counters: PortCounters,
}

impl UdpPort {
    /// Bind `local`, connect to `remote`, make the socket non-blocking.
    pub fn open(local: SocketAddr, remote: SocketAddr) -> io::Result<Self> {
        Self::from_socket(UdpSocket::bind(local)?, remote)
    }

    /// Use an already bound socket (tests bind `127.0.0.1:0` first to learn ephemeral ports).
    pub fn from_socket(socket: UdpSocket, remote: SocketAddr) -> io::Result<Self> {
        socket.connect(remote)?;
        socket.set_nonblocking(true)?;
        // Room for a few full batches in flight; best effort (the kernel may cap it).
        set_buffer(socket.as_raw_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUFFER);
        set_buffer(socket.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SOCKET_BUFFER);
        let local = socket.local_addr()?;
        Ok(UdpPort {
            name: format!("udp:{local},{remote}"),
            socket,
            counters: PortCounters::default(),
        })
    }

    /// Carry on with a socket another process handed over (see [`crate::handover`]); refused
    /// unless it is a UDP socket bound to `local` (a port 0 in `local` takes any port).
    pub fn adopt(
        local: SocketAddr,
        remote: SocketAddr,
        fd: std::os::fd::OwnedFd,
    ) -> io::Result<Self> {
        let socket = UdpSocket::from(fd);
        let bound = socket.local_addr().map_err(|e| {
            io::Error::new(e.kind(), format!("udp:{local},{remote}: the handed descriptor: {e}"))
        })?;
        if bound.ip() != local.ip() || (local.port() != 0 && bound.port() != local.port()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("udp:{local},{remote}: the handed socket is bound to {bound}"),
            ));
        }
        Self::from_socket(socket, remote)
    }

    /// The bound local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// Socket buffer size asked for: room for several 256-frame batches of full-size frames.
pub const SOCKET_BUFFER: libc::c_int = 4 << 20;

impl Port for UdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn handover(&mut self) -> Option<io::Result<crate::handover::PortHandover>> {
        Some(self.socket.try_clone().map(|s| crate::handover::PortHandover {
            state: crate::handover::PortState::Udp,
            fds: vec![s.into()],
        }))
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let want = (batch.max() - batch.len()).min(MMSG_BATCH);
            if want == 0 {
                return Ok(total);
            }
            let start = batch.len();
            for _ in 0..want {
                if batch.push_slot().is_none() {
                    break;
                }
            }
            let taken = batch.len() - start;
            let mut iovs = [empty_iovec(); MMSG_BATCH];
            let mut msgs = [empty_mmsghdr(); MMSG_BATCH];
            for (i, p) in batch.packets_mut()[start..].iter_mut().enumerate() {
                let area = p.recv_area();
                iovs[i] = libc::iovec { iov_base: area.as_mut_ptr().cast(), iov_len: area.len() };
            }
            for i in 0..taken {
                msgs[i].msg_hdr.msg_iov = &mut iovs[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs[..taken]` each point to one iovec in `iovs`, which point into the
            // receive areas of distinct live packet buffers of `batch`; all of them outlive the
            // call and nothing else touches them during it. `taken <= MMSG_BATCH` bounds the
            // kernel's writes to the arrays. The fd is our open socket.
            let r = unsafe {
                libc::recvmmsg(
                    self.socket.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    taken as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    core::ptr::null_mut(),
                )
            };
            if r < 0 {
                for _ in 0..taken {
                    batch.pop_slot();
                }
                let e = io::Error::last_os_error();
                if is_transient(&e) {
                    return Ok(total);
                }
                self.counters.rx_errors += 1;
                return Err(e);
            }
            let got = usize::try_from(r).unwrap_or(0).min(taken);
            for _ in got..taken {
                batch.pop_slot();
            }
            let mut bad = 0;
            for (i, p) in batch.packets_mut()[start..].iter_mut().enumerate() {
                let m = &msgs[i];
                let len = m.msg_len as usize;
                let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
                if truncated || len == 0 || p.set_len(len).is_err() {
                    p.truncate(0);
                    bad += 1;
                    continue;
                }
                p.meta.rx_time = now;
                self.counters.count_rx(len);
            }
            if bad > 0 {
                self.counters.rx_errors += bad as u64;
                // Only the new, bad slots are empty: received frames are never empty.
                let mut idx = 0usize;
                batch.retain(|p| {
                    idx += 1;
                    idx <= start || !p.is_empty()
                });
            }
            total += got - bad;
            if got < taken {
                return Ok(total);
            }
        }
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let pkts = batch.packets();
        let mut sent = 0;
        while sent < pkts.len() {
            let chunk = &pkts[sent..pkts.len().min(sent + MMSG_BATCH)];
            let mut iovs = [empty_iovec(); MMSG_BATCH];
            let mut msgs = [empty_mmsghdr(); MMSG_BATCH];
            for (i, p) in chunk.iter().enumerate() {
                let d = p.data();
                // sendmmsg only reads through iov_base; the cast to *mut is what the C API
                // wants.
                iovs[i] =
                    libc::iovec { iov_base: d.as_ptr() as *mut libc::c_void, iov_len: d.len() };
            }
            for i in 0..chunk.len() {
                msgs[i].msg_hdr.msg_iov = &mut iovs[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs[..chunk.len()]` each point to one iovec describing a live packet's
            // frame bytes, valid and unchanged for the duration of the call; the kernel only
            // reads them (and writes `msg_len` into `msgs`). The fd is our connected socket.
            let r = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    chunk.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                let e = io::Error::last_os_error();
                // A full socket buffer or a peer that is not up: drop the rest, counted.
                self.counters.tx_dropped += (pkts.len() - sent) as u64;
                if r == 0 || is_transient(&e) || e.kind() == io::ErrorKind::OutOfMemory {
                    return Ok(sent);
                }
                return Err(e);
            }
            let n = usize::try_from(r).unwrap_or(0).min(chunk.len());
            for p in &chunk[..n] {
                self.counters.count_tx(p.len());
            }
            sent += n;
        }
        Ok(sent)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.socket.as_raw_fd())
    }

    fn caps(&self) -> PortCaps {
        // What a peer UdpPort can receive into one packet buffer.
        PortCaps {
            gso: false,
            max_frame: snic_pipeline::buf::DEFAULT_FRAME_ROOM,
            tunnel_gso: false,
            merges_udp_tunnel: false,
        }
    }

    fn counters(&self) -> PortCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pair() -> (UdpPort, UdpPort) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        (UdpPort::from_socket(a, ba).unwrap(), UdpPort::from_socket(b, aa).unwrap())
    }

    fn recv_all(p: &mut UdpPort, want: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut b = Batch::new(256);
        for _ in 0..200 {
            b.clear();
            p.recv(Instant::ZERO, &mut b).unwrap();
            out.extend(b.iter().map(|x| x.data().to_vec()));
            if out.len() >= want {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        out
    }

    #[test]
    fn frames_cross_intact_and_in_order() {
        let (mut a, mut b) = pair();
        let frames: Vec<Vec<u8>> = (0..150u32)
            .map(|i| (0..60 + (i as usize % 900)).map(|j| (i as usize + j) as u8).collect())
            .collect();
        let mut batch = Batch::new(256);
        for f in &frames {
            batch.push_frame(f).unwrap();
        }
        assert_eq!(a.send(Instant::ZERO, &mut batch).unwrap(), 150);
        let got = recv_all(&mut b, 150);
        assert_eq!(got, frames);
        assert_eq!(b.counters().rx_packets, 150);
        assert_eq!(a.counters().tx_packets, 150);
        assert_eq!(a.counters().tx_bytes, frames.iter().map(|f| f.len() as u64).sum::<u64>());
    }

    /// Receive into `batch` until `done` holds for `port`, for at most 5 s; panics on timeout.
    fn recv_until(port: &mut UdpPort, batch: &mut Batch, done: impl Fn(&UdpPort, &Batch) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done(port, batch) {
            assert!(std::time::Instant::now() < deadline, "timed out: {:?}", port.counters());
            port.recv(Instant::ZERO, batch).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn nothing_ready_is_ok_zero_and_strangers_are_filtered() {
        let (mut a, mut b) = pair();
        let mut batch = Batch::new(8);
        assert_eq!(b.recv(Instant::ZERO, &mut batch).unwrap(), 0);
        assert!(batch.is_empty());
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(&[1u8; 64], b.local_addr().unwrap()).unwrap();
        // Then one frame from the real peer. Loopback hands a datagram to the receiving socket
        // in the sender's own softirq, as `send_to` returns, so once the peer's frame is here
        // the stranger's was delivered or filtered: receiving exactly the peer's frame shows it
        // was filtered.
        let mut out = Batch::new(1);
        out.push_frame(&[2u8; 64]).unwrap();
        assert_eq!(a.send(Instant::ZERO, &mut out).unwrap(), 1);
        recv_until(&mut b, &mut batch, |p, _| p.counters().rx_packets >= 1);
        let got: Vec<&[u8]> = batch.iter().map(|p| p.data()).collect();
        assert_eq!(got, vec![&[2u8; 64][..]]);
        // Nothing else is pending: the stranger's datagram is not late, it never comes.
        assert_eq!(b.recv(Instant::ZERO, &mut batch).unwrap(), 0);
        assert_eq!(b.counters().rx_packets, 1);
        assert_eq!(b.counters().rx_errors, 0);
    }

    #[test]
    fn oversized_and_empty_datagrams_are_counted_errors() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let bsock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let baddr = bsock.local_addr().unwrap();
        let mut b = UdpPort::from_socket(bsock, a.local_addr().unwrap()).unwrap();
        a.send_to(&[7u8; 60], baddr).unwrap();
        a.send_to(&[], baddr).unwrap();
        a.send_to(&vec![9u8; 4000], baddr).unwrap();
        a.send_to(&[8u8; 61], baddr).unwrap();
        let mut batch = Batch::new(16);
        batch.push_frame(&[1u8; 10]).unwrap();
        // Wait for all four datagrams: two good frames after the one already in the batch, and
        // two counted errors.
        recv_until(&mut b, &mut batch, |p, b| b.len() >= 3 && p.counters().rx_errors >= 2);
        let frames: Vec<&[u8]> = batch.iter().map(|p| p.data()).collect();
        assert_eq!(frames, vec![&[1u8; 10][..], &[7u8; 60][..], &[8u8; 61][..]]);
        assert_eq!(b.counters().rx_errors, 2);
        assert_eq!(b.counters().rx_packets, 2);
    }
}
