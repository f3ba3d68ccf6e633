//! `--metrics ADDR`: a Prometheus endpoint (`GET /metrics`) on `snic run` and `snic serve`.
//!
//! The metrics are built at each scrape from the same counters document the control socket
//! serves (`snic stats --control`: [`crate::run::report_json`] for a run, the server's
//! `stats()` for `snic serve`) and, for a vSwitch, from the document `snic vswitch show`
//! gives ([`crate::vswitch::show_json`]), so the two never disagree. The document is refreshed
//! by the run every 100 ms whenever `--control` or `--metrics` is given; a scrape reads the
//! latest one and never touches the data path.
//!
//! Names follow Prometheus conventions: the `snic_` prefix, the unit in the name
//! (`_bytes`, `_seconds`), `_total` on counters; one label per dimension (`port`, `kind`,
//! `stage`, `reason`, ...). Every port and stage drop reason is exported, zero or not, so a
//! series exists before its first drop. Histograms: DMA doorbell-to-completion latency
//! (`snic_dma_completion_latency_seconds`, label `path`: `queue` or `channel`) and RDMA send
//! work request latency (`snic_rdma_message_latency_seconds`).
//!
//! The text is encoded with `prometheus-client` (OpenMetrics text, which Prometheus scrapes):
//! a [`Collector`] over a snapshot. Label values are escaped here (`\`, `"` and newlines), as
//! the crate writes them as given.
//!
//! The HTTP side is a small std `TcpListener` thread: one request per connection, at most
//! [`MAX_REQUEST`] bytes of head read within [`REQUEST_TIMEOUT`]; `GET /metrics` (or `HEAD`)
//! is answered, `/` points there, anything else is a 404 or 405.

use crate::stats::doc_ports;
use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelValue, LabelValueEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest request head the server reads.
pub const MAX_REQUEST: usize = 8 << 10;

/// How long the server waits for a request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The Content-Type of the answer (OpenMetrics text, what `prometheus-client` writes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A label value, escaped as the exposition format wants (`\\`, `\"`, `\n`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Escaped(String);

/// `s` with backslashes, double quotes and newlines escaped for a label value.
pub fn escape_label_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl EncodeLabelValue for Escaped {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(&escape_label_value(&self.0))
    }
}

/// A metric name part made of `[a-zA-Z0-9_]` (anything else becomes `_`), for names built
/// from document keys.
pub fn sanitize_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// The value of one sample.
#[derive(Debug, Clone)]
enum Sample {
    Int(u64),
    Float(f64),
    /// Sum (seconds), count, per-bucket counts with their upper bounds (seconds; the last is
    /// `f64::MAX`, `+Inf`).
    Hist(f64, u64, Vec<(f64, u64)>),
}

/// One family: name (without the `snic_` prefix and without unit or `_total`), help, unit,
/// type and its samples with their labels.
#[derive(Debug, Clone)]
struct Family {
    name: String,
    help: String,
    unit: Option<Unit>,
    kind: MetricType,
    samples: Vec<(Vec<(&'static str, Escaped)>, Sample)>,
}

/// Every family of one scrape, in the order first added.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

type Labels<'a> = &'a [(&'static str, &'a str)];

impl Snapshot {
    fn add(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        kind: MetricType,
        labels: Labels,
        v: Sample,
    ) {
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_owned(),
                    help: help.to_owned(),
                    unit,
                    kind,
                    samples: Vec::new(),
                });
                self.index.insert(name.to_owned(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let labels = labels.iter().map(|(k, v)| (*k, Escaped((*v).to_owned()))).collect();
        if let Some(f) = self.families.get_mut(i) {
            f.samples.push((labels, v));
        }
    }

    /// A counter of events (`name` gets `_total`).
    fn counter(&mut self, name: &str, help: &str, labels: Labels, v: u64) {
        self.add(name, help, None, MetricType::Counter, labels, Sample::Int(v));
    }

    /// A counter of bytes (`name` gets `_bytes_total`).
    fn bytes(&mut self, name: &str, help: &str, labels: Labels, v: u64) {
        self.add(name, help, Some(Unit::Bytes), MetricType::Counter, labels, Sample::Int(v));
    }

    /// A counter of seconds (`name` gets `_seconds_total`).
    fn seconds(&mut self, name: &str, help: &str, labels: Labels, v: f64) {
        self.add(name, help, Some(Unit::Seconds), MetricType::Counter, labels, Sample::Float(v));
    }

    /// A gauge.
    fn gauge(&mut self, name: &str, help: &str, unit: Option<Unit>, labels: Labels, v: f64) {
        self.add(name, help, unit, MetricType::Gauge, labels, Sample::Float(v));
    }

    /// A latency histogram from its counters-document form (`count`, `sum_ns`, `le_ns`,
    /// `counts`); nothing when the document has none.
    fn histogram(&mut self, name: &str, help: &str, labels: Labels, doc: &Value) {
        let (Some(count), Some(sum_ns), Some(le), Some(counts)) = (
            doc["count"].as_u64(),
            doc["sum_ns"].as_u64(),
            doc["le_ns"].as_array(),
            doc["counts"].as_array(),
        ) else {
            return;
        };
        let mut buckets: Vec<(f64, u64)> = le
            .iter()
            .zip(counts)
            .map(|(b, c)| (b.as_u64().unwrap_or(0) as f64 / 1e9, c.as_u64().unwrap_or(0)))
            .collect();
        let above = counts.get(le.len()).and_then(Value::as_u64).unwrap_or(0);
        buckets.push((f64::MAX, above));
        self.add(
            name,
            help,
            Some(Unit::Seconds),
            MetricType::Histogram,
            labels,
            Sample::Hist(sum_ns as f64 / 1e9, count, buckets),
        );
    }

    /// The exposition text of every family.
    pub fn encode(self) -> String {
        let mut registry = Registry::with_prefix("snic");
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for f in &self.families {
            let mut m = encoder.encode_descriptor(&f.name, &f.help, f.unit.as_ref(), f.kind)?;
            let gauge = matches!(f.kind, MetricType::Gauge);
            for (labels, v) in &f.samples {
                // No labels: no `{}` after the name.
                if labels.is_empty() {
                    put(&mut m, gauge, v)?;
                } else {
                    put(&mut m.encode_family(labels)?, gauge, v)?;
                }
            }
        }
        Ok(())
    }
}

/// Write one sample's value.
fn put(e: &mut MetricEncoder, gauge: bool, v: &Sample) -> std::fmt::Result {
    match v {
        Sample::Int(n) if gauge => e.encode_gauge(&(*n as f64)),
        Sample::Int(n) => e.encode_counter::<NoLabelSet, _, u64>(n, None),
        Sample::Float(x) if gauge => e.encode_gauge(x),
        Sample::Float(x) => e.encode_counter::<NoLabelSet, _, f64>(x, None),
        Sample::Hist(sum, count, buckets) => {
            e.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)
        }
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// Every drop-reason key the pipeline counts (`malformed.truncated`, `no_egress`, ...).
fn drop_reasons() -> impl Iterator<Item = String> {
    (0..snic_pipeline::drop::DROP_REASONS)
        .filter_map(snic_pipeline::DropReason::slot_key)
        .map(|k| k.to_string())
}

/// `name{labels, reason}` for every drop reason: the document's count or zero.
fn drops(s: &mut Snapshot, name: &str, help: &str, labels: Labels, doc: &Value) {
    let mut seen = Vec::new();
    for r in drop_reasons() {
        let mut l = labels.to_vec();
        l.push(("reason", &r));
        s.counter(name, help, &l, u(&doc[r.as_str()]));
        seen.push(r);
    }
    // A reason the document has and this build does not know still shows.
    if let Some(m) = doc.as_object() {
        for (k, v) in m.iter().filter(|(k, _)| !seen.contains(k)) {
            let mut l = labels.to_vec();
            l.push(("reason", k));
            s.counter(name, help, &l, u(v));
        }
    }
}

/// The port kind of a port name (`afpacket:eth0` is `afpacket`).
fn port_kind(name: &str) -> &str {
    name.split([':', '(', ' ']).next().unwrap_or(name)
}

/// The pipeline's port counters (`ports` of a pipeline's `Counters`), by port id; the I/O
/// side's device counters (`device`) where the document has them.
fn port(s: &mut Snapshot, id: &str, name: &str, pc: &Value, device: Option<&Value>) {
    let kind = port_kind(name);
    let l: &[(&str, &str)] = &[("port", id), ("kind", kind), ("name", name)];
    s.counter(
        "port_rx_packets",
        "Packets received (entered the pipeline).",
        l,
        u(&pc["rx_packets"]),
    );
    s.bytes("port_rx", "Bytes received (entered the pipeline).", l, u(&pc["rx_bytes"]));
    s.counter("port_tx_packets", "Packets transmitted.", l, u(&pc["tx_packets"]));
    s.bytes("port_tx", "Bytes transmitted.", l, u(&pc["tx_bytes"]));
    drops(
        s,
        "port_rx_drops",
        "Packets dropped before the pipeline, by reason.",
        l,
        &pc["rx_drops"],
    );
    drops(
        s,
        "port_tx_drops",
        "Packets the pipeline sent that did not leave, by reason.",
        l,
        &pc["tx_drops"],
    );
    s.counter(
        "port_tunnel_segmented",
        "Tunnelled super-packets segmented in software before transmit.",
        l,
        u(&pc["tunnel_segmented"]),
    );
    s.counter(
        "port_gro_coalesced",
        "Received TCP segments merged into super-packets before transmit.",
        l,
        u(&pc["gro_coalesced"]),
    );
    let Some(d) = device else { return };
    for (key, help) in [
        ("rx_errors", "Port input that could not become a frame (bad record, receive error)."),
        ("tx_dropped", "Frames the port was handed but could not send."),
        (
            "rx_kernel_drops",
            "Frames the kernel dropped at the port's socket before snic read them.",
        ),
        ("rx_ring_full", "Frames the kernel dropped because snic's receive ring was full."),
        ("rx_fill_empty", "Times the kernel found the AF_XDP fill ring empty."),
        ("tx_ring_full", "Transmit attempts that found the transmit ring full."),
    ] {
        s.counter(&format!("port_{key}"), help, l, u(&d[key]));
    }
    s.counter(
        "port_device_rx_packets",
        "Frames the port read (its own count).",
        l,
        u(&d["rx_packets"]),
    );
    s.bytes("port_device_rx", "Bytes the port read (its own count).", l, u(&d["rx_bytes"]));
    s.counter(
        "port_device_tx_packets",
        "Frames the port sent (its own count).",
        l,
        u(&d["tx_packets"]),
    );
    s.bytes("port_device_tx", "Bytes the port sent (its own count).", l, u(&d["tx_bytes"]));
}

/// One worker's own queues of every port, summed (`per_worker[k]` of the run's document).
fn worker(s: &mut Snapshot, k: &str, q: &Value) {
    let l: &[(&str, &str)] = &[("worker", k)];
    let help = |what: &str| format!("{what} (this worker's queues of every port).");
    s.counter("worker_rx_packets", &help("Frames read"), l, u(&q["rx_packets"]));
    s.bytes("worker_rx", &help("Bytes read"), l, u(&q["rx_bytes"]));
    s.counter("worker_tx_packets", &help("Frames sent"), l, u(&q["tx_packets"]));
    s.bytes("worker_tx", &help("Bytes sent"), l, u(&q["tx_bytes"]));
    for (key, what) in [
        ("rx_errors", "Input that could not become a frame"),
        ("tx_dropped", "Frames handed but not sent"),
        ("rx_kernel_drops", "Frames the kernel dropped at the sockets before snic read them"),
        ("rx_ring_full", "Frames the kernel dropped because the receive ring was full"),
        ("rx_fill_empty", "Times the kernel found the AF_XDP fill ring empty"),
        ("tx_ring_full", "Transmit attempts that found the transmit ring full"),
    ] {
        s.counter(&format!("worker_{key}"), &help(what), l, u(&q[key]));
    }
}

/// The stages of a pipeline's counters (`stages`), in order; a repeated name gets `#2`, ...
fn stages(s: &mut Snapshot, stages: &Value) {
    let mut names: Vec<String> = Vec::new();
    for st in stages.as_array().into_iter().flatten() {
        let base = st["name"].as_str().unwrap_or("?");
        let n = names.iter().filter(|x| x.split('#').next() == Some(base)).count();
        let name = if n == 0 { base.to_owned() } else { format!("{base}#{}", n + 1) };
        names.push(name.clone());
        let l: &[(&str, &str)] = &[("stage", &name)];
        s.counter("stage_in_packets", "Packets the stage was handed.", l, u(&st["packets_in"]));
        s.counter("stage_out_packets", "Packets the stage passed on.", l, u(&st["packets_out"]));
        s.bytes("stage_in", "Bytes the stage was handed.", l, u(&st["bytes_in"]));
        s.counter("stage_errors", "Stage errors.", l, u(&st["errors"]));
        s.counter(
            "stage_held_packets",
            "Packets the stage holds (queued for later).",
            l,
            u(&st["held"]),
        );
        s.counter(
            "stage_local_packets",
            "Packets the stage delivered locally (the NIC's own).",
            l,
            u(&st["local"]),
        );
        s.counter(
            "stage_created_packets",
            "Packets the stage made (replicas, clones).",
            l,
            u(&st["created"]),
        );
        drops(s, "stage_drops", "Packets the stage dropped, by reason.", l, &st["drops"]);
        if let Some(c) = st["classes"].as_object() {
            for (class, n) in c {
                s.counter(
                    "stage_classified_packets",
                    "Packets the stage classified, by class.",
                    &[("stage", &name), ("class", class)],
                    u(n),
                );
            }
        }
    }
}

/// The metrics of a `snic run` counters document (and its vSwitch's `show` document).
pub fn from_run(doc: &Value, vswitch: Option<&Value>) -> Snapshot {
    let mut s = Snapshot::default();
    s.gauge("workers", "Worker threads.", None, &[], f(&doc["workers"]));
    s.gauge(
        "run_elapsed",
        "Seconds the run has been running.",
        Some(Unit::Seconds),
        &[],
        f(&doc["elapsed_secs"]),
    );
    for p in doc_ports(doc) {
        port(&mut s, &p.id.to_string(), p.name, p.counters, p.device);
    }
    for (k, q) in doc["per_worker"].as_array().into_iter().flatten().enumerate() {
        worker(&mut s, &k.to_string(), q);
    }
    stages(&mut s, &doc["stages"]);
    s.counter(
        "drops",
        "Every drop of the run (pipeline, I/O and kernel), all reasons.",
        &[],
        u(&doc["drops_total"]),
    );
    s.counter(
        "created_packets",
        "Packets stages made (replicas and clones).",
        &[],
        u(&doc["created"]),
    );
    for (class, n) in doc["classes"].as_object().into_iter().flatten() {
        s.counter(
            "forwarded_packets",
            "Packets that left a port, by class.",
            &[("class", class)],
            u(n),
        );
    }
    for (class, n) in doc["classified"].as_object().into_iter().flatten() {
        s.counter(
            "classified_packets",
            "Packets the classify stage classified, by class.",
            &[("class", class)],
            u(n),
        );
    }
    xdp(&mut s, &doc["xdp"]);
    if let Some(vs) = vswitch {
        vswitch_metrics(&mut s, vs);
    }
    s
}

/// The actions of `xdp:` stages (`[{"stage", "actions": {name: n}}]` or a map), if any.
fn xdp(s: &mut Snapshot, doc: &Value) {
    for (i, st) in doc.as_array().into_iter().flatten().enumerate() {
        let stage = st["stage"].as_str().map_or_else(|| i.to_string(), str::to_owned);
        for (action, n) in st["actions"].as_object().into_iter().flatten() {
            if let Some(n) = n.as_u64() {
                s.counter(
                    "xdp_actions",
                    "Packets an XDP program returned, by action.",
                    &[("stage", &stage), ("action", action)],
                    n,
                );
            }
        }
    }
}

/// Gauges of the vSwitch `show` document; every other number is a counter.
const VSWITCH_GAUGES: [(&str, &str); 6] = [
    ("generation", "Policy generation in force."),
    ("shards", "Flow-table shards (one per worker)."),
    ("flows", "Cached flows (GFT entries)."),
    ("capacity", "Flow-table capacity."),
    ("actions", "Compiled action lists."),
    ("exceptions_queued", "Exception packets waiting for the slow path."),
];

fn vswitch_metrics(s: &mut Snapshot, vs: &Value) {
    for (key, help) in VSWITCH_GAUGES {
        s.gauge(&format!("vswitch_{key}"), help, None, &[], f(&vs[key]));
    }
    s.gauge(
        "vswitch_table_memory",
        "Memory of the flow tables.",
        Some(Unit::Bytes),
        &[],
        f(&vs["memory_bytes"]),
    );
    for (key, v) in vs["fast"].as_object().into_iter().flatten() {
        if key == "denied_by" {
            for (reason, n) in v.as_object().into_iter().flatten() {
                s.counter(
                    "vswitch_denials",
                    "First packets of flows the policy denied, by reason.",
                    &[("reason", reason)],
                    u(n),
                );
            }
        } else if let Some(n) = v.as_u64() {
            let key = sanitize_name(key);
            s.counter(
                &format!("vswitch_{key}"),
                &format!("vSwitch fast path: {}.", key.replace('_', " ")),
                &[],
                n,
            );
        }
    }
    for (key, v) in vs["table"].as_object().into_iter().flatten() {
        let key = sanitize_name(key);
        s.counter(
            &format!("vswitch_table_{key}"),
            &format!("Flow table: {}.", key.replace('_', " ")),
            &[],
            u(v),
        );
    }
    for q in vs["queues"].as_array().into_iter().flatten() {
        let port = u(&q["port"]).to_string();
        let l: &[(&str, &str)] = &[("port", &port)];
        for key in ["enqueued", "marked", "dropped_full", "sent"] {
            s.counter(
                &format!("vswitch_queue_{key}_packets"),
                &format!("Egress queue: packets {}.", key.replace('_', " ")),
                l,
                u(&q[key]),
            );
        }
        s.bytes("vswitch_queue_sent", "Egress queue: bytes sent.", l, u(&q["sent_bytes"]));
        s.gauge(
            "vswitch_queue_max_depth_packets",
            "Egress queue: deepest it has been.",
            None,
            l,
            f(&q["max_depth"]),
        );
    }
}

/// The metrics of a `snic serve` counters document.
pub fn from_serve(doc: &Value) -> Snapshot {
    let mut s = Snapshot::default();
    for (key, help) in [
        ("clients", "Host clients connected."),
        ("queues", "DMA queues."),
        ("channels", "DMA channels."),
        ("workers", "DMA worker threads."),
        ("compute_workers", "Compute worker threads."),
    ] {
        s.gauge(&format!("serve_{key}"), help, None, &[], f(&doc[key]));
    }
    for (kind, m) in doc["device"].as_object().into_iter().flatten() {
        let l: &[(&str, &str)] = &[("kind", kind)];
        s.gauge("device_memory_size", "Device memory.", Some(Unit::Bytes), l, f(&m["size"]));
        s.gauge(
            "device_memory_used",
            "Device memory allocated.",
            Some(Unit::Bytes),
            l,
            f(&m["used"]),
        );
        s.gauge(
            "device_memory_largest_free",
            "Largest free block of device memory.",
            Some(Unit::Bytes),
            l,
            f(&m["largest_free"]),
        );
        s.gauge(
            "device_memory_allocations",
            "Device memory allocations.",
            None,
            l,
            f(&m["allocations"]),
        );
    }
    let e = &doc["engine"];
    for (key, help) in [
        ("descs", "DMA descriptors completed."),
        ("completions", "DMA completion entries written (errors included)."),
        ("doorbells", "DMA doorbells accepted."),
        ("doorbells_ignored", "DMA doorbells to a missing, idle or failed queue."),
        ("cmpt_full_stalls", "Times a DMA queue waited for room in its completion ring."),
        ("stream_rx", "Streaming packets delivered to C2H rings."),
        ("stream_tx", "Streaming packets sent from H2C rings."),
        ("channel_runs", "DMA channel chains completed."),
        ("flushed_silent", "Descriptors flushed without a completion entry."),
    ] {
        s.counter(&format!("dma_{key}"), help, &[], u(&e[key]));
    }
    s.bytes("dma_h2c", "Bytes moved host to card.", &[], u(&e["h2c_bytes"]));
    s.bytes("dma_c2h", "Bytes moved card to host.", &[], u(&e["c2h_bytes"]));
    for (status, n) in e["errors"].as_object().into_iter().flatten() {
        s.counter("dma_errors", "DMA error completions, by status.", &[("status", status)], u(n));
    }
    for (status, n) in e["channel_errors"].as_object().into_iter().flatten() {
        s.counter(
            "dma_channel_errors",
            "Failed DMA channel runs, by status.",
            &[("status", status)],
            u(n),
        );
    }
    for (reason, n) in e["stream_drops"].as_object().into_iter().flatten() {
        s.counter(
            "dma_stream_drops",
            "Streaming packets dropped, by reason.",
            &[("reason", reason)],
            u(n),
        );
    }
    let help = "DMA latency: doorbell (or channel run) to completion, as the worker saw it.";
    s.histogram("dma_completion_latency", help, &[("path", "queue")], &e["queue_latency"]);
    s.histogram("dma_completion_latency", help, &[("path", "channel")], &e["channel_latency"]);
    s.counter("kernels_run", "Lookaside kernel invocations.", &[], u(&doc["kernels_run"]));
    s.counter(
        "kernel_errors",
        "Lookaside kernel invocations that failed.",
        &[],
        u(&doc["kernel_errors"]),
    );
    for (name, k) in doc["kernels"].as_object().into_iter().flatten() {
        let l: &[(&str, &str)] = &[("kernel", name)];
        s.counter("kernel_runs", "Invocations of this kernel.", l, u(&k["runs"]));
        s.counter("kernel_run_errors", "Failed invocations of this kernel.", l, u(&k["errors"]));
        s.seconds("kernel_busy", "Time this kernel ran.", l, u(&k["busy_ns"]) as f64 / 1e9);
    }
    for (i, w) in doc["per_worker"].as_array().into_iter().flatten().enumerate() {
        let id = i.to_string();
        let role = w["role"].as_str().unwrap_or("");
        let l: &[(&str, &str)] = &[("worker", &id), ("role", role)];
        s.counter("worker_descs", "DMA descriptors this worker completed.", l, u(&w["descs"]));
        s.counter(
            "worker_kernels_run",
            "Kernel invocations this worker ran.",
            l,
            u(&w["kernels_run"]),
        );
        s.counter("worker_sleeps", "Times this worker slept for lack of work.", l, u(&w["sleeps"]));
        s.gauge("worker_queues", "DMA queues this worker serves.", None, l, f(&w["queues"]));
        s.gauge("worker_channels", "DMA channels this worker serves.", None, l, f(&w["channels"]));
    }
    for key in ["clients_reclaimed", "queues_reclaimed", "channels_reclaimed", "regions_reclaimed"]
    {
        s.counter(
            &format!("serve_{key}"),
            &format!("{} of clients that went away.", key.replace('_', " ")),
            &[],
            u(&doc[key]),
        );
    }
    s.bytes(
        "serve_device_freed",
        "Device memory freed from clients that went away.",
        &[],
        u(&doc["device_bytes_freed"]),
    );
    rdma(&mut s, &doc["rdma"]);
    let nic = &doc["nic"];
    if nic.is_object() {
        let pipeline = &nic["pipeline"];
        for p in doc_ports(doc) {
            port(&mut s, &p.id.to_string(), p.name, p.counters, p.device);
        }
        stages(&mut s, &pipeline["stages"]);
        for (key, v) in nic["nic"].as_object().into_iter().flatten() {
            if let Some(n) = v.as_u64() {
                let key = sanitize_name(key);
                s.counter(
                    &format!("nic_{key}"),
                    &format!("NIC: {}.", key.replace('_', " ")),
                    &[],
                    n,
                );
            }
        }
        for (key, v) in nic["neighbours"].as_object().into_iter().flatten() {
            if let Some(n) = v.as_u64() {
                let key = sanitize_name(key);
                s.counter(
                    &format!("nic_neighbour_{key}"),
                    &format!("Neighbours: {}.", key.replace('_', " ")),
                    &[],
                    n,
                );
            }
        }
    }
    s
}

/// RDMA gauges of the `rdma` object; every engine counter is `snic_rdma_<name>_total`.
fn rdma(s: &mut Snapshot, r: &Value) {
    s.gauge(
        "rdma_enabled",
        "1 when this server terminates RDMA.",
        None,
        &[],
        if r["enabled"] == true { 1.0 } else { 0.0 },
    );
    if r["enabled"] != true {
        return;
    }
    for (key, help) in [
        ("qps", "RDMA queue pairs."),
        ("mrs", "RDMA memory regions."),
        ("clients", "RDMA clients."),
    ] {
        s.gauge(&format!("rdma_{key}"), help, None, &[], f(&r[key]));
    }
    s.counter(
        "rdma_transport_errors",
        "RDMA transport (socket) errors.",
        &[],
        u(&r["transport_errors"]),
    );
    for key in ["qps_reclaimed", "mrs_reclaimed", "clients_reclaimed"] {
        s.counter(
            &format!("rdma_{key}"),
            &format!("RDMA {} of clients that went away.", key.replace('_', " ")),
            &[],
            u(&r[key]),
        );
    }
    for (key, v) in r["engine"].as_object().into_iter().flatten() {
        let Some(n) = v.as_u64() else { continue };
        let key = sanitize_name(key);
        if let Some(stem) = key.strip_suffix("_bytes") {
            s.bytes(
                &format!("rdma_{stem}"),
                &format!("RDMA engine: {} bytes.", stem.replace('_', " ")),
                &[],
                n,
            );
        } else {
            s.counter(
                &format!("rdma_{key}"),
                &format!("RDMA engine: {}.", key.replace('_', " ")),
                &[],
                n,
            );
        }
    }
    s.histogram(
        "rdma_message_latency",
        "RDMA send work request latency: fetch after the doorbell to successful completion.",
        &[],
        &r["message_latency"],
    );
}

/// The latest counters document (the control socket's snapshot), parsed; `{}` if it is not
/// JSON (never: the run writes it).
pub fn parse_latest(latest: &Mutex<String>) -> Value {
    let text = latest.lock().map_or_else(|p| p.into_inner().clone(), |s| s.clone());
    serde_json::from_str(&text).unwrap_or_else(|_| Value::Object(serde_json::Map::new()))
}

/// The `/metrics` text of a `snic run`: its latest counters document and, with a vSwitch, the
/// vSwitch's `show` document taken now.
pub fn run_renderer(
    latest: Arc<Mutex<String>>,
    vs: Option<snic_vswitch::engine::VSwitch>,
) -> impl Fn() -> String + Send + 'static {
    move || {
        let doc = parse_latest(&latest);
        let show = vs.as_ref().map(crate::vswitch::show_json);
        from_run(&doc, show.as_ref()).encode()
    }
}

/// The HTTP server of `/metrics`: a thread answering each connection with `render()`.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Bind `addr` (port 0: any free port; [`Self::local_addr`] says which) and answer
    /// `GET /metrics` with `render()`'s text.
    pub fn spawn<F>(addr: &str, render: F) -> Result<Self>
    where
        F: Fn() -> String + Send + 'static,
    {
        let listener =
            TcpListener::bind(addr).with_context(|| format!("cannot bind --metrics {addr}"))?;
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("snic-metrics".into()).spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        if let Err(e) = answer(conn, &render) {
                            tracing::debug!("metrics client: {e}");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::warn!("metrics accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
        Ok(MetricsServer { addr: local, stop, thread: Some(thread) })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics` (`head`: `HEAD`, no body).
    Metrics {
        /// A `HEAD` request.
        head: bool,
    },
    /// `GET /`.
    Index,
    /// Another path.
    NotFound,
    /// Another method.
    BadMethod,
    /// Not an HTTP request line.
    Bad,
}

/// Route a request head (its first line; a query string is ignored).
pub fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else { return Route::Bad };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Route::Bad;
    }
    let path = target.split('?').next().unwrap_or(target);
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::BadMethod,
    };
    match path {
        "/metrics" => Route::Metrics { head },
        "/" => Route::Index,
        _ => Route::NotFound,
    }
}

/// Read one request head and answer it; the connection is closed after.
fn answer(mut conn: TcpStream, render: &dyn Fn() -> String) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    conn.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() > MAX_REQUEST || std::time::Instant::now() > deadline {
            reply(&mut conn, "431 Request Header Fields Too Large", "text/plain", b"", false)?;
            // Read (a bounded amount of) what the client still sends before closing, so the
            // close does not reset the connection before it reads the answer.
            conn.shutdown(std::net::Shutdown::Write)?;
            conn.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut left = 16 * MAX_REQUEST;
            while left > 0 {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
            return Ok(());
        }
        match conn.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    match route(&head) {
        Route::Metrics { head } => {
            let body = render();
            reply(&mut conn, "200 OK", CONTENT_TYPE, body.as_bytes(), head)
        }
        Route::Index => reply(
            &mut conn,
            "200 OK",
            "text/plain; charset=utf-8",
            b"snic: the metrics are at /metrics\n",
            false,
        ),
        Route::NotFound => reply(&mut conn, "404 Not Found", "text/plain", b"not found\n", false),
        Route::BadMethod => {
            reply(&mut conn, "405 Method Not Allowed", "text/plain", b"GET only\n", false)
        }
        Route::Bad => reply(&mut conn, "400 Bad Request", "text/plain", b"bad request\n", false),
    }
}

fn reply(
    conn: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let mut h = String::new();
    let _ = write!(
        h,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(h.as_bytes())?;
    if !head_only {
        conn.write_all(body)?;
    }
    conn.flush()
}

/// Fetch `http://ADDR/metrics` and return the body (the unit tests' client).
#[cfg(test)]
fn scrape(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: snic\r\nConnection: close\r\n\r\n")?;
    let mut all = String::new();
    s.read_to_string(&mut all)?;
    let (head, body) = all.split_once("\r\n\r\n").context("no end of HTTP head")?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "scrape answered {head:?}");
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_values_are_escaped_and_names_sanitized() {
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label_value("x\ny"), "x\\ny");
        assert_eq!(escape_label_value("pcap:in.pcap,out"), "pcap:in.pcap,out");
        assert_eq!(sanitize_name("malformed.truncated-x"), "malformed_truncated_x");
        let mut s = Snapshot::default();
        s.counter("port_rx_packets", "h", &[("port", "0"), ("name", "we\"ird\\\nname")], 3);
        let text = s.encode();
        assert!(
            text.contains(
                "snic_port_rx_packets_total{port=\"0\",name=\"we\\\"ird\\\\\\nname\"} 3\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn names_carry_units_totals_help_and_type() {
        let mut s = Snapshot::default();
        s.counter(
            "port_rx_packets",
            "Packets received.",
            &[("port", "0"), ("kind", "afpacket")],
            7,
        );
        s.bytes("port_rx", "Bytes received.", &[("port", "0")], 700);
        s.gauge("workers", "Worker threads.", None, &[], 2.0);
        let mut h = snic_dma::LatencyHist::default();
        h.observe_ns(300);
        h.observe_ns(2_000_000);
        let hdoc = json!({"count": h.count(), "sum_ns": h.sum_ns(),
            "le_ns": snic_dma::latency::BOUNDS_NS, "counts": h.counts()});
        s.histogram("dma_completion_latency", "DMA latency.", &[("path", "queue")], &hdoc);
        let text = s.encode();
        for want in [
            "# HELP snic_port_rx_packets Packets received.\n",
            "# TYPE snic_port_rx_packets counter\n",
            "snic_port_rx_packets_total{port=\"0\",kind=\"afpacket\"} 7\n",
            "# TYPE snic_port_rx_bytes counter\n",
            "# UNIT snic_port_rx_bytes bytes\n",
            "snic_port_rx_bytes_total{port=\"0\"} 700\n",
            "# TYPE snic_workers gauge\n",
            "snic_workers 2",
            "# TYPE snic_dma_completion_latency_seconds histogram\n",
            "snic_dma_completion_latency_seconds_count{path=\"queue\"} 2\n",
            "snic_dma_completion_latency_seconds_bucket{le=\"2.5e-7\",path=\"queue\"} 0\n",
            "snic_dma_completion_latency_seconds_bucket{le=\"5e-7\",path=\"queue\"} 1\n",
            "snic_dma_completion_latency_seconds_bucket{le=\"+Inf\",path=\"queue\"} 2\n",
            "# EOF\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn a_run_document_gives_every_drop_reason_and_the_device_counters() {
        let doc = json!({
            "workers": 1, "elapsed_secs": 1.5,
            "ports": [{"id": 0, "name": "gen:10", "rx_packets": 10, "rx_bytes": 640,
                       "tx_packets": 0, "tx_bytes": 0, "rx_drops": {}, "tx_drops": {"no_egress": 2},
                       "device": {"rx_packets": 10, "rx_kernel_drops": 4}}],
            "stages": [{"name": "parse", "packets_in": 10, "packets_out": 9, "bytes_in": 640,
                        "drops": {"malformed.truncated": 1}, "errors": 0},
                       {"name": "parse", "packets_in": 9, "packets_out": 9, "bytes_in": 600,
                        "drops": {}, "errors": 0}],
            "drops_total": 7, "created": 0, "classes": {"rdma": 1}, "classified": {"other": 3},
            "per_worker": [{"rx_packets": 6, "rx_bytes": 384, "tx_packets": 5, "tx_bytes": 320,
                        "rx_kernel_drops": 3, "rx_ring_full": 1, "rx_fill_empty": 5,
                        "tx_dropped": 0},
                       {"rx_packets": 4, "rx_bytes": 256, "tx_packets": 4, "tx_bytes": 256,
                        "rx_kernel_drops": 0, "rx_ring_full": 0, "rx_fill_empty": 0,
                        "tx_dropped": 2, "rx_errors": 9, "tx_ring_full": 3}],
        });
        let text = from_run(&doc, None).encode();
        for want in [
            "snic_worker_rx_packets_total{worker=\"0\"} 6\n",
            "snic_worker_rx_packets_total{worker=\"1\"} 4\n",
            "snic_worker_tx_bytes_total{worker=\"0\"} 320\n",
            "snic_worker_rx_kernel_drops_total{worker=\"0\"} 3\n",
            "snic_worker_rx_ring_full_total{worker=\"0\"} 1\n",
            "snic_worker_rx_fill_empty_total{worker=\"0\"} 5\n",
            "snic_worker_rx_errors_total{worker=\"1\"} 9\n",
            "snic_worker_tx_ring_full_total{worker=\"1\"} 3\n",
            "snic_worker_tx_dropped_total{worker=\"1\"} 2\n",
            "snic_port_rx_packets_total{port=\"0\",kind=\"gen\",name=\"gen:10\"} 10\n",
            "snic_port_tx_drops_total{port=\"0\",kind=\"gen\",name=\"gen:10\",reason=\"no_egress\"} 2\n",
            "snic_port_tx_drops_total{port=\"0\",kind=\"gen\",name=\"gen:10\",reason=\"tx_queue_full\"} 0\n",
            "snic_port_rx_kernel_drops_total{port=\"0\",kind=\"gen\",name=\"gen:10\"} 4\n",
            "snic_stage_drops_total{stage=\"parse\",reason=\"malformed.truncated\"} 1\n",
            "snic_stage_in_packets_total{stage=\"parse#2\"} 9\n",
            "snic_drops_total 7\n",
            "snic_forwarded_packets_total{class=\"rdma\"} 1\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn requests_are_routed() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics { head: false }
        );
        assert_eq!(route(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics { head: true });
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::Index);
        assert_eq!(route(b"GET /other HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route(b"GET /metrics\r\n\r\n"), Route::Bad);
        assert_eq!(route(b"\xff\xfe"), Route::Bad);
        assert_eq!(route(b""), Route::Bad);
    }

    #[test]
    fn the_server_answers_metrics_and_refuses_the_rest() {
        let server = MetricsServer::spawn("127.0.0.1:0", || "snic_x 1\n".into()).unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        assert_eq!(scrape(addr).unwrap(), "snic_x 1\n");
        let get = |req: &[u8]| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(req).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        assert!(get(b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(b"DELETE /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        let big = vec![b'a'; MAX_REQUEST * 2];
        assert!(get(&big).starts_with("HTTP/1.1 431"));
        let head = get(b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(head.contains(CONTENT_TYPE));
    }

    proptest::proptest! {
        /// Whatever bytes a client sends as a request head, routing gives an answer.
        #[test]
        fn route_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = route(&bytes);
        }

        /// An escaped label value has no raw newline and no unescaped quote.
        #[test]
        fn escaped_values_stay_inside_their_quotes(s in "\\PC{0,40}") {
            let e = escape_label_value(&s);
            proptest::prop_assert!(!e.contains('\n'));
            let mut chars = e.chars();
            while let Some(c) = chars.next() {
                if c == '\\' { proptest::prop_assert!(chars.next().is_some()); }
                else { proptest::prop_assert!(c != '"'); }
            }
        }
    }
}
