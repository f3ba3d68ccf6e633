//! The control message a host sends a lookaside kernel, the status it gets back, and their
//! fixed-size encodings (the entries of a kernel's control and status FIFOs).
//!
//! A command names a workload (the caller's id, echoed in the status), a kernel, up to
//! [`MAX_ADDRS`] address arguments (host IOVA or device address, each with a length) and up to
//! [`MAX_SCALARS`] 64-bit scalars, like RecoNIC's lookaside control message. What each argument
//! means is the kernel's business ([`crate::ids`] documents the built-ins).
//!
//! ```text
//! control entry, KCMD_SIZE = 256 bytes, little-endian
//!   0  workload  u32        caller's id, echoed
//!   4  kernel    u32        kernel id
//!   8  n_addrs   u8         0..=8
//!   9  n_scalars u8         0..=8
//!  10  reserved  6 bytes
//!  16  addrs     8 x { addr u64, len u64 }
//! 144  scalars   8 x u64
//! 208  reserved  48 bytes
//!
//! status entry, KSTS_SIZE = 32 bytes
//!   0  workload  u32
//!   4  status    u32        crate::status code
//!   8  result    u64        kernel-specific (0 on error)
//!  16  busy_ns   u64        time the kernel ran (filled in by the runner; 0 if unknown)
//!  24  reserved  8 bytes
//! ```

/// Most address arguments a command carries.
pub const MAX_ADDRS: usize = 8;
/// Most scalar arguments a command carries.
pub const MAX_SCALARS: usize = 8;
/// Bytes of an encoded command (one control-FIFO entry).
pub const KCMD_SIZE: usize = 256;
/// Bytes of an encoded status (one status-FIFO entry).
pub const KSTS_SIZE: usize = 32;

/// One address argument: `len` bytes at `addr` (host IOVA or device address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct AddrArg {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

impl AddrArg {
    /// `len` bytes at `addr`.
    pub const fn new(addr: u64, len: u64) -> AddrArg {
        AddrArg { addr, len }
    }

    /// Whether the two ranges share a byte (empty ranges share none; an overflowing end is
    /// taken as the end of the address space).
    pub fn overlaps(&self, other: &AddrArg) -> bool {
        let end = |a: &AddrArg| a.addr.saturating_add(a.len);
        self.len != 0 && other.len != 0 && self.addr < end(other) && other.addr < end(self)
    }
}

/// One kernel command, as a host writes it in a kernel's control FIFO.
///
/// The counts are kept as written: a command that claims more than [`MAX_ADDRS`] address or
/// [`MAX_SCALARS`] scalar arguments is refused by [`crate::Kernels::run`] with
/// [`crate::status::BAD_ARGS`] (the accessors never read past the arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct KernelCmd {
    /// Caller's id for this piece of work, echoed in the status.
    pub workload: u32,
    /// Kernel id ([`crate::ids`]).
    pub kernel: u32,
    /// Address arguments in use (`addrs[..n_addrs]`).
    pub n_addrs: u8,
    /// Scalar arguments in use (`scalars[..n_scalars]`).
    pub n_scalars: u8,
    /// Address arguments.
    pub addrs: [AddrArg; MAX_ADDRS],
    /// Scalar arguments.
    pub scalars: [u64; MAX_SCALARS],
}

impl KernelCmd {
    /// A command for `kernel` with no arguments yet.
    pub const fn new(kernel: u32, workload: u32) -> KernelCmd {
        KernelCmd {
            workload,
            kernel,
            n_addrs: 0,
            n_scalars: 0,
            addrs: [AddrArg::new(0, 0); MAX_ADDRS],
            scalars: [0; MAX_SCALARS],
        }
    }

    /// Append an address argument (ignored beyond [`MAX_ADDRS`]; [`Self::try_addr`] says so).
    #[must_use]
    pub fn addr(mut self, addr: u64, len: u64) -> KernelCmd {
        let _ = self.try_addr(addr, len);
        self
    }

    /// Append a scalar argument (ignored beyond [`MAX_SCALARS`]; [`Self::try_scalar`] says so).
    #[must_use]
    pub fn scalar(mut self, v: u64) -> KernelCmd {
        let _ = self.try_scalar(v);
        self
    }

    /// Append an address argument; false when all [`MAX_ADDRS`] are taken.
    pub fn try_addr(&mut self, addr: u64, len: u64) -> bool {
        let n = usize::from(self.n_addrs);
        if n >= MAX_ADDRS {
            return false;
        }
        self.addrs[n] = AddrArg::new(addr, len);
        self.n_addrs += 1;
        true
    }

    /// Append a scalar argument; false when all [`MAX_SCALARS`] are taken.
    pub fn try_scalar(&mut self, v: u64) -> bool {
        let n = usize::from(self.n_scalars);
        if n >= MAX_SCALARS {
            return false;
        }
        self.scalars[n] = v;
        self.n_scalars += 1;
        true
    }

    /// The address arguments in use (at most [`MAX_ADDRS`]).
    pub fn addr_args(&self) -> &[AddrArg] {
        &self.addrs[..usize::from(self.n_addrs).min(MAX_ADDRS)]
    }

    /// The scalar arguments in use (at most [`MAX_SCALARS`]).
    pub fn scalar_args(&self) -> &[u64] {
        &self.scalars[..usize::from(self.n_scalars).min(MAX_SCALARS)]
    }

    /// Whether the counts fit the arrays.
    pub fn counts_ok(&self) -> bool {
        usize::from(self.n_addrs) <= MAX_ADDRS && usize::from(self.n_scalars) <= MAX_SCALARS
    }

    /// The control-FIFO entry (layout in the module doc; reserved bytes zero).
    pub fn encode(&self) -> [u8; KCMD_SIZE] {
        let mut b = [0u8; KCMD_SIZE];
        b[0..4].copy_from_slice(&self.workload.to_le_bytes());
        b[4..8].copy_from_slice(&self.kernel.to_le_bytes());
        b[8] = self.n_addrs;
        b[9] = self.n_scalars;
        for (i, a) in self.addrs.iter().enumerate() {
            let at = 16 + i * 16;
            b[at..at + 8].copy_from_slice(&a.addr.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&a.len.to_le_bytes());
        }
        for (i, s) in self.scalars.iter().enumerate() {
            let at = 144 + i * 8;
            b[at..at + 8].copy_from_slice(&s.to_le_bytes());
        }
        b
    }

    /// The command a control-FIFO entry holds. Every bit pattern decodes (reserved bytes are
    /// ignored); the kernel runner checks the fields.
    pub fn decode(b: &[u8; KCMD_SIZE]) -> KernelCmd {
        let mut c = KernelCmd::new(le_u32(b, 4), le_u32(b, 0));
        c.n_addrs = b[8];
        c.n_scalars = b[9];
        for (i, a) in c.addrs.iter_mut().enumerate() {
            *a = AddrArg::new(le_u64(b, 16 + i * 16), le_u64(b, 24 + i * 16));
        }
        for (i, s) in c.scalars.iter_mut().enumerate() {
            *s = le_u64(b, 144 + i * 8);
        }
        c
    }
}

/// The outcome of one kernel command (a status-FIFO entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct KernelStatus {
    /// The command's workload id.
    pub workload: u32,
    /// [`crate::status`] code.
    pub status: u32,
    /// Kernel-specific result (0 on error).
    pub result: u64,
    /// Nanoseconds the kernel ran, as the runner measured them (0 when it does not).
    pub busy_ns: u64,
}

impl KernelStatus {
    /// A successful status.
    pub const fn ok(workload: u32, result: u64) -> KernelStatus {
        KernelStatus { workload, status: crate::status::OK, result, busy_ns: 0 }
    }

    /// A failed status (result 0).
    pub const fn err(workload: u32, code: u32) -> KernelStatus {
        KernelStatus { workload, status: code, result: 0, busy_ns: 0 }
    }

    /// Whether the command succeeded.
    pub const fn is_ok(&self) -> bool {
        self.status == crate::status::OK
    }

    /// The status-FIFO entry (layout in the module doc; reserved bytes zero).
    pub fn encode(&self) -> [u8; KSTS_SIZE] {
        let mut b = [0u8; KSTS_SIZE];
        b[0..4].copy_from_slice(&self.workload.to_le_bytes());
        b[4..8].copy_from_slice(&self.status.to_le_bytes());
        b[8..16].copy_from_slice(&self.result.to_le_bytes());
        b[16..24].copy_from_slice(&self.busy_ns.to_le_bytes());
        b
    }

    /// The status a status-FIFO entry holds (reserved bytes ignored).
    pub fn decode(b: &[u8; KSTS_SIZE]) -> KernelStatus {
        KernelStatus {
            workload: le_u32(b, 0),
            status: le_u32(b, 4),
            result: le_u64(b, 8),
            busy_ns: le_u64(b, 16),
        }
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from(le_u32(b, at)) | u64::from(le_u32(b, at + 4)) << 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_at_their_offsets() {
        let mut c = KernelCmd::new(0x0102_0304, 0xDEAD_BEEF)
            .addr(0x1122_3344_5566_7788, 4096)
            .addr(2 << 40, 16)
            .scalar(u64::MAX - 1);
        for i in 0..6 {
            c = c.scalar(i);
        }
        let raw = c.encode();
        assert_eq!(&raw[0..4], &0xDEAD_BEEFu32.to_le_bytes());
        assert_eq!(&raw[4..8], &[4, 3, 2, 1]);
        assert_eq!((raw[8], raw[9]), (2, 7));
        assert_eq!(&raw[16..24], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&raw[40..48], &16u64.to_le_bytes());
        assert_eq!(&raw[144..152], &(u64::MAX - 1).to_le_bytes());
        assert!(raw[208..].iter().all(|&b| b == 0));
        assert_eq!(KernelCmd::decode(&raw), c);
        assert_eq!(c.addr_args().len(), 2);
        assert_eq!(c.scalar_args()[6], 5);

        let st = KernelStatus { workload: 7, status: 3, result: u64::MAX - 5, busy_ns: 12345 };
        let mut raw = st.encode();
        assert_eq!(&raw[16..24], &12345u64.to_le_bytes());
        raw[24..].fill(0xFF);
        assert_eq!(KernelStatus::decode(&raw), st);
    }

    #[test]
    fn builders_stop_at_the_limits_and_accessors_never_overrun() {
        let mut c = KernelCmd::new(1, 1);
        for i in 0..MAX_ADDRS as u64 {
            assert!(c.try_addr(i, 1));
        }
        assert!(!c.try_addr(99, 1));
        assert_eq!(c.addr_args().len(), MAX_ADDRS);
        let mut raw = c.encode();
        raw[8] = 200;
        raw[9] = 9;
        let d = KernelCmd::decode(&raw);
        assert!(!d.counts_ok());
        assert_eq!((d.addr_args().len(), d.scalar_args().len()), (MAX_ADDRS, MAX_SCALARS));
    }

    #[test]
    fn overlap_is_about_shared_bytes() {
        let a = AddrArg::new(100, 10);
        assert!(a.overlaps(&AddrArg::new(109, 1)));
        assert!(a.overlaps(&AddrArg::new(50, 51)));
        assert!(!a.overlaps(&AddrArg::new(110, 10)));
        assert!(!a.overlaps(&AddrArg::new(90, 10)));
        assert!(!a.overlaps(&AddrArg::new(105, 0)));
        assert!(AddrArg::new(u64::MAX - 4, 100).overlaps(&AddrArg::new(u64::MAX - 1, 1)));
    }
}
