//! The RoCEv2 Congestion Notification Packet (Annex A17.9.3): a BTH with opcode 0x81, then 16
//! reserved bytes, then the ICRC. The notification point sends it to the reaction point's QP
//! (BTH destination QP) when it sees ECN-marked RoCEv2 packets; BECN is set, PSN and the other
//! BTH fields are zero, P_Key is the flow's.

use super::bth;
use super::opcode;
use crate::{Error, Result};

/// Length of the reserved block after the BTH.
pub const RESERVED_LEN: usize = 16;

/// Length of a CNP from BTH through the reserved block (the ICRC follows).
pub const CNP_LEN: usize = bth::HEADER_LEN + RESERVED_LEN;

fixed_header!(
    /// The 16 reserved bytes of a CNP.
    Reserved,
    RESERVED_LEN
);

impl<T: AsRef<[u8]>> Reserved<T> {
    /// True when all 16 bytes are zero (senders must write zeros; receivers ignore them).
    pub fn is_zero(&self) -> bool {
        self.buffer.as_ref()[..RESERVED_LEN].iter().all(|&b| b == 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reserved<T> {
    /// Zero the 16 bytes.
    pub fn clear(&mut self) {
        self.buffer.as_mut()[..RESERVED_LEN].fill(0);
    }
}

/// A CNP: the fields that matter (destination QP and partition key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The QP the congestion notification is for (24 bits).
    pub dest_qp: u32,
    /// Partition key.
    pub pkey: u16,
}

impl Repr {
    /// Read a CNP from the bytes starting at its BTH (at least [`CNP_LEN`] of them).
    /// `Err(BadOpcode)` unless the opcode is 0x81; BTH errors as [`bth::Repr::parse`].
    pub fn parse(bytes: &[u8]) -> Result<Repr> {
        Error::need(CNP_LEN, bytes.len())?;
        let b = bth::Repr::parse(&bth::Header::new_checked(bytes)?)?;
        if b.opcode != opcode::CNP {
            return Err(Error::BadOpcode { got: b.opcode });
        }
        Ok(Repr { dest_qp: b.dest_qp, pkey: b.pkey })
    }

    /// The BTH of this CNP (BECN set, everything else zero).
    pub const fn bth(&self) -> bth::Repr {
        bth::Repr {
            opcode: opcode::CNP,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: self.pkey,
            fecn: false,
            becn: true,
            dest_qp: self.dest_qp,
            ack_req: false,
            psn: 0,
        }
    }

    /// Bytes [`Self::emit`] writes (BTH and reserved block, not the ICRC).
    pub const fn buffer_len(&self) -> usize {
        CNP_LEN
    }

    /// Write the BTH and the zeroed reserved block into `bytes` (at least [`CNP_LEN`] long).
    pub fn emit(&self, bytes: &mut [u8]) -> Result<()> {
        Error::need(CNP_LEN, bytes.len())?;
        let (h, rest) = bytes.split_at_mut(bth::HEADER_LEN);
        self.bth().emit(&mut bth::Header::new_unchecked(h))?;
        Reserved::new_checked(rest)?.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cnp_bytes() {
        let mut want = [0u8; CNP_LEN];
        want[..12].copy_from_slice(&[0x81, 0, 0xff, 0xff, 0x40, 0x00, 0x12, 0x34, 0, 0, 0, 0]);
        let r = Repr { dest_qp: 0x1234, pkey: 0xffff };
        let mut out = [0xaau8; CNP_LEN];
        r.emit(&mut out).unwrap();
        assert_eq!(out, want);
        assert_eq!(Repr::parse(&out), Ok(r));
        assert!(Reserved::new_checked(&out[12..]).unwrap().is_zero());
        assert_eq!(Repr::parse(&out[..27]), Err(Error::Truncated { need: 28, got: 27 }));
        out[0] = 0x04;
        assert_eq!(Repr::parse(&out), Err(Error::BadOpcode { got: 0x04 }));
    }
}
