//! `snic p4`: compile P4 programs, run STF tests, print a program's control-plane view.

use std::path::{Path, PathBuf};

use snic_p4::builtin;
use snic_p4::diag::Diagnostic;
use snic_p4::pre::{IncludeKind, LoadError, Loaded, Loader, Options};
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
    /// The program (P4-16, v1model).
    pub program: PathBuf,
    /// Directories searched by `#include` (after the built-in core.p4 and v1model.p4).
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
    /// Print the control-plane view: tables, keys, actions, parameters, externs.
    Info {
        #[command(flatten)]
        opts: CompileOpts,
    },
}

/// Resolves includes on disk: `<name>` in the built-ins then the `-I` directories, `"name"` in
/// the including file's folder first.
#[derive(Debug, Clone)]
pub struct DiskLoader {
    /// The `-I` directories in order.
    pub dirs: Vec<PathBuf>,
}

impl Loader for DiskLoader {
    fn load(&mut self, name: &str, kind: IncludeKind, from: &str) -> Result<Loaded, LoadError> {
        let mut candidates = Vec::new();
        if kind == IncludeKind::Quote {
            let dir = Path::new(from).parent().map(Path::to_path_buf).unwrap_or_default();
            candidates.push(dir.join(name));
        }
        if let Some(text) = builtin::lookup(name) {
            if kind == IncludeKind::System || !candidates[0].exists() {
                return Ok(Loaded { name: format!("<{name}>"), text: text.to_string() });
            }
        }
        candidates.extend(self.dirs.iter().map(|d| d.join(name)));
        for c in candidates {
            match std::fs::read(&c) {
                Ok(bytes) => {
                    let text = String::from_utf8(bytes)
                        .map_err(|_| LoadError::Failed(format!("{} is not UTF-8", c.display())))?;
                    return Ok(Loaded { name: c.display().to_string(), text });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(LoadError::Failed(format!("{}: {e}", c.display()))),
            }
        }
        Err(LoadError::NotFound)
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
        P4Cmd::Info { opts } => match compile(&opts) {
            Some((b, _)) => {
                print!("{}", info(&b.program));
                0
            }
            None => 2,
        },
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
    }
    for i in &p.instances {
        let _ = writeln!(s, "extern {} {:?}", i.name, i.kind);
    }
    for v in &p.value_sets {
        let _ = writeln!(s, "value_set {} bit<{}> size {}", v.name, v.width, v.size);
    }
    s
}
