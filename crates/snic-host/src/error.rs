//! The library's error type.

use std::fmt;

/// Result of the host library.
pub type Result<T> = std::result::Result<T, HostError>;

/// Why a host-library call failed.
#[derive(Debug)]
pub enum HostError {
    /// A system call failed (socket, memfd, mmap, eventfd).
    Io(std::io::Error),
    /// snic refused a setup request (nothing changed).
    Refused {
        /// Machine-readable code from snic (for example "no_memory").
        code: String,
        /// Human-readable reason.
        message: String,
    },
    /// snic answered something that does not fit the protocol.
    Protocol(String),
    /// An argument is out of range (offset, size, index); the text says which.
    OutOfRange(String),
    /// No free slot in the ring (or FIFO).
    RingFull,
    /// Nothing happened in time.
    Timeout,
    /// A DMA transfer completed with an error status.
    Dma(snic_dma::Status),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Io(e) => write!(f, "I/O error: {e}"),
            HostError::Refused { code, message } => {
                write!(f, "refused by snic ({code}): {message}")
            }
            HostError::Protocol(m) => write!(f, "protocol error: {m}"),
            HostError::OutOfRange(m) => write!(f, "out of range: {m}"),
            HostError::RingFull => write!(f, "ring full"),
            HostError::Timeout => write!(f, "timed out"),
            HostError::Dma(s) => write!(f, "DMA error: {}", s.reason()),
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for HostError {
    fn from(e: std::io::Error) -> HostError {
        HostError::Io(e)
    }
}
