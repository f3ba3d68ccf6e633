//! A scenario link's impairments on a real veth pair, and its counters.
//!
//! - **loss** (and a cut link): an nftables rule in the netdev family on the ingress hook of
//!   the receiving end (`numgen random mod 1000000 < N counter drop`); its counter is the
//!   direction's `lost`.
//! - **rate** (and the queue limit): a `tbf` qdisc on the sending end; its drops are
//!   `tail_dropped`.
//! - delay, jitter, reordering, duplication and ECN marking need `netem` (or a switch), which
//!   this machine may not have: they are not applied, and [`RealLink::new`] says so in notes
//!   for the report rather than ignoring them silently.
//!
//! Counters per direction, named as the simulated links' (`snic_io::vlink::LinkStats`):
//! `offered` (sent by the sending end, and dropped by its qdisc), `delivered` and
//! `delivered_bytes` (received by the other end and not dropped by the loss rule), `lost`,
//! `tail_dropped`.

use super::netns::{cmd, if_stats};
use crate::ScenarioError;
use crate::schema::{Impairments, LinkSpec, LinkState};

/// Resolution of the loss rule: probabilities are applied in millionths.
const LOSS_SCALE: u64 = 1_000_000;
/// The nftables table every loss rule of a namespace lives in.
const TABLE: &str = "snic_sc";

/// One end of a veth pair: its namespace and interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// The namespace.
    pub ns: String,
    /// The interface in it.
    pub dev: String,
}

/// What one direction has applied.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Dir {
    loss: f64,
    rate_mbps: u64,
    queue_limit: u64,
    down: bool,
    /// Frames the loss rule dropped before it was last replaced (its counter starts again).
    lost_before: u64,
    lost_bytes_before: u64,
}

/// A direction's counters (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Frames the sending end sent or its qdisc dropped.
    pub offered: u64,
    /// Frames the receiving end took in and the loss rule let through.
    pub delivered: u64,
    /// Bytes of those frames.
    pub delivered_bytes: u64,
    /// Frames the loss rule (or a cut) dropped.
    pub lost: u64,
    /// Frames the rate limiter's queue dropped.
    pub tail_dropped: u64,
}

/// A scenario link on a veth pair: `ends[0]` is `a`, `ends[1]` is `b`.
#[derive(Debug)]
pub struct RealLink {
    /// The link's name.
    pub name: String,
    /// The veth ends.
    pub ends: [End; 2],
    /// `dirs[0]` is a -> b, `dirs[1]` is b -> a.
    dirs: [Dir; 2],
}

/// The value of one impairment in one direction: the override, else the link's.
fn pick<T: Copy>(o: Option<&Impairments>, f: impl Fn(&Impairments) -> Option<T>, base: T) -> T {
    o.and_then(f).unwrap_or(base)
}

impl RealLink {
    /// Apply `spec`'s impairments to the veth pair `ends` (a, b). Returns the link and notes
    /// naming every impairment that could not be applied.
    pub fn new(spec: &LinkSpec, ends: [End; 2]) -> Result<(RealLink, Vec<String>), ScenarioError> {
        let mut link = RealLink { name: spec.name.clone(), ends, dirs: [Dir::default(); 2] };
        let mut notes = Vec::new();
        for (i, (label, o)) in [("a_to_b", spec.a_to_b.as_ref()), ("b_to_a", spec.b_to_a.as_ref())]
            .into_iter()
            .enumerate()
        {
            let loss = pick(o, |x| x.loss, spec.loss);
            let rate = pick(o, |x| x.rate_mbps, spec.rate_mbps);
            let qlim = pick(o, |x| x.queue_limit, spec.queue_limit);
            let mut missing = Vec::new();
            if pick(o, |x| x.delay, spec.delay).0 > 0 {
                missing.push("delay");
            }
            if pick(o, |x| x.jitter, spec.jitter).0 > 0 {
                missing.push("jitter");
            }
            if pick(o, |x| x.reorder, spec.reorder) > 0.0 {
                missing.push("reorder");
            }
            if pick(o, |x| x.duplicate, spec.duplicate) > 0.0 {
                missing.push("duplicate");
            }
            if o.and_then(|x| x.ecn_threshold).or(spec.ecn_threshold).is_some() {
                missing.push("ecn_threshold");
            }
            if !missing.is_empty() {
                notes.push(format!(
                    "link {} {label}: {} not applied on real interfaces (needs netem, which is \
                     not used); loss and rate are",
                    spec.name,
                    missing.join(", ")
                ));
            }
            link.dirs[i].queue_limit = qlim;
            link.set_rate(i, rate)?;
            link.set_loss(i, loss, false)?;
        }
        Ok((link, notes))
    }

    /// The receiving end of direction `i`.
    fn rx_end(&self, i: usize) -> &End {
        &self.ends[1 - i]
    }

    fn chain(dev: &str) -> String {
        format!("in_{dev}")
    }

    /// Replace direction `i`'s loss rule: `loss` (0..=1), or every frame when `down`.
    fn set_loss(&mut self, i: usize, loss: f64, down: bool) -> Result<(), ScenarioError> {
        let (lost, bytes) = self.nft_counter(i);
        let end = self.rx_end(i).clone();
        let chain = Self::chain(&end.dev);
        let n = if down { LOSS_SCALE } else { (loss.clamp(0.0, 1.0) * LOSS_SCALE as f64) as u64 };
        let rule = if n >= LOSS_SCALE {
            "counter drop".to_string()
        } else if n == 0 {
            String::new()
        } else {
            format!("numgen random mod {LOSS_SCALE} < {n} counter drop")
        };
        let had = self.dirs[i].loss > 0.0 || self.dirs[i].down;
        if rule.is_empty() && !had {
            return Ok(());
        }
        let mut script = format!(
            "add table netdev {TABLE}\nadd chain netdev {TABLE} {chain} {{ type filter hook \
             ingress device \"{dev}\" priority 0; policy accept; }}\nflush chain netdev \
             {TABLE} {chain}\n",
            dev = end.dev
        );
        if !rule.is_empty() {
            script.push_str(&format!("add rule netdev {TABLE} {chain} {rule}\n"));
        }
        cmd("ip", &["netns", "exec", &end.ns, "nft", "-f", "-"], Some(&script)).map_err(|e| {
            ScenarioError::Setup(format!("link {}: loss rule (nftables): {e}", self.name))
        })?;
        let d = &mut self.dirs[i];
        d.lost_before += lost;
        d.lost_bytes_before += bytes;
        d.loss = loss;
        d.down = down;
        Ok(())
    }

    /// Put (or take away, rate 0) direction `i`'s rate limiter on its sending end.
    fn set_rate(&mut self, i: usize, rate_mbps: u64) -> Result<(), ScenarioError> {
        let end = self.ends[i].clone();
        let err = |e| ScenarioError::Setup(format!("link {}: rate (tc tbf): {e}", self.name));
        if rate_mbps == 0 {
            if self.dirs[i].rate_mbps != 0 {
                cmd("tc", &["-n", &end.ns, "qdisc", "del", "dev", &end.dev, "root"], None)
                    .map_err(err)?;
            }
        } else {
            let bytes_per_s = rate_mbps.saturating_mul(1_000_000) / 8;
            // A burst of 10 ms at the rate, at least one super-packet.
            let burst = (bytes_per_s / 100).max(70_000);
            let limit = self.dirs[i].queue_limit.max(1).saturating_mul(1_600).max(burst);
            let (rate, burst, limit) =
                (format!("{rate_mbps}mbit"), burst.to_string(), limit.to_string());
            let args = [
                "-n", &end.ns, "qdisc", "replace", "dev", &end.dev, "root", "tbf", "rate", &rate,
                "burst", &burst, "limit", &limit,
            ];
            cmd("tc", &args, None).map_err(err)?;
        }
        self.dirs[i].rate_mbps = rate_mbps;
        Ok(())
    }

    /// A `link` operation: cut or restore the link, or change its impairments both ways.
    /// Returns notes for what could not be applied.
    pub fn change(
        &mut self,
        state: Option<LinkState>,
        set: Option<&Impairments>,
    ) -> Result<Vec<String>, ScenarioError> {
        let mut notes = Vec::new();
        for i in 0..2 {
            let down = match state {
                Some(LinkState::Down) => true,
                Some(LinkState::Up) => false,
                None => self.dirs[i].down,
            };
            let mut loss = self.dirs[i].loss;
            if let Some(s) = set {
                loss = s.loss.unwrap_or(loss);
                if let Some(q) = s.queue_limit {
                    self.dirs[i].queue_limit = q;
                }
                let rate = s.rate_mbps.unwrap_or(self.dirs[i].rate_mbps);
                if rate != self.dirs[i].rate_mbps || s.queue_limit.is_some() {
                    self.set_rate(i, rate)?;
                }
                let other = [
                    ("delay", s.delay.is_some_and(|t| t.0 > 0)),
                    ("jitter", s.jitter.is_some_and(|t| t.0 > 0)),
                    ("reorder", s.reorder.is_some_and(|p| p > 0.0)),
                    ("duplicate", s.duplicate.is_some_and(|p| p > 0.0)),
                    ("ecn_threshold", s.ecn_threshold.is_some()),
                ];
                let missing: Vec<_> = other.iter().filter(|x| x.1).map(|x| x.0).collect();
                if i == 0 && !missing.is_empty() {
                    notes.push(format!(
                        "link {}: change of {} not applied on real interfaces (needs netem)",
                        self.name,
                        missing.join(", ")
                    ));
                }
            }
            if loss != self.dirs[i].loss || down != self.dirs[i].down {
                self.set_loss(i, loss, down)?;
            }
        }
        Ok(notes)
    }

    /// Frames and bytes direction `i`'s current loss rule has dropped (0 without one).
    fn nft_counter(&self, i: usize) -> (u64, u64) {
        if !(self.dirs[i].loss > 0.0 || self.dirs[i].down) {
            return (0, 0);
        }
        let end = self.rx_end(i);
        let chain = Self::chain(&end.dev);
        let Ok(out) = cmd(
            "ip",
            &["netns", "exec", &end.ns, "nft", "-j", "list", "chain", "netdev", TABLE, &chain],
            None,
        ) else {
            return (0, 0);
        };
        parse_nft_counters(&out)
    }

    /// Frames the `tbf` of direction `i` dropped.
    fn qdisc_drops(&self, i: usize) -> u64 {
        if self.dirs[i].rate_mbps == 0 {
            return 0;
        }
        let end = &self.ends[i];
        cmd("tc", &["-n", &end.ns, "-s", "-j", "qdisc", "show", "dev", &end.dev], None)
            .ok()
            .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
            .and_then(|v| {
                v.as_array()?
                    .iter()
                    .find(|q| q.get("kind").and_then(|k| k.as_str()) == Some("tbf"))?
                    .get("drops")?
                    .as_u64()
            })
            .unwrap_or(0)
    }

    /// Both directions' counters now (`[a_to_b, b_to_a]`).
    pub fn stats(&self) -> [DirStats; 2] {
        let mut out = [DirStats::default(); 2];
        for (i, o) in out.iter_mut().enumerate() {
            let tx = if_stats(&self.ends[i].ns, &self.ends[i].dev).unwrap_or_default();
            let rx = if_stats(&self.rx_end(i).ns, &self.rx_end(i).dev).unwrap_or_default();
            let (lost, lost_bytes) = self.nft_counter(i);
            let lost = lost + self.dirs[i].lost_before;
            // nftables counts bytes from the network header on ingress: add the Ethernet header.
            let lost_bytes = lost_bytes + self.dirs[i].lost_bytes_before + 14 * lost;
            o.tail_dropped = self.qdisc_drops(i);
            o.offered = tx.tx_packets + o.tail_dropped;
            o.lost = lost;
            o.delivered = rx.rx_packets.saturating_sub(lost);
            o.delivered_bytes = rx.rx_bytes.saturating_sub(lost_bytes);
        }
        out
    }
}

/// Sum of the packet and byte counters of every rule in `nft -j list chain` output.
fn parse_nft_counters(json: &str) -> (u64, u64) {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else { return (0, 0) };
    let mut sum = (0, 0);
    for item in v.get("nftables").and_then(|n| n.as_array()).into_iter().flatten() {
        for e in item
            .get("rule")
            .and_then(|r| r.get("expr"))
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(c) = e.get("counter") {
                sum.0 += c.get("packets").and_then(|p| p.as_u64()).unwrap_or(0);
                sum.1 += c.get("bytes").and_then(|p| p.as_u64()).unwrap_or(0);
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_counters_are_summed_over_rules() {
        let j = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"chain": {"name": "in_wire"}},
            {"rule": {"expr": [{"match": {"op": "<"}}, {"counter": {"packets": 7, "bytes": 700}}, {"drop": null}]}},
            {"rule": {"expr": [{"counter": {"packets": 1, "bytes": 46}}, {"drop": null}]}}]}"#;
        assert_eq!(parse_nft_counters(j), (8, 746));
        assert_eq!(parse_nft_counters("not json"), (0, 0));
    }
}
