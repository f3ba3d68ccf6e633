//! Fuzz target `compute_kernels`: an arbitrary lookaside kernel command run by the built-in
//! kernels over a small address space.
//!
//! Setup (fresh for every input): client 1's host region at `HOST_A` and client 2's at
//! `HOST_B` (8 KiB each) and a 16 KiB device region; the small regions keep every command's
//! work small (a GEMM's matrices must fit them).
//!
//! Input: the first 256 bytes (zero-padded) are a control-FIFO entry, decoded with
//! `KernelCmd::decode`; the rest is written at the start of each of the three regions
//! (truncated to the region), so SGL entries, LZ4 blocks and matrices come from the input. Each address argument whose top four bits are 0, 1 or
//! 2 is moved into client 1's region, client 2's region or device memory at its low 14 bits
//! (so most commands point somewhere mapped); other addresses stay as they are (unmapped,
//! overflowing, the device prefix). Byte 208 (reserved in the entry) picks the client: even
//! is client 1, odd client 2.
//!
//! Checked, besides "never panics": a refused command changes no byte of any region; a
//! status's workload is the command's and its result is 0 on error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_compute::{Invocation, KCMD_SIZE, KernelCmd, Kernels};
use snic_dma::{AddressSpace, HostAddr, MemKind};

const HOST_A: u64 = 0x10_0000;
const HOST_B: u64 = 0x20_0000;
const HOST_LEN: usize = 8 << 10;
const DEV_LEN: usize = 16 << 10;

fn snapshot(mem: &AddressSpace) -> Vec<u8> {
    let regions: Vec<_> = mem.regions().collect();
    regions.iter().flat_map(|r| mem.slice(r.base, r.len as usize).unwrap().to_vec()).collect()
}

fuzz_target!(|data: &[u8]| {
    let mut raw = [0u8; KCMD_SIZE];
    let n = data.len().min(KCMD_SIZE);
    raw[..n].copy_from_slice(&data[..n]);
    let mut cmd = KernelCmd::decode(&raw);
    let owner = 1 + u32::from(raw[208] & 1);

    let mut mem = AddressSpace::new();
    mem.map_host_owned(HostAddr::new(HOST_A).unwrap(), Box::new(vec![0u8; HOST_LEN]), 1).unwrap();
    mem.map_host_owned(HostAddr::new(HOST_B).unwrap(), Box::new(vec![0u8; HOST_LEN]), 2).unwrap();
    let (_, dev) = mem.add_device_region(MemKind::OnBoard, DEV_LEN as u64).unwrap();
    let bases = [HOST_A, HOST_B, dev.raw()];
    let rest = &data[n..];
    for (base, len) in [(HOST_A, HOST_LEN), (HOST_B, HOST_LEN), (dev.raw(), DEV_LEN)] {
        mem.write(base, &rest[..rest.len().min(len)]).unwrap();
    }
    for a in cmd.addrs.iter_mut() {
        if let Some(&base) = bases.get((a.addr >> 60) as usize) {
            a.addr = base + (a.addr & 0x3FFF);
        }
    }

    let before = snapshot(&mem);
    let mut kernels = Kernels::with_builtins();
    let st = kernels.run(&mut mem, &Invocation::new(owner, &cmd));
    assert_eq!(st.workload, cmd.workload);
    if !st.is_ok() {
        assert_eq!(st.result, 0);
        assert!(snapshot(&mem) == before, "refused command (status {}) wrote memory", st.status);
    }
});
