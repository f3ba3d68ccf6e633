//! A scenario link's impairments on real interfaces, and its counters.
//!
//! A link is two veth pairs and a namespace of its own in the middle: `a`'s port -- `to_a` and
//! `to_b` (the link's namespace) -- `b`'s port. In the link's namespace, an nftables chain in the
//! netdev family on each middle interface's ingress hook forwards every frame to the other
//! one (`fwd to`), after the direction's impairments:
//! - **loss** (and a cut link): `numgen random mod 1000000 < N counter drop`; its counter is
//!   the direction's `lost`.
//! - **rate** (and the queue limit): a `tbf` qdisc on the egress of the middle interface
//!   towards the receiver; its drops are `tail_dropped`.
//!
//! Why not one veth pair with the rules on its ends: a packet socket (the NIC's AF_PACKET
//! port) sees a received frame before the ingress hook could drop it, and a frame dropped on
//! the sender's egress is refused to `send`, which the port retries. In the middle namespace
//! nobody listens, and a drop is a drop.
//!
//! Delay, jitter, reordering, duplication and ECN marking need `netem`, which is not used:
//! they are not applied, and [`RealLink::new`] says so in notes for the report rather than
//! ignoring them silently.
//!
//! Counters per direction, named as the simulated links' (`snic_io::vlink::LinkStats`):
//! `offered` (frames that entered the link), `delivered` and `delivered_bytes` (frames the
//! receiving port's interface got), `lost`, `tail_dropped`.

use super::netns::{cmd, if_stats};
use crate::ScenarioError;
use crate::schema::{Impairments, LinkSpec, LinkState};

/// Resolution of the loss rule: probabilities are applied in millionths.
const LOSS_SCALE: u64 = 1_000_000;
/// The nftables table of a link's namespace.
const TABLE: &str = "snic_sc";
/// The middle interfaces of a link's namespace: `MID[0]` faces `a`, `MID[1]` faces `b`.
pub const MID: [&str; 2] = ["to_a", "to_b"];

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

/// A scenario link (see the module doc): `ends[0]` is `a`'s port, `ends[1]` `b`'s.
#[derive(Debug)]
pub struct RealLink {
    /// The link's name.
    pub name: String,
    /// The ports' interfaces.
    pub ends: [End; 2],
    /// The link's namespace; `MID[i]` in it is the peer of `ends[i]`.
    pub mid_ns: String,
    /// `dirs[0]` is a -> b, `dirs[1]` is b -> a.
    dirs: [Dir; 2],
}

/// The value of one impairment in one direction: the override, else the link's.
fn pick<T: Copy>(o: Option<&Impairments>, f: impl Fn(&Impairments) -> Option<T>, base: T) -> T {
    o.and_then(f).unwrap_or(base)
}

impl RealLink {
    /// Join `ends` (a, b) through namespace `mid_ns` (whose interfaces [`MID`] are the ends'
    /// peers) with `spec`'s impairments. Returns the link and notes naming every impairment
    /// that could not be applied.
    pub fn new(
        spec: &LinkSpec,
        ends: [End; 2],
        mid_ns: &str,
    ) -> Result<(RealLink, Vec<String>), ScenarioError> {
        let mut link = RealLink {
            name: spec.name.clone(),
            ends,
            mid_ns: mid_ns.to_string(),
            dirs: [Dir::default(); 2],
        };
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
            if loss > 0.0 && loss < 1.0 {
                notes.push(format!(
                    "link {} {label}: loss {loss} drawn by nftables' random numbers, not the \
                     scenario's seed (which frames are lost differs from run to run)",
                    spec.name
                ));
            }
            link.dirs[i].queue_limit = qlim;
            link.set_rate(i, rate)?;
            link.write_chain(i, loss, false)?;
        }
        Ok((link, notes))
    }

    /// The receiving port's interface of direction `i`.
    fn rx_end(&self, i: usize) -> &End {
        &self.ends[1 - i]
    }

    fn chain(i: usize) -> String {
        format!("fwd_{}", MID[i])
    }

    /// (Re)write direction `i`'s chain: `loss` (0..=1), or every frame when `down`, then
    /// forward to the other side.
    fn write_chain(&mut self, i: usize, loss: f64, down: bool) -> Result<(), ScenarioError> {
        let (lost, _) = self.nft_counter(i);
        let chain = Self::chain(i);
        let n = if down { LOSS_SCALE } else { (loss.clamp(0.0, 1.0) * LOSS_SCALE as f64) as u64 };
        let mut script = format!(
            "add table netdev {TABLE}\nadd chain netdev {TABLE} {chain} {{ type filter hook \
             ingress device \"{dev}\" priority 0; policy accept; }}\nflush chain netdev \
             {TABLE} {chain}\n",
            dev = MID[i]
        );
        if n >= LOSS_SCALE {
            script.push_str(&format!("add rule netdev {TABLE} {chain} counter drop\n"));
        } else if n > 0 {
            script.push_str(&format!(
                "add rule netdev {TABLE} {chain} numgen random mod {LOSS_SCALE} < {n} counter \
                 drop\n"
            ));
        }
        script.push_str(&format!("add rule netdev {TABLE} {chain} fwd to \"{}\"\n", MID[1 - i]));
        cmd("ip", &["netns", "exec", &self.mid_ns, "nft", "-f", "-"], Some(&script)).map_err(
            |e| {
                ScenarioError::Setup(format!("link {}: forwarding rule (nftables): {e}", self.name))
            },
        )?;
        let d = &mut self.dirs[i];
        d.lost_before += lost;
        d.loss = loss;
        d.down = down;
        Ok(())
    }

    /// Put (or take away, rate 0) direction `i`'s rate limiter on its sending end.
    fn set_rate(&mut self, i: usize, rate_mbps: u64) -> Result<(), ScenarioError> {
        let end = End { ns: self.mid_ns.clone(), dev: MID[1 - i].to_string() };
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
                self.write_chain(i, loss, down)?;
            }
        }
        Ok(notes)
    }

    /// Frames and bytes direction `i`'s current loss rule has dropped (0 without one).
    fn nft_counter(&self, i: usize) -> (u64, u64) {
        if !(self.dirs[i].loss > 0.0 || self.dirs[i].down) {
            return (0, 0);
        }
        let chain = Self::chain(i);
        let Ok(out) = cmd(
            "ip",
            &["netns", "exec", &self.mid_ns, "nft", "-j", "list", "chain", "netdev", TABLE, &chain],
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
        cmd("tc", &["-n", &self.mid_ns, "-s", "-j", "qdisc", "show", "dev", MID[1 - i]], None)
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
        [self.dir_stats(0), self.dir_stats(1)]
    }

    /// Direction `i`'s counters now (0: a -> b, 1: b -> a).
    pub fn dir_stats(&self, i: usize) -> DirStats {
        let i = i.min(1);
        let rx = if_stats(&self.rx_end(i).ns, &self.rx_end(i).dev).unwrap_or_default();
        let entered = if_stats(&self.mid_ns, MID[i]).unwrap_or_default();
        let (lost, _) = self.nft_counter(i);
        DirStats {
            offered: entered.rx_packets,
            delivered: rx.rx_packets,
            delivered_bytes: rx.rx_bytes,
            lost: lost + self.dirs[i].lost_before,
            tail_dropped: self.qdisc_drops(i),
        }
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
