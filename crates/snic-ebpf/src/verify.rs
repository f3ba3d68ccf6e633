//! Verification before anything runs, by PREVAIL (an abstract interpreter for eBPF, the
//! verifier of eBPF for Windows, here as its Rust port, MIT): every packet access is proven
//! within `data`..`data_end` by the program's own checks, map values within their size, no
//! read of an uninitialised register or stack byte, helper arguments of the right types,
//! termination (loops bounded), and snic's own limit on instructions.
//!
//! We use PREVAIL rather than writing a verifier: it is sound by construction (abstract
//! interpretation over zones and intervals) and its refusals name the instruction and the
//! abstract state there, which is what a user needs to fix a program. Its verdicts differ from
//! the Linux verifier's on corner cases (it is more precise on some loops); the kernel
//! cross-check test pins the corpus where both must agree.

use crate::object::{Program, verifier_options};
use crate::platform::SnicPlatform;
use prevail::crab::ebpf_domain::DomainContext;
use prevail::crab::var_registry::VariableRegistry;
use prevail::ir::program::Program as CfgProgram;
use std::fmt;
use std::time::Duration;

/// Most instructions a program may have (the kernel's limit for privileged programs is
/// 1,000,000 *processed*; BPF_MAXINSNS for the program itself is 4096 unprivileged).
pub const MAX_INSNS: usize = 65_536;

/// A program's proof of safety: what the verifier established.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Instructions checked.
    pub insns: usize,
    /// Upper bound PREVAIL found on loop iterations (0: no loop).
    pub max_loop_count: i32,
    /// Time spent verifying.
    pub took: Duration,
    /// Indexes of the loads and stores whose base register holds the context pointer on every
    /// path that reaches them (the runtime rewrites them to its own context layout, as the
    /// kernel rewrites `xdp_md` accesses).
    pub ctx_accesses: Vec<usize>,
}

/// Why a program was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Instruction index of the first failing check, when there is one.
    pub insn: Option<usize>,
    /// What could not be proven (PREVAIL's assertion), or why the program is malformed.
    pub message: String,
    /// The abstract state before the failing instruction: register types and ranges, stack,
    /// packet size, one constraint per line (as the kernel's verifier log shows register
    /// states on the failing path).
    pub state: Vec<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.insn {
            Some(i) => write!(f, "instruction {i}: {}", self.message)?,
            None => write!(f, "{}", self.message)?,
        }
        if !self.state.is_empty() {
            write!(f, "\nstate before it:")?;
            for s in &self.state {
                write!(f, "\n  {s}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

fn refuse(message: impl Into<String>) -> Refusal {
    Refusal { insn: None, message: message.into(), state: Vec::new() }
}

/// Verifies one loaded program.
pub fn verify(program: &Program) -> Result<Verdict, Refusal> {
    let start = std::time::Instant::now();
    if program.insns.len() > MAX_INSNS {
        return Err(refuse(format!(
            "{} instructions, more than the limit of {MAX_INSNS}",
            program.insns.len()
        )));
    }
    let options = verifier_options();
    let mut raw = program.raw.clone();
    let mut platform = SnicPlatform::default();
    platform.prepare(&raw.info);
    // PREVAIL may panic on programs outside what it models; that is a refusal, not a crash.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut notes = Vec::new();
        let seq = prevail::ir::unmarshal::unmarshal(
            &raw.prog, &mut notes, &raw.info, &platform, &options,
        )
        .map_err(|e| refuse(format!("malformed program: {e}")))?;
        let cfg = CfgProgram::from_sequence(&seq, &mut raw.info, &platform, &options)
            .map_err(|e| refuse(format!("malformed program: {e}")))?;
        let ctx = DomainContext {
            program_info: &raw.info,
            program: &cfg,
            runtime: &options.runtime,
            options: &options,
            platform: &platform,
        };
        let mut registry = VariableRegistry::new();
        let result = prevail::fwd_analyzer::analyze(&cfg, &ctx, &mut registry);
        if !result.failed {
            // Every analysed copy of each load/store (one per call site of a function, as
            // PREVAIL inlines calls) says what its base register is.
            let mut seen: std::collections::BTreeMap<usize, Base> =
                std::collections::BTreeMap::new();
            for (label, pair) in &result.invariants {
                let Ok(pc) = usize::try_from(label.from) else { continue };
                if label.to != -1 || !label.special_label.is_empty() || pair.pre.is_bottom() {
                    continue;
                }
                let Some(insn) = program.insns.get(pc) else { continue };
                let base = match insn.class() {
                    crate::insn::class::LDX => insn.src,
                    crate::insn::class::ST | crate::insn::class::STX => insn.dst,
                    _ => continue,
                };
                let facts = pair.pre.to_set(&registry).to_string();
                let this = Base::of(&facts, base);
                let merged = match seen.get(&pc) {
                    None => this,
                    Some(&prev) if prev == this => this,
                    Some(_) => Base::Mixed,
                };
                seen.insert(pc, merged);
            }
            let mut ctx_accesses = Vec::new();
            for (&pc, &base) in &seen {
                match base {
                    Base::Other => {}
                    Base::Ctx => ctx_accesses.push(pc),
                    Base::MovedCtx => {
                        return Err(Refusal {
                            insn: Some(pc),
                            message: "access through a context pointer moved by arithmetic \
                                      (the context may only be accessed at constant offsets \
                                      from its start)"
                                .into(),
                            state: Vec::new(),
                        });
                    }
                    Base::Mixed => {
                        return Err(Refusal {
                            insn: Some(pc),
                            message: "the same instruction accesses the context on one path \
                                      (or call) and other memory on another"
                                .into(),
                            state: Vec::new(),
                        });
                    }
                }
            }
            ctx_accesses.sort_unstable();
            return Ok((result.max_loop_count, ctx_accesses));
        }
        let Some(error) = result.find_first_error() else {
            return Err(refuse("verification failed without a located error"));
        };
        let (insn, state) = match &error.label {
            Some(label) => {
                let state = result
                    .invariants
                    .get(label)
                    .map(|pair| pair.pre.to_set(&registry).to_string())
                    .unwrap_or_default();
                let lines = state
                    .lines()
                    .map(|l| l.trim().trim_end_matches(',').to_string())
                    .filter(|l| !l.is_empty() && l != "[" && l != "]")
                    .collect();
                (usize::try_from(label.from).ok(), lines)
            }
            None => (None, Vec::new()),
        };
        Err(Refusal { insn, message: error.message.clone(), state })
    }));
    let (max_loop_count, ctx_accesses) = match outcome {
        Ok(r) => r?,
        Err(_) => return Err(refuse("the verifier could not analyse this program")),
    };
    Ok(Verdict { insns: program.insns.len(), max_loop_count, took: start.elapsed(), ctx_accesses })
}

/// What a load's or store's base register holds, as PREVAIL's invariant says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    /// The context pointer itself (offset 0).
    Ctx,
    /// The context pointer plus a non-zero or unknown offset.
    MovedCtx,
    /// Never the context.
    Other,
    /// The context on some paths or copies, something else on others.
    Mixed,
}

impl Base {
    /// Classifies register `r` from the facts PREVAIL printed for one program point
    /// (`r2.type=ctx`, `r2.type in {ctx, stack}`, `r2.ctx_offset=0`, ...). Anything this does
    /// not recognise counts as possibly the context, so the access is refused rather than
    /// run unrewritten.
    fn of(facts: &str, r: u8) -> Base {
        let ty = fact(facts, &format!("r{r}.type"));
        let off = fact(facts, &format!("r{r}.ctx_offset"));
        let is_word =
            |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        match ty {
            None => Base::Other,
            Some("=ctx") => match off {
                Some("=0") => Base::Ctx,
                _ => Base::MovedCtx,
            },
            Some(t) if t.starts_with(" in {") => {
                let kinds = t.trim_start_matches(" in {").trim_end_matches('}');
                if kinds.split(',').all(|k| is_word(k.trim()) && k.trim() != "ctx") {
                    Base::Other
                } else {
                    Base::Mixed
                }
            }
            Some(t) if t.strip_prefix('=').is_some_and(|k| is_word(k) && k != "ctx") => Base::Other,
            Some(_) => Base::Mixed,
        }
    }
}

/// The text after `name` in its fact (`name=...` up to the next `,`/`]`/newline, or
/// `name in {...}` up to the closing brace), where `name` starts a fact.
fn fact<'a>(facts: &'a str, name: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(i) = facts[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let starts_fact = facts[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || c == ',' || c == '[');
        let rest = &facts[from..];
        if !starts_fact || !(rest.starts_with('=') || rest.starts_with(" in {")) {
            continue;
        }
        let end = if rest.starts_with(" in {") {
            rest.find('}').map_or(rest.len(), |e| e + 1)
        } else {
            rest.find([',', ']', '\n']).unwrap_or(rest.len())
        };
        return Some(rest[..end].trim_end());
    }
    None
}

/// [`Base::of`] by name, for tests.
#[cfg(test)]
pub(crate) fn classify_base(facts: &str, r: u8) -> &'static str {
    match Base::of(facts, r) {
        Base::Ctx => "ctx",
        Base::MovedCtx => "moved ctx",
        Base::Other => "other",
        Base::Mixed => "mixed",
    }
}
