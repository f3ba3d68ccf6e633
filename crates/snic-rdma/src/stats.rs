//! Counters of one NIC. Every dropped packet and every error completion is counted here.

/// RDMA engine counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RdmaStats {
    /// Packets emitted.
    pub tx_packets: u64,
    /// Bytes emitted (from the IP header).
    pub tx_bytes: u64,
    /// Packets handed in.
    pub rx_packets: u64,
    /// Bytes handed in.
    pub rx_bytes: u64,
    /// Payloads copied to their destination in the same pass as their ICRC check (in-order
    /// continuations of a SEND, WRITE or READ response; counted when the ICRC was good).
    pub rx_placed: u64,
    /// Dropped: not IP/UDP or inconsistent lengths.
    pub rx_malformed: u64,
    /// Dropped: UDP port is not RoCE.
    pub rx_not_roce: u64,
    /// Dropped: ICRC mismatch.
    pub rx_bad_icrc: u64,
    /// Dropped: BTH / extension headers do not parse.
    pub rx_bad_headers: u64,
    /// Dropped: no such QP.
    pub rx_unknown_qp: u64,
    /// Dropped: the source address is not the QP's peer.
    pub rx_wrong_peer: u64,
    /// Dropped: the QP's state does not accept this packet (e.g. ERR, RESET, INIT).
    pub rx_bad_state: u64,
    /// Dropped: an opcode RC does not use here (UD/UC, or a request/response mismatch).
    pub rx_bad_opcode: u64,

    /// Requester: request packets sent for the first time.
    pub req_packets: u64,
    /// Requester: request packets sent again (go-back-N after timeout or NAK).
    pub retransmits: u64,
    /// Requester: retransmission timer expiries.
    pub timeouts: u64,
    /// Requester: loss probes fired (no progress for the path's probe timeout: go back to the
    /// oldest unacknowledged packet without spending `retry_cnt`; see [`crate::window`]).
    pub loss_probes: u64,
    /// Requester: new packets held back because the path's send window was full.
    pub window_stalls: u64,
    /// Requester: ACKs received (including coalesced ones).
    pub acks_rcvd: u64,
    /// Requester: PSN sequence error NAKs received.
    pub seq_naks_rcvd: u64,
    /// Requester: RNR NAKs received.
    pub rnr_naks_rcvd: u64,
    /// Requester: other NAKs received (invalid request, remote access, remote operational).
    pub err_naks_rcvd: u64,
    /// Requester: duplicate or stale responses ignored.
    pub dup_responses: u64,
    /// Requester: READ response packets received.
    pub read_resp_rcvd: u64,
    /// Requester: sends held back because `max_rd_atomic` READ/atomics were outstanding.
    pub rd_atomic_stalls: u64,
    /// Requester: SENDs / WRITEs with immediate held back for want of end-to-end credits (the
    /// responder's AETH credit count, IBTA 9.7.7.2).
    pub credit_stalls: u64,

    /// Responder: ACKs sent.
    pub acks_sent: u64,
    /// Responder: PSN sequence error NAKs sent.
    pub seq_naks_sent: u64,
    /// Responder: RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Responder: invalid request NAKs sent.
    pub inv_req_naks_sent: u64,
    /// Responder: remote access error NAKs sent.
    pub rem_access_naks_sent: u64,
    /// Responder: remote operational error NAKs sent.
    pub rem_op_naks_sent: u64,
    /// Responder: duplicate requests seen.
    pub dup_requests: u64,
    /// Responder: duplicate READs answered again from saved resources.
    pub dup_reads_replayed: u64,
    /// Responder: duplicate atomics answered from saved resources (not executed again).
    pub dup_atomics_replayed: u64,
    /// Responder: atomics executed.
    pub atomics_executed: u64,
    /// Responder: FLUSHes executed (IBTA 1.5).
    pub flushes_executed: u64,
    /// Responder: ATOMIC WRITEs executed (IBTA 1.5).
    pub atomic_writes_executed: u64,
    /// Responder: duplicate FLUSHes answered again from saved resources.
    pub dup_flushes_replayed: u64,
    /// Responder: duplicate ATOMIC WRITEs answered again from saved resources (not written
    /// again).
    pub dup_atomic_writes_replayed: u64,
    /// Responder: READ response packets sent.
    pub read_resp_sent: u64,
    /// Responder: out-of-sequence requests dropped silently (a NAK was already sent).
    pub out_of_seq_dropped: u64,
    /// Responder: new READ/atomic requests dropped, or ACKs / recoverable NAKs not queued,
    /// because the QP's response queue was full (the requester's timer recovers).
    pub resp_busy_drops: u64,

    /// Congestion: packets received with ECN CE.
    pub ecn_ce_rcvd: u64,
    /// Congestion: CNPs sent.
    pub cnps_sent: u64,
    /// Congestion: CNPs received.
    pub cnps_rcvd: u64,
    /// Congestion: rate decreases applied.
    pub rate_decreases: u64,

    /// Completions written.
    pub cqes: u64,
    /// Completions with an error status.
    pub cqe_errors: u64,
    /// Completions lost to a full CQ (the CQ is then in error).
    pub cq_overflows: u64,
    /// QPs that entered the error state.
    pub qp_errors: u64,
}
