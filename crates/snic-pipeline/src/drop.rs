//! Why a packet was dropped.
//!
//! Every drop in snic has exactly one [`DropReason`], and every reason has a fixed slot in the
//! counter arrays ([`DropReason::index`], [`DROP_REASONS`] slots in all), so counting a drop is an
//! array increment: no hashing, no allocation.
//!
//! A malformed packet is keyed by the `snic_wire::Error` that rejected it, so the counters say
//! *what* was wrong (`malformed.truncated`, `malformed.bad_checksum`, ...), not only that
//! something was.

use core::fmt;
use snic_wire::Error as WireError;

/// Number of wire error kinds (the first slots of the drop counter array).
const WIRE: usize = WireError::NAMES.len();

/// Number of distinct drop-reason counter slots.
pub const DROP_REASONS: usize = WIRE + OTHER_NAMES.len();

/// Names of the non-`Malformed` reasons, in slot order after the wire errors.
const OTHER_NAMES: [&str; 27] = [
    "no_egress",
    "tx_queue_full",
    "tx_error",
    "loop_prevented",
    "bad_icrc",
    "filtered",
    "pipeline_full",
    "rx_error",
    "too_big",
    "no_buffer",
    "offload_failed",
    "policy_deny",
    "exception_overflow",
    "meter",
    "queue_full",
    "not_a_flow",
    "transpose_failed",
    "local_full",
    "p4_drop",
    "p4_parser_error",
    "p4_fault",
    "p4_cpu_full",
    "kernel_drop",
    "kernel_auth",
    "kernel_no_key",
    "xdp_drop",
    "xdp_aborted",
];

/// Why a packet was dropped. Names ([`DropReason::name`], `Display`) are lower-case and stable:
/// they are counter keys in JSON output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// A header could not be read; the wire error says which check failed.
    Malformed(WireError),
    /// No stage decided where the packet goes.
    NoEgress,
    /// The egress port's transmit queue was full.
    TxQueueFull,
    /// The egress port failed to transmit.
    TxError,
    /// The packet would have left by the port it arrived on.
    LoopPrevented,
    /// A RoCEv2 packet's ICRC does not verify (and the classifier enforces it).
    BadIcrc,
    /// A filter or policy stage refused the packet.
    Filtered,
    /// The pipeline had no room for the packet (batch full, input queue full).
    PipelineFull,
    /// The ingress port reported an error for this frame.
    RxError,
    /// The frame is larger than the egress port can take.
    TooBig,
    /// No packet buffer was available.
    NoBuffer,
    /// A super-packet or partial checksum bound for a port without offload could not be
    /// segmented or completed in software (inconsistent headers).
    OffloadFailed,
    /// The vSwitch policy denied the flow (ACL, no route, no mapping, spoofed source, ...).
    PolicyDeny,
    /// The vSwitch exception queue (packets waiting for the slow path) was full.
    ExceptionOverflow,
    /// A meter's rate was exceeded (and the packet was not ECN-markable, or the meter drops).
    Metered,
    /// A shaped egress queue was at its limit.
    EgressQueueFull,
    /// The vSwitch got a frame that is neither IP nor ARP, or whose headers did not parse.
    NotAFlow,
    /// A header transposition could not be applied to the packet (no room, wrong family, TTL
    /// expired, a super-packet to encapsulate).
    TransposeFailed,
    /// A packet for the device itself ([`crate::PortId::LOCAL`]) found the pipeline's local
    /// queue full (the driver did not take the earlier ones).
    LocalFull,
    /// A P4 program dropped the packet (`mark_to_drop`, egress port 511, an empty multicast
    /// group, a clone-only path): it produced no output.
    P4Drop,
    /// A P4 program's parser ended in an error and the packet then produced no output (v1model
    /// goes on into ingress after a parser error, so an error alone is not a drop).
    P4ParserError,
    /// The P4 executor failed on this packet (a bug in snic, reported on stderr); the stage
    /// caught it, dropped the packet and went on.
    P4Fault,
    /// A P4 program sent the packet to the CPU port and no controller took it: none is
    /// connected, or its packet-in queue was full.
    P4CpuFull,
    /// A streaming kernel dropped the packet by its own rule (a user kernel's filter).
    KernelDrop,
    /// A streaming kernel could not authenticate the packet: a decrypting `crypt` kernel found
    /// a bad tag, an unknown key slot or a payload too short to hold its header and tag.
    KernelAuth,
    /// A streaming kernel needed a key it does not have (a `crypt` kernel whose key slot is
    /// empty): the packet is dropped rather than sent in the clear.
    KernelNoKey,
    /// An XDP program returned `XDP_DROP`.
    XdpDrop,
    /// An XDP program returned `XDP_ABORTED` (or an invalid code), or faulted: an access
    /// outside its memory, a helper given bad arguments, its instruction budget exhausted.
    XdpAborted,
}

impl DropReason {
    /// The counter slot of this reason, `< DROP_REASONS`.
    pub const fn index(&self) -> usize {
        match self {
            DropReason::Malformed(e) => e.index(),
            DropReason::NoEgress => WIRE,
            DropReason::TxQueueFull => WIRE + 1,
            DropReason::TxError => WIRE + 2,
            DropReason::LoopPrevented => WIRE + 3,
            DropReason::BadIcrc => WIRE + 4,
            DropReason::Filtered => WIRE + 5,
            DropReason::PipelineFull => WIRE + 6,
            DropReason::RxError => WIRE + 7,
            DropReason::TooBig => WIRE + 8,
            DropReason::NoBuffer => WIRE + 9,
            DropReason::OffloadFailed => WIRE + 10,
            DropReason::PolicyDeny => WIRE + 11,
            DropReason::ExceptionOverflow => WIRE + 12,
            DropReason::Metered => WIRE + 13,
            DropReason::EgressQueueFull => WIRE + 14,
            DropReason::NotAFlow => WIRE + 15,
            DropReason::TransposeFailed => WIRE + 16,
            DropReason::LocalFull => WIRE + 17,
            DropReason::P4Drop => WIRE + 18,
            DropReason::P4ParserError => WIRE + 19,
            DropReason::P4Fault => WIRE + 20,
            DropReason::P4CpuFull => WIRE + 21,
            DropReason::KernelDrop => WIRE + 22,
            DropReason::KernelAuth => WIRE + 23,
            DropReason::KernelNoKey => WIRE + 24,
            DropReason::XdpDrop => WIRE + 25,
            DropReason::XdpAborted => WIRE + 26,
        }
    }

    /// The reason's stable name without the wire error: `"malformed"`, `"no_egress"`, ...
    pub const fn name(&self) -> &'static str {
        match self {
            DropReason::Malformed(_) => "malformed",
            other => OTHER_NAMES[other.index() - WIRE],
        }
    }

    /// The counter key of a slot: `("malformed", Some("truncated"))` or `("no_egress", None)`.
    /// `None` when `index >= DROP_REASONS`.
    pub fn slot_name(index: usize) -> Option<(&'static str, Option<&'static str>)> {
        if index < WIRE {
            WireError::NAMES.get(index).map(|n| ("malformed", Some(*n)))
        } else {
            OTHER_NAMES.get(index - WIRE).map(|n| (*n, None))
        }
    }

    /// The full counter key of a slot as one string: `"malformed.truncated"`, `"no_egress"`.
    pub fn slot_key(index: usize) -> Option<SlotKey> {
        Self::slot_name(index).map(|(a, b)| SlotKey(a, b))
    }
}

/// A drop counter key (`"malformed.truncated"`, `"bad_icrc"`) that formats without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotKey(&'static str, Option<&'static str>);

impl fmt::Display for SlotKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(sub) => write!(f, "{}.{}", self.0, sub),
            None => f.write_str(self.0),
        }
    }
}

impl fmt::Display for DropReason {
    /// The counter key, e.g. `malformed.truncated` or `loop_prevented`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::Malformed(e) => write!(f, "malformed.{}", e.name()),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_distinct_and_named() {
        let all = [
            DropReason::Malformed(WireError::Truncated { need: 14, got: 3 }),
            DropReason::Malformed(WireError::BadChecksum),
            DropReason::NoEgress,
            DropReason::TxQueueFull,
            DropReason::TxError,
            DropReason::LoopPrevented,
            DropReason::BadIcrc,
            DropReason::Filtered,
            DropReason::PipelineFull,
            DropReason::RxError,
            DropReason::TooBig,
            DropReason::NoBuffer,
            DropReason::OffloadFailed,
            DropReason::PolicyDeny,
            DropReason::ExceptionOverflow,
            DropReason::Metered,
            DropReason::EgressQueueFull,
            DropReason::NotAFlow,
            DropReason::TransposeFailed,
            DropReason::LocalFull,
            DropReason::P4Drop,
            DropReason::P4ParserError,
            DropReason::P4Fault,
            DropReason::P4CpuFull,
            DropReason::KernelDrop,
            DropReason::KernelAuth,
            DropReason::KernelNoKey,
            DropReason::XdpDrop,
            DropReason::XdpAborted,
        ];
        let mut seen = [false; DROP_REASONS];
        for r in all {
            assert!(r.index() < DROP_REASONS);
            assert!(!seen[r.index()], "{r} shares a slot");
            seen[r.index()] = true;
            assert_eq!(DropReason::slot_key(r.index()).unwrap().to_string(), r.to_string());
        }
        assert_eq!(
            DropReason::Malformed(WireError::Truncated { need: 1, got: 0 }).to_string(),
            "malformed.truncated"
        );
        assert_eq!(DropReason::LoopPrevented.to_string(), "loop_prevented");
        assert_eq!(DropReason::BadIcrc.name(), "bad_icrc");
        assert!(DropReason::slot_name(DROP_REASONS).is_none());
    }

    #[test]
    fn every_slot_has_a_unique_key() {
        let keys: Vec<String> =
            (0..DROP_REASONS).map(|i| DropReason::slot_key(i).unwrap().to_string()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len());
    }
}
