//! The BTH opcode table (IBTA Vol 1 section 9.2, table 38 and its per-opcode header layouts):
//! for each opcode we accept, its name, the extension headers that follow the BTH in order, and
//! whether it carries a payload.
//!
//! Covered: every RC opcode of IBTA 1.4 (SEND, RDMA WRITE, RDMA READ request/response, ACK,
//! atomics, SEND with invalidate), the two RC opcodes IBTA 1.5 added that Linux rxe sends since
//! 6.2 (FLUSH 0x1C: FETH then RETH, no payload; ATOMIC WRITE 0x1D: RETH then exactly 8 bytes of
//! payload), the UC SEND and RDMA WRITE opcodes, UD SEND ONLY (with and without immediate), and
//! the RoCEv2 CNP (0x81). The RD transport is not supported (its RDETH is not modelled): RD
//! opcodes, like reserved ones, are refused with `BadOpcode`.

/// An extension header that may follow the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// RDMA Extended Transport Header (16 bytes).
    Reth,
    /// ACK Extended Transport Header (4 bytes).
    Aeth,
    /// Atomic Extended Transport Header (28 bytes).
    AtomicEth,
    /// Atomic ACK Extended Transport Header (8 bytes).
    AtomicAckEth,
    /// Immediate data (4 bytes).
    ImmDt,
    /// Invalidate Extended Transport Header (4 bytes).
    Ieth,
    /// Datagram Extended Transport Header (8 bytes).
    Deth,
    /// The 16 reserved bytes of a RoCEv2 CNP.
    Cnp,
    /// FLUSH Extended Transport Header (4 bytes, IBTA 1.5).
    Feth,
}

impl ExtHeader {
    /// Length of this header in bytes.
    pub const fn header_len(self) -> usize {
        match self {
            ExtHeader::Reth => 16,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicEth => 28,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::ImmDt => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::Deth => 8,
            ExtHeader::Cnp => 16,
            ExtHeader::Feth => 4,
        }
    }

    /// Short upper-case name (`"RETH"`, `"AETH"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ExtHeader::Reth => "RETH",
            ExtHeader::Aeth => "AETH",
            ExtHeader::AtomicEth => "AtomicETH",
            ExtHeader::AtomicAckEth => "AtomicAckETH",
            ExtHeader::ImmDt => "ImmDt",
            ExtHeader::Ieth => "IETH",
            ExtHeader::Deth => "DETH",
            ExtHeader::Cnp => "CNP",
            ExtHeader::Feth => "FETH",
        }
    }
}

/// What the table says about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode byte.
    pub code: u8,
    /// Name in `"RC_SEND_ONLY"` style (transport, then operation as in the IBTA tables).
    pub name: &'static str,
    /// Extension headers after the BTH, in wire order.
    pub ext: &'static [ExtHeader],
    /// True when a payload follows the headers (it may still be empty, e.g. a zero-length SEND).
    pub payload: bool,
}

impl OpcodeInfo {
    /// Total length of the extension headers.
    pub const fn ext_len(&self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.ext.len() {
            n += self.ext[i].header_len();
            i += 1;
        }
        n
    }

    /// The payload length this opcode requires, when it is fixed: `Some(0)` for opcodes without
    /// a payload, `Some(8)` for RC ATOMIC WRITE (the 8 bytes written), `None` otherwise.
    pub const fn fixed_payload_len(&self) -> Option<usize> {
        if !self.payload {
            Some(0)
        } else if self.code == RC_ATOMIC_WRITE {
            Some(ATOMIC_WRITE_LEN)
        } else {
            None
        }
    }

    /// True when this opcode is a request (sent by a requester), false for responses
    /// (read responses, ACKs) and CNPs.
    pub const fn is_request(&self) -> bool {
        let op = self.code & 0x1f;
        !(self.code == CNP || (op >= 0x0d && op <= 0x12))
    }

    /// The transport (top 3 bits): 0 RC, 1 UC, 2 RD, 3 UD, 4 CNP.
    pub const fn transport(&self) -> u8 {
        self.code >> 5
    }
}

macro_rules! opcodes {
    ($( $(#[$doc:meta])* $name:ident = $code:expr, [$($ext:ident),*], $payload:expr; )*) => {
        $( $(#[$doc])* pub const $name: u8 = $code; )*

        /// Every opcode in the table, in opcode order.
        pub const ALL: &[OpcodeInfo] = &[
            $( OpcodeInfo {
                code: $code,
                name: stringify!($name),
                ext: &[$(ExtHeader::$ext),*],
                payload: $payload,
            }, )*
        ];

        /// Look an opcode up; `None` for reserved or unsupported opcodes.
        pub const fn lookup(code: u8) -> Option<&'static OpcodeInfo> {
            let mut i = 0;
            while i < ALL.len() {
                if ALL[i].code == code {
                    return Some(&ALL[i]);
                }
                i += 1;
            }
            None
        }
    };
}

opcodes! {
    /// RC SEND First.
    RC_SEND_FIRST = 0x00, [], true;
    /// RC SEND Middle.
    RC_SEND_MIDDLE = 0x01, [], true;
    /// RC SEND Last.
    RC_SEND_LAST = 0x02, [], true;
    /// RC SEND Last with Immediate.
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, [ImmDt], true;
    /// RC SEND Only.
    RC_SEND_ONLY = 0x04, [], true;
    /// RC SEND Only with Immediate.
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, [ImmDt], true;
    /// RC RDMA WRITE First.
    RC_RDMA_WRITE_FIRST = 0x06, [Reth], true;
    /// RC RDMA WRITE Middle.
    RC_RDMA_WRITE_MIDDLE = 0x07, [], true;
    /// RC RDMA WRITE Last.
    RC_RDMA_WRITE_LAST = 0x08, [], true;
    /// RC RDMA WRITE Last with Immediate.
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, [ImmDt], true;
    /// RC RDMA WRITE Only.
    RC_RDMA_WRITE_ONLY = 0x0a, [Reth], true;
    /// RC RDMA WRITE Only with Immediate.
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, [Reth, ImmDt], true;
    /// RC RDMA READ Request.
    RC_RDMA_READ_REQUEST = 0x0c, [Reth], false;
    /// RC RDMA READ Response First.
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, [Aeth], true;
    /// RC RDMA READ Response Middle.
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, [], true;
    /// RC RDMA READ Response Last.
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, [Aeth], true;
    /// RC RDMA READ Response Only.
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, [Aeth], true;
    /// RC Acknowledge.
    RC_ACKNOWLEDGE = 0x11, [Aeth], false;
    /// RC ATOMIC Acknowledge.
    RC_ATOMIC_ACKNOWLEDGE = 0x12, [Aeth, AtomicAckEth], false;
    /// RC CmpSwap.
    RC_COMPARE_SWAP = 0x13, [AtomicEth], false;
    /// RC FetchAdd.
    RC_FETCH_ADD = 0x14, [AtomicEth], false;
    /// RC SEND Last with Invalidate.
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, [Ieth], true;
    /// RC SEND Only with Invalidate.
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, [Ieth], true;
    /// RC FLUSH (IBTA 1.5): FETH then RETH (the range to make visible or persistent).
    RC_FLUSH = 0x1c, [Feth, Reth], false;
    /// RC ATOMIC WRITE (IBTA 1.5): RETH then exactly 8 bytes of payload, written atomically.
    RC_ATOMIC_WRITE = 0x1d, [Reth], true;
    /// UC SEND First.
    UC_SEND_FIRST = 0x20, [], true;
    /// UC SEND Middle.
    UC_SEND_MIDDLE = 0x21, [], true;
    /// UC SEND Last.
    UC_SEND_LAST = 0x22, [], true;
    /// UC SEND Last with Immediate.
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, [ImmDt], true;
    /// UC SEND Only.
    UC_SEND_ONLY = 0x24, [], true;
    /// UC SEND Only with Immediate.
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, [ImmDt], true;
    /// UC RDMA WRITE First.
    UC_RDMA_WRITE_FIRST = 0x26, [Reth], true;
    /// UC RDMA WRITE Middle.
    UC_RDMA_WRITE_MIDDLE = 0x27, [], true;
    /// UC RDMA WRITE Last.
    UC_RDMA_WRITE_LAST = 0x28, [], true;
    /// UC RDMA WRITE Last with Immediate.
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, [ImmDt], true;
    /// UC RDMA WRITE Only.
    UC_RDMA_WRITE_ONLY = 0x2a, [Reth], true;
    /// UC RDMA WRITE Only with Immediate.
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, [Reth, ImmDt], true;
    /// UD SEND Only.
    UD_SEND_ONLY = 0x64, [Deth], true;
    /// UD SEND Only with Immediate.
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, [Deth, ImmDt], true;
    /// RoCEv2 Congestion Notification Packet.
    CNP = 0x81, [Cnp], false;
}

/// Payload length of an RC ATOMIC WRITE (one 64-bit word).
pub const ATOMIC_WRITE_LEN: usize = 8;

/// Name of an opcode, or `"UNKNOWN"`.
pub const fn name(code: u8) -> &'static str {
    match lookup(code) {
        Some(info) => info.name,
        None => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        for w in ALL.windows(2) {
            assert!(w[0].code < w[1].code, "{} before {}", w[0].name, w[1].name);
        }
    }

    #[test]
    fn lookups() {
        let i = lookup(RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).unwrap();
        assert_eq!(i.name, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
        assert_eq!(i.ext, &[ExtHeader::Reth, ExtHeader::ImmDt]);
        assert_eq!(i.ext_len(), 20);
        assert!(i.payload);
        let i = lookup(0x12).unwrap();
        assert_eq!(i.name, "RC_ATOMIC_ACKNOWLEDGE");
        assert_eq!(i.ext_len(), 12);
        assert!(!i.payload);
        assert!(!i.is_request());
        assert!(lookup(RC_FETCH_ADD).unwrap().is_request());
        assert_eq!(lookup(0x65).unwrap().ext, &[ExtHeader::Deth, ExtHeader::ImmDt]);
        assert_eq!(lookup(CNP).unwrap().ext_len(), 16);
        assert_eq!(lookup(0x15), None);
        assert_eq!(lookup(0x40), None); // RD SEND First: RD not supported
        assert_eq!(lookup(0x2c), None); // UC has no READ
        assert_eq!(name(0x04), "RC_SEND_ONLY");
        assert_eq!(lookup(RC_SEND_ONLY).unwrap().fixed_payload_len(), None);
        assert_eq!(lookup(RC_ACKNOWLEDGE).unwrap().fixed_payload_len(), Some(0));
    }

    #[test]
    fn rc_flush_and_atomic_write_as_rxe_sends_them() {
        // include/rdma/ib_pack.h: IB_OPCODE_FLUSH 0x1C, IB_OPCODE_ATOMIC_WRITE 0x1D (RC: 0x00 +).
        let f = lookup(0x1c).unwrap();
        assert_eq!(f.name, "RC_FLUSH");
        assert_eq!(f.ext, &[ExtHeader::Feth, ExtHeader::Reth]);
        assert_eq!(f.ext_len(), 20);
        assert!(!f.payload);
        assert!(f.is_request());
        assert_eq!(f.transport(), 0);
        let w = lookup(0x1d).unwrap();
        assert_eq!(w.name, "RC_ATOMIC_WRITE");
        assert_eq!(w.ext, &[ExtHeader::Reth]);
        assert_eq!(w.fixed_payload_len(), Some(8));
        assert!(w.is_request());
        assert_eq!(lookup(0x1b), None);
        assert_eq!(lookup(0x1e), None);
        assert_eq!(name(0xff), "UNKNOWN");
    }
}
