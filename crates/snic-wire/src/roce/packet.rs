//! [`RocePacket`]: a checked walk over the UDP payload of a RoCEv2 packet (BTH, the extension
//! headers its opcode implies, payload, pad, ICRC).

use super::bth;
use super::ext::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, FethRepr, IethRepr, ImmDtRepr, RethRepr,
};
use super::opcode::{ExtHeader, OpcodeInfo};
use super::{ICRC_LEN, ext};
use crate::{Error, Result};

/// The most extension headers one opcode carries.
pub const MAX_EXT: usize = 2;

/// A parsed RoCEv2 packet: the BTH, its extension headers and where the payload lies.
///
/// Built by [`RocePacket::parse`] from the bytes after the UDP header up to the end of the ICRC
/// (trim Ethernet padding first: use the UDP length). The ICRC itself is not verified here (it
/// needs the IP and UDP headers: see [`super::icrc::verify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<'a> {
    bytes: &'a [u8],
    info: &'static OpcodeInfo,
    /// Extension headers and their offsets from the BTH.
    ext: [(ExtHeader, u16); MAX_EXT],
    ext_count: u8,
    header_len: usize,
    payload_len: usize,
    /// The BTH and the parsed extension headers (at most one of each kind per opcode), in the
    /// form [`RoceRepr::emit`] takes.
    headers: RoceRepr,
}

/// Where [`RocePacket::parse`] failed, for the frame walker (`stack`) to name the layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalkError {
    /// The opcode's table entry, when the BTH parsed.
    pub info: Option<&'static OpcodeInfo>,
    /// How many of `info.ext` parsed before the failure.
    pub parsed: usize,
    /// The extension header that failed; `None` when the BTH or the length rules failed.
    pub ext: Option<ExtHeader>,
    /// What was wrong (offsets count from the start of the BTH).
    pub error: Error,
}

impl<'a> RocePacket<'a> {
    /// Parse the bytes from the BTH through the ICRC.
    ///
    /// The last 4 bytes are taken as the ICRC first, then the BTH and its extension headers are
    /// read from what is left: a packet whose headers run into the ICRC's room fails at the
    /// header that does not fit. `Truncated { need, got }` counts through the ICRC (`need` is
    /// that header's end plus 4, `got` the length of `bytes`).
    ///
    /// Errors: `Truncated` as above; `BadOpcode`/`BadVersion` from the BTH; `BadValue` from an
    /// AETH syndrome; `BadTotalLen` when an opcode that carries no payload has bytes between its
    /// headers and the ICRC, an RC ATOMIC WRITE's payload is not 8 bytes, or a pad count is
    /// larger than the payload; `BadValue { field: "bth.pad_count" }` for a pad count on an
    /// opcode whose payload length is fixed.
    pub fn parse(bytes: &'a [u8]) -> Result<RocePacket<'a>> {
        Self::walk(bytes).map_err(|e| e.error)
    }

    /// [`Self::parse`], saying which header failed.
    pub(crate) fn walk(bytes: &'a [u8]) -> core::result::Result<RocePacket<'a>, WalkError> {
        let fail = |info, parsed, ext, error| WalkError { info, parsed, ext, error };
        // Headers may not use the ICRC's 4 bytes.
        let room = bytes.len().saturating_sub(ICRC_LEN);
        let short = |end: usize| Error::Truncated { need: end + ICRC_LEN, got: bytes.len() };
        let hdrs = &bytes[..room];
        if room < bth::HEADER_LEN {
            return Err(fail(None, 0, None, short(bth::HEADER_LEN)));
        }
        let bth = bth::Header::new_checked(hdrs)
            .and_then(|h| bth::Repr::parse(&h))
            .map_err(|e| fail(None, 0, None, e))?;
        let info =
            bth.info().ok_or_else(|| fail(None, 0, None, Error::BadOpcode { got: bth.opcode }))?;
        let header_len = bth::HEADER_LEN + info.ext_len();
        let mut p = RocePacket {
            bytes,
            info,
            ext: [(ExtHeader::Cnp, 0); MAX_EXT],
            ext_count: 0,
            header_len,
            payload_len: 0,
            headers: RoceRepr {
                bth,
                reth: None,
                aeth: None,
                atomic_eth: None,
                atomic_ack_eth: None,
                imm_dt: None,
                ieth: None,
                deth: None,
                feth: None,
            },
        };
        let mut off = bth::HEADER_LEN;
        for (i, &e) in info.ext.iter().enumerate() {
            let end = off + e.header_len();
            if i >= MAX_EXT {
                return Err(fail(Some(info), i, Some(e), Error::TooManyHeaders));
            }
            let h = hdrs.get(off..end).ok_or_else(|| fail(Some(info), i, Some(e), short(end)))?;
            p.parse_ext(e, h).map_err(|err| fail(Some(info), i, Some(e), err))?;
            // `off` is below 64 bytes: the longest header chain is 12 + 20.
            p.ext[i] = (e, off as u16);
            p.ext_count += 1;
            off = end;
        }
        let all = info.ext.len();
        let body = room - header_len;
        let pad = usize::from(bth.pad_count);
        let total = Error::BadTotalLen { got: bytes.len() };
        match info.fixed_payload_len() {
            Some(n) if body != n => return Err(fail(Some(info), all, None, total)),
            Some(_) if pad != 0 => {
                let e = Error::BadValue { field: "bth.pad_count" };
                return Err(fail(Some(info), all, None, e));
            }
            _ if pad > body => return Err(fail(Some(info), all, None, total)),
            _ => {}
        }
        p.payload_len = body - pad;
        Ok(p)
    }

    /// Parse one extension header `h` (exactly its length) into its field.
    fn parse_ext(&mut self, e: ExtHeader, h: &[u8]) -> Result<()> {
        match e {
            ExtHeader::Reth => {
                self.headers.reth = Some(RethRepr::parse(&ext::Reth::new_checked(h)?)?)
            }
            ExtHeader::Aeth => {
                self.headers.aeth = Some(AethRepr::parse(&ext::Aeth::new_checked(h)?)?)
            }
            ExtHeader::AtomicEth => {
                self.headers.atomic_eth =
                    Some(AtomicEthRepr::parse(&ext::AtomicEth::new_checked(h)?)?)
            }
            ExtHeader::AtomicAckEth => {
                self.headers.atomic_ack_eth =
                    Some(AtomicAckEthRepr::parse(&ext::AtomicAckEth::new_checked(h)?)?)
            }
            ExtHeader::ImmDt => {
                self.headers.imm_dt = Some(ImmDtRepr::parse(&ext::ImmDt::new_checked(h)?)?)
            }
            ExtHeader::Ieth => {
                self.headers.ieth = Some(IethRepr::parse(&ext::Ieth::new_checked(h)?)?)
            }
            ExtHeader::Deth => {
                self.headers.deth = Some(DethRepr::parse(&ext::Deth::new_checked(h)?)?)
            }
            ExtHeader::Feth => {
                self.headers.feth = Some(FethRepr::parse(&ext::Feth::new_checked(h)?)?)
            }
            ExtHeader::Cnp => {}
        }
        Ok(())
    }

    /// The BTH.
    pub const fn bth(&self) -> &bth::Repr {
        &self.headers.bth
    }

    /// The BTH and the extension headers (those the opcode does not carry are `None`).
    pub const fn headers(&self) -> &RoceRepr {
        &self.headers
    }

    /// The opcode's table entry.
    pub const fn info(&self) -> &'static OpcodeInfo {
        self.info
    }

    /// Extension headers and their offsets from the start of the BTH, in wire order.
    pub fn ext_headers(&self) -> &[(ExtHeader, u16)] {
        &self.ext[..usize::from(self.ext_count)]
    }

    /// Length of BTH and extension headers (the payload starts here).
    pub const fn header_len(&self) -> usize {
        self.header_len
    }

    /// The payload, without pad bytes and ICRC.
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.header_len..self.header_len + self.payload_len]
    }

    /// The pad bytes after the payload (0 to 3 of them).
    pub fn pad(&self) -> &'a [u8] {
        let start = self.header_len + self.payload_len;
        &self.bytes[start..start + usize::from(self.headers.bth.pad_count)]
    }

    /// The ICRC trailer as carried (read least-significant byte first, like
    /// [`super::icrc::compute`] returns it).
    pub fn icrc(&self) -> u32 {
        let n = self.bytes.len();
        let t = &self.bytes[n - ICRC_LEN..];
        u32::from_le_bytes([t[0], t[1], t[2], t[3]])
    }

    /// The headers as a [`RoceRepr`] (what [`RoceRepr::emit`] would need to rebuild this packet).
    pub const fn repr(&self) -> RoceRepr {
        self.headers
    }

    /// All bytes from the BTH through the ICRC.
    pub const fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// The headers of one RoCEv2 packet, to build one: the BTH and the extension headers its opcode
/// needs (the others `None`). [`RoceRepr::emit`] writes BTH, extension headers, payload, pad and
/// a zero ICRC (fill it with [`super::icrc::fill`] once the IP and UDP headers are in front).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceRepr {
    /// The BTH. Its pad count is computed by [`Self::emit`] from the payload length.
    pub bth: bth::Repr,
    /// RETH, for opcodes that carry one.
    pub reth: Option<RethRepr>,
    /// AETH, for opcodes that carry one.
    pub aeth: Option<AethRepr>,
    /// AtomicETH, for opcodes that carry one.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AtomicAckETH, for opcodes that carry one.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// ImmDt, for opcodes that carry one.
    pub imm_dt: Option<ImmDtRepr>,
    /// IETH, for opcodes that carry one.
    pub ieth: Option<IethRepr>,
    /// DETH, for opcodes that carry one.
    pub deth: Option<DethRepr>,
    /// FETH, for opcodes that carry one (RC FLUSH).
    pub feth: Option<FethRepr>,
}

/// Pad bytes that bring a payload of `len` bytes to a multiple of 4 (the BTH pad count).
pub const fn pad_for(len: usize) -> usize {
    (4 - len % 4) % 4
}

impl RoceRepr {
    /// A repr with only a BTH (for opcodes without extension headers); set the others by hand.
    pub const fn new(bth: bth::Repr) -> RoceRepr {
        RoceRepr {
            bth,
            reth: None,
            aeth: None,
            atomic_eth: None,
            atomic_ack_eth: None,
            imm_dt: None,
            ieth: None,
            deth: None,
            feth: None,
        }
    }

    /// Bytes [`Self::emit`] writes for a payload of `payload_len` bytes: headers, payload, pad,
    /// ICRC. `None` for an opcode outside the table.
    pub fn buffer_len(&self, payload_len: usize) -> Option<usize> {
        let info = self.bth.info()?;
        Some(bth::HEADER_LEN + info.ext_len() + payload_len + pad_for(payload_len) + ICRC_LEN)
    }

    /// Write BTH, extension headers (in the opcode's order), payload, zero pad and a zero ICRC
    /// into the start of `buf`; returns the bytes written.
    ///
    /// Errors: `BadOpcode` for an opcode outside the table; `BadValue { field: "roce.<hdr>" }`
    /// when a header the opcode needs is `None` or one it does not carry is `Some`;
    /// `BadTotalLen` for a payload given to an opcode that carries none, or of a length other
    /// than the opcode's fixed one (8 bytes for RC ATOMIC WRITE); `Truncated` when `buf` is too
    /// short; the headers' own `emit` errors.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let info = self.bth.info().ok_or(Error::BadOpcode { got: self.bth.opcode })?;
        if info.fixed_payload_len().is_some_and(|n| n != payload.len()) {
            return Err(Error::BadTotalLen { got: payload.len() });
        }
        let wants = |e: ExtHeader| info.ext.contains(&e);
        let present = [
            (ExtHeader::Reth, self.reth.is_some(), "roce.reth"),
            (ExtHeader::Aeth, self.aeth.is_some(), "roce.aeth"),
            (ExtHeader::AtomicEth, self.atomic_eth.is_some(), "roce.atomic_eth"),
            (ExtHeader::AtomicAckEth, self.atomic_ack_eth.is_some(), "roce.atomic_ack_eth"),
            (ExtHeader::ImmDt, self.imm_dt.is_some(), "roce.imm_dt"),
            (ExtHeader::Ieth, self.ieth.is_some(), "roce.ieth"),
            (ExtHeader::Deth, self.deth.is_some(), "roce.deth"),
            (ExtHeader::Feth, self.feth.is_some(), "roce.feth"),
        ];
        for (e, is, field) in present {
            if wants(e) != is {
                return Err(Error::BadValue { field });
            }
        }
        let pad = pad_for(payload.len());
        let total = bth::HEADER_LEN + info.ext_len() + payload.len() + pad + ICRC_LEN;
        Error::need(total, buf.len())?;
        let buf = &mut buf[..total];
        let b = bth::Repr { pad_count: pad as u8, ..self.bth };
        b.emit(&mut bth::Header::new_unchecked(&mut buf[..bth::HEADER_LEN]))?;
        let mut off = bth::HEADER_LEN;
        for &e in info.ext {
            let h = &mut buf[off..off + e.header_len()];
            match e {
                ExtHeader::Reth => {
                    emit_some(self.reth, |r| r.emit(&mut ext::Reth::new_unchecked(h)))?
                }
                ExtHeader::Aeth => {
                    emit_some(self.aeth, |r| r.emit(&mut ext::Aeth::new_unchecked(h)))?
                }
                ExtHeader::AtomicEth => {
                    emit_some(self.atomic_eth, |r| r.emit(&mut ext::AtomicEth::new_unchecked(h)))?
                }
                ExtHeader::AtomicAckEth => emit_some(self.atomic_ack_eth, |r| {
                    r.emit(&mut ext::AtomicAckEth::new_unchecked(h))
                })?,
                ExtHeader::ImmDt => {
                    emit_some(self.imm_dt, |r| r.emit(&mut ext::ImmDt::new_unchecked(h)))?
                }
                ExtHeader::Ieth => {
                    emit_some(self.ieth, |r| r.emit(&mut ext::Ieth::new_unchecked(h)))?
                }
                ExtHeader::Deth => {
                    emit_some(self.deth, |r| r.emit(&mut ext::Deth::new_unchecked(h)))?
                }
                ExtHeader::Feth => {
                    emit_some(self.feth, |r| r.emit(&mut ext::Feth::new_unchecked(h)))?
                }
                ExtHeader::Cnp => h.fill(0),
            }
            off += e.header_len();
        }
        buf[off..off + payload.len()].copy_from_slice(payload);
        buf[off + payload.len()..].fill(0);
        Ok(total)
    }
}

/// Emit `r` when present (presence was checked against the opcode before).
fn emit_some<R: Copy>(r: Option<R>, f: impl FnOnce(R) -> Result<()>) -> Result<()> {
    match r {
        Some(r) => f(r),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::ext::Syndrome;
    use crate::roce::opcode;

    #[test]
    fn write_only_with_pad() {
        // RC_RDMA_WRITE_ONLY, pad 1, QP 5, PSN 7; RETH va 0x1000 rkey 9 len 3; payload "abc",
        // one pad byte, ICRC 0x11223344 (LSB first).
        let mut b = [0u8; 12 + 16 + 3 + 1 + 4];
        b[..12].copy_from_slice(&[0x0a, 0x10, 0xff, 0xff, 0, 0, 0, 5, 0, 0, 0, 7]);
        b[12 + 6] = 0x10;
        b[12 + 11] = 9;
        b[12 + 15] = 3;
        b[28..31].copy_from_slice(b"abc");
        b[32..].copy_from_slice(&[0x44, 0x33, 0x22, 0x11]);
        let p = RocePacket::parse(&b).unwrap();
        assert_eq!(p.bth().opcode, opcode::RC_RDMA_WRITE_ONLY);
        assert_eq!(p.info().name, "RC_RDMA_WRITE_ONLY");
        assert_eq!(p.headers().reth, Some(RethRepr { va: 0x1000, rkey: 9, dma_len: 3 }));
        assert_eq!(p.ext_headers(), &[(ExtHeader::Reth, 12)]);
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.payload(), b"abc");
        assert_eq!(p.pad(), &[0]);
        assert_eq!(p.icrc(), 0x1122_3344);
    }

    #[test]
    fn atomic_ack() {
        let mut b = [0u8; 12 + 4 + 8 + 4];
        b[0] = opcode::RC_ATOMIC_ACKNOWLEDGE;
        b[12] = 0x1f; // ACK, credits 31
        b[15] = 2; // MSN 2
        b[23] = 0x2a;
        let p = RocePacket::parse(&b).unwrap();
        assert_eq!(
            p.headers().aeth,
            Some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 2 })
        );
        assert_eq!(p.headers().atomic_ack_eth, Some(AtomicAckEthRepr { orig_data: 0x2a }));
        assert_eq!(p.ext_headers(), &[(ExtHeader::Aeth, 12), (ExtHeader::AtomicAckEth, 16)]);
        assert!(p.payload().is_empty());
    }

    #[test]
    fn repr_emit_round_trip() {
        let mut r = RoceRepr::new(bth::Repr {
            opcode: opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            solicited: true,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: 9,
        });
        let mut buf = [0xeeu8; 64];
        assert_eq!(r.emit(&mut buf, b"hello"), Err(Error::BadValue { field: "roce.imm_dt" }));
        r.imm_dt = Some(ImmDtRepr { imm: 0x0102_0304 });
        assert_eq!(r.buffer_len(5), Some(12 + 4 + 5 + 3 + 4));
        let n = r.emit(&mut buf, b"hello").unwrap();
        assert_eq!(n, 28);
        assert_eq!(
            &buf[..n],
            &[
                0x05, 0xb0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 9, // BTH, pad 3
                1, 2, 3, 4, // ImmDt
                b'h', b'e', b'l', b'l', b'o', 0, 0, 0, // payload + pad
                0, 0, 0, 0, // ICRC placeholder
            ]
        );
        let p = RocePacket::parse(&buf[..n]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.repr(), RoceRepr { bth: bth::Repr { pad_count: 3, ..r.bth }, ..r });
        assert_eq!(r.emit(&mut buf[..27], b"hello"), Err(Error::Truncated { need: 28, got: 27 }));
        r.reth = Some(RethRepr { va: 0, rkey: 0, dma_len: 0 });
        assert_eq!(r.emit(&mut buf, b"hello"), Err(Error::BadValue { field: "roce.reth" }));
        let ack = RoceRepr {
            aeth: Some(AethRepr { syndrome: Syndrome::Ack { credits: 1 }, msn: 1 }),
            ..RoceRepr::new(bth::Repr { opcode: opcode::RC_ACKNOWLEDGE, ..r.bth })
        };
        assert_eq!(ack.emit(&mut buf, b"x"), Err(Error::BadTotalLen { got: 1 }));
        assert_eq!(ack.emit(&mut buf, b""), Ok(20));
    }

    #[test]
    fn errors() {
        let mut b = [0u8; 12 + 16 + 4];
        b[0] = opcode::RC_RDMA_READ_REQUEST;
        assert!(RocePacket::parse(&b).is_ok());
        assert_eq!(RocePacket::parse(&b[..31]), Err(Error::Truncated { need: 32, got: 31 }));
        let mut long = [0u8; 12 + 16 + 1 + 4];
        long[0] = opcode::RC_RDMA_READ_REQUEST;
        assert_eq!(RocePacket::parse(&long), Err(Error::BadTotalLen { got: 33 }));
        // SEND_ONLY with pad 3 but only 2 payload bytes.
        let mut s = [0u8; 12 + 2 + 4];
        s[0] = opcode::RC_SEND_ONLY;
        s[1] = 0x30;
        assert_eq!(RocePacket::parse(&s), Err(Error::BadTotalLen { got: 18 }));
        b[0] = 0x15;
        assert_eq!(RocePacket::parse(&b), Err(Error::BadOpcode { got: 0x15 }));
        // ACK with a reserved syndrome.
        let mut a = [0u8; 12 + 4 + 4];
        a[0] = opcode::RC_ACKNOWLEDGE;
        a[12] = 0x40;
        assert_eq!(RocePacket::parse(&a), Err(Error::BadValue { field: "aeth.syndrome" }));
    }

    #[test]
    fn rc_flush_feth_then_reth() {
        // BTH(RC_FLUSH) + FETH(sel 0, placement 2 = persistence) + RETH, no payload, ICRC.
        let mut b = [0u8; 12 + 4 + 16 + 4];
        b[0] = opcode::RC_FLUSH;
        b[15] = 0x02;
        b[16 + 7] = 0x40; // va 0x40
        b[16 + 11] = 7; // rkey 7
        b[16 + 15] = 64; // length 64
        let p = RocePacket::parse(&b).unwrap();
        assert_eq!(p.ext_headers(), &[(ExtHeader::Feth, 12), (ExtHeader::Reth, 16)]);
        assert_eq!(p.headers().feth, Some(FethRepr { placement_type: 2, selectivity_level: 0 }));
        assert_eq!(p.headers().reth, Some(RethRepr { va: 0x40, rkey: 7, dma_len: 64 }));
        assert_eq!(p.header_len(), 32);
        assert!(p.payload().is_empty());
        let mut out = [0xeeu8; 36];
        assert_eq!(p.repr().emit(&mut out, b""), Ok(36));
        assert_eq!(out, b);
        // A FLUSH carries no payload.
        let mut long = [0u8; 12 + 4 + 16 + 4 + 4];
        long[..32].copy_from_slice(&b[..32]);
        assert_eq!(RocePacket::parse(&long), Err(Error::BadTotalLen { got: 40 }));
        // FETH present but the RETH runs into the ICRC.
        assert_eq!(RocePacket::parse(&b[..35]), Err(Error::Truncated { need: 36, got: 35 }));
        assert_eq!(
            RocePacket::walk(&b[..35]).unwrap_err(),
            WalkError {
                info: opcode::lookup(opcode::RC_FLUSH),
                parsed: 1,
                ext: Some(ExtHeader::Reth),
                error: Error::Truncated { need: 36, got: 35 },
            }
        );
    }

    #[test]
    fn rc_atomic_write_needs_exactly_8_bytes() {
        let mut b = [0u8; 12 + 16 + 8 + 4];
        b[0] = opcode::RC_ATOMIC_WRITE;
        b[12 + 15] = 8;
        b[28..36].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        let p = RocePacket::parse(&b).unwrap();
        assert_eq!(p.headers().reth, Some(RethRepr { va: 0, rkey: 0, dma_len: 8 }));
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        let r = RoceRepr { reth: p.headers().reth, ..RoceRepr::new(*p.bth()) };
        // 4 bytes of payload instead of 8.
        let mut short = [0u8; 12 + 16 + 4 + 4];
        short[0] = opcode::RC_ATOMIC_WRITE;
        assert_eq!(RocePacket::parse(&short), Err(Error::BadTotalLen { got: 36 }));
        // 5 payload bytes + pad count 3 make 8 bytes, still not one 64-bit word.
        b[1] = 0x30;
        assert_eq!(RocePacket::parse(&b), Err(Error::BadValue { field: "bth.pad_count" }));
        let mut out = [0u8; 64];
        assert_eq!(r.emit(&mut out, &[9; 7]), Err(Error::BadTotalLen { got: 7 }));
        assert_eq!(r.emit(&mut out, &[9; 8]), Ok(40));
    }
}
