//! Ethernet II frames, 802.1Q / 802.1ad VLAN tags, EtherTypes and MAC addresses.
//!
//! [`Frame`] is the 14-byte Ethernet II header (no preamble, no FCS) followed by its payload.
//! [`VlanTag`] is one 4-byte tag (TCI + inner EtherType) that sits after the outer EtherType;
//! [`walk_vlans`] reads 0, 1 or 2 tags (QinQ) and refuses a third with
//! [`Error::TooManyHeaders`].

use core::fmt;

use crate::{Error, Field, Result};

/// A 48-bit IEEE MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// The six bytes, in wire order.
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// True for ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True when the group bit (least significant bit of the first byte) is set; broadcast is
    /// multicast too.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True when the group bit is clear.
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// True when the locally-administered bit is set.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl From<[u8; 6]> for EthernetAddress {
    fn from(b: [u8; 6]) -> Self {
        EthernetAddress(b)
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

/// An EtherType value. Known values are associated constants; any other value is kept as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4, 0x0800.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP, 0x0806.
    pub const ARP: EtherType = EtherType(0x0806);
    /// IPv6, 0x86DD.
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// 802.1Q VLAN tag (C-tag), 0x8100.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// 802.1ad service tag (S-tag, QinQ), 0x88A8.
    pub const QINQ: EtherType = EtherType(0x88a8);
    /// Pre-standard QinQ S-tag, 0x9100.
    pub const QINQ_OLD: EtherType = EtherType(0x9100);
    /// Transparent Ethernet Bridging (an Ethernet frame inside GRE/NVGRE), 0x6558.
    pub const TEB: EtherType = EtherType(0x6558);

    /// True for the EtherTypes that announce a VLAN tag (0x8100, 0x88A8, 0x9100).
    pub const fn is_vlan(self) -> bool {
        matches!(self.0, 0x8100 | 0x88a8 | 0x9100)
    }
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        EtherType(v)
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> Self {
        v.0
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EtherType::IPV4 => write!(f, "IPv4"),
            EtherType::ARP => write!(f, "ARP"),
            EtherType::IPV6 => write!(f, "IPv6"),
            EtherType::VLAN => write!(f, "802.1Q"),
            EtherType::QINQ | EtherType::QINQ_OLD => write!(f, "QinQ"),
            EtherType::TEB => write!(f, "TEB"),
            EtherType(v) => write!(f, "{v:#06x}"),
        }
    }
}

mod field {
    use crate::{Field, Rest};
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: Rest = 14..;

    pub const TCI: Field = 0..2;
    pub const INNER_TYPE: Field = 2..4;
    pub const TAG_PAYLOAD: Rest = 4..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// Length of one VLAN tag.
pub const VLAN_TAG_LEN: usize = field::TAG_PAYLOAD.start;

/// The most VLAN tags [`walk_vlans`] accepts (an S-tag and a C-tag).
pub const MAX_VLAN_TAGS: usize = 2;

fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap a buffer without checking it; accessors may panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wrap a buffer and check it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// `Truncated` when the buffer is shorter than [`HEADER_LEN`].
    pub fn check_len(&self) -> Result<()> {
        Error::need(HEADER_LEN, self.buffer.as_ref().len())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Length of the Ethernet header (always [`HEADER_LEN`]; VLAN tags are part of the payload).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Destination MAC address.
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        EthernetAddress(a)
    }

    /// Source MAC address.
    pub fn src_addr(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        EthernetAddress(a)
    }

    /// The outer EtherType (0x8100 etc. when the frame is VLAN-tagged).
    pub fn ethertype(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// Everything after the 14-byte header (VLAN tags included, Ethernet padding included).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }

    /// Read the VLAN tags that follow the header (see [`walk_vlans`]).
    pub fn vlans(&self) -> Result<VlanWalk> {
        walk_vlans(self.ethertype(), self.payload())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the destination MAC address.
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a.0);
    }

    /// Set the source MAC address.
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a.0);
    }

    /// Set the outer EtherType.
    pub fn set_ethertype(&mut self, t: EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&t.0.to_be_bytes());
    }

    /// Everything after the 14-byte header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Frame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source MAC address.
    pub src_addr: EthernetAddress,
    /// Destination MAC address.
    pub dst_addr: EthernetAddress,
    /// EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Read the header of a checked frame.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&T>) -> Result<Repr> {
        frame.check_len()?;
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Length of the header this emits.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Buffer length needed for the header alone.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header. The frame must be at least [`HEADER_LEN`] bytes long.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, frame: &mut Frame<&mut T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

/// A read/write view of one 802.1Q / 802.1ad VLAN tag: TCI (PCP, DEI, VID) and the EtherType
/// of what follows. The buffer starts right after the EtherType that announced the tag.
#[derive(Debug, Clone)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> VlanTag<T> {
        VlanTag { buffer }
    }

    /// Wrap a buffer and check it holds a whole tag.
    pub fn new_checked(buffer: T) -> Result<VlanTag<T>> {
        let t = Self::new_unchecked(buffer);
        t.check_len()?;
        Ok(t)
    }

    /// `Truncated` when the buffer is shorter than [`VLAN_TAG_LEN`].
    pub fn check_len(&self) -> Result<()> {
        Error::need(VLAN_TAG_LEN, self.buffer.as_ref().len())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Length of the tag (always [`VLAN_TAG_LEN`]).
    pub const fn header_len(&self) -> usize {
        VLAN_TAG_LEN
    }

    /// The whole 16-bit Tag Control Information.
    pub fn tci(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::TCI)
    }

    /// Priority Code Point (3 bits).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop Eligible Indicator.
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// EtherType of what follows the tag.
    pub fn ethertype(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::INNER_TYPE))
    }

    /// Everything after the tag.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::TAG_PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Set the whole TCI.
    pub fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[field::TCI].copy_from_slice(&tci.to_be_bytes());
    }

    /// Set the PCP (low 3 bits of `pcp` used).
    pub fn set_pcp(&mut self, pcp: u8) {
        let tci = (self.tci() & 0x1fff) | (u16::from(pcp & 0x7) << 13);
        self.set_tci(tci);
    }

    /// Set the DEI bit.
    pub fn set_dei(&mut self, dei: bool) {
        let tci = (self.tci() & !0x1000) | if dei { 0x1000 } else { 0 };
        self.set_tci(tci);
    }

    /// Set the VID (low 12 bits of `vid` used).
    pub fn set_vid(&mut self, vid: u16) {
        let tci = (self.tci() & 0xf000) | (vid & 0x0fff);
        self.set_tci(tci);
    }

    /// Set the EtherType of what follows.
    pub fn set_ethertype(&mut self, t: EtherType) {
        self.buffer.as_mut()[field::INNER_TYPE].copy_from_slice(&t.0.to_be_bytes());
    }

    /// Everything after the tag, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::TAG_PAYLOAD]
    }
}

/// The fields of one VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanRepr {
    /// Priority Code Point, 0..=7.
    pub pcp: u8,
    /// Drop Eligible Indicator.
    pub dei: bool,
    /// VLAN ID, 0..=4095.
    pub vid: u16,
    /// EtherType of what follows the tag.
    pub ethertype: EtherType,
}

impl VlanRepr {
    /// Read a checked tag.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(tag: &VlanTag<&T>) -> Result<VlanRepr> {
        tag.check_len()?;
        Ok(VlanRepr { pcp: tag.pcp(), dei: tag.dei(), vid: tag.vid(), ethertype: tag.ethertype() })
    }

    /// Length of the tag this emits.
    pub const fn header_len(&self) -> usize {
        VLAN_TAG_LEN
    }

    /// Buffer length needed for the tag.
    pub const fn buffer_len(&self) -> usize {
        VLAN_TAG_LEN
    }

    /// Write the tag (PCP and VID are masked to 3 and 12 bits).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, tag: &mut VlanTag<&mut T>) {
        let tci = (u16::from(self.pcp & 7) << 13)
            | if self.dei { 0x1000 } else { 0 }
            | (self.vid & 0x0fff);
        tag.set_tci(tci);
        tag.set_ethertype(self.ethertype);
    }
}

/// The VLAN tags of one frame, outer first, and what follows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlanWalk {
    tags: [VlanRepr; MAX_VLAN_TAGS],
    count: u8,
    /// The EtherType after the last tag (the outer EtherType when untagged).
    pub ethertype: EtherType,
    /// Offset of the first byte after the tags, counted from the start of the bytes that
    /// followed the outer EtherType (add [`HEADER_LEN`] for an offset into the frame).
    pub payload_offset: usize,
}

impl VlanWalk {
    /// The tags, outer (S-tag) first; empty for an untagged frame.
    pub fn tags(&self) -> &[VlanRepr] {
        &self.tags[..usize::from(self.count)]
    }

    /// The outermost tag, if any.
    pub fn outer(&self) -> Option<&VlanRepr> {
        self.tags().first()
    }
}

/// Walk 0, 1 or 2 VLAN tags. `ethertype` is the frame's outer EtherType and `after` the bytes
/// that follow it ([`Frame::payload`]). A third tag is [`Error::TooManyHeaders`]; a tag cut
/// short is [`Error::Truncated`].
pub fn walk_vlans(ethertype: EtherType, after: &[u8]) -> Result<VlanWalk> {
    let mut walk = VlanWalk { ethertype, ..VlanWalk::default() };
    while walk.ethertype.is_vlan() {
        let i = usize::from(walk.count);
        if i >= MAX_VLAN_TAGS {
            return Err(Error::TooManyHeaders);
        }
        let rest = after.get(walk.payload_offset..).unwrap_or(&[]);
        let tag = VlanTag::new_checked(rest).map_err(|_| Error::Truncated {
            need: walk.payload_offset + VLAN_TAG_LEN,
            got: after.len(),
        })?;
        let r = VlanRepr::parse(&tag)?;
        walk.tags[i] = r;
        walk.count += 1;
        walk.ethertype = r.ethertype;
        walk.payload_offset += VLAN_TAG_LEN;
    }
    Ok(walk)
}

#[cfg(test)]
mod tests {
    use super::*;

    // scapy: Ether(dst="00:11:22:33:44:55", src="66:77:88:99:aa:bb", type=0x0800)/b"\xaa\xbb"
    static FRAME: [u8; 16] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x08, 0x00, 0xaa,
        0xbb,
    ];

    // scapy: Ether(dst="ff:ff:ff:ff:ff:ff",src="02:00:00:00:00:01")/Dot1AD(prio=5,id=1,vlan=100)
    //        /Dot1Q(prio=0,vlan=200)/IPv6()  (first 22 bytes)
    static QINQ: [u8; 24] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0xa8, 0xb0,
        0x64, 0x81, 0x00, 0x00, 0xc8, 0x86, 0xdd, 0x60, 0x00,
    ];

    #[test]
    fn test_parse() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), EthernetAddress([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]));
        assert_eq!(f.src_addr(), EthernetAddress([0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]));
        assert_eq!(f.ethertype(), EtherType::IPV4);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
        let r = Repr::parse(&f).unwrap();
        assert_eq!(
            r,
            Repr {
                src_addr: EthernetAddress([0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]),
                dst_addr: EthernetAddress([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]),
                ethertype: EtherType::IPV4,
            }
        );
    }

    #[test]
    fn test_emit() {
        let r = Repr {
            src_addr: EthernetAddress([0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]),
            dst_addr: EthernetAddress([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]),
            ethertype: EtherType::IPV4,
        };
        let mut buf = [0u8; 16];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        r.emit(&mut f);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb]);
        assert_eq!(buf, FRAME);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Frame::new_checked(&FRAME[..13]).unwrap_err(),
            Error::Truncated { need: 14, got: 13 }
        );
    }

    #[test]
    fn address_display_and_kinds() {
        let a = EthernetAddress([0x02, 0x0a, 0xbc, 0x00, 0xff, 0x10]);
        assert_eq!(a.to_string(), "02:0a:bc:00:ff:10");
        assert!(a.is_unicast() && !a.is_multicast() && !a.is_broadcast() && a.is_local());
        let m = EthernetAddress([0x01, 0x00, 0x5e, 0, 0, 1]);
        assert!(m.is_multicast() && !m.is_unicast() && !m.is_broadcast());
        assert!(
            EthernetAddress::BROADCAST.is_broadcast() && EthernetAddress::BROADCAST.is_multicast()
        );
        assert_eq!(EtherType(0x1234).to_string(), "0x1234");
        assert_eq!(EtherType::IPV6.to_string(), "IPv6");
    }

    #[test]
    fn qinq_walk() {
        let f = Frame::new_checked(&QINQ[..]).unwrap();
        let w = f.vlans().unwrap();
        assert_eq!(w.tags().len(), 2);
        assert_eq!(
            w.tags()[0],
            VlanRepr { pcp: 5, dei: true, vid: 100, ethertype: EtherType::VLAN }
        );
        assert_eq!(
            w.tags()[1],
            VlanRepr { pcp: 0, dei: false, vid: 200, ethertype: EtherType::IPV6 }
        );
        assert_eq!(w.ethertype, EtherType::IPV6);
        assert_eq!(w.payload_offset, 8);
        assert_eq!(f.payload()[w.payload_offset], 0x60);
    }

    #[test]
    fn untagged_walk() {
        let w = Frame::new_checked(&FRAME[..]).unwrap().vlans().unwrap();
        assert!(w.tags().is_empty());
        assert_eq!(w.ethertype, EtherType::IPV4);
        assert_eq!(w.payload_offset, 0);
    }

    #[test]
    fn third_tag_is_too_many() {
        let mut b = QINQ;
        b[20] = 0x81; // inner EtherType of tag 2 -> another 802.1Q tag
        b[21] = 0x00;
        let f = Frame::new_checked(&b[..]).unwrap();
        assert_eq!(f.vlans().unwrap_err(), Error::TooManyHeaders);
    }

    #[test]
    fn tag_truncated() {
        let f = Frame::new_checked(&QINQ[..20]).unwrap();
        assert_eq!(f.vlans().unwrap_err(), Error::Truncated { need: 8, got: 6 });
    }

    #[test]
    fn vlan_tag_emit_and_setters() {
        let mut b = [0u8; 4];
        let mut t = VlanTag::new_unchecked(&mut b[..]);
        VlanRepr { pcp: 5, dei: true, vid: 100, ethertype: EtherType::VLAN }.emit(&mut t);
        assert_eq!(b, [0xb0, 0x64, 0x81, 0x00]);
        let mut t = VlanTag::new_unchecked(&mut b[..]);
        t.set_vid(0xfff);
        t.set_pcp(0);
        t.set_dei(false);
        assert_eq!(b, [0x0f, 0xff, 0x81, 0x00]);
    }
}
