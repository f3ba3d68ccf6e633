//! eBPF instructions: the 8-byte encoding, the opcode fields and the pseudo-sources clang and
//! the loader use (RFC 9669, "BPF Instruction Set Architecture").

/// One 8-byte eBPF instruction (a wide `lddw` is two of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Insn {
    /// Opcode: class in the low 3 bits, then source and operation (or size and mode).
    pub code: u8,
    /// Destination register, 0..=10.
    pub dst: u8,
    /// Source register, 0..=10, or a pseudo-source on `lddw` and `call`.
    pub src: u8,
    /// Signed offset: jump distance or memory offset.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// Decodes one instruction from its little-endian 8 bytes.
    pub fn decode(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// The 8-byte little-endian encoding.
    pub fn encode(&self) -> [u8; 8] {
        let o = self.off.to_le_bytes();
        let i = self.imm.to_le_bytes();
        [self.code, (self.src << 4) | (self.dst & 0x0f), o[0], o[1], i[0], i[1], i[2], i[3]]
    }

    /// Decodes a whole program; a trailing partial instruction is ignored by the caller's
    /// length check (`bytes.len() % 8 == 0`).
    pub fn decode_all(bytes: &[u8]) -> Vec<Insn> {
        bytes.chunks_exact(8).map(|c| Insn::decode(c.try_into().unwrap_or([0; 8]))).collect()
    }

    /// Instruction class (`code & 7`).
    pub fn class(&self) -> u8 {
        self.code & 0x07
    }
}

/// Instruction classes.
pub mod class {
    /// Non-standard loads (`lddw`, legacy packet loads).
    pub const LD: u8 = 0x00;
    /// Loads into a register.
    pub const LDX: u8 = 0x01;
    /// Stores of an immediate.
    pub const ST: u8 = 0x02;
    /// Stores of a register (and atomics).
    pub const STX: u8 = 0x03;
    /// 32-bit arithmetic.
    pub const ALU: u8 = 0x04;
    /// 64-bit jumps, calls and exit.
    pub const JMP: u8 = 0x05;
    /// 32-bit jumps.
    pub const JMP32: u8 = 0x06;
    /// 64-bit arithmetic.
    pub const ALU64: u8 = 0x07;
}

/// `lddw` source pseudo-registers, as the kernel defines them.
pub mod pseudo {
    /// `imm` names a map (by the loader's map index in snic; by fd in the kernel).
    pub const MAP_FD: u8 = 1;
    /// `imm` names a map and the next instruction's `imm` an offset into its value 0.
    pub const MAP_VALUE: u8 = 2;
    /// On `call`: a call to a local function (bpf-to-bpf), `imm` is the relative target.
    pub const CALL: u8 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encode_decode_roundtrip(b in any::<[u8; 8]>()) {
            prop_assert_eq!(Insn::decode(b).encode(), b);
        }
    }
}
