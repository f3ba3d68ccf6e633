//! The script port: an in-memory port for deterministic tests and demos. Frames pushed with a
//! time are received at that time (in order); frames the pipeline sends are recorded with the
//! time they left. A [`ScriptHandle`] (cloneable) feeds and reads it from outside the testbed.

use crate::port::{Port, PortCaps, PortCounters};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Inner {
    inbox: VecDeque<(Instant, Vec<u8>)>,
    sent: Vec<(Instant, Vec<u8>)>,
}

/// The outside of a [`ScriptPort`]: push frames to receive, take the frames sent.
#[derive(Debug, Clone, Default)]
pub struct ScriptHandle {
    inner: Arc<Mutex<Inner>>,
}

impl ScriptHandle {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `frame` to be received at `at`. Frames must be pushed in time order; a frame whose
    /// time is earlier than the last one queued is received at the last one's time.
    pub fn push(&self, at: Instant, frame: Vec<u8>) {
        let mut g = self.lock();
        let at = g.inbox.back().map_or(at, |(t, _)| at.max(*t));
        g.inbox.push_back((at, frame));
    }

    /// Frames not yet received.
    pub fn queued(&self) -> usize {
        self.lock().inbox.len()
    }

    /// Take the frames the port sent so far, with their times.
    pub fn take_sent(&self) -> Vec<(Instant, Vec<u8>)> {
        core::mem::take(&mut self.lock().sent)
    }

    /// Frames sent so far (without taking them).
    pub fn sent_count(&self) -> usize {
        self.lock().sent.len()
    }
}

/// An in-memory port driven by a [`ScriptHandle`].
#[derive(Debug)]
pub struct ScriptPort {
    name: String,
    handle: ScriptHandle,
    counters: PortCounters,
}

impl ScriptPort {
    /// A port named `name` and its handle.
    pub fn new(name: &str) -> (ScriptPort, ScriptHandle) {
        let handle = ScriptHandle::default();
        (
            ScriptPort {
                name: name.into(),
                handle: handle.clone(),
                counters: PortCounters::default(),
            },
            handle,
        )
    }
}

impl Port for ScriptPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut g = self.handle.lock();
        let mut n = 0;
        while !batch.is_full() {
            match g.inbox.front() {
                Some((t, _)) if *t <= now => {}
                _ => break,
            }
            let Some((_, f)) = g.inbox.pop_front() else { break };
            if let Some(p) = batch.push_frame(&f) {
                p.meta.rx_time = now;
            }
            self.counters.count_rx(f.len());
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut g = self.handle.lock();
        for p in batch.iter() {
            self.counters.count_tx(p.len());
            g.sent.push((now, p.data().to_vec()));
        }
        Ok(batch.len())
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.handle.lock().inbox.front().map(|(t, _)| *t)
    }

    fn caps(&self) -> PortCaps {
        PortCaps { gso: false, max_frame: 65_535, tunnel_gso: false, merges_udp_tunnel: false }
    }

    fn counters(&self) -> PortCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_arrive_at_their_time_and_sends_are_recorded() {
        let (mut p, h) = ScriptPort::new("s");
        h.push(Instant::from_micros(5), vec![1; 60]);
        h.push(Instant::from_micros(9), vec![2; 60]);
        let mut b = Batch::new(8);
        assert_eq!(p.recv(Instant::from_micros(4), &mut b).unwrap(), 0);
        assert_eq!(p.poll_timeout(), Some(Instant::from_micros(5)));
        assert_eq!(p.recv(Instant::from_micros(5), &mut b).unwrap(), 1);
        assert_eq!(b.packets()[0].data()[0], 1);
        assert_eq!(p.poll_timeout(), Some(Instant::from_micros(9)));
        assert_eq!(p.send(Instant::from_micros(6), &mut b).unwrap(), 1);
        let sent = h.take_sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, Instant::from_micros(6));
        assert_eq!(h.queued(), 1);
    }
}
