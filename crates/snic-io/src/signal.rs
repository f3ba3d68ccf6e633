//! Signals: SIGINT and SIGTERM ask for a clean stop (the caller prints the final counters),
//! SIGUSR1 asks for a stats print. Handlers only set atomic flags (via `signal-hook`); the I/O
//! loop reads them. A second SIGINT or SIGTERM while a stop is already pending exits the process
//! at once, for a run that does not stop.

use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The flags the signal handlers set.
#[derive(Debug, Clone, Default)]
pub struct Signals {
    /// Set by SIGINT/SIGTERM: stop cleanly.
    pub stop: Arc<AtomicBool>,
    /// Set by SIGUSR1: print stats (the reader clears it).
    pub stats: Arc<AtomicBool>,
}

impl Signals {
    /// Flags not connected to any signal (for tests and embedding).
    pub fn new() -> Self {
        Self::default()
    }

    /// Install the handlers: SIGINT/SIGTERM set `stop` (a second one exits with status 130),
    /// SIGUSR1 sets `stats`.
    pub fn install() -> io::Result<Self> {
        let s = Self::new();
        for sig in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag before this signal's own handler sets it:
            // exits only when a stop was already pending.
            signal_hook::flag::register_conditional_shutdown(sig, 130, s.stop.clone())?;
            signal_hook::flag::register(sig, s.stop.clone())?;
        }
        signal_hook::flag::register(SIGUSR1, s.stats.clone())?;
        Ok(s)
    }

    /// True once a stop was requested.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// True (once) when a stats print was requested since the last call.
    pub fn take_stats_request(&self) -> bool {
        self.stats.swap(false, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigusr1_sets_stats_and_sigterm_sets_stop() {
        let s = Signals::install().unwrap();
        assert!(!s.take_stats_request());
        signal_hook::low_level::raise(SIGUSR1).unwrap();
        assert!(s.take_stats_request());
        assert!(!s.take_stats_request());
        assert!(!s.stop_requested());
        signal_hook::low_level::raise(SIGTERM).unwrap();
        assert!(s.stop_requested());
    }
}
