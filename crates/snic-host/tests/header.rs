//! The C header declares every function the library exports, and nothing it does not.

use std::collections::BTreeSet;

fn exported() -> BTreeSet<String> {
    let src = include_str!("../src/ffi.rs");
    let mut names = BTreeSet::new();
    let mut lines = src.lines();
    while let Some(l) = lines.next() {
        if l.trim() != "#[unsafe(no_mangle)]" {
            continue;
        }
        // The fn line follows (after attributes).
        for l in lines.by_ref() {
            let t = l.trim();
            if let Some(rest) = t.split("extern \"C\" fn ").nth(1) {
                let name: String =
                    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                names.insert(name);
                break;
            }
        }
    }
    names
}

fn declared() -> BTreeSet<String> {
    let h = include_str!("../include/snic.h");
    let mut names = BTreeSet::new();
    for l in h.lines() {
        let l = l.trim();
        if l.starts_with('#') || l.starts_with("/*") || l.starts_with('*') {
            continue;
        }
        if let Some(i) = l.find("snic_")
            && let Some(p) = l[i..].find('(')
        {
            let name = &l[i..i + p];
            if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn header_matches_exports() {
    let e = exported();
    let d = declared();
    assert!(e.len() >= 20, "parsed exports: {e:?}");
    assert_eq!(e, d, "ffi.rs exports vs snic.h declarations");
}

/// The built shared library exports exactly those symbols (when `nm` is available).
#[test]
fn shared_library_symbols() {
    let Some(so) = find_so() else {
        eprintln!("libsnic_host.so not built yet; skipping the nm check");
        return;
    };
    let out =
        match std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(&so).output() {
            Ok(o) if o.status.success() => o,
            _ => {
                eprintln!("nm not available; skipping");
                return;
            }
        };
    let text = String::from_utf8_lossy(&out.stdout);
    let syms: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("snic_"))
        .map(str::to_string)
        .collect();
    assert_eq!(syms, declared(), "{}", so.display());
}

fn find_so() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(3).map(|d| d.join("libsnic_host.so")).find(|p| p.exists())
}

/// `#define NAME VALUE` lines of the header whose value is a plain integer.
fn defines() -> std::collections::BTreeMap<String, i64> {
    let h = include_str!("../include/snic.h");
    let mut m = std::collections::BTreeMap::new();
    for l in h.lines() {
        let mut w = l.split_whitespace();
        if w.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(v)) = (w.next(), w.next()) else { continue };
        let v = v.trim_start_matches('(').trim_end_matches(')').trim_end_matches('u');
        let parsed = match v.strip_prefix("0x") {
            Some(hex) => i64::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        };
        if let Some(x) = parsed {
            m.insert(name.to_string(), x);
        }
    }
    m
}

/// The kernel ids, element types, flags and status codes in the header are the Rust ones.
#[test]
fn header_constants_match_rust() {
    use snic_compute::{dtype, gemm, ids, reduce, status};
    use snic_hostif::abi;
    let d = defines();
    let want: &[(&str, i64)] = &[
        ("SNIC_MAX_KERNELS", abi::MAX_KERNELS.into()),
        ("SNIC_KERNEL_COPY", ids::COPY.into()),
        ("SNIC_KERNEL_REDUCE", ids::REDUCE.into()),
        ("SNIC_KERNEL_GEMM", ids::GEMM.into()),
        ("SNIC_KERNEL_VADD", ids::VADD.into()),
        ("SNIC_KERNEL_VSCALE", ids::VSCALE.into()),
        ("SNIC_KERNEL_GATHER", ids::GATHER.into()),
        ("SNIC_KERNEL_CRC32C", ids::CRC32C.into()),
        ("SNIC_KERNEL_LZ4_COMPRESS", ids::LZ4_COMPRESS.into()),
        ("SNIC_KERNEL_LZ4_DECOMPRESS", ids::LZ4_DECOMPRESS.into()),
        ("SNIC_KERNEL_EBPF", ids::EBPF.into()),
        ("SNIC_KERNEL_MAX_ADDRS", snic_compute::MAX_ADDRS as i64),
        ("SNIC_KERNEL_MAX_SCALARS", snic_compute::MAX_SCALARS as i64),
        ("SNIC_KERNEL_USER_REGS", abi::USER_REGS as i64),
        ("SNIC_DTYPE_I8", dtype::I8 as i64),
        ("SNIC_DTYPE_F32", dtype::F32 as i64),
        ("SNIC_DTYPE_I32", dtype::I32 as i64),
        ("SNIC_DTYPE_U32", dtype::U32 as i64),
        ("SNIC_DTYPE_I64", dtype::I64 as i64),
        ("SNIC_DTYPE_U64", dtype::U64 as i64),
        ("SNIC_DTYPE_F64", dtype::F64 as i64),
        ("SNIC_GEMM_A_COL_MAJOR", gemm::A_COL_MAJOR as i64),
        ("SNIC_GEMM_B_COL_MAJOR", gemm::B_COL_MAJOR as i64),
        ("SNIC_GEMM_C_COL_MAJOR", gemm::C_COL_MAJOR as i64),
        ("SNIC_GEMM_ACCUMULATE", gemm::ACCUMULATE as i64),
        ("SNIC_REDUCE_SUM", reduce::SUM as i64),
        ("SNIC_REDUCE_MIN", reduce::MIN as i64),
        ("SNIC_REDUCE_MAX", reduce::MAX as i64),
        ("SNIC_KSTATUS_OK", status::OK.into()),
        ("SNIC_KSTATUS_UNKNOWN_KERNEL", status::UNKNOWN_KERNEL.into()),
        ("SNIC_KSTATUS_BAD_ADDRESS", status::BAD_ADDRESS.into()),
        ("SNIC_KSTATUS_BAD_LENGTH", status::BAD_LENGTH.into()),
        ("SNIC_KSTATUS_BAD_ARGS", status::BAD_ARGS.into()),
        ("SNIC_KSTATUS_OVERLAP", status::OVERLAP.into()),
        ("SNIC_KSTATUS_CORRUPT_INPUT", status::CORRUPT_INPUT.into()),
        ("SNIC_KSTATUS_NO_SPACE", status::NO_SPACE.into()),
        ("SNIC_REG_KERNELS", abi::KERNELS as i64),
        ("SNIC_REG_ID", abi::ID as i64),
        ("SNIC_REG_VERSION", abi::VERSION as i64),
        ("SNIC_ID_VALUE", abi::ID_VALUE.into()),
        ("SNIC_VERSION_VALUE", abi::VERSION_VALUE.into()),
        ("SNIC_WC_OP_CHAIN", snic_hostif::proto::WC_CHAIN.into()),
        ("SNIC_CHAIN_MAX_READS", snic_nic::offload::MAX_READS as i64),
    ];
    for &(name, v) in want {
        assert_eq!(d.get(name), Some(&v), "{name} in snic.h");
    }
    // Every kernel, dtype and status constant of the header is checked above.
    for name in d.keys() {
        let family = ["SNIC_KERNEL_", "SNIC_DTYPE_", "SNIC_GEMM_", "SNIC_KSTATUS_", "SNIC_REDUCE_"];
        if family.iter().any(|f| name.starts_with(f)) {
            assert!(want.iter().any(|(n, _)| n == name), "{name} is not checked against Rust");
        }
    }
}

/// The C structs have the layout the header gives them.
#[test]
fn kernel_struct_layouts() {
    use snic_host::ffi::{SnicKernelArg, SnicKernelCmd, SnicKernelCounters, SnicKernelStatus};
    use std::mem::{offset_of, size_of};
    assert_eq!(size_of::<SnicKernelArg>(), 16);
    assert_eq!(size_of::<SnicKernelCmd>(), 16 + 8 * 16 + 8 * 8);
    assert_eq!(offset_of!(SnicKernelCmd, n_addrs), 8);
    assert_eq!(offset_of!(SnicKernelCmd, addrs), 16);
    assert_eq!(offset_of!(SnicKernelCmd, scalars), 144);
    assert_eq!(size_of::<SnicKernelStatus>(), 24);
    assert_eq!(offset_of!(SnicKernelStatus, busy_ns), 16);
    assert_eq!(size_of::<SnicKernelCounters>(), 24);
}

/// The chained command's C structs have the layout the header gives them.
#[test]
fn chain_struct_layouts() {
    use snic_host::ffi::{SNIC_CHAIN_MAX_READS, SnicChainRead, SnicChainWrite};
    use std::mem::{offset_of, size_of};
    assert_eq!(size_of::<SnicChainRead>(), 32);
    assert_eq!(offset_of!(SnicChainRead, rkey), 16);
    assert_eq!(offset_of!(SnicChainRead, len), 24);
    assert_eq!(size_of::<SnicChainWrite>(), 32);
    assert_eq!(offset_of!(SnicChainWrite, lkey), 16);
    assert_eq!(offset_of!(SnicChainWrite, rkey), 24);
    assert_eq!(SNIC_CHAIN_MAX_READS as usize, snic_nic::offload::MAX_READS);
}
