//! The channel of a takeover: one snic process hands its state and its file descriptors to
//! another (a hitless upgrade, see the README's "Operating snic").
//!
//! A [`Channel`] carries JSON documents of any size and any number of file descriptors over a
//! `SOCK_SEQPACKET` Unix socket ([`SeqPacket`], which passes descriptors with `SCM_RIGHTS`).
//! One document is a head message, then the descriptors, then the body:
//!
//! - head: `{"snic_handover":1,"bytes":N,"fds":K}`, carrying the first descriptors (at most
//!   [`MAX_FDS`] per message);
//! - one 1-byte message per further group of [`MAX_FDS`] descriptors;
//! - the document's `N` bytes of JSON in messages of at most [`MAX_MESSAGE`] bytes.
//!
//! A socket message is the unit here, so a document never interleaves with another, and a
//! receiver that times out or sees a malformed head reports it instead of reading on. The
//! descriptors the receiver gets are its own (the kernel duplicated them): the sender keeps its
//! copies open, so it can resume with them when the receiver fails (the rollback of an upgrade).

use snic_hostif::proto::{MAX_FDS, MAX_MESSAGE};
use snic_hostif::shm::{SeqListener, SeqPacket};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest a send waits for room in the peer's receive queue.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Version of the channel's framing (the head's `snic_handover`).
const FRAMING: u64 = 1;

/// One end of a takeover channel.
#[derive(Debug)]
pub struct Channel {
    sock: SeqPacket,
}

/// A listening takeover socket; the socket file is removed when it drops.
#[derive(Debug)]
pub struct ChannelListener {
    listener: SeqListener,
    path: PathBuf,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("takeover channel: {}", what.into()))
}

impl ChannelListener {
    /// Accept one connection, waiting at most `timeout`.
    pub fn accept(&self, timeout: Duration) -> io::Result<Channel> {
        let end = Instant::now() + timeout;
        self.listener.set_nonblocking(true)?;
        loop {
            match self.listener.accept() {
                Ok(sock) => return Channel::new(sock),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= end {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("nobody connected to {} in {timeout:?}", self.path.display()),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Accept a connection if one is waiting (never blocks).
    pub fn try_accept(&self) -> io::Result<Option<Channel>> {
        self.listener.set_nonblocking(true)?;
        match self.listener.accept() {
            Ok(sock) => Channel::new(sock).map(Some),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for ChannelListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Channel {
    /// Listen for a takeover at `path` (a stale socket file there is replaced).
    pub fn listen(path: &Path) -> io::Result<ChannelListener> {
        let listener = SeqListener::bind(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen at {}: {e}", path.display()))
        })?;
        Ok(ChannelListener { listener, path: path.to_path_buf() })
    }

    /// Connect to a listener at `path`.
    pub fn connect(path: &Path) -> io::Result<Channel> {
        let sock = SeqPacket::connect(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot connect to {}: {e}", path.display()))
        })?;
        Channel::new(sock)
    }

    /// A channel over a connected socket; a send that cannot go on for [`SEND_TIMEOUT`] (a
    /// peer alive but not reading) fails instead of blocking its process.
    fn new(sock: SeqPacket) -> io::Result<Channel> {
        sock.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(Channel { sock })
    }

    /// The peer's process id, as the kernel tells it (`SO_PEERCRED`).
    pub fn peer_pid(&self) -> Option<u32> {
        self.sock.peer_pid()
    }

    /// A pidfd of the peer process, as the kernel tells it (`SO_PEERPIDFD`, Linux 6.5+).
    fn peer_pidfd(&self) -> io::Result<OwnedFd> {
        self.sock.peer_pidfd()
    }

    /// The peer's effective user id, as the kernel tells it (`SO_PEERCRED`).
    pub fn peer_uid(&self) -> Option<u32> {
        self.sock.peer_cred().map(|(_, uid)| uid)
    }

    /// A connected pair (for tests).
    #[cfg(test)]
    pub fn pair() -> io::Result<(Channel, Channel)> {
        let (a, b) = SeqPacket::pair()?;
        Ok((Channel::new(a)?, Channel::new(b)?))
    }

    /// Send `doc` with `fds` (the receiver gets duplicates; these stay open here).
    pub fn send(&self, doc: &serde_json::Value, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let body = serde_json::to_vec(doc).map_err(|e| bad(e.to_string()))?;
        let head =
            serde_json::json!({"snic_handover": FRAMING, "bytes": body.len(), "fds": fds.len()});
        let head = serde_json::to_vec(&head).map_err(|e| bad(e.to_string()))?;
        let mut groups = fds.chunks(MAX_FDS);
        self.sock.send(&head, groups.next().unwrap_or_default())?;
        for g in groups {
            self.sock.send(b"F", g)?;
        }
        for chunk in body.chunks(MAX_MESSAGE) {
            self.sock.send(chunk, &[])?;
        }
        Ok(())
    }

    /// Receive one document and its descriptors, waiting at most `timeout` in all.
    pub fn recv(&self, timeout: Duration) -> io::Result<(serde_json::Value, Vec<OwnedFd>)> {
        let end = Instant::now() + timeout;
        let mut buf = vec![0u8; MAX_MESSAGE];
        let next = |buf: &mut [u8]| -> io::Result<(usize, Vec<OwnedFd>)> {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "takeover channel: timed out"));
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.recv(buf) {
                Ok((0, _)) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "takeover channel: the peer closed the channel",
                )),
                Ok(r) => Ok(r),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    Err(io::Error::new(io::ErrorKind::TimedOut, "takeover channel: timed out"))
                }
                Err(e) => Err(e),
            }
        };
        let (n, mut fds) = next(&mut buf)?;
        let head: serde_json::Value =
            serde_json::from_slice(&buf[..n]).map_err(|e| bad(format!("bad head: {e}")))?;
        if head["snic_handover"].as_u64() != Some(FRAMING) {
            return Err(bad(format!("not a takeover document head: {head}")));
        }
        let (Some(bytes), Some(nfds)) = (head["bytes"].as_u64(), head["fds"].as_u64()) else {
            return Err(bad(format!("bad head: {head}")));
        };
        let (bytes, nfds) = (bytes as usize, nfds as usize);
        while fds.len() < nfds {
            let (n, more) = next(&mut buf)?;
            if n != 1 || buf[0] != b'F' || more.is_empty() {
                return Err(bad("expected a descriptor message"));
            }
            fds.extend(more);
        }
        if fds.len() != nfds {
            return Err(bad(format!("{} descriptors announced, {} received", nfds, fds.len())));
        }
        let mut body = Vec::with_capacity(bytes.min(1 << 26));
        while body.len() < bytes {
            let (n, extra) = next(&mut buf)?;
            if !extra.is_empty() || body.len() + n > bytes {
                return Err(bad("body longer than announced, or with descriptors"));
            }
            body.extend_from_slice(&buf[..n]);
        }
        let doc = serde_json::from_slice(&body).map_err(|e| bad(format!("bad document: {e}")))?;
        Ok((doc, fds))
    }
}

// ---------------------------------------------------------------------------------------------
// Steps both takeovers (`snic run`, `snic serve`) share.

/// Nanoseconds since the Unix epoch (0 before it): how the two processes tell each other
/// times, their monotonic clocks having different origins.
pub fn unix_ns(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The old process of a takeover: its pid (for messages) and, where the kernel has them
/// (Linux 5.3+), a pidfd, so that waiting for it and killing it can never reach another
/// process that was given the same pid.
pub struct OldProcess {
    /// The process id.
    pub pid: u32,
    handle: Handle,
}

/// How an [`OldProcess`] is reached.
enum Handle {
    /// Through its pidfd.
    Pidfd(OwnedFd),
    /// By pid only (no pidfd from this kernel).
    Pid,
    /// Not at all: it had exited when the channel was asked for its pidfd, so there is
    /// nothing to wait for or kill (its pid may be another process's by now).
    Gone,
}

impl OldProcess {
    /// The process at the other end of `chan`, whose pid is `pid`: its pidfd from the socket
    /// (`SO_PEERPIDFD`: exactly the process that connected), else, on kernels before 6.5, one
    /// opened by pid (a pid freed and reused between the connection and this call would be
    /// another process's; the window is the length of this call), else none.
    fn of_peer(chan: &Channel, pid: u32) -> OldProcess {
        match chan.peer_pidfd() {
            Ok(fd) => OldProcess { pid, handle: Handle::Pidfd(fd) },
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOPROTOOPT.raw_os_error()) => {
                Self::open(pid)
            }
            Err(_) => OldProcess { pid, handle: Handle::Gone },
        }
    }

    /// Open a pidfd of `pid` (none when the kernel refuses one).
    fn open(pid: u32) -> OldProcess {
        use rustix::process::{Pid, PidfdFlags, pidfd_open};
        let pidfd = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        OldProcess { pid, handle: pidfd.map_or(Handle::Pid, Handle::Pidfd) }
    }

    /// Wait until the process has exited, at most `limit`: a pidfd turns readable when it
    /// does.
    fn wait_exit(&self, limit: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let fd = match &self.handle {
            Handle::Pidfd(fd) => fd,
            Handle::Pid => return wait_exit(self.pid, limit),
            Handle::Gone => return true,
        };
        let end = Instant::now() + limit;
        loop {
            // An interrupted wait (a signal for this process) waits again for what is left.
            let left = end.saturating_duration_since(Instant::now());
            match snic_io::sys::poll::poll_in(fd.as_raw_fd(), Some(left)) {
                Ok(true) => return true,
                Ok(false) if left.is_zero() => return false,
                Ok(false) => {}
                Err(_) => return wait_exit(self.pid, left),
            }
        }
    }

    /// Send it SIGKILL.
    fn kill(&self) {
        use rustix::process::{Signal, pidfd_send_signal};
        match &self.handle {
            Handle::Pidfd(fd) => {
                let _ = pidfd_send_signal(fd, Signal::KILL);
            }
            Handle::Pid => {
                let pid = self.pid.to_string();
                let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
            }
            Handle::Gone => {}
        }
    }
}

/// Wait until process `pid` has exited (gone, or a zombie), at most `limit`.
fn wait_exit(pid: u32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        let exited = match stat {
            Err(_) => true,
            // The state follows the parenthesised command name.
            Ok(s) => s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        };
        if exited || pid == 0 {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The old process's first step, on an `upgrade` request: connect to the new process's
/// channel at `path`, which must belong to a process of this one's user (the descriptors go
/// to it). The error is the answer for the control client.
pub fn connect_to_new(path: &Path) -> Result<Channel, String> {
    let chan = Channel::connect(path).map_err(|e| e.to_string())?;
    let me = rustix::process::geteuid().as_raw();
    let peer = chan.peer_uid();
    if peer != Some(me) {
        return Err(format!(
            "the takeover channel's peer (uid {peer:?}) is not of this process's user ({me})"
        ));
    }
    Ok(chan)
}

/// The new process's last step, once the old one has committed: wait (at most `limit`) for it
/// to close `chan` and be gone, and kill it if it is not (it must not serve on, and its
/// listeners would keep this process from binding the control socket). `who` names the
/// command in the message.
pub fn wait_gone_or_kill(
    chan: &Channel,
    old: &OldProcess,
    limit: Duration,
    who: &str,
) -> anyhow::Result<()> {
    let pid = old.pid;
    // It closes the channel when it exits.
    let gone = matches!(chan.recv(limit), Err(e) if e.kind() == io::ErrorKind::UnexpectedEof);
    if !(gone && old.wait_exit(limit)) {
        eprintln!("{who}: the old process (pid {pid}) did not exit; killing it");
        old.kill();
        if !old.wait_exit(Duration::from_secs(2)) {
            anyhow::bail!("the old process (pid {pid}) is still running after SIGKILL");
        }
    }
    Ok(())
}

/// A private directory (mode 0700, removed on drop) for the takeover channel's socket, so
/// that no other user can connect to it first.
pub struct PrivateDir(pub PathBuf);

impl PrivateDir {
    /// A fresh directory under the temporary directory.
    pub fn new() -> anyhow::Result<PrivateDir> {
        use anyhow::Context as _;
        use std::os::unix::fs::DirBuilderExt;
        let nanos = unix_ns(std::time::SystemTime::now());
        let dir =
            std::env::temp_dir().join(format!("snic-takeover-{}-{nanos:x}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(PrivateDir(dir))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The new process's first step: listen on a channel in a private directory, ask the process
/// answering on `control` to hand over there, and accept its connection (within `timeout`).
/// Only the process that answered on the control socket may connect: the channel and that
/// process (its pidfd from the channel, see [`OldProcess::of_peer`]).
pub fn ask_to_hand_over(
    control: &Path,
    timeout: Duration,
) -> anyhow::Result<(Channel, OldProcess)> {
    use anyhow::Context as _;
    let dir = PrivateDir::new()?;
    let path = dir.0.join("channel.sock");
    let listener = Channel::listen(&path)?;
    let req = crate::control::Request::Upgrade { channel: path.display().to_string() };
    let answer = crate::control::request(control, &req)
        .with_context(|| format!("asking the process at {} to hand over", control.display()))?;
    let chan = listener.accept(timeout).context("the old process did not connect")?;
    drop(listener);
    drop(dir);
    let want = answer["pid"].as_u64().and_then(|p| u32::try_from(p).ok());
    match (want, chan.peer_pid()) {
        (Some(w), Some(p)) if w == p => {
            let old = OldProcess::of_peer(&chan, w);
            Ok((chan, old))
        }
        (w, p) => anyhow::bail!(
            "the takeover channel's peer is pid {p:?}, not the process at {} (pid {w:?})",
            control.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    /// The old process is waited for and killed through its pidfd: a live one is not seen as
    /// gone, a killed one is, and the channel tells its peer's user.
    #[test]
    fn old_process_is_waited_for_and_killed_through_a_pidfd() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let old = OldProcess::open(child.id());
        assert!(matches!(old.handle, Handle::Pidfd(_)), "no pidfd for a live child");
        assert!(!old.wait_exit(Duration::from_millis(50)), "a sleeping process seen as gone");
        old.kill();
        assert!(old.wait_exit(Duration::from_secs(5)), "the killed process not seen as gone");
        let status = child.wait().unwrap();
        assert!(!status.success());
        let (a, _b) = Channel::pair().unwrap();
        assert_eq!(a.peer_uid(), Some(rustix::process::geteuid().as_raw()));
        // This kernel (6.18) has SO_PEERPIDFD: the peer (this process) is alive.
        assert!(a.peer_pidfd().is_ok(), "no SO_PEERPIDFD");
        let me = OldProcess::of_peer(&a, std::process::id());
        assert!(matches!(me.handle, Handle::Pidfd(_)));
        assert!(!me.wait_exit(Duration::from_millis(20)));
    }

    /// A document larger than a message and more descriptors than fit one message arrive
    /// whole, and the descriptors are live duplicates (a write through one is read through the
    /// other).
    #[test]
    fn big_documents_and_many_descriptors_arrive_whole() {
        let (a, b) = Channel::pair().unwrap();
        let files: Vec<std::fs::File> = (0..(MAX_FDS * 2 + 3)).map(|_| tempfile()).collect();
        let fds: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let blob: String = "x".repeat(MAX_MESSAGE * 3 + 17);
        let doc = serde_json::json!({"blob": blob, "n": 7});
        let sender = std::thread::scope(|s| {
            let h = s.spawn(|| a.send(&doc, &fds));
            let got = b.recv(Duration::from_secs(10));
            h.join().unwrap().unwrap();
            got
        });
        let (got, received) = sender.unwrap();
        assert_eq!(got, doc);
        assert_eq!(received.len(), files.len());
        for (i, fd) in received.into_iter().enumerate() {
            let mut f = std::fs::File::from(fd);
            f.write_all(format!("file {i}").as_bytes()).unwrap();
            let mut orig = &files[i];
            orig.rewind().unwrap();
            let mut s = String::new();
            orig.read_to_string(&mut s).unwrap();
            assert_eq!(s, format!("file {i}"));
        }
    }

    #[test]
    fn a_closed_peer_a_timeout_and_a_bad_head_are_errors() {
        let (a, b) = Channel::pair().unwrap();
        let e = b.recv(Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        a.sock.send(b"{\"hello\":1}", &[]).unwrap();
        let e = b.recv(Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("not a takeover document head"), "{e}");
        drop(a);
        let e = b.recv(Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }

    #[test]
    fn listen_connect_accept() {
        let path = std::env::temp_dir().join(format!("snic-handover-{}.sock", std::process::id()));
        let l = Channel::listen(&path).unwrap();
        assert!(l.try_accept().unwrap().is_none());
        let c = Channel::connect(&path).unwrap();
        let s = l.accept(Duration::from_secs(5)).unwrap();
        c.send(&serde_json::json!({"op": "ready"}), &[]).unwrap();
        assert_eq!(s.recv(Duration::from_secs(5)).unwrap().0["op"], "ready");
        drop(l);
        assert!(!path.exists());
    }

    fn tempfile() -> std::fs::File {
        let p = std::env::temp_dir().join(format!(
            "snic-handover-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        let f =
            std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }
}
