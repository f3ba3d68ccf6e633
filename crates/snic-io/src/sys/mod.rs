//! Every libc helper of snic's I/O crates, in one place: socket options, the zeroed C structs
//! that `recvmmsg(2)` / `sendmmsg(2)` take, socket-address conversion, `poll(2)`/`ppoll(2)`
//! waits and `madvise(2)`.
//!
//! Port drivers (AF_PACKET, TAP, UDP), the RoCE transport (`snic-roce`) and the host-facing
//! device (`snic-device`) call these instead of writing their own `setsockopt` or `pollfd`
//! code. What stays in a driver is the system call that *is* the driver (its own
//! `recvmmsg`/`sendmmsg` with its control messages); everything generic lives here.
//!
//! - [`sock`]: `setsockopt` of one int, socket buffer sizes, errors that mean "retry later",
//!   zeroed `iovec`/`mmsghdr`/`sockaddr_storage`, `SocketAddr` <-> `sockaddr_storage`.
//! - [`poll`]: wait for readable (or writable) descriptors.
//! - [`hugepage`]: ask for transparent huge pages on large tables.
//! - [`tun`]: TAP offload and virtio-net header size ioctls.

pub mod hugepage;
pub mod poll;
pub mod sock;
pub mod tun;
