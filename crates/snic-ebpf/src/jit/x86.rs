//! A small x86-64 instruction encoder: just the forms the JIT emits.
//!
//! Registers are numbered as in the hardware encoding (0 = rax .. 15 = r15). Every function
//! appends to [`Asm::code`]; `w` selects the 64-bit operand size (REX.W), otherwise the
//! operation is 32-bit (which zero-extends its destination, exactly BPF's ALU32 rule).

/// rax.
pub const RAX: u8 = 0;
/// rcx.
pub const RCX: u8 = 1;
/// rdx.
pub const RDX: u8 = 2;
/// rbx.
pub const RBX: u8 = 3;
/// rsp.
pub const RSP: u8 = 4;
/// rbp.
pub const RBP: u8 = 5;
/// rsi.
pub const RSI: u8 = 6;
/// rdi.
pub const RDI: u8 = 7;
/// r8.
pub const R8: u8 = 8;
/// r9.
pub const R9: u8 = 9;
/// r10.
pub const R10: u8 = 10;
/// r11.
pub const R11: u8 = 11;
/// r12.
pub const R12: u8 = 12;
/// r13.
pub const R13: u8 = 13;
/// r14.
pub const R14: u8 = 14;
/// r15.
pub const R15: u8 = 15;

/// Condition codes (the low nibble of `Jcc`).
pub mod cc {
    /// Below (unsigned <).
    pub const B: u8 = 0x2;
    /// Above or equal (unsigned >=).
    pub const AE: u8 = 0x3;
    /// Equal.
    pub const E: u8 = 0x4;
    /// Not equal.
    pub const NE: u8 = 0x5;
    /// Below or equal (unsigned <=).
    pub const BE: u8 = 0x6;
    /// Above (unsigned >).
    pub const A: u8 = 0x7;
    /// Less (signed <).
    pub const L: u8 = 0xc;
    /// Greater or equal (signed >=).
    pub const GE: u8 = 0xd;
    /// Less or equal (signed <=).
    pub const LE: u8 = 0xe;
    /// Greater (signed >).
    pub const G: u8 = 0xf;
}

/// Two-operand ALU operations with their `op r/m, reg` opcode and `/digit` for immediates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alu {
    /// add.
    Add,
    /// or.
    Or,
    /// and.
    And,
    /// sub.
    Sub,
    /// xor.
    Xor,
    /// cmp.
    Cmp,
}

impl Alu {
    fn rm_reg(self) -> u8 {
        match self {
            Alu::Add => 0x01,
            Alu::Or => 0x09,
            Alu::And => 0x21,
            Alu::Sub => 0x29,
            Alu::Xor => 0x31,
            Alu::Cmp => 0x39,
        }
    }
    fn digit(self) -> u8 {
        match self {
            Alu::Add => 0,
            Alu::Or => 1,
            Alu::And => 4,
            Alu::Sub => 5,
            Alu::Xor => 6,
            Alu::Cmp => 7,
        }
    }
}

/// Shift operations (`/digit` of C1/D3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shift {
    /// Shift left.
    Shl = 4,
    /// Logical shift right.
    Shr = 5,
    /// Arithmetic shift right.
    Sar = 7,
}

/// Memory operand sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// 8 bits.
    B,
    /// 16 bits.
    H,
    /// 32 bits.
    W,
    /// 64 bits.
    Dw,
}

/// The code buffer being assembled.
#[derive(Default)]
pub struct Asm {
    /// Bytes emitted so far.
    pub code: Vec<u8>,
}

impl Asm {
    /// Current offset.
    pub fn pos(&self) -> usize {
        self.code.len()
    }

    fn b(&mut self, x: u8) {
        self.code.push(x);
    }

    fn d32(&mut self, x: i32) {
        self.code.extend_from_slice(&x.to_le_bytes());
    }

    /// A REX prefix; `force` emits it even when it carries no bit (byte registers sil/dil).
    fn rex(&mut self, w: bool, reg: u8, rm: u8, force: bool) {
        let r = 0x40 | (u8::from(w) << 3) | ((reg >> 3) << 2) | (rm >> 3);
        if r != 0x40 || force {
            self.b(r);
        }
    }

    fn modrm_reg(&mut self, reg: u8, rm: u8) {
        self.b(0xc0 | ((reg & 7) << 3) | (rm & 7));
    }

    /// ModRM (+SIB, +displacement) for `[base + disp]`.
    fn modrm_mem(&mut self, reg: u8, base: u8, disp: i32) {
        let r = (reg & 7) << 3;
        let bb = base & 7;
        let (md, d8) = if disp == 0 && bb != 5 {
            (0x00, None)
        } else if let Ok(d) = i8::try_from(disp) {
            (0x40, Some(d))
        } else {
            (0x80, None)
        };
        self.b(md | r | bb);
        if bb == 4 {
            self.b(0x24);
        }
        match (md, d8) {
            (0x40, Some(d)) => self.b(d as u8),
            (0x80, _) => self.d32(disp),
            _ => {}
        }
    }

    /// `op dst, src` (register to register).
    pub fn alu_rr(&mut self, op: Alu, w: bool, dst: u8, src: u8) {
        self.rex(w, src, dst, false);
        self.b(op.rm_reg());
        self.modrm_reg(src, dst);
    }

    /// `op dst, imm` (sign-extended to 64 bits when `w`).
    pub fn alu_ri(&mut self, op: Alu, w: bool, dst: u8, imm: i32) {
        self.rex(w, 0, dst, false);
        if let Ok(i) = i8::try_from(imm) {
            self.b(0x83);
            self.modrm_reg(op.digit(), dst);
            self.b(i as u8);
        } else {
            self.b(0x81);
            self.modrm_reg(op.digit(), dst);
            self.d32(imm);
        }
    }

    /// `mov dst, src`.
    pub fn mov_rr(&mut self, w: bool, dst: u8, src: u8) {
        self.rex(w, src, dst, false);
        self.b(0x89);
        self.modrm_reg(src, dst);
    }

    /// `mov dst, imm`: 32-bit zero-extending, or 64-bit sign-extended from 32 bits.
    pub fn mov_ri(&mut self, w: bool, dst: u8, imm: i32) {
        if !w || imm >= 0 {
            if imm == 0 {
                self.alu_rr(Alu::Xor, false, dst, dst);
                return;
            }
            self.rex(false, 0, dst, false);
            self.b(0xb8 + (dst & 7));
            self.d32(imm);
        } else {
            self.rex(true, 0, dst, false);
            self.b(0xc7);
            self.modrm_reg(0, dst);
            self.d32(imm);
        }
    }

    /// `mov dst, imm64` (the shortest form that gives the same 64-bit value).
    pub fn mov_ri64(&mut self, dst: u8, imm: u64) {
        if let Ok(i) = u32::try_from(imm) {
            self.mov_ri(false, dst, i as i32);
        } else if let Ok(i) = i32::try_from(imm as i64) {
            self.mov_ri(true, dst, i);
        } else {
            self.rex(true, 0, dst, false);
            self.b(0xb8 + (dst & 7));
            self.code.extend_from_slice(&imm.to_le_bytes());
        }
    }

    /// `test a, b`.
    pub fn test_rr(&mut self, w: bool, a: u8, b: u8) {
        self.rex(w, b, a, false);
        self.b(0x85);
        self.modrm_reg(b, a);
    }

    /// `test dst, imm32`.
    pub fn test_ri(&mut self, w: bool, dst: u8, imm: i32) {
        self.rex(w, 0, dst, false);
        self.b(0xf7);
        self.modrm_reg(0, dst);
        self.d32(imm);
    }

    /// `imul dst, src`.
    pub fn imul_rr(&mut self, w: bool, dst: u8, src: u8) {
        self.rex(w, dst, src, false);
        self.b(0x0f);
        self.b(0xaf);
        self.modrm_reg(dst, src);
    }

    /// `imul dst, dst, imm32`.
    pub fn imul_ri(&mut self, w: bool, dst: u8, imm: i32) {
        self.rex(w, dst, dst, false);
        self.b(0x69);
        self.modrm_reg(dst, dst);
        self.d32(imm);
    }

    /// `neg dst`.
    pub fn neg(&mut self, w: bool, dst: u8) {
        self.rex(w, 0, dst, false);
        self.b(0xf7);
        self.modrm_reg(3, dst);
    }

    /// `div r` (unsigned, rdx:rax / r) or `idiv r` (signed).
    pub fn div(&mut self, w: bool, signed: bool, r: u8) {
        self.rex(w, 0, r, false);
        self.b(0xf7);
        self.modrm_reg(if signed { 7 } else { 6 }, r);
    }

    /// `cqo` (64) / `cdq` (32): sign-extend rax into rdx.
    pub fn cqo(&mut self, w: bool) {
        if w {
            self.b(0x48);
        }
        self.b(0x99);
    }

    /// Shift by an immediate.
    pub fn shift_ri(&mut self, op: Shift, w: bool, dst: u8, n: u8) {
        self.rex(w, 0, dst, false);
        self.b(0xc1);
        self.modrm_reg(op as u8, dst);
        self.b(n);
    }

    /// Shift by `cl`.
    pub fn shift_cl(&mut self, op: Shift, w: bool, dst: u8) {
        self.rex(w, 0, dst, false);
        self.b(0xd3);
        self.modrm_reg(op as u8, dst);
    }

    /// `bswap dst` (32 or 64 bits).
    pub fn bswap(&mut self, w: bool, dst: u8) {
        self.rex(w, 0, dst, false);
        self.b(0x0f);
        self.b(0xc8 + (dst & 7));
    }

    /// `rol dst16, 8`: swaps the two low bytes.
    pub fn rol16_8(&mut self, dst: u8) {
        self.b(0x66);
        self.rex(false, 0, dst, false);
        self.b(0xc1);
        self.modrm_reg(0, dst);
        self.b(8);
    }

    /// `movzx dst32, src16`.
    pub fn movzx16(&mut self, dst: u8, src: u8) {
        self.rex(false, dst, src, false);
        self.b(0x0f);
        self.b(0xb7);
        self.modrm_reg(dst, src);
    }

    /// Sign-extending register move from `bits` (8, 16, 32) into 32 (`w` false) or 64 bits.
    pub fn movsx_rr(&mut self, w: bool, bits: u8, dst: u8, src: u8) {
        match bits {
            8 => {
                self.rex(w, dst, src, true);
                self.b(0x0f);
                self.b(0xbe);
            }
            16 => {
                self.rex(w, dst, src, false);
                self.b(0x0f);
                self.b(0xbf);
            }
            _ => {
                // movsxd (64) or a plain 32-bit move.
                if !w {
                    self.mov_rr(false, dst, src);
                    return;
                }
                self.rex(true, dst, src, false);
                self.b(0x63);
            }
        }
        self.modrm_reg(dst, src);
    }

    /// Zero-extending load `dst = *(size *)(base + off)`.
    pub fn load(&mut self, size: Size, dst: u8, base: u8, off: i32) {
        match size {
            Size::B => {
                self.rex(false, dst, base, false);
                self.b(0x0f);
                self.b(0xb6);
            }
            Size::H => {
                self.rex(false, dst, base, false);
                self.b(0x0f);
                self.b(0xb7);
            }
            Size::W => {
                self.rex(false, dst, base, false);
                self.b(0x8b);
            }
            Size::Dw => {
                self.rex(true, dst, base, false);
                self.b(0x8b);
            }
        }
        self.modrm_mem(dst, base, off);
    }

    /// Sign-extending load into 64 bits.
    pub fn load_sx(&mut self, size: Size, dst: u8, base: u8, off: i32) {
        self.rex(true, dst, base, false);
        match size {
            Size::B => {
                self.b(0x0f);
                self.b(0xbe);
            }
            Size::H => {
                self.b(0x0f);
                self.b(0xbf);
            }
            Size::W => self.b(0x63),
            Size::Dw => self.b(0x8b),
        }
        self.modrm_mem(dst, base, off);
    }

    /// Store `*(size *)(base + off) = src`.
    pub fn store(&mut self, size: Size, base: u8, off: i32, src: u8) {
        match size {
            Size::B => {
                self.rex(false, src, base, true);
                self.b(0x88);
            }
            Size::H => {
                self.b(0x66);
                self.rex(false, src, base, false);
                self.b(0x89);
            }
            Size::W => {
                self.rex(false, src, base, false);
                self.b(0x89);
            }
            Size::Dw => {
                self.rex(true, src, base, false);
                self.b(0x89);
            }
        }
        self.modrm_mem(src, base, off);
    }

    /// Store `*(size *)(base + off) = imm` (sign-extended for 64 bits).
    pub fn store_imm(&mut self, size: Size, base: u8, off: i32, imm: i32) {
        match size {
            Size::B => {
                self.rex(false, 0, base, false);
                self.b(0xc6);
                self.modrm_mem(0, base, off);
                self.b(imm as u8);
            }
            Size::H => {
                self.b(0x66);
                self.rex(false, 0, base, false);
                self.b(0xc7);
                self.modrm_mem(0, base, off);
                self.code.extend_from_slice(&(imm as u16).to_le_bytes());
            }
            Size::W | Size::Dw => {
                self.rex(size == Size::Dw, 0, base, false);
                self.b(0xc7);
                self.modrm_mem(0, base, off);
                self.d32(imm);
            }
        }
    }

    /// `lock op [base + off], src` for add/or/and/xor (32 or 64 bits).
    pub fn lock_alu_mem(&mut self, op: Alu, w: bool, base: u8, off: i32, src: u8) {
        self.b(0xf0);
        self.rex(w, src, base, false);
        self.b(op.rm_reg());
        self.modrm_mem(src, base, off);
    }

    /// `lock xadd [base + off], src`.
    pub fn lock_xadd(&mut self, w: bool, base: u8, off: i32, src: u8) {
        self.b(0xf0);
        self.rex(w, src, base, false);
        self.b(0x0f);
        self.b(0xc1);
        self.modrm_mem(src, base, off);
    }

    /// `lock cmpxchg [base + off], src` (compares with rax).
    pub fn lock_cmpxchg(&mut self, w: bool, base: u8, off: i32, src: u8) {
        self.b(0xf0);
        self.rex(w, src, base, false);
        self.b(0x0f);
        self.b(0xb1);
        self.modrm_mem(src, base, off);
    }

    /// `xchg [base + off], src` (implicitly locked).
    pub fn xchg_mem(&mut self, w: bool, base: u8, off: i32, src: u8) {
        self.rex(w, src, base, false);
        self.b(0x87);
        self.modrm_mem(src, base, off);
    }

    /// `lea dst, [base + disp]`.
    pub fn lea(&mut self, dst: u8, base: u8, disp: i32) {
        self.rex(true, dst, base, false);
        self.b(0x8d);
        self.modrm_mem(dst, base, disp);
    }

    /// `push r`.
    pub fn push(&mut self, r: u8) {
        self.rex(false, 0, r, false);
        self.b(0x50 + (r & 7));
    }

    /// `pop r`.
    pub fn pop(&mut self, r: u8) {
        self.rex(false, 0, r, false);
        self.b(0x58 + (r & 7));
    }

    /// `call r` (indirect through a register).
    pub fn call_r(&mut self, r: u8) {
        self.rex(false, 0, r, false);
        self.b(0xff);
        self.modrm_reg(2, r);
    }

    /// `call rel32` to absolute code offset `target`.
    pub fn call_rel(&mut self, target: usize) {
        self.b(0xe8);
        let rel = target as i64 - (self.pos() as i64 + 4);
        self.d32(rel as i32);
    }

    /// `ret`.
    pub fn ret(&mut self) {
        self.b(0xc3);
    }

    /// A jump (`cond` None = unconditional) to code offset `target`, short if `short`.
    /// `rel` is given by the caller, measured from the end of this jump.
    pub fn jump(&mut self, cond: Option<u8>, short: bool, rel: i64) {
        match (cond, short) {
            (None, true) => {
                self.b(0xeb);
                self.b(rel as i8 as u8);
            }
            (None, false) => {
                self.b(0xe9);
                self.d32(rel as i32);
            }
            (Some(c), true) => {
                self.b(0x70 + c);
                self.b(rel as i8 as u8);
            }
            (Some(c), false) => {
                self.b(0x0f);
                self.b(0x80 + c);
                self.d32(rel as i32);
            }
        }
    }

    /// Length of a jump of that kind.
    pub fn jump_len(cond: Option<u8>, short: bool) -> usize {
        match (cond, short) {
            (_, true) => 2,
            (None, false) => 5,
            (Some(_), false) => 6,
        }
    }

    /// A short forward jump whose 8-bit displacement is patched later by [`Asm::patch8`].
    pub fn jump8_fwd(&mut self, cond: Option<u8>) -> usize {
        self.jump(cond, true, 0);
        self.pos()
    }

    /// Points the short jump that ended at `from` to the current position.
    pub fn patch8(&mut self, from: usize) {
        let rel = self.pos() - from;
        debug_assert!(rel < 128);
        self.code[from - 1] = rel as u8;
    }

    /// A short backward jump to `target` (an earlier position).
    pub fn jump8_back(&mut self, cond: Option<u8>, target: usize) {
        let rel = target as i64 - (self.pos() as i64 + 2);
        self.jump(cond, true, rel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: impl FnOnce(&mut Asm)) -> Vec<u8> {
        let mut a = Asm::default();
        f(&mut a);
        a.code
    }

    #[test]
    fn encodings_match_the_manual() {
        // Reference bytes from the Intel SDM (checked with an assembler).
        assert_eq!(enc(|a| a.mov_rr(true, RAX, RDI)), [0x48, 0x89, 0xf8]);
        assert_eq!(enc(|a| a.mov_rr(true, R13, RBX)), [0x49, 0x89, 0xdd]);
        assert_eq!(enc(|a| a.alu_ri(Alu::Add, true, R15, 1)), [0x49, 0x83, 0xc7, 0x01]);
        assert_eq!(enc(|a| a.load(Size::Dw, RAX, RBP, -8)), [0x48, 0x8b, 0x45, 0xf8]);
        assert_eq!(enc(|a| a.load(Size::W, RAX, R12, 0)), [0x41, 0x8b, 0x04, 0x24]);
        assert_eq!(enc(|a| a.load(Size::B, RSI, R13, 0)), [0x41, 0x0f, 0xb6, 0x75, 0x00]);
        assert_eq!(enc(|a| a.store(Size::B, RAX, 1, RSI)), [0x40, 0x88, 0x70, 0x01]);
        assert_eq!(enc(|a| a.push(R12)), [0x41, 0x54]);
        assert_eq!(enc(|a| a.bswap(true, RCX)), [0x48, 0x0f, 0xc9]);
        assert_eq!(enc(|a| a.lock_xadd(true, RDI, 8, RSI)), [0xf0, 0x48, 0x0f, 0xc1, 0x77, 0x08]);
        assert_eq!(enc(|a| a.mov_ri64(RAX, 0x1122_3344_5566_7788)).len(), 10);
        assert_eq!(enc(|a| a.shift_cl(Shift::Sar, true, RBX)), [0x48, 0xd3, 0xfb]);
    }
}
