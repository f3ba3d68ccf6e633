//! `snic ebpf`: eBPF programs (XDP on the packet path, `snic/core` on the NIC core).
//!
//! - `verify FILE` loads an object and verifies its programs here, with no running snic:
//!   programs, maps, instruction counts and verification time, or the refusal with the
//!   instruction index and the abstract register state before it.
//! - `list`, `load`, `map dump|update|delete`, `events` and `trace` talk to a running `snic run` or
//!   `snic serve --port` over its control socket (`--control PATH`); the server side is
//!   [`serve`], which the control socket's handler calls with the run's `xdp:` stages.
//!
//! Keys and values on the command line take the forms of [`snic_ebpf::maps::parse_bytes`]:
//! a decimal number stored in host order over the key or value size (`42`, as an array index
//! or a counter is stored), `0x`-prefixed hex digits as bytes in the order written
//! (`0x0a000001`), space-separated hex bytes (`0a 00 00 01`, what dumps print), a dotted IPv4
//! address, or an LPM trie key (`10.0.0.0/8`). Dumps print bytes in hex and, for sizes of 1,
//! 2, 4 and 8 bytes, the host-order number too.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::control::Request;

/// Arguments of `snic ebpf`.
#[derive(Debug, clap::Args)]
pub struct EbpfArgs {
    #[command(subcommand)]
    cmd: EbpfCmd,
}

/// The map operations of `snic ebpf map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MapOp {
    /// Every entry (per-CPU maps: one value per worker).
    Dump,
    /// Set KEY to VALUE.
    Update,
    /// Remove KEY.
    Delete,
}

/// `--flags` of `snic ebpf map update`, as `bpf_map_update_elem`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum UpdateFlags {
    /// BPF_ANY: create or replace.
    Any,
    /// BPF_NOEXIST: create only.
    Noexist,
    /// BPF_EXIST: replace only.
    Exist,
}

impl UpdateFlags {
    fn bits(self) -> u64 {
        match self {
            UpdateFlags::Any => 0,
            UpdateFlags::Noexist => 1,
            UpdateFlags::Exist => 2,
        }
    }
}

#[derive(Debug, clap::Subcommand)]
enum EbpfCmd {
    /// Load and verify an object's programs (no running snic needed).
    Verify {
        /// The object (`clang -O2 -g -target bpf -c prog.c -o prog.o`).
        file: PathBuf,
        /// Only the program in this ELF section.
        #[arg(long)]
        section: Option<String>,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Replace the program of a running `xdp:` stage between batches (hot swap). The new
    /// program is verified first: one that fails changes nothing. Maps with the same name,
    /// type and sizes keep their contents; the others start empty.
    Load {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// Which `xdp:` stage (0 = the first).
        #[arg(long, default_value_t = 0)]
        stage: usize,
        /// The object.
        file: PathBuf,
        /// The program's ELF section.
        #[arg(long)]
        section: Option<String>,
        /// Load a NIC-core (`SEC("snic/core")`) program into this slot of a `snic serve`
        /// instead; host programs run it as kernel `ebpf` (id 9) with `s0` = the slot.
        #[arg(long, value_name = "SLOT")]
        core: Option<usize>,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read and change the maps of a running `xdp:` stage.
    Map {
        /// dump, update or delete.
        #[arg(value_enum)]
        op: MapOp,
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// Which `xdp:` stage (0 = the first).
        #[arg(long, default_value_t = 0)]
        stage: usize,
        /// The map's name.
        map: String,
        /// The key (update, delete).
        key: Option<String>,
        /// The value (update).
        value: Option<String>,
        /// Update flags.
        #[arg(long, value_enum, default_value = "any")]
        flags: UpdateFlags,
        /// Most entries a dump prints.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stream the records programs write to their ring buffers, one line each.
    Events {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// Which `xdp:` stage (0 = the first).
        #[arg(long, default_value_t = 0)]
        stage: usize,
        /// Stop after this many records.
        #[arg(long)]
        count: Option<usize>,
        /// Stop after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        /// One JSON object per record.
        #[arg(long)]
        json: bool,
    },
    /// List the `xdp:` stages of a running snic: programs, engines, swaps, maps.
    List {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the `bpf_trace_printk` lines of a running `xdp:` stage.
    Trace {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// Which `xdp:` stage (0 = the first).
        #[arg(long, default_value_t = 0)]
        stage: usize,
    },
}

/// How often `snic ebpf events` asks the run for new records.
const EVENTS_POLL: Duration = Duration::from_millis(50);
/// Most records one `ebpf.events` exchange returns.
pub const MAX_EVENTS: usize = 4096;

/// Entry point of `snic ebpf`.
pub fn run(args: EbpfArgs) -> Result<()> {
    match args.cmd {
        EbpfCmd::Verify { file, section, json } => {
            let (doc, ok) = verify_file(&file, section.as_deref())?;
            if json {
                println!("{doc}");
            } else {
                print!("{}", verify_text(&doc));
            }
            if !ok {
                bail!("{}: verification refused", file.display());
            }
            Ok(())
        }
        EbpfCmd::Load { control, stage, file, section, core, json } => {
            let path = std::fs::canonicalize(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let path = path.to_str().context("the object's path is not UTF-8")?.to_owned();
            let req = Request::EbpfLoad { stage, path, section, core };
            let v = crate::control::request(&control, &req)?;
            if json {
                println!("{v}");
            } else if core.is_some() {
                println!(
                    "core slot {}: loaded {} ({} insns, verified in {:.0} us)",
                    v["core"],
                    v["program"].as_str().unwrap_or_default(),
                    v["insns"],
                    v["verify_us"].as_f64().unwrap_or(0.0)
                );
            } else {
                print!("{}", load_text(&v));
            }
            Ok(())
        }
        EbpfCmd::Map { op, control, stage, map, key, value, flags, limit, json } => {
            let (op_name, need_key, need_value) = match op {
                MapOp::Dump => ("dump", false, false),
                MapOp::Update => ("update", true, true),
                MapOp::Delete => ("delete", true, false),
            };
            if need_key && key.is_none() {
                bail!("map {op_name} needs a KEY");
            }
            if need_value && value.is_none() {
                bail!("map {op_name} needs a VALUE");
            }
            if !need_key && key.is_some() || !need_value && value.is_some() {
                bail!("map {op_name} takes {}", if need_key { "KEY only" } else { "no KEY" });
            }
            let req = Request::EbpfMap {
                stage,
                map,
                op: op_name.into(),
                key,
                value,
                flags: flags.bits(),
                limit,
            };
            let v = crate::control::request(&control, &req)?;
            if json {
                println!("{v}");
            } else if op == MapOp::Dump {
                print!("{}", dump_text(&v));
            } else {
                println!("ok");
            }
            Ok(())
        }
        EbpfCmd::Events { control, stage, count, timeout, json } => {
            events(&control, stage, count, timeout.map(Duration::from_secs_f64), json)
        }
        EbpfCmd::List { control, json } => {
            let v = crate::control::request(&control, &Request::EbpfList)?;
            if json {
                println!("{v}");
                return Ok(());
            }
            for (n, st) in v["stages"].as_array().into_iter().flatten().enumerate() {
                println!(
                    "stage {n} ({}): {} from {} ({} insns, {}, {} swaps)",
                    st["name"].as_str().unwrap_or_default(),
                    st["program"].as_str().unwrap_or_default(),
                    st["path"].as_str().unwrap_or_default(),
                    st["insns"],
                    st["engine"].as_str().unwrap_or_default(),
                    st["swaps"]
                );
                for m in st["maps"].as_array().into_iter().flatten() {
                    println!(
                        "  map {} {} key {} value {} max_entries {} ({} entries)",
                        m["name"].as_str().unwrap_or_default(),
                        m["type"].as_str().unwrap_or_default(),
                        m["key_size"],
                        m["value_size"],
                        m["max_entries"],
                        m["entries"]
                    );
                }
            }
            Ok(())
        }
        EbpfCmd::Trace { control, stage } => {
            let v = crate::control::request(&control, &Request::EbpfTrace { stage })?;
            for l in v["lines"].as_array().into_iter().flatten() {
                println!("{}", l.as_str().unwrap_or_default());
            }
            Ok(())
        }
    }
}

fn events(
    control: &Path,
    stage: usize,
    count: Option<usize>,
    timeout: Option<Duration>,
    json: bool,
) -> Result<()> {
    use std::io::Write;
    let end = timeout.map(|t| Instant::now() + t);
    let mut seen = 0usize;
    let stdout = std::io::stdout();
    loop {
        let max = count.map_or(MAX_EVENTS, |c| (c - seen).min(MAX_EVENTS));
        let v = crate::control::request(control, &Request::EbpfEvents { stage, max })?;
        let mut out = stdout.lock();
        for r in v["records"].as_array().into_iter().flatten() {
            let hex = r["data"].as_str().unwrap_or_default();
            if json {
                writeln!(out, "{}", json!({"map": r["map"], "data": hex}))?;
            } else {
                writeln!(out, "{} {hex}", r["map"].as_str().unwrap_or_default())?;
            }
            seen += 1;
        }
        out.flush()?;
        if count.is_some_and(|c| seen >= c) || end.is_some_and(|e| Instant::now() >= e) {
            return Ok(());
        }
        std::thread::sleep(EVENTS_POLL);
    }
}

/// Verify `file` (only the program in `section` when given): the document `--json` prints,
/// and whether every program checked was accepted.
pub fn verify_file(file: &Path, section: Option<&str>) -> Result<(Value, bool)> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let name = file.display().to_string();
    let obj =
        snic_ebpf::Object::parse(&bytes, &name).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let programs: Vec<&snic_ebpf::Program> = match section {
        Some(s) => vec![obj.program(Some(s), None).map_err(|e| anyhow::anyhow!("{name}: {e}"))?],
        None => obj.programs.iter().collect(),
    };
    let maps: Vec<Value> = obj
        .maps
        .iter()
        .map(|m| {
            json!({"name": m.name, "type": m.kind.name(), "key_size": m.key_size,
                   "value_size": m.value_size, "max_entries": m.max_entries})
        })
        .collect();
    let mut all_ok = true;
    let progs: Vec<Value> = programs
        .iter()
        .map(|p| {
            let kind = match p.kind {
                snic_ebpf::ProgKind::Xdp => "xdp",
                snic_ebpf::ProgKind::NicCore => "snic/core",
                snic_ebpf::ProgKind::Other => "other",
            };
            let maps: Vec<&str> =
                p.maps.iter().filter_map(|&i| obj.maps.get(i)).map(|m| m.name.as_str()).collect();
            let mut v = json!({"section": p.section, "name": p.name, "kind": kind,
                               "insns": p.insns.len(), "maps": maps});
            match snic_ebpf::verify(p) {
                Ok(verdict) => {
                    v["ok"] = json!(true);
                    v["verify_us"] = json!(verdict.took.as_secs_f64() * 1e6);
                    v["max_loop_count"] = json!(verdict.max_loop_count);
                }
                Err(r) => {
                    all_ok = false;
                    v["ok"] = json!(false);
                    v["insn"] = json!(r.insn);
                    v["message"] = json!(r.message);
                    v["state"] = json!(r.state);
                }
            }
            v
        })
        .collect();
    let doc = json!({"file": name, "license": obj.license, "maps": maps, "programs": progs,
                     "ok": all_ok});
    Ok((doc, all_ok))
}

/// The text `snic ebpf verify` prints for a [`verify_file`] document.
pub fn verify_text(doc: &Value) -> String {
    let mut s = String::new();
    let list = |k: &str| doc[k].as_array().cloned().unwrap_or_default();
    let (maps, progs) = (list("maps"), list("programs"));
    s.push_str(&format!(
        "{}: {} program(s), {} map(s), license {}\n",
        doc["file"].as_str().unwrap_or_default(),
        progs.len(),
        maps.len(),
        doc["license"].as_str().unwrap_or("none")
    ));
    for m in &maps {
        s.push_str(&format!(
            "  map {} {} key {} value {} max_entries {}\n",
            m["name"].as_str().unwrap_or_default(),
            m["type"].as_str().unwrap_or_default(),
            m["key_size"],
            m["value_size"],
            m["max_entries"]
        ));
    }
    for p in &progs {
        let head = format!(
            "  program {}/{} ({}, {} insns)",
            p["section"].as_str().unwrap_or_default(),
            p["name"].as_str().unwrap_or_default(),
            p["kind"].as_str().unwrap_or_default(),
            p["insns"]
        );
        if p["ok"] == true {
            let loops = match p["max_loop_count"].as_i64() {
                Some(n) if n > 0 => format!(", loops bounded by {n}"),
                _ => String::new(),
            };
            s.push_str(&format!(
                "{head}: verified in {:.0} us{loops}\n",
                p["verify_us"].as_f64().unwrap_or(0.0)
            ));
        } else {
            let at = match p["insn"].as_u64() {
                Some(i) => format!("instruction {i}: "),
                None => String::new(),
            };
            s.push_str(&format!(
                "{head}: REFUSED at {at}{}\n",
                p["message"].as_str().unwrap_or_default()
            ));
            let state = p["state"].as_array().cloned().unwrap_or_default();
            if !state.is_empty() {
                s.push_str("    state before it:\n");
                for l in state {
                    s.push_str(&format!("      {}\n", l.as_str().unwrap_or_default()));
                }
            }
        }
    }
    s
}

fn load_text(v: &Value) -> String {
    let pickup = match v["pickup_us"].as_f64() {
        Some(us) => format!("every worker runs it after {us:.0} us"),
        None => "idle workers take it with their next packets".into(),
    };
    let mut s = format!(
        "stage {}: loaded {} ({} insns; verified in {:.0} us, loaded in {:.0} us; {pickup})\n",
        v["stage"],
        v["program"].as_str().unwrap_or_default(),
        v["insns"],
        v["verify_us"].as_f64().unwrap_or(0.0),
        v["load_us"].as_f64().unwrap_or(0.0),
    );
    for m in v["maps"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  map {}: {}\n",
            m["name"].as_str().unwrap_or_default(),
            if m["kept"] == true { "kept" } else { "created" }
        ));
    }
    s
}

fn dump_text(v: &Value) -> String {
    let mut s = String::new();
    for e in v["entries"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> =
            e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        match values.as_slice() {
            [one] => s.push_str(&format!("{key}: {one}\n")),
            many => {
                let per: Vec<String> =
                    many.iter().enumerate().map(|(w, v)| format!("worker {w}: {v}")).collect();
                s.push_str(&format!("{key}: {}\n", per.join(", ")));
            }
        }
    }
    s.push_str(&format!("{} entr{}\n", v["count"], if v["count"] == 1 { "y" } else { "ies" }));
    if v["truncated"] == true {
        s.push_str(&format!("(of {}: --limit for more)\n", v["total"]));
    }
    s
}

fn error(msg: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": msg.to_string()})
}

/// What `ebpf.*` requests reach: the `xdp:` stages of a run or a NIC, in stage order, and a
/// device's NIC-core programs (with its number of compute workers).
#[derive(Debug, Clone, Default)]
pub struct Targets {
    /// The `xdp:` stages.
    pub xdp: Vec<snic_io::ebpf::XdpControl>,
    /// The device's NIC-core programs and its compute workers (`snic serve` only).
    pub core: Option<(snic_device::ebpf::CorePrograms, usize)>,
}

/// Answer one `ebpf.*` request.
pub fn serve(targets: &Targets, req: Request) -> Value {
    let stages = targets.xdp.as_slice();
    let pick = |n: usize| {
        stages.get(n).ok_or_else(|| match stages.len() {
            0 => "this run has no xdp stage".to_string(),
            k => format!("no xdp stage {n} (the run has {k})"),
        })
    };
    match req {
        Request::EbpfList => {
            let list: Vec<Value> = stages.iter().map(stage_json).collect();
            json!({"ok": true, "stages": list})
        }
        Request::EbpfLoad { core: Some(slot), path, section, .. } => {
            let Some((core, workers)) = &targets.core else {
                return error("only snic serve runs NIC-core programs");
            };
            match core.load_file(slot, Path::new(&path), section.as_deref(), *workers) {
                Ok(e) => json!({"ok": true, "core": slot, "program": e.name, "insns": e.insns,
                                "verify_us": e.program.verify_time().as_secs_f64() * 1e6}),
                Err(e) => error(e),
            }
        }
        Request::EbpfLoad { stage, path, section, core: None } => {
            let ctl = match pick(stage) {
                Ok(c) => c,
                Err(e) => return error(e),
            };
            match ctl.load(Path::new(&path), section.as_deref()) {
                Ok(r) => {
                    let pickup = ctl.wait_picked_up(r.generation, snic_io::ebpf::PICKUP_WAIT);
                    let maps: Vec<Value> = r
                        .maps
                        .iter()
                        .map(|(name, kept)| json!({"name": name, "kept": kept}))
                        .collect();
                    json!({"ok": true, "stage": stage, "program": r.program, "insns": r.insns,
                           "verify_us": r.verify.as_secs_f64() * 1e6,
                           "load_us": r.load.as_secs_f64() * 1e6,
                           "pickup_us": pickup.map(|d| d.as_secs_f64() * 1e6),
                           "maps": maps})
                }
                Err(e) => error(format!(
                    "{e}\nnothing changed: stage {stage} still runs {}",
                    ctl.info().program
                )),
            }
        }
        Request::EbpfMap { stage, map, op, key, value, flags, limit } => match pick(stage) {
            Ok(_) if limit > crate::control::MAX_DUMP_LIMIT => error(format!(
                "limit {limit} is over the most one dump returns ({})",
                crate::control::MAX_DUMP_LIMIT
            )),
            Ok(ctl) => map_op(ctl, &map, &op, key.as_deref(), value.as_deref(), flags, limit),
            Err(e) => error(e),
        },
        Request::EbpfEvents { stage, max } => {
            let ctl = match pick(stage) {
                Ok(c) => c,
                Err(e) => return error(e),
            };
            let mut records = Vec::new();
            let max = max.min(MAX_EVENTS);
            for m in ctl.maps().iter().filter(|m| m.kind() == snic_ebpf::MapKind::RingBuf) {
                if records.len() >= max {
                    break;
                }
                for r in m.ringbuf_drain(max - records.len()) {
                    records.push(json!({"map": m.name(), "data": hex(&r)}));
                }
            }
            json!({"ok": true, "records": records})
        }
        Request::EbpfTrace { stage } => match pick(stage) {
            Ok(ctl) => json!({"ok": true, "lines": ctl.take_trace()}),
            Err(e) => error(e),
        },
        _ => error("not an ebpf request"),
    }
}

fn stage_json(ctl: &snic_io::ebpf::XdpControl) -> Value {
    let info = ctl.info();
    let maps: Vec<Value> = ctl
        .maps()
        .iter()
        .map(|m| {
            let s = m.spec();
            json!({"name": s.name, "type": s.kind.name(), "key_size": s.key_size,
                   "value_size": s.value_size, "max_entries": s.max_entries, "entries": m.len()})
        })
        .collect();
    json!({"name": ctl.name(), "path": info.path, "program": info.program, "insns": info.insns,
           "engine": info.engine, "swaps": info.swaps, "maps": maps})
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes as dumps print them: hex bytes, and the host-order number for sizes 1, 2, 4 and 8.
fn show(b: &[u8]) -> String {
    let text = snic_ebpf::maps::format_hex(b);
    match b.len() {
        1 | 2 | 4 | 8 => {
            let mut n = [0u8; 8];
            n[..b.len()].copy_from_slice(b);
            format!("{text} ({})", u64::from_ne_bytes(n))
        }
        _ => text,
    }
}

fn map_op(
    ctl: &snic_io::ebpf::XdpControl,
    name: &str,
    op: &str,
    key: Option<&str>,
    value: Option<&str>,
    flags: u64,
    limit: usize,
) -> Value {
    let maps = ctl.maps();
    let Some(m) = maps.by_name(name) else {
        let names: Vec<&str> = maps.iter().map(|m| m.name()).collect();
        return error(format!("no map {name:?} (the program has: {})", names.join(", ")));
    };
    let spec = m.spec();
    let per_cpu =
        matches!(spec.kind, snic_ebpf::MapKind::PerCpuArray | snic_ebpf::MapKind::PerCpuHash);
    let parse = |what: &str, text: Option<&str>, size: u32| {
        let t = text.ok_or_else(|| format!("{op} needs a {what}"))?;
        snic_ebpf::maps::parse_bytes(t, size as usize).map_err(|e| format!("{what} {t:?}: {e}"))
    };
    match op {
        "dump" => {
            let stride = (spec.value_size as usize).div_ceil(8) * 8;
            let vs = spec.value_size as usize;
            let entries: Vec<Value> = m
                .entries_up_to(limit)
                .into_iter()
                .map(|(k, v)| {
                    let values: Vec<String> = if per_cpu && stride > 0 {
                        v.chunks(stride).map(|c| show(&c[..vs.min(c.len())])).collect()
                    } else {
                        vec![show(&v)]
                    };
                    json!({"key": show(&k), "values": values})
                })
                .collect();
            let truncated = entries.len() == limit && m.len() > limit;
            json!({"ok": true, "map": name, "count": entries.len(), "total": m.len(),
                   "truncated": truncated, "entries": entries})
        }
        "update" => {
            let k = match parse("KEY", key, spec.key_size) {
                Ok(k) => k,
                Err(e) => return error(e),
            };
            let v = match parse("VALUE", value, spec.value_size) {
                Ok(v) => v,
                Err(e) => return error(e),
            };
            match m.set(&k, &v, flags) {
                Ok(()) => json!({"ok": true}),
                Err(e) => error(format!("update {name}: {e}")),
            }
        }
        "delete" => {
            let k = match parse("KEY", key, spec.key_size) {
                Ok(k) => k,
                Err(e) => return error(e),
            };
            match m.remove(&k) {
                Ok(()) => json!({"ok": true}),
                Err(e) => error(format!("delete {name}: {e}")),
            }
        }
        other => error(format!("unknown map operation {other:?} (dump, update, delete)")),
    }
}

/// The action counters of every `xdp:` stage, by stage name: `{"xdp": {"program": ..,
/// "swaps": n, "aborted": n, "drop": n, "pass": n, "tx": n, "redirect": n}}`.
pub fn actions_json(stages: &[snic_io::ebpf::XdpControl]) -> Value {
    let mut all = serde_json::Map::new();
    for ctl in stages {
        let info = ctl.info();
        let mut v = json!({"program": info.program, "swaps": info.swaps});
        for (name, n) in snic_io::ebpf::ACTIONS.iter().zip(ctl.actions()) {
            v[*name] = json!(n);
        }
        all.insert(ctl.name().to_owned(), v);
    }
    Value::Object(all)
}

/// One line per `xdp:` stage for the text report: `xdp xdp/count: pass 10, drop 2, ...`.
pub fn actions_text(stages: &[snic_io::ebpf::XdpControl]) -> String {
    let mut s = String::new();
    for ctl in stages {
        let parts: Vec<String> = snic_io::ebpf::ACTIONS
            .iter()
            .zip(ctl.actions())
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        s.push_str(&format!(
            "{} {} (swaps {}): {}\n",
            ctl.name(),
            ctl.info().program,
            ctl.info().swaps,
            parts.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const PER_CPU: &str = "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __type(key, __u32); __type(value, __u32); __uint(max_entries, 2); } pc SEC(\".maps\");
SEC(\"xdp\") int bump(struct xdp_md *ctx) {
  __u32 k = 0; __u32 *v = bpf_map_lookup_elem(&pc, &k);
  if (v) *v += 1;
  return XDP_PASS;
}
char LICENSE[] SEC(\"license\") = \"GPL\";\n";

    /// Per-CPU maps dump one value per worker; updates, deletes and bad keys answer as the
    /// kernel's syscall would.
    #[test]
    fn per_cpu_dumps_show_every_worker_and_errors_are_answers() {
        if !snic_ebpf::testing::require_clang("per_cpu_dumps_show_every_worker") {
            return;
        }
        let obj = snic_ebpf::testing::compile_str("percpu", PER_CPU, &[]);
        let dir = std::env::temp_dir().join(format!("snic-ebpf-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("percpu.o");
        std::fs::write(&path, obj).unwrap();
        let ctl = snic_io::ebpf::XdpControl::open("xdp", &path, None, 3, Some(false)).unwrap();
        let targets = Targets { xdp: vec![ctl], core: None };
        let map = |op: &str, key: Option<&str>, value: Option<&str>| {
            serve(
                &targets,
                Request::EbpfMap {
                    stage: 0,
                    map: "pc".into(),
                    op: op.into(),
                    key: key.map(Into::into),
                    value: value.map(Into::into),
                    flags: 0,
                    limit: 1000,
                },
            )
        };
        assert_eq!(map("update", Some("1"), Some("5"))["ok"], true);
        let v = map("dump", None, None);
        assert_eq!(v["count"], 2, "{v}");
        let values = v["entries"][1]["values"].as_array().unwrap();
        assert_eq!(values.len(), 3, "one value per worker: {v}");
        assert!(values.iter().all(|x| x == "05 00 00 00 (5)"), "{v}");
        let text = dump_text(&v);
        assert!(text.contains("01 00 00 00 (1): worker 0: 05 00 00 00 (5), worker 1:"), "{text}");
        // Wrong sizes and unknown maps or stages are error answers, never panics.
        let e = map("update", Some("1"), Some("0x0102030405"));
        assert_eq!(e["ok"], false, "{e}");
        let e = map("update", Some("7"), Some("1"));
        assert!(e["error"].as_str().unwrap().contains("E2BIG"), "{e}");
        let e = map("frob", None, None);
        assert!(e["error"].as_str().unwrap().contains("unknown map operation"), "{e}");
        let e = serve(&targets, Request::EbpfEvents { stage: 3, max: 1 });
        assert!(e["error"].as_str().unwrap().contains("no xdp stage 3"), "{e}");
        let e = serve(&Targets::default(), Request::EbpfTrace { stage: 0 });
        assert!(e["error"].as_str().unwrap().contains("no xdp stage"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
