//! The null port: a sink that counts what it is sent and never receives.

use crate::port::{Port, PortCaps, PortCounters};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::io;

/// A sink: every frame sent to it is counted as transmitted and discarded.
#[derive(Debug, Default)]
pub struct NullPort {
    counters: PortCounters,
}

impl NullPort {
    /// A new sink with zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Port for NullPort {
    fn name(&self) -> &str {
        "null"
    }

    fn recv(&mut self, _now: Instant, _batch: &mut Batch) -> io::Result<usize> {
        Ok(0)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        for p in batch.iter() {
            self.counters.count_tx(p.len());
        }
        Ok(batch.len())
    }

    fn caps(&self) -> PortCaps {
        PortCaps { gso: true, max_frame: 65_535, tunnel_gso: false, merges_udp_tunnel: false }
    }

    fn counters(&self) -> PortCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_never_receives() {
        let mut n = NullPort::new();
        let mut b = Batch::new(4);
        b.push_frame(&[0u8; 60]).unwrap();
        b.push_frame(&[0u8; 100]).unwrap();
        assert_eq!(n.send(Instant::ZERO, &mut b).unwrap(), 2);
        let mut rx = Batch::new(4);
        assert_eq!(n.recv(Instant::ZERO, &mut rx).unwrap(), 0);
        assert!(rx.is_empty());
        assert_eq!(n.counters().tx_packets, 2);
        assert_eq!(n.counters().tx_bytes, 160);
        assert!(!n.is_exhausted());
    }
}
