//! TCP segments (RFC 9293): ports, sequence numbers, flags (incl. ECE/CWR and NS), window,
//! checksum, urgent pointer and options (MSS, window scale, SACK-permitted, SACK, timestamps).
//!
//! The view's buffer is exactly the segment (the IP payload): TCP has no length field, so the
//! payload runs to the end of the buffer. `emit` zeroes the checksum; call
//! [`Packet::fill_checksum`] once the payload is in place.

use core::ops::BitOr;

use crate::{Error, Field, Result, checksum};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const FLAGS: Field = 12..14;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Minimum TCP header length (data offset 5).
pub const HEADER_LEN: usize = field::URGENT.end;

/// Maximum TCP header length (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// The IP protocol number of TCP.
pub const PROTOCOL: u8 = 6;

/// The most SACK blocks one option can carry (40 option bytes).
pub const MAX_SACK_BLOCKS: usize = 4;

fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

fn read_u32(b: &[u8], f: Field) -> u32 {
    u32::from_be_bytes([b[f.start], b[f.start + 1], b[f.start + 2], b[f.start + 3]])
}

/// The nine TCP flag bits, as in the low 9 bits of header bytes 12..14.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x002);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x004);
    /// Push function.
    pub const PSH: Flags = Flags(0x008);
    /// Acknowledgment field significant.
    pub const ACK: Flags = Flags(0x010);
    /// Urgent pointer field significant.
    pub const URG: Flags = Flags(0x020);
    /// ECN-Echo.
    pub const ECE: Flags = Flags(0x040);
    /// Congestion Window Reduced.
    pub const CWR: Flags = Flags(0x080);
    /// ECN nonce (RFC 3540, historic).
    pub const NS: Flags = Flags(0x100);

    /// True when every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True when any bit of `other` is set in `self`.
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// Up to four SACK blocks (left edge, right edge), stored inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SackBlocks {
    blocks: [(u32, u32); MAX_SACK_BLOCKS],
    len: u8,
}

impl SackBlocks {
    /// No blocks.
    pub const EMPTY: SackBlocks = SackBlocks { blocks: [(0, 0); MAX_SACK_BLOCKS], len: 0 };

    /// The blocks.
    pub fn as_slice(&self) -> &[(u32, u32)] {
        &self.blocks[..usize::from(self.len)]
    }

    /// Append a block; false (and nothing stored) when four are already held.
    pub fn push(&mut self, left: u32, right: u32) -> bool {
        let i = usize::from(self.len);
        if i >= MAX_SACK_BLOCKS {
            return false;
        }
        self.blocks[i] = (left, right);
        self.len += 1;
        true
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True when there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Build from a slice; `BadOption` for more than four blocks.
    pub fn from_slice(blocks: &[(u32, u32)]) -> Result<SackBlocks> {
        let mut s = SackBlocks::EMPTY;
        for &(l, r) in blocks {
            if !s.push(l, r) {
                return Err(Error::BadOption);
            }
        }
        Ok(s)
    }
}

/// One TCP option, as read by [`Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// Kind 0: End of Option List (iteration stops after it).
    EndOfList,
    /// Kind 1: No-Operation (padding).
    NoOperation,
    /// Kind 2: Maximum Segment Size.
    MaxSegmentSize(u16),
    /// Kind 3: Window Scale shift count.
    WindowScale(u8),
    /// Kind 4: SACK permitted.
    SackPermitted,
    /// Kind 5: SACK blocks.
    Sack(SackBlocks),
    /// Kind 8: Timestamps.
    Timestamps {
        /// TSval.
        tsval: u32,
        /// TSecr.
        tsecr: u32,
    },
    /// Any other kind, with its data (after kind and length).
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data.
        data: &'a [u8],
    },
}

/// Option kinds.
mod kind {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WS: u8 = 3;
    pub const SACK_PERM: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

impl<'a> TcpOption<'a> {
    /// Read one option from the front of `buf`; returns it and the rest. `BadOption` when the
    /// length byte is missing, below 2, past the buffer, or wrong for the kind.
    pub fn parse(buf: &'a [u8]) -> Result<(TcpOption<'a>, &'a [u8])> {
        let (&k, rest) = buf.split_first().ok_or(Error::BadOption)?;
        match k {
            kind::EOL => return Ok((TcpOption::EndOfList, &[])),
            kind::NOP => return Ok((TcpOption::NoOperation, rest)),
            _ => {}
        }
        let &len = rest.first().ok_or(Error::BadOption)?;
        let len = usize::from(len);
        if len < 2 || len > buf.len() {
            return Err(Error::BadOption);
        }
        let data = &buf[2..len];
        let rest = &buf[len..];
        let be32 = |d: &[u8]| u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        let opt = match (k, data.len()) {
            (kind::MSS, 2) => TcpOption::MaxSegmentSize(u16::from_be_bytes([data[0], data[1]])),
            (kind::WS, 1) => TcpOption::WindowScale(data[0]),
            (kind::SACK_PERM, 0) => TcpOption::SackPermitted,
            (kind::SACK, n) if n > 0 && n % 8 == 0 && n / 8 <= MAX_SACK_BLOCKS => {
                let mut s = SackBlocks::EMPTY;
                for b in data.chunks_exact(8) {
                    s.push(be32(&b[..4]), be32(&b[4..]));
                }
                TcpOption::Sack(s)
            }
            (kind::TIMESTAMPS, 8) => {
                TcpOption::Timestamps { tsval: be32(&data[..4]), tsecr: be32(&data[4..]) }
            }
            (kind::MSS | kind::WS | kind::SACK_PERM | kind::SACK | kind::TIMESTAMPS, _) => {
                return Err(Error::BadOption);
            }
            _ => TcpOption::Unknown { kind: k, data },
        };
        Ok((opt, rest))
    }

    /// Bytes this option takes on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::Sack(s) => 2 + 8 * s.len(),
            TcpOption::Timestamps { .. } => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Write the option at the front of `buf` and return the rest. `buf` must hold
    /// [`buffer_len`](Self::buffer_len) bytes (unknown options with more than 253 data bytes
    /// cannot be written and are truncated to fit the length byte).
    pub fn emit<'b>(&self, buf: &'b mut [u8]) -> &'b mut [u8] {
        let n = self.buffer_len().min(255);
        let (out, rest) = buf.split_at_mut(n);
        match self {
            TcpOption::EndOfList => out[0] = kind::EOL,
            TcpOption::NoOperation => out[0] = kind::NOP,
            TcpOption::MaxSegmentSize(m) => {
                out.copy_from_slice(&[kind::MSS, 4, (m >> 8) as u8, *m as u8]);
            }
            TcpOption::WindowScale(s) => out.copy_from_slice(&[kind::WS, 3, *s]),
            TcpOption::SackPermitted => out.copy_from_slice(&[kind::SACK_PERM, 2]),
            TcpOption::Sack(s) => {
                out[0] = kind::SACK;
                out[1] = n as u8;
                for (c, &(l, r)) in out[2..].chunks_exact_mut(8).zip(s.as_slice()) {
                    c[..4].copy_from_slice(&l.to_be_bytes());
                    c[4..].copy_from_slice(&r.to_be_bytes());
                }
            }
            TcpOption::Timestamps { tsval, tsecr } => {
                out[0] = kind::TIMESTAMPS;
                out[1] = 10;
                out[2..6].copy_from_slice(&tsval.to_be_bytes());
                out[6..10].copy_from_slice(&tsecr.to_be_bytes());
            }
            TcpOption::Unknown { kind, data } => {
                out[0] = *kind;
                out[1] = n as u8;
                out[2..].copy_from_slice(&data[..n - 2]);
            }
        }
        rest
    }
}

/// Iterator over the options of a TCP header. Yields `Err(BadOption)` once, then stops, on a
/// malformed option; stops after End of Option List.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Options<'a> {
    /// Iterate over raw option bytes.
    pub fn new(bytes: &'a [u8]) -> Options<'a> {
        Options { rest: bytes }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match TcpOption::parse(self.rest) {
            Ok((opt, rest)) => {
                self.rest = rest;
                Some(Ok(opt))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// A read/write view of a TCP segment.
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

    /// `Truncated` when shorter than 20 bytes; `BadHeaderLen` when the data offset is below 5
    /// or the header it announces runs past the buffer.
    pub fn check_len(&self) -> Result<()> {
        let n = self.buffer.as_ref().len();
        Error::need(HEADER_LEN, n)?;
        let hl = self.header_len();
        if hl < HEADER_LEN || hl > n {
            return Err(Error::BadHeaderLen { got: hl });
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ_NUM)
    }

    /// Acknowledgment number (meaningful when ACK is set).
    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK_NUM)
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS.start] >> 4) * 4
    }

    /// All nine flag bits.
    pub fn flags(&self) -> Flags {
        Flags(read_u16(self.buffer.as_ref(), field::FLAGS) & 0x01ff)
    }

    /// FIN flag.
    pub fn fin(&self) -> bool {
        self.flags().contains(Flags::FIN)
    }

    /// SYN flag.
    pub fn syn(&self) -> bool {
        self.flags().contains(Flags::SYN)
    }

    /// RST flag.
    pub fn rst(&self) -> bool {
        self.flags().contains(Flags::RST)
    }

    /// PSH flag.
    pub fn psh(&self) -> bool {
        self.flags().contains(Flags::PSH)
    }

    /// ACK flag.
    pub fn ack(&self) -> bool {
        self.flags().contains(Flags::ACK)
    }

    /// URG flag.
    pub fn urg(&self) -> bool {
        self.flags().contains(Flags::URG)
    }

    /// ECE flag.
    pub fn ece(&self) -> bool {
        self.flags().contains(Flags::ECE)
    }

    /// CWR flag.
    pub fn cwr(&self) -> bool {
        self.flags().contains(Flags::CWR)
    }

    /// NS flag.
    pub fn ns(&self) -> bool {
        self.flags().contains(Flags::NS)
    }

    /// Window size (unscaled).
    pub fn window_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WIN_SIZE)
    }

    /// Checksum as stored.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// Raw option bytes (padding included).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// Iterate over the options.
    pub fn options_iter(&self) -> Options<'_> {
        Options::new(self.options())
    }

    /// The payload: from the end of the header to the end of the buffer.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Sequence space this segment occupies: payload length plus one each for SYN and FIN.
    pub fn segment_len(&self) -> usize {
        self.payload().len() + usize::from(self.syn()) + usize::from(self.fin())
    }

    /// True when the checksum verifies against the pseudo-header of `src`/`dst`.
    pub fn verify_checksum(&self, src: &core::net::IpAddr, dst: &core::net::IpAddr) -> bool {
        checksum::upper_layer(src, dst, PROTOCOL, self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn write_u16(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    fn write_u32(&mut self, f: Field, v: u32) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.write_u16(field::SRC_PORT, v);
    }

    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.write_u16(field::DST_PORT, v);
    }

    /// Set the sequence number.
    pub fn set_seq_number(&mut self, v: u32) {
        self.write_u32(field::SEQ_NUM, v);
    }

    /// Set the acknowledgment number.
    pub fn set_ack_number(&mut self, v: u32) {
        self.write_u32(field::ACK_NUM, v);
    }

    /// Set the header length in bytes (stored as data offset = len / 4), keeping the flags.
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::FLAGS.start];
        *b = (*b & 0x0f) | ((((len / 4) as u8) & 0x0f) << 4);
    }

    /// Set all nine flag bits (the reserved bits are cleared), keeping the data offset.
    pub fn set_flags(&mut self, flags: Flags) {
        let off = u16::from(self.buffer.as_ref()[field::FLAGS.start] & 0xf0) << 8;
        self.write_u16(field::FLAGS, off | (flags.0 & 0x01ff));
    }

    /// Set the window size.
    pub fn set_window_len(&mut self, v: u16) {
        self.write_u16(field::WIN_SIZE, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.write_u16(field::CHECKSUM, v);
    }

    /// Set the urgent pointer.
    pub fn set_urgent_at(&mut self, v: u16) {
        self.write_u16(field::URGENT, v);
    }

    /// Raw option bytes, writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }

    fn adjust_checksum(&mut self, f: impl FnOnce(u16) -> u16) {
        let c = f(self.checksum());
        self.set_checksum(c);
    }

    /// Rewrite the source port and update the checksum incrementally (RFC 1624).
    pub fn rewrite_src_port(&mut self, port: u16) {
        let old = self.src_port();
        self.set_src_port(port);
        self.adjust_checksum(|c| checksum::update16(c, old, port));
    }

    /// Rewrite the destination port and update the checksum incrementally (RFC 1624).
    pub fn rewrite_dst_port(&mut self, port: u16) {
        let old = self.dst_port();
        self.set_dst_port(port);
        self.adjust_checksum(|c| checksum::update16(c, old, port));
    }

    /// Update the checksum for a change of one pseudo-header address (the IP header's source or
    /// destination is being rewritten from `old` to `new`, as in NAT or header transposition).
    pub fn adjust_checksum_for_addr(&mut self, old: &core::net::IpAddr, new: &core::net::IpAddr) {
        self.adjust_checksum(|c| checksum::update_ip_addr(c, old, new));
    }

    /// Compute and store the checksum over the pseudo-header and the whole buffer.
    pub fn fill_checksum(&mut self, src: &core::net::IpAddr, dst: &core::net::IpAddr) {
        self.set_checksum(0);
        let c = checksum::upper_layer(src, dst, PROTOCOL, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of a TCP header and its common options (unknown options are dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number (as on the wire, whether or not ACK is set).
    pub ack_number: u32,
    /// Flags.
    pub flags: Flags,
    /// Window size (unscaled).
    pub window_len: u16,
    /// Urgent pointer.
    pub urgent_at: u16,
    /// MSS option.
    pub max_seg_size: Option<u16>,
    /// Window scale option.
    pub window_scale: Option<u8>,
    /// SACK-permitted option present.
    pub sack_permitted: bool,
    /// Timestamps option (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks (empty: no SACK option).
    pub sack_ranges: SackBlocks,
    /// Payload length.
    pub payload_len: usize,
}

impl Repr {
    /// Read a segment's header and options. `BadHeaderLen` / `Truncated` as in `check_len`;
    /// `BadOption` for a malformed option. The checksum is not verified.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        let mut r = Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window_len: packet.window_len(),
            urgent_at: packet.urgent_at(),
            max_seg_size: None,
            window_scale: None,
            sack_permitted: false,
            timestamps: None,
            sack_ranges: SackBlocks::EMPTY,
            payload_len: packet.payload().len(),
        };
        for opt in packet.options_iter() {
            match opt? {
                TcpOption::EndOfList => break,
                TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(m) => r.max_seg_size = Some(m),
                TcpOption::WindowScale(s) => r.window_scale = Some(s),
                TcpOption::SackPermitted => r.sack_permitted = true,
                TcpOption::Sack(s) => r.sack_ranges = s,
                TcpOption::Timestamps { tsval, tsecr } => r.timestamps = Some((tsval, tsecr)),
            }
        }
        Ok(r)
    }

    /// How many SACK blocks `emit` writes: as many as fit in 40 option bytes after the others.
    fn sack_blocks_emitted(&self) -> usize {
        let room = MAX_HEADER_LEN - HEADER_LEN - self.fixed_options_len();
        let fit = room.saturating_sub(2) / 8;
        if self.sack_ranges.is_empty() { 0 } else { self.sack_ranges.len().min(fit) }
    }

    fn fixed_options_len(&self) -> usize {
        let mut n = 0;
        if self.max_seg_size.is_some() {
            n += 4;
        }
        if self.window_scale.is_some() {
            n += 3;
        }
        if self.sack_permitted {
            n += 2;
        }
        if self.timestamps.is_some() {
            n += 10;
        }
        n
    }

    /// Option bytes `emit` writes, before padding.
    fn options_len(&self) -> usize {
        let s = self.sack_blocks_emitted();
        self.fixed_options_len() + if s > 0 { 2 + 8 * s } else { 0 }
    }

    /// Header length this emits: 20 plus the options padded to a multiple of 4 (at most 60).
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len().div_ceil(4) * 4
    }

    /// Header plus payload.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Write the header and options (MSS, window scale, SACK-permitted, timestamps, SACK, then
    /// zero padding to a 4-byte boundary), with a zero checksum. SACK blocks that do not fit in
    /// the 40 option bytes are left out. The buffer must hold `header_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        packet.set_header_len(self.header_len());
        packet.set_flags(self.flags);
        packet.set_window_len(self.window_len);
        packet.set_checksum(0);
        packet.set_urgent_at(self.urgent_at);
        let n_sack = self.sack_blocks_emitted();
        let mut buf = packet.options_mut();
        if let Some(m) = self.max_seg_size {
            buf = TcpOption::MaxSegmentSize(m).emit(buf);
        }
        if let Some(s) = self.window_scale {
            buf = TcpOption::WindowScale(s).emit(buf);
        }
        if self.sack_permitted {
            buf = TcpOption::SackPermitted.emit(buf);
        }
        if let Some((tsval, tsecr)) = self.timestamps {
            buf = TcpOption::Timestamps { tsval, tsecr }.emit(buf);
        }
        if n_sack > 0 {
            let mut s = SackBlocks::EMPTY;
            for &(l, r) in &self.sack_ranges.as_slice()[..n_sack] {
                s.push(l, r);
            }
            buf = TcpOption::Sack(s).emit(buf);
        }
        buf.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{IpAddr, Ipv4Addr};

    const SRC: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1));
    const DST: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2));

    // scapy: IP(src="192.168.1.1",dst="192.168.1.2")/TCP(sport=40000,dport=80,seq=0x01020304,
    //   ack=0,flags="S",window=65535,options=[("MSS",1460),("WScale",7),("SAckOK",b""),
    //   ("Timestamp",(0xaabbccdd,0))])  (TCP part)
    static SYN: &str =
        "9c4000500102030400000000a002ffff84a50000020405b40303070402080aaabbccdd0000000000";

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn syn_repr() -> Repr {
        Repr {
            src_port: 40000,
            dst_port: 80,
            seq_number: 0x01020304,
            ack_number: 0,
            flags: Flags::SYN,
            window_len: 65535,
            urgent_at: 0,
            max_seg_size: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamps: Some((0xaabbccdd, 0)),
            sack_ranges: SackBlocks::EMPTY,
            payload_len: 0,
        }
    }

    #[test]
    fn test_parse() {
        let b = hex(SYN);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.src_port(), 40000);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.header_len(), 40);
        assert!(p.syn() && !p.ack() && !p.fin());
        assert_eq!(p.segment_len(), 1);
        assert!(p.verify_checksum(&SRC, &DST));
        let opts: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            opts,
            vec![
                TcpOption::MaxSegmentSize(1460),
                TcpOption::WindowScale(7),
                TcpOption::SackPermitted,
                TcpOption::Timestamps { tsval: 0xaabbccdd, tsecr: 0 },
                TcpOption::EndOfList,
            ]
        );
        assert_eq!(Repr::parse(&p).unwrap(), syn_repr());
    }

    #[test]
    fn test_emit() {
        let r = syn_repr();
        let want = hex(SYN);
        assert_eq!(r.buffer_len(), want.len());
        let mut b = vec![0xffu8; r.buffer_len()];
        let mut p = Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        p.fill_checksum(&SRC, &DST);
        assert_eq!(b, want);
    }

    #[test]
    fn bad_data_offset() {
        let mut b = hex(SYN);
        b[12] = 0x40;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadHeaderLen { got: 16 });
        b[12] = 0xf0;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadHeaderLen { got: 60 });
        assert_eq!(
            Packet::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated { need: 20, got: 19 }
        );
    }

    #[test]
    fn bad_option_lengths() {
        // MSS with length 3.
        let mut b = hex(SYN);
        b[21] = 3;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::BadOption);
        // Length byte 1 (below 2).
        b[21] = 1;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap_err(),
            Error::BadOption
        );
        // Timestamps running past the header.
        b[21] = 4;
        b[30] = 12;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap_err(),
            Error::BadOption
        );
        // A kind with no length byte at the very end.
        assert_eq!(TcpOption::parse(&[2]).unwrap_err(), Error::BadOption);
        // SACK with a partial block.
        assert_eq!(TcpOption::parse(&[5, 6, 0, 0, 0, 0]).unwrap_err(), Error::BadOption);
        // The iterator stops after an error.
        let mut it = Options::new(&[1, 2, 9, 1]);
        assert_eq!(it.next(), Some(Ok(TcpOption::NoOperation)));
        assert_eq!(it.next(), Some(Err(Error::BadOption)));
        assert_eq!(it.next(), None);
    }

    #[test]
    fn unknown_option_kept() {
        let (o, rest) = TcpOption::parse(&[30, 4, 0xab, 0xcd, 1]).unwrap();
        assert_eq!(o, TcpOption::Unknown { kind: 30, data: &[0xab, 0xcd] });
        assert_eq!(rest, &[1]);
        let mut out = [0u8; 4];
        o.emit(&mut out);
        assert_eq!(out, [30, 4, 0xab, 0xcd]);
    }

    #[test]
    fn sack_round_trip_and_overflow() {
        let mut r = syn_repr();
        r.flags = Flags::ACK;
        r.max_seg_size = None;
        r.window_scale = None;
        r.sack_permitted = false;
        r.sack_ranges = SackBlocks::from_slice(&[(1, 2), (3, 4), (5, 6), (7, 8)]).unwrap();
        // Timestamps (10) leave room for 3 blocks (26): 36 bytes, header 56.
        assert_eq!(r.header_len(), 56);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        let back = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(back.sack_ranges.as_slice(), &[(1, 2), (3, 4), (5, 6)]);
        assert!(SackBlocks::from_slice(&[(0, 0); 5]).is_err());
        // Without timestamps all four fit.
        r.timestamps = None;
        assert_eq!(r.header_len(), 20 + 36);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn flags_all_bits() {
        let mut b = hex(SYN);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_flags(
            Flags::NS
                | Flags::CWR
                | Flags::ECE
                | Flags::URG
                | Flags::ACK
                | Flags::PSH
                | Flags::RST
                | Flags::FIN,
        );
        assert!(
            p.ns()
                && p.cwr()
                && p.ece()
                && p.urg()
                && p.ack()
                && p.psh()
                && p.rst()
                && p.fin()
                && !p.syn()
        );
        assert_eq!(p.header_len(), 40);
        assert_eq!(&b[12..14], &[0xa1, 0xfd]);
    }
}
