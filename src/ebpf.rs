//! `snic ebpf`: eBPF programs (XDP on the packet path, `snic/core` on the NIC core).
//!
//! - `verify FILE` loads an object and verifies its programs here, with no running snic:
//!   programs, maps, instruction counts and verification time, or the refusal with the
//!   instruction index and the abstract register state before it.
//! - `load`, `map dump|update|delete`, `events` and `trace` talk to a running `snic run` or
//!   `snic serve --port` over its control socket (`--control PATH`); the server side is
//!   [`serve`], which the control socket's handler calls with the run's `xdp:` stages.
//!
//! Keys and values on the command line are numbers (decimal, or hex with `0x`), stored
//! little-endian in the map's key or value size, as a C program reading a `__u32` sees them;
//! or raw bytes as `hex:` and exactly twice the size in hex digits (`hex:0a000001` for an
//! IPv4 address in network order). Dumps print raw bytes in hex and, for sizes of 1, 2, 4 and
//! 8 bytes, the little-endian number too.

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
        EbpfCmd::Load { control, stage, file, section, json } => {
            let path = std::fs::canonicalize(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let path = path.to_str().context("the object's path is not UTF-8")?.to_owned();
            let v = crate::control::request(&control, &Request::EbpfLoad { stage, path, section })?;
            if json {
                println!("{v}");
            } else {
                print!("{}", load_text(&v));
            }
            Ok(())
        }
        EbpfCmd::Map { op, control, stage, map, key, value, flags, json } => {
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
    let mut s = format!(
        "stage {}: loaded {} ({} insns, verified in {:.0} us, swapped in {:.0} us)\n",
        v["stage"],
        v["program"].as_str().unwrap_or_default(),
        v["insns"],
        v["verify_us"].as_f64().unwrap_or(0.0),
        v["swap_us"].as_f64().unwrap_or(0.0),
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
    s
}

/// Parse a key or value of `size` bytes as the CLI takes it: a number (decimal, or hex with
/// `0x`) stored little-endian, or `hex:` and exactly `2 * size` hex digits as raw bytes.
pub fn parse_bytes(text: &str, size: usize) -> Result<Vec<u8>, String> {
    let t = text.trim();
    let number = |digits: &str, radix: u32| {
        u128::from_str_radix(&digits.replace('_', ""), radix)
            .map_err(|_| format!("{t:?} is not a number"))
            .and_then(|n| {
                let bytes = n.to_le_bytes();
                let fits = size >= 16 || n >> (8 * size) == 0;
                if !fits {
                    return Err(format!("{t} does not fit in {size} byte(s)"));
                }
                let mut v = vec![0u8; size];
                let m = size.min(16);
                v[..m].copy_from_slice(&bytes[..m]);
                Ok(v)
            })
    };
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return number(hex, 16);
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        return number(t, 10);
    }
    if let Some(raw) = t.strip_prefix("hex:") {
        if raw.len() != 2 * size || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{t:?}: {size} raw byte(s) are {} hex digits", 2 * size));
        }
        return (0..size)
            .map(|i| u8::from_str_radix(&raw[2 * i..2 * i + 2], 16).map_err(|e| e.to_string()))
            .collect();
    }
    Err(format!(
        "{t:?}: expected a number (123, 0x7b) or raw bytes (hex: and {} hex digits)",
        2 * size
    ))
}

/// Show bytes as the dump prints them: hex, and the little-endian number for sizes of 1, 2,
/// 4 and 8 bytes (`0a000000 (10)`).
pub fn format_bytes(b: &[u8]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    match b.len() {
        1 | 2 | 4 | 8 => {
            let mut n = [0u8; 8];
            n[..b.len()].copy_from_slice(b);
            format!("{hex} ({})", u64::from_le_bytes(n))
        }
        _ => hex,
    }
}

/// Bytes as hex digits.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_numbers_or_raw_bytes() {
        assert_eq!(parse_bytes("1", 4), Ok(vec![1, 0, 0, 0]));
        assert_eq!(parse_bytes("0x0102", 4), Ok(vec![2, 1, 0, 0]));
        assert_eq!(parse_bytes("hex:0a000001", 4), Ok(vec![10, 0, 0, 1]));
        assert!(parse_bytes("hex:0a", 4).unwrap_err().contains("8 hex digits"));
        assert_eq!(parse_bytes("255", 1), Ok(vec![255]));
        assert!(parse_bytes("256", 1).unwrap_err().contains("does not fit"));
        assert!(parse_bytes("abc", 4).unwrap_err().contains("expected a number"));
        assert!(parse_bytes("", 4).is_err());
        assert_eq!(parse_bytes("7", 20).map(|v| (v.len(), v[0], v[19])), Ok((20, 7, 0)));
        assert_eq!(format_bytes(&[10, 0, 0, 0]), "0a000000 (10)");
        assert_eq!(format_bytes(&[1, 2, 3]), "010203");
    }

    proptest::proptest! {
        /// A number written in decimal or hex reads back as its little-endian bytes, and
        /// raw hex reads back as the bytes; nothing panics.
        #[test]
        fn numbers_and_bytes_round_trip(n: u64, raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..24), junk in "[ -~]{0,20}") {
            proptest::prop_assert_eq!(parse_bytes(&n.to_string(), 8), Ok(n.to_le_bytes().to_vec()));
            proptest::prop_assert_eq!(parse_bytes(&format!("{n:#x}"), 8), Ok(n.to_le_bytes().to_vec()));
            proptest::prop_assert_eq!(parse_bytes(&format!("hex:{}", hex(&raw)), raw.len()), Ok(raw.clone()));
            let _ = parse_bytes(&junk, raw.len());
        }
    }
}
