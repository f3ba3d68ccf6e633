//! The TAP ioctls tun-rs does not make: the virtio-net header size (`TUNSETVNETHDRSZ`, and
//! `TUNGETVNETHDRSZ` to check a handed-over queue) and
//! the offloads the reader takes (`TUNSETOFFLOAD`), for the UDP-tunnel GSO header of Linux 6.17+
//! (see `crate::vnet`).
#![allow(unsafe_code, reason = "TAP ioctls through libc; each block has a SAFETY comment")]

use std::io;
use std::os::fd::RawFd;

/// `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `_IOW('T', 216, int)`.
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
/// `_IOR('T', 215, int)`.
const TUNGETVNETHDRSZ: libc::c_ulong = 0x8004_54d7;

/// `TUN_F_CSUM`: the reader takes partial checksums.
pub const TUN_F_CSUM: u32 = 0x01;
/// `TUN_F_TSO4`: the reader takes TCP/IPv4 super-packets.
pub const TUN_F_TSO4: u32 = 0x02;
/// `TUN_F_TSO6`: the reader takes TCP/IPv6 super-packets.
pub const TUN_F_TSO6: u32 = 0x04;
/// `TUN_F_USO4`: the reader takes UDP/IPv4 super-packets.
pub const TUN_F_USO4: u32 = 0x20;
/// `TUN_F_USO6`: the reader takes UDP/IPv6 super-packets.
pub const TUN_F_USO6: u32 = 0x40;
/// `TUN_F_UDP_TUNNEL_GSO` (Linux 6.17+): the reader takes super-packets inside UDP tunnels.
pub const TUN_F_UDP_TUNNEL_GSO: u32 = 0x80;

/// Set the offloads the reader of TAP descriptor `fd` takes (`TUN_F_*` bits). Fails with the
/// kernel's error (`EINVAL` for bits it does not know).
pub fn set_offload(fd: RawFd, flags: u32) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; `fd` is only read by the kernel.
    let r = unsafe { libc::ioctl(fd, TUNSETOFFLOAD, libc::c_ulong::from(flags)) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Set the virtio-net header size of TAP descriptor `fd` (10, 12, 20 or 24 bytes).
pub fn set_vnet_hdr_size(fd: RawFd, size: libc::c_int) -> io::Result<()> {
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which points at a live local.
    let r = unsafe { libc::ioctl(fd, TUNSETVNETHDRSZ, &size as *const libc::c_int) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The virtio-net header size of TAP descriptor `fd`; fails (`EBADFD`, `ENOTTY`) for a
/// descriptor that is not an attached TAP queue.
pub fn vnet_hdr_size(fd: RawFd) -> io::Result<libc::c_int> {
    let mut size: libc::c_int = 0;
    // SAFETY: TUNGETVNETHDRSZ writes one int through the pointer, which points at a live local.
    let r = unsafe { libc::ioctl(fd, TUNGETVNETHDRSZ, &mut size as *mut libc::c_int) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(size) }
}
