//! The two system calls the host-interface server needs beyond `snic-hostif`'s wrappers:
//! `poll(2)` reporting which descriptors are ready, and a send timeout on a setup socket (so a
//! client that never reads its responses cannot block the control thread).
#![allow(
    unsafe_code,
    reason = "poll(2) and setsockopt(2) through libc; each block has a SAFETY comment"
)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Wait until one of `fds` is readable (or hung up, or in error) or `timeout` passes. Returns one
/// flag per descriptor. An interrupted wait returns all `false`.
pub(crate) fn poll_ready<F: AsRawFd>(fds: &[F], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfds` is a valid, initialised array of `pfds.len()` pollfd structs that lives
    // across the call; the kernel only writes their `revents` fields.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// Set `SO_SNDTIMEO` on a socket.
pub(crate) fn set_send_timeout(fd: BorrowedFd<'_>, t: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(t.subsec_micros() as i32),
    };
    // SAFETY: `fd` is a live socket for the duration of the call; `tv` is a valid timeval and
    // the length passed is its size, so the kernel reads exactly that struct.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&raw const tv).cast::<libc::c_void>(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
