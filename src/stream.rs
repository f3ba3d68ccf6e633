//! `snic stream`: the streaming-kernel stages (`kernel:NAME`) of a running `snic run` or
//! `snic serve --port`, over its control socket: `list` (stages, registers, where the results
//! are), `reg` (read or write a register), `key` (load a key), `table` (the telemetry tables,
//! decoded from results memory).
//!
//! The server side is [`serve`], which the control socket's handler calls with the run's
//! kernel control handles.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use snic_stream::KernelControl;
use snic_stream::table::Table;
use std::path::PathBuf;

use crate::control::{MAX_DUMP_LIMIT, Request};

/// Arguments of `snic stream`.
#[derive(Debug, clap::Args)]
pub struct StreamArgs {
    #[command(subcommand)]
    cmd: StreamCmd,
}

#[derive(Debug, clap::Subcommand)]
enum StreamCmd {
    /// List the kernel stages, their registers (each worker's value) and results memory.
    List {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read a register of a kernel stage, or write it with VALUE.
    Reg {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// The kernel stage (`telemetry`, `crypt`, `crypt.1` for a second crypt stage).
        stage: String,
        /// Register name or number.
        reg: String,
        /// The value to write.
        value: Option<u32>,
    },
    /// Load a key (64 hex digits) into a key slot of a kernel stage.
    Key {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// The kernel stage.
        stage: String,
        /// Key slot (0..=3).
        slot: u32,
        /// The key in hex (visible to other users in the process list: prefer --key-file).
        #[arg(conflicts_with_all = ["key_file", "clear"], required_unless_present_any = ["key_file", "clear"])]
        key: Option<String>,
        /// Read the key (hex) from this file.
        #[arg(long, value_name = "PATH")]
        key_file: Option<PathBuf>,
        /// Clear the slot.
        #[arg(long)]
        clear: bool,
    },
    /// Print the telemetry tables of a kernel stage, read from its results memory.
    Table {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// The kernel stage.
        #[arg(default_value = "telemetry")]
        stage: String,
        /// Most flows per worker.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run `snic stream ...`.
pub fn run(args: StreamArgs) -> Result<()> {
    match args.cmd {
        StreamCmd::List { control, json } => {
            let v = crate::control::request(&control, &Request::StreamList)?;
            if json {
                println!("{v}");
                return Ok(());
            }
            for k in v["kernels"].as_array().into_iter().flatten() {
                println!(
                    "{} ({})",
                    k["stage"].as_str().unwrap_or("?"),
                    k["spec"].as_str().unwrap_or("?")
                );
                for r in k["registers"].as_array().into_iter().flatten() {
                    println!(
                        "  {:>2} {:<10} {:<2} {:<12} {}",
                        r["index"],
                        r["name"].as_str().unwrap_or("?"),
                        r["access"].as_str().unwrap_or("?"),
                        values_text(&r["values"]),
                        r["doc"].as_str().unwrap_or("")
                    );
                }
                for (w, res) in k["results"].as_array().into_iter().flatten().enumerate() {
                    println!(
                        "  results of worker {w}: {} bytes{}",
                        res["bytes"],
                        res["device_addr"]
                            .as_str()
                            .map(|a| format!(" in device memory at {a}"))
                            .unwrap_or_else(|| " in snic's memory".into())
                    );
                }
            }
            Ok(())
        }
        StreamCmd::Reg { control, stage, reg, value } => {
            let v = crate::control::request(&control, &Request::StreamReg { stage, reg, value })?;
            let name = v["reg"].as_str().unwrap_or("?");
            match value {
                Some(x) => println!("{name} = {x} (applied by every worker before its next batch)"),
                None => println!("{name} = {}", values_text(&v["values"])),
            }
            Ok(())
        }
        StreamCmd::Key { control, stage, slot, key, key_file, clear } => {
            let key = match (key, key_file, clear) {
                (_, _, true) => String::new(),
                (Some(k), _, _) => k,
                (None, Some(f), _) => std::fs::read_to_string(&f)
                    .with_context(|| format!("reading {}", f.display()))?
                    .trim()
                    .to_string(),
                (None, None, false) => bail!("give a key, --key-file or --clear"),
            };
            crate::control::request(&control, &Request::StreamKey { stage, slot, key })?;
            println!("key slot {slot} {}", if clear { "cleared" } else { "loaded" });
            Ok(())
        }
        StreamCmd::Table { control, stage, limit, json } => {
            let v = crate::control::request(&control, &Request::StreamTable { stage, limit })?;
            if json {
                println!("{v}");
            } else {
                print!("{}", table_text(&v));
            }
            Ok(())
        }
    }
}

/// One value when every worker agrees, else each worker's.
fn values_text(v: &Value) -> String {
    let vals: Vec<u64> = v.as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
    match vals.split_first() {
        Some((first, rest)) if rest.iter().all(|x| x == first) => first.to_string(),
        _ => format!("{vals:?} (per worker)"),
    }
}

/// The `stream.table` answer as text: a line per worker, then a line per flow.
pub fn table_text(v: &Value) -> String {
    let mut s = String::new();
    for w in v["workers"].as_array().into_iter().flatten() {
        let h = &w["header"];
        if let Some(e) = w["error"].as_str() {
            s.push_str(&format!("worker ?: {e}\n"));
            continue;
        }
        s.push_str(&format!(
            "worker {}: {} of {} flows, {} packets, {} bytes, overflow {}, evicted {}, resets {}{}{}\n",
            h["worker"],
            h["entries"],
            h["capacity"],
            h["packets"],
            h["bytes"],
            h["overflow"],
            h["evicted"],
            h["resets"],
            if h["enabled"] == json!(false) { ", disabled" } else { "" },
            w["device_addr"].as_str().map(|a| format!(", device memory {a}")).unwrap_or_default(),
        ));
        for f in w["flows"].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "  {} packets {} bytes {} first {} last {} iat {} size {}\n",
                f["flow"].as_str().unwrap_or("?"),
                f["packets"],
                f["bytes"],
                f["first_ns"],
                f["last_ns"],
                f["iat"],
                f["size"],
            ));
        }
    }
    s
}

/// Flows shown per worker in a run's final report.
const FINAL_FLOWS: usize = 1000;

/// The tables of the kernel stages that keep one, as `stream.table` answers them, by stage
/// (for the final report of `snic run`).
pub fn final_tables(kernels: &[KernelControl]) -> serde_json::Map<String, Value> {
    kernels
        .iter()
        .filter(|k| k.results_len() > 0)
        .map(|k| {
            let req = Request::StreamTable { stage: k.instance().to_owned(), limit: FINAL_FLOWS };
            (k.instance().to_owned(), serve(std::slice::from_ref(k), req))
        })
        .collect()
}

/// Each kernel stage's results memory: `[{"stage", "kernel", "results": [{"bytes",
/// "device_addr"}]}]` (for the counters document of `snic serve`).
pub fn results_json(kernels: &[KernelControl]) -> Value {
    Value::Array(
        kernels
            .iter()
            .map(|k| {
                let results: Vec<Value> = k
                    .regions()
                    .iter()
                    .map(|(r, addr)| {
                        json!({"bytes": r.len(), "device_addr": addr.map(|a| format!("{a:#x}"))})
                    })
                    .collect();
                json!({"stage": k.instance(), "kernel": k.kernel(), "results": results})
            })
            .collect(),
    )
}

fn error(msg: impl Into<String>) -> Value {
    json!({"ok": false, "error": msg.into()})
}

fn find<'a>(kernels: &'a [KernelControl], stage: &str) -> Result<&'a KernelControl, Value> {
    let stage = stage.strip_prefix("kernel:").unwrap_or(stage);
    kernels.iter().find(|k| k.instance() == stage).ok_or_else(|| {
        let names: Vec<&str> = kernels.iter().map(|k| k.instance()).collect();
        if names.is_empty() {
            error("the run has no kernel stage (add --stage kernel:NAME)")
        } else {
            error(format!("no kernel stage {stage:?} (stages: {})", names.join(", ")))
        }
    })
}

/// A register by name or number.
fn reg_index(k: &KernelControl, reg: &str) -> Result<u32, Value> {
    let regs = k.registers();
    if let Ok(i) = reg.parse::<u32>() {
        return Ok(i);
    }
    regs.iter().position(|r| r.name == reg).map(|i| i as u32).ok_or_else(|| {
        let names: Vec<&str> = regs.iter().map(|r| r.name).collect();
        error(format!("{} has no register {reg:?} (registers: {})", k.instance(), names.join(", ")))
    })
}

fn table_json(t: &Table, limit: usize) -> Value {
    let h = &t.header;
    json!({
        "header": {
            "worker": h.worker, "capacity": h.capacity, "entries": h.entries,
            "enabled": h.enabled, "packets": h.packets, "bytes": h.bytes,
            "overflow": h.overflow, "resets": h.resets, "evicted": h.evicted,
            "idle_ms": h.idle_ns / 1_000_000,
        },
        "flows": t.flows.iter().take(limit).map(|f| json!({
            "flow": f.key.to_string(),
            "src": f.key.src.to_string(), "dst": f.key.dst.to_string(),
            "protocol": f.key.protocol, "src_port": f.key.src_port, "dst_port": f.key.dst_port,
            "packets": f.packets, "bytes": f.bytes, "first_ns": f.first_ns, "last_ns": f.last_ns,
            "iat": f.iat.to_vec(), "size": f.size.to_vec(),
        })).collect::<Vec<_>>(),
    })
}

/// Answer one `stream.*` request with the run's kernel stages.
pub fn serve(kernels: &[KernelControl], req: Request) -> Value {
    match req {
        Request::StreamList => {
            let list: Vec<Value> = kernels
                .iter()
                .map(|k| {
                    let regs: Vec<Value> = k
                        .registers()
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            json!({
                                "index": i, "name": r.name, "doc": r.doc,
                                "access": if r.access == snic_stream::Access::ReadOnly { "ro" } else { "rw" },
                                "values": k.read_reg(i as u32).unwrap_or_default(),
                            })
                        })
                        .collect();
                    let results = results_json(std::slice::from_ref(k))[0]["results"].clone();
                    json!({"stage": k.instance(), "kernel": k.kernel(), "spec": k.spec(),
                           "workers": k.workers(), "registers": regs, "results": results})
                })
                .collect();
            json!({"ok": true, "kernels": list})
        }
        Request::StreamReg { stage, reg, value } => {
            let k = match find(kernels, &stage) {
                Ok(k) => k,
                Err(e) => return e,
            };
            let idx = match reg_index(k, &reg) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let name = k.registers().get(idx as usize).map_or("?", |r| r.name);
            if let Some(v) = value
                && let Err(e) = k.write_reg(idx, v)
            {
                return error(e.to_string());
            }
            match k.read_reg(idx) {
                Ok(values) => json!({"ok": true, "reg": name, "index": idx, "values": values,
                                     "written": value}),
                Err(e) => error(e.to_string()),
            }
        }
        Request::StreamKey { stage, slot, key } => {
            let k = match find(kernels, &stage) {
                Ok(k) => k,
                Err(e) => return e,
            };
            let bytes = if key.is_empty() {
                Vec::new()
            } else {
                match snic_stream::crypt::parse_key(&key) {
                    Ok(b) => b.to_vec(),
                    Err(e) => return error(e.to_string()),
                }
            };
            match k.set_key(slot, &bytes) {
                Ok(()) => json!({"ok": true, "slot": slot, "cleared": bytes.is_empty()}),
                Err(e) => error(e.to_string()),
            }
        }
        Request::StreamTable { stage, limit } => {
            if limit > MAX_DUMP_LIMIT {
                return error(format!("limit {limit} is above the maximum {MAX_DUMP_LIMIT}"));
            }
            let k = match find(kernels, &stage) {
                Ok(k) => k,
                Err(e) => return e,
            };
            if k.results_len() == 0 {
                return error(format!("kernel stage {} has no results table", k.instance()));
            }
            let regions = k.regions();
            let workers: Vec<Value> = k
                .tables()
                .iter()
                .zip(&regions)
                .map(|(t, (_, addr))| {
                    let mut v = match t {
                        Ok(t) => table_json(t, limit),
                        Err(e) => json!({"error": e.to_string()}),
                    };
                    v["device_addr"] = json!(addr.map(|a| format!("{a:#x}")));
                    v
                })
                .collect();
            json!({"ok": true, "stage": k.instance(), "workers": workers})
        }
        _ => error("not a stream request"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_stream::Registry;

    fn kernels() -> Vec<KernelControl> {
        let reg = Registry::with_builtins();
        let (t, _) = reg.stages("telemetry", "telemetry", &[], 2, [0; 4]).unwrap();
        let args = [("mode".into(), "encrypt".into()), ("key".into(), "01".repeat(32))];
        let (c, _) = reg.stages("crypt", "crypt", &args, 2, [0; 4]).unwrap();
        vec![t, c]
    }

    #[test]
    fn requests_reach_the_named_stage_and_errors_say_why() {
        let k = kernels();
        let v = serve(&k, Request::StreamList);
        assert_eq!(v["kernels"][0]["stage"], "telemetry");
        assert_eq!(v["kernels"][1]["registers"][0]["name"], "mode");
        assert_eq!(v["kernels"][1]["spec"], "kernel:crypt,mode=encrypt,key=<redacted>");
        assert!(!v.to_string().contains(&"01".repeat(32)), "no key in listings");
        assert_eq!(v["kernels"][0]["results"][1]["device_addr"], Value::Null);
        let r = |stage: &str, reg: &str, value| {
            serve(&k, Request::StreamReg { stage: stage.into(), reg: reg.into(), value })
        };
        assert_eq!(r("telemetry", "capacity", None)["values"], json!([4096, 4096]));
        assert_eq!(r("kernel:crypt", "3", Some(1400))["ok"], true);
        assert!(r("crypt", "mtu", Some(5))["error"].as_str().unwrap().contains("68..=65535"));
        assert!(r("crypt", "frob", None)["error"].as_str().unwrap().contains("registers: mode"));
        assert!(
            r("nope", "x", None)["error"].as_str().unwrap().contains("stages: telemetry, crypt")
        );
        let key = |key: &str| {
            serve(&k, Request::StreamKey { stage: "crypt".into(), slot: 1, key: key.into() })
        };
        assert_eq!(key(&"ab".repeat(32))["ok"], true);
        assert!(key("abc")["error"].as_str().unwrap().contains("64 hex digits"));
        assert_eq!(key("")["cleared"], true);
        let t = serve(&k, Request::StreamTable { stage: "telemetry".into(), limit: 10 });
        assert_eq!(t["workers"][1]["header"]["worker"], 1);
        assert_eq!(t["workers"][0]["header"]["capacity"], 4096);
        let t = serve(&k, Request::StreamTable { stage: "crypt".into(), limit: 10 });
        assert!(t["error"].as_str().unwrap().contains("no results table"));
        assert!(serve(&[], Request::StreamList)["kernels"].as_array().unwrap().is_empty());
        let none =
            serve(&[], Request::StreamReg { stage: "t".into(), reg: "0".into(), value: None });
        assert!(none["error"].as_str().unwrap().contains("no kernel stage"));
    }
}

/// A kernel's results region in device memory (`snic serve`): a block of the on-board memfd
/// host programs read at its device address.
#[derive(Debug)]
pub struct DeviceResults(pub snic_device::DeviceBlock);

impl snic_stream::ResultsRegion for DeviceResults {
    fn len(&self) -> usize {
        self.0.len
    }
    fn write(&self, off: usize, bytes: &[u8]) -> bool {
        if off.checked_add(bytes.len()).is_none_or(|end| end > self.0.len) {
            return false;
        }
        // Earlier writes (the entries) are visible before this one (the header and its
        // sequence word) to a reader in another process that reads `seq` with acquire.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.0.map.write(self.0.off + off, bytes).is_some()
    }
    fn read(&self, off: usize, out: &mut [u8]) -> bool {
        if off.checked_add(out.len()).is_none_or(|end| end > self.0.len) {
            return false;
        }
        let ok = self.0.map.read(self.0.off + off, out).is_some();
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        ok
    }
}
