//! The helper functions programs call (`call imm`), one implementation for both engines:
//! the interpreter calls [`dispatch`] directly, the JIT through its own `extern "C"` entry
//! around it (`jit::jit_helper`).
//!
//! Every pointer a program passes is checked against the run's regions ([`crate::raw::Memory`])
//! and every map pointer must be one of the program's own maps; a bad argument sets the run's
//! fault (the run ends, XDP reports `XDP_ABORTED`) and the helper returns 0. Results follow the
//! kernel's helpers (negative errno on failure), as `BPF_PROG_TEST_RUN` shows them, so that the
//! differential test against the kernel compares like with like.
//!
//! Supported: map lookup/update/delete (1, 2, 3), `ktime_get_ns` (5) and `ktime_get_boot_ns`
//! (125) from the pipeline's `now`, `trace_printk` (6), `get_prandom_u32` (7),
//! `get_smp_processor_id` (8, the worker index), `redirect` (23), `csum_diff` (28),
//! `xdp_adjust_head` (44), `redirect_map` (51, devmaps), `xdp_adjust_meta` (54),
//! `xdp_adjust_tail` (65), ring buffer output/reserve/submit/discard (130-133), and the
//! NIC-core argument copies ([`crate::core::HELPER_ARG_READ`], [`crate::core::HELPER_ARG_WRITE`]).

use crate::object::MapKind;
use crate::vm::{CtxKind, Env, Fault, XdpCtx};

/// `bpf_map_lookup_elem`.
pub const MAP_LOOKUP_ELEM: u32 = 1;
/// `bpf_map_update_elem`.
pub const MAP_UPDATE_ELEM: u32 = 2;
/// `bpf_map_delete_elem`.
pub const MAP_DELETE_ELEM: u32 = 3;
/// `bpf_ktime_get_ns`.
pub const KTIME_GET_NS: u32 = 5;
/// `bpf_trace_printk`.
pub const TRACE_PRINTK: u32 = 6;
/// `bpf_get_prandom_u32`.
pub const GET_PRANDOM_U32: u32 = 7;
/// `bpf_get_smp_processor_id`.
pub const GET_SMP_PROCESSOR_ID: u32 = 8;
/// `bpf_redirect`.
pub const REDIRECT: u32 = 23;
/// `bpf_csum_diff`.
pub const CSUM_DIFF: u32 = 28;
/// `bpf_xdp_adjust_head`.
pub const XDP_ADJUST_HEAD: u32 = 44;
/// `bpf_redirect_map`.
pub const REDIRECT_MAP: u32 = 51;
/// `bpf_xdp_adjust_meta`.
pub const XDP_ADJUST_META: u32 = 54;
/// `bpf_xdp_adjust_tail`.
pub const XDP_ADJUST_TAIL: u32 = 65;
/// `bpf_ktime_get_boot_ns`.
pub const KTIME_GET_BOOT_NS: u32 = 125;
/// `bpf_ringbuf_output`.
pub const RINGBUF_OUTPUT: u32 = 130;
/// `bpf_ringbuf_reserve`.
pub const RINGBUF_RESERVE: u32 = 131;
/// `bpf_ringbuf_submit`.
pub const RINGBUF_SUBMIT: u32 = 132;
/// `bpf_ringbuf_discard`.
pub const RINGBUF_DISCARD: u32 = 133;

/// Bytes the kernel keeps at the start of an XDP buffer for its `struct xdp_frame`; data and
/// metadata can never move into them (`bpf_xdp_adjust_head`/`_meta`).
pub const XDP_FRAME_RESERVE: u64 = 40;
/// Ethernet header length: the frame never shrinks below it.
pub const ETH_HLEN: u64 = 14;
/// Most bytes of XDP metadata (`data_meta..data`, a multiple of 4): the kernel's bound is the
/// largest `u8` (`skb_shared_info.meta_len`); in practice the headroom bounds it first
/// (checked against Linux 6.18's `BPF_PROG_TEST_RUN`: 216 bytes accepted, 220 refused with
/// 256 bytes of headroom).
pub const XDP_META_MAX: u64 = 255;

/// The redirect target `bpf_redirect_map` with `BPF_F_BROADCAST` sets: snic's flood port
/// (`PortId::FLOOD`: every port but the ingress one).
pub const REDIRECT_FLOOD: u32 = 0xffff;

const EINVAL: i64 = -22;
const EACCES: i64 = -13;

/// `XDP_ABORTED`, `XDP_REDIRECT` as the redirect helpers return them.
const XDP_ABORTED: u64 = 0;
const XDP_REDIRECT: u64 = 4;

fn neg(e: i64) -> u64 {
    e as u64
}

fn fault(env: &mut Env<'_>, id: u32, reason: &'static str) -> u64 {
    if env.fault.is_none() {
        env.fault = Some(Fault::Helper { id, reason });
    }
    0
}

/// Calls helper `id` with `r1`..`r5` = `args` and returns `r0`. A helper that cannot run
/// (unknown id, bad pointer, not one of the program's maps) sets the run's fault and returns 0.
pub fn dispatch(env: &mut Env<'_>, id: u32, args: [u64; 5]) -> u64 {
    let [a1, a2, a3, a4, a5] = args;
    let xdp = matches!(env.ctx, CtxKind::Xdp(_));
    match id {
        MAP_LOOKUP_ELEM => map_lookup(env, a1, a2),
        MAP_UPDATE_ELEM => map_update(env, a1, a2, a3, a4),
        MAP_DELETE_ELEM => map_delete(env, a1, a2),
        KTIME_GET_NS | KTIME_GET_BOOT_NS => env.now_ns,
        TRACE_PRINTK => trace_printk(env, a1, a2, [a3, a4, a5]),
        GET_PRANDOM_U32 => u64::from(next_random(&mut env.prng)),
        GET_SMP_PROCESSOR_ID => env.worker as u64,
        CSUM_DIFF => csum_diff(env, a1, a2, a3, a4, a5),
        RINGBUF_OUTPUT => ringbuf_output(env, a1, a2, a3),
        RINGBUF_RESERVE => ringbuf_reserve(env, a1, a2),
        RINGBUF_SUBMIT | RINGBUF_DISCARD => ringbuf_commit(env, id, a1, id == RINGBUF_DISCARD),
        REDIRECT if xdp => {
            if a2 != 0 {
                return XDP_ABORTED;
            }
            env.redirect = Some(a1 as u32);
            XDP_REDIRECT
        }
        REDIRECT_MAP if xdp => redirect_map(env, a1, a2, a3),
        XDP_ADJUST_HEAD if xdp => adjust_head(env, a1, a2 as i32),
        XDP_ADJUST_META if xdp => adjust_meta(env, a1, a2 as i32),
        XDP_ADJUST_TAIL if xdp => adjust_tail(env, a1, a2 as i32),
        crate::core::HELPER_ARG_READ | crate::core::HELPER_ARG_WRITE
            if matches!(env.ctx, CtxKind::Core(_)) =>
        {
            crate::core::arg_copy(env, id, a1, a2, a3, a4)
        }
        _ => {
            env.fault.get_or_insert(Fault::UnknownHelper { id });
            0
        }
    }
}

fn map_lookup(env: &mut Env<'_>, map: u64, key: u64) -> u64 {
    let Some(m) = env.map_at(map) else { return fault(env, 1, "not a map") };
    let ks = u64::from(m.spec().key_size);
    match env.mem.with_copy(key, ks, |k| m.lookup(k, env.worker)) {
        Some(v) => v.unwrap_or(0),
        None => fault(env, 1, "key outside the program's memory"),
    }
}

fn map_update(env: &mut Env<'_>, map: u64, key: u64, value: u64, flags: u64) -> u64 {
    let Some(m) = env.map_at(map) else { return fault(env, 2, "not a map") };
    let (ks, vs) = (u64::from(m.spec().key_size), u64::from(m.spec().value_size));
    let worker = env.worker;
    let r = env
        .mem
        .with_copy(key, ks, |k| env.mem.with_copy(value, vs, |v| m.update(k, v, flags, worker)));
    match r.flatten() {
        Some(Ok(())) => 0,
        Some(Err(e)) => neg(e.errno()),
        None => fault(env, 2, "key or value outside the program's memory"),
    }
}

fn map_delete(env: &mut Env<'_>, map: u64, key: u64) -> u64 {
    let Some(m) = env.map_at(map) else { return fault(env, 3, "not a map") };
    let ks = u64::from(m.spec().key_size);
    match env.mem.with_copy(key, ks, |k| m.delete(k)) {
        Some(Ok(())) => 0,
        Some(Err(e)) => neg(e.errno()),
        None => fault(env, 3, "key outside the program's memory"),
    }
}

/// xorshift64*: fast, good enough for sampling decisions (not cryptographic, as in the kernel).
pub(crate) fn next_random(state: &mut u64) -> u32 {
    let mut x = *state;
    if x == 0 {
        x = 0x9e37_79b9_7f4a_7c15;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
}

fn redirect_map(env: &mut Env<'_>, map: u64, key: u64, flags: u64) -> u64 {
    /// `XDP_ABORTED | XDP_DROP | XDP_PASS | XDP_TX`: the action on a failed lookup.
    const ACTION_MASK: u64 = 3;
    let Some(m) = env.map_at(map) else { return fault(env, 51, "not a map") };
    if !matches!(m.kind(), MapKind::DevMap | MapKind::DevMapHash) {
        return fault(env, 51, "not a devmap");
    }
    /// `BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS`.
    const BROADCAST: u64 = 1 << 3;
    const EXCLUDE_INGRESS: u64 = 1 << 4;
    if flags & !(ACTION_MASK | BROADCAST | EXCLUDE_INGRESS) != 0 {
        return XDP_ABORTED;
    }
    if flags & BROADCAST != 0 {
        // snic floods (every port but the ingress one) rather than walking the devmap.
        env.redirect = Some(REDIRECT_FLOOD);
        return XDP_REDIRECT;
    }
    let key = (key as u32).to_le_bytes();
    let ks = (m.spec().key_size as usize).min(4);
    let Some(addr) = m.lookup(&key[..ks], env.worker) else {
        // As the kernel: a failed lookup clears any earlier target, so the last call decides
        // (an `XDP_REDIRECT` returned anyway then has nowhere to go and is aborted).
        env.redirect = None;
        return flags & ACTION_MASK;
    };
    let Some(port) = env.mem.load(addr, 4) else {
        return fault(env, 51, "devmap value unreadable");
    };
    env.redirect = Some(port as u32);
    XDP_REDIRECT
}

/// Current `data`, `data_end`, `data_meta` of the XDP context.
fn xdp_window(env: &Env<'_>, ctx: u64) -> Option<(u64, u64, u64)> {
    if env.ctx != CtxKind::Xdp(ctx) {
        return None;
    }
    let data = env.mem.load(ctx + XdpCtx::DATA, 8)?;
    let end = env.mem.load(ctx + XdpCtx::DATA_END, 8)?;
    let meta = env.mem.load(ctx + XdpCtx::DATA_META, 8)?;
    Some((data, end, meta))
}

fn set_xdp_window(env: &mut Env<'_>, data: u64, end: u64, meta: u64) -> Option<()> {
    env.mem.write_ctx_u64(XdpCtx::DATA, data)?;
    env.mem.write_ctx_u64(XdpCtx::DATA_END, end)?;
    env.mem.write_ctx_u64(XdpCtx::DATA_META, meta)?;
    env.mem.set_packet(meta, end).then_some(())
}

fn adjust_head(env: &mut Env<'_>, ctx: u64, offset: i32) -> u64 {
    let Some((data, end, meta)) = xdp_window(env, ctx) else {
        return fault(env, XDP_ADJUST_HEAD, "not the XDP context");
    };
    let frame_end = env.mem.packet_buf().start() + XDP_FRAME_RESERVE;
    // The helpers keep `data_meta <= data <= data_end`; a broken invariant is a fault, not a
    // panic.
    let Some(metalen) = data.checked_sub(meta) else {
        return fault(env, XDP_ADJUST_HEAD, "inconsistent context");
    };
    let new_data = data.wrapping_add(i64::from(offset) as u64);
    let new_data_i = data as i128 + i128::from(offset);
    if new_data_i < i128::from(frame_end + metalen)
        || new_data_i > i128::from(end) - ETH_HLEN as i128
    {
        return neg(EINVAL);
    }
    let new_meta = meta.wrapping_add(i64::from(offset) as u64);
    if metalen > 0 && env.mem.buf_move(new_meta, meta, metalen).is_none() {
        return fault(env, XDP_ADJUST_HEAD, "metadata outside the buffer");
    }
    match set_xdp_window(env, new_data, end, new_meta) {
        Some(()) => 0,
        None => fault(env, XDP_ADJUST_HEAD, "window outside the buffer"),
    }
}

fn adjust_meta(env: &mut Env<'_>, ctx: u64, offset: i32) -> u64 {
    let Some((data, end, meta)) = xdp_window(env, ctx) else {
        return fault(env, XDP_ADJUST_META, "not the XDP context");
    };
    let frame_end = env.mem.packet_buf().start() + XDP_FRAME_RESERVE;
    let new_meta_i = meta as i128 + i128::from(offset);
    if new_meta_i < i128::from(frame_end) || new_meta_i > i128::from(data) {
        return neg(EINVAL);
    }
    let new_meta = new_meta_i as u64;
    let metalen = data - new_meta;
    if metalen & 3 != 0 || metalen > XDP_META_MAX {
        return neg(EACCES);
    }
    match set_xdp_window(env, data, end, new_meta) {
        Some(()) => 0,
        None => fault(env, XDP_ADJUST_META, "window outside the buffer"),
    }
}

fn adjust_tail(env: &mut Env<'_>, ctx: u64, offset: i32) -> u64 {
    let Some((data, end, meta)) = xdp_window(env, ctx) else {
        return fault(env, XDP_ADJUST_TAIL, "not the XDP context");
    };
    let hard_end = env.mem.packet_buf().end();
    let new_end_i = end as i128 + i128::from(offset);
    if new_end_i > i128::from(hard_end) || new_end_i < i128::from(data + ETH_HLEN) {
        return neg(EINVAL);
    }
    let new_end = new_end_i as u64;
    if new_end > end && env.mem.buf_zero(end, new_end - end).is_none() {
        return fault(env, XDP_ADJUST_TAIL, "tail outside the buffer");
    }
    match set_xdp_window(env, data, new_end, meta) {
        Some(()) => 0,
        None => fault(env, XDP_ADJUST_TAIL, "window outside the buffer"),
    }
}

/// One's complement sum of little-endian 32-bit words with end-around carry, folded to 32 bits
/// (the value the kernel's `csum_partial` computes on x86-64 for whole words).
pub fn csum_partial32(words: impl IntoIterator<Item = u32>, seed: u32) -> u32 {
    let mut s = u64::from(seed);
    for w in words {
        s += u64::from(w);
    }
    while s >> 32 != 0 {
        s = (s & 0xffff_ffff) + (s >> 32);
    }
    s as u32
}

/// Folds a 32-bit partial sum to 16 bits with end-around carry (not complemented), as
/// `bpf_csum_diff` returns it since Linux 6.13 (checked against this machine's kernel).
pub fn csum_from32to16(s: u32) -> u16 {
    let s = s.wrapping_add(s.rotate_right(16));
    (s >> 16) as u16
}

fn csum_diff(
    env: &mut Env<'_>,
    from: u64,
    from_size: u64,
    to: u64,
    to_size: u64,
    seed: u64,
) -> u64 {
    let (from_size, to_size) = (u64::from(from_size as u32), u64::from(to_size as u32));
    let sum = |env: &Env<'_>, addr: u64, size: u64, seed: u32| -> Option<u32> {
        if size == 0 {
            return Some(seed);
        }
        env.mem.with_bytes(addr, size, |b| csum_partial(b, seed))
    };
    let seed = seed as u32;
    let r = match (from_size, to_size) {
        (0, _) => sum(env, to, to_size, seed),
        (_, 0) => sum(env, from, from_size, !seed).map(|s| !s),
        _ => sum(env, to, to_size, seed)
            .zip(sum(env, from, from_size, 0))
            .map(|(t, f)| csum_partial32([t, !f], 0)),
    };
    match r {
        Some(v) => u64::from(csum_from32to16(v)),
        None => fault(env, CSUM_DIFF, "buffer outside the program's memory"),
    }
}

/// The kernel's `csum_partial` (x86-64) of `bytes`: their little-endian 32-bit words (the last
/// one zero-padded) added to `seed` with end-around carry.
pub fn csum_partial(bytes: &[u8], seed: u32) -> u32 {
    let chunks = bytes.chunks(4).map(|c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(w)
    });
    csum_partial32(chunks, seed)
}

fn ringbuf_map<'a>(env: &mut Env<'a>, id: u32, map: u64) -> Option<&'a crate::maps::Map> {
    match env.map_at(map) {
        Some(m) if m.kind() == MapKind::RingBuf => Some(m),
        _ => {
            fault(env, id, "not a ring buffer");
            None
        }
    }
}

fn ringbuf_output(env: &mut Env<'_>, map: u64, data: u64, size: u64) -> u64 {
    let Some(m) = ringbuf_map(env, RINGBUF_OUTPUT, map) else { return 0 };
    match env.mem.with_bytes(data, size, |d| m.ringbuf_output(d)) {
        Some(Ok(())) => 0,
        Some(Err(e)) => neg(e.errno()),
        None => fault(env, RINGBUF_OUTPUT, "data outside the program's memory"),
    }
}

fn ringbuf_reserve(env: &mut Env<'_>, map: u64, size: u64) -> u64 {
    let Some(m) = ringbuf_map(env, RINGBUF_RESERVE, map) else { return 0 };
    if env.reserved.full() {
        return 0;
    }
    match m.ringbuf_reserve(size) {
        Some(addr) => {
            env.reserved.push(addr);
            addr
        }
        None => 0,
    }
}

fn ringbuf_commit(env: &mut Env<'_>, id: u32, addr: u64, discard: bool) -> u64 {
    let maps = env.maps;
    let owner = maps.iter().find(|m| m.ringbuf_owns(addr));
    match owner {
        Some(m) => match m.ringbuf_commit(addr, discard) {
            Ok(()) => {
                env.reserved.remove(addr);
                0
            }
            Err(_) => fault(env, id, "not a reserved ring buffer record"),
        },
        None => fault(env, id, "not a reserved ring buffer record"),
    }
}

/// Most bytes of one `bpf_trace_printk` line, and of one `%s` argument.
const TRACE_MAX: usize = 512;

fn trace_printk(env: &mut Env<'_>, fmt: u64, size: u64, args: [u64; 3]) -> u64 {
    if size == 0 || size > TRACE_MAX as u64 {
        return neg(EINVAL);
    }
    let Some(bytes) = env.mem.with_bytes(fmt, size, <[u8]>::to_vec) else {
        return fault(env, TRACE_PRINTK, "format outside the program's memory");
    };
    let Some(nul) = bytes.iter().position(|&b| b == 0) else { return neg(EINVAL) };
    match format_printk(&bytes[..nul], args, |addr| env.mem.load(addr, 1).map(|b| b as u8)) {
        Some(line) => {
            let n = line.len() as u64;
            let line = line.strip_suffix('\n').unwrap_or(&line).to_string();
            env.trace.push(line);
            n
        }
        None => neg(EINVAL),
    }
}

/// Reads a NUL-terminated string of at most [`TRACE_MAX`] bytes (empty when unreadable, as
/// the kernel prints a string it cannot copy).
fn read_cstr(byte: &mut impl FnMut(u64) -> Option<u8>, addr: u64) -> String {
    let mut out = Vec::new();
    while out.len() < TRACE_MAX {
        match byte(addr.wrapping_add(out.len() as u64)) {
            Some(0) | None => break,
            Some(b) => out.push(b),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads `N` bytes, `None` when any is unreadable.
fn read_n<const N: usize>(byte: &mut impl FnMut(u64) -> Option<u8>, addr: u64) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    for (k, b) in out.iter_mut().enumerate() {
        *b = byte(addr.wrapping_add(k as u64))?;
    }
    Some(out)
}

/// Formats a `bpf_trace_printk` line as the kernel does: `%d %i %u %x %X %c %s %p` with
/// `l`/`ll` size modifiers, `%%`, flags `0 + - space` and a width; `%pI4`/`%pi4` (an IPv4
/// address at the pointer), `%pI6`/`%pi6` (IPv6), `%px`/`%pK`/`%pS`/`%pB` (the pointer in
/// hex); at most three arguments. `byte` reads program memory (`%s`, `%pI4`). `None` for a
/// format the kernel refuses.
pub fn format_printk(
    fmt: &[u8],
    args: [u64; 3],
    mut byte: impl FnMut(u64) -> Option<u8>,
) -> Option<String> {
    let mut out = String::new();
    let mut next = 0usize;
    let mut i = 0;
    while i < fmt.len() {
        let c = fmt[i];
        i += 1;
        if c != b'%' {
            out.push(c as char);
            continue;
        }
        if fmt.get(i) == Some(&b'%') {
            out.push('%');
            i += 1;
            continue;
        }
        let (mut zero, mut left, mut plus, mut space) = (false, false, false, false);
        while let Some(&f) = fmt.get(i) {
            match f {
                b'0' => zero = true,
                b'-' => left = true,
                b'+' => plus = true,
                b' ' => space = true,
                _ => break,
            }
            i += 1;
        }
        let mut width = 0usize;
        while let Some(&d) = fmt.get(i).filter(|d| d.is_ascii_digit()) {
            width = width.saturating_mul(10).saturating_add(usize::from(d - b'0')).min(64);
            i += 1;
        }
        let mut longs = 0;
        while fmt.get(i) == Some(&b'l') && longs < 2 {
            longs += 1;
            i += 1;
        }
        let conv = *fmt.get(i)?;
        i += 1;
        let arg = *args.get(next)?;
        next += 1;
        let wide = longs > 0;
        let body = match conv {
            b'd' | b'i' => {
                let v = if wide { arg as i64 } else { i64::from(arg as i32) };
                let sign = if v < 0 {
                    "-"
                } else if plus {
                    "+"
                } else if space {
                    " "
                } else {
                    ""
                };
                (sign.to_string(), v.unsigned_abs().to_string())
            }
            b'u' => (String::new(), if wide { arg } else { u64::from(arg as u32) }.to_string()),
            b'x' => {
                (String::new(), format!("{:x}", if wide { arg } else { u64::from(arg as u32) }))
            }
            b'X' => {
                (String::new(), format!("{:X}", if wide { arg } else { u64::from(arg as u32) }))
            }
            b'c' if !wide => (String::new(), char::from(arg as u8).to_string()),
            b's' if !wide => (String::new(), read_cstr(&mut byte, arg)),
            b'p' if !wide => match (fmt.get(i), fmt.get(i + 1)) {
                (Some(b'i' | b'I'), Some(b'4')) => {
                    i += 2;
                    let a = read_n::<4>(&mut byte, arg).unwrap_or_default();
                    (String::new(), std::net::Ipv4Addr::from(a).to_string())
                }
                (Some(b'i' | b'I'), Some(b'6')) => {
                    let full = fmt[i] == b'i';
                    i += 2;
                    let a = read_n::<16>(&mut byte, arg).unwrap_or_default();
                    let text = if full {
                        // `%pi6`: eight groups of four hex digits, no colons.
                        a.iter().map(|b| format!("{b:02x}")).collect()
                    } else {
                        a.chunks(2)
                            .map(|g| format!("{:02x}{:02x}", g[0], g[1]))
                            .collect::<Vec<_>>()
                            .join(":")
                    };
                    (String::new(), text)
                }
                (Some(b'x' | b'K' | b'S' | b'B'), _) => {
                    i += 1;
                    (String::new(), format!("{arg:016x}"))
                }
                _ => (String::from("0x"), format!("{arg:x}")),
            },
            _ => return None,
        };
        let (sign, digits) = body;
        let len = sign.len() + digits.chars().count();
        let pad = width.saturating_sub(len);
        let numeric = matches!(conv, b'd' | b'i' | b'u' | b'x' | b'X');
        if left {
            out.push_str(&sign);
            out.push_str(&digits);
            out.extend(std::iter::repeat_n(' ', pad));
        } else if zero && numeric {
            out.push_str(&sign);
            out.extend(std::iter::repeat_n('0', pad));
            out.push_str(&digits);
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&sign);
            out.push_str(&digits);
        }
    }
    Some(out)
}
