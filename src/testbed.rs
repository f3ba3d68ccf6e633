//! `snic testbed`: two NIC nodes joined by an impaired virtual link, run on the simulated clock.
//!
//! Node A runs the default pipeline (parse, classify, l2fwd) from a seeded generator port
//! (`gen:N,SEED`, port 0; one frame every `--interval-ns` of simulated time) onto one end of a virtual link (port 1); node B runs the same pipeline
//! from the other end (port 0) into a counting null sink (port 1). The A→B direction carries the
//! impairments given on the command line, seeded from `--seed`. The testbed is driven until
//! nothing is pending, with bounds that turn a livelock into an error instead of a hang.
//!
//! Nothing here reads the real clock: the same flags give byte-identical output. The report ends
//! with the accounting check: every generated packet, plus every duplicate the link made, is
//! either delivered to the sink or counted as a drop somewhere (a stage, a port, the link's loss
//! model or its full queue).

use anyhow::{Context, Result, anyhow};
use core::time::Duration;
use serde_json::{Value, json};
use snic_io::generator::GenPort;
use snic_io::null::NullPort;
use snic_io::vlink::{LinkConfig, LinkStats, VLink, VLinkPort};
use snic_io::{Port, PortCaps, PortCounters};
use snic_pipeline::{Batch, Counters, Pipeline, PortId};
use snic_testbed::Testbed;
use snic_time::Instant;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard};

/// The pipeline both nodes run.
const STAGES: [&str; 3] = ["parse", "classify", "l2fwd"];

/// Arguments of `snic testbed`.
#[derive(Debug, Clone, clap::Args)]
pub struct TestbedArgs {
    /// Packets the generator feeds into node A.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub count: u64,
    /// Seed of the generated traffic and of the link's impairments.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Probability that the link loses a frame, in 0..=1.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability,
          allow_negative_numbers = true)]
    pub loss: f64,
    /// Probability that the link delivers a frame twice, in 0..=1.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability,
          allow_negative_numbers = true)]
    pub dup: f64,
    /// Probability that the link holds a frame back (100 us) so later ones pass it, in 0..=1.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability,
          allow_negative_numbers = true)]
    pub reorder: f64,
    /// Propagation delay of the link, in microseconds.
    #[arg(long = "delay-us", value_name = "D", default_value_t = 0)]
    pub delay_us: u64,
    /// Uniform extra delay in [0, J) microseconds, per frame.
    #[arg(long = "jitter-us", value_name = "J", default_value_t = 0)]
    pub jitter_us: u64,
    /// Line rate of the link in Mbit/s; 0 means unlimited (no serialisation delay, no queue).
    #[arg(long = "rate-mbps", value_name = "R", default_value_t = 0)]
    pub rate_mbps: u64,
    /// Most frames waiting for the wire on a rate-limited link; more are tail-dropped.
    #[arg(long = "queue-limit", value_name = "Q", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub queue_limit: u64,
    /// Nanoseconds between generated frames (1000: 1 Mpps); 0 means all at time zero.
    #[arg(long = "interval-ns", value_name = "NS", default_value_t = 1_000)]
    pub interval_ns: u64,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Parse a probability in `0..=1` (clap names the flag in the error).
fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("must be a probability between 0 and 1, got {s}"))
    }
}

impl TestbedArgs {
    /// The A→B link's impairments.
    pub fn link_config(&self) -> Result<LinkConfig> {
        let rate_bps = self
            .rate_mbps
            .checked_mul(1_000_000)
            .ok_or_else(|| anyhow!("--rate-mbps {} is too large", self.rate_mbps))?;
        let queue_limit = usize::try_from(self.queue_limit)
            .map_err(|_| anyhow!("--queue-limit {} is too large", self.queue_limit))?;
        Ok(LinkConfig {
            loss: self.loss,
            duplicate: self.dup,
            reorder: self.reorder,
            delay: Duration::from_micros(self.delay_us),
            jitter: Duration::from_micros(self.jitter_us),
            rate_bps,
            queue_limit,
            ..LinkConfig::default()
        })
    }
}

/// A link endpoint the testbed drives while the report still reads its link's statistics.
/// Locked once per batch, never per packet.
#[derive(Debug, Clone)]
struct SharedLinkPort {
    name: String,
    inner: Arc<Mutex<VLinkPort>>,
}

impl SharedLinkPort {
    fn new(port: VLinkPort) -> Self {
        SharedLinkPort { name: port.name().to_string(), inner: Arc::new(Mutex::new(port)) }
    }

    fn lock(&self) -> MutexGuard<'_, VLinkPort> {
        // Everything runs on one thread; a poisoned lock cannot leave the port inconsistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Port for SharedLinkPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.lock().recv(now, batch)
    }
    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.lock().send(now, batch)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.lock().poll_timeout()
    }
    fn caps(&self) -> PortCaps {
        self.lock().caps()
    }
    fn counters(&self) -> PortCounters {
        self.lock().counters()
    }
}

/// One node's counters at the end of a run.
#[derive(Debug)]
pub struct NodeReport {
    /// The node's name.
    pub name: String,
    /// Pipeline and I/O counters, merged.
    pub counters: Counters,
    /// Each port's name and own (device) counters.
    pub ports: Vec<(String, PortCounters)>,
}

/// What a finished run measured.
#[derive(Debug)]
pub struct Outcome {
    /// Node A, then node B.
    pub nodes: Vec<NodeReport>,
    /// The A→B direction's statistics.
    pub link: LinkStats,
    /// Simulated time when the testbed went idle.
    pub elapsed: Instant,
    /// Steps the testbed took.
    pub steps: u64,
}

/// Build and drive the testbed.
pub fn simulate(args: &TestbedArgs) -> Result<Outcome> {
    let cfg = args.link_config()?;
    // The link seed is derived from, but not equal to, the traffic seed.
    let (la, lb) = VLink::pair("vlink", cfg, LinkConfig::default(), args.seed ^ 0x5eed_11a5);
    let la = SharedLinkPort::new(la);
    let lb = SharedLinkPort::new(lb);
    let stats_handle = la.clone();

    let mut gen_port = GenPort::new(args.count, args.seed);
    if args.interval_ns > 0 {
        gen_port = gen_port.with_pace(Instant::ZERO, Duration::from_nanos(args.interval_ns));
    }
    let pipeline = || Pipeline::from_strs(&STAGES).map_err(|e| anyhow!("pipeline: {e}"));
    // Each step moves the clock to a new deadline (a generated frame, a delivery); each round
    // at one instant moves at least one packet. Every packet crosses two nodes and may be
    // duplicated once, so four per generated packet plus slack bounds a run that settles;
    // beyond that something never settles, and it is reported instead of hanging.
    let bound =
        usize::try_from(args.count).unwrap_or(usize::MAX).saturating_mul(4).saturating_add(10_000);
    let mut tb = Testbed::new().with_max_rounds(bound);
    let a = tb.add_node("a", pipeline()?, vec![Box::new(gen_port), Box::new(la)]);
    let b = tb.add_node("b", pipeline()?, vec![Box::new(lb), Box::new(NullPort::new())]);

    tb.drive(bound).context("the testbed did not settle")?;

    let mut nodes = Vec::new();
    for id in [a, b] {
        let node = tb.node(id).ok_or_else(|| anyhow!("node {} missing", id.0))?;
        nodes.push(NodeReport {
            name: node.name().to_string(),
            counters: node.counters(),
            ports: node.port_counters(),
        });
    }
    let link = stats_handle.lock().tx_link_stats();
    Ok(Outcome { nodes, link, elapsed: tb.now(), steps: tb.steps() })
}

/// The accounting of a run: where every generated packet went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accounting {
    /// Packets the generator produced (node A's port 0 received).
    pub generated: u64,
    /// Extra copies the link made.
    pub duplicated: u64,
    /// Packets the sink took.
    pub delivered_to_sink: u64,
    /// Drops counted by node A (stages and ports).
    pub dropped_a: u64,
    /// Drops counted by node B (stages and ports).
    pub dropped_b: u64,
    /// Frames the link lost.
    pub lost: u64,
    /// Frames the link's full queue dropped.
    pub tail_dropped: u64,
}

impl Accounting {
    /// True when generated + duplicated = sink + every drop.
    pub fn balanced(&self) -> bool {
        self.generated + self.duplicated
            == self.delivered_to_sink
                + self.dropped_a
                + self.dropped_b
                + self.lost
                + self.tail_dropped
    }
}

impl Outcome {
    /// The accounting of this run.
    pub fn accounting(&self) -> Accounting {
        let node = |i: usize| self.nodes.get(i);
        let port_dev = |i: usize, p: usize| {
            node(i).and_then(|n| n.ports.get(p)).map(|(_, c)| *c).unwrap_or_default()
        };
        Accounting {
            generated: port_dev(0, 0).rx_packets,
            duplicated: self.link.duplicated,
            delivered_to_sink: port_dev(1, 1).tx_packets,
            dropped_a: node(0).map_or(0, |n| n.counters.total_drops()),
            dropped_b: node(1).map_or(0, |n| n.counters.total_drops()),
            lost: self.link.lost,
            tail_dropped: self.link.tail_dropped,
        }
    }

    /// Delivered link bits per simulated second (integer arithmetic); `None` at time zero.
    pub fn throughput_bps(&self) -> Option<u64> {
        let ns = u128::from(self.elapsed.as_nanos());
        (ns > 0).then(|| {
            let bps = u128::from(self.link.delivered_bytes) * 8 * 1_000_000_000 / ns;
            u64::try_from(bps).unwrap_or(u64::MAX)
        })
    }

    /// The report as one JSON document.
    pub fn to_json(&self, args: &TestbedArgs) -> Value {
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|NodeReport { name, counters: c, ports }| {
                let ports: Vec<Value> = ports
                    .iter()
                    .enumerate()
                    .map(|(i, (pname, dev))| {
                        let pc = u16::try_from(i)
                            .ok()
                            .and_then(|i| c.port(PortId(i)).cloned())
                            .unwrap_or_default();
                        json!({
                            "id": i,
                            "name": pname,
                            "rx_packets": pc.rx_packets,
                            "rx_bytes": pc.rx_bytes,
                            "tx_packets": pc.tx_packets,
                            "tx_bytes": pc.tx_bytes,
                            "rx_drops": pc.rx_drops,
                            "tx_drops": pc.tx_drops,
                            "device": dev,
                        })
                    })
                    .collect();
                json!({
                    "name": name,
                    "stages": c.stages,
                    "ports": ports,
                    "drops_total": c.total_drops(),
                })
            })
            .collect();
        let l = &self.link;
        let acc = self.accounting();
        json!({
            "config": {
                "count": args.count,
                "seed": args.seed,
                "loss": args.loss,
                "dup": args.dup,
                "reorder": args.reorder,
                "delay_us": args.delay_us,
                "jitter_us": args.jitter_us,
                "rate_mbps": args.rate_mbps,
                "queue_limit": args.queue_limit,
                "interval_ns": args.interval_ns,
            },
            "nodes": nodes,
            "link": {
                "sent": l.offered,
                "lost": l.lost,
                "duplicated": l.duplicated,
                "reordered": l.reordered,
                "tail_dropped": l.tail_dropped,
                "delivered": l.delivered,
                "delivered_bytes": l.delivered_bytes,
            },
            "sim_elapsed_ns": self.elapsed.as_nanos(),
            "sim_throughput_bps": self.throughput_bps(),
            "steps": self.steps,
            "accounting": {
                "generated": acc.generated,
                "duplicated": acc.duplicated,
                "delivered_to_sink": acc.delivered_to_sink,
                "dropped_a": acc.dropped_a,
                "dropped_b": acc.dropped_b,
                "lost": acc.lost,
                "tail_dropped": acc.tail_dropped,
                "balanced": acc.balanced(),
            },
        })
    }

    /// The report as human-readable tables.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for NodeReport { name, counters: c, ports } in &self.nodes {
            let names: Vec<String> =
                ports.iter().enumerate().map(|(i, (n, _))| format!("{i}={n}")).collect();
            s.push_str(&format!("== node {name} (ports {})\n{c}", names.join(" ")));
        }
        let l = &self.link;
        s.push_str(&format!(
            "link a->b: sent {} lost {} duplicated {} reordered {} tail_dropped {} delivered {} \
             ({} bytes)\n",
            l.offered,
            l.lost,
            l.duplicated,
            l.reordered,
            l.tail_dropped,
            l.delivered,
            l.delivered_bytes
        ));
        let ns = self.elapsed.as_nanos();
        s.push_str(&format!(
            "simulated time: {}.{:09} s in {} steps\n",
            ns / 1_000_000_000,
            ns % 1_000_000_000,
            self.steps
        ));
        match self.throughput_bps() {
            Some(bps) => s.push_str(&format!(
                "simulated throughput: {}.{:06} Mbit/s on the link\n",
                bps / 1_000_000,
                bps % 1_000_000
            )),
            None => s.push_str("simulated throughput: n/a (no simulated time passed)\n"),
        }
        let a = self.accounting();
        s.push_str(&format!(
            "accounting: generated {} + duplicated {} {} sink {} + dropped a {} + dropped b {} \
             + lost {} + tail_dropped {}: {}\n",
            a.generated,
            a.duplicated,
            if a.balanced() { "=" } else { "!=" },
            a.delivered_to_sink,
            a.dropped_a,
            a.dropped_b,
            a.lost,
            a.tail_dropped,
            if a.balanced() { "every packet accounted for" } else { "MISMATCH" }
        ));
        s
    }
}

/// Entry point of `snic testbed`.
pub fn run(args: TestbedArgs) -> Result<()> {
    let outcome = simulate(&args)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        writeln!(out, "{}", outcome.to_json(&args))?;
    } else {
        write!(out, "{}", outcome.to_text())?;
    }
    out.flush()?;
    if !outcome.accounting().balanced() {
        anyhow::bail!("accounting mismatch: {:?}", outcome.accounting());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        tb: TestbedArgs,
    }

    fn parse(args: &[&str]) -> Result<TestbedArgs, clap::Error> {
        T::try_parse_from(std::iter::once("testbed").chain(args.iter().copied())).map(|t| t.tb)
    }

    #[test]
    fn defaults_and_bad_values() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            (a.count, a.seed, a.loss, a.rate_mbps, a.queue_limit),
            (10_000, 1, 0.0, 0, 1024)
        );
        assert_eq!(a.link_config().unwrap(), LinkConfig::default());
        for bad in
            [["--loss", "1.5"], ["--dup", "-0.1"], ["--reorder", "x"], ["--queue-limit", "0"]]
        {
            let e = parse(&bad).unwrap_err().to_string();
            assert!(e.contains(bad[0]), "{bad:?}: {e}");
        }
        let a = parse(&["--rate-mbps", &u64::MAX.to_string()]).unwrap();
        assert!(a.link_config().unwrap_err().to_string().contains("--rate-mbps"));
    }

    #[test]
    fn small_run_is_accounted_and_reproducible() {
        let a = parse(&["--count", "500", "--loss", "0.1", "--dup", "0.05", "--reorder", "0.05"])
            .unwrap();
        let o1 = simulate(&a).unwrap();
        let acc = o1.accounting();
        assert_eq!(acc.generated, 500);
        assert!(acc.lost > 0 && acc.duplicated > 0, "{acc:?}");
        assert!(acc.balanced(), "{acc:?}");
        let o2 = simulate(&a).unwrap();
        assert_eq!(o1.to_json(&a), o2.to_json(&a));
        assert_eq!(o1.to_text(), o2.to_text());
    }
}
