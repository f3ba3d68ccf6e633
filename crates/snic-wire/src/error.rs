//! The one error type of `snic-wire`: it says what was wrong, so drop counters can be keyed by it.

use core::fmt;

/// Why a buffer could not be read as the header it was offered as.
///
/// Every variant is `Copy` and carries no heap data: parsing never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the header (or a length it announces) does.
    Truncated { need: usize, got: usize },
    /// A version field holds a value this format does not define (IPv4/IPv6 version, GRE/Geneve version).
    BadVersion { got: u8 },
    /// A header-length field is below the minimum or past the buffer (IPv4 IHL, TCP data offset,
    /// Geneve option length, IPv6 extension header length).
    BadHeaderLen { got: usize },
    /// A total/payload length field disagrees with the header or the buffer.
    BadTotalLen { got: usize },
    /// A checksum does not verify.
    BadChecksum,
    /// The RoCEv2 invariant CRC does not verify (`expected` is what we computed, `got` what the packet carries).
    BadIcrc { expected: u32, got: u32 },
    /// An opcode (BTH, ICMP, ARP) this format does not define or we do not accept here.
    BadOpcode { got: u8 },
    /// An option (IPv4, TCP, Geneve) is malformed: bad length, runs past the header.
    BadOption,
    /// A required flag is missing or a must-be-zero field is set (VXLAN I flag, GRE key bit for NVGRE).
    BadFlags,
    /// More nested headers than we accept (a third VLAN tag, an IPv6 extension chain that is too long).
    TooManyHeaders,
    /// A field holds a value outside what the format allows; names the field.
    BadValue { field: &'static str },
}

/// `Result` with [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

impl Error {
    /// A short stable name for counters and JSON (`"truncated"`, `"bad_icrc"`, ...).
    pub const fn name(&self) -> &'static str {
        match self {
            Error::Truncated { .. } => "truncated",
            Error::BadVersion { .. } => "bad_version",
            Error::BadHeaderLen { .. } => "bad_header_len",
            Error::BadTotalLen { .. } => "bad_total_len",
            Error::BadChecksum => "bad_checksum",
            Error::BadIcrc { .. } => "bad_icrc",
            Error::BadOpcode { .. } => "bad_opcode",
            Error::BadOption => "bad_option",
            Error::BadFlags => "bad_flags",
            Error::TooManyHeaders => "too_many_headers",
            Error::BadValue { .. } => "bad_value",
        }
    }

    /// Every error name, in a fixed order (index with [`Error::index`]), for counter arrays.
    pub const NAMES: [&'static str; 11] = [
        "truncated",
        "bad_version",
        "bad_header_len",
        "bad_total_len",
        "bad_checksum",
        "bad_icrc",
        "bad_opcode",
        "bad_option",
        "bad_flags",
        "too_many_headers",
        "bad_value",
    ];

    /// Position of this error's name in [`Error::NAMES`].
    pub const fn index(&self) -> usize {
        match self {
            Error::Truncated { .. } => 0,
            Error::BadVersion { .. } => 1,
            Error::BadHeaderLen { .. } => 2,
            Error::BadTotalLen { .. } => 3,
            Error::BadChecksum => 4,
            Error::BadIcrc { .. } => 5,
            Error::BadOpcode { .. } => 6,
            Error::BadOption => 7,
            Error::BadFlags => 8,
            Error::TooManyHeaders => 9,
            Error::BadValue { .. } => 10,
        }
    }

    /// Shorthand used by every `check_len`.
    pub(crate) fn need(need: usize, got: usize) -> Result<()> {
        if got < need { Err(Error::Truncated { need, got }) } else { Ok(()) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated { need, got } => write!(f, "truncated: need {need} bytes, got {got}"),
            Error::BadVersion { got } => write!(f, "bad version {got}"),
            Error::BadHeaderLen { got } => write!(f, "bad header length {got}"),
            Error::BadTotalLen { got } => write!(f, "bad total length {got}"),
            Error::BadChecksum => write!(f, "bad checksum"),
            Error::BadIcrc { expected, got } => {
                write!(f, "bad ICRC: computed {expected:#010x}, packet carries {got:#010x}")
            }
            Error::BadOpcode { got } => write!(f, "bad opcode {got:#04x}"),
            Error::BadOption => write!(f, "malformed option"),
            Error::BadFlags => write!(f, "bad flags"),
            Error::TooManyHeaders => write!(f, "too many nested headers"),
            Error::BadValue { field } => write!(f, "bad value in field {field}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indices_agree() {
        let all = [
            Error::Truncated { need: 1, got: 0 },
            Error::BadVersion { got: 0 },
            Error::BadHeaderLen { got: 0 },
            Error::BadTotalLen { got: 0 },
            Error::BadChecksum,
            Error::BadIcrc { expected: 0, got: 1 },
            Error::BadOpcode { got: 0 },
            Error::BadOption,
            Error::BadFlags,
            Error::TooManyHeaders,
            Error::BadValue { field: "x" },
        ];
        assert_eq!(all.len(), Error::NAMES.len());
        for e in all {
            assert_eq!(Error::NAMES[e.index()], e.name());
        }
    }
}
