//! `snic trace`: what a running snic would do with a packet, without sending it (as
//! `ovs-appctl ofproto/trace`).
//!
//! The client describes a packet (the scenario packet language, `Ether()/IP(dst="10.0.0.2")/
//! UDP(dport=4791)`, or a hex frame) and the port it arrives on. The run answers with every
//! stage's trace events for it (parse, classify, l2fwd, vswitch, p4, ...) and the transmit
//! decision, from a **dry run**: the packet goes through a private copy of the run's pipeline,
//! built from the same configuration, and is never sent. Nothing of the running NIC changes:
//!
//! - stateless stages (parse, classify, static l2fwd) run as they are;
//! - `l2fwd:learn` runs with an empty MAC table (the workers' tables are theirs: a learned
//!   destination shows as a flood here);
//! - `vswitch` runs on a new vSwitch with the policy in force (its own flow table, no
//!   connection state); the answer adds the slow path's verdict (the layer and rule that
//!   denied, or the transposition and output port) and the running NIC's cached flows for the
//!   packet's key (read-only lookups, GFT hit or slow path);
//! - `p4` runs on a copy of the first worker's switch (tables, registers, counters copied;
//!   the copy is thrown away), with its parser/table/action trace;
//! - `tap:` writes nothing; `kernel:` and `xdp:` are not run (they change maps or registers)
//!   and say so: the packet passes them unchanged;
//! - `local`, on a whole NIC (`snic serve --port`), runs as it is (it only compares the
//!   packet with the NIC's RoCE addresses): RoCEv2 and ARP / ND for the NIC show as taken by
//!   the device and the verdict says which part takes them (its RDMA engine or its neighbour
//!   table). What the engine would then do with the packet (its QPs' state) is not traced.
//!   Elsewhere `local` is not run and says so.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use snic_pipeline::pipeline::{BuildError, StageSpec};
use snic_pipeline::{Batch, Pipeline, PipelineConfig, PortId, Stage, StageCtx, TraceWhat};
use snic_time::{Clock, Instant, MonotonicClock};
use std::io::Write;
use std::path::PathBuf;

/// The `trace` request: a packet (`packet`: a scenario packet spec, or `hex`: a frame) arriving
/// on `port`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// The ingress port.
    #[serde(default)]
    pub port: u16,
    /// The packet, as the scenario packet language describes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet: Option<String>,
    /// The packet as hex bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
}

/// What a running snic needs to answer `trace` requests: its pipeline configuration, its
/// ports' names, and the control handles of the stages that keep state.
pub struct TraceTarget {
    cfg: PipelineConfig,
    ports: Vec<String>,
    vswitch: Option<snic_vswitch::engine::VSwitch>,
    p4: Option<snic_io::p4::P4Control>,
    clock: MonotonicClock,
    /// A NIC's `local` stage (its RoCE addresses), run as it is.
    local: Option<snic_nic::local::Local>,
}

impl std::fmt::Debug for TraceTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceTarget").field("ports", &self.ports).finish_non_exhaustive()
    }
}

/// A stage a dry run does not run (it would change state the run shares): it says so and
/// passes the packet on unchanged.
struct NotRun {
    name: String,
    why: &'static str,
}

impl Stage for NotRun {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, _now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        for p in batch.iter() {
            ctx.trace(p, || TraceWhat::Note(self.why));
        }
    }
}

/// The `p4` stage of a dry run: a copy of a worker's switch, thrown away afterwards.
struct P4Copy {
    sw: snic_p4::v1model::Switch,
}

impl Stage for P4Copy {
    fn name(&self) -> &str {
        "p4"
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        let now_ns = now.as_nanos();
        let sw = &mut self.sw;
        ctx.each(batch, |p, ctx| {
            let mut out = Vec::new();
            sw.set_trace(true);
            let ingress = u32::from(p.meta.ingress.0);
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                sw.process(ingress, p.data(), now_ns, &mut out)
            }));
            let lines = sw.take_trace();
            sw.set_trace(false);
            for line in lines {
                ctx.trace(p, || TraceWhat::Detail(line));
            }
            if ran.is_err() {
                return Err(snic_pipeline::DropReason::P4Fault);
            }
            if out.len() > 1 {
                ctx.trace(p, || {
                    TraceWhat::Detail(format!("{} more copies (replicas/clones)", out.len() - 1))
                });
            }
            let Some((port, frame)) = out.into_iter().next() else {
                return Err(snic_pipeline::DropReason::P4Drop);
            };
            let Some(port) = u16::try_from(port).ok().filter(|p| *p < PortId::LOCAL.0) else {
                ctx.trace(p, || TraceWhat::Note("to the P4 CPU port (the controller)"));
                return Err(snic_pipeline::DropReason::P4Drop);
            };
            if frame != p.data() {
                p.set_frame(&frame);
                p.meta.stack = Default::default();
                p.meta.parsed = false;
                ctx.trace(p, || TraceWhat::Modified("rewritten by the P4 program"));
            }
            p.meta.egress = Some(PortId(port));
            ctx.trace(p, || TraceWhat::Forwarded { port: PortId(port), how: "p4" });
            Ok(())
        });
    }
}

/// Most flows a dry run's private vSwitch table holds (it sees one packet).
const DRY_FLOWS: usize = 1024;

impl TraceTarget {
    /// The target of a run: its configuration (the one its pipelines were built from), its
    /// ports' names, its vSwitch and P4 controls, its clock.
    pub fn new(
        cfg: PipelineConfig,
        ports: Vec<String>,
        vswitch: Option<snic_vswitch::engine::VSwitch>,
        p4: Option<snic_io::p4::P4Control>,
        clock: MonotonicClock,
    ) -> Self {
        let mut cfg = cfg;
        cfg.stage_taps = Default::default();
        cfg.trace = Some("all".into());
        TraceTarget { cfg, ports, vswitch, p4, clock, local: None }
    }

    /// Run a NIC's `local` stage in the dry run (it keeps no state): packets for the NIC show
    /// as the device's instead of passing the stage unchanged.
    pub fn with_local(mut self, local: snic_nic::local::Local) -> Self {
        self.local = Some(local);
        self
    }

    fn private_vswitch(&self) -> Result<Box<dyn Stage>, BuildError> {
        let stage_err = |why: String| BuildError::Stage { stage: "vswitch".into(), why };
        let Some(vs) = &self.vswitch else {
            return Err(stage_err("the run has no vswitch control".into()));
        };
        let mut vcfg = snic_vswitch::engine::VSwitchConfig::default();
        vcfg.gft.capacity = DRY_FLOWS;
        let copy = snic_vswitch::engine::VSwitch::new((*vs.policy()).clone(), vcfg)
            .map_err(|e| stage_err(e.to_string()))?;
        Ok(Box::new(copy.stage().map_err(|e| stage_err(e.to_string()))?))
    }

    /// The frame `req` describes.
    fn frame(req: &TraceRequest) -> Result<Vec<u8>, String> {
        match (&req.packet, &req.hex) {
            (Some(p), None) => {
                snic_scenario::packet::build(p).map_err(|e| format!("bad packet: {e}"))
            }
            (None, Some(h)) => {
                snic_scenario::packet::from_hex(h).map_err(|e| format!("bad hex frame: {e}"))
            }
            (None, None) => Err("give a packet description or --hex".into()),
            (Some(_), Some(_)) => Err("give a packet description or --hex, not both".into()),
        }
    }

    /// Answer one request: `{"ok":true,"steps":[{"stage","what"}..],"verdict":..}` or an
    /// error message.
    pub fn trace(&self, req: &TraceRequest) -> Result<Value, String> {
        let frame = Self::frame(req)?;
        if frame.is_empty() {
            return Err("the packet is empty".into());
        }
        if usize::from(req.port) >= self.ports.len() {
            return Err(format!(
                "no port {} (this snic has {} port(s))",
                req.port,
                self.ports.len()
            ));
        }
        let mut sink =
            |_: &str| -> std::io::Result<Box<dyn Write + Send>> { Ok(Box::new(std::io::sink())) };
        let mut factory = |spec: &StageSpec| -> Option<Result<Box<dyn Stage>, BuildError>> {
            let not_run =
                |why| Some(Ok(Box::new(NotRun { name: spec.to_string(), why }) as Box<dyn Stage>));
            match spec {
                StageSpec::VSwitch => Some(self.private_vswitch()),
                StageSpec::P4 { .. } => match self.p4.as_ref().and_then(|c| c.snapshot()) {
                    Some(sw) => Some(Ok(Box::new(P4Copy { sw }))),
                    None => not_run("not run: the p4 program is not available (dry run)"),
                },
                StageSpec::Kernel { .. } => not_run(
                    "not run in a dry run (a kernel changes its registers and results memory); passed unchanged",
                ),
                StageSpec::Xdp { .. } => not_run(
                    "not run in a dry run (an XDP program changes its maps); passed unchanged",
                ),
                StageSpec::Local => match &self.local {
                    Some(l) => Some(Ok(Box::new(l.clone()) as Box<dyn Stage>)),
                    None => {
                        not_run("not run in a dry run (the device's own packets); passed unchanged")
                    }
                },
                _ => None,
            }
        };
        let mut pipeline =
            Pipeline::build_with(&self.cfg, &mut sink, &mut factory).map_err(|e| e.to_string())?;
        let now = self.clock.now();
        let mut batch = Batch::new(snic_pipeline::MAX_BATCH);
        let Some(p) = batch.push_frame(&frame) else {
            return Err("the packet does not fit a buffer".into());
        };
        p.meta.ingress = PortId(req.port);
        pipeline.process(now, &mut batch);
        // A stage may hold the packet until the end of its batch (the vSwitch's exception
        // queue): run empty batches until it is released (bounded).
        let mut rounds = 0;
        while pipeline.pending() > 0 && rounds < 4 {
            let mut more = Batch::new(snic_pipeline::MAX_BATCH);
            pipeline.process(now, &mut more);
            for p in more.iter() {
                let _ = batch.push_frame(p.data()).map(|q| q.meta = p.meta.clone());
            }
            rounds += 1;
        }
        let mut steps: Vec<Value> = pipeline
            .drain_trace()
            .map(|e| json!({"stage": e.stage, "what": e.what.to_string()}))
            .collect();
        if let Some(i) = steps.iter().rposition(|s| s["stage"] == "vswitch") {
            let extra = self.explain_vswitch(&frame, req.port, now);
            steps.splice(
                i + 1..i + 1,
                extra.into_iter().map(|w| json!({"stage": "vswitch", "what": w})),
            );
        }
        let mut verdicts = Vec::new();
        for p in batch.iter() {
            let what = match p.meta.egress {
                Some(e) if e.is_flood() => {
                    let others: Vec<String> = (0..self.ports.len())
                        .filter(|&j| j != usize::from(req.port))
                        .map(|j| j.to_string())
                        .collect();
                    format!("would be flooded to ports {} (not sent: dry run)", others.join(", "))
                }
                Some(e) => format!(
                    "would be sent out port {} ({}), {} bytes (not sent: dry run)",
                    e.0,
                    self.ports.get(usize::from(e.0)).map_or("no such port", String::as_str),
                    p.len()
                ),
                None => "no egress".into(),
            };
            steps.push(json!({"stage": snic_pipeline::trace::TX_STAGE, "what": what}));
            verdicts.push(what);
        }
        if let Some(local) = &self.local {
            let mut mine = Batch::new(snic_pipeline::MAX_BATCH);
            pipeline.take_local(&mut mine);
            for p in mine.iter() {
                use snic_nic::local::LocalKind;
                let to = match local.kind(p) {
                    Some(LocalKind::Roce { .. }) => "its RDMA engine",
                    Some(LocalKind::Neighbour) => "its neighbour table",
                    None => "it",
                };
                let what = format!("would be taken by the NIC: {to} (not delivered: dry run)");
                steps.push(json!({"stage": snic_pipeline::trace::TX_STAGE, "what": what}));
                verdicts.push(what);
            }
        }
        if verdicts.is_empty() {
            verdicts.push("dropped".into());
        }
        Ok(json!({
            "ok": true,
            "port": req.port,
            "frame_len": frame.len(),
            "steps": steps,
            "verdict": verdicts.join("; "),
        }))
    }

    /// The vSwitch's view of the packet: the slow path's verdict on a fresh copy (layer and
    /// rule, or transposition and port) and the running NIC's cached flows for its key.
    fn explain_vswitch(&self, frame: &[u8], port: u16, now: Instant) -> Vec<String> {
        use snic_vswitch::vfp::{SlowPath, Verdict};
        let Some(vs) = &self.vswitch else { return Vec::new() };
        let mut out = Vec::new();
        let mut slow =
            SlowPath::new(vs.policy(), snic_vswitch::engine::VSwitchConfig::default().slow);
        let Some(dir) = slow.role(port) else {
            out.push(format!("port {port} is not a vPort's port nor the uplink: passed through"));
            return out;
        };
        let stack = snic_wire::stack::parse(frame);
        let key = match snic_vswitch::key::extract(frame, &stack, port, dir) {
            Ok(k) => k,
            Err(e) => {
                out.push(format!("no flow key: {e}"));
                return out;
            }
        };
        out.push(format!("flow key {key}"));
        let cached = vs.cached(now, &key);
        if cached.is_empty() {
            out.push(
                "running NIC: no cached flow (GFT miss): the slow path would compile it".into(),
            );
        }
        for d in cached {
            out.push(format!(
                "running NIC: GFT hit in shard {}{}: actions {} (packets {}, epoch {})",
                d.shard,
                if d.stale { " (stale: would be recompiled)" } else { "" },
                d.actions,
                d.packets,
                d.epoch
            ));
        }
        match slow.compile(now, frame, &stack, &key, key.hash_with(0)) {
            Verdict::Forward { forward, reverse } => {
                let a = &forward.action;
                out.push(format!(
                    "slow path (policy generation {}, no connection state): allow via vport {}, \
                     transposition {}, out port {}{}",
                    vs.generation(),
                    a.vport.0,
                    a.transposition,
                    a.egress,
                    if reverse.is_some() { ", stateful (reverse flow too)" } else { "" }
                ));
            }
            Verdict::Deny { reason, .. } => {
                let layer = match reason {
                    snic_vswitch::vfp::DenyReason::Acl { layer, .. } => {
                        layer_name(vs, port, layer).map(|n| format!(" (layer \"{n}\")"))
                    }
                    _ => None,
                };
                out.push(format!(
                    "slow path (policy generation {}, no connection state): deny: {reason}{}",
                    vs.generation(),
                    layer.unwrap_or_default()
                ));
            }
        }
        out
    }
}

/// The name of layer `index` (outbound order) of the vPort on `port`, when one is there.
fn layer_name(vs: &snic_vswitch::engine::VSwitch, port: u16, index: u8) -> Option<String> {
    let policy = vs.policy();
    let v = policy.vports.iter().find(|v| v.port == port)?;
    v.layers.get(usize::from(index)).map(|l| l.name.clone())
}

/// Answer a `trace` request on `conn` (one JSON line).
pub fn serve(target: &TraceTarget, req: &TraceRequest, mut conn: std::os::unix::net::UnixStream) {
    let doc = match target.trace(req) {
        Ok(v) => v.to_string(),
        Err(e) => crate::control::error_reply(&e),
    };
    let _ = conn.set_write_timeout(Some(crate::control::REPLY_TIMEOUT));
    let _ = writeln!(conn, "{doc}");
}

/// Arguments of `snic trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// The control socket of the running snic (`snic run --control PATH`, or `snic serve
    /// --port SPEC --control PATH`).
    #[arg(long, value_name = "PATH")]
    pub control: PathBuf,
    /// The port the packet arrives on.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub port: u16,
    /// The packet as hex bytes instead of a description.
    #[arg(long, value_name = "HEX", conflicts_with = "packet")]
    pub hex: Option<String>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// The packet, in the scenario packet language:
    /// 'Ether(dst="02:00:00:00:00:02")/IP(dst="10.0.0.2")/UDP(dport=4791)/Raw(len=32)'.
    #[arg(value_name = "PACKET", required_unless_present = "hex")]
    pub packet: Option<String>,
}

/// Entry point of `snic trace`.
pub fn run(args: TraceArgs) -> Result<()> {
    let req = TraceRequest { port: args.port, packet: args.packet, hex: args.hex };
    let v = request(&args.control, &req)?;
    if args.json {
        println!("{v}");
        return Ok(());
    }
    print!("{}", text(&v));
    Ok(())
}

/// Send a trace request and return its `{"ok":true}` answer (an error answer is an error).
pub fn request(control: &std::path::Path, req: &TraceRequest) -> Result<Value> {
    use std::io::{BufRead, BufReader};
    let mut conn = std::os::unix::net::UnixStream::connect(control).with_context(|| {
        format!(
            "cannot connect to control socket {} (is `snic run --control` running?)",
            control.display()
        )
    })?;
    conn.set_read_timeout(Some(crate::control::REPLY_TIMEOUT))?;
    let mut line = serde_json::to_value(req)?;
    if let Some(o) = line.as_object_mut() {
        o.insert("cmd".into(), "trace".into());
    }
    writeln!(conn, "{line}").context("sending the trace request")?;
    let mut answer = String::new();
    BufReader::new(&conn).read_line(&mut answer).context("reading the trace answer")?;
    let v: Value = serde_json::from_str(answer.trim_end())
        .with_context(|| format!("the control socket's answer is not JSON: {answer:?}"))?;
    match v.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(v),
        _ => bail!("{}", v.get("error").and_then(Value::as_str).unwrap_or("(no message)")),
    }
}

/// The answer as text: one line per step, then the verdict.
pub fn text(v: &Value) -> String {
    let mut s = format!(
        "packet of {} bytes on port {} (dry run: nothing sent, no state changed)\n",
        v["frame_len"], v["port"]
    );
    for st in v["steps"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  {:<10} {}\n",
            st["stage"].as_str().unwrap_or("?"),
            st["what"].as_str().unwrap_or("?")
        ));
    }
    s.push_str(&format!("verdict: {}\n", v["verdict"].as_str().unwrap_or("?")));
    s
}
