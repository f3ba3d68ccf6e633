//! `parse`: walk every frame's headers into `meta.stack` and compute its RSS hash.
//!
//! Uses `snic_wire::stack::parse`, which records where each layer starts and, if a layer could
//! not be read, which one and why. What happens to such a packet is a choice:
//!
//! - `parse` (the default) drops it, counted as `malformed.<wire error>` (`malformed.truncated`,
//!   `malformed.bad_checksum`, ...): later stages only ever see frames that parsed completely.
//! - `parse:pass` keeps it, with the partial stack and the error in `meta.stack.error`, for
//!   stages that forward what they cannot read (a plain L2 bridge, a capture).

use crate::Batch;
use crate::drop::DropReason;
use crate::rss::Toeplitz;
use crate::stage::{Stage, StageCtx};
use crate::trace::TraceWhat;
use snic_time::Instant;

/// The `parse` stage.
#[derive(Debug, Clone)]
pub struct Parse {
    rss: Toeplitz,
    pass_malformed: bool,
}

impl Default for Parse {
    fn default() -> Self {
        Self::new(Toeplitz::default(), false)
    }
}

impl Parse {
    /// A parse stage hashing with `rss`; keeps malformed packets when `pass_malformed`.
    pub fn new(rss: Toeplitz, pass_malformed: bool) -> Self {
        Parse { rss, pass_malformed }
    }
}

impl Stage for Parse {
    fn name(&self) -> &str {
        "parse"
    }

    fn process(&mut self, _now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        let pass = self.pass_malformed;
        ctx.each(batch, |p, ctx| {
            self.rss.parse_and_hash(p);
            let stack = p.meta.stack;
            ctx.trace(p, || TraceWhat::Parsed { stack, rss_hash: p.meta.rss_hash });
            match stack.error() {
                Some((_, err)) if !pass => Err(DropReason::Malformed(err)),
                _ => Ok(()),
            }
        });
    }
}
