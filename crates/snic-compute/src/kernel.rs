//! Kernel commands and statuses, the kernel trait, the built-ins and the registry.

use snic_dma::AddressSpace;

/// Kernel ids (`snic_hostif::abi::kernel` re-exports them for the FIFO layout).
pub mod ids {
    /// Copy `len` bytes from `src` to `dst`; result = len.
    pub const COPY: u32 = 0;
    /// Wrapping u64 sum of the little-endian u32 words at `src`; result = the sum.
    pub const SUM: u32 = 1;
}

/// Status codes of a kernel run (re-exported by `snic_hostif::abi::kernel`).
pub mod status {
    /// Done.
    pub const OK: u32 = 0;
    /// No such kernel.
    pub const UNKNOWN_KERNEL: u32 = 1;
    /// An address is not memory the client may use.
    pub const BAD_ADDRESS: u32 = 2;
    /// Bad length (zero, or not a multiple of 4 for SUM).
    pub const BAD_LENGTH: u32 = 3;
}

/// One kernel command, as a host writes it in its control FIFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelCmd {
    /// Kernel id ([`ids`]).
    pub kernel: u32,
    /// Caller's tag, echoed in the status.
    pub tag: u32,
    /// Source address (host IOVA or device address).
    pub src: u64,
    /// Destination address (unused by kernels that only read).
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// The outcome of one kernel command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelStatus {
    /// The command's tag.
    pub tag: u32,
    /// [`status`] code.
    pub status: u32,
    /// Kernel-specific result (0 on error).
    pub result: u64,
}

impl KernelStatus {
    /// A successful status.
    pub const fn ok(tag: u32, result: u64) -> KernelStatus {
        KernelStatus { tag, status: status::OK, result }
    }
    /// A failed status (result 0).
    pub const fn err(tag: u32, code: u32) -> KernelStatus {
        KernelStatus { tag, status: code, result: 0 }
    }
}

/// A lookaside kernel: runs one command over the address space on behalf of `owner` (the
/// client whose host memory it may touch, besides device memory).
pub trait LookasideKernel: Send + std::fmt::Debug {
    /// Kernel id (below 32: the registry advertises kernels as a bit mask).
    fn id(&self) -> u32;
    /// Short name, for stats and logs.
    fn name(&self) -> &'static str;
    /// Run `cmd`. Must check every range for `owner` before touching memory (resolve it with
    /// `mem.resolve` and access it through the span), and must not panic on any command.
    fn run(&mut self, mem: &mut AddressSpace, owner: u32, cmd: &KernelCmd) -> KernelStatus;
}

/// COPY: `len` bytes from `src` to `dst` (any mix of host and device memory); result = len.
#[derive(Debug, Default, Clone, Copy)]
pub struct CopyKernel;

impl LookasideKernel for CopyKernel {
    fn id(&self) -> u32 {
        ids::COPY
    }
    fn name(&self) -> &'static str {
        "copy"
    }
    fn run(&mut self, mem: &mut AddressSpace, owner: u32, cmd: &KernelCmd) -> KernelStatus {
        if cmd.len == 0 {
            return KernelStatus::err(cmd.tag, status::BAD_LENGTH);
        }
        let (Ok(src), Ok(dst)) =
            (mem.resolve(cmd.src, cmd.len, owner), mem.resolve(cmd.dst, cmd.len, owner))
        else {
            return KernelStatus::err(cmd.tag, status::BAD_ADDRESS);
        };
        match mem.copy_span(&src, &dst, src.len()) {
            Ok(()) => KernelStatus::ok(cmd.tag, cmd.len),
            Err(_) => KernelStatus::err(cmd.tag, status::BAD_ADDRESS),
        }
    }
}

/// SUM: wrapping u64 sum of the `len / 4` little-endian u32 words at `src` (`len` a non-zero
/// multiple of 4); result = the sum.
#[derive(Debug, Default, Clone, Copy)]
pub struct SumKernel;

impl LookasideKernel for SumKernel {
    fn id(&self) -> u32 {
        ids::SUM
    }
    fn name(&self) -> &'static str {
        "sum"
    }
    fn run(&mut self, mem: &mut AddressSpace, owner: u32, cmd: &KernelCmd) -> KernelStatus {
        if cmd.len == 0 || !cmd.len.is_multiple_of(4) {
            return KernelStatus::err(cmd.tag, status::BAD_LENGTH);
        }
        let Ok(bytes) =
            mem.resolve(cmd.src, cmd.len, owner).and_then(|src| mem.span_bytes(&src, src.len()))
        else {
            return KernelStatus::err(cmd.tag, status::BAD_ADDRESS);
        };
        let sum = bytes.chunks_exact(4).fold(0u64, |acc, w| {
            acc.wrapping_add(u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        });
        KernelStatus::ok(cmd.tag, sum)
    }
}

/// The kernels snic offers, by id.
#[derive(Debug, Default)]
pub struct Kernels {
    kernels: Vec<Box<dyn LookasideKernel>>,
    runs: u64,
    errors: u64,
}

impl Kernels {
    /// No kernels.
    pub fn new() -> Kernels {
        Kernels::default()
    }

    /// COPY and SUM.
    pub fn with_builtins() -> Kernels {
        Kernels { kernels: vec![Box::new(CopyKernel), Box::new(SumKernel)], runs: 0, errors: 0 }
    }

    /// Add (or replace) a kernel; ids of 32 and above are refused (returned back), since
    /// [`Self::mask`] has one bit per id.
    pub fn register(
        &mut self,
        kernel: Box<dyn LookasideKernel>,
    ) -> Result<(), Box<dyn LookasideKernel>> {
        if kernel.id() >= 32 {
            return Err(kernel);
        }
        self.kernels.retain(|k| k.id() != kernel.id());
        self.kernels.push(kernel);
        Ok(())
    }

    /// One bit per available kernel id.
    pub fn mask(&self) -> u32 {
        self.kernels.iter().fold(0, |m, k| m | 1 << k.id())
    }

    /// Name of kernel `id`.
    pub fn name(&self, id: u32) -> Option<&'static str> {
        self.kernels.iter().find(|k| k.id() == id).map(|k| k.name())
    }

    /// Run `cmd` for `owner`; an unknown kernel id gives [`status::UNKNOWN_KERNEL`].
    pub fn run(&mut self, mem: &mut AddressSpace, owner: u32, cmd: &KernelCmd) -> KernelStatus {
        self.runs += 1;
        let st = match self.kernels.iter_mut().find(|k| k.id() == cmd.kernel) {
            Some(k) => k.run(mem, owner, cmd),
            None => KernelStatus::err(cmd.tag, status::UNKNOWN_KERNEL),
        };
        if st.status != status::OK {
            self.errors += 1;
        }
        st
    }

    /// Commands run (including failed ones).
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Commands that failed.
    pub fn errors(&self) -> u64 {
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_dma::{HostAddr, MemKind};

    const A: u64 = 1 << 40;
    const B: u64 = 2 << 40;

    fn space() -> (AddressSpace, u64) {
        let mut m = AddressSpace::new();
        m.map_host_owned(HostAddr::new(A).unwrap(), Box::new(vec![0u8; 4096]), 1).unwrap();
        m.map_host_owned(HostAddr::new(B).unwrap(), Box::new(vec![0u8; 4096]), 2).unwrap();
        let (_, d) = m.add_device_region(MemKind::OnChip, 8192).unwrap();
        (m, d.raw())
    }

    fn cmd(kernel: u32, src: u64, dst: u64, len: u64) -> KernelCmd {
        KernelCmd { kernel, tag: 77, src, dst, len }
    }

    #[test]
    fn copy_host_to_device_and_back() {
        let (mut m, d) = space();
        let mut k = Kernels::with_builtins();
        m.write(A + 8, b"lookaside").unwrap();
        assert_eq!(k.run(&mut m, 1, &cmd(ids::COPY, A + 8, d + 100, 9)), KernelStatus::ok(77, 9));
        assert_eq!(m.slice(d + 100, 9).unwrap(), b"lookaside");
        assert_eq!(k.run(&mut m, 1, &cmd(ids::COPY, d + 100, A + 1000, 9)).status, status::OK);
        assert_eq!(m.slice(A + 1000, 9).unwrap(), b"lookaside");
        assert_eq!((k.runs(), k.errors()), (2, 0));
    }

    #[test]
    fn sum_of_words() {
        let (mut m, d) = space();
        let mut k = Kernels::with_builtins();
        let words: Vec<u32> = (0..256).map(|i| u32::MAX - i).collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        m.write(d, &bytes).unwrap();
        let want = words.iter().map(|&w| u64::from(w)).sum::<u64>();
        assert_eq!(k.run(&mut m, 1, &cmd(ids::SUM, d, 0, 1024)), KernelStatus::ok(77, want));
        m.write(A, &[1, 0, 0, 0, 2, 0, 0, 0]).unwrap();
        assert_eq!(k.run(&mut m, 1, &cmd(ids::SUM, A, 0, 8)).result, 3);
    }

    #[test]
    fn checks_before_touching_memory() {
        let (mut m, d) = space();
        let mut k = Kernels::with_builtins();
        m.write(B, b"secret").unwrap();
        // Client 1 may not read or write client 2's memory.
        let st = k.run(&mut m, 1, &cmd(ids::COPY, B, d, 6));
        assert_eq!(st, KernelStatus::err(77, status::BAD_ADDRESS));
        assert_eq!(m.slice(d, 6).unwrap(), &[0u8; 6]);
        m.write(d, b"intrud").unwrap();
        assert_eq!(k.run(&mut m, 1, &cmd(ids::COPY, d, B, 6)).status, status::BAD_ADDRESS);
        assert_eq!(m.slice(B, 6).unwrap(), b"secret");
        assert_eq!(k.run(&mut m, 1, &cmd(ids::SUM, B, 0, 4)).status, status::BAD_ADDRESS);
        // Out of bounds, unmapped, overflowing.
        assert_eq!(k.run(&mut m, 1, &cmd(ids::COPY, A + 4090, d, 16)).status, status::BAD_ADDRESS);
        assert_eq!(k.run(&mut m, 1, &cmd(ids::SUM, 0x1000, 0, 4)).status, status::BAD_ADDRESS);
        assert_eq!(k.run(&mut m, 1, &cmd(ids::COPY, A, d, u64::MAX)).status, status::BAD_ADDRESS);
        // Lengths.
        assert_eq!(k.run(&mut m, 1, &cmd(ids::COPY, A, d, 0)).status, status::BAD_LENGTH);
        assert_eq!(k.run(&mut m, 1, &cmd(ids::SUM, A, 0, 6)).status, status::BAD_LENGTH);
        assert_eq!(k.run(&mut m, 1, &cmd(ids::SUM, A, 0, 0)).status, status::BAD_LENGTH);
        assert_eq!(
            k.run(&mut m, 1, &cmd(9, A, d, 4)),
            KernelStatus::err(77, status::UNKNOWN_KERNEL)
        );
        assert_eq!(k.errors(), 10);
    }

    #[test]
    fn registry_mask_and_names() {
        let k = Kernels::with_builtins();
        assert_eq!(k.mask(), 1 << ids::COPY | 1 << ids::SUM);
        assert_eq!(k.name(ids::SUM), Some("sum"));
        assert_eq!(k.name(5), None);
        #[derive(Debug)]
        struct Big;
        impl LookasideKernel for Big {
            fn id(&self) -> u32 {
                40
            }
            fn name(&self) -> &'static str {
                "big"
            }
            fn run(&mut self, _: &mut AddressSpace, _: u32, c: &KernelCmd) -> KernelStatus {
                KernelStatus::ok(c.tag, 0)
            }
        }
        let mut k = Kernels::new();
        assert!(k.register(Box::new(Big)).is_err());
        assert_eq!(k.mask(), 0);
    }
}
