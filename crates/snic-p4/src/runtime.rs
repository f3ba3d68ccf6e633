//! BMv2 `simple_switch_CLI` commands applied to running switches, sans-IO.
//!
//! [`apply`] executes one parsed [`Command`] against a [`Switch`] and returns the text
//! `simple_switch_CLI` prints for it ("Entry has been added with handle 0", a table dump, a
//! counter's `BmCounterValue(packets=.., bytes=..)`, ...). [`apply_all`] does the same against
//! the switches of several workers running one program: every change is made on all of them,
//! and reads sum what is summable (indexed and direct counters). [`apply_file`] runs an entries
//! file, stopping at the first error and naming its line.
//!
//! Names: a table, action, counter, meter, register or calculation is found by its exact
//! control-plane name (`MyIngress.ipv4_lpm`) or, as `simple_switch_CLI` allows, by any suffix
//! that starts after a `.` and names one object only (`ipv4_lpm`). Action parameters are given
//! by position and read with [`cli::param_value`]; keys with [`cli::key_match`] for the table's
//! key kinds and widths. Tables with a ternary, range or optional key take a priority after the
//! action parameters ([`cli::split_priority`]); BMv2's CLI priorities let the *smaller* number
//! win, the [`Switch`]'s let the larger win, so the priority is negated on the way in and back
//! on the way out.
//!
//! A refused command changes nothing: every name, key and value is resolved and checked
//! before the first switch is touched, the switch itself refuses before it changes anything,
//! and with several switches the first one decides (their control-plane state is the same,
//! as only the control plane changes it).

use core::fmt;

use crate::algo::{CrcParams, CrcWidth, MeterRate};
use crate::cli::{self, CliError, Command};
use crate::ir::{ActionCall, InstanceKind};
use crate::table::{FieldMatch, MatchKind};
use crate::v1model::{EntryView, Indirect, MirrorSession, RuntimeError, Switch};

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ApplyError {
    /// No object of that kind and name (or unique suffix).
    NotFound {
        /// What was looked for (`table`, `action`, `counter`, ...).
        what: &'static str,
        /// The name given.
        name: String,
    },
    /// The name is a suffix of several objects' names.
    Ambiguous {
        /// What was looked for.
        what: &'static str,
        /// The name given.
        name: String,
        /// The names it could mean.
        candidates: Vec<String>,
    },
    /// Wrong number of keys or action parameters, or an argument the command cannot take.
    Arguments(String),
    /// A key, parameter or priority does not read for its field.
    Value(CliError),
    /// The switch refused the change (duplicate key, full table, const entries, ...).
    Refused(RuntimeError),
    /// A command snic parses but does not carry out (LAGs, `help` topics it lacks, ...).
    Unsupported(String),
    /// Several switches answered differently to a change the first accepted (their
    /// control-plane state had diverged; never expected).
    Diverged(String),
    /// No switch to apply the command to.
    NoSwitch,
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::NotFound { what, name } => write!(f, "no {what} named {name}"),
            ApplyError::Ambiguous { what, name, candidates } => {
                write!(f, "{what} name {name} is ambiguous: {}", candidates.join(", "))
            }
            ApplyError::Arguments(s) => f.write_str(s),
            ApplyError::Value(e) => write!(f, "{e}"),
            ApplyError::Refused(e) => write!(f, "refused: {e}"),
            ApplyError::Unsupported(s) => write!(f, "not supported: {s}"),
            ApplyError::Diverged(s) => write!(f, "workers diverged: {s}"),
            ApplyError::NoSwitch => f.write_str("no switch to apply the command to"),
        }
    }
}

impl std::error::Error for ApplyError {}

impl From<RuntimeError> for ApplyError {
    fn from(e: RuntimeError) -> Self {
        ApplyError::Refused(e)
    }
}

impl From<CliError> for ApplyError {
    fn from(e: CliError) -> Self {
        ApplyError::Value(e)
    }
}

/// Why an entries file stopped: the line, and what was wrong there.
#[derive(Debug, Clone, PartialEq)]
pub struct FileError {
    /// 1-based line number.
    pub line: u32,
    /// What went wrong.
    pub kind: FileErrorKind,
    /// What the commands before it printed.
    pub output: String,
}

/// What went wrong on a line of an entries file.
#[derive(Debug, Clone, PartialEq)]
pub enum FileErrorKind {
    /// The line does not parse (nothing of the file was applied).
    Parse(CliError),
    /// The command was refused (the lines before it were applied).
    Apply(ApplyError),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FileErrorKind::Parse(e) => write!(f, "line {}: {}", self.line, e.message),
            FileErrorKind::Apply(e) => write!(f, "line {}: {e}", self.line),
        }
    }
}

impl std::error::Error for FileError {}

/// Execute `cmd` against `sw`; returns what `simple_switch_CLI` prints (possibly nothing).
pub fn apply(sw: &mut Switch, cmd: &Command) -> Result<String, ApplyError> {
    apply_all(&mut [sw], cmd)
}

/// Execute `cmd` against every switch of `sws` (the workers of one program): changes go to
/// all of them, or, when the first refuses, to none; counters read as the sum over them.
pub fn apply_all(sws: &mut [&mut Switch], cmd: &Command) -> Result<String, ApplyError> {
    if sws.is_empty() {
        return Err(ApplyError::NoSwitch);
    }
    Exec { sws }.run(cmd)
}

/// Parse and run an entries file (one command a line, `#` comments) against `sw`. A line that
/// does not parse stops it before anything is applied; a refused command stops it there (the
/// commands before it stay applied, as with `simple_switch_CLI < file`). Returns every
/// command's output, one after the other.
pub fn apply_file(sw: &mut Switch, text: &str) -> Result<String, FileError> {
    apply_file_all(&mut [sw], text)
}

/// [`apply_file`] against every switch of `sws`.
pub fn apply_file_all(sws: &mut [&mut Switch], text: &str) -> Result<String, FileError> {
    let cmds = cli::parse_file(text).map_err(|e| FileError {
        line: e.line.unwrap_or(0),
        kind: FileErrorKind::Parse(e),
        output: String::new(),
    })?;
    let mut output = String::new();
    for (line, cmd) in cmds {
        match apply_all(sws, &cmd) {
            Ok(s) => {
                output.push_str(&s);
                if !s.is_empty() && !s.ends_with('\n') {
                    output.push('\n');
                }
            }
            Err(e) => return Err(FileError { line, kind: FileErrorKind::Apply(e), output }),
        }
    }
    Ok(output)
}

/// The index of `name` among `names`: an exact match, else the one name that ends with
/// `.name`.
fn resolve<'a>(
    what: &'static str,
    name: &str,
    names: impl Iterator<Item = &'a str> + Clone,
) -> Result<usize, ApplyError> {
    if let Some(i) = names.clone().position(|n| n == name) {
        return Ok(i);
    }
    let hits: Vec<(usize, &str)> = names
        .enumerate()
        .filter(|(_, n)| {
            n.len() > name.len() && n.ends_with(name) && {
                n.as_bytes()[n.len() - name.len() - 1] == b'.'
            }
        })
        .collect();
    match hits.as_slice() {
        [(i, _)] => Ok(*i),
        [] => Err(ApplyError::NotFound { what, name: name.to_string() }),
        many => Err(ApplyError::Ambiguous {
            what,
            name: name.to_string(),
            candidates: many.iter().map(|(_, n)| n.to_string()).collect(),
        }),
    }
}

fn hex_bytes(v: u128, width: u32) -> String {
    let n = width.div_ceil(8).max(1) as usize;
    let bytes = v.to_be_bytes();
    bytes[16 - n.min(16)..].iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

fn hex_plain(v: u128, width: u32) -> String {
    let n = width.div_ceil(8).max(1) as usize;
    format!("{v:0w$x}", w = n * 2)
}

/// BMv2's name for a table's match type.
fn table_match_type(kinds: impl Iterator<Item = MatchKind>) -> &'static str {
    let mut t = "exact";
    for k in kinds {
        t = match (t, k) {
            (_, MatchKind::Range) | ("range", _) => "range",
            (_, MatchKind::Ternary | MatchKind::Optional) | ("ternary", _) => "ternary",
            (_, MatchKind::Lpm) | ("lpm", _) => "lpm",
            _ => t,
        };
    }
    t
}

struct Exec<'s, 'w> {
    sws: &'s mut [&'w mut Switch],
}

impl Exec<'_, '_> {
    fn sw(&self) -> &Switch {
        self.sws[0]
    }

    /// Run a change on every switch: the first decides; the others must agree.
    fn change<T: PartialEq + fmt::Debug>(
        &mut self,
        mut f: impl FnMut(&mut Switch) -> Result<T, RuntimeError>,
    ) -> Result<T, ApplyError> {
        let (first, rest) = self.sws.split_first_mut().ok_or(ApplyError::NoSwitch)?;
        let r = f(first)?;
        for (k, sw) in rest.iter_mut().enumerate() {
            match f(sw) {
                Ok(x) if x == r => {}
                Ok(x) => {
                    return Err(ApplyError::Diverged(format!(
                        "worker {} answered {x:?}, worker 0 {r:?}",
                        k + 1
                    )));
                }
                Err(e) => {
                    return Err(ApplyError::Diverged(format!("worker {} refused: {e}", k + 1)));
                }
            }
        }
        Ok(r)
    }

    fn table(&self, name: &str) -> Result<usize, ApplyError> {
        resolve("table", name, self.sw().program().tables.iter().map(|t| t.name.as_str()))
    }

    fn action_name(&self, t: usize, a: u32) -> &str {
        let p = self.sw().program();
        p.tables[t]
            .actions
            .get(a as usize)
            .map(|ta| p.actions[ta.action as usize].name.as_str())
            .unwrap_or("?")
    }

    /// The action `name` of table `t` with its parameters read from `params`.
    fn call(&self, t: usize, name: &str, params: &[String]) -> Result<ActionCall, ApplyError> {
        let p = self.sw().program();
        let ti = &p.tables[t];
        let idx = resolve(
            "action",
            name,
            ti.actions.iter().map(|a| p.actions[a.action as usize].name.as_str()),
        )
        .map_err(|e| match e {
            ApplyError::NotFound { name, .. } => ApplyError::NotFound {
                what: "action",
                name: format!("{name} in table {}", ti.name),
            },
            other => other,
        })?;
        let act = &p.actions[ti.actions[idx].action as usize];
        let data: Vec<_> = act.params.iter().filter(|x| x.data).collect();
        if data.len() != params.len() {
            return Err(ApplyError::Arguments(format!(
                "action {} takes {} parameter(s) ({}), got {}",
                act.name,
                data.len(),
                data.iter().map(|x| x.name.as_str()).collect::<Vec<_>>().join(", "),
                params.len()
            )));
        }
        let mut args = Vec::with_capacity(data.len());
        for (x, text) in data.iter().zip(params) {
            args.push(
                cli::param_value(text, x.width)
                    .map_err(|e| ApplyError::Value(prefix(e, &format!("parameter {}", x.name))))?,
            );
        }
        Ok(ActionCall { action: idx as u32, args })
    }

    fn keys(&self, t: usize, keys: &[String]) -> Result<Vec<FieldMatch>, ApplyError> {
        let ti = &self.sw().program().tables[t];
        if keys.len() != ti.keys.len() {
            return Err(ApplyError::Arguments(format!(
                "table {} has {} key field(s) ({}), got {}",
                ti.name,
                ti.keys.len(),
                ti.keys
                    .iter()
                    .map(|k| format!("{}: {}", k.name, k.kind))
                    .collect::<Vec<_>>()
                    .join(", "),
                keys.len()
            )));
        }
        ti.keys
            .iter()
            .zip(keys)
            .map(|(k, text)| {
                cli::key_match(text, k.kind, k.width)
                    .map_err(|e| ApplyError::Value(prefix(e, &format!("key {}", k.name))))
            })
            .collect()
    }

    fn instance(&self, what: &'static str, name: &str) -> Result<usize, ApplyError> {
        let p = self.sw().program();
        resolve(what, name, p.instances.iter().map(|i| i.name.as_str()))
    }

    /// The table using direct instance `inst` (as `counters =` or `meters =`).
    fn direct_table(&self, inst: usize, meter: bool) -> Result<usize, ApplyError> {
        let p = self.sw().program();
        p.tables
            .iter()
            .position(|t| {
                let d = if meter { t.direct_meter } else { t.direct_counter };
                d == Some(inst as u32)
            })
            .ok_or_else(|| {
                ApplyError::Arguments(format!("{} is attached to no table", p.instances[inst].name))
            })
    }

    /// The widths of the data parameters of table `t`'s action `a` (empty for no such action).
    fn data_widths(&self, t: usize, a: u32) -> Vec<u32> {
        let p = self.sw().program();
        p.tables[t]
            .actions
            .get(a as usize)
            .map(|ta| {
                p.actions[ta.action as usize]
                    .params
                    .iter()
                    .filter(|x| x.data)
                    .map(|x| x.width)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn call_text(&self, t: usize, call: &ActionCall) -> (String, String) {
        let widths = self.data_widths(t, call.action);
        let args: Vec<String> = call
            .args
            .iter()
            .enumerate()
            .map(|(i, v)| hex_bytes(*v, widths.get(i).copied().unwrap_or(128)))
            .collect();
        (self.action_name(t, call.action).to_string(), args.join("\t"))
    }

    fn key_line(&self, t: usize, m: &[FieldMatch]) -> String {
        let ti = &self.sw().program().tables[t];
        let parts: Vec<String> = ti
            .keys
            .iter()
            .zip(m)
            .map(|(k, m)| {
                let w = k.width;
                match *m {
                    FieldMatch::Exact(v) => format!("EXACT-{}", hex_bytes(v, w)),
                    FieldMatch::Lpm { value, len } => format!("LPM-{}/{len}", hex_bytes(value, w)),
                    FieldMatch::Ternary { value, mask } => {
                        format!("TERNARY-{} &&& {}", hex_bytes(value, w), hex_bytes(mask, w))
                    }
                    FieldMatch::Range { lo, hi } => {
                        format!("RANGE-{} -> {}", hex_bytes(lo, w), hex_bytes(hi, w))
                    }
                    FieldMatch::Optional(Some(v)) => format!("OPTIONAL-{}", hex_bytes(v, w)),
                    FieldMatch::Optional(None) => "OPTIONAL-*".to_string(),
                }
            })
            .collect();
        parts.join("\t")
    }

    fn entry_dump(&self, t: usize, e: &EntryView, out: &mut String) {
        use fmt::Write as _;
        let ti = &self.sw().program().tables[t];
        let _ = writeln!(out, "Dumping entry {:#x}", e.handle);
        let _ = writeln!(out, "Match key:");
        let name_w = ti.keys.iter().map(|k| k.name.len()).max().unwrap_or(0).max(20);
        for (k, m) in ti.keys.iter().zip(&e.matches) {
            let w = k.width;
            let v = match *m {
                FieldMatch::Exact(v) => format!("EXACT     {}", hex_plain(v, w)),
                FieldMatch::Lpm { value, len } => {
                    format!("LPM       {}/{len}", hex_plain(value, w))
                }
                FieldMatch::Ternary { value, mask } => {
                    format!("TERNARY   {} &&& {}", hex_plain(value, w), hex_plain(mask, w))
                }
                FieldMatch::Range { lo, hi } => {
                    format!("RANGE     {} -> {}", hex_plain(lo, w), hex_plain(hi, w))
                }
                FieldMatch::Optional(Some(v)) => format!("OPTIONAL  {}", hex_plain(v, w)),
                FieldMatch::Optional(None) => "OPTIONAL  *".to_string(),
            };
            let _ = writeln!(out, "* {:<name_w$}: {v}", k.name);
        }
        if let Some(p) = e.priority {
            let _ = writeln!(out, "Priority: {}", p.saturating_neg());
        }
        self.action_entry(t, &e.call, out);
    }

    /// `Action entry: NAME - DATA, DATA` (the data in plain hex, as BMv2 dumps it).
    fn action_entry(&self, t: usize, call: &ActionCall, out: &mut String) {
        use fmt::Write as _;
        let widths = self.data_widths(t, call.action);
        let data: Vec<String> = call
            .args
            .iter()
            .enumerate()
            .map(|(i, v)| hex_plain(*v, widths.get(i).copied().unwrap_or(128)))
            .collect();
        let _ = writeln!(
            out,
            "Action entry: {} - {}",
            self.action_name(t, call.action),
            data.join(", ")
        );
    }

    fn counter_sum(&self, f: impl Fn(&Switch) -> Result<(u64, u64), RuntimeError>) -> CounterSum {
        let mut s = (0u64, 0u64);
        for sw in self.sws.iter() {
            match f(sw) {
                Ok((p, b)) => {
                    s.0 = s.0.saturating_add(p);
                    s.1 = s.1.saturating_add(b);
                }
                Err(e) => return Err(ApplyError::Refused(e)),
            }
        }
        Ok(s)
    }

    fn rates(&self, rates: &[cli::MeterRate]) -> Result<(MeterRate, MeterRate), ApplyError> {
        match rates {
            [c, p] => Ok((
                MeterRate::new(c.rate, u64::from(c.burst)),
                MeterRate::new(p.rate, u64::from(p.burst)),
            )),
            _ => Err(ApplyError::Arguments(format!(
                "v1model meters take 2 rates (committed, peak), got {}",
                rates.len()
            ))),
        }
    }

    fn calc(&self, name: &str) -> Result<usize, ApplyError> {
        resolve("calculation", name, self.sw().program().calcs.iter().map(|c| c.0.as_str()))
    }

    fn run(&mut self, cmd: &Command) -> Result<String, ApplyError> {
        use fmt::Write as _;
        let mut out = String::new();
        match cmd {
            Command::TableAdd { table, action, keys, params } => {
                let t = self.table(table)?;
                let (params, prio) = cli::split_priority(params, self.sw().table_uses_priority(t))?;
                let call = self.call(t, action, params)?;
                let matches = self.keys(t, keys)?;
                let prio = prio.map(|p| -i64::from(p));
                let h = self.change(|sw| sw.table_add(t, matches.clone(), prio, call.clone()))?;
                let ti = &self.sw().program().tables[t];
                let kind = table_match_type(ti.keys.iter().map(|k| k.kind));
                let (_, args) = self.call_text(t, &call);
                let _ = writeln!(out, "Adding entry to {kind} match table {table}");
                let _ = writeln!(out, "match key:           {}", self.key_line(t, &matches));
                let _ = writeln!(out, "action:              {action}");
                let _ = writeln!(out, "runtime data:        {args}");
                let _ = writeln!(out, "Entry has been added with handle {h}");
            }
            Command::TableDelete { table, handle } => {
                let t = self.table(table)?;
                let h = u64::from(*handle);
                self.change(|sw| sw.table_delete(t, h))?;
                let _ = writeln!(out, "Deleting entry {h} from {table}");
            }
            Command::TableSetTimeout { table, handle, ms } => {
                let t = self.table(table)?;
                let h = u64::from(*handle);
                let ttl = (*ms > 0).then(|| u64::from(*ms) * 1_000_000);
                self.change(|sw| sw.table_set_entry_ttl(t, h, ttl))?;
                let _ = writeln!(out, "Setting a {ms} ms timeout for entry {h}");
            }
            Command::TableModify { table, action, handle, params } => {
                let t = self.table(table)?;
                let call = self.call(t, action, params)?;
                let h = u64::from(*handle);
                self.change(|sw| sw.table_modify(t, h, call.clone()))?;
                let ti = &self.sw().program().tables[t];
                let kind = table_match_type(ti.keys.iter().map(|k| k.kind));
                let _ = writeln!(out, "Modifying entry {h} for {kind} match table {table}");
            }
            Command::TableSetDefault { table, action, params } => {
                let t = self.table(table)?;
                let call = self.call(t, action, params)?;
                self.change(|sw| sw.table_set_default(t, call.clone()))?;
                let (_, args) = self.call_text(t, &call);
                let _ = writeln!(out, "Setting default action of {table}");
                let _ = writeln!(out, "action:              {action}");
                let _ = writeln!(out, "runtime data:        {args}");
            }
            Command::TableResetDefault { table } => {
                let t = self.table(table)?;
                self.change(|sw| sw.table_reset_default(t))?;
            }
            Command::TableClear { table } => {
                let t = self.table(table)?;
                self.change(|sw| sw.table_clear(t))?;
            }
            Command::TableDump { table } => {
                let t = self.table(table)?;
                let _ = writeln!(out, "==========");
                let _ = writeln!(out, "TABLE ENTRIES");
                for e in self.sw().table_entries(t) {
                    let _ = writeln!(out, "**********");
                    self.entry_dump(t, &e, &mut out);
                }
                let _ = writeln!(out, "==========");
                let _ = writeln!(out, "Dumping default entry");
                match self.sw().table_default(t) {
                    Some(d) => self.action_entry(t, &d, &mut out),
                    None => {
                        let _ = writeln!(out, "EMPTY");
                    }
                }
                let _ = writeln!(out, "==========");
            }
            Command::TableDumpEntry { table, handle } => {
                let t = self.table(table)?;
                let h = u64::from(*handle);
                let e = self.sw().table_entries(t).into_iter().find(|e| e.handle == h).ok_or(
                    ApplyError::Refused(RuntimeError::NotFound(format!("entry handle {h}"))),
                )?;
                self.entry_dump(t, &e, &mut out);
            }
            Command::TableNumEntries { table } => {
                let t = self.table(table)?;
                let _ = writeln!(out, "{}", self.sw().table_entries(t).len());
            }
            Command::TableInfo { table } => {
                let t = self.table(table)?;
                self.table_info(t, &mut out);
            }
            Command::ActProfCreateMember { profile, action, params } => {
                let inst = self.instance("action profile", profile)?;
                let p = self.sw().program();
                let aid = resolve("action", action, p.actions.iter().map(|a| a.name.as_str()))?;
                let act = &p.actions[aid];
                let data: Vec<_> = act.params.iter().filter(|x| x.data).collect();
                if data.len() != params.len() {
                    return Err(ApplyError::Arguments(format!(
                        "action {} takes {} parameter(s), got {}",
                        act.name,
                        data.len(),
                        params.len()
                    )));
                }
                let mut args = Vec::new();
                for (x, text) in data.iter().zip(params) {
                    args.push(cli::param_value(text, x.width).map_err(|e| {
                        ApplyError::Value(prefix(e, &format!("parameter {}", x.name)))
                    })?);
                }
                let m =
                    self.change(|sw| sw.act_prof_create_member(inst, aid as u32, args.clone()))?;
                let _ = writeln!(out, "Member has been created with handle {m}");
            }
            Command::ActProfDeleteMember { profile, member } => {
                let inst = self.instance("action profile", profile)?;
                self.change(|sw| sw.act_prof_delete_member(inst, *member))?;
            }
            Command::ActProfCreateGroup { profile } => {
                let inst = self.instance("action profile", profile)?;
                let g = self.change(|sw| sw.act_prof_create_group(inst))?;
                let _ = writeln!(out, "Group has been created with handle {g}");
            }
            Command::ActProfDeleteGroup { profile, group } => {
                let inst = self.instance("action profile", profile)?;
                self.change(|sw| sw.act_prof_delete_group(inst, *group))?;
            }
            Command::ActProfAddMemberToGroup { profile, member, group } => {
                let inst = self.instance("action profile", profile)?;
                self.change(|sw| sw.act_prof_add_member_to_group(inst, *member, *group))?;
            }
            Command::ActProfRemoveMemberFromGroup { profile, member, group } => {
                let inst = self.instance("action profile", profile)?;
                self.change(|sw| sw.act_prof_remove_member_from_group(inst, *member, *group))?;
            }
            Command::TableIndirectAdd { table, keys, target, group, priority } => {
                let t = self.table(table)?;
                let matches = self.keys(t, keys)?;
                let prio = priority.map(|p| -i64::from(p));
                let ind = if *group { Indirect::Group(*target) } else { Indirect::Member(*target) };
                let h = self.change(|sw| sw.table_indirect_add(t, matches.clone(), prio, ind))?;
                let _ = writeln!(out, "Entry has been added with handle {h}");
            }
            Command::TableIndirectSetDefault { table, target, group } => {
                let t = self.table(table)?;
                let ind = if *group { Indirect::Group(*target) } else { Indirect::Member(*target) };
                self.change(|sw| sw.table_indirect_set_default(t, ind))?;
            }
            Command::PvsAdd { name, value } => {
                let p = self.sw().program();
                let vs = resolve("value set", name, p.value_sets.iter().map(|v| v.name.as_str()))?;
                let width = p.value_sets[vs].width;
                let (v, m) = match cli::key_match(value, crate::table::MatchKind::Ternary, width)
                    .map_err(|e| ApplyError::Value(prefix(e, "value")))?
                {
                    FieldMatch::Ternary { value, mask } => (value, mask),
                    FieldMatch::Exact(v) => (v, crate::ir::mask(width)),
                    _ => {
                        return Err(ApplyError::Arguments(
                            "a value set takes VALUE or VALUE&&&MASK".into(),
                        ));
                    }
                };
                self.change(|sw| sw.value_set_add(vs, v, m))?;
            }
            Command::PvsClear { name } => {
                let p = self.sw().program();
                let vs = resolve("value set", name, p.value_sets.iter().map(|v| v.name.as_str()))?;
                self.change(|sw| sw.value_set_clear(vs))?;
            }
            Command::ShowTables => {
                for t in 0..self.sw().program().tables.len() {
                    self.table_info_line(t, &mut out);
                }
            }
            Command::ShowActions => {
                let p = self.sw().program();
                for a in &p.actions {
                    let params: Vec<String> = a
                        .params
                        .iter()
                        .filter(|x| x.data)
                        .map(|x| format!("{}({})", x.name, x.width))
                        .collect();
                    let _ = writeln!(out, "{:<24} [{}]", a.name, params.join(",\t"));
                }
            }
            Command::CounterRead { name, index } => {
                let i = self.instance("counter", name)?;
                let idx = *index as usize;
                let (p, b) = match self.sw().program().instances[i].kind {
                    InstanceKind::Counter { .. } => self.counter_sum(|s| s.counter_read(i, idx))?,
                    InstanceKind::DirectCounter(_) => {
                        let t = self.direct_table(i, false)?;
                        let r =
                            self.counter_sum(|s| s.direct_counter_read(t, u64::from(*index)))?;
                        let tn = &self.sw().program().tables[t].name;
                        let _ = writeln!(out, "this is the direct counter for table {tn}");
                        r
                    }
                    _ => return Err(not_a("counter", name)),
                };
                let _ = writeln!(out, "{name}[{index}]=  BmCounterValue(packets={p}, bytes={b})");
            }
            Command::CounterReset { name } => {
                let i = self.instance("counter", name)?;
                match self.sw().program().instances[i].kind {
                    InstanceKind::Counter { .. } | InstanceKind::DirectCounter(_) => {}
                    _ => return Err(not_a("counter", name)),
                }
                self.change(|sw| sw.counter_reset(i))?;
                if let Ok(t) = self.direct_table(i, false) {
                    let tn = &self.sw().program().tables[t].name;
                    let _ = writeln!(out, "this is the direct counter for table {tn}");
                }
            }
            Command::CounterWrite { name, index, packets, bytes } => {
                let i = self.instance("counter", name)?;
                match self.sw().program().instances[i].kind {
                    InstanceKind::Counter { .. } => {}
                    InstanceKind::DirectCounter(_) => {
                        return Err(ApplyError::Unsupported(
                            "counter_write on a direct counter".into(),
                        ));
                    }
                    _ => return Err(not_a("counter", name)),
                }
                let idx = *index as usize;
                // Reads sum over the switches: the first holds the value, the others zero.
                self.sws[0].counter_write(i, idx, (*packets, *bytes))?;
                for (k, sw) in self.sws.iter_mut().enumerate().skip(1) {
                    sw.counter_write(i, idx, (0, 0))
                        .map_err(|e| ApplyError::Diverged(format!("worker {k}: {e}")))?;
                }
                let _ = writeln!(out, "{name}[{index}] has been updated");
            }
            Command::RegisterRead { name, index } => {
                let i = self.instance("register", name)?;
                let (size, _) = self.register(i, name)?;
                let n = name;
                match index {
                    Some(x) => {
                        let x = *x as usize;
                        let vals = self
                            .sws
                            .iter()
                            .map(|s| s.register_read(i, x))
                            .collect::<Result<Vec<_>, _>>()?;
                        let _ = write!(out, "{n}[{x}]= {}", vals[0]);
                        if vals.iter().any(|v| *v != vals[0]) {
                            let all: Vec<String> = vals.iter().map(u128::to_string).collect();
                            let _ = write!(out, "  (per worker: {})", all.join(", "));
                        }
                        out.push('\n');
                    }
                    None => {
                        let vals: Vec<String> = (0..size)
                            .map(|x| self.sw().register_read(i, x).map(|v| v.to_string()))
                            .collect::<Result<_, _>>()?;
                        let _ = writeln!(out, "{n}= {}", vals.join(", "));
                        if self.sws.len() > 1 {
                            let _ = writeln!(
                                out,
                                "(worker 0 of {}; registers are per worker)",
                                self.sws.len()
                            );
                        }
                    }
                }
            }
            Command::RegisterWrite { name, index, value } => {
                let i = self.instance("register", name)?;
                self.register(i, name)?;
                let (x, v) = (*index as usize, *value);
                self.change(|sw| sw.register_write(i, x, v))?;
            }
            Command::RegisterReset { name } => {
                let i = self.instance("register", name)?;
                self.register(i, name)?;
                self.change(|sw| sw.register_reset(i))?;
            }
            Command::MeterSetRates { name, index, rates } => {
                let i = self.instance("meter", name)?;
                let (c, p) = self.rates(rates)?;
                match self.sw().program().instances[i].kind {
                    InstanceKind::Meter { .. } => {
                        let x = *index as usize;
                        self.change(|sw| sw.meter_set_rates(i, Some(x), c, p))?;
                    }
                    InstanceKind::DirectMeter { .. } => {
                        let t = self.direct_table(i, true)?;
                        let h = u64::from(*index);
                        self.change(|sw| sw.direct_meter_set_rates(t, h, c, p))?;
                    }
                    _ => return Err(not_a("meter", name)),
                }
            }
            Command::MeterArraySetRates { name, rates } => {
                let i = self.instance("meter", name)?;
                let (c, p) = self.rates(rates)?;
                match self.sw().program().instances[i].kind {
                    InstanceKind::Meter { .. } => {
                        self.change(|sw| sw.meter_set_rates(i, None, c, p))?;
                    }
                    _ => return Err(not_a("meter array", name)),
                }
            }
            Command::MeterGetRates { name, index } => {
                let i = self.instance("meter", name)?;
                let r = match self.sw().program().instances[i].kind {
                    InstanceKind::Meter { .. } => self.sw().meter_get_rates(i, *index as usize)?,
                    InstanceKind::DirectMeter { .. } => {
                        let t = self.direct_table(i, true)?;
                        self.sw().direct_meter_get_rates(t, u64::from(*index))?
                    }
                    _ => return Err(not_a("meter", name)),
                };
                match r {
                    Some((c, p)) => {
                        for (k, r) in [c, p].iter().enumerate() {
                            let _ = writeln!(
                                out,
                                "{k}: info rate = {}, burst size = {}",
                                r.per_us, r.burst
                            );
                        }
                    }
                    None => {
                        let _ = writeln!(out, "no rates set");
                    }
                }
            }
            Command::McMgrpCreate { mgrp } => {
                let g = *mgrp;
                self.change(|sw| sw.mc_group_create(g))?;
                let _ = writeln!(out, "Creating multicast group {g}");
            }
            Command::McMgrpDestroy { mgrp } => {
                let g = *mgrp;
                self.change(|sw| sw.mc_group_destroy(g))?;
                let _ = writeln!(out, "Destroying multicast group {g}");
            }
            Command::McNodeCreate { rid, ports, lags } => {
                no_lags(lags)?;
                let r = *rid;
                let h = self.change(|sw| Ok(sw.mc_node_create(r, ports.clone())))?;
                let _ = writeln!(
                    out,
                    "Creating node with rid {r} , port map {} and lag map ",
                    port_map(ports)
                );
                let _ = writeln!(out, "node was created with handle {h}");
            }
            Command::McNodeUpdate { handle, ports, lags } => {
                no_lags(lags)?;
                let h = *handle;
                self.change(|sw| sw.mc_node_update(h, ports.clone()))?;
                let _ = writeln!(
                    out,
                    "Updating node {h} with port map {} and lag map ",
                    port_map(ports)
                );
            }
            Command::McNodeAssociate { mgrp, handle } => {
                let (g, h) = (*mgrp, *handle);
                self.change(|sw| sw.mc_node_associate(g, h))?;
                let _ = writeln!(out, "Associating node {h} to multicast group {g}");
            }
            Command::McNodeDissociate { mgrp, handle } => {
                let (g, h) = (*mgrp, *handle);
                self.change(|sw| sw.mc_node_dissociate(g, h))?;
                let _ = writeln!(out, "Dissociating node {h} from multicast group {g}");
            }
            Command::McNodeDestroy { handle } => {
                let h = *handle;
                self.change(|sw| sw.mc_node_destroy(h))?;
                let _ = writeln!(out, "Destroying node {h}");
            }
            Command::McDump => {
                let _ = writeln!(out, "==========");
                let _ = writeln!(out, "MC ENTRIES");
                for (g, nodes) in self.sw().mc_groups() {
                    let _ = writeln!(out, "**********");
                    let _ = write!(out, "mgrp({g})");
                    for h in nodes {
                        if let Some((rid, ports)) = self.sw().mc_node(h) {
                            let _ = write!(
                                out,
                                "\n  -> (L1h={h}, rid={rid}) -> (ports=[{}], lags=[])",
                                ports.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                            );
                        }
                    }
                    out.push('\n');
                }
                let _ = writeln!(out, "==========");
                let _ = writeln!(out, "LAGS");
                let _ = writeln!(out, "==========");
            }
            Command::MirroringAdd { session, port } => {
                let s = MirrorSession { port: Some(*port), mgrp: None };
                let id = *session;
                self.change(|sw| {
                    sw.mirroring_add(id, s);
                    Ok(())
                })?;
            }
            Command::MirroringAddMc { session, mgrp } => {
                let s = MirrorSession { port: None, mgrp: Some(*mgrp) };
                let id = *session;
                self.change(|sw| {
                    sw.mirroring_add(id, s);
                    Ok(())
                })?;
            }
            Command::MirroringDelete { session } => {
                let id = *session;
                self.change(|sw| sw.mirroring_delete(id))?;
            }
            Command::MirroringGet { session } => match self.sw().mirroring_get(*session) {
                Some(s) => {
                    let opt = |v: Option<String>| v.unwrap_or_else(|| "None".into());
                    let _ = writeln!(
                        out,
                        "MirroringSessionConfig(port={}, mgid={})",
                        opt(s.port.map(|p| p.to_string())),
                        opt(s.mgrp.map(|g| g.to_string()))
                    );
                }
                None => {
                    return Err(ApplyError::Refused(RuntimeError::NotFound(format!(
                        "mirroring session {session}"
                    ))));
                }
            },
            Command::SetCrc16Parameters {
                name,
                polynomial,
                initial,
                final_xor,
                reflect_data,
                reflect_remainder,
            } => {
                let c = self.calc(name)?;
                let p = CrcParams {
                    width: CrcWidth::W16,
                    polynomial: u64::from(*polynomial),
                    initial_remainder: u64::from(*initial),
                    final_xor: u64::from(*final_xor),
                    reflect_data: *reflect_data,
                    reflect_remainder: *reflect_remainder,
                };
                self.change(|sw| sw.set_crc_parameters(c, p))?;
            }
            Command::SetCrc32Parameters {
                name,
                polynomial,
                initial,
                final_xor,
                reflect_data,
                reflect_remainder,
            } => {
                let c = self.calc(name)?;
                let p = CrcParams {
                    width: CrcWidth::W32,
                    polynomial: u64::from(*polynomial),
                    initial_remainder: u64::from(*initial),
                    final_xor: u64::from(*final_xor),
                    reflect_data: *reflect_data,
                    reflect_remainder: *reflect_remainder,
                };
                self.change(|sw| sw.set_crc_parameters(c, p))?;
            }
            Command::Help { topic: Some(t) } => {
                return Err(ApplyError::Unsupported(format!("help on {t}")));
            }
            Command::Help { topic: None } => {
                let _ = writeln!(out, "Documented commands (type help <topic>):");
                let _ = writeln!(out, "========================================");
                let _ = writeln!(out, "{}", HELP.join(" "));
            }
        }
        Ok(out)
    }

    fn register(&self, i: usize, name: &str) -> Result<(usize, u32), ApplyError> {
        match self.sw().program().instances[i].kind {
            InstanceKind::Register { size, width } => Ok((size as usize, width)),
            _ => Err(not_a("register", name)),
        }
    }

    fn table_info_line(&self, t: usize, out: &mut String) {
        use fmt::Write as _;
        let ti = &self.sw().program().tables[t];
        let mk: Vec<String> =
            ti.keys.iter().map(|k| format!("{}({}, {})", k.name, k.kind, k.width)).collect();
        let _ = writeln!(out, "{:<32} [implementation=None, mk={}]", ti.name, mk.join(",\t"));
    }

    fn table_info(&self, t: usize, out: &mut String) {
        use fmt::Write as _;
        self.table_info_line(t, out);
        let _ = writeln!(out, "{}", "*".repeat(80));
        let p = self.sw().program();
        for ta in &p.tables[t].actions {
            let a = &p.actions[ta.action as usize];
            let params: Vec<String> = a
                .params
                .iter()
                .filter(|x| x.data)
                .map(|x| format!("{}({})", x.name, x.width))
                .collect();
            let _ = writeln!(out, "{:<24} [{}]", a.name, params.join(",\t"));
        }
    }
}

type CounterSum = Result<(u64, u64), ApplyError>;

/// The commands [`apply`] carries out, as `help` lists them.
const HELP: &[&str] = &[
    "counter_read",
    "counter_reset",
    "counter_write",
    "help",
    "mc_dump",
    "mc_mgrp_create",
    "mc_mgrp_destroy",
    "mc_node_associate",
    "mc_node_create",
    "mc_node_destroy",
    "mc_node_dissociate",
    "mc_node_update",
    "meter_array_set_rates",
    "meter_get_rates",
    "meter_set_rates",
    "mirroring_add",
    "mirroring_add_mc",
    "mirroring_delete",
    "mirroring_get",
    "register_read",
    "register_reset",
    "register_write",
    "set_crc16_parameters",
    "set_crc32_parameters",
    "show_actions",
    "show_tables",
    "table_add",
    "table_clear",
    "table_delete",
    "table_dump",
    "table_dump_entry",
    "table_info",
    "table_modify",
    "table_num_entries",
    "table_reset_default",
    "table_set_default",
    "table_set_timeout",
];

fn prefix(mut e: CliError, what: &str) -> CliError {
    e.message = format!("{what}: {}", e.message);
    e
}

fn not_a(what: &'static str, name: &str) -> ApplyError {
    ApplyError::NotFound { what, name: name.to_string() }
}

fn no_lags(lags: &[u32]) -> Result<(), ApplyError> {
    if lags.is_empty() {
        Ok(())
    } else {
        Err(ApplyError::Unsupported("LAGs in multicast nodes".into()))
    }
}

/// BMv2's port map: a bit string, port 0 rightmost.
fn port_map(ports: &[u32]) -> String {
    let Some(max) = ports.iter().max() else { return String::new() };
    (0..=*max).rev().map(|p| if ports.contains(&p) { '1' } else { '0' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_exactly_or_by_a_dotted_unique_suffix() {
        let names = ["MyIngress.ipv4_lpm", "MyIngress.t", "MyEgress.t", "lpm"];
        let r = |n: &str| resolve("table", n, names.iter().copied());
        assert_eq!(r("MyIngress.ipv4_lpm"), Ok(0));
        assert_eq!(r("ipv4_lpm"), Ok(0));
        assert_eq!(r("lpm"), Ok(3), "an exact name wins over suffixes");
        assert!(matches!(r("pv4_lpm"), Err(ApplyError::NotFound { .. })), "not at a dot");
        assert!(
            matches!(r("t"), Err(ApplyError::Ambiguous { candidates, .. }) if candidates.len() == 2)
        );
        assert_eq!(r("MyEgress.t"), Ok(2));
    }

    #[test]
    fn match_types_and_byte_formats() {
        use MatchKind::*;
        assert_eq!(table_match_type([Exact, Exact].into_iter()), "exact");
        assert_eq!(table_match_type([Exact, Lpm].into_iter()), "lpm");
        assert_eq!(table_match_type([Lpm, Optional].into_iter()), "ternary");
        assert_eq!(table_match_type([Ternary, Range, Lpm].into_iter()), "range");
        assert_eq!(hex_bytes(0x0a000101, 32), "0a:00:01:01");
        assert_eq!(hex_bytes(1, 9), "00:01");
        assert_eq!(hex_plain(1, 9), "0001");
        assert_eq!(port_map(&[1, 3]), "1010");
        assert_eq!(port_map(&[]), "");
    }
}
