//! [`Plan`]: what the client asks the server to run (the first message on the control
//! connection), and the buffer layout both sides derive from it.

use anyhow::{Result, anyhow, ensure};

use super::args::{RdmaArgs, RdmaOp, sizes};

/// Buffer bytes the rotating slots of one side may use (per side, per direction).
const SLOT_BUDGET: u64 = 16 << 20;
/// First word of the client's hello: "snicrdma".
const MAGIC: u64 = u64::from_be_bytes(*b"snicrdma");
/// Version of the control protocol; both sides must agree.
const PROTO_VERSION: u64 = 1;

/// What the client asks the server to run; the server's own size flags are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) op: RdmaOp,
    pub(super) lat: bool,
    pub(super) cmp_swap: bool,
    pub(super) verify: bool,
    /// Largest message of the run.
    pub(super) max_size: u32,
    /// Rotating buffer slots per direction.
    pub(super) slots: u32,
    /// Bytes between slots (`max_size` rounded up to 64).
    pub(super) stride: u64,
}

impl Plan {
    pub(super) fn new(a: &RdmaArgs) -> Plan {
        let max_size = sizes(a).into_iter().max().unwrap_or(8);
        let stride = u64::from(max_size).next_multiple_of(64);
        let slots = if a.lat {
            1
        } else {
            u32::try_from((SLOT_BUDGET / stride).clamp(1, u64::from(a.tx_depth))).unwrap_or(1)
        };
        Plan {
            op: a.op,
            lat: a.lat,
            cmp_swap: a.cmp_swap,
            verify: !a.no_verify,
            max_size,
            slots,
            stride,
        }
    }
    pub(super) fn encode(&self) -> [u64; 8] {
        let flags =
            u64::from(self.lat) | u64::from(self.cmp_swap) << 1 | u64::from(self.verify) << 2;
        [
            MAGIC,
            PROTO_VERSION,
            self.op.code(),
            flags,
            u64::from(self.max_size),
            u64::from(self.slots),
            self.stride,
            0,
        ]
    }
    pub(super) fn decode(w: &[u64; 8]) -> Result<Plan> {
        ensure!(w[0] == MAGIC, "the peer on the TCP port is not `snic rdma`");
        ensure!(
            w[1] == PROTO_VERSION,
            "control protocol version {} (this is {PROTO_VERSION})",
            w[1]
        );
        let op = [RdmaOp::Write, RdmaOp::Read, RdmaOp::Send, RdmaOp::Atomic, RdmaOp::Blast]
            .into_iter()
            .find(|o| o.code() == w[2])
            .ok_or_else(|| anyhow!("unknown operation code {}", w[2]))?;
        let max_size = u32::try_from(w[4]).ok().filter(|&s| s > 0 && s <= 1 << 24);
        let max_size = max_size.ok_or_else(|| anyhow!("bad message size {}", w[4]))?;
        let slots = u32::try_from(w[5]).ok().filter(|&s| (1..=8192).contains(&s));
        let slots = slots.ok_or_else(|| anyhow!("bad slot count {}", w[5]))?;
        ensure!(w[6] >= u64::from(max_size) && w[6] <= 1 << 25, "bad slot stride {}", w[6]);
        ensure!(u64::from(slots) * w[6] <= 2 * SLOT_BUDGET, "buffer too large");
        Ok(Plan {
            op,
            lat: w[3] & 1 != 0,
            cmp_swap: w[3] & 2 != 0,
            verify: w[3] & 4 != 0,
            max_size,
            slots,
            stride: w[6],
        })
    }
    /// Buffer slots this side needs: WRITE latency writes from slot 1 into the peer's slot 0.
    pub(super) fn buf_slots(&self) -> u32 {
        if self.lat && matches!(self.op, RdmaOp::Write | RdmaOp::Send) { 2 } else { self.slots }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_round_trips_and_rejects_garbage() {
        let p = Plan {
            op: RdmaOp::Send,
            lat: false,
            cmp_swap: true,
            verify: true,
            max_size: 65536,
            slots: 128,
            stride: 65536,
        };
        assert_eq!(Plan::decode(&p.encode()).unwrap(), p);
        let mut w = p.encode();
        w[0] = 7;
        assert!(Plan::decode(&w).is_err());
        let mut w = p.encode();
        w[6] = 1;
        assert!(Plan::decode(&w).is_err());
    }
}
