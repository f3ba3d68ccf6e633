//! The interpreter of [`crate::ir`]: expressions, statements, parsers and deparsers over one
//! packet's frame. [`crate::v1model`] drives it through the architecture's blocks.

use crate::ir::*;

/// How a block ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// It ran to its end.
    Next,
    /// `exit`: the whole top-level block stops.
    Exit,
    /// `return`: the current action, function or control stops.
    Return,
    /// `break` out of a loop.
    Break,
    /// `continue` a loop.
    Continue,
    /// A parser error (the error's code).
    Reject(u32),
}

/// Read `w` bits (at most 128) at bit offset `off` of `data`, most significant first. The
/// caller checks bounds (it panics past the end).
pub fn get_bits(data: &[u8], off: usize, w: u32) -> u128 {
    if off.is_multiple_of(8) && w.is_multiple_of(8) {
        let start = off / 8;
        let n = (w / 8) as usize;
        let mut v = 0u128;
        for b in &data[start..start + n] {
            v = (v << 8) | u128::from(*b);
        }
        return v;
    }
    let mut v = 0u128;
    let mut bit = off;
    let mut rem = w;
    while rem > 0 {
        let byte = data[bit / 8];
        let in_byte = (bit % 8) as u32;
        let avail = 8 - in_byte;
        let take = avail.min(rem);
        let chunk = (u32::from(byte) >> (avail - take)) & ((1u32 << take) - 1);
        v = if take == 128 { u128::from(chunk) } else { (v << take) | u128::from(chunk) };
        bit += take as usize;
        rem -= take;
    }
    v
}

/// A bit string being built most significant bit first. Bits gather in a 128-bit
/// accumulator and go to `bytes` a whole byte at a time; [`BitWriter::finish`] pads the last
/// byte with zeros and returns the bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct BitWriter {
    bytes: Vec<u8>,
    acc: u128,
    nacc: u32,
}

impl BitWriter {
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.acc = 0;
        self.nacc = 0;
    }

    /// Append the low `w` bits of `v` (`w` up to 128).
    #[inline]
    pub(crate) fn push(&mut self, v: u128, w: u32) {
        if w > 64 {
            self.push64((v >> 64) as u64, w - 64);
            self.push64(v as u64, 64);
        } else {
            self.push64(v as u64, w);
        }
    }

    /// Append the low `w` bits of `v` (`w` up to 64).
    #[inline(always)]
    fn push64(&mut self, v: u64, w: u32) {
        // nacc < 64 here, so nacc + w < 128.
        let v = u128::from(v) & crate::ir::mask(w);
        self.acc = (self.acc << w) | v;
        self.nacc += w;
        if self.nacc >= 64 {
            self.nacc -= 64;
            let word = (self.acc >> self.nacc) as u64;
            self.bytes.extend_from_slice(&word.to_be_bytes());
            self.acc &= crate::ir::mask(self.nacc);
        }
    }

    /// Move the accumulator's whole bytes out.
    fn drain(&mut self) {
        while self.nacc >= 8 {
            self.nacc -= 8;
            self.bytes.push((self.acc >> self.nacc) as u8);
        }
        self.acc &= crate::ir::mask(self.nacc);
    }

    /// Append whole bytes (after padding the bits so far to a byte boundary).
    pub(crate) fn extend_bytes(&mut self, b: &[u8]) {
        self.pad();
        self.bytes.extend_from_slice(b);
    }

    fn pad(&mut self) {
        self.drain();
        if self.nacc > 0 {
            self.bytes.push((self.acc << (8 - self.nacc)) as u8);
            self.acc = 0;
            self.nacc = 0;
        }
    }

    /// The bytes, the last one padded with zeros.
    pub(crate) fn finish(&mut self) -> &[u8] {
        self.pad();
        &self.bytes
    }

    /// The bytes (padded), leaving the writer empty.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        self.pad();
        core::mem::take(&mut self.bytes)
    }

    /// Room for `n` more bytes.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.bytes.reserve(n);
    }
}

/// The result of a binary operator on values of `a`'s width.
pub(crate) fn binop(op: Op, x: u128, y: u128, a: Arith) -> u128 {
    let m = a.mask();
    let w = a.width;
    match op {
        Op::Add => x.wrapping_add(y) & m,
        Op::Sub => x.wrapping_sub(y) & m,
        Op::Mul => x.wrapping_mul(y) & m,
        Op::Div => {
            if y == 0 {
                0
            } else if a.signed {
                (a.extend(x).wrapping_div(a.extend(y)) as u128) & m
            } else {
                x / y
            }
        }
        Op::Mod => {
            if y == 0 {
                0
            } else if a.signed {
                (a.extend(x).wrapping_rem(a.extend(y)) as u128) & m
            } else {
                x % y
            }
        }
        Op::And => x & y,
        Op::Or => x | y,
        Op::Xor => x ^ y,
        Op::Shl => {
            if y >= u128::from(w) {
                0
            } else {
                (x << y) & m
            }
        }
        Op::Shr => {
            if a.signed {
                let sx = a.extend(x);
                let s = if y >= u128::from(w) { 127 } else { y as u32 };
                ((sx >> s.min(127)) as u128) & m
            } else if y >= u128::from(w) {
                0
            } else {
                x >> y
            }
        }
        Op::AddSat => {
            if a.signed {
                let (lo, hi) = signed_bounds(w);
                let r = a.extend(x).saturating_add(a.extend(y)).clamp(lo, hi);
                (r as u128) & m
            } else {
                let r = x.saturating_add(y);
                if r > m { m } else { r }
            }
        }
        Op::SubSat => {
            if a.signed {
                let (lo, hi) = signed_bounds(w);
                let r = a.extend(x).saturating_sub(a.extend(y)).clamp(lo, hi);
                (r as u128) & m
            } else {
                x.saturating_sub(y)
            }
        }
    }
}

fn signed_bounds(w: u32) -> (i128, i128) {
    if w >= 128 { (i128::MIN, i128::MAX) } else { (-(1i128 << (w - 1)), (1i128 << (w - 1)) - 1) }
}

pub(crate) fn compare(c: Cmp, x: u128, y: u128, a: Arith) -> bool {
    let ord = if a.signed { a.extend(x).cmp(&a.extend(y)) } else { x.cmp(&y) };
    match c {
        Cmp::Eq => ord.is_eq(),
        Cmp::Ne => ord.is_ne(),
        Cmp::Lt => ord.is_lt(),
        Cmp::Le => ord.is_le(),
        Cmp::Gt => ord.is_gt(),
        Cmp::Ge => ord.is_ge(),
    }
}

pub(crate) fn cast(v: u128, from: Arith, to: Arith) -> u128 {
    let x = if from.signed { from.extend(v) as u128 } else { v & from.mask() };
    x & to.mask()
}

/// The value of an expression made only of constants (the compiler's folding), or `None`.
pub fn eval_const(e: &Ex) -> Option<u128> {
    Some(match e {
        Ex::Const(v) => *v,
        Ex::Not(a) => u128::from(eval_const(a)? == 0),
        Ex::BitNot(a, ar) => !eval_const(a)? & ar.mask(),
        Ex::Neg(a, ar) => eval_const(a)?.wrapping_neg() & ar.mask(),
        Ex::Bin(op, a, b, ar) => binop(*op, eval_const(a)?, eval_const(b)?, *ar),
        Ex::Cmp(c, a, b, ar) => u128::from(compare(*c, eval_const(a)?, eval_const(b)?, *ar)),
        Ex::And(a, b) => u128::from(eval_const(a)? != 0 && eval_const(b)? != 0),
        Ex::Or(a, b) => u128::from(eval_const(a)? != 0 || eval_const(b)? != 0),
        Ex::Cond(c, a, b) => {
            if eval_const(c)? != 0 {
                eval_const(a)?
            } else {
                eval_const(b)?
            }
        }
        Ex::Slice(a, lo, m) => (eval_const(a)? >> lo) & m,
        Ex::Concat(a, b, lw) => {
            let lo = eval_const(b)?;
            let hi = eval_const(a)?;
            if *lw >= 128 { lo } else { (hi << lw) | lo }
        }
        Ex::Cast(a, f, t) => cast(eval_const(a)?, *f, *t),
        Ex::NonZero(a) => u128::from(eval_const(a)? != 0),
        _ => return None,
    })
}
