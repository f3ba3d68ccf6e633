//! RoCEv2 (IBTA Vol 1 chapter 9, Annex A17): the Base Transport Header, the extension headers,
//! the opcode table, the CNP, the ICRC, and [`RocePacket`], a walker over the bytes after UDP.
//!
//! - [`bth`]: BTH view and `Repr` (12 bytes).
//! - [`ext`]: RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, FETH views and `Repr`s.
//! - [`cnp`]: the 16 reserved bytes that follow the BTH of a CNP.
//! - [`opcode`]: which extension headers each opcode carries, in order.
//! - [`icrc`]: invariant CRC compute / verify / fill over an IPv4 or IPv6 underlay.
//! - [`packet`]: [`RocePacket`], the checked walk from BTH to payload.
//!
//! The Linux soft-RoCE driver (rxe) and scapy's `contrib.roce` are the behavioural references;
//! `tests/roce_icrc_scapy.rs` checks our ICRC against scapy's.

/// UDP destination port of RoCEv2.
pub const UDP_PORT: u16 = 4791;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Largest 24-bit value (QPN, PSN, MSN).
pub const U24_MAX: u32 = 0x00ff_ffff;

/// The view boilerplate shared by every fixed-length RoCE header: the struct, `new_unchecked`,
/// `new_checked`, `check_len`, `into_inner`, `header_len`, and big-endian field helpers.
macro_rules! fixed_header {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap a buffer without checking its length; accessors may panic until
            /// `check_len` passes.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wrap a buffer, checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let h = Self::new_unchecked(buffer);
                h.check_len()?;
                Ok(h)
            }

            /// `Err(Truncated)` when the buffer is shorter than the header.
            pub fn check_len(&self) -> $crate::Result<()> {
                $crate::Error::need($len, self.buffer.as_ref().len())
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// Length of this header.
            pub const fn header_len(&self) -> usize {
                $len
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn get_u8(&self, off: usize) -> u8 {
                self.buffer.as_ref()[off]
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn get_u24(&self, off: usize) -> u32 {
                let b = self.buffer.as_ref();
                (u32::from(b[off]) << 16) | (u32::from(b[off + 1]) << 8) | u32::from(b[off + 2])
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn get_u16(&self, off: usize) -> u16 {
                let b = self.buffer.as_ref();
                u16::from_be_bytes([b[off], b[off + 1]])
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn get_u32(&self, off: usize) -> u32 {
                let b = self.buffer.as_ref();
                u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn get_u64(&self, off: usize) -> u64 {
                let b = self.buffer.as_ref();
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[off..off + 8]);
                u64::from_be_bytes(a)
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn put_u8(&mut self, off: usize, v: u8) {
                self.buffer.as_mut()[off] = v;
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn put_u24(&mut self, off: usize, v: u32) {
                let b = self.buffer.as_mut();
                b[off] = (v >> 16) as u8;
                b[off + 1] = (v >> 8) as u8;
                b[off + 2] = v as u8;
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn put_u16(&mut self, off: usize, v: u16) {
                self.buffer.as_mut()[off..off + 2].copy_from_slice(&v.to_be_bytes());
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn put_u32(&mut self, off: usize, v: u32) {
                self.buffer.as_mut()[off..off + 4].copy_from_slice(&v.to_be_bytes());
            }

            #[allow(dead_code, reason = "not every header has a field of every width")]
            fn put_u64(&mut self, off: usize, v: u64) {
                self.buffer.as_mut()[off..off + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
    };
}

/// `Err(BadValue)` when `value` does not fit 24 bits.
pub(crate) fn check_u24(value: u32, field: &'static str) -> crate::Result<()> {
    if value > U24_MAX { Err(crate::Error::BadValue { field }) } else { Ok(()) }
}

pub mod bth;
pub mod cnp;
pub mod ext;
pub mod icrc;
pub mod opcode;
pub mod packet;

pub use opcode::{ExtHeader, OpcodeInfo};
pub use packet::{RocePacket, RoceRepr};
