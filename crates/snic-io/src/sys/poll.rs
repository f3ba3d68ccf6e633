//! Waiting for descriptors with `poll(2)` / `ppoll(2)`: idle I/O loops (over their ports' file
//! descriptors, with a short timeout, so they sleep instead of spinning), the host-facing
//! device's control thread (which wants to know which descriptors are ready), the RoCE
//! transport (one socket, any timeout) and a port waiting for room to send.
#![allow(unsafe_code, reason = "poll(2)/ppoll(2) through libc; each block has a SAFETY comment")]

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Most descriptors waited on at once; extra ones are not waited on (the loop still polls them
/// on its next round).
pub const MAX_FDS: usize = 64;

/// Wait until one of `fds` is readable or `timeout` passes. Returns true when one is readable.
/// With no descriptors it just sleeps for `timeout`. Never allocates.
pub fn wait_readable(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    if fds.is_empty() {
        std::thread::sleep(timeout);
        return Ok(false);
    }
    let mut pfds = [libc::pollfd { fd: -1, events: 0, revents: 0 }; MAX_FDS];
    let n = fds.len().min(MAX_FDS);
    for (p, fd) in pfds.iter_mut().zip(fds) {
        *p = libc::pollfd { fd: *fd, events: libc::POLLIN, revents: 0 };
    }
    Ok(poll(&mut pfds[..n], timeout)? > 0)
}

/// Wait until one of `fds` is readable (or hung up, or in error) or `timeout` passes. Returns
/// one flag per descriptor (all of them waited on, however many). An interrupted wait returns
/// all `false`.
pub fn poll_ready<F: AsRawFd>(fds: &[F], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    let ready = poll(&mut pfds, timeout)?;
    Ok(pfds.iter().map(|p| ready > 0 && p.revents != 0).collect())
}

/// Wait until `fd` is readable or `timeout` passes (`None`: no limit); true when readable.
/// An interrupted wait reports false.
pub fn poll_in(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let tsp = ts.as_ref().map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfd` is one valid pollfd living across the call (the kernel writes its
    // `revents`); `tsp` is null or points to `ts`, alive for the call; no signal mask.
    let r = unsafe { libc::ppoll(&mut pfd, 1, tsp, core::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

/// Wait up to `timeout` for `fd` to become writable (best effort: errors and interruptions
/// just end the wait early).
pub fn wait_writable(fd: RawFd, timeout: Duration) {
    let mut pfd = [libc::pollfd { fd, events: libc::POLLOUT, revents: 0 }];
    let _ = poll(&mut pfd, timeout);
}

/// Whether the far end of `fd`, a pipe or socket this process writes to, has gone (a pipe
/// whose reader closed reports `POLLERR`, a socket `POLLHUP` or `POLLERR`). Does not wait.
pub fn peer_closed(fd: RawFd) -> bool {
    let mut pfd = [libc::pollfd { fd, events: libc::POLLOUT, revents: 0 }];
    matches!(poll(&mut pfd, Duration::ZERO), Ok(1))
        && pfd[0].revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// `poll(2)` over `pfds` for `timeout` (whole milliseconds, saturated): the number of
/// descriptors with events; an interrupted wait counts as none.
fn poll(pfds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfds` is a valid, initialised array of `pfds.len()` pollfd structs that lives
    // across the call; the kernel only writes their `revents` fields.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn wakes_on_readable_socket_and_times_out_otherwise() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!wait_readable(&[b.as_raw_fd()], Duration::from_millis(5)).unwrap());
        a.send_to(b"x", b.local_addr().unwrap()).unwrap();
        assert!(wait_readable(&[b.as_raw_fd()], Duration::from_secs(5)).unwrap());
        assert!(!wait_readable(&[], Duration::from_millis(1)).unwrap());
    }

    #[test]
    fn a_pipe_whose_reader_closed_is_seen() {
        let (r, w) = std::io::pipe().unwrap();
        assert!(!peer_closed(w.as_raw_fd()));
        drop(r);
        assert!(peer_closed(w.as_raw_fd()));
    }

    #[test]
    fn poll_ready_flags_each_descriptor() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fds = [a.as_raw_fd(), b.as_raw_fd()];
        assert_eq!(poll_ready(&fds, Duration::from_millis(5)).unwrap(), [false, false]);
        a.send_to(b"x", b.local_addr().unwrap()).unwrap();
        assert_eq!(poll_ready(&fds, Duration::from_secs(5)).unwrap(), [false, true]);
    }
}
