//! Shared memory, fd passing and eventfds, through the public API only.

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use snic_dma::mem::{AddressSpace, Backing, HostAddr};
use snic_hostif::proto::{MAX_FDS, MAX_MESSAGE};
use snic_hostif::shm::{EventFd, Mapping, SeqListener, SeqPacket, SharedBacking};

#[test]
fn memfd_and_map_fd_see_each_others_writes() {
    let (a, fd) = Mapping::memfd("snic-test", 8192, false).unwrap();
    assert_eq!(a.len(), 8192);
    assert!(!a.is_empty());
    assert!(!a.huge());
    assert!(a.shrink_sealed(), "memfd() seals the size");
    let b = Mapping::map_fd(fd.as_fd(), 8192).unwrap();
    assert_ne!(a.as_ptr(), b.as_ptr(), "two distinct mappings");
    a.write(100, b"hello").unwrap();
    let mut buf = [0u8; 5];
    b.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    b.write(8190, b"xy").unwrap();
    let mut buf = [0u8; 2];
    a.read(8190, &mut buf).unwrap();
    assert_eq!(&buf, b"xy");
    b.store_u32(64, 0x1234_5678);
    assert_eq!(a.load_u32(64), 0x1234_5678);
    // A smaller mapping of the same fd is fine.
    let c = Mapping::map_fd(fd.as_fd(), 100).unwrap();
    assert_eq!(c.len(), 100);
    assert_eq!(c.load_u32(64), 0x1234_5678);
    // Dropping one mapping leaves the others working.
    drop(a);
    let mut buf = [0u8; 5];
    b.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
}

#[test]
fn map_fd_refuses_too_long_and_empty() {
    let (_m, fd) = Mapping::memfd("snic-test", 4096, false).unwrap();
    let e = Mapping::map_fd(fd.as_fd(), 4097).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = Mapping::map_fd(fd.as_fd(), 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(Mapping::memfd("snic-test", 0, false).is_err());
    assert!(Mapping::memfd("bad\0name", 4096, false).is_err());
}

#[test]
fn huge_memfd_falls_back_or_rounds_up() {
    let (m, fd) = Mapping::memfd("snic-huge", 100, true).unwrap();
    if m.huge() {
        assert_eq!(m.len(), 2 << 20);
    } else {
        assert_eq!(m.len(), 100);
    }
    m.write(m.len() - 1, b"z").unwrap();
    let other = Mapping::map_fd(fd.as_fd(), m.len()).unwrap();
    assert_eq!(other.huge(), m.huge());
    let mut b = [0u8; 1];
    other.read(m.len() - 1, &mut b).unwrap();
    assert_eq!(&b, b"z");
}

#[test]
fn read_write_are_bounds_checked() {
    let (m, _fd) = Mapping::memfd("snic-test", 4096, false).unwrap();
    assert_eq!(m.write(4092, &[1, 2, 3, 4]), Some(()));
    assert_eq!(m.write(4093, &[1, 2, 3, 4]), None);
    assert_eq!(m.write(usize::MAX, &[1]), None);
    assert_eq!(m.write(4096, &[]), Some(()), "empty access at the end is in bounds");
    assert_eq!(m.write(4097, &[]), None);
    let mut b = [0u8; 4];
    assert_eq!(m.read(4092, &mut b), Some(()));
    assert_eq!(b, [1, 2, 3, 4]);
    let mut b = [9u8; 4];
    assert_eq!(m.read(4093, &mut b), None);
    assert_eq!(b, [9; 4], "a refused read leaves the buffer alone");
    assert_eq!(m.read(usize::MAX - 1, &mut b), None);
}

#[test]
fn atomic_u32_checks_alignment_and_bounds() {
    let (m, _fd) = Mapping::memfd("snic-test", 4096, false).unwrap();
    assert!(m.atomic_u32(0).is_some());
    assert!(m.atomic_u32(4092).is_some());
    assert!(m.atomic_u32(2).is_none());
    assert!(m.atomic_u32(4093).is_none());
    assert!(m.atomic_u32(4096).is_none());
    assert!(m.atomic_u32(usize::MAX - 3).is_none());
    m.store_u32(8, 7);
    assert_eq!(m.load_u32(8), 7);
    m.store_u32(9, 99); // ignored
    assert_eq!(m.load_u32(9), 0);
    assert_eq!(m.load_u32(8), 7);
    m.store_u32(4096, 1); // ignored
    let mut b = [0u8; 4];
    m.read(8, &mut b).unwrap();
    assert_eq!(u32::from_ne_bytes(b), 7, "the atomic is the word at that offset");
}

#[test]
fn shared_backing_in_an_address_space() {
    let (m, _fd) = Mapping::memfd("snic-test", 16384, false).unwrap();
    let m = Arc::new(m);
    let whole = SharedBacking::whole(m.clone());
    assert_eq!(whole.len(), 16384);
    let a = SharedBacking { map: m.clone(), off: 0, len: 8192 };
    let b = SharedBacking { map: m.clone(), off: 8192, len: 8192 };
    let mut space = AddressSpace::new();
    let ha = HostAddr::new(0x10_0000).unwrap().raw();
    let hb = HostAddr::new(0x20_0000).unwrap().raw();
    space.map_host_owned(HostAddr::new(ha).unwrap(), Box::new(a), 1).unwrap();
    space.map_host_owned(HostAddr::new(hb).unwrap(), Box::new(b), 1).unwrap();

    space.write(ha + 10, b"abcdef").unwrap();
    let mut buf = [0u8; 6];
    m.read(10, &mut buf).unwrap();
    assert_eq!(&buf, b"abcdef");
    m.write(8192 + 20, b"XYZ").unwrap();
    assert_eq!(space.slice(hb + 20, 3).unwrap(), b"XYZ");

    // Copy between windows, and overlapping within one.
    space.copy(ha + 10, hb + 100, 6).unwrap();
    let mut buf = [0u8; 6];
    m.read(8192 + 100, &mut buf).unwrap();
    assert_eq!(&buf, b"abcdef");
    space.copy(ha + 10, ha + 12, 6).unwrap();
    assert_eq!(space.slice(ha + 10, 8).unwrap(), b"ababcdef");
    assert!(space.write(ha + 8190, b"abc").is_err(), "the window's end is a region end");

    // Release/acquire words land at the right place of the shared memory.
    space.store_u32_release(hb + 4, 0xdead_beef).unwrap();
    assert_eq!(m.load_u32(8192 + 4), u32::from_le(0xdead_beef));
    m.store_u32(64, 0x0102_0304u32.to_le());
    assert_eq!(space.load_u32_acquire(ha + 64), Ok(0x0102_0304));
    assert_eq!(space.owner_of(ha), Some(1));
    assert!(space.check_owned(ha, 4, 2).is_err());
}

#[test]
fn shared_backing_clamps_bad_windows() {
    let (m, _fd) = Mapping::memfd("snic-test", 4096, false).unwrap();
    m.write(4090, b"tail!!").unwrap();
    let m = Arc::new(m);
    let mut w = SharedBacking { map: m.clone(), off: 4090, len: 100 };
    assert_eq!(w.len(), 6);
    assert_eq!(w.bytes(), b"tail!!");
    assert_eq!(w.range(1, 3), b"ail");
    assert!(w.range(4, 3).is_empty(), "out of the window: empty");
    assert!(w.range_mut(usize::MAX, 2).is_empty());
    w.range_mut(0, 1).copy_from_slice(b"T");
    let mut b = [0u8; 1];
    m.read(4090, &mut b).unwrap();
    assert_eq!(&b, b"T");
    let past = SharedBacking { map: m.clone(), off: usize::MAX, len: usize::MAX };
    assert_eq!(past.len(), 0);
    assert!(past.bytes().is_empty());
    // A window off a 4-byte boundary still gives working u32 accesses.
    let mut odd = SharedBacking { map: m.clone(), off: 1, len: 64 };
    odd.store_u32_release(4, 0xa1b2_c3d4);
    assert_eq!(odd.load_u32_acquire(4), 0xa1b2_c3d4);
    let mut b = [0u8; 4];
    m.read(5, &mut b).unwrap();
    assert_eq!(u32::from_le_bytes(b), 0xa1b2_c3d4);
    assert_eq!(odd.load_u32_acquire(62), 0, "out of the window");
}

#[test]
fn seqpacket_keeps_boundaries_and_passes_fds() {
    let (a, b) = SeqPacket::pair().unwrap();
    a.send(b"first", &[]).unwrap();
    a.send(b"second message", &[]).unwrap();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let (n, fds) = b.recv(&mut buf).unwrap();
    assert_eq!((&buf[..n], fds.len()), (&b"first"[..], 0));
    let (n, fds) = b.recv(&mut buf).unwrap();
    assert_eq!((&buf[..n], fds.len()), (&b"second message"[..], 0));

    // Pass a memfd and an eventfd; the other side maps the memory and signals the event.
    let (m, mfd) = Mapping::memfd("snic-pass", 4096, false).unwrap();
    m.write(0, b"shared!").unwrap();
    let ev = EventFd::new().unwrap();
    a.send(b"{\"map\":1}", &[mfd.as_fd(), ev.fd()]).unwrap();
    let (n, mut fds) = b.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"{\"map\":1}");
    assert_eq!(fds.len(), 2);
    let evfd: OwnedFd = fds.pop().unwrap();
    let peer = Mapping::map_fd(fds[0].as_fd(), 4096).unwrap();
    let mut got = [0u8; 7];
    peer.read(0, &mut got).unwrap();
    assert_eq!(&got, b"shared!");
    peer.write(100, b"back").unwrap();
    let mut got = [0u8; 4];
    m.read(100, &mut got).unwrap();
    assert_eq!(&got, b"back");
    let peer_ev = EventFd::from_fd(evfd);
    peer_ev.signal().unwrap();
    assert_eq!(ev.take().unwrap(), 1);

    // End of stream when the peer closes.
    drop(a);
    let (n, fds) = b.recv(&mut buf).unwrap();
    assert_eq!((n, fds.len()), (0, 0));
    // Sending to a closed peer is an error, not a SIGPIPE.
    assert_eq!(b.send(b"x", &[]).unwrap_err().kind(), ErrorKind::BrokenPipe);
}

#[test]
fn seqpacket_refuses_bad_sends() {
    let (a, _b) = SeqPacket::pair().unwrap();
    assert_eq!(a.send(b"", &[]).unwrap_err().kind(), ErrorKind::InvalidInput);
    let big = vec![0u8; MAX_MESSAGE + 1];
    assert_eq!(a.send(&big, &[]).unwrap_err().kind(), ErrorKind::InvalidInput);
    let evs: Vec<EventFd> = (0..=MAX_FDS).map(|_| EventFd::new().unwrap()).collect();
    let fds: Vec<_> = evs.iter().map(EventFd::fd).collect();
    assert_eq!(a.send(b"x", &fds).unwrap_err().kind(), ErrorKind::InvalidInput);
    a.send(b"x", &fds[..MAX_FDS]).unwrap();
    let mut buf = [0u8; 16];
    let (n, got) = _b.recv(&mut buf).unwrap();
    assert_eq!((n, got.len()), (1, MAX_FDS));
}

#[test]
fn truncated_message_is_refused_and_its_fds_closed() {
    let (a, b) = SeqPacket::pair().unwrap();
    // A probe: pass one end of another pair; if every copy of it is closed, its peer reads
    // end of stream.
    let (probe, probe_peer) = SeqPacket::pair().unwrap();
    a.send(b"0123456789", &[probe.fd()]).unwrap();
    drop(probe);
    let mut small = [0u8; 4];
    let e = b.recv(&mut small).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    probe_peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4];
    let (n, fds) = probe_peer.recv(&mut buf).unwrap();
    assert_eq!((n, fds.len()), (0, 0), "the received copy was closed");
    // The socket still works after the refused message.
    a.send(b"ok", &[]).unwrap();
    let (n, _) = b.recv(&mut small).unwrap();
    assert_eq!(&small[..n], b"ok");
}

#[test]
fn read_timeout_is_timed_out() {
    let (a, b) = SeqPacket::pair().unwrap();
    b.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(b.recv(&mut buf).unwrap_err().kind(), ErrorKind::TimedOut);
    a.send(b"late", &[]).unwrap();
    assert_eq!(b.recv(&mut buf).unwrap().0, 4);
    assert_eq!(
        b.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    b.set_read_timeout(None).unwrap();
}

fn temp_socket(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("snic-shm-test-{}-{tag}.sock", std::process::id()))
}

#[test]
fn listener_bind_connect_accept() {
    let path = temp_socket("listen");
    let l = SeqListener::bind(&path).unwrap();
    // Binding again replaces the socket file.
    drop(l);
    let l = SeqListener::bind(&path).unwrap();
    let c = SeqPacket::connect(&path).unwrap();
    let s = l.accept().unwrap();
    assert_eq!(s.peer_pid(), Some(std::process::id()));
    assert_eq!(c.peer_pid(), Some(std::process::id()));
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    assert_eq!(c.peer_cred().map(|(_, uid)| uid), me.ok());
    c.send(b"hello", &[]).unwrap();
    let mut buf = [0u8; 16];
    let (n, _) = s.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello");
    s.send(b"welcome", &[]).unwrap();
    let (n, _) = c.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"welcome");

    l.set_nonblocking(true).unwrap();
    assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    let _c2 = SeqPacket::connect(&path).unwrap();
    assert!(l.accept().is_ok(), "a pending connection is accepted without blocking");

    // A path that is not a socket is not removed.
    let plain = temp_socket("plain");
    std::fs::write(&plain, b"data").unwrap();
    assert!(SeqListener::bind(&plain).is_err());
    assert_eq!(std::fs::read(&plain).unwrap(), b"data");
    std::fs::remove_file(&plain).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(SeqPacket::connect(&path).is_err());
    let long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
    assert_eq!(SeqListener::bind(&long).unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[test]
fn eventfd_signal_take_wait() {
    let ev = EventFd::new().unwrap();
    assert_eq!(ev.take().unwrap(), 0);
    ev.signal().unwrap();
    ev.signal().unwrap();
    assert_eq!(ev.take().unwrap(), 2);
    assert_eq!(ev.take().unwrap(), 0);
    assert_eq!(ev.wait(Some(Duration::from_millis(10))).unwrap(), 0);
    ev.signal().unwrap();
    assert_eq!(ev.wait(Some(Duration::from_millis(10))).unwrap(), 1);
    assert_eq!(ev.wait(Some(Duration::ZERO)).unwrap(), 0);

    // A waiter without a timeout is woken by a signal from another thread.
    let ev = Arc::new(ev);
    let ev2 = ev.clone();
    let t = std::thread::spawn(move || ev2.wait(None));
    ev.signal().unwrap();
    assert_eq!(t.join().unwrap().unwrap(), 1);
}
