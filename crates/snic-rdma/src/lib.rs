//! snic's RDMA engine: RoCEv2 reliable connection (RC), sans-IO.
//!
//! [`Rnic`] is one RDMA NIC: PDs, MRs, CQs, SRQs and RC QPs, with a verbs-style API
//! (`reg_mr`, `create_qp`, `modify_qp`, `post_send`, `post_recv`, `poll_cq`, batched posts with
//! one doorbell). It takes packets (from the IP header on) and the current time, and returns
//! packets and timer deadlines: [`Rnic::handle_packet`], [`Rnic::poll_transmit`],
//! [`Rnic::poll_timeout`], [`Rnic::handle_timeout`]. It opens no socket, spawns no thread and
//! reads no clock: `snic-io` drives it over UDP sockets, the testbed over simulated links.
//!
//! Behaviour follows the IBTA RC rules as the Linux soft-RoCE driver (rxe) implements them:
//! - requester ([`req`]): WQE fetch from the SQ ring in memory, segmentation by path MTU, PSNs,
//!   AckReq, retransmission timer, go-back-N, RNR and retry counters, `max_rd_atomic`, fences;
//!   completer: ACK / NAK / READ response / atomic ACK handling and send CQEs.
//! - responder ([`resp`]): PSN checking, duplicate detection, NAKs, RQ/SRQ consumption, WRITE,
//!   READ, atomic, FLUSH and ATOMIC WRITE (IBTA 1.5) execution with saved resources for
//!   replay, coalesced ACKs, CNPs on CE.
//! - congestion ([`cc`]): a DCQCN-style rate reaction to CNPs.
//!
//! Memory is [`snic_dma::AddressSpace`]: MRs and the QPs' rings live in host or device memory,
//! device addresses carrying [`snic_dma::DEVICE_ADDR_PREFIX`].
//!
//! Not here: UD/UC transports, memory windows, RDMA CM; the UDP transport (in `snic-io`).

pub mod cc;
pub mod export;
pub mod mr;
pub mod nic_core;
pub mod pkt;
pub mod qp;
pub mod req;
pub mod req_state;
pub mod resp;
pub mod resp_state;
pub mod ring;
pub mod rnic;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verbs;
pub mod window;
pub mod wqe;

pub use export::{EXPORT_VERSION, ExportError, ImportError, RnicExport};
pub use nic_core::RnicConfig;
pub use pkt::{Path, RxError, RxPkt};
pub use rnic::Rnic;
pub use stats::RdmaStats;
pub use verbs::*;

/// PSN arithmetic on 24 bits.
pub mod psn {
    /// Mask of a 24-bit PSN.
    pub const MASK: u32 = 0x00ff_ffff;

    /// `a + n` modulo 2^24.
    pub const fn add(a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & MASK
    }

    /// Signed distance `a - b` in the 24-bit circle, in `-2^23..2^23` (IBTA 9.7.1: a PSN is
    /// "ahead" if it is less than 2^23 in front).
    pub const fn diff(a: u32, b: u32) -> i32 {
        ((a.wrapping_sub(b) << 8) as i32) >> 8
    }

    /// `a` is before `b`.
    pub const fn before(a: u32, b: u32) -> bool {
        diff(a, b) < 0
    }
}

/// The RNR NAK timer values of IBTA table 45, in microseconds, by 5-bit code.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// Local ACK timeout for a `timeout` attribute: 4.096 us x 2^timeout; `None` for 0 (infinite).
pub fn ack_timeout(timeout: u8) -> Option<core::time::Duration> {
    if timeout == 0 {
        return None;
    }
    let ns = 4096u64.checked_shl(u32::from(timeout.min(31)))?;
    Some(core::time::Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps() {
        assert_eq!(psn::add(psn::MASK, 1), 0);
        assert_eq!(psn::diff(0, psn::MASK), 1);
        assert_eq!(psn::diff(psn::MASK, 0), -1);
        assert!(psn::before(psn::MASK - 5, 3));
        assert!(!psn::before(3, psn::MASK - 5));
        assert_eq!(ack_timeout(14).unwrap().as_nanos(), 4096 * 16384);
        assert_eq!(ack_timeout(0), None);
    }
}
