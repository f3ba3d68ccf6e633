//! From source text to a running [`Switch`], and STF tests run against it the way p4c's BMv2
//! driver judges them (`../shared/p4/STF.md`).
//!
//! [`build`] runs the whole front end (preprocessor, lexer, parser, compiler) and turns every
//! failure into [`Diagnostic`]s that name the file, line and column. [`run_stf`] executes an
//! STF file's commands in order on a fresh [`Switch`] and returns the [`Verdict`].

use crate::diag::Diagnostic;
use crate::ir::{ActionCall, Compiled};
use crate::pre::{Expanded, Loader, Options, preprocess};
use crate::span::{FileId, SourceMap};
use crate::stf::{self, Command, Expectations, Verdict};
use crate::table::{FieldMatch, MatchKind};
use crate::v1model::{MirrorSession, RuntimeError, Switch};

/// A compiled program with what the front end said about it.
#[derive(Debug, Clone)]
pub struct Built {
    /// The program.
    pub program: Compiled,
    /// Warnings (from the preprocessor and the compiler).
    pub warnings: Vec<Diagnostic>,
    /// The preprocessed text (for locating later messages).
    pub expanded: Expanded,
}

/// Compile file `main` of `map` (includes through `loader`).
pub fn build(
    map: &mut SourceMap,
    main: FileId,
    loader: &mut dyn Loader,
    opts: &Options,
) -> Result<Built, Vec<Diagnostic>> {
    let expanded = preprocess(map, main, loader, opts)?;
    let (tokens, lex_errors) = crate::lex::lex(&expanded.text);
    if !lex_errors.is_empty() {
        return Err(lex_errors
            .iter()
            .take(20)
            .map(|e| {
                let span = expanded.locate(e.start as usize);
                Diagnostic::error(span, e.to_string())
            })
            .collect());
    }
    let program = crate::parse::parse(&expanded.text, &tokens)
        .map_err(|e| crate::parse::to_diagnostics(&e, &expanded))?;
    let out = crate::compile::compile(&program, &expanded.text).map_err(|e| {
        let span = expanded.locate(e.loc.start as usize).map(|mut s| {
            s.end = s.start.saturating_add(e.loc.end.saturating_sub(e.loc.start).max(1));
            s
        });
        vec![Diagnostic::error(span, e.message)]
    })?;
    let mut warnings = expanded.warnings.clone();
    for w in &out.warnings {
        warnings
            .push(Diagnostic::warning(expanded.locate(w.loc.start as usize), w.message.clone()));
    }
    Ok(Built { program: out.program, warnings, expanded })
}

/// Why an STF test could not run to a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StfError {
    /// The STF text does not parse.
    Parse(String),
    /// A command cannot be carried out (an unknown table, a name that resolves to several, a
    /// command the BMv2 driver fails on); the line and why.
    Command(u32, String),
}

impl core::fmt::Display for StfError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StfError::Parse(s) => write!(f, "STF: {s}"),
            StfError::Command(l, s) => write!(f, "STF line {l}: {s}"),
        }
    }
}

impl std::error::Error for StfError {}

/// The result of an STF run.
#[derive(Debug, Clone)]
pub struct StfRun {
    /// The judge's verdict.
    pub verdict: Verdict,
    /// Notes on commands the BMv2 CLI would have refused silently (entries not added).
    pub notes: Vec<String>,
    /// The switch after the run (counters, registers, trace).
    pub switch: Switch,
}

fn bytes_to_u128(b: &[u8]) -> Option<u128> {
    let b = trim(b);
    if b.len() > 16 {
        return None;
    }
    Some(b.iter().fold(0u128, |v, x| (v << 8) | u128::from(*x)))
}

fn trim(b: &[u8]) -> &[u8] {
    let i = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    &b[i..]
}

fn bytes_for(width: u32) -> usize {
    width.div_ceil(8) as usize
}

/// Run the STF `text` against `program` (one packet at a time, each to completion).
pub fn run_stf(program: Compiled, text: &str, trace: bool) -> Result<StfRun, StfError> {
    let lines = stf::parse(text).map_err(|e| StfError::Parse(e.to_string()))?;
    let mut exp = Expectations::from_lines(&lines);
    let mut sw =
        Switch::new(program).map_err(|e| StfError::Command(0, format!("const entries: {e}")))?;
    sw.set_trace(trace);
    let mut notes = Vec::new();
    let mut now: u64 = 1_000_000_000;
    let mut out = Vec::new();
    let mut nodes = 0u32;
    for l in &lines {
        let line = l.line;
        let cerr = |m: String| StfError::Command(line, m);
        match &l.cmd {
            Command::Packet { port, data } => {
                now += 1_000_000;
                out.clear();
                sw.process(*port, data, now, &mut out);
                for (p, f) in &out {
                    exp.receive(*p, f);
                }
            }
            Command::Expect { .. }
            | Command::Wait
            | Command::RemoveAll
            | Command::CheckCounter { .. } => {}
            Command::NoPacket => {
                return Err(cerr("`no_packet` is not a command the BMv2 driver runs".into()));
            }
            Command::Add { table, priority, keys, action, .. } => {
                now += 1_000_000_000;
                let t = resolve_table(&sw, table).map_err(cerr)?;
                let ti = &sw.program().tables[t];
                if ti.keys.iter().any(|k| k.kind == MatchKind::Range) {
                    return Err(cerr(format!(
                        "table {} has a range key: the BMv2 STF driver cannot add to it",
                        ti.name
                    )));
                }
                let names: Vec<&str> = ti.keys.iter().map(|k| k.name.as_str()).collect();
                let mut matches: Vec<FieldMatch> = ti
                    .keys
                    .iter()
                    .map(|k| match k.kind {
                        MatchKind::Exact => FieldMatch::Exact(0),
                        MatchKind::Ternary | MatchKind::Optional => {
                            FieldMatch::Ternary { value: 0, mask: 0 }
                        }
                        MatchKind::Lpm => FieldMatch::Lpm { value: 0, len: 0 },
                        MatchKind::Range => FieldMatch::Range { lo: 0, hi: 0 },
                    })
                    .collect();
                let mut ok = true;
                for (kname, kv) in keys {
                    let Some(i) = stf::key_field_matches(kname, &names) else {
                        return Err(cerr(format!("table {} has no key field {kname}", ti.name)));
                    };
                    let k = &ti.keys[i];
                    let nb = bytes_for(k.width);
                    let m = match k.kind {
                        MatchKind::Exact => {
                            match kv.number.to_bytes(nb).ok().and_then(|b| bytes_to_u128(&b)) {
                                Some(v) => FieldMatch::Exact(v & crate::ir::mask(k.width)),
                                None => {
                                    ok = false;
                                    FieldMatch::Exact(0)
                                }
                            }
                        }
                        MatchKind::Ternary | MatchKind::Optional => match kv.number.ternary() {
                            Ok(t) => match (bytes_to_u128(&t.value), bytes_to_u128(&t.mask)) {
                                (Some(v), Some(mk))
                                    if trim(&t.value).len() <= nb && trim(&t.mask).len() <= nb =>
                                {
                                    let wm = crate::ir::mask(k.width);
                                    FieldMatch::Ternary { value: v & mk & wm, mask: mk & wm }
                                }
                                _ => {
                                    ok = false;
                                    FieldMatch::Ternary { value: 0, mask: 0 }
                                }
                            },
                            Err(e) => return Err(cerr(format!("key {kname}: {e:?}"))),
                        },
                        MatchKind::Lpm => {
                            let lpm = kv.number.lpm(kv.prefix_len);
                            match bytes_to_u128(&lpm.value) {
                                Some(v) if trim(&lpm.value).len() <= nb && lpm.len <= k.width => {
                                    FieldMatch::Lpm {
                                        value: v & crate::ir::mask(k.width),
                                        len: lpm.len,
                                    }
                                }
                                _ => {
                                    ok = false;
                                    FieldMatch::Lpm { value: 0, len: 0 }
                                }
                            }
                        }
                        MatchKind::Range => FieldMatch::Range { lo: 0, hi: 0 },
                    };
                    matches[i] = m;
                }
                // Optional keys: a full mask is an exact value, no mask a wildcard.
                for (m, k) in matches.iter_mut().zip(&ti.keys) {
                    if k.kind == MatchKind::Optional
                        && let FieldMatch::Ternary { value, mask } = *m
                    {
                        *m = if mask == 0 {
                            FieldMatch::Optional(None)
                        } else {
                            FieldMatch::Optional(Some(value))
                        };
                    }
                }
                let uses_priority = sw.table_uses_priority(t);
                let prio = if uses_priority {
                    match priority {
                        Some(p) => Some(-stf::bmv2_priority(*p)),
                        None => {
                            return Err(cerr(format!(
                                "table {} needs a priority in `add`",
                                ti.name
                            )));
                        }
                    }
                } else {
                    None
                };
                let call = match resolve_action(&sw, t, action) {
                    Ok(c) => c,
                    Err(ActionErr::Fatal(m)) => return Err(cerr(m)),
                    Err(ActionErr::Refused(m)) => {
                        notes.push(format!("line {line}: entry not added: {m}"));
                        continue;
                    }
                };
                if !ok {
                    notes.push(format!(
                        "line {line}: entry not added: a key value does not fit its field"
                    ));
                    continue;
                }
                if let Err(e) = sw.table_add(t, matches, prio, call) {
                    notes.push(format!("line {line}: entry not added: {e}"));
                }
            }
            Command::SetDefault { table, action } => {
                now += 1_000_000_000;
                let t = resolve_table(&sw, table).map_err(cerr)?;
                let call = match resolve_action(&sw, t, action) {
                    Ok(c) => c,
                    Err(ActionErr::Fatal(m)) => return Err(cerr(m)),
                    Err(ActionErr::Refused(m)) => {
                        notes.push(format!("line {line}: default not set: {m}"));
                        continue;
                    }
                };
                if let Err(e) = sw.table_set_default(t, call) {
                    notes.push(format!("line {line}: default not set: {e}"));
                }
            }
            Command::MirroringAdd { session, port } => {
                sw.mirroring_add(*session, MirrorSession { port: Some(*port), mgrp: None });
            }
            Command::MirroringAddMc { session, mgid } => {
                sw.mirroring_add(*session, MirrorSession { port: None, mgrp: Some(*mgid as u16) });
            }
            Command::MirroringDelete { session } => {
                note(&mut notes, line, sw.mirroring_delete(*session))
            }
            Command::MirroringGet { .. }
            | Command::CounterRead { .. }
            | Command::RegisterRead { .. }
            | Command::MeterGetRates { .. } => {}
            Command::McMgrpCreate { mgid } => {
                note(&mut notes, line, sw.mc_group_create(*mgid as u16))
            }
            Command::McNodeCreate { rid, ports } => {
                let h = sw.mc_node_create(*rid as u16, ports.clone());
                debug_assert_eq!(h, nodes);
                nodes += 1;
            }
            Command::McNodeUpdate { handle, ports } => {
                note(&mut notes, line, sw.mc_node_update(*handle, ports.clone()))
            }
            Command::McNodeAssociate { mgid, handle } => {
                note(&mut notes, line, sw.mc_node_associate(*mgid as u16, *handle))
            }
            Command::CounterWrite { name, index, packets, bytes } => {
                let i = resolve_instance(&sw, name).map_err(cerr)?;
                let p = packets.to_u128().unwrap_or(0) as u64;
                let b = bytes.to_u128().unwrap_or(0) as u64;
                note(&mut notes, line, sw.counter_write(i, *index as usize, (p, b)));
            }
            Command::RegisterWrite { name, index, value } => {
                let i = resolve_instance(&sw, name).map_err(cerr)?;
                let v = value.to_u128().unwrap_or(0);
                note(&mut notes, line, sw.register_write(i, *index as usize, v));
            }
            Command::RegisterReset { name } => {
                let i = resolve_instance(&sw, name).map_err(cerr)?;
                note(&mut notes, line, sw.register_reset(i));
            }
            Command::MeterSetRates { name, index, rates } => {
                let i = resolve_instance(&sw, name).map_err(cerr)?;
                let r = parse_rates(rates).map_err(cerr)?;
                note(&mut notes, line, sw.meter_set_rates(i, Some(*index as usize), r.0, r.1));
            }
            Command::MeterArraySetRates { name, rates } => {
                let i = resolve_instance(&sw, name).map_err(cerr)?;
                let r = parse_rates(rates).map_err(cerr)?;
                note(&mut notes, line, sw.meter_set_rates(i, None, r.0, r.1));
            }
        }
    }
    Ok(StfRun { verdict: exp.verdict(), notes, switch: sw })
}

fn note(notes: &mut Vec<String>, line: u32, r: Result<(), RuntimeError>) {
    if let Err(e) = r {
        notes.push(format!("line {line}: {e}"));
    }
}

fn parse_rates(
    rates: &[stf::Rate],
) -> Result<(crate::algo::MeterRate, crate::algo::MeterRate), String> {
    if rates.len() != 2 {
        return Err("meters take two RATE:BURST pairs".into());
    }
    let p = |r: &stf::Rate| -> Result<crate::algo::MeterRate, String> {
        let rate: f64 = r.rate.parse().map_err(|_| format!("bad rate {}", r.rate))?;
        let burst: u64 = r.burst.parse().map_err(|_| format!("bad burst {}", r.burst))?;
        Ok(crate::algo::MeterRate::new(rate, burst))
    };
    Ok((p(&rates[0])?, p(&rates[1])?))
}

fn resolve_table(sw: &Switch, name: &str) -> Result<usize, String> {
    by_name("table", name, sw.program().tables.iter().map(|t| t.name.as_str()))
}

fn resolve_instance(sw: &Switch, name: &str) -> Result<usize, String> {
    by_name("extern instance", name, sw.program().instances.iter().map(|i| i.name.as_str()))
}

/// The driver's rule for names: an exact match, else the one name it is a suffix of.
fn by_name<'a>(
    what: &str,
    name: &str,
    names: impl Iterator<Item = &'a str>,
) -> Result<usize, String> {
    let names: Vec<&str> = names.collect();
    match stf::action_matches(name, &names) {
        Ok(i) => Ok(i),
        Err(v) if v.is_empty() => Err(format!("no {what} {name}")),
        Err(v) => Err(format!("{what} name {name} is ambiguous ({} matches)", v.len())),
    }
}

enum ActionErr {
    Fatal(String),
    Refused(String),
}

fn resolve_action(sw: &Switch, t: usize, a: &stf::ActionCall) -> Result<ActionCall, ActionErr> {
    let prog = sw.program();
    let ti = &prog.tables[t];
    let names: Vec<&str> =
        ti.actions.iter().map(|x| prog.actions[x.action as usize].name.as_str()).collect();
    let idx = match stf::action_matches(&a.name, &names) {
        Ok(i) => i,
        Err(v) if v.is_empty() => {
            return Err(ActionErr::Fatal(format!("table {} has no action {}", ti.name, a.name)));
        }
        Err(_) => return Err(ActionErr::Fatal(format!("action name {} is ambiguous", a.name))),
    };
    let action = &prog.actions[ti.actions[idx].action as usize];
    let mut args = Vec::new();
    for p in action.params.iter().filter(|p| p.data) {
        let Some((_, v)) = a.args.iter().find(|(n, _)| *n == p.name) else {
            return Err(ActionErr::Fatal(format!(
                "action {} needs argument {}",
                action.name, p.name
            )));
        };
        match v.to_bytes(bytes_for(p.width)).ok().and_then(|b| bytes_to_u128(&b)) {
            Some(x) => args.push(x & crate::ir::mask(p.width)),
            None => return Err(ActionErr::Refused(format!("{} does not fit {}", v, p.name))),
        }
    }
    for (n, _) in &a.args {
        if !action.params.iter().any(|p| p.data && p.name == *n) {
            return Err(ActionErr::Fatal(format!("action {} has no parameter {n}", action.name)));
        }
    }
    Ok(ActionCall { action: idx as u32, args })
}
