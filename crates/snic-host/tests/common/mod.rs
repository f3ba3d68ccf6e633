//! An in-process snic server for the host library's tests.

#![allow(dead_code, reason = "each test file uses part of it")]

use std::path::PathBuf;

use snic_compute::{Invocation, KernelError, LookasideKernel};
use snic_device::{KernelSet, Server, ServerConfig, ServerHandle};
use snic_dma::AddressSpace;

/// A running server on a socket in a fresh temporary directory.
pub struct TestServer {
    pub handle: Option<ServerHandle>,
    pub dir: PathBuf,
}

impl TestServer {
    pub fn start(tag: &str, workers: u32) -> TestServer {
        Self::start_with(tag, ServerConfig { workers, ..Default::default() })
    }

    /// A server with `cfg` (its socket and device memory sizes are set here).
    pub fn start_with(tag: &str, cfg: ServerConfig) -> TestServer {
        let dir = std::env::temp_dir().join(format!("snic-host-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cfg = ServerConfig {
            socket: dir.join("snic.sock"),
            on_chip: 4 << 20,
            on_board: 64 << 20,
            ..cfg
        };
        let handle = Server::start(cfg).expect("server starts");
        TestServer { handle: Some(handle), dir }
    }

    pub fn socket(&self) -> PathBuf {
        self.handle.as_ref().expect("running").socket_path().to_path_buf()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A deterministic byte pattern.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Id of [`RegsKernel`].
pub const REGS_KERNEL: u32 = 14;
/// Id of [`SleepKernel`].
pub const SLEEP_KERNEL: u32 = 13;

/// Test kernel: writes the eight user registers it was handed (32 bytes, little-endian) to
/// `a0`; result = their sum.
#[derive(Debug)]
pub struct RegsKernel;

impl LookasideKernel for RegsKernel {
    fn id(&self) -> u32 {
        REGS_KERNEL
    }
    fn name(&self) -> &'static str {
        "regs"
    }
    fn usage(&self) -> &'static str {
        "a0 out (32 bytes): the user registers; result = their sum"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        inv.check(mem, 1..=1, 0..=0, &[0])?;
        let out = inv.arg(0);
        if out.len < 32 {
            return Err(KernelError::NoSpace);
        }
        let bytes: Vec<u8> = inv.regs.iter().flat_map(|r| r.to_le_bytes()).collect();
        mem.write(out.addr, &bytes).map_err(|err| KernelError::BadAddress { arg: 0, err })?;
        Ok(inv.regs.iter().map(|&r| u64::from(r)).sum())
    }
}

/// Test kernel: sleeps `s0` milliseconds (at most 5 s); result = `s0`.
#[derive(Debug)]
pub struct SleepKernel;

impl LookasideKernel for SleepKernel {
    fn id(&self) -> u32 {
        SLEEP_KERNEL
    }
    fn name(&self) -> &'static str {
        "sleep"
    }
    fn usage(&self) -> &'static str {
        "s0 milliseconds"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        inv.check(mem, 0..=0, 1..=1, &[])?;
        let ms = inv.scalar(0).min(5000);
        std::thread::sleep(std::time::Duration::from_millis(ms));
        Ok(ms)
    }
}

/// The built-in kernels plus [`RegsKernel`] and [`SleepKernel`].
pub fn test_kernels() -> Vec<Box<dyn LookasideKernel>> {
    let mut k = snic_compute::builtins();
    k.push(Box::new(RegsKernel));
    k.push(Box::new(SleepKernel));
    k
}

/// A server config with the test kernels and `compute` compute workers.
pub fn with_test_kernels(compute: u32) -> ServerConfig {
    ServerConfig {
        workers: 1,
        compute_workers: compute,
        kernels: KernelSet(test_kernels),
        ..Default::default()
    }
}
