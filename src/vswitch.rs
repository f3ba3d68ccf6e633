//! `snic vswitch`: the vSwitch control plane, client and server side.
//!
//! Client side: the sub-commands (`show`, `dump-flows`, `policy`, `add-rule`, `remove-rule`,
//! `add-layer`, `remove-layer`, `add-mapping`, `remove-mapping`, `load`) send one request to
//! the control socket of a running `snic run --stage vswitch --control PATH` (protocol in
//! [`crate::stats`]) and print the answer; `check` works offline on a policy file. A refused
//! change prints the server's message (which names the file, line and field) and exits non-zero.
//!
//! Server side: [`serve`] answers the `vswitch.*` requests with the run's
//! [`VSwitch`] control handle: counters, flow dumps, the policy as TOML, and policy edits applied
//! as one transaction ([`VSwitch::apply`]). Rules, layers and mappings arrive in their
//! command-line spelling and are parsed here, on the server, so every client gets the same
//! errors.
//!
//! This module does not touch packets: the vSwitch's own API decides how a change reaches the
//! shards (epochs, grace period).

use crate::control::{self, Edit, MAX_DUMP_LIMIT, Request};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use snic_time::Instant;
use snic_vswitch::engine::{Applied, VSwitch};
use snic_vswitch::policy::toml::{load_policy, to_toml};
use snic_vswitch::policy::validate::validate;
use snic_vswitch::policy::wire::to_policy_edit;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Arguments of `snic vswitch`.
#[derive(Debug, clap::Args)]
pub struct VSwitchArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: VSwitchCommand,
}

/// The control socket to talk to.
#[derive(Debug, Clone, clap::Args)]
pub struct ControlArg {
    /// Control socket of the running `snic run --stage vswitch --control PATH`.
    #[arg(long, value_name = "PATH")]
    pub control: PathBuf,
}

/// The sub-commands of `snic vswitch`.
#[derive(Debug, clap::Subcommand)]
pub enum VSwitchCommand {
    /// Counters: flows, hits, misses, exceptions, denials by reason, evictions, meters, queues,
    /// generation and vPort epochs.
    Show {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// Print the JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The cached flows, one per line (like `ovs-appctl dpctl/dump-flows`).
    DumpFlows {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// Most flows to print.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        limit: usize,
        /// Print one JSON object per flow per line.
        #[arg(long)]
        json: bool,
    },
    /// The policy in force, as TOML (loadable with `snic vswitch load`).
    Policy {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
    },
    /// Add a rule to a layer, e.g. `add-rule --vport 0 --layer acl id=7 priority=5
    /// ip.dst=10.0.0.9 action=deny`.
    AddRule {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// vPort id.
        #[arg(long, value_name = "V")]
        vport: u16,
        /// Layer name.
        #[arg(long, value_name = "L")]
        layer: String,
        /// The rule: `key=value` words, joined with spaces.
        #[arg(required = true, value_name = "RULE")]
        rule: Vec<String>,
    },
    /// Remove a rule from a layer by id.
    RemoveRule {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// vPort id.
        #[arg(long, value_name = "V")]
        vport: u16,
        /// Layer name.
        #[arg(long, value_name = "L")]
        layer: String,
        /// Rule id.
        #[arg(long, value_name = "N")]
        id: u32,
    },
    /// Add a layer, e.g. `add-layer --vport 0 --position 1 name=acl2 kind=acl default=deny`.
    AddLayer {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// vPort id.
        #[arg(long, value_name = "V")]
        vport: u16,
        /// Index among the vPort's layers (0 = first); default: last.
        #[arg(long, value_name = "N")]
        position: Option<usize>,
        /// The layer: `key=value` words, joined with spaces.
        #[arg(required = true, value_name = "LAYER")]
        layer: Vec<String>,
    },
    /// Remove a layer by name.
    RemoveLayer {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// vPort id.
        #[arg(long, value_name = "V")]
        vport: u16,
        /// Layer name.
        #[arg(long, value_name = "NAME")]
        name: String,
    },
    /// Add a CA -> PA mapping to a layer, e.g. `add-mapping --vport 0 --layer vnet
    /// ca=10.1.0.9 pa=192.168.100.9 mac=02:00:00:00:00:09 vni=42`.
    AddMapping {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// vPort id.
        #[arg(long, value_name = "V")]
        vport: u16,
        /// Layer name.
        #[arg(long, value_name = "L")]
        layer: String,
        /// The mapping: `key=value` words, joined with spaces.
        #[arg(required = true, value_name = "MAPPING")]
        mapping: Vec<String>,
    },
    /// Remove the mapping of a customer address.
    RemoveMapping {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// vPort id.
        #[arg(long, value_name = "V")]
        vport: u16,
        /// Layer name.
        #[arg(long, value_name = "L")]
        layer: String,
        /// Customer address.
        #[arg(long, value_name = "IP")]
        ca: std::net::IpAddr,
    },
    /// Replace the whole policy with a TOML file (read here, checked by the server; all or
    /// nothing).
    Load {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// The policy file.
        file: PathBuf,
    },
    /// Restart the fast path: drop and rebuild the flow tables while the slow path serves every
    /// packet for `--hold-ms`; connections, SNAT bindings and policy are kept.
    RestartFastpath {
        /// The control socket.
        #[command(flatten)]
        ctl: ControlArg,
        /// How long the slow path alone serves every packet (milliseconds, at most 10000).
        #[arg(long, value_name = "MS", default_value_t = 100)]
        hold_ms: u64,
        /// Print the JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check a policy file offline: print `FILE: ok` or the error (exit status 1).
    Check {
        /// The policy file.
        file: PathBuf,
    },
}

/// Entry point of `snic vswitch`.
pub fn run(args: VSwitchArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    use std::io::Write;
    let text = execute(args.command)?;
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Run one sub-command; return what it prints on success.
pub fn execute(cmd: VSwitchCommand) -> Result<String> {
    match cmd {
        VSwitchCommand::Show { ctl, json } => {
            let v = control::request(&ctl.control, &Request::VSwitchShow)?;
            let sw = v.get("vswitch").context("answer has no \"vswitch\" object")?;
            Ok(if json { format!("{sw}\n") } else { show_text(sw) })
        }
        VSwitchCommand::DumpFlows { ctl, limit, json } => {
            let v = control::request(&ctl.control, &Request::DumpFlows { limit, text: !json })?;
            let key = if json { "flows" } else { "lines" };
            let items = v.get(key).and_then(Value::as_array).context("answer has no flow list")?;
            let mut s = String::new();
            for item in items {
                match item.as_str() {
                    Some(line) => s.push_str(line),
                    None => s.push_str(&item.to_string()),
                }
                s.push('\n');
            }
            Ok(s)
        }
        VSwitchCommand::Policy { ctl } => {
            let v = control::request(&ctl.control, &Request::Policy)?;
            let mut text =
                v.get("policy").and_then(Value::as_str).context("answer has no policy")?.to_owned();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            Ok(text)
        }
        VSwitchCommand::AddRule { ctl, vport, layer, rule } => {
            apply(&ctl, Edit::AddRule { vport, layer, rule: rule.join(" ") })
        }
        VSwitchCommand::RemoveRule { ctl, vport, layer, id } => {
            apply(&ctl, Edit::RemoveRule { vport, layer, id })
        }
        VSwitchCommand::AddLayer { ctl, vport, position, layer } => {
            apply(&ctl, Edit::AddLayer { vport, layer: layer.join(" "), position })
        }
        VSwitchCommand::RemoveLayer { ctl, vport, name } => {
            apply(&ctl, Edit::RemoveLayer { vport, name })
        }
        VSwitchCommand::AddMapping { ctl, vport, layer, mapping } => {
            apply(&ctl, Edit::AddMapping { vport, layer, mapping: mapping.join(" ") })
        }
        VSwitchCommand::RemoveMapping { ctl, vport, layer, ca } => {
            apply(&ctl, Edit::RemoveMapping { vport, layer, ca: ca.to_string() })
        }
        VSwitchCommand::Load { ctl, file } => {
            let policy = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let name = file.display().to_string();
            apply(&ctl, Edit::Replace { policy, file: Some(name) })
        }
        VSwitchCommand::Check { file } => check(&file),
        VSwitchCommand::RestartFastpath { ctl, hold_ms, json } => {
            let v = control::request(&ctl.control, &Request::RestartFastpath { hold_ms })?;
            Ok(if json { format!("{v}\n") } else { restart_text(&v) })
        }
    }
}

/// The text form of a `vswitch.restart-fastpath` answer.
fn restart_text(v: &Value) -> String {
    format!(
        "fast path restart {}: {} flow(s) dropped from {} shard(s); the slow path serves every \
         packet for {} ms, then flows are cached again\n",
        n(v, &["restarts"]),
        n(v, &["flushed"]),
        n(v, &["shards"]),
        n(v, &["hold_ms"])
    )
}

/// Answer `vswitch.restart-fastpath`: restart, then back the new tables with huge pages as the
/// run did the old ones.
fn restart_fastpath(vs: &VSwitch, now: Instant, hold_ms: u64) -> Value {
    if hold_ms > control::MAX_HOLD_MS {
        return error(format!("hold_ms {hold_ms} is above the maximum {}", control::MAX_HOLD_MS));
    }
    match vs.restart_fastpath(now, std::time::Duration::from_millis(hold_ms)) {
        Ok(r) => {
            if let Err(e) = snic_io::sys::hugepage::advise(&vs.table_regions()) {
                eprintln!("snic: rebuilt flow tables stay on small pages (madvise: {e})");
            }
            let mut v = serde_json::to_value(&r).unwrap_or_else(|_| json!({}));
            if let Some(o) = v.as_object_mut() {
                o.insert("ok".into(), json!(true));
                o.insert("hold_ms".into(), json!(hold_ms));
            }
            v
        }
        Err(e) => error(e),
    }
}

/// `snic vswitch check FILE`: load and validate offline.
fn check(file: &Path) -> Result<String> {
    let policy = load_policy(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    validate(&policy).map_err(|e| anyhow::anyhow!("{e}"))?;
    let layers: usize = policy.vports.iter().map(|v| v.layers.len()).sum();
    let rules: usize = policy.vports.iter().flat_map(|v| &v.layers).map(|l| l.rules.len()).sum();
    Ok(format!(
        "{}: ok ({} vPort(s), {layers} layer(s), {rules} rule(s), {} meter(s), {} queue(s))\n",
        file.display(),
        policy.vports.len(),
        policy.meters.len(),
        policy.queues.len()
    ))
}

/// Send one edit; describe what changed.
fn apply(ctl: &ControlArg, edit: Edit) -> Result<String> {
    let op = edit.op();
    let v = control::request(&ctl.control, &Request::Apply { edits: vec![edit] })?;
    Ok(applied_text(op, &v))
}

/// `applied add-rule: generation 4; new epoch on vPort 0 (epoch 2); 0 flow(s) removed`.
fn applied_text(op: &str, v: &Value) -> String {
    let vports: Vec<String> = v
        .get("vports")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|p| format!("vPort {} (epoch {})", p["id"], p["epoch"])).collect())
        .unwrap_or_default();
    let moved = if vports.is_empty() {
        "no vPort epoch moved".to_owned()
    } else {
        format!("new epoch on {}", vports.join(", "))
    };
    format!(
        "applied {op}: generation {}; {moved}; {} cached flow(s) removed\n",
        v["generation"], v["removed"]
    )
}

/// A counter at `path` in `v` (0 when absent).
fn n(v: &Value, path: &[&str]) -> u64 {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_u64).unwrap_or(0)
}

/// The text form of `snic vswitch show`.
pub fn show_text(v: &Value) -> String {
    let f = |k: &str| n(v, &["fast", k]);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "generation {}, {} shard(s), table memory {} bytes",
        n(v, &["generation"]),
        n(v, &["shards"]),
        n(v, &["memory_bytes"])
    );
    let _ = writeln!(
        s,
        "flows: {} cached (capacity {}), {} distinct action(s)",
        n(v, &["flows"]),
        n(v, &["capacity"]),
        n(v, &["actions"])
    );
    let _ = writeln!(
        s,
        "lookups: hits {}, misses {}, stale {}, queued behind {}",
        f("hits"),
        f("misses"),
        f("stale"),
        f("queued_behind")
    );
    let _ = writeln!(
        s,
        "exceptions: compiled {}, late hits {}, queued now {}, overflow {}",
        f("compiled"),
        f("late_hits"),
        n(v, &["exceptions_queued"]),
        f("exception_overflow")
    );
    let _ = writeln!(
        s,
        "installs: {} (reverse {}), drop entries {}, removed {}, expired {}, evicted {}",
        f("installs"),
        f("reverse_installs"),
        f("drop_entries"),
        f("removed"),
        f("expired"),
        n(v, &["evictions"])
    );
    let by_total = |v: &Value| -> u64 {
        v.pointer("/fast/denied_by")
            .and_then(Value::as_object)
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
    };
    let by: Vec<String> = v
        .pointer("/fast/denied_by")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, c)| format!("{k} {c}")).collect())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "denied: {} packets: {} first packets{}, {} by cached drop entries",
        f("denied"),
        by_total(v),
        if by.is_empty() { String::new() } else { format!(" ({})", by.join(", ")) },
        f("denied_cached")
    );
    let _ = writeln!(
        s,
        "meters: drops {}, ECN marks {} ({} of them lost a race on a shared vPort bucket)",
        f("meter_drops"),
        f("meter_marks"),
        f("meter_contended")
    );
    let _ = writeln!(
        s,
        "tcp: copies {}, copy overflow {}; not flows {}, passthrough {}, transpose errors {}",
        f("tcp_copies"),
        f("tcp_copy_overflow"),
        f("not_flow"),
        f("passthrough"),
        f("transpose_errors")
    );
    let _ = writeln!(
        s,
        "fast path: {}; restarts {}, flows dropped by restarts {}, packets served by the slow \
         path alone {}",
        v["fastpath"].as_str().unwrap_or("on"),
        n(v, &["restarts"]),
        f("flushed"),
        f("slow_served")
    );
    if let Some(sl) = v.get("slow") {
        let _ = writeln!(
            s,
            "connections: {} now ({} half-open, {} time-wait), opened {}, closed {}, SNAT ports \
             {}, TCP invalid {}",
            n(sl, &["conns"]),
            n(sl, &["half_open"]),
            n(sl, &["time_wait"]),
            n(sl, &["opened"]),
            n(sl, &["closed"]),
            n(sl, &["snat_in_use"]),
            n(sl, &["tcp_invalid"])
        );
    }
    for q in v.get("queues").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(
            s,
            "queue port {}: enqueued {}, marked {}, dropped full {}, sent {} ({} bytes), max depth {}",
            q["port"],
            n(q, &["enqueued"]),
            n(q, &["marked"]),
            n(q, &["dropped_full"]),
            n(q, &["sent"]),
            n(q, &["sent_bytes"]),
            n(q, &["max_depth"])
        );
    }
    for p in v.get("vports").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(
            s,
            "vport {} {} on port {}: epoch {}",
            p["id"],
            p["name"].as_str().unwrap_or("?"),
            p["port"],
            p["epoch"]
        );
    }
    s
}

/// The error a `{"ok":false}` answer carries.
fn error(msg: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": msg.to_string()})
}

/// What the control socket answers when the run has no vSwitch.
pub const NO_VSWITCH: &str = "this run has no vswitch stage";

/// Answer one `vswitch.*` request with the run's vSwitch (`None`: the run has none). `now` is
/// the run's clock (flow ages). `stats` requests are not answered here (the caller has the
/// counters).
/// The control socket's handler of a run or a NIC: the counters document from `latest` (a
/// snapshot the caller refreshes), vSwitch requests through `vs` timed with `clock` (the run's
/// clock, so flow ages are right), `p4.cli` requests through `p4` (the `p4` stage's control),
/// `stream.*` requests through `kernels` and `ebpf.*` requests through `ebpf` (the `xdp:`
/// stages' controls and a device's NIC-core programs).
pub fn control_handler(
    latest: std::sync::Arc<std::sync::Mutex<String>>,
    vs: Option<VSwitch>,
    p4: Option<snic_io::p4::P4Control>,
    kernels: Vec<snic_stream::KernelControl>,
    ebpf: crate::ebpf::Targets,
    clock: snic_time::MonotonicClock,
) -> impl FnMut(crate::control::Incoming) -> String + Send + 'static {
    use crate::control::Incoming;
    use snic_time::Clock;
    move |incoming| {
        let counters = || latest.lock().map_or_else(|p| p.into_inner().clone(), |s| s.clone());
        match incoming {
            Incoming::Counters => counters(),
            Incoming::Request(Request::Stats) => {
                format!("{{\"ok\":true,\"counters\":{}}}", counters())
            }
            Incoming::Request(
                r @ (Request::EbpfList
                | Request::EbpfLoad { .. }
                | Request::EbpfMap { .. }
                | Request::EbpfEvents { .. }
                | Request::EbpfTrace { .. }),
            ) => crate::ebpf::serve(&ebpf, r).to_string(),
            Incoming::Request(Request::P4 { text }) => {
                crate::p4::serve(p4.as_ref(), &text).to_string()
            }
            Incoming::Request(
                r @ (Request::StreamList
                | Request::StreamReg { .. }
                | Request::StreamKey { .. }
                | Request::StreamTable { .. }),
            ) => crate::stream::serve(&kernels, r).to_string(),
            Incoming::Request(r) => serve(vs.as_ref(), clock.now(), r).to_string(),
        }
    }
}

pub fn serve(vs: Option<&VSwitch>, now: Instant, req: Request) -> Value {
    let Some(vs) = vs else { return error(NO_VSWITCH) };
    match req {
        Request::Stats => error("stats is answered by the run, not the vswitch"),
        Request::Upgrade { .. } => {
            error("this process does not take upgrades (only `snic run` does)")
        }
        Request::P4 { .. } => error("p4 requests are answered by the p4 stage, not the vswitch"),
        Request::StreamList
        | Request::StreamReg { .. }
        | Request::StreamKey { .. }
        | Request::StreamTable { .. } => {
            error("stream requests are answered by the kernel stages, not the vswitch")
        }
        Request::EbpfList
        | Request::EbpfLoad { .. }
        | Request::EbpfMap { .. }
        | Request::EbpfEvents { .. }
        | Request::EbpfTrace { .. } => {
            error("ebpf requests are answered by the xdp stages, not the vswitch")
        }
        Request::VSwitchShow => {
            let mut sw = show_json(vs);
            sw["fastpath"] = json!(if vs.fastpath_on(now) { "on" } else { "off" });
            json!({"ok": true, "vswitch": sw})
        }
        Request::DumpFlows { limit, text } => {
            if limit > MAX_DUMP_LIMIT {
                return error(format!("limit {limit} is above the maximum {MAX_DUMP_LIMIT}"));
            }
            let flows = vs.dump_flows(now, limit);
            let count = flows.len();
            if text {
                let lines: Vec<String> = flows.iter().map(ToString::to_string).collect();
                json!({"ok": true, "count": count, "lines": lines})
            } else {
                json!({"ok": true, "count": count, "flows": flows})
            }
        }
        Request::TopFlows { n, by } => {
            if n > MAX_DUMP_LIMIT {
                return error(format!("n {n} is above the maximum {MAX_DUMP_LIMIT}"));
            }
            let mut flows = vs.dump_flows(now, usize::MAX);
            let total = flows.len();
            let key = |f: &snic_vswitch::engine::FlowDump| match by {
                crate::control::TopBy::Packets => (f.packets, f.bytes),
                crate::control::TopBy::Bytes => (f.bytes, f.packets),
            };
            if n < flows.len() {
                flows.select_nth_unstable_by(n, |a, b| key(b).cmp(&key(a)));
                flows.truncate(n);
            }
            flows.sort_unstable_by_key(|f| std::cmp::Reverse(key(f)));
            json!({"ok": true, "by": by, "total": total, "flows": flows})
        }
        Request::Policy => {
            let generation = vs.generation();
            let policy = to_toml(&vs.policy());
            json!({"ok": true, "generation": generation, "policy": policy})
        }
        Request::RestartFastpath { hold_ms } => restart_fastpath(vs, now, hold_ms),
        Request::Apply { edits } => match apply_edits(vs, &edits) {
            Ok(a) => applied_json(vs, &a),
            Err(e) => error(e),
        },
    }
}

/// Parse every edit, then apply them all as one transaction.
fn apply_edits(vs: &VSwitch, edits: &[Edit]) -> Result<Applied, String> {
    if edits.is_empty() {
        return Err("vswitch.apply needs at least one edit".into());
    }
    let policy = vs.policy();
    let mut parsed = Vec::with_capacity(edits.len());
    for (i, e) in edits.iter().enumerate() {
        match to_policy_edit(e, &policy.meters, "<control socket>") {
            Ok(p) => parsed.push(p),
            // With one edit the error speaks for itself; with several, say which.
            Err(err) if edits.len() == 1 => return Err(err.to_string()),
            Err(err) => return Err(format!("edit {i} ({}): {err}", e.op())),
        }
    }
    vs.apply(&parsed).map_err(|e| e.to_string())
}

/// `{"ok":true,"generation":g,"vports":[{"id":v,"epoch":e}],"removed":n}`.
fn applied_json(vs: &VSwitch, a: &Applied) -> Value {
    let vports: Vec<Value> =
        a.vports.iter().map(|&v| json!({"id": v.0, "epoch": vs.epoch(v)})).collect();
    json!({"ok": true, "generation": a.generation, "vports": vports, "removed": a.removed})
}

/// The `vswitch` object of a `vswitch.show` answer.
pub fn show_json(vs: &VSwitch) -> Value {
    let st = vs.stats();
    let mut v = serde_json::to_value(&st).unwrap_or_else(|_| json!({}));
    let (mut evicted_full, mut evicted_collision, mut inserts, mut expired) = (0, 0, 0, 0);
    for t in &st.table {
        evicted_full += t.evicted_full;
        evicted_collision += t.evicted_collision;
        inserts += t.inserts;
        expired += t.expired;
    }
    let queues: Vec<Value> = st
        .queues
        .iter()
        .map(|(port, q)| {
            json!({
                "port": port,
                "enqueued": q.enqueued,
                "marked": q.marked,
                "dropped_full": q.dropped_full,
                "sent": q.sent,
                "sent_bytes": q.sent_bytes,
                "max_depth": q.max_depth,
            })
        })
        .collect();
    let policy = vs.policy();
    let vports: Vec<Value> = policy
        .vports
        .iter()
        .map(|p| json!({"id": p.id.0, "name": p.name, "port": p.port, "epoch": vs.epoch(p.id)}))
        .collect();
    let meters: Vec<Value> = policy
        .meters
        .iter()
        .map(|m| json!({"name": m.name, "rate_bps": m.rate_bps, "burst_bytes": m.burst_bytes}))
        .collect();
    if let Some(o) = v.as_object_mut() {
        o.insert("evictions".into(), json!(evicted_full + evicted_collision));
        o.insert(
            "table".into(),
            json!({
                "inserts": inserts,
                "expired": expired,
                "evicted_full": evicted_full,
                "evicted_collision": evicted_collision,
            }),
        );
        o.insert("queues".into(), Value::Array(queues));
        o.insert("vports".into(), Value::Array(vports));
        o.insert("meters".into(), Value::Array(meters));
        o.insert("memory_bytes".into(), json!(vs.table_memory()));
        o.insert("slow".into(), serde_json::to_value(&st.slow).unwrap_or_else(|_| json!({})));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use snic_vswitch::key::VPortId;

    #[derive(Debug, Parser)]
    struct T {
        #[command(subcommand)]
        cmd: VSwitchCommand,
    }

    fn parse(args: &[&str]) -> VSwitchCommand {
        T::try_parse_from(std::iter::once("vswitch").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .cmd
    }

    #[test]
    fn rule_words_are_joined_and_flags_parse() {
        match parse(&[
            "add-rule",
            "--control",
            "s",
            "--vport",
            "2",
            "--layer",
            "acl",
            "id=3",
            "priority=1",
            "action=deny",
        ]) {
            VSwitchCommand::AddRule { ctl, vport, layer, rule } => {
                assert_eq!(ctl.control, PathBuf::from("s"));
                assert_eq!((vport, layer.as_str()), (2, "acl"));
                assert_eq!(rule.join(" "), "id=3 priority=1 action=deny");
            }
            other => panic!("{other:?}"),
        }
        match parse(&["add-layer", "--control", "s", "--vport", "0", "name=x", "kind=acl"]) {
            VSwitchCommand::AddLayer { position, layer, .. } => {
                assert_eq!(position, None);
                assert_eq!(layer, ["name=x", "kind=acl"]);
            }
            other => panic!("{other:?}"),
        }
        match parse(&["dump-flows", "--control", "s"]) {
            VSwitchCommand::DumpFlows { limit, json, .. } => {
                assert_eq!((limit, json), (1000, false))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse(&["check", "p.toml"]), VSwitchCommand::Check { .. }));
    }

    #[test]
    fn control_is_required_except_for_check_and_bad_values_are_refused() {
        let fails = |args: &[&str]| {
            T::try_parse_from(std::iter::once("vswitch").chain(args.iter().copied())).is_err()
        };
        assert!(fails(&["show"]));
        assert!(fails(&["add-rule", "--control", "s", "--vport", "0", "--layer", "acl"]));
        assert!(fails(&[
            "remove-rule",
            "--control",
            "s",
            "--vport",
            "70000",
            "--layer",
            "a",
            "--id",
            "1"
        ]));
        assert!(fails(&[
            "remove-mapping",
            "--control",
            "s",
            "--vport",
            "0",
            "--layer",
            "v",
            "--ca",
            "10.0.0"
        ]));
        assert!(!fails(&["check", "x.toml"]));
    }

    #[test]
    fn without_a_vswitch_every_vswitch_command_says_so() {
        for req in [
            Request::VSwitchShow,
            Request::Policy,
            Request::DumpFlows { limit: 1, text: false },
            Request::Apply { edits: vec![] },
        ] {
            assert_eq!(serve(None, Instant::ZERO, req), json!({"ok": false, "error": NO_VSWITCH}));
        }
    }

    fn vswitch() -> VSwitch {
        VSwitch::new(snic_vswitch::policy::default_policy(), Default::default())
            .expect("default policy")
    }

    fn policy_text(vs: &VSwitch) -> String {
        serve(Some(vs), Instant::ZERO, Request::Policy)["policy"].as_str().unwrap().to_owned()
    }

    #[test]
    fn apply_add_and_remove_rule_moves_the_generation_and_the_epoch() {
        let vs = vswitch();
        let g0 = vs.generation();
        let e0 = vs.epoch(VPortId(0));
        let add = Edit::AddRule {
            vport: 0,
            layer: "acl".into(),
            rule: "id=77 priority=1 ip.dst=10.0.0.9 action=deny".into(),
        };
        let v = serve(Some(&vs), Instant::ZERO, Request::Apply { edits: vec![add] });
        assert_eq!(
            v,
            json!({"ok": true, "generation": g0 + 1, "vports": [{"id": 0, "epoch": e0 + 1}], "removed": 0})
        );
        assert!(vs.policy().vports[0].layers.iter().any(|l| l.rules.iter().any(|r| r.id == 77)));
        assert!(policy_text(&vs).contains("77"));
        let rm = Edit::RemoveRule { vport: 0, layer: "acl".into(), id: 77 };
        let v = serve(Some(&vs), Instant::ZERO, Request::Apply { edits: vec![rm] });
        assert_eq!(v["generation"], g0 + 2, "{v}");
        assert!(!vs.policy().vports[0].layers.iter().any(|l| l.rules.iter().any(|r| r.id == 77)));
    }

    #[test]
    fn a_failing_edit_changes_nothing_and_names_the_field() {
        let vs = vswitch();
        let before = policy_text(&vs);
        let g0 = vs.generation();
        let good =
            Edit::AddRule { vport: 0, layer: "acl".into(), rule: "id=78 action=deny".into() };
        let bad = Edit::AddRule {
            vport: 0,
            layer: "acl".into(),
            rule: "id=79 ip.dst=10.0.0.0/33 action=deny".into(),
        };
        let v = serve(Some(&vs), Instant::ZERO, Request::Apply { edits: vec![good, bad] });
        assert_eq!(v["ok"], false, "{v}");
        let msg = v["error"].as_str().unwrap();
        assert!(msg.starts_with("edit 1 (add-rule): "), "{msg}");
        assert!(msg.contains("ip.dst"), "{msg}");
        assert_eq!(vs.generation(), g0);
        assert_eq!(policy_text(&vs), before);
        // A bad CA, a missing layer, a bad replacement: refused, nothing applied.
        for e in [
            Edit::RemoveMapping { vport: 0, layer: "vnet".into(), ca: "10.0.0".into() },
            Edit::RemoveRule { vport: 0, layer: "no-such-layer".into(), id: 1 },
            Edit::Replace {
                policy: "[[vport]]\nid = \"x\"\n".into(),
                file: Some("new.toml".into()),
            },
        ] {
            let v = serve(Some(&vs), Instant::ZERO, Request::Apply { edits: vec![e] });
            assert_eq!(v["ok"], false, "{v}");
        }
        let v = serve(
            Some(&vs),
            Instant::ZERO,
            Request::Apply {
                edits: vec![Edit::Replace {
                    policy: "[[vport]]\nid = \"x\"\n".into(),
                    file: Some("new.toml".into()),
                }],
            },
        );
        assert!(v["error"].as_str().unwrap().starts_with("new.toml:2:"), "{v}");
        assert_eq!(vs.generation(), g0);
        assert_eq!(policy_text(&vs), before);
    }

    #[test]
    fn replace_with_the_dumped_policy_round_trips() {
        let vs = vswitch();
        let text = policy_text(&vs);
        let v = serve(
            Some(&vs),
            Instant::ZERO,
            Request::Apply { edits: vec![Edit::Replace { policy: text.clone(), file: None }] },
        );
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(policy_text(&vs), text);
    }

    #[test]
    fn show_and_dump_flows_of_an_idle_vswitch() {
        let vs = vswitch();
        let v = serve(Some(&vs), Instant::ZERO, Request::VSwitchShow);
        let sw = &v["vswitch"];
        assert_eq!(sw["generation"], vs.generation());
        assert_eq!(sw["flows"], 0);
        assert_eq!(sw["fast"]["hits"], 0);
        assert_eq!(sw["vports"][0]["id"], 0);
        let text = show_text(sw);
        assert!(text.starts_with(&format!("generation {}, ", vs.generation())), "{text}");
        assert!(text.contains("lookups: hits 0, misses 0"), "{text}");
        let v = serve(Some(&vs), Instant::ZERO, Request::DumpFlows { limit: 10, text: true });
        assert_eq!(v, json!({"ok": true, "count": 0, "lines": []}));
        let v = serve(
            Some(&vs),
            Instant::ZERO,
            Request::DumpFlows { limit: MAX_DUMP_LIMIT + 1, text: true },
        );
        assert_eq!(v["ok"], false);
        let v = serve(Some(&vs), Instant::ZERO, Request::Apply { edits: vec![] });
        assert_eq!(v, json!({"ok": false, "error": "vswitch.apply needs at least one edit"}));
    }

    #[test]
    fn restart_fastpath_answers_and_show_reports_the_window() {
        let vs = vswitch();
        let _stage = vs.stage().unwrap();
        let t = Instant::from_micros(1_000);
        let v = serve(Some(&vs), t, Request::RestartFastpath { hold_ms: 5 });
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!((v["restarts"].as_u64(), v["shards"].as_u64()), (Some(1), Some(1)));
        assert_eq!((v["flushed"].as_u64(), v["hold_ms"].as_u64()), (Some(0), Some(5)));
        assert_eq!(v["fastpath_off_until_ns"].as_u64(), Some(6_000_000));
        let text = restart_text(&v);
        assert!(
            text.starts_with("fast path restart 1: 0 flow(s) dropped from 1 shard(s)"),
            "{text}"
        );
        let sw = &serve(Some(&vs), t, Request::VSwitchShow)["vswitch"];
        assert_eq!((sw["fastpath"].as_str(), sw["restarts"].as_u64()), (Some("off"), Some(1)));
        assert!(show_text(sw).contains("fast path: off; restarts 1"), "{}", show_text(sw));
        let later = Instant::from_micros(6_000);
        let sw = &serve(Some(&vs), later, Request::VSwitchShow)["vswitch"];
        assert_eq!(sw["fastpath"], "on");
        assert_eq!(sw["slow"]["conns"], 0);
        let v = serve(Some(&vs), t, Request::RestartFastpath { hold_ms: control::MAX_HOLD_MS + 1 });
        assert_eq!(v["ok"], false);
        assert_eq!(vs.stats().restarts, 1, "a refused restart does nothing");
    }

    #[test]
    fn applied_text_names_generation_and_epochs() {
        let v =
            json!({"ok": true, "generation": 4, "vports": [{"id": 0, "epoch": 2}], "removed": 1});
        assert_eq!(
            applied_text("add-rule", &v),
            "applied add-rule: generation 4; new epoch on vPort 0 (epoch 2); 1 cached flow(s) removed\n"
        );
        let v = json!({"ok": true, "generation": 5, "vports": [], "removed": 0});
        assert!(applied_text("replace", &v).contains("no vPort epoch moved"));
    }
}
