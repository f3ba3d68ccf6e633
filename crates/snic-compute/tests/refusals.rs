//! Bad commands: each gets its status code and changes no byte of memory (every region is
//! filled with random bytes first and compared whole afterwards).

use snic_compute::gather::{SglEntry, encode_sgl};
use snic_compute::testing::{HOST_A, HOST_B, OWNER_A, OWNER_B, Space};
use snic_compute::{KernelCmd, dtype, gemm, ids, reduce, status};

const SIZE: usize = 1 << 16;

fn gemm_cmd(a: (u64, u64), b: (u64, u64), c: (u64, u64), s: [u64; 5]) -> KernelCmd {
    let mut cmd = KernelCmd::new(ids::GEMM, 42).addr(a.0, a.1).addr(b.0, b.1).addr(c.0, c.1);
    for v in s {
        cmd = cmd.scalar(v);
    }
    cmd
}

/// Run every `(what, owner, command, status)` on a scribbled space and check the status and
/// that memory is unchanged.
fn refuse_all(s: &mut Space, cases: Vec<(&str, u32, KernelCmd, u32)>) {
    for (what, owner, cmd, want) in cases {
        let before = s.snapshot();
        let st = s.run(owner, &cmd);
        assert_eq!(
            (status::name(st.status), st.result, st.workload),
            (status::name(want), 0, cmd.workload),
            "{what}"
        );
        assert!(s.snapshot() == before, "{what}: memory changed");
    }
}

#[test]
fn unknown_kernels_and_bad_counts() {
    let mut s = Space::new(SIZE, SIZE);
    s.scribble(1);
    let mut cases = vec![];
    for id in [9, 13, 15, 16, u32::MAX] {
        cases.push((
            "unknown id",
            OWNER_A,
            KernelCmd::new(id, 1).addr(HOST_A, 4),
            status::UNKNOWN_KERNEL,
        ));
    }
    let mut raw = KernelCmd::new(ids::CRC32C, 1).addr(HOST_A, 4).encode();
    raw[9] = 200;
    cases.push(("scalar count past 8", OWNER_A, KernelCmd::decode(&raw), status::BAD_ARGS));
    for id in [ids::REDUCE, ids::GEMM, ids::VADD, ids::VSCALE, ids::GATHER, ids::LZ4_COMPRESS] {
        cases.push(("no arguments", OWNER_A, KernelCmd::new(id, 1), status::BAD_ARGS));
    }
    refuse_all(&mut s, cases);
}

#[test]
fn gemm_refusals() {
    let mut s = Space::new(SIZE, SIZE);
    s.scribble(2);
    let d = s.dev_at(0);
    // 8x8x8 i8: A and B 64 bytes, C 256.
    let (a, b, c) = ((HOST_A, 64), (d, 64), (HOST_A + 4096, 256));
    let ok = [8, 8, 8, dtype::I8, 0];
    let with = |i: usize, v: u64| {
        let mut s = ok;
        s[i] = v;
        s
    };
    let mut cases = vec![
        ("A of another client", OWNER_A, gemm_cmd((HOST_B, 64), b, c, ok), status::BAD_ADDRESS),
        ("C of another client", OWNER_A, gemm_cmd(a, b, (HOST_B, 256), ok), status::BAD_ADDRESS),
        ("B unmapped", OWNER_A, gemm_cmd(a, (0x1000, 64), c, ok), status::BAD_ADDRESS),
        (
            "C past its region",
            OWNER_A,
            gemm_cmd(a, b, (HOST_A + SIZE as u64 - 100, 256), ok),
            status::BAD_ADDRESS,
        ),
        ("A overflowing", OWNER_A, gemm_cmd((HOST_A, u64::MAX), b, c, ok), status::BAD_ADDRESS),
        ("C at the top", OWNER_A, gemm_cmd(a, b, (u64::MAX - 3, 256), ok), status::BAD_ADDRESS),
        ("C over A", OWNER_A, gemm_cmd(a, b, (HOST_A + 63, 256), ok), status::OVERLAP),
        ("C over B", OWNER_A, gemm_cmd(a, b, (d + 63, 256), ok), status::OVERLAP),
        ("A one byte short", OWNER_A, gemm_cmd((HOST_A, 63), b, c, ok), status::BAD_LENGTH),
        ("B one byte short", OWNER_A, gemm_cmd(a, (d, 63), c, ok), status::BAD_LENGTH),
        ("C one byte short", OWNER_A, gemm_cmd(a, b, (HOST_A + 4096, 255), ok), status::BAD_LENGTH),
        ("f32 needs 4x", OWNER_A, gemm_cmd(a, b, c, with(3, dtype::F32)), status::BAD_LENGTH),
        ("dtype i32", OWNER_A, gemm_cmd(a, b, c, with(3, dtype::I32)), status::BAD_ARGS),
        ("dtype 99", OWNER_A, gemm_cmd(a, b, c, with(3, 99)), status::BAD_ARGS),
        ("unknown flag", OWNER_A, gemm_cmd(a, b, c, with(4, gemm::ALL + 1)), status::BAD_ARGS),
        ("M zero", OWNER_A, gemm_cmd(a, b, c, with(0, 0)), status::BAD_ARGS),
        ("N too large", OWNER_A, gemm_cmd(a, b, c, with(1, 65537)), status::BAD_ARGS),
        ("K huge", OWNER_A, gemm_cmd(a, b, c, with(2, u64::MAX)), status::BAD_ARGS),
        (
            "one scalar short",
            OWNER_A,
            KernelCmd::new(ids::GEMM, 42)
                .addr(a.0, a.1)
                .addr(b.0, b.1)
                .addr(c.0, c.1)
                .scalar(8)
                .scalar(8)
                .scalar(8),
            status::BAD_ARGS,
        ),
        (
            "two addresses",
            OWNER_A,
            KernelCmd::new(ids::GEMM, 42)
                .addr(a.0, a.1)
                .addr(b.0, b.1)
                .scalar(8)
                .scalar(8)
                .scalar(8)
                .scalar(0)
                .scalar(0),
            status::BAD_ARGS,
        ),
    ];
    // Lengths that would fit if the dimensions were smaller.
    cases.push(("K grown", OWNER_A, gemm_cmd(a, b, c, with(2, 9)), status::BAD_LENGTH));
    refuse_all(&mut s, cases);
    // The same command with good arguments runs, for both clients' own memory.
    assert!(s.run(OWNER_A, &gemm_cmd(a, b, c, ok)).is_ok());
    let st = s.run(OWNER_B, &gemm_cmd((HOST_B, 64), b, (HOST_B + 4096, 256), ok));
    assert_eq!(st.result, 1024);
}

#[test]
fn vector_refusals() {
    let mut s = Space::new(SIZE, SIZE);
    s.scribble(3);
    let d = s.dev_at(0);
    let vadd = |x: (u64, u64), y: (u64, u64), o: (u64, u64), dt| {
        KernelCmd::new(ids::VADD, 7).addr(x.0, x.1).addr(y.0, y.1).addr(o.0, o.1).scalar(dt)
    };
    let vscale = |x: u64, o: u64, n: u64, dt| {
        KernelCmd::new(ids::VSCALE, 8).addr(x, n).addr(o, n).scalar(dt).scalar(2).scalar(1)
    };
    let red =
        |x: u64, n: u64, op, dt| KernelCmd::new(ids::REDUCE, 9).addr(x, n).scalar(op).scalar(dt);
    let (x, y, o) = ((HOST_A, 64), (d, 64), (d + 1024, 64));
    let cases = vec![
        ("vadd i8", OWNER_A, vadd(x, y, o, dtype::I8), status::BAD_ARGS),
        ("vadd dtype 7", OWNER_A, vadd(x, y, o, 7), status::BAD_ARGS),
        ("vadd ragged output", OWNER_A, vadd(x, y, (d + 1024, 63), dtype::F32), status::BAD_LENGTH),
        ("vadd empty output", OWNER_A, vadd(x, y, (d + 1024, 0), dtype::F32), status::BAD_LENGTH),
        ("vadd short y", OWNER_A, vadd(x, (d, 60), o, dtype::U64), status::BAD_LENGTH),
        ("vadd out over y", OWNER_A, vadd(x, y, (d + 32, 64), dtype::I32), status::OVERLAP),
        ("vadd out over x", OWNER_A, vadd(x, y, x, dtype::I32), status::OVERLAP),
        ("vadd y of client 2", OWNER_A, vadd(x, (HOST_B, 64), o, dtype::I32), status::BAD_ADDRESS),
        (
            "vadd out of client 2",
            OWNER_A,
            vadd(x, y, (HOST_B, 64), dtype::I32),
            status::BAD_ADDRESS,
        ),
        ("vscale dtype 99", OWNER_A, vscale(HOST_A, d, 64, 99), status::BAD_ARGS),
        ("vscale in place", OWNER_A, vscale(d, d, 64, dtype::F64), status::OVERLAP),
        ("vscale unmapped", OWNER_A, vscale(0x10, d, 64, dtype::F64), status::BAD_ADDRESS),
        ("reduce op 3", OWNER_A, red(HOST_A, 64, 3, dtype::I32), status::BAD_ARGS),
        ("reduce empty", OWNER_A, red(HOST_A, 0, reduce::SUM, dtype::I32), status::BAD_LENGTH),
        ("reduce ragged", OWNER_A, red(HOST_A, 6, reduce::MAX, dtype::I32), status::BAD_LENGTH),
        ("reduce i8", OWNER_A, red(HOST_A, 8, reduce::SUM, dtype::I8), status::BAD_ARGS),
        ("reduce client 2", OWNER_A, red(HOST_B, 8, reduce::SUM, dtype::I64), status::BAD_ADDRESS),
    ];
    refuse_all(&mut s, cases);
}

#[test]
fn gather_crc_lz4_refusals() {
    let mut s = Space::new(SIZE, SIZE);
    s.scribble(4);
    let d = s.dev_at(0);
    let list = HOST_A + 8192;
    let dst = d + 4096;
    // A valid list whose third block is client 2's memory: nothing may move.
    let mut entries = vec![
        SglEntry { addr: HOST_A, len: 100 },
        SglEntry { addr: d, len: 50 },
        SglEntry { addr: HOST_B, len: 8 },
    ];
    s.put(list, &encode_sgl(&entries));
    let gather = |n: u64, list_len: u64, dst_len: u64| {
        KernelCmd::new(ids::GATHER, 5).addr(list, list_len).addr(dst, dst_len).scalar(n)
    };
    let mut cases = vec![
        ("block of client 2", OWNER_A, gather(3, 48, 4096), status::BAD_ADDRESS),
        ("no entries", OWNER_A, gather(0, 48, 4096), status::BAD_ARGS),
        ("too many entries", OWNER_A, gather(4097, 48, 4096), status::BAD_ARGS),
        ("list shorter than s0", OWNER_A, gather(3, 47, 4096), status::BAD_LENGTH),
        (
            "dst over the list",
            OWNER_A,
            KernelCmd::new(ids::GATHER, 5).addr(list, 48).addr(list + 40, 64).scalar(2),
            status::OVERLAP,
        ),
        ("dst too small", OWNER_A, gather(2, 48, 149), status::NO_SPACE),
    ];
    refuse_all(&mut s, std::mem::take(&mut cases));
    // A block that overlaps the destination; an unmapped one; an overflowing one.
    for (bad, want) in [
        (SglEntry { addr: dst + 10, len: 1 }, status::OVERLAP),
        (SglEntry { addr: 0x2000, len: 1 }, status::BAD_ADDRESS),
        (SglEntry { addr: HOST_A + 10, len: u32::MAX }, status::BAD_ADDRESS),
    ] {
        entries[2] = bad;
        s.put(list, &encode_sgl(&entries));
        cases.push(("bad block", OWNER_A, gather(3, 48, 4096), want));
        refuse_all(&mut s, std::mem::take(&mut cases));
    }
    // The list itself is fine with two entries.
    assert_eq!(s.run(OWNER_A, &gather(2, 48, 4096)).result, 150);

    let crc = |init| KernelCmd::new(ids::CRC32C, 6).addr(HOST_A, 64).scalar(init);
    let garbage = HOST_A + 30000;
    s.put(garbage, &[0xF0, 0xFF, 0xFF, 0xFF, 0x01, 0x02]);
    let lz = |id, src: (u64, u64), dst: (u64, u64)| {
        KernelCmd::new(id, 9).addr(src.0, src.1).addr(dst.0, dst.1)
    };
    // A real block of 4096 bytes of one value.
    let plain = d + 20000;
    s.put(plain, &[7u8; 4096]);
    let st = s.run(OWNER_A, &lz(ids::LZ4_COMPRESS, (plain, 4096), (d + 30000, 4200)));
    assert!(st.is_ok());
    let block = (d + 30000, st.result);
    refuse_all(
        &mut s,
        vec![
            ("crc init past 32 bits", OWNER_A, crc(1 << 32), status::BAD_ARGS),
            (
                "crc client 2",
                OWNER_A,
                KernelCmd::new(ids::CRC32C, 6).addr(HOST_B, 4),
                status::BAD_ADDRESS,
            ),
            ("crc two scalars", OWNER_A, crc(0).scalar(0), status::BAD_ARGS),
            (
                "lz4 corrupt",
                OWNER_A,
                lz(ids::LZ4_DECOMPRESS, (garbage, 6), (d, 4096)),
                status::CORRUPT_INPUT,
            ),
            (
                "lz4 empty block",
                OWNER_A,
                lz(ids::LZ4_DECOMPRESS, (garbage, 0), (d, 4096)),
                status::CORRUPT_INPUT,
            ),
            (
                "lz4 truncated",
                OWNER_A,
                lz(ids::LZ4_DECOMPRESS, (block.0, block.1 - 1), (d, 4096)),
                status::CORRUPT_INPUT,
            ),
            ("lz4 dst short", OWNER_A, lz(ids::LZ4_DECOMPRESS, block, (d, 4095)), status::NO_SPACE),
            (
                "lz4 dst over src",
                OWNER_A,
                lz(ids::LZ4_DECOMPRESS, block, (block.0 + 1, 4096)),
                status::OVERLAP,
            ),
            (
                "lz4 compress short",
                OWNER_A,
                lz(ids::LZ4_COMPRESS, (plain, 4096), (d, 10)),
                status::NO_SPACE,
            ),
            (
                "lz4 compress client 2",
                OWNER_A,
                lz(ids::LZ4_COMPRESS, (plain, 4096), (HOST_B, 4096)),
                status::BAD_ADDRESS,
            ),
        ],
    );
    assert_eq!(s.run(OWNER_A, &lz(ids::LZ4_DECOMPRESS, block, (d, 4096))).result, 4096);
    assert_eq!(s.get(d, 4096), vec![7u8; 4096]);
}
