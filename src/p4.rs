//! `snic p4`: compile P4 programs, run STF tests, print a program's control-plane view, and
//! program the tables of a running `snic run --stage p4:PROG.p4 --control PATH` with
//! `simple_switch_CLI` commands (`snic p4 table-add --control PATH TABLE ACTION KEY... => ...`,
//! or any command line with `snic p4 cli --control PATH 'LINE'...`).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use snic_io::p4::{DiskLoader, P4Control};
use snic_p4::diag::Diagnostic;
use snic_p4::pre::Options;
use snic_p4::runner::{self, Built};
use snic_p4::span::SourceMap;
use snic_p4::stf::Failure;

/// Arguments of `snic p4`.
#[derive(Debug, clap::Args)]
pub struct P4Args {
    #[command(subcommand)]
    cmd: P4Cmd,
}

/// Options every sub-command that compiles takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CompileOpts {
    /// The program (P4-16, v1model or PNA).
    pub program: PathBuf,
    /// Directories searched by `#include` (after the built-in core.p4, v1model.p4 and pna.p4).
    #[arg(short = 'I', value_name = "DIR")]
    pub include: Vec<PathBuf>,
    /// Predefined macros: `-D NAME` or `-D NAME=VALUE`.
    #[arg(short = 'D', value_name = "NAME[=VALUE]")]
    pub define: Vec<String>,
}

#[derive(Debug, clap::Subcommand)]
enum P4Cmd {
    /// Run an STF test: exit 0 if every expectation holds, 1 on a mismatch, 2 when the test
    /// cannot run (usage, compile, unsupported or STF errors).
    Test {
        #[command(flatten)]
        opts: CompileOpts,
        /// The STF file.
        #[arg(long)]
        stf: PathBuf,
        /// Print every packet's trace (parser states, tables, actions, egress).
        #[arg(long)]
        trace: bool,
    },
    /// Compile a program and report errors and warnings.
    Check {
        #[command(flatten)]
        opts: CompileOpts,
    },
    /// Print the control-plane view: tables, keys, actions, parameters, externs; with
    /// `--p4info FILE`, write the P4Runtime P4Info instead (text format; binary protobuf when
    /// FILE ends in `.bin`).
    Info {
        #[command(flatten)]
        opts: CompileOpts,
        /// Write the P4Info here (`-` for stdout).
        #[arg(long, value_name = "FILE")]
        p4info: Option<PathBuf>,
    },
    /// Send simple_switch_CLI command lines to the p4 stage of a running `snic run --control`
    /// (with neither lines nor a file, they are read from stdin, as `simple_switch_CLI < FILE`).
    Cli {
        /// The control socket of the run.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// Read the command lines from this file (an entries file) after the ones given.
        #[arg(short = 'f', long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// Command lines, e.g. 'table_add ipv4_lpm ipv4_forward 10.0.0.1/32 => 00:00:00:00:00:01 1'.
        lines: Vec<String>,
    },
    #[command(
        about = "simple_switch_CLI's `table_add TABLE ACTION KEY... => PARAM... [PRIORITY]` on a running snic"
    )]
    TableAdd(Remote),
    #[command(about = "simple_switch_CLI's `table_delete TABLE HANDLE` on a running snic")]
    TableDelete(Remote),
    #[command(
        about = "simple_switch_CLI's `table_set_timeout TABLE HANDLE MS` (idle timeout; 0: none) on a running snic"
    )]
    TableSetTimeout(Remote),
    #[command(
        about = "simple_switch_CLI's `table_modify TABLE ACTION HANDLE [=>] PARAM...` on a running snic"
    )]
    TableModify(Remote),
    #[command(
        about = "simple_switch_CLI's `table_set_default TABLE ACTION PARAM...` on a running snic"
    )]
    TableSetDefault(Remote),
    #[command(about = "simple_switch_CLI's `table_reset_default TABLE` on a running snic")]
    TableResetDefault(Remote),
    #[command(about = "simple_switch_CLI's `table_clear TABLE` on a running snic")]
    TableClear(Remote),
    #[command(about = "simple_switch_CLI's `table_dump TABLE` on a running snic")]
    TableDump(Remote),
    #[command(about = "simple_switch_CLI's `table_dump_entry TABLE HANDLE` on a running snic")]
    TableDumpEntry(Remote),
    #[command(about = "simple_switch_CLI's `table_num_entries TABLE` on a running snic")]
    TableNumEntries(Remote),
    #[command(about = "simple_switch_CLI's `table_info TABLE` on a running snic")]
    TableInfo(Remote),
    #[command(about = "simple_switch_CLI's `show_tables` on a running snic")]
    ShowTables(Remote),
    #[command(about = "simple_switch_CLI's `show_actions` on a running snic")]
    ShowActions(Remote),
    #[command(about = "simple_switch_CLI's `counter_read NAME INDEX` on a running snic")]
    CounterRead(Remote),
    #[command(about = "simple_switch_CLI's `counter_reset NAME` on a running snic")]
    CounterReset(Remote),
    #[command(
        about = "simple_switch_CLI's `counter_write NAME INDEX PACKETS BYTES` on a running snic"
    )]
    CounterWrite(Remote),
    #[command(about = "simple_switch_CLI's `register_read NAME [INDEX]` on a running snic")]
    RegisterRead(Remote),
    #[command(about = "simple_switch_CLI's `register_write NAME INDEX VALUE` on a running snic")]
    RegisterWrite(Remote),
    #[command(about = "simple_switch_CLI's `register_reset NAME` on a running snic")]
    RegisterReset(Remote),
    #[command(
        about = "simple_switch_CLI's `meter_set_rates NAME INDEX RATE:BURST RATE:BURST` on a running snic"
    )]
    MeterSetRates(Remote),
    #[command(
        about = "simple_switch_CLI's `meter_array_set_rates NAME RATE:BURST RATE:BURST` on a running snic"
    )]
    MeterArraySetRates(Remote),
    #[command(about = "simple_switch_CLI's `meter_get_rates NAME INDEX` on a running snic")]
    MeterGetRates(Remote),
    #[command(about = "simple_switch_CLI's `mc_mgrp_create MGRP` on a running snic")]
    McMgrpCreate(Remote),
    #[command(about = "simple_switch_CLI's `mc_mgrp_destroy MGRP` on a running snic")]
    McMgrpDestroy(Remote),
    #[command(about = "simple_switch_CLI's `mc_node_create RID PORT...` on a running snic")]
    McNodeCreate(Remote),
    #[command(about = "simple_switch_CLI's `mc_node_update HANDLE PORT...` on a running snic")]
    McNodeUpdate(Remote),
    #[command(about = "simple_switch_CLI's `mc_node_associate MGRP HANDLE` on a running snic")]
    McNodeAssociate(Remote),
    #[command(about = "simple_switch_CLI's `mc_node_dissociate MGRP HANDLE` on a running snic")]
    McNodeDissociate(Remote),
    #[command(about = "simple_switch_CLI's `mc_node_destroy HANDLE` on a running snic")]
    McNodeDestroy(Remote),
    #[command(about = "simple_switch_CLI's `mc_dump` on a running snic")]
    McDump(Remote),
    #[command(about = "simple_switch_CLI's `mirroring_add SESSION PORT` on a running snic")]
    MirroringAdd(Remote),
    #[command(about = "simple_switch_CLI's `mirroring_add_mc SESSION MGRP` on a running snic")]
    MirroringAddMc(Remote),
    #[command(about = "simple_switch_CLI's `mirroring_delete SESSION` on a running snic")]
    MirroringDelete(Remote),
    #[command(about = "simple_switch_CLI's `mirroring_get SESSION` on a running snic")]
    MirroringGet(Remote),
}

/// The control socket and the words of one `simple_switch_CLI` command.
#[derive(Debug, Clone, clap::Args)]
pub struct Remote {
    /// The control socket of the run (`snic run --control PATH`).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// The command's arguments, as simple_switch_CLI takes them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

impl P4Cmd {
    /// The `simple_switch_CLI` command a remote sub-command stands for, with its arguments.
    fn remote(&self) -> Option<(&'static str, &Remote)> {
        match self {
            P4Cmd::TableAdd(r) => Some(("table_add", r)),
            P4Cmd::TableDelete(r) => Some(("table_delete", r)),
            P4Cmd::TableSetTimeout(r) => Some(("table_set_timeout", r)),
            P4Cmd::TableModify(r) => Some(("table_modify", r)),
            P4Cmd::TableSetDefault(r) => Some(("table_set_default", r)),
            P4Cmd::TableResetDefault(r) => Some(("table_reset_default", r)),
            P4Cmd::TableClear(r) => Some(("table_clear", r)),
            P4Cmd::TableDump(r) => Some(("table_dump", r)),
            P4Cmd::TableDumpEntry(r) => Some(("table_dump_entry", r)),
            P4Cmd::TableNumEntries(r) => Some(("table_num_entries", r)),
            P4Cmd::TableInfo(r) => Some(("table_info", r)),
            P4Cmd::ShowTables(r) => Some(("show_tables", r)),
            P4Cmd::ShowActions(r) => Some(("show_actions", r)),
            P4Cmd::CounterRead(r) => Some(("counter_read", r)),
            P4Cmd::CounterReset(r) => Some(("counter_reset", r)),
            P4Cmd::CounterWrite(r) => Some(("counter_write", r)),
            P4Cmd::RegisterRead(r) => Some(("register_read", r)),
            P4Cmd::RegisterWrite(r) => Some(("register_write", r)),
            P4Cmd::RegisterReset(r) => Some(("register_reset", r)),
            P4Cmd::MeterSetRates(r) => Some(("meter_set_rates", r)),
            P4Cmd::MeterArraySetRates(r) => Some(("meter_array_set_rates", r)),
            P4Cmd::MeterGetRates(r) => Some(("meter_get_rates", r)),
            P4Cmd::McMgrpCreate(r) => Some(("mc_mgrp_create", r)),
            P4Cmd::McMgrpDestroy(r) => Some(("mc_mgrp_destroy", r)),
            P4Cmd::McNodeCreate(r) => Some(("mc_node_create", r)),
            P4Cmd::McNodeUpdate(r) => Some(("mc_node_update", r)),
            P4Cmd::McNodeAssociate(r) => Some(("mc_node_associate", r)),
            P4Cmd::McNodeDissociate(r) => Some(("mc_node_dissociate", r)),
            P4Cmd::McNodeDestroy(r) => Some(("mc_node_destroy", r)),
            P4Cmd::McDump(r) => Some(("mc_dump", r)),
            P4Cmd::MirroringAdd(r) => Some(("mirroring_add", r)),
            P4Cmd::MirroringAddMc(r) => Some(("mirroring_add_mc", r)),
            P4Cmd::MirroringDelete(r) => Some(("mirroring_delete", r)),
            P4Cmd::MirroringGet(r) => Some(("mirroring_get", r)),
            P4Cmd::Test { .. } | P4Cmd::Check { .. } | P4Cmd::Info { .. } | P4Cmd::Cli { .. } => {
                None
            }
        }
    }
}

/// What the control socket answers when the run has no p4 stage.
pub const NO_P4: &str = "this run has no p4 stage";

/// Answer one `p4.cli` request with the run's p4 control (`None`: the run has no p4 stage).
pub fn serve(p4: Option<&P4Control>, text: &str) -> Value {
    let Some(p4) = p4 else { return json!({"ok": false, "error": NO_P4}) };
    match p4.apply_text(text) {
        Ok(output) => json!({"ok": true, "output": output}),
        Err(e) => json!({"ok": false, "error": e}),
    }
}

/// Send `text` (command lines) to the run behind `control`; print the answer.
fn remote(control: &Path, text: String) -> u8 {
    match crate::control::request(control, &crate::control::Request::P4 { text }) {
        Ok(v) => {
            print!("{}", v.get("output").and_then(Value::as_str).unwrap_or_default());
            0
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

/// Compile a program from disk; diagnostics go to stderr. `None` when it does not compile.
pub fn compile(opts: &CompileOpts) -> Option<(Built, SourceMap)> {
    let text = match std::fs::read_to_string(&opts.program) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {}: {e}", opts.program.display());
            return None;
        }
    };
    let mut map = SourceMap::new();
    let main = map.add(opts.program.display().to_string(), text);
    let mut loader = DiskLoader { dirs: opts.include.clone() };
    let defines = opts
        .define
        .iter()
        .map(|d| match d.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => (d.clone(), "1".to_string()),
        })
        .collect();
    let o = Options { defines, ..Options::default() };
    match runner::build(&mut map, main, &mut loader, &o) {
        Ok(b) => {
            print_diags(&b.warnings, &map);
            Some((b, map))
        }
        Err(d) => {
            print_diags(&d, &map);
            None
        }
    }
}

fn print_diags(d: &[Diagnostic], map: &SourceMap) {
    for x in d {
        eprintln!("{}", x.render(map));
    }
}

/// Run `snic p4`.
pub fn run(args: P4Args) -> u8 {
    if let Some((name, r)) = args.cmd.remote() {
        let mut line = name.to_string();
        for a in &r.args {
            line.push(' ');
            line.push_str(a);
        }
        return remote(&r.control, line);
    }
    match args.cmd {
        P4Cmd::Test { opts, stf, trace } => test(&opts, &stf, trace),
        P4Cmd::Check { opts } => match compile(&opts) {
            Some((b, _)) => {
                let p = &b.program;
                println!(
                    "{}: ok ({} tables, {} actions, {} parser states, {} externs)",
                    opts.program.display(),
                    p.tables.len(),
                    p.actions.len(),
                    p.parsers.iter().map(|x| x.states.len()).sum::<usize>(),
                    p.instances.len()
                );
                0
            }
            None => 2,
        },
        P4Cmd::Info { opts, p4info: None } => match compile(&opts) {
            Some((b, _)) => {
                print!("{}", info(&b.program));
                0
            }
            None => 2,
        },
        P4Cmd::Info { opts, p4info: Some(out) } => match compile(&opts) {
            Some((b, _)) => write_p4info(&opts.program, &b.program, &out),
            None => 2,
        },
        P4Cmd::Cli { control, file, lines } => {
            let mut text = lines.join("\n");
            if lines.is_empty() && file.is_none() {
                use std::io::Read as _;
                if let Err(e) = std::io::stdin().read_to_string(&mut text) {
                    eprintln!("error: reading stdin: {e}");
                    return 2;
                }
            }
            if let Some(f) = file {
                match std::fs::read_to_string(&f) {
                    Ok(t) => {
                        text.push('\n');
                        text.push_str(&t);
                    }
                    Err(e) => {
                        eprintln!("error: {}: {e}", f.display());
                        return 2;
                    }
                }
            }
            remote(&control, text)
        }
        // The remote sub-commands were sent above.
        _ => 2,
    }
}

fn test(opts: &CompileOpts, stf: &Path, trace: bool) -> u8 {
    let stf_text = match std::fs::read_to_string(stf) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {}: {e}", stf.display());
            return 2;
        }
    };
    let Some((built, _)) = compile(opts) else { return 2 };
    let run = match runner::run_stf(built.program, &stf_text, trace) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", stf.display());
            return 2;
        }
    };
    let mut sw = run.switch;
    if trace {
        for l in sw.take_trace() {
            println!("{l}");
        }
    }
    for n in &run.notes {
        eprintln!("note: {n}");
    }
    if run.verdict.passed() {
        println!("PASS {}", stf.display());
        return 0;
    }
    for f in &run.verdict.failures {
        match f {
            Failure::Wrong { port, index, expected, frame, .. } => {
                eprintln!("port {port}, packet {index} (expect on line {}):", expected.line);
                if let Some(d) = snic_p4::stf::diff(*port, &expected.pattern, frame) {
                    eprintln!("{d}");
                }
            }
            other => eprintln!("{other}"),
        }
    }
    println!("FAIL {}", stf.display());
    1
}

/// The control-plane view of a program, as text.
pub fn info(p: &snic_p4::ir::Compiled) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for t in &p.tables {
        let _ = writeln!(s, "table {} (size {})", t.name, t.size);
        for k in &t.keys {
            let _ = writeln!(s, "  key {} : {:?} bit<{}>", k.name, k.kind, k.width);
        }
        for a in &t.actions {
            let act = &p.actions[a.action as usize];
            let params: Vec<String> = act
                .params
                .iter()
                .filter(|x| x.data)
                .map(|x| format!("{}: bit<{}>", x.name, x.width))
                .collect();
            let scope = if a.default_only {
                " @defaultonly"
            } else if a.table_only {
                " @tableonly"
            } else {
                ""
            };
            let _ = writeln!(s, "  action {}({}){scope}", act.name, params.join(", "));
        }
        let d = &t.default;
        let dn = t
            .actions
            .get(d.action as usize)
            .map(|a| p.actions[a.action as usize].name.as_str())
            .unwrap_or("");
        let _ = writeln!(
            s,
            "  default {dn}({}){}",
            d.args.iter().map(|a| format!("0x{a:x}")).collect::<Vec<_>>().join(", "),
            if t.default_const { " const" } else { "" }
        );
        if !t.entries.is_empty() {
            let _ = writeln!(
                s,
                "  {} {}entries",
                t.entries.len(),
                if t.entries_const { "const " } else { "" }
            );
        }
        if let Some(c) = t.direct_counter {
            let _ = writeln!(s, "  counters {}", p.instances[c as usize].name);
        }
        if let Some(m) = t.direct_meter {
            let _ = writeln!(s, "  meters {}", p.instances[m as usize].name);
        }
        if t.add_on_miss {
            let _ = writeln!(s, "  add_on_miss (the default action may add entries)");
        }
        match t.idle {
            snic_p4::ir::IdleTimeout::None => {}
            snic_p4::ir::IdleTimeout::Notify => {
                let _ = writeln!(s, "  idle timeout: notify the control plane");
            }
            snic_p4::ir::IdleTimeout::AutoDelete => {
                let _ = writeln!(s, "  idle timeout: delete the entry");
            }
        }
    }
    if let snic_p4::ir::Arch::Pna(_) = p.arch {
        let _ = writeln!(s, "architecture PNA (PNA_NIC)");
    }
    for i in &p.instances {
        let _ = writeln!(s, "extern {} {:?}", i.name, i.kind);
    }
    for v in &p.value_sets {
        let _ = writeln!(s, "value_set {} bit<{}> size {}", v.name, v.width, v.size);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        p4: P4Args,
    }

    fn parse(args: &[&str]) -> P4Cmd {
        T::try_parse_from(std::iter::once("p4").chain(args.iter().copied())).expect("parses").p4.cmd
    }

    #[test]
    fn remote_subcommands_name_their_cli_command_and_keep_every_word() {
        let cmd = parse(&["table-add", "--control", "/s", "l2", "fwd", "-1", "=>", "1", "5"]);
        let (name, r) = cmd.remote().expect("remote");
        assert_eq!(name, "table_add");
        assert_eq!(r.control, PathBuf::from("/s"));
        assert_eq!(r.args, ["l2", "fwd", "-1", "=>", "1", "5"]);
        let cmd = parse(&["mc-dump", "--control", "/s"]);
        assert_eq!(cmd.remote().map(|(n, r)| (n, r.args.len())), Some(("mc_dump", 0)));
        let cmd = parse(&["mirroring-add-mc", "--control", "/s", "1", "2"]);
        assert_eq!(cmd.remote().map(|(n, _)| n), Some("mirroring_add_mc"));
        assert!(parse(&["check", "x.p4"]).remote().is_none());
        match parse(&["cli", "--control", "/s", "table_clear t", "mc_dump"]) {
            P4Cmd::Cli { lines, file: None, .. } => assert_eq!(lines, ["table_clear t", "mc_dump"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn serve_without_a_p4_stage_says_so() {
        assert_eq!(serve(None, "show_tables"), json!({"ok": false, "error": NO_P4}));
    }
}

/// Write the P4Info of `prog` (compiled from `path`) to `out`: 0, or 2 with a message.
fn write_p4info(path: &std::path::Path, prog: &snic_p4::ir::Compiled, out: &std::path::Path) -> u8 {
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let info = match snic_p4rt::p4info::for_program(prog, &name) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let bytes = if out.extension().is_some_and(|e| e == "bin") {
        prost::Message::encode_to_vec(&info)
    } else {
        snic_p4rt::p4info::to_text(&info).into_bytes()
    };
    let r = if out.as_os_str() == "-" {
        use std::io::Write as _;
        std::io::stdout().write_all(&bytes)
    } else {
        std::fs::write(out, bytes)
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {}: {e}", out.display());
            2
        }
    }
}

/// The P4Runtime server options of `snic run` and `snic serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct P4RuntimeArgs {
    /// Serve P4Runtime v1 (gRPC) for the `p4` stage on this address (`127.0.0.1:9559`; the
    /// port defaults to 9559). Clients push programs (SetForwardingPipelineConfig with the P4
    /// source as `p4_device_config`) and write tables; `--stage p4` alone starts empty.
    #[arg(long, value_name = "ADDR")]
    pub p4runtime: Option<String>,
    /// The P4Runtime device id.
    #[arg(long = "p4runtime-device-id", value_name = "N", default_value_t = 1)]
    pub p4runtime_device_id: u64,
    /// The P4 port that reaches the P4Runtime controller (packet-in / packet-out).
    #[arg(long = "cpu-port", value_name = "N", default_value_t = 255)]
    pub cpu_port: u32,
}

/// The program (empty for none) and `I=` include directories of the `p4` stage among `stages`.
pub fn p4_stage(stages: &[snic_pipeline::StageSpec]) -> Option<(String, Vec<String>)> {
    stages.iter().find_map(|s| match s {
        snic_pipeline::StageSpec::P4 { program, include, .. } => {
            Some((program.clone(), include.clone()))
        }
        _ => None,
    })
}

impl P4RuntimeArgs {
    /// Start the server when asked (`p4`: the run's p4 stage, which it needs; `stage`: that
    /// stage's program, empty for none, and `I=` include directories).
    pub fn start(
        &self,
        p4: Option<P4Control>,
        stage: Option<(&str, &[String])>,
    ) -> anyhow::Result<Option<snic_p4rt::server::Handle>> {
        use anyhow::Context as _;
        use std::net::ToSocketAddrs as _;
        let Some(a) = &self.p4runtime else { return Ok(None) };
        let Some(control) = p4 else {
            anyhow::bail!("--p4runtime needs a p4 stage (--stage p4 or --stage p4:PROG.p4)");
        };
        let with_port = if a.parse::<std::net::SocketAddr>().is_ok()
            || a.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            a.clone()
        } else {
            format!("{a}:9559")
        };
        let addr = with_port
            .to_socket_addrs()
            .with_context(|| format!("--p4runtime {a}"))?
            .next()
            .with_context(|| format!("--p4runtime {a}: no address"))?;
        // A program given with the stage is the pipeline clients find; its includes (and its
        // directory) serve the programs they push too.
        let (program, mut include) = match stage {
            Some((p, inc)) => (
                (!p.is_empty()).then(|| PathBuf::from(p)),
                inc.iter().map(PathBuf::from).collect::<Vec<_>>(),
            ),
            None => (None, Vec::new()),
        };
        if let Some(dir) = program.as_deref().and_then(Path::parent) {
            include.push(if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir.into() });
        }
        let opts = snic_p4rt::server::Options {
            addr,
            device_id: self.p4runtime_device_id,
            cpu_port: self.cpu_port,
            include,
            program,
        };
        let h = snic_p4rt::server::spawn(control, opts)
            .with_context(|| format!("--p4runtime {addr}"))?;
        eprintln!(
            "snic: P4Runtime on {} (device {}, CPU port {})",
            h.addr(),
            self.p4runtime_device_id,
            self.cpu_port
        );
        Ok(Some(h))
    }
}
