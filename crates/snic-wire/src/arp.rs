//! ARP over Ethernet for IPv4 (RFC 826): requests and replies.
//!
//! [`Packet`] reads the generic fixed part (hardware/protocol types and lengths, operation) of any
//! ARP packet; the address accessors assume the Ethernet/IPv4 layout (6-byte hardware and
//! 4-byte protocol addresses), which [`Repr::parse`] checks.

use core::net::Ipv4Addr;

use crate::ethernet::{EtherType, EthernetAddress};
use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    pub const SHA: Field = 8..14;
    pub const SPA: Field = 14..18;
    pub const THA: Field = 18..24;
    pub const TPA: Field = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const HEADER_LEN: usize = field::TPA.end;

/// Hardware type of Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

/// An ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Request (1).
    Request,
    /// Reply (2).
    Reply,
}

impl Operation {
    /// The wire value.
    pub const fn code(self) -> u16 {
        match self {
            Operation::Request => 1,
            Operation::Reply => 2,
        }
    }
}

/// A read/write view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer and [`check_len`](Self::check_len) it.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` when shorter than [`HEADER_LEN`] (28 bytes, the Ethernet/IPv4 size; any
    /// Ethernet padding after it is ignored).
    pub fn check_len(&self) -> Result<()> {
        Error::need(HEADER_LEN, self.buffer.as_ref().len())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Length of the ARP packet (always [`HEADER_LEN`]).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type (an EtherType; IPv4 here).
    pub fn protocol_type(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::PTYPE))
    }

    /// Hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation code (1 request, 2 reply).
    pub fn operation(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::OPER)
    }

    /// Sender hardware address.
    pub fn source_hardware_addr(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SHA]);
        EthernetAddress(a)
    }

    /// Sender protocol address.
    pub fn source_protocol_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Target hardware address.
    pub fn target_hardware_addr(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::THA]);
        EthernetAddress(a)
    }

    /// Target protocol address.
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::TPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Bytes after the ARP packet (Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn write_u16(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the hardware type.
    pub fn set_hardware_type(&mut self, v: u16) {
        self.write_u16(field::HTYPE, v);
    }

    /// Set the protocol type.
    pub fn set_protocol_type(&mut self, v: EtherType) {
        self.write_u16(field::PTYPE, v.0);
    }

    /// Set the hardware address length.
    pub fn set_hardware_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v;
    }

    /// Set the protocol address length.
    pub fn set_protocol_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v;
    }

    /// Set the operation code.
    pub fn set_operation(&mut self, v: u16) {
        self.write_u16(field::OPER, v);
    }

    /// Set the sender hardware address.
    pub fn set_source_hardware_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&a.0);
    }

    /// Set the sender protocol address.
    pub fn set_source_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&a.octets());
    }

    /// Set the target hardware address.
    pub fn set_target_hardware_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&a.0);
    }

    /// Set the target protocol address.
    pub fn set_target_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&a.octets());
    }

    /// Bytes after the ARP packet, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An Ethernet/IPv4 ARP request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Request or reply.
    pub operation: Operation,
    /// Sender MAC.
    pub source_hardware_addr: EthernetAddress,
    /// Sender IPv4 address.
    pub source_protocol_addr: Ipv4Addr,
    /// Target MAC (zero in a request).
    pub target_hardware_addr: EthernetAddress,
    /// Target IPv4 address.
    pub target_protocol_addr: Ipv4Addr,
}

impl Repr {
    /// Read an Ethernet/IPv4 request or reply. `BadValue` names the field when the hardware
    /// type, protocol type or an address length is not Ethernet/IPv4; `BadOpcode` for an
    /// operation other than 1 or 2.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.hardware_type() != HTYPE_ETHERNET {
            return Err(Error::BadValue { field: "arp.htype" });
        }
        if packet.protocol_type() != EtherType::IPV4 {
            return Err(Error::BadValue { field: "arp.ptype" });
        }
        if packet.hardware_len() != 6 {
            return Err(Error::BadValue { field: "arp.hlen" });
        }
        if packet.protocol_len() != 4 {
            return Err(Error::BadValue { field: "arp.plen" });
        }
        let operation = match packet.operation() {
            1 => Operation::Request,
            2 => Operation::Reply,
            op => return Err(Error::BadOpcode { got: u8::try_from(op).unwrap_or(u8::MAX) }),
        };
        Ok(Repr {
            operation,
            source_hardware_addr: packet.source_hardware_addr(),
            source_protocol_addr: packet.source_protocol_addr(),
            target_hardware_addr: packet.target_hardware_addr(),
            target_protocol_addr: packet.target_protocol_addr(),
        })
    }

    /// Length of the packet (28).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Buffer length needed (28).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the packet.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_hardware_type(HTYPE_ETHERNET);
        packet.set_protocol_type(EtherType::IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation.code());
        packet.set_source_hardware_addr(self.source_hardware_addr);
        packet.set_source_protocol_addr(self.source_protocol_addr);
        packet.set_target_hardware_addr(self.target_hardware_addr);
        packet.set_target_protocol_addr(self.target_protocol_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // scapy: ARP(op=1, hwsrc="02:00:00:00:00:01", psrc="10.0.0.1", pdst="10.0.0.2")
    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x0a,
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x02,
    ];

    fn repr() -> Repr {
        Repr {
            operation: Operation::Request,
            source_hardware_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            source_protocol_addr: Ipv4Addr::new(10, 0, 0, 1),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Addr::new(10, 0, 0, 2),
        }
    }

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.operation(), 1);
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn test_emit() {
        let mut b = [0xffu8; 28];
        repr().emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, REQUEST);
    }

    #[test]
    fn negative() {
        assert_eq!(
            Packet::new_checked(&REQUEST[..27]).unwrap_err(),
            Error::Truncated { need: 28, got: 27 }
        );
        let mut b = REQUEST;
        b[7] = 3;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap_err(),
            Error::BadOpcode { got: 3 }
        );
        let mut b = REQUEST;
        b[4] = 8;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap_err(),
            Error::BadValue { field: "arp.hlen" }
        );
        let mut b = REQUEST;
        b[2] = 0x86;
        b[3] = 0xdd;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap_err(),
            Error::BadValue { field: "arp.ptype" }
        );
    }
}
