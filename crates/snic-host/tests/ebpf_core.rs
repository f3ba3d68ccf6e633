//! A NIC-core eBPF program (`SEC("snic/core")`) run as lookaside kernel `ebpf` (id 9) through
//! the kernel FIFOs by the host library, like the built-in kernels: a byte sum and an in-place
//! XOR over device and host memory, compared with a Rust reference; a command naming memory the client may
//! not touch is refused with `bad_address` and writes nothing; an empty slot is `bad_args`.

mod common;

use std::time::Duration;

use common::{TestServer, pattern};
use snic_device::ServerConfig;
use snic_device::ebpf::CorePrograms;
use snic_host::{DevKind, Device, KernelCmd};
use snic_hostif::abi;

const T: Duration = Duration::from_secs(10);

/// `a0` data: returns the sum of its bytes plus `s1` (the program's scalar 0, to show
/// scalars arrive), and XORs every byte with `s2` (scalar 1) in place (so the test sees the
/// device write the program's changes back, and only then).
const XOR_SUM: &str = r#"#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct snic_core_md { __u32 data, data_end, nargs, id; __u64 scalars[8]; __u32 arg_len[8]; };
SEC("snic/core") int xor_sum(struct snic_core_md *ctx) {
  unsigned char *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
  unsigned char key = ctx->scalars[1];
  __u64 sum = 0;
  for (int i = 0; i < 4096; i++) {
    if (d + i + 1 > end) break;
    sum += d[i];
    d[i] ^= key;
  }
  return sum + ctx->scalars[0];
}
char LICENSE[] SEC("license") = "GPL";
"#;

#[test]
fn a_nic_core_program_runs_through_the_kernel_fifo() {
    if !snic_ebpf::testing::require_clang("a_nic_core_program_runs_through_the_kernel_fifo") {
        return;
    }
    let obj = snic_ebpf::testing::compile_str("core_xor_sum", XOR_SUM, &[]);
    let core = CorePrograms::new();
    let e = core.load(3, &obj, "core_xor_sum.o", None, 1).expect("verified and loaded");
    assert_eq!(e.name, "snic/core/xor_sum");
    let cfg =
        ServerConfig { workers: 1, compute_workers: 1, core: Some(core), ..Default::default() };
    let s = TestServer::start_with("ebpf-core", cfg);
    let dev = Device::connect(&s.socket(), "ebpf-core").expect("connect");
    assert_eq!(dev.kernel_id("ebpf"), Some(abi::kernel::EBPF));

    let data = pattern(3000, 7);
    let d = dev.alloc_device(DevKind::OnBoard, 4096, 64).unwrap();
    dev.write_device(d, &data).unwrap();
    let cmd = |wl: u32, a0: u64, len: u64, key: u64| {
        KernelCmd::new(abi::kernel::EBPF, wl).addr(a0, len).scalar(3).scalar(1000).scalar(key)
    };
    let sum = |b: &[u8]| b.iter().map(|&x| u64::from(x)).sum::<u64>();
    let st = dev.kernel_run(&cmd(1, d, data.len() as u64, 0x5a), T).expect("runs");
    assert_eq!((st.workload, st.status, st.result), (1, abi::kernel::OK, sum(&data) + 1000));
    let mut got = vec![0u8; data.len()];
    dev.read_device(d, &mut got).unwrap();
    let want: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    assert!(got == want, "the program's writes reach device memory");

    // Host memory the client registered works the same.
    let h = dev.alloc_host(4096).unwrap();
    h.write(0, &data[..100]).unwrap();
    let st = dev.kernel_run(&cmd(2, h.iova(), 100, 0), T).unwrap();
    assert_eq!((st.status, st.result), (abi::kernel::OK, sum(&data[..100]) + 1000));

    // Refusals write nothing: memory of another client, two overlapping arguments, an empty
    // slot.
    let other = (u64::from(dev.client_id()) + 1) << 40;
    let st = dev.kernel_run(&cmd(3, other, 100, 0xff), T).unwrap();
    assert_eq!((st.workload, st.status), (3, abi::kernel::BAD_ADDRESS));
    let overlap = cmd(4, d, 100, 0xff).addr(d + 32, 64);
    assert_eq!(dev.kernel_run(&overlap, T).unwrap().status, abi::kernel::OVERLAP);
    let empty = KernelCmd::new(abi::kernel::EBPF, 5).addr(d, 100).scalar(0).scalar(0).scalar(0xff);
    assert_eq!(dev.kernel_run(&empty, T).unwrap().status, abi::kernel::BAD_ARGS);
    let mut after = vec![0u8; data.len()];
    dev.read_device(d, &mut after).unwrap();
    assert!(after == want, "a refused command wrote device memory");
}

/// RFC 1071: the one's complement of the folded one's-complement sum of big-endian words.
fn internet_checksum(data: &[u8], init: u32) -> u16 {
    let mut sum = u64::from(init);
    for w in data.chunks(2) {
        sum += u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The shipped NIC-core example, `examples/ebpf/core_checksum.c`, through the FIFO.
#[test]
fn the_shipped_core_checksum_matches_rfc_1071() {
    if !snic_ebpf::testing::require_clang("the_shipped_core_checksum_matches_rfc_1071") {
        return;
    }
    let src = snic_ebpf::testing::examples_dir().join("core_checksum.c");
    let obj = snic_ebpf::testing::compile(&src, &[]);
    let core = CorePrograms::new();
    core.load(0, &obj, "core_checksum.o", None, 1).expect("verified and loaded");
    let cfg =
        ServerConfig { workers: 1, compute_workers: 1, core: Some(core), ..Default::default() };
    let s = TestServer::start_with("ebpf-csum", cfg);
    let dev = Device::connect(&s.socket(), "ebpf-csum").expect("connect");
    let d = dev.alloc_device(DevKind::OnBoard, 8192, 64).unwrap();
    let out = dev.alloc_device(DevKind::OnChip, 64, 64).unwrap();
    for (i, len) in [1usize, 2, 63, 64, 65, 1500, 4097, 8192].into_iter().enumerate() {
        let data = pattern(len, i as u32 + 11);
        dev.write_device(d, &data).unwrap();
        let init = (i as u32) * 0x1234;
        let cmd = KernelCmd::new(abi::kernel::EBPF, i as u32)
            .addr(d, len as u64)
            .addr(out, 2)
            .scalar(0)
            .scalar(u64::from(init));
        let st = dev.kernel_run(&cmd, T).expect("runs");
        let want = internet_checksum(&data, init);
        assert_eq!((st.status, st.result), (abi::kernel::OK, u64::from(want)), "len {len}");
        let mut got = [0u8; 2];
        dev.read_device(out, &mut got).unwrap();
        assert_eq!(u16::from_be_bytes(got), want, "len {len}: written to argument 1");
    }
    // A bad address argument is refused and writes nothing.
    let mut before = [0u8; 2];
    dev.read_device(out, &mut before).unwrap();
    let other = (u64::from(dev.client_id()) + 1) << 40;
    let cmd = KernelCmd::new(abi::kernel::EBPF, 99).addr(other, 64).addr(out, 2).scalar(0);
    assert_eq!(dev.kernel_run(&cmd, T).unwrap().status, abi::kernel::BAD_ADDRESS);
    let mut after = [0u8; 2];
    dev.read_device(out, &mut after).unwrap();
    assert_eq!(after, before);
}
