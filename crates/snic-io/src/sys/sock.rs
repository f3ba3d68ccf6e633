//! Socket helpers over libc: options, buffer sizes, the C structs of `recvmmsg(2)` /
//! `sendmmsg(2)`, and socket-address conversion. Each is written once for every driver.
#![allow(
    unsafe_code,
    reason = "setsockopt and C structs through libc; each block has a SAFETY comment"
)]

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `setsockopt` of one int on the open socket `fd`.
pub fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    setsockopt_value(fd, level, opt, &val)
}

/// `setsockopt` of a plain C value (an int, a `packet_mreq`, ...) on the open socket `fd`: the
/// kernel reads `size_of::<T>()` bytes of `val`. Which type an option takes is the caller's
/// business; a wrong size is refused by the kernel (`EINVAL`), not a memory error.
pub fn setsockopt_value<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: &T,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(core::mem::size_of::<T>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "option value too large"))?;
    // SAFETY: `val` is a live reference and the length passed is its size; the kernel only
    // reads that many bytes from it. `fd` is an open socket of the caller.
    let r = unsafe { libc::setsockopt(fd, level, opt, (val as *const T).cast(), len) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// `getsockopt` of one int on the open socket `fd`.
pub fn getsockopt_int(fd: RawFd, level: libc::c_int, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `val` and `len` are live and `len` is `val`'s size; the kernel writes at most
    // `len` bytes into `val` and the length it wrote into `len`. `fd` is an open socket.
    let r = unsafe {
        libc::getsockopt(fd, level, opt, (&mut val as *mut libc::c_int).cast(), &mut len)
    };
    if r == 0 { Ok(val) } else { Err(io::Error::last_os_error()) }
}

/// Plain unsigned integers: every bit pattern of their size is a valid value, so the kernel may
/// write any bytes into them.
pub trait Word: Copy + Default + sealed::Sealed {}
impl Word for u32 {}
impl Word for u64 {}

mod sealed {
    /// Only the integer types above are [`super::Word`]s.
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// `getsockopt` of an option made of `N` words of type `W` (a `tpacket_stats_v3` is three
/// `u32`s, an `xdp_statistics` six `u64`s) on the open socket `fd`: returns the words (those the
/// kernel did not write stay 0) and the number of bytes it wrote.
pub fn getsockopt_words<W: Word, const N: usize>(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
) -> io::Result<([W; N], usize)> {
    let mut val = [W::default(); N];
    let mut len = libc::socklen_t::try_from(core::mem::size_of::<[W; N]>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "option value too large"))?;
    // SAFETY: `val` and `len` are live and `len` is `val`'s size; the kernel writes at most
    // `len` bytes into `val` (`W` is a plain integer: any bytes are a valid value) and the
    // length it wrote into `len`. `fd` is an open socket of the caller.
    let r = unsafe { libc::getsockopt(fd, level, opt, val.as_mut_ptr().cast(), &mut len) };
    if r == 0 { Ok((val, len as usize)) } else { Err(io::Error::last_os_error()) }
}

/// The MTU of the route to `peer`, as the kernel knows it now (the egress interface's MTU, or
/// a smaller path MTU it learned): a UDP socket is connected to `peer` (which sends nothing)
/// and asked for `IP_MTU` / `IPV6_MTU`.
pub fn route_mtu(peer: std::net::IpAddr) -> io::Result<usize> {
    let any: std::net::SocketAddr = if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(any)?;
    s.connect((peer, 9))?;
    let mtu = if peer.is_ipv4() {
        getsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU)?
    } else {
        getsockopt_int(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_MTU)?
    };
    usize::try_from(mtu).map_err(|_| io::Error::other(format!("route MTU {mtu}")))
}

/// The MTU of interface `ifname` (`SIOCGIFMTU` through a throwaway datagram socket).
pub fn interface_mtu(ifname: &std::ffi::CStr) -> io::Result<usize> {
    // SAFETY: plain socket(2) call; the result is checked.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `s` is a fresh descriptor that nothing else owns.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { core::mem::zeroed() };
    let name = ifname.to_bytes_with_nul();
    if name.len() > req.ifr_name.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface name too long"));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifr_mtu inside `req`, which is live.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after a successful SIOCGIFMTU the union holds ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(usize::try_from(mtu).unwrap_or(1500))
}

/// Set a socket buffer size with the privileged option `force` (ignores the system maximum),
/// falling back to `plain` (capped by the system maximum). Best effort: a smaller buffer only
/// means more EAGAIN (retried) or counted drops under bursts.
pub fn set_buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int, size: libc::c_int) {
    if setsockopt_int(fd, libc::SOL_SOCKET, force, size).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, size);
    }
}

/// Errors that mean "nothing to do now" rather than a broken socket: no data, an ICMP port
/// unreachable from a peer that is not up yet, an interrupted call.
pub fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused | io::ErrorKind::Interrupted
    )
}

/// The socket buffer is full for now (EAGAIN / ENOBUFS): keep the packets, retry later.
pub fn is_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// A send error that a real network produces at any time (a firewall's verdict `EPERM` /
/// `EACCES`, a route or neighbour that is not there, an ICMP error from an earlier datagram
/// reported as `ECONNREFUSED`): the datagram is lost and the sender goes on. Anything else (a
/// bad descriptor, a bad address, a full buffer) is not.
pub fn is_refused_by_network(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EPERM
                | libc::EACCES
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::ENETDOWN
                | libc::EHOSTDOWN
                | libc::ECONNREFUSED
        )
    )
}

/// An `iovec` pointing at nothing.
pub fn empty_iovec() -> libc::iovec {
    libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }
}

/// An all-zero `mmsghdr`.
pub fn empty_mmsghdr() -> libc::mmsghdr {
    // SAFETY: `mmsghdr` is a plain C struct of integers and raw pointers, for which all-zero
    // bytes are a valid value (null pointers, zero lengths).
    unsafe { core::mem::zeroed() }
}

/// An all-zero `sockaddr_ll` (AF_PACKET addresses).
pub fn empty_sockaddr_ll() -> libc::sockaddr_ll {
    // SAFETY: `sockaddr_ll` is a plain C struct of integers; all-zero is valid.
    unsafe { core::mem::zeroed() }
}

/// An all-zero `sockaddr_storage`.
pub fn empty_sockaddr() -> libc::sockaddr_storage {
    // SAFETY: `sockaddr_storage` is a plain C struct of integers; all-zero is valid.
    unsafe { core::mem::zeroed() }
}

/// Write `a` into `out`; returns the address length.
pub fn to_sockaddr(a: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and at least as aligned as sockaddr_in.
            unsafe { core::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin) };
            core::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: v.ip().octets() },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and at least as aligned as sockaddr_in6.
            unsafe { core::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin6) };
            core::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}
/// Read a socket address the kernel wrote.
pub fn from_sockaddr(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET if len >= core::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in; storage is larger and
            // at least as aligned.
            let sin: libc::sockaddr_in =
                unsafe { core::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len >= core::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { core::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_refusals_are_losses_and_the_rest_are_errors() {
        let err = io::Error::from_raw_os_error;
        for errno in [libc::EPERM, libc::EACCES, libc::EHOSTUNREACH, libc::ENETUNREACH] {
            assert!(is_refused_by_network(&err(errno)), "{errno}");
        }
        assert!(is_refused_by_network(&err(libc::ECONNREFUSED)));
        for errno in [libc::EBADF, libc::EINVAL, libc::EFAULT, libc::EMSGSIZE] {
            assert!(!is_refused_by_network(&err(errno)), "{errno}");
        }
        // A full buffer is neither: the packets stay queued and are sent again.
        assert!(!is_refused_by_network(&err(libc::ENOBUFS)));
        assert!(is_full(&err(libc::ENOBUFS)));
    }

    #[test]
    fn loopback_route_has_the_loopback_mtu() {
        // Linux's loopback MTU is 65536 (older kernels: 16436); either is far above 4096.
        let mtu = route_mtu("127.0.0.1".parse().unwrap()).unwrap();
        assert!(mtu >= 16_436, "{mtu}");
    }

    #[test]
    fn sockaddr_round_trip() {
        for a in ["127.0.0.1:4791", "[::1]:65535", "[fd00::5]:1"] {
            let a: SocketAddr = a.parse().unwrap();
            let mut ss = empty_sockaddr();
            let l = to_sockaddr(&a, &mut ss);
            assert_eq!(from_sockaddr(&ss, l), Some(a));
            assert_eq!(from_sockaddr(&ss, 2), None);
        }
    }
}
