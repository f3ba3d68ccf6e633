//! AF_XDP ports (`afxdp:IFNAME[,QUEUE]`): not built yet; opening one says so.

use crate::port::{Port, PortCaps};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::io;

/// An AF_XDP socket on one queue of an interface.
#[derive(Debug)]
pub struct AfXdpPort {
    name: String,
}

impl AfXdpPort {
    /// Open an AF_XDP socket on `queue` of `ifname`.
    pub fn open(ifname: &str, queue: u32) -> io::Result<AfXdpPort> {
        let _ = AfXdpPort { name: format!("afxdp:{ifname},{queue}") };
        Err(io::Error::new(io::ErrorKind::Unsupported, "AF_XDP ports are not built yet"))
    }
}

impl Port for AfXdpPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn recv(&mut self, _now: Instant, _batch: &mut Batch) -> io::Result<usize> {
        Ok(0)
    }
    fn send(&mut self, _now: Instant, _batch: &mut Batch) -> io::Result<usize> {
        Ok(0)
    }
    fn caps(&self) -> PortCaps {
        PortCaps { gso: false, max_frame: 1514, tunnel_gso: false }
    }
}
