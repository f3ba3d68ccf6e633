//! IPv6 Neighbor Discovery messages (RFC 4861 section 4.3 and 4.4): Neighbor Solicitation and
//! Neighbor Advertisement, with their link-layer address options (section 4.6.1).
//!
//! The buffer is the whole ICMPv6 message (type, code, checksum, the 4-byte flags/reserved word,
//! the 16-byte target address, then options). [`Repr::parse`] checks what RFC 4861 section
//! 7.1.1 / 7.1.2 ask of the message itself (code 0, at least 24 bytes, a unicast target, every
//! option with a non-zero length that fits); the IP-level checks (hop limit 255, checksum, an
//! unspecified source only without a source link-layer option) are the receiver's, with the IPv6
//! header in hand. [`Repr::emit`] leaves the checksum zero: fill it with
//! [`crate::icmpv6::Packet::fill_checksum`] once the addresses are known.
//!
//! Unlike the header modules, [`Repr::parse`] takes the message bytes rather than a view: an ND
//! message is an ICMPv6 message whose body has its own layout, and the ICMPv6 view
//! ([`crate::icmpv6::Packet`]) is what checks and fills its checksum.
//!
//! Unknown options are skipped, as the RFC asks; a link-layer address option whose length is
//! not 1 (8 bytes: type, length, 6-byte MAC) is skipped too (another link type's address).

use core::net::Ipv6Addr;

use crate::ethernet::EthernetAddress;
use crate::icmpv6::{NEIGHBOR_ADVERT, NEIGHBOR_SOLICIT};
use crate::{Error, Result};

/// Bytes before the options: type, code, checksum, flags/reserved, target address.
pub const HEADER_LEN: usize = 24;

/// Option type: source link-layer address.
pub const OPT_SOURCE_LLADDR: u8 = 1;
/// Option type: target link-layer address.
pub const OPT_TARGET_LLADDR: u8 = 2;
/// Bytes of an Ethernet link-layer address option.
pub const LLADDR_OPT_LEN: usize = 8;

/// Router flag of a Neighbor Advertisement.
pub const FLAG_ROUTER: u8 = 0x80;
/// Solicited flag of a Neighbor Advertisement.
pub const FLAG_SOLICITED: u8 = 0x40;
/// Override flag of a Neighbor Advertisement.
pub const FLAG_OVERRIDE: u8 = 0x20;

/// A Neighbor Solicitation or Advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// "What is the link-layer address of `target`?"
    Solicit {
        /// The address asked about.
        target: Ipv6Addr,
        /// The asker's link-layer address (absent in duplicate address detection).
        source_lladdr: Option<EthernetAddress>,
    },
    /// "`target` is at `target_lladdr`."
    Advert {
        /// Router (R), Solicited (S) and Override (O) flags ([`FLAG_ROUTER`], ...).
        flags: u8,
        /// The address advertised.
        target: Ipv6Addr,
        /// Its link-layer address.
        target_lladdr: Option<EthernetAddress>,
    },
}

impl Repr {
    /// Read a Neighbor Solicitation or Advertisement from a whole ICMPv6 message. Another ICMPv6
    /// type is [`Error::BadOpcode`].
    pub fn parse(msg: &[u8]) -> Result<Repr> {
        if msg.len() < HEADER_LEN {
            return Err(Error::Truncated { need: HEADER_LEN, got: msg.len() });
        }
        let (kind, code) = (msg[0], msg[1]);
        if kind != NEIGHBOR_SOLICIT && kind != NEIGHBOR_ADVERT {
            return Err(Error::BadOpcode { got: kind });
        }
        if code != 0 {
            return Err(Error::BadValue { field: "ndisc.code" });
        }
        let mut t = [0u8; 16];
        t.copy_from_slice(&msg[8..24]);
        let target = Ipv6Addr::from(t);
        if target.is_multicast() {
            return Err(Error::BadValue { field: "ndisc.target" });
        }
        let want = if kind == NEIGHBOR_SOLICIT { OPT_SOURCE_LLADDR } else { OPT_TARGET_LLADDR };
        let mut lladdr = None;
        let mut opts = &msg[HEADER_LEN..];
        while !opts.is_empty() {
            if opts.len() < 2 {
                return Err(Error::BadOption);
            }
            let len = usize::from(opts[1]) * 8;
            if len == 0 || len > opts.len() {
                return Err(Error::BadOption);
            }
            if opts[0] == want && len == LLADDR_OPT_LEN && lladdr.is_none() {
                let mut m = [0u8; 6];
                m.copy_from_slice(&opts[2..8]);
                lladdr = Some(EthernetAddress(m));
            }
            opts = &opts[len..];
        }
        Ok(if kind == NEIGHBOR_SOLICIT {
            Repr::Solicit { target, source_lladdr: lladdr }
        } else {
            Repr::Advert { flags: msg[4] & 0xe0, target, target_lladdr: lladdr }
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        let has = match self {
            Repr::Solicit { source_lladdr, .. } => source_lladdr.is_some(),
            Repr::Advert { target_lladdr, .. } => target_lladdr.is_some(),
        };
        HEADER_LEN + if has { LLADDR_OPT_LEN } else { 0 }
    }

    /// Write the message into the first [`Repr::buffer_len`] bytes of `buf`, checksum zero.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let n = self.buffer_len();
        let got = buf.len();
        let buf = buf.get_mut(..n).ok_or(Error::Truncated { need: n, got })?;
        buf.fill(0);
        let (kind, flags, target, opt, lladdr) = match *self {
            Repr::Solicit { target, source_lladdr } => {
                (NEIGHBOR_SOLICIT, 0, target, OPT_SOURCE_LLADDR, source_lladdr)
            }
            Repr::Advert { flags, target, target_lladdr } => {
                (NEIGHBOR_ADVERT, flags & 0xe0, target, OPT_TARGET_LLADDR, target_lladdr)
            }
        };
        buf[0] = kind;
        buf[4] = flags;
        buf[8..24].copy_from_slice(&target.octets());
        if let Some(m) = lladdr {
            buf[24] = opt;
            buf[25] = 1;
            buf[26..32].copy_from_slice(&m.0);
        }
        Ok(())
    }
}

/// The solicited-node multicast address of `addr` (RFC 4291 section 2.7.1): `ff02::1:ffXX:XXXX`
/// with the low 24 bits of `addr`, where a Neighbor Solicitation for `addr` is sent.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15]])
}

/// The Ethernet address an IPv6 multicast address maps to (RFC 2464 section 7):
/// `33:33` and its low 32 bits.
pub fn multicast_mac(group: Ipv6Addr) -> EthernetAddress {
    let o = group.octets();
    EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icmpv6;

    const MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0a]);

    fn addr(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn solicitation_bytes_as_rfc_4861_lays_them_out() {
        let r = Repr::Solicit { target: addr("fd00::2"), source_lladdr: Some(MAC) };
        let mut b = [0u8; 32];
        r.emit(&mut b).unwrap();
        let mut want = vec![135, 0, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(&addr("fd00::2").octets());
        want.extend_from_slice(&[1, 1, 0x02, 0, 0, 0, 0, 0x0a]);
        assert_eq!(&b[..], &want[..]);
        assert_eq!(Repr::parse(&b).unwrap(), r);
    }

    #[test]
    fn advertisement_round_trips_with_flags_and_a_checksum_that_verifies() {
        let r = Repr::Advert {
            flags: FLAG_SOLICITED | FLAG_OVERRIDE,
            target: addr("fd00::1"),
            target_lladdr: Some(MAC),
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        let (src, dst) = (addr("fd00::1"), addr("fd00::2"));
        let mut p = icmpv6::Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(src, dst);
        assert!(icmpv6::Packet::new_checked(&b[..]).unwrap().verify_checksum(src, dst));
        assert_eq!(Repr::parse(&b).unwrap(), r);
        assert_eq!(b[4], 0x60);
    }

    #[test]
    fn bad_messages_are_typed_errors() {
        let r = Repr::Solicit { target: addr("fd00::2"), source_lladdr: Some(MAC) };
        let mut b = [0u8; 32];
        r.emit(&mut b).unwrap();
        assert_eq!(Repr::parse(&b[..23]), Err(Error::Truncated { need: 24, got: 23 }));
        let mut x = b;
        x[1] = 1;
        assert_eq!(Repr::parse(&x), Err(Error::BadValue { field: "ndisc.code" }));
        let mut x = b;
        x[0] = 128;
        assert_eq!(Repr::parse(&x), Err(Error::BadOpcode { got: 128 }));
        let mut x = b;
        x[25] = 0; // option length 0
        assert_eq!(Repr::parse(&x), Err(Error::BadOption));
        let mut x = b;
        x[25] = 2; // runs past the message
        assert_eq!(Repr::parse(&x), Err(Error::BadOption));
        assert_eq!(Repr::parse(&b[..25]), Err(Error::BadOption));
        let mut x = b;
        x[8] = 0xff; // a multicast target
        assert_eq!(Repr::parse(&x), Err(Error::BadValue { field: "ndisc.target" }));
        assert!(matches!(r.emit(&mut [0u8; 31]), Err(Error::Truncated { need: 32, got: 31 })));
    }

    #[test]
    fn unknown_and_foreign_options_are_skipped() {
        let mut b = vec![0u8; 24];
        b[0] = 135;
        b[8..24].copy_from_slice(&addr("fd00::2").octets());
        b.extend_from_slice(&[14, 1, 9, 9, 9, 9, 9, 9]); // nonce option: unknown here
        b.extend_from_slice(&[2, 1, 7, 7, 7, 7, 7, 7]); // a target lladdr in a solicitation
        b.extend_from_slice(&[1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // 16-byte lladdr
        b.extend_from_slice(&[1, 1, 1, 2, 3, 4, 5, 6]);
        let r = Repr::parse(&b).unwrap();
        let want = EthernetAddress([1, 2, 3, 4, 5, 6]);
        assert_eq!(r, Repr::Solicit { target: addr("fd00::2"), source_lladdr: Some(want) });
        // Without any option: duplicate address detection's form.
        let r = Repr::parse(&b[..24]).unwrap();
        assert_eq!(r, Repr::Solicit { target: addr("fd00::2"), source_lladdr: None });
    }

    #[test]
    fn solicited_node_group_and_its_mac() {
        let g = solicited_node(addr("fd00::12:3456:789a"));
        assert_eq!(g, addr("ff02::1:ff56:789a"));
        assert_eq!(multicast_mac(g), EthernetAddress([0x33, 0x33, 0xff, 0x56, 0x78, 0x9a]));
    }
}
