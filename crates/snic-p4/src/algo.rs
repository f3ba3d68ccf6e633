//! The pure computations behind v1model's `hash`, `verify_checksum`/`update_checksum` (and their
//! `_with_payload` forms) and `meter`/`direct_meter`, bit-exact with BMv2's `simple_switch`.
//!
//! Nothing here does I/O or reads a clock: the executor hands in the field values, the payload,
//! the time and (for `HashAlgorithm.random`) a random source.
//!
//! # What BMv2 does, and where that was read
//!
//! All paths are in `p4lang/behavioral-model` unless named otherwise; `p4c` is
//! `p4lang/p4c`'s BMv2 back end (`backends/bmv2/simple_switch/simpleSwitch.cpp`).
//!
//! ## The input buffer ([`BitBuf`])
//!
//! p4c turns `hash(...)`, `verify_checksum(...)` and `update_checksum(...)` into a JSON
//! "calculation" whose `input` lists the fields (and constants, with a `bitwidth`) of the
//! data argument, and for the `_with_payload` forms a final `{"type": "payload"}` entry.
//! BMv2 (`src/bm_sim/calculations.cpp`, `BufBuilder::operator()` and `BufBuilder::Deparse`)
//! lays them out as follows:
//!
//! - Every field is written MSB first, directly after the previous one, with no alignment:
//!   a running bit count `nbits` grows by each field's width and `extend()` resizes the
//!   buffer to `(nbits + 7) / 8` bytes filled with zero (`extract::generic_deparse` in
//!   `src/bm_sim/extract.h` writes the bits at the current bit offset).
//! - So when the total width is not a multiple of 8 the **padding is at the end**: the low
//!   bits of the last byte are zero. A lone `bit<12>` 0xABC is the bytes `AB C0`.
//! - A field of an **invalid header is skipped** (`if (!header.is_valid()) return;`): it adds
//!   no bits at all, not zeros. (Metadata is always valid.) The executor must leave such
//!   fields out of the [`BitBuf`].
//! - The payload is appended after the buffer as built so far, i.e. after the padding byte:
//!   `buf->resize(curr + psize)` and a copy of `pkt.data()`, the bytes after the parsed
//!   headers. It is always last.
//!
//! ## The algorithms ([`HashAlgorithm`], [`Calculation`])
//!
//! p4c maps the v1model `HashAlgorithm` members one to one to BMv2 names (`crc32`,
//! `crc32_custom`, `crc16`, `crc16_custom`, `random`, `identity`, `csum16`, `xor16`;
//! `convertHashAlgorithm`). BMv2 registers them in `calculations.cpp` (`REGISTER_HASH`) with
//! a `uint64_t` result; the table constants are in `src/bm_sim/crc_tables.h`.
//!
//! - `crc16`: MSB-first table for polynomial 0x8005 (`table_crc16`), each input byte
//!   reflected, remainder 0, final remainder reflected, no final xor. That is
//!   **CRC-16/ARC** (poly 0x8005, init 0, refin, refout, xorout 0; check 0xBB3D).
//! - `crc32`: table for 0x04C11DB7 (`table_crc32`), init 0xFFFFFFFF, bytes and remainder
//!   reflected, xorout 0xFFFFFFFF: **CRC-32/ISO-HDLC** (the IEEE/zlib one; check 0xCBF43926).
//! - `crc16_custom` / `crc32_custom` (`crc_custom<T>`): the Rocksoft model with run-time
//!   parameters `{polynomial, initial_remainder, final_xor_value, data_reflected,
//!   remainder_reflected}`: the register is kept unreflected and starts at the initial
//!   remainder, each byte is reflected first when `data_reflected`, the final register is
//!   reflected when `remainder_reflected`, then xored. Defaults (`crc_custom_init`): crc16
//!   `{0x8005, 0, 0, true, true}`, crc32 `{0x04c11db7, 0xffffffff, 0xffffffff, true, true}`,
//!   i.e. equal to `crc16`/`crc32`. Each calculation (each `hash` call site, each checksum)
//!   owns its own configuration: a `NamedCalculation` holds a fresh copy of the functor.
//!   `simple_switch_CLI`'s `set_crc16_parameters <calc> <poly> <init> <xor> <refin> <refout>`
//!   (and `set_crc32_parameters`) changes it (`tools/runtime_CLI.py`,
//!   `set_crc_parameters_common`: the three numbers are parsed with `int(x, 0)` and rejected
//!   when they do not fit the width; the booleans accept `true`/`false`/`True`/`False` or an
//!   integer).
//! - `csum16` (`cksum16`): the Internet checksum (RFC 1071): the ones' complement of the ones'
//!   complement sum of the buffer as 16-bit big-endian words; **an odd trailing byte is
//!   padded with a zero byte after it** (it is added as the high byte of a word). BMv2 sums
//!   little-endian 64-bit words with end-around carry, folds, complements and byte-swaps
//!   (`ntohs(~t3)`); the tests check that this equals the big-endian formulation here.
//!   An all-zero buffer (or an empty one) gives 0xFFFF.
//! - `xor16` (`xor_hash<uint16_t>`): the xor of the buffer's 16-bit big-endian words; an odd
//!   trailing byte is the high byte of a last word (`emitAsInteger` pads zeros at the tail).
//! - `identity`: the first `min(8, len)` bytes as a big-endian number; bytes after the 8th
//!   are ignored (the *leading* bytes are kept). With the end padding above, a lone
//!   `bit<12>` field `x` gives `x << 4`.
//! - `random`: **BMv2 has no hash of that name**. p4c emits `"algo": "random"` but
//!   `P4Objects::check_hash` finds it neither among the registered hashes nor in `CrcMap`
//!   (`src/bm_sim/crc_map.cpp`) and refuses the JSON ("Unknown hash algorithm: random"), so a
//!   program using it does not run on `simple_switch` at all. Here it is a value drawn from
//!   the caller's random source (a uniform `u64`), to which the `hash` rule below applies.
//!
//! ## `hash(result, algo, base, data, max)` ([`hash_result`])
//!
//! `modify_field_with_hash_based_offset` in `targets/simple_switch/primitives.cpp`:
//! `sz = max` (as `uint64_t`), **`max == 0` is treated as 1** (with a warning), so the result
//! is `base`; otherwise `v = (h % max) + base` in wrapping 64-bit arithmetic, then
//! `dst.set(v)` keeps the low bits that fit the destination's width. (v1model.p4's own words:
//! "in the range \[base, base+max-1\] … If max=0, the value written to result will always be
//! base.") `h` is the algorithm's full 64-bit result; it is not first cut to a width.
//!
//! ## Checksums ([`verify_checksum`], [`update_checksum`])
//!
//! `CalcBasedChecksum` in `src/bm_sim/checksums.cpp`: the checksum field itself is not in the
//! data list (p4c passes it as the separate `target`). `verify` passes when the target's
//! header is invalid or the condition is false; otherwise it passes when the calculation's
//! 64-bit result equals the field's value. `update` (when the condition holds) sets the field
//! to the result, cut to the field's width. After parsing, `simple_switch` sets
//! `standard_metadata.checksum_error` to 1 when any verify failed (`ingress_thread` in
//! `targets/simple_switch/simple_switch.cpp`: `packet->get_checksum_error() ? 1 : 0`).
//!
//! ## Meters ([`Meter`])
//!
//! `src/bm_sim/meters.cpp` and `include/bm/bm_sim/meters.h`: a colour-blind two-rate
//! three-colour marker (RFC 2698), see [`Meter`] for the exact rules.

use std::fmt;

/// Bits packed MSB first, one field after another, as BMv2's `BufBuilder` lays out the input
/// of a hash or checksum (padding zeros at the end of the last byte; see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BitBuf {
    bytes: Vec<u8>,
    nbits: usize,
}

impl BitBuf {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the low `width` bits of `value`, most significant first. Bits of `value` above
    /// `width` are ignored (a BMv2 field never holds them). A width of 0 adds nothing.
    ///
    /// # Panics
    /// When `width > 128`; use [`BitBuf::push_bytes`] for wider fields.
    pub fn push(&mut self, value: u128, width: u32) {
        assert!(width <= 128, "a field of {width} bits does not fit a u128");
        let mut left = width;
        while left > 0 {
            let used = self.nbits % 8;
            if used == 0 {
                self.bytes.push(0);
            }
            let free = 8 - used as u32;
            let n = free.min(left);
            let chunk = ((value >> (left - n)) as u8) & (0xFFu8 >> (8 - n));
            let last = self.bytes.len() - 1;
            self.bytes[last] |= chunk << (free - n);
            left -= n;
            self.nbits += n as usize;
        }
    }

    /// Appends a field of any width given as big-endian bytes holding its value right-aligned
    /// (as a P4 field of `width` bits is stored in `(width + 7) / 8` bytes): its low `width`
    /// bits, most significant first. Bytes missing on the left count as zeros.
    pub fn push_bytes(&mut self, be: &[u8], width: usize) {
        let have = be.len() * 8;
        let mut zeros = width.saturating_sub(have);
        while zeros > 0 {
            let n = zeros.min(128);
            self.push(0, n as u32);
            zeros -= n;
        }
        let skip = have - width.min(have);
        for (i, &b) in be.iter().enumerate() {
            let lo = i * 8;
            if lo + 8 <= skip {
                continue;
            }
            let drop = skip.saturating_sub(lo);
            self.push(u128::from(b & (0xFF >> drop)), (8 - drop) as u32);
        }
    }

    /// Appends the packet's payload for the `_with_payload` forms: whole bytes after the
    /// padded buffer built so far, as BMv2 appends `pkt.data()` after the field bytes. Anything
    /// pushed afterwards starts on the next byte.
    pub fn push_payload(&mut self, payload: &[u8]) {
        self.bytes.extend_from_slice(payload);
        self.nbits = self.bytes.len() * 8;
    }

    /// The number of bits pushed (a payload counts as whole bytes after the padding).
    pub fn bit_len(&self) -> usize {
        self.nbits
    }

    /// The bytes the calculation runs over: `(bit_len + 7) / 8` of them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Consumes the buffer, giving its bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Empties the buffer, keeping its allocation.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.nbits = 0;
    }
}

/// v1model's `HashAlgorithm` (the order is v1model.p4's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlgorithm {
    /// CRC-32/ISO-HDLC (IEEE), [`crc32`].
    Crc32,
    /// A CRC-32 with run-time parameters ([`CrcParams`]); by default [`CrcParams::CRC32`].
    Crc32Custom,
    /// CRC-16/ARC, [`crc16`].
    Crc16,
    /// A CRC-16 with run-time parameters ([`CrcParams`]); by default [`CrcParams::CRC16`].
    Crc16Custom,
    /// A value from the caller's random source (BMv2 has no such hash; see the module docs).
    Random,
    /// The buffer's first 8 bytes as a big-endian number, [`identity`].
    Identity,
    /// The Internet checksum, [`csum16`].
    Csum16,
    /// The xor of 16-bit big-endian words, [`xor16`].
    Xor16,
}

impl HashAlgorithm {
    /// Every member, in v1model.p4's order.
    pub const ALL: [HashAlgorithm; 8] = [
        HashAlgorithm::Crc32,
        HashAlgorithm::Crc32Custom,
        HashAlgorithm::Crc16,
        HashAlgorithm::Crc16Custom,
        HashAlgorithm::Random,
        HashAlgorithm::Identity,
        HashAlgorithm::Csum16,
        HashAlgorithm::Xor16,
    ];

    /// The member's name in v1model.p4, which is also the `algo` name in BMv2's JSON.
    pub fn name(self) -> &'static str {
        match self {
            HashAlgorithm::Crc32 => "crc32",
            HashAlgorithm::Crc32Custom => "crc32_custom",
            HashAlgorithm::Crc16 => "crc16",
            HashAlgorithm::Crc16Custom => "crc16_custom",
            HashAlgorithm::Random => "random",
            HashAlgorithm::Identity => "identity",
            HashAlgorithm::Csum16 => "csum16",
            HashAlgorithm::Xor16 => "xor16",
        }
    }

    /// The member of that name ([`HashAlgorithm::name`]), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The width of a custom CRC's register, for the two custom algorithms.
    pub fn custom_crc_width(self) -> Option<CrcWidth> {
        match self {
            HashAlgorithm::Crc16Custom => Some(CrcWidth::W16),
            HashAlgorithm::Crc32Custom => Some(CrcWidth::W32),
            _ => None,
        }
    }
}

impl fmt::Display for HashAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The register width of a CRC: BMv2's `crc_custom<T>` exists for 8, 16, 32 and 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrcWidth {
    /// 8 bits.
    W8,
    /// 16 bits.
    W16,
    /// 32 bits.
    W32,
    /// 64 bits.
    W64,
}

impl CrcWidth {
    /// The width in bits.
    pub const fn bits(self) -> u32 {
        match self {
            CrcWidth::W8 => 8,
            CrcWidth::W16 => 16,
            CrcWidth::W32 => 32,
            CrcWidth::W64 => 64,
        }
    }

    /// All ones in the width.
    pub const fn mask(self) -> u64 {
        u64::MAX >> (64 - self.bits())
    }
}

/// A CRC's parameters in the Rocksoft model, as BMv2's `crc_config_t` holds them and
/// `set_crc16_parameters` / `set_crc32_parameters` set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CrcParams {
    /// The register width.
    pub width: CrcWidth,
    /// The polynomial, without its top bit (0x8005 for CRC-16).
    pub polynomial: u64,
    /// The register's value before the first byte.
    pub initial_remainder: u64,
    /// Xored into the (possibly reflected) final register.
    pub final_xor: u64,
    /// Each input byte is bit-reversed before it enters the register.
    pub reflect_data: bool,
    /// The final register is bit-reversed (over the width) before the final xor.
    pub reflect_remainder: bool,
}

impl CrcParams {
    /// BMv2's `crc16` and the default of `crc16_custom`: CRC-16/ARC.
    pub const CRC16: CrcParams = CrcParams {
        width: CrcWidth::W16,
        polynomial: 0x8005,
        initial_remainder: 0,
        final_xor: 0,
        reflect_data: true,
        reflect_remainder: true,
    };

    /// BMv2's `crc32` and the default of `crc32_custom`: CRC-32/ISO-HDLC.
    pub const CRC32: CrcParams = CrcParams {
        width: CrcWidth::W32,
        polynomial: 0x04C1_1DB7,
        initial_remainder: 0xFFFF_FFFF,
        final_xor: 0xFFFF_FFFF,
        reflect_data: true,
        reflect_remainder: true,
    };
}

/// Why a CRC configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcConfigError {
    /// The polynomial, initial remainder or final xor has bits above the width (the CLI's
    /// "Integer cannot fit within 16 bits").
    ValueTooWide,
    /// The calculation is not a custom CRC (BMv2's `WRONG_TYPE_CALCULATION`).
    NotCustomCrc,
    /// The parameters' width is not the custom CRC's (a crc16 configuration for a
    /// `crc32_custom` calculation; also `WRONG_TYPE_CALCULATION` in BMv2).
    WidthMismatch {
        /// The calculation's width.
        expected: CrcWidth,
        /// The parameters' width.
        got: CrcWidth,
    },
}

impl fmt::Display for CrcConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CrcConfigError::ValueTooWide => f.write_str("a CRC parameter does not fit its width"),
            CrcConfigError::NotCustomCrc => f.write_str("the calculation is not a custom CRC"),
            CrcConfigError::WidthMismatch { expected, got } => write!(
                f,
                "a {}-bit CRC configuration for a {}-bit custom CRC",
                got.bits(),
                expected.bits()
            ),
        }
    }
}

impl std::error::Error for CrcConfigError {}

/// A table-driven CRC of any [`CrcParams`].
///
/// One 256-entry table, a byte at a time, the register kept unreflected (input bytes are
/// reflected instead), as BMv2's `crc_custom` does: that form handles every combination of
/// the two reflection flags and all four widths with one code path, and the parameters can
/// change at run time without a `'static` algorithm description (which the `crc` crate
/// wants), so no dependency is needed. The tests check it against a bit-at-a-time reference
/// for random parameters and against catalogue check values.
#[derive(Clone, PartialEq, Eq)]
pub struct Crc {
    params: CrcParams,
    table: [u64; 256],
}

impl fmt::Debug for Crc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Crc").field("params", &self.params).finish_non_exhaustive()
    }
}

impl Crc {
    /// The CRC of these parameters.
    pub fn new(params: CrcParams) -> Result<Self, CrcConfigError> {
        let mask = params.width.mask();
        if (params.polynomial | params.initial_remainder | params.final_xor) & !mask != 0 {
            return Err(CrcConfigError::ValueTooWide);
        }
        Ok(Self::build(params))
    }

    /// Builds the table; the parameters' values must fit the width.
    const fn build(params: CrcParams) -> Self {
        let bits = params.width.bits();
        let mask = params.width.mask();
        let top = 1u64 << (bits - 1);
        let mut table = [0u64; 256];
        let mut d = 0usize;
        while d < 256 {
            let mut r = (d as u64) << (bits - 8);
            let mut i = 0;
            while i < 8 {
                r = if r & top != 0 {
                    ((r << 1) ^ params.polynomial) & mask
                } else {
                    (r << 1) & mask
                };
                i += 1;
            }
            table[d] = r;
            d += 1;
        }
        Crc { params, table }
    }

    /// The parameters.
    pub fn params(&self) -> CrcParams {
        self.params
    }

    /// The CRC of `data`, in the low [`CrcWidth::bits`] bits.
    pub fn checksum(&self, data: &[u8]) -> u64 {
        let p = &self.params;
        let bits = p.width.bits();
        let mask = p.width.mask();
        let mut r = p.initial_remainder;
        for &b in data {
            let b = if p.reflect_data { b.reverse_bits() } else { b };
            let idx = (u64::from(b) ^ (r >> (bits - 8))) & 0xFF;
            // For 8 bits `r << 8` leaves nothing inside the mask, as in C++ after truncation.
            r = (self.table[idx as usize] ^ (r << 8)) & mask;
        }
        if p.reflect_remainder {
            r = r.reverse_bits() >> (64 - bits);
        }
        r ^ p.final_xor
    }
}

static CRC16: Crc = Crc::build(CrcParams::CRC16);
static CRC32: Crc = Crc::build(CrcParams::CRC32);

/// BMv2's `crc16`: CRC-16/ARC (poly 0x8005, init 0, reflected in and out, no final xor).
pub fn crc16(data: &[u8]) -> u16 {
    CRC16.checksum(data) as u16
}

/// BMv2's `crc32`: CRC-32/ISO-HDLC, the IEEE 802.3 / zlib CRC.
pub fn crc32(data: &[u8]) -> u32 {
    CRC32.checksum(data) as u32
}

/// BMv2's `csum16`: the Internet checksum (RFC 1071) of `data` as big-endian 16-bit words, an
/// odd last byte padded with a zero after it; the value as it is written into a header.
pub fn csum16(data: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        sum += u64::from(*b) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// BMv2's `xor16`: the xor of `data`'s big-endian 16-bit words, an odd last byte being the
/// high byte of a last word.
pub fn xor16(data: &[u8]) -> u16 {
    data.chunks(2)
        .fold(0, |acc, w| acc ^ (u16::from(w[0]) << 8 | u16::from(w.get(1).copied().unwrap_or(0))))
}

/// BMv2's `identity`: the first `min(8, len)` bytes of `data` as a big-endian number (the
/// rest is ignored).
pub fn identity(data: &[u8]) -> u64 {
    data.iter().take(8).fold(0, |acc, &b| acc << 8 | u64::from(b))
}

/// The low `width` bits of `v` (all of it for a width of 64 or more): what a `bit<width>`
/// destination keeps of a value BMv2 sets into it.
pub fn truncate(v: u64, width: u32) -> u64 {
    if width >= 64 { v } else { v & ((1u64 << width) - 1) }
}

/// v1model `hash`'s result from the algorithm's 64-bit value `h`: `base + h % max` (wrapping
/// in 64 bits), `base` alone when `max` is 0 (BMv2 treats 0 as 1), cut to the destination's
/// `width` bits.
pub fn hash_result(h: u64, base: u64, max: u64, width: u32) -> u64 {
    let max = max.max(1);
    truncate((h % max).wrapping_add(base), width)
}

/// One calculation (a `hash` call site, a checksum or a selector), with its algorithm and, for
/// the custom CRCs, its own run-time parameters, like BMv2's `NamedCalculation`.
#[derive(Debug, Clone)]
pub struct Calculation {
    algorithm: HashAlgorithm,
    crc: Option<Crc>,
}

impl Calculation {
    /// A calculation of this algorithm; a custom CRC starts with BMv2's defaults
    /// ([`CrcParams::CRC16`] / [`CrcParams::CRC32`]).
    pub fn new(algorithm: HashAlgorithm) -> Self {
        let crc = match algorithm {
            HashAlgorithm::Crc16Custom => Some(CRC16.clone()),
            HashAlgorithm::Crc32Custom => Some(CRC32.clone()),
            _ => None,
        };
        Self { algorithm, crc }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> HashAlgorithm {
        self.algorithm
    }

    /// A custom CRC's current parameters.
    pub fn crc_params(&self) -> Option<CrcParams> {
        self.crc.as_ref().map(Crc::params)
    }

    /// Sets a custom CRC's parameters (`set_crc16_parameters` / `set_crc32_parameters`).
    /// On an error the calculation is unchanged.
    pub fn set_crc_params(&mut self, params: CrcParams) -> Result<(), CrcConfigError> {
        let expected = self.algorithm.custom_crc_width().ok_or(CrcConfigError::NotCustomCrc)?;
        if params.width != expected {
            return Err(CrcConfigError::WidthMismatch { expected, got: params.width });
        }
        self.crc = Some(Crc::new(params)?);
        Ok(())
    }

    /// The algorithm's 64-bit result over `data` (a [`BitBuf`]'s bytes). `rng` is called once
    /// for [`HashAlgorithm::Random`] and never otherwise.
    pub fn compute(&self, data: &[u8], rng: &mut dyn FnMut() -> u64) -> u64 {
        match self.algorithm {
            HashAlgorithm::Crc32 => u64::from(crc32(data)),
            HashAlgorithm::Crc16 => u64::from(crc16(data)),
            HashAlgorithm::Crc16Custom | HashAlgorithm::Crc32Custom => {
                self.crc.as_ref().map_or(0, |c| c.checksum(data))
            }
            HashAlgorithm::Random => rng(),
            HashAlgorithm::Identity => identity(data),
            HashAlgorithm::Csum16 => u64::from(csum16(data)),
            HashAlgorithm::Xor16 => u64::from(xor16(data)),
        }
    }

    /// v1model `hash(result, algo, base, data, max)` for a `bit<width>` result:
    /// [`hash_result`] of [`Calculation::compute`].
    pub fn hash(
        &self,
        data: &[u8],
        base: u64,
        max: u64,
        width: u32,
        rng: &mut dyn FnMut() -> u64,
    ) -> u64 {
        hash_result(self.compute(data, rng), base, max, width)
    }
}

/// v1model `verify_checksum` / `verify_checksum_with_payload`: whether the packet passes.
///
/// `condition` is the call's first argument and `target_valid` whether the header holding the
/// checksum field is valid; either being false passes (BMv2 skips the check). Otherwise the
/// calculation's result over `data` (the list without the checksum field, plus the payload
/// for the `_with_payload` form) must equal `checksum`, the field's value.
pub fn verify_checksum(
    calc: &Calculation,
    condition: bool,
    target_valid: bool,
    data: &[u8],
    checksum: u64,
    rng: &mut dyn FnMut() -> u64,
) -> bool {
    !condition || !target_valid || calc.compute(data, rng) == checksum
}

/// v1model `update_checksum` / `update_checksum_with_payload`: the checksum field's new value,
/// cut to its `width`, or `None` (field unchanged) when `condition` is false.
pub fn update_checksum(
    calc: &Calculation,
    condition: bool,
    data: &[u8],
    width: u32,
    rng: &mut dyn FnMut() -> u64,
) -> Option<u64> {
    condition.then(|| truncate(calc.compute(data, rng), width))
}

/// What a meter counts: v1model's `MeterType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MeterKind {
    /// Each packet takes one token.
    Packets,
    /// Each packet takes as many tokens as its length in bytes.
    Bytes,
}

/// A meter's verdict, with v1model's values (`GREEN = 0`, `YELLOW = 1`, `RED = 2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MeterColor {
    /// Within the committed rate.
    Green = 0,
    /// Above the committed rate, within the peak rate.
    Yellow = 1,
    /// Above the peak rate.
    Red = 2,
}

impl MeterColor {
    /// The value written to `execute_meter`'s result.
    pub fn value(self) -> u8 {
        self as u8
    }
}

/// One rate of a meter, as `simple_switch_CLI meter_set_rates <meter> <index> <rate>:<burst>
/// ...` gives it (BMv2's `rate_config_t`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeterRate {
    /// Tokens (packets or bytes) per microsecond; a float (`float()` in the CLI, a `double`
    /// in BMv2).
    pub per_us: f64,
    /// The bucket's size in tokens.
    pub burst: u64,
}

impl MeterRate {
    /// A rate of `per_us` tokens a microsecond with a bucket of `burst` tokens.
    pub fn new(per_us: f64, burst: u64) -> Self {
        Self { per_us, burst }
    }
}

/// Why [`Meter::set_rates`] refused a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterError {
    /// The committed rate is above the peak rate (BMv2's `INVALID_INFO_RATE_VALUE`).
    CommittedAbovePeak,
    /// A rate is negative, infinite or not a number (BMv2 does not check; converting the
    /// resulting token count is undefined behaviour in C++).
    InvalidRate,
}

impl fmt::Display for MeterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeterError::CommittedAbovePeak => {
                f.write_str("the committed rate is above the peak rate")
            }
            MeterError::InvalidRate => f.write_str("a meter rate is negative or not finite"),
        }
    }
}

impl std::error::Error for MeterError {}

/// One token bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    rate: MeterRate,
    tokens: u64,
    /// Tokens credited since the time origin, as of the last update.
    credited: u64,
}

impl Bucket {
    fn new(rate: MeterRate) -> Self {
        Self { rate, tokens: rate.burst, credited: 0 }
    }

    /// Credits the tokens earned up to `micros` since the origin; the bucket holds at most
    /// its burst.
    fn refill(&mut self, micros: u64) {
        let since_origin = (micros as f64 * self.rate.per_us) as u64;
        let new = since_origin.saturating_sub(self.credited);
        self.credited = self.credited.max(since_origin);
        self.tokens = self.tokens.saturating_add(new).min(self.rate.burst);
    }
}

/// A two-rate three-colour marker (RFC 2698, colour-blind), bit-exact with BMv2's `Meter`
/// with two rates.
///
/// The rules, from `src/bm_sim/meters.cpp`:
///
/// - Unconfigured, a meter marks everything [`MeterColor::Green`].
/// - [`Meter::set_rates`] takes the committed (CIR, CBS) and peak (PIR, PBS) rates; both
///   buckets start full (`tokens = burst_size`). The committed rate may not exceed the peak.
/// - Time is measured from the meter's origin ([`Meter::with_origin`],
///   [`Meter::reset_time_origin`]; BMv2: the meter's creation): `micros` = elapsed
///   nanoseconds / 1000, truncated (`duration_cast<microseconds>`).
/// - Tokens are not added per interval but recomputed from the origin: a bucket has earned
///   `floor(micros as f64 * rate)` tokens since the origin (`static_cast<uint64_t>` of the
///   `double` product); each packet credits the difference from the last count and caps the
///   bucket at its burst. So no rounding error accumulates, and a bucket that saw no packet
///   for a while is simply full.
/// - A packet needs 1 token ([`MeterKind::Packets`]) or its length in bytes
///   ([`MeterKind::Bytes`]; BMv2 uses the packet's ingress length).
/// - The peak bucket is checked first: fewer tokens than needed → [`MeterColor::Red`], and
///   nothing is taken from either bucket. Otherwise the peak bucket is debited and the
///   committed bucket checked: too few → [`MeterColor::Yellow`] (the committed bucket is left
///   as it is); else it is debited too → [`MeterColor::Green`]. (BMv2 stores the rates
///   reversed, PIR first, and stops at the first bucket that is short.) A packet bigger than
///   PBS is always red.
#[derive(Debug, Clone, PartialEq)]
pub struct Meter {
    kind: MeterKind,
    /// (committed, peak), when configured.
    buckets: Option<(Bucket, Bucket)>,
    origin_ns: u64,
}

impl Meter {
    /// An unconfigured meter whose time origin is 0 on the caller's clock.
    pub fn new(kind: MeterKind) -> Self {
        Self::with_origin(kind, 0)
    }

    /// An unconfigured meter whose time origin is `origin_ns` on the caller's clock (BMv2
    /// starts a meter's clock when the meter is created).
    pub fn with_origin(kind: MeterKind, origin_ns: u64) -> Self {
        Self { kind, buckets: None, origin_ns }
    }

    /// What the meter counts.
    pub fn kind(&self) -> MeterKind {
        self.kind
    }

    /// Configures the meter (`meter_set_rates`): the committed rate and bucket, then the peak
    /// ones, in the CLI's order. Both buckets start full. On an error the meter is unchanged
    /// (BMv2 would have half-written a previously configured meter).
    pub fn set_rates(&mut self, committed: MeterRate, peak: MeterRate) -> Result<(), MeterError> {
        let valid = |r: MeterRate| r.per_us.is_finite() && r.per_us >= 0.0;
        if !valid(committed) || !valid(peak) {
            return Err(MeterError::InvalidRate);
        }
        if committed.per_us > peak.per_us {
            return Err(MeterError::CommittedAbovePeak);
        }
        self.buckets = Some((Bucket::new(committed), Bucket::new(peak)));
        Ok(())
    }

    /// The configured (committed, peak) rates (`meter_get_rates`), if any.
    pub fn rates(&self) -> Option<(MeterRate, MeterRate)> {
        self.buckets.map(|(c, p)| (c.rate, p.rate))
    }

    /// Forgets the configuration: the meter marks green again.
    pub fn reset_rates(&mut self) {
        self.buckets = None;
    }

    /// Moves the time origin to `now_ns`.
    pub fn reset_time_origin(&mut self, now_ns: u64) {
        self.origin_ns = now_ns;
    }

    /// Meters a packet of `len` bytes (ignored when counting packets) arriving at `now_ns` on
    /// the caller's clock. A time before the origin counts as the origin, and a time earlier
    /// than a previous one earns no tokens (BMv2 asserts the clock is monotonic).
    pub fn execute(&mut self, now_ns: u64, len: u64) -> MeterColor {
        let Some((committed, peak)) = self.buckets.as_mut() else {
            return MeterColor::Green;
        };
        let micros = now_ns.saturating_sub(self.origin_ns) / 1000;
        let need = match self.kind {
            MeterKind::Packets => 1,
            MeterKind::Bytes => len,
        };
        peak.refill(micros);
        if peak.tokens < need {
            return MeterColor::Red;
        }
        peak.tokens -= need;
        committed.refill(micros);
        if committed.tokens < need {
            return MeterColor::Yellow;
        }
        committed.tokens -= need;
        MeterColor::Green
    }
}
