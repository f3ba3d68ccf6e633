//! Scapy-like packet specs: `Ether(dst="02:00:00:00:00:02")/IP(src="10.0.0.1")/UDP(dport=7)/Raw(len=64)`
//! built into frame bytes (lengths and checksums filled in as scapy does).

/// Why a packet spec could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketError {
    /// Byte offset in the spec.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for PacketError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "at byte {}: {}", self.at, self.message)
    }
}

impl std::error::Error for PacketError {}

/// Build the frame a layer spec describes.
pub fn build(spec: &str) -> Result<Vec<u8>, PacketError> {
    Err(PacketError { at: 0, message: format!("packet specs are not built yet: {spec:?}") })
}

/// Decode a hex frame (spaces, newlines and `:` allowed between bytes).
pub fn from_hex(hex: &str) -> Result<Vec<u8>, PacketError> {
    let digits: Vec<(usize, u8)> = hex
        .char_indices()
        .filter(|(_, c)| !c.is_whitespace() && *c != ':')
        .map(|(i, c)| (i, c as u8))
        .collect();
    if !digits.len().is_multiple_of(2) {
        return Err(PacketError { at: hex.len(), message: "odd number of hex digits".into() });
    }
    digits
        .chunks(2)
        .map(|p| {
            let s = [p[0].1, p[1].1];
            core::str::from_utf8(&s)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
                .ok_or(PacketError { at: p[0].0, message: "not a hex digit".into() })
        })
        .collect()
}
