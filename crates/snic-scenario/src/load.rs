//! Reading a scenario file (JSON or TOML, told apart by extension, else by content) and
//! validating it: every name resolves, every reference points at the right kind of object,
//! every "exactly one of" holds. Errors name the file, line and field.

use crate::schema::Scenario;
use std::path::{Path, PathBuf};

/// A scenario read from a file (or a string), with what relative paths are relative to.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The scenario, validated.
    pub scenario: Scenario,
    /// The file it came from (`<builtin>` names for built-in ones).
    pub path: PathBuf,
    /// The directory relative paths in it are relative to.
    pub dir: PathBuf,
}

/// Why a scenario could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The field's path (`nic[1].stages[2]`, `op[3].wrs[0].remote`), when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for LoadError {}

/// The two syntaxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON.
    Json,
    /// TOML.
    Toml,
}

/// Read and validate the scenario in `path`; the first mistake found (see [`check_file`] for
/// every one).
pub fn load_file(path: &Path) -> Result<Loaded, LoadError> {
    check_file(path).map_err(first)
}

/// Read and validate a scenario from `text`; `origin` names it in errors; relative paths are
/// relative to `dir`. The first mistake found (see [`check_str`] for every one).
pub fn load_str(
    text: &str,
    format: Format,
    origin: &Path,
    dir: &Path,
) -> Result<Loaded, LoadError> {
    check_str(text, format, origin, dir).map_err(first)
}

fn first(mut errors: Vec<LoadError>) -> LoadError {
    errors.truncate(1);
    errors.pop().unwrap_or_else(|| LoadError {
        file: PathBuf::new(),
        line: None,
        field: None,
        message: "invalid scenario".into(),
    })
}

/// The syntax of a file: by extension (`.json`, `.toml`), else by its first character.
pub fn format_of(path: &Path, text: &str) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Format::Json,
        Some("toml") => Format::Toml,
        _ if text.trim_start().starts_with('{') => Format::Json,
        _ => Format::Toml,
    }
}

/// Read and validate the scenario in `path`, reporting every mistake (what
/// `snic scenario check` prints).
pub fn check_file(path: &Path) -> Result<Loaded, Vec<LoadError>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![LoadError {
            file: path.to_path_buf(),
            line: None,
            field: None,
            message: e.to_string(),
        }]
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    check_str(&text, format_of(path, &text), path, &dir)
}

/// Read and validate a scenario from `text`, reporting every mistake (a syntax or type error
/// stops at the first).
pub fn check_str(
    text: &str,
    format: Format,
    origin: &Path,
    dir: &Path,
) -> Result<Loaded, Vec<LoadError>> {
    let at = |line: Option<usize>, field: Option<String>, message: String| LoadError {
        file: origin.to_path_buf(),
        line,
        field,
        message,
    };
    let mut scenario: Scenario = match format {
        Format::Json => {
            let mut de = serde_json::Deserializer::from_str(text);
            let parsed: Result<Scenario, _> = serde_path_to_error::deserialize(&mut de);
            let s = parsed.map_err(|e| {
                let field = path_field(e.path());
                let inner = e.into_inner();
                let line = (inner.line() > 0).then_some(inner.line());
                vec![at(line, field, strip_json_position(&inner.to_string()))]
            })?;
            de.end()
                .map_err(|e| vec![at(Some(e.line()), None, strip_json_position(&e.to_string()))])?;
            s
        }
        Format::Toml => {
            let de = toml::Deserializer::new(text);
            let parsed: Result<Scenario, _> = serde_path_to_error::deserialize(de);
            parsed.map_err(|e| {
                let field = path_field(e.path());
                let inner = e.into_inner();
                let line = inner.span().map(|s| line_of(text, s.start));
                let message = match inner.message().trim() {
                    "" => "not valid TOML".to_string(),
                    m => m.to_string(),
                };
                vec![at(line, field, message)]
            })?
        }
    };
    let issues = issues(&scenario, dir);
    if !issues.is_empty() {
        let tree = Tree::parse(text, format);
        return Err(issues
            .into_iter()
            .map(|(field, message)| {
                let line = tree.as_ref().and_then(|t| t.locate(&field)).map(|o| line_of(text, o));
                at(line, Some(field), message)
            })
            .collect());
    }
    if scenario.name.is_empty() {
        scenario.name =
            origin.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario").to_string();
    }
    Ok(Loaded { scenario, path: origin.to_path_buf(), dir: dir.to_path_buf() })
}

/// Validate a parsed scenario (relative paths relative to `dir`): every mistake, each with the
/// field's path (no file or line: see [`check_str`]).
pub fn validate(scenario: &Scenario, dir: &Path) -> Result<(), Vec<LoadError>> {
    let issues = issues(scenario, dir);
    if issues.is_empty() {
        return Ok(());
    }
    Err(issues
        .into_iter()
        .map(|(field, message)| LoadError {
            file: PathBuf::from("<scenario>"),
            line: None,
            field: Some(field),
            message,
        })
        .collect())
}

/// The path serde saw, with every alias written as the field's own name (`nics[1]` ->
/// `nic[1]`), as validation errors name fields.
fn path_field(p: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in p.iter() {
        match seg {
            Segment::Seq { index } => out += &format!("[{index}]"),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out += canonical(key);
            }
            Segment::Unknown => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A field's own name for one of its aliases.
fn canonical(key: &str) -> &str {
    match key {
        "nics" => "nic",
        "switches" => "switch",
        "hosts" => "host",
        "links" => "link",
        "ops" => "op",
        "regions" => "region",
        "mrs" => "mr",
        "cqs" => "cq",
        "qps" => "qp",
        "dma_queues" => "dma",
        "channels" => "channel",
        k => k,
    }
}

/// serde_json appends " at line L column C": the line is reported separately.
fn strip_json_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

// ---------------------------------------------------------------------------------------------
// References
// ---------------------------------------------------------------------------------------------

/// A named buffer: `HOST.NAME[+OFFSET][:LEN]`, `NAME` a region or an MR of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufRef {
    /// The host.
    pub host: String,
    /// The region or MR.
    pub name: String,
    /// Bytes from the start of the region or MR. Default 0.
    pub offset: u64,
    /// Bytes; none: to the end of the region or MR.
    pub len: Option<u64>,
}

impl core::fmt::Display for BufRef {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.host, self.name)?;
        if self.offset != 0 {
            write!(f, "+{}", self.offset)?;
        }
        if let Some(l) = self.len {
            write!(f, ":{l}")?;
        }
        Ok(())
    }
}

/// A buffer as DMA descriptors name them: a named buffer or a raw engine address
/// (`addr:0x1000[:LEN]`, to write bad descriptors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Buf {
    /// `HOST.NAME[+OFFSET][:LEN]`.
    Named(BufRef),
    /// `addr:ADDR[:LEN]`.
    Raw {
        /// The engine address.
        addr: u64,
        /// Bytes, when given.
        len: Option<u64>,
    },
}

/// Parse `HOST.NAME[+OFFSET][:LEN]` (or `NAME[+OFFSET][:LEN]` when `default_host` is given).
/// Offsets and lengths are decimal, `0x` hex, or sizes with a binary unit (`4KiB`).
/// Raw addresses (`addr:...`) are refused: see [`parse_buf`].
pub fn parse_buf_ref(s: &str, default_host: Option<&str>) -> Result<BufRef, String> {
    match parse_buf(s, default_host)? {
        Buf::Named(b) => Ok(b),
        Buf::Raw { .. } => Err(format!("{s:?}: a raw address is not allowed here")),
    }
}

/// Parse a buffer that may also be a raw address (`addr:0x1000[:LEN]`).
pub fn parse_buf(s: &str, default_host: Option<&str>) -> Result<Buf, String> {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix("addr:") {
        let (a, len) = match rest.split_once(':') {
            Some((a, l)) => (a, Some(parse_num(l).map_err(|e| format!("{s:?}: length: {e}"))?)),
            None => (rest, None),
        };
        let addr = parse_num(a).map_err(|e| format!("{s:?}: address: {e}"))?;
        return Ok(Buf::Raw { addr, len });
    }
    let (head, len) = match t.split_once(':') {
        Some((h, l)) => (h, Some(parse_num(l).map_err(|e| format!("{s:?}: length: {e}"))?)),
        None => (t, None),
    };
    let (obj, offset) = match head.split_once('+') {
        Some((o, off)) => (o, parse_num(off).map_err(|e| format!("{s:?}: offset: {e}"))?),
        None => (head, 0),
    };
    let (host, name) = parse_host_ref(obj, default_host)
        .map_err(|e| if e.starts_with('"') { e } else { format!("{s:?}: {e}") })?;
    Ok(Buf::Named(BufRef { host, name, offset, len }))
}

/// Parse a host object reference `HOST.NAME` (or `NAME` when `default_host` is given) into
/// `(host, name)`.
pub fn parse_host_ref(s: &str, default_host: Option<&str>) -> Result<(String, String), String> {
    let t = s.trim();
    let (host, name) = match (t.split_once('.'), default_host) {
        (Some((h, n)), _) => (h, n),
        (None, Some(h)) => (h, t),
        (None, None) => return Err(format!("{s:?} is not HOST.NAME")),
    };
    if !is_name(host) || !is_name(name) {
        return Err(format!("{s:?} is not HOST.NAME"));
    }
    Ok((host.to_string(), name.to_string()))
}

/// Parse a port reference `NODE.PORT` into `(node, port)`.
pub fn parse_port_ref(s: &str) -> Result<(String, String), String> {
    match s.trim().split_once('.') {
        Some((n, p)) if is_name(n) && is_name(p) => Ok((n.to_string(), p.to_string())),
        _ => Err(format!("{s:?} is not NODE.PORT")),
    }
}

/// Whether `s` is usable as a name: letters, digits, `_` and `-`, not empty.
pub fn is_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A number: decimal, `0x` hex, or a size with a binary unit (`4KiB`).
pub fn parse_num(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).map_err(|_| format!("{t:?} is not a hex number"));
    }
    t.parse::<crate::schema::Size>().map(|s| s.0)
}

// ---------------------------------------------------------------------------------------------
// Finding a field's line
// ---------------------------------------------------------------------------------------------

/// One step of a field path (`op[3].wrs[0].remote`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn segments(path: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Seg::Key(key.to_string()));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let Some(close) = r.find(']') else { break };
            if let Ok(i) = r[..close].parse() {
                out.push(Seg::Index(i));
            }
            rest = &r[close + 1..];
        }
    }
    out
}

/// The other spellings serde accepts for a field (its aliases).
fn aliases(key: &str) -> &'static [&'static str] {
    match key {
        "nic" => &["nics"],
        "switch" => &["switches"],
        "host" => &["hosts"],
        "link" => &["links"],
        "op" => &["ops"],
        "region" => &["regions"],
        "mr" => &["mrs"],
        "cq" => &["cqs"],
        "qp" => &["qps"],
        "dma" => &["dma_queues"],
        "channel" => &["channels"],
        _ => &[],
    }
}

/// A parsed document with byte offsets, to find where a field is written.
enum Tree {
    Toml(toml_edit::ImDocument<String>),
    Json(JNode),
}

impl Tree {
    fn parse(text: &str, format: Format) -> Option<Tree> {
        match format {
            Format::Toml => toml_edit::ImDocument::parse(text.to_string()).ok().map(Tree::Toml),
            Format::Json => {
                let mut p = JParser { b: text.as_bytes(), i: 0 };
                p.value(0).map(Tree::Json)
            }
        }
    }

    /// Byte offset of the field (or of the deepest part of its path that is written).
    fn locate(&self, path: &str) -> Option<usize> {
        let segs = segments(path);
        match self {
            Tree::Toml(doc) => toml_locate(doc.as_table(), &segs),
            Tree::Json(root) => {
                let mut node = root;
                let mut best = None;
                for seg in &segs {
                    let next = match (seg, node) {
                        (Seg::Key(k), JNode::Obj(_, fields)) => {
                            let names =
                                core::iter::once(k.as_str()).chain(aliases(k).iter().copied());
                            names
                                .filter_map(|n| fields.iter().find(|(name, _, _)| name == n))
                                .map(|(_, at, v)| (*at, v))
                                .next()
                        }
                        (Seg::Index(i), JNode::Arr(_, items)) => items.get(*i).map(|v| (v.at(), v)),
                        _ => None,
                    };
                    match next {
                        Some((at, v)) => {
                            best = Some(at);
                            node = v;
                        }
                        None => break,
                    }
                }
                best.or(Some(root.at()))
            }
        }
    }
}

fn toml_locate(root: &toml_edit::Table, segs: &[Seg]) -> Option<usize> {
    use toml_edit::{Item, Table, Value};
    #[derive(Clone, Copy)]
    enum At<'a> {
        Table(&'a Table),
        Item(&'a Item),
        Value(&'a Value),
    }
    let mut cur = At::Table(root);
    let mut best = None;
    for seg in segs {
        let next: Option<(Option<usize>, At<'_>)> = match (seg, cur) {
            (Seg::Key(k), at) => {
                let names = core::iter::once(k.as_str()).chain(aliases(k).iter().copied());
                let mut found = None;
                for n in names {
                    let kv = match at {
                        At::Table(t) | At::Item(Item::Table(t)) => t.get_key_value(n),
                        At::Item(Item::Value(Value::InlineTable(t)))
                        | At::Value(Value::InlineTable(t)) => t.get_key_value(n),
                        _ => None,
                    };
                    if let Some((key, item)) = kv {
                        found = Some((key.span().map(|s| s.start), At::Item(item)));
                        break;
                    }
                }
                found
            }
            (Seg::Index(i), At::Item(Item::ArrayOfTables(a))) => {
                a.get(*i).map(|t| (t.span().map(|s| s.start), At::Table(t)))
            }
            (
                Seg::Index(i),
                At::Item(Item::Value(Value::Array(a))) | At::Value(Value::Array(a)),
            ) => a.get(*i).map(|v| (v.span().map(|s| s.start), At::Value(v))),
            _ => None,
        };
        let Some((span, at)) = next else { break };
        if span.is_some() {
            best = span;
        }
        cur = at;
    }
    best
}

/// A JSON value with the byte offset where it (or, for object members, its key) starts.
enum JNode {
    Obj(usize, Vec<(String, usize, JNode)>),
    Arr(usize, Vec<JNode>),
    Scalar(usize),
}

impl JNode {
    fn at(&self) -> usize {
        match self {
            JNode::Obj(a, _) | JNode::Arr(a, _) | JNode::Scalar(a) => *a,
        }
    }
}

/// Just enough of a JSON parser to know where things are (the text is valid JSON: serde_json
/// read it first); gives up (None) on anything unexpected.
struct JParser<'a> {
    b: &'a [u8],
    i: usize,
}

impl JParser<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn string(&mut self) -> Option<String> {
        if self.b.get(self.i) != Some(&b'"') {
            return None;
        }
        self.i += 1;
        let start = self.i;
        while *self.b.get(self.i)? != b'"' {
            if self.b[self.i] == b'\\' {
                self.i += 1;
            }
            self.i += 1;
        }
        let s = String::from_utf8_lossy(&self.b[start..self.i]).into_owned();
        self.i += 1;
        Some(s)
    }

    fn value(&mut self, depth: usize) -> Option<JNode> {
        if depth > 128 {
            return None;
        }
        self.ws();
        let at = self.i;
        match *self.b.get(self.i)? {
            b'{' => {
                self.i += 1;
                let mut fields = Vec::new();
                loop {
                    self.ws();
                    match *self.b.get(self.i)? {
                        b'}' => {
                            self.i += 1;
                            return Some(JNode::Obj(at, fields));
                        }
                        b',' => self.i += 1,
                        _ => {
                            let kat = self.i;
                            let k = self.string()?;
                            self.ws();
                            if self.b.get(self.i) != Some(&b':') {
                                return None;
                            }
                            self.i += 1;
                            let v = self.value(depth + 1)?;
                            fields.push((k, kat, v));
                        }
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    self.ws();
                    match *self.b.get(self.i)? {
                        b']' => {
                            self.i += 1;
                            return Some(JNode::Arr(at, items));
                        }
                        b',' => self.i += 1,
                        _ => items.push(self.value(depth + 1)?),
                    }
                }
            }
            b'"' => self.string().map(|_| JNode::Scalar(at)),
            _ => {
                while self.i < self.b.len() && !b",}] \t\r\n".contains(&self.b[self.i]) {
                    self.i += 1;
                }
                (self.i > at).then_some(JNode::Scalar(at))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

use crate::schema::{
    Action, Content, DmaDir, ExpectSpec, HostSpec, Impairments, PacketSpec, Place, PolicySource,
    WrKind, WrSpec,
};
use std::collections::{BTreeMap, BTreeSet};

/// `h2c` or `c2h`, as written in a file.
fn dir_name(d: DmaDir) -> &'static str {
    match d {
        DmaDir::H2c => "h2c",
        DmaDir::C2h => "c2h",
    }
}

/// What a NIC or switch port carries.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Use {
    Link(String),
    Host(String),
}

/// A named object of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Obj {
    /// A region of this many bytes.
    Region(u64),
    /// An MR: its region's index, offset and length.
    Mr(usize, u64, u64),
}

struct HostIndex<'a> {
    spec: &'a HostSpec,
    objs: BTreeMap<&'a str, Obj>,
    regions: Vec<&'a str>,
    cqs: BTreeSet<&'a str>,
    qps: BTreeMap<&'a str, usize>,
    dma: BTreeSet<&'a str>,
    /// DMA channels: name -> (direction, most descriptors of a chain).
    channels: BTreeMap<&'a str, (DmaDir, u32)>,
    pds: BTreeSet<&'a str>,
}

struct V<'a> {
    s: &'a Scenario,
    dir: &'a Path,
    out: Vec<(String, String)>,
    /// NICs and switches: name -> (is a NIC, index).
    nodes: BTreeMap<&'a str, (bool, usize)>,
    hosts: BTreeMap<&'a str, HostIndex<'a>>,
    links: BTreeSet<&'a str>,
}

fn issues(s: &Scenario, dir: &Path) -> Vec<(String, String)> {
    let mut v = V {
        s,
        dir,
        out: Vec::new(),
        nodes: BTreeMap::new(),
        hosts: BTreeMap::new(),
        links: BTreeSet::new(),
    };
    v.top();
    v.nodes();
    v.hosts();
    let uses = v.links_and_ports();
    v.traffic(&uses);
    v.timeline();
    for (i, e) in s.expect.iter().enumerate() {
        v.expect(&format!("expect[{i}]"), e);
    }
    v.golden();
    v.out
}

impl<'a> V<'a> {
    fn err(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.out.push((field.into(), message.into()));
    }

    fn name(&mut self, field: String, name: &str, what: &str) {
        if !is_name(name) {
            self.err(
                field,
                format!("{what} name {name:?}: use letters, digits, `_` and `-` (no dots)"),
            );
        }
    }

    fn time_pos(&mut self, field: &str, t: crate::schema::SimTime) {
        if t.0 == 0 {
            self.err(field, "must be more than 0");
        }
    }

    fn file(&mut self, field: String, rel: &str) {
        if rel.is_empty() {
            self.err(field, "empty file name");
            return;
        }
        let p = self.dir.join(rel);
        if !p.exists() {
            self.err(field, format!("{} does not exist", p.display()));
        }
    }

    fn prob(&mut self, field: String, p: f64) {
        if !(0.0..=1.0).contains(&p) {
            self.err(field, format!("{p} is not a probability (0..=1)"));
        }
    }

    fn top(&mut self) {
        self.time_pos("time_limit", self.s.time_limit);
        self.time_pos("sample_interval", self.s.sample_interval);
    }

    fn policy(&mut self, field: String, p: &PolicySource) {
        match p {
            PolicySource::File(f) => self.file(format!("{field}.file"), f),
            PolicySource::Inline(value) => {
                let text = match toml::to_string(value) {
                    Ok(t) => t,
                    Err(e) => {
                        self.err(format!("{field}.inline"), format!("not a policy document: {e}"));
                        return;
                    }
                };
                if let Err(e) = snic_vswitch::policy::toml::parse_policy(&text, "inline policy") {
                    self.err(format!("{field}.inline"), e.to_string());
                }
            }
        }
    }

    /// Check a node's stage strings; returns the parsed ones.
    fn stages(
        &mut self,
        field: &str,
        stages: &[String],
        nports: usize,
        nic: bool,
    ) -> Vec<snic_pipeline::pipeline::StageSpec> {
        use snic_pipeline::pipeline::StageSpec;
        let mut out = Vec::new();
        for (j, st) in stages.iter().enumerate() {
            let f = format!("{field}.stages[{j}]");
            match st.parse::<StageSpec>() {
                Ok(spec) => {
                    match &spec {
                        StageSpec::Local if !nic => {
                            self.err(f.clone(), "a switch has no `local` stage (no RoCE engine)")
                        }
                        StageSpec::P4 { program, entries, include } => {
                            if program.is_empty() {
                                self.err(f.clone(), "a scenario's p4 stage needs a program");
                            } else {
                                self.file(f.clone(), program);
                            }
                            if let Some(e) = entries {
                                self.file(f.clone(), e);
                            }
                            for d in include {
                                self.file(f.clone(), d);
                            }
                        }
                        StageSpec::Xdp { program, .. } => self.file(f.clone(), program),
                        StageSpec::L2Static(map) => {
                            for (a, b) in map {
                                if usize::from(*a) >= nports || usize::from(*b) >= nports {
                                    self.err(
                                        f.clone(),
                                        format!("port {a} or {b} is not one of the {nports} ports"),
                                    );
                                }
                            }
                        }
                        _ => {}
                    }
                    if out.contains(&spec) && matches!(spec, StageSpec::VSwitch | StageSpec::Local)
                    {
                        self.err(f, "this stage is given twice");
                    }
                    out.push(spec);
                }
                Err(e) => self.err(f, e.to_string()),
            }
        }
        out
    }

    fn ports(&mut self, field: &str, ports: &[String]) {
        if ports.is_empty() {
            self.err(format!("{field}.ports"), "needs at least one port");
        } else if ports.len() > MAX_PORTS {
            self.err(format!("{field}.ports"), format!("more than {MAX_PORTS} ports"));
        }
        let mut seen = BTreeSet::new();
        for (j, p) in ports.iter().enumerate() {
            self.name(format!("{field}.ports[{j}]"), p, "port");
            if !seen.insert(p.as_str()) {
                self.err(format!("{field}.ports[{j}]"), format!("port {p:?} is given twice"));
            }
        }
    }

    fn nodes(&mut self) {
        use snic_pipeline::pipeline::StageSpec;
        let s = self.s;
        let mut ips = BTreeMap::new();
        for (i, n) in s.nics.iter().enumerate() {
            let f = format!("nic[{i}]");
            self.name(format!("{f}.name"), &n.name, "NIC");
            if self.nodes.insert(&n.name, (true, i)).is_some() {
                self.err(format!("{f}.name"), format!("{:?} names two NICs or switches", n.name));
            }
            self.ports(&f, &n.ports);
            if let Some(w) = &n.wire
                && !n.ports.contains(w)
            {
                self.err(format!("{f}.wire"), format!("{w:?} is not one of its ports"));
            }
            // The defaults count NICs from 1 to 254 (`02:00:00:00:NN:01`, `192.0.2.NN`).
            if i >= 254 && (n.mac.is_none() || n.ips.is_empty()) {
                self.err(
                    f.clone(),
                    "NICs after the 254th need their own `mac` and `ips` (the defaults run out)",
                );
            }
            let defaulted = [crate::world::default_ip(i)];
            let own = if n.ips.is_empty() && i < 254 { &defaulted[..] } else { &n.ips[..] };
            for (j, ip) in own.iter().enumerate() {
                if let Some(other) = ips.insert(*ip, i) {
                    self.err(
                        format!("{f}.ips[{j}]"),
                        format!("{ip} is also an address of nic[{other}]"),
                    );
                }
            }
            let specs = self.stages(&f, &n.stages, n.ports.len(), true);
            // The order a NIC's pipeline needs (what the build would refuse).
            if specs.len() == n.stages.len()
                && let Err(e) = snic_io::nic::nic_stages(&specs)
            {
                self.err(format!("{f}.stages"), e.to_string());
            }
            match (&n.vswitch, specs.contains(&StageSpec::VSwitch)) {
                (Some(p), true) => self.policy(format!("{f}.vswitch"), p),
                (Some(_), false) => {
                    self.err(format!("{f}.vswitch"), "a policy but no `vswitch` stage")
                }
                _ => {}
            }
            for (what, size) in [
                ("host", n.memory.host),
                ("on_chip", n.memory.on_chip),
                ("on_board", n.memory.on_board),
            ] {
                if size.0 == 0 {
                    self.err(format!("{f}.memory.{what}"), "must be more than 0");
                } else if size.0 > MAX_NIC_MEMORY {
                    self.err(
                        format!("{f}.memory.{what}"),
                        format!(
                            "{size} is more than the {} a simulated NIC may have",
                            crate::schema::Size(MAX_NIC_MEMORY)
                        ),
                    );
                }
            }
            if n.rdma.max_inflight == 0 {
                self.err(format!("{f}.rdma.max_inflight"), "must be more than 0");
            }
            if n.rdma.dscp > 63 {
                self.err(
                    format!("{f}.rdma.dscp"),
                    format!("{} is not a DSCP (0..=63)", n.rdma.dscp),
                );
            }
            self.time_pos(&format!("{f}.neigh_retry"), n.neigh_retry);
        }
        for (i, sw) in s.switches.iter().enumerate() {
            let f = format!("switch[{i}]");
            self.name(format!("{f}.name"), &sw.name, "switch");
            if self.nodes.insert(&sw.name, (false, i)).is_some() {
                self.err(format!("{f}.name"), format!("{:?} names two NICs or switches", sw.name));
            }
            self.ports(&f, &sw.ports);
            let specs = self.stages(&f, &sw.stages, sw.ports.len(), false);
            match (&sw.vswitch, specs.contains(&StageSpec::VSwitch)) {
                (Some(p), true) => self.policy(format!("{f}.vswitch"), p),
                (Some(_), false) => {
                    self.err(format!("{f}.vswitch"), "a policy but no `vswitch` stage")
                }
                _ => {}
            }
        }
    }

    fn node_ports(&self, node: &str) -> Option<&'a [String]> {
        let s = self.s;
        match self.nodes.get(node)? {
            (true, i) => Some(&s.nics[*i].ports),
            (false, i) => Some(&s.switches[*i].ports),
        }
    }

    fn node_stages(&self, node: &str) -> Option<&'a [String]> {
        let s = self.s;
        match self.nodes.get(node)? {
            (true, i) => Some(&s.nics[*i].stages),
            (false, i) => Some(&s.switches[*i].stages),
        }
    }

    /// Check `NODE.PORT`; returns it when it names a port.
    fn port_ref(&mut self, field: String, r: &str) -> Option<(String, String)> {
        let (node, port) = match parse_port_ref(r) {
            Ok(np) => np,
            Err(e) => {
                self.err(field, e);
                return None;
            }
        };
        match self.node_ports(&node) {
            None => {
                self.err(field, format!("{node:?} is not a NIC or switch"));
                None
            }
            Some(ports) if !ports.contains(&port) => {
                self.err(
                    field,
                    format!("{node:?} has no port {port:?} (ports: {})", ports.join(", ")),
                );
                None
            }
            Some(_) => Some((node, port)),
        }
    }

    fn hosts(&mut self) {
        let s = self.s;
        // Host memory per NIC and place, to find regions that cannot fit.
        let mut used: BTreeMap<(&str, u8), u64> = BTreeMap::new();
        let mut qids: BTreeMap<(&str, u16), String> = BTreeMap::new();
        let mut keys: BTreeMap<(&str, u32), String> = BTreeMap::new();
        for (i, h) in s.hosts.iter().enumerate() {
            let f = format!("host[{i}]");
            self.name(format!("{f}.name"), &h.name, "host");
            if self.hosts.contains_key(h.name.as_str()) {
                self.err(format!("{f}.name"), format!("{:?} names two hosts", h.name));
            }
            match self.nodes.get(h.nic.as_str()) {
                Some((true, _)) => {}
                Some((false, _)) => {
                    self.err(format!("{f}.nic"), format!("{:?} is a switch, not a NIC", h.nic))
                }
                None => self.err(format!("{f}.nic"), format!("{:?} is not a NIC", h.nic)),
            }
            if let Some(p) = &h.port
                && let Some(ports) = self.node_ports(&h.nic)
                && !ports.contains(p)
            {
                self.err(format!("{f}.port"), format!("{:?} has no port {p:?}", h.nic));
            }
            let mut ix = HostIndex {
                spec: h,
                objs: BTreeMap::new(),
                regions: Vec::new(),
                cqs: BTreeSet::new(),
                qps: BTreeMap::new(),
                dma: BTreeSet::new(),
                channels: BTreeMap::new(),
                pds: BTreeSet::new(),
            };
            for (j, pd) in h.pds.iter().enumerate() {
                self.name(format!("{f}.pds[{j}]"), pd, "PD");
                if !ix.pds.insert(pd) {
                    self.err(format!("{f}.pds[{j}]"), format!("PD {pd:?} is given twice"));
                }
            }
            for (j, r) in h.regions.iter().enumerate() {
                let rf = format!("{f}.region[{j}]");
                self.name(format!("{rf}.name"), &r.name, "region");
                if ix.objs.insert(&r.name, Obj::Region(r.size.0)).is_some() {
                    self.err(
                        format!("{rf}.name"),
                        format!("{:?} names two regions or MRs", r.name),
                    );
                }
                ix.regions.push(&r.name);
                if r.size.0 == 0 {
                    self.err(format!("{rf}.size"), "must be more than 0");
                }
                if r.align.0 == 0 || !r.align.0.is_power_of_two() {
                    self.err(format!("{rf}.align"), "must be a power of two");
                }
                let place = match r.place {
                    Place::Host => 0,
                    Place::OnChip => 1,
                    Place::OnBoard => 2,
                };
                let u = used.entry((&h.nic, place)).or_default();
                *u = u.saturating_add(r.size.0);
                self.content(format!("{rf}.init"), &r.init, Some(r.size.0));
            }
            for (j, m) in h.mrs.iter().enumerate() {
                let mf = format!("{f}.mr[{j}]");
                self.name(format!("{mf}.name"), &m.name, "MR");
                let region = h.regions.iter().position(|r| r.name == m.region);
                let len = match region {
                    Some(k) => {
                        let size = h.regions[k].size.0;
                        let len = m.len.map_or(size.saturating_sub(m.offset.0), |l| l.0);
                        if m.offset.0.checked_add(len).is_none_or(|end| end > size) {
                            self.err(
                                format!("{mf}.len"),
                                format!(
                                    "offset {} + length {len} is past the end of region {:?} ({size} bytes)",
                                    m.offset.0, m.region
                                ),
                            );
                        } else if len == 0 {
                            self.err(format!("{mf}.len"), "an MR needs at least one byte");
                        }
                        len
                    }
                    None => {
                        let what = if h.mrs.iter().any(|o| o.name == m.region) {
                            "is an MR, not a region"
                        } else {
                            "is not a region of this host"
                        };
                        self.err(format!("{mf}.region"), format!("{:?} {what}", m.region));
                        0
                    }
                };
                if ix
                    .objs
                    .insert(&m.name, Obj::Mr(region.unwrap_or(usize::MAX), m.offset.0, len))
                    .is_some()
                {
                    self.err(
                        format!("{mf}.name"),
                        format!("{:?} names two regions or MRs", m.name),
                    );
                }
                if !ix.pds.contains(m.pd.as_str()) {
                    self.err(format!("{mf}.pd"), format!("{:?} is not a PD of this host", m.pd));
                }
            }
            for (j, c) in h.cqs.iter().enumerate() {
                let cf = format!("{f}.cq[{j}]");
                self.name(format!("{cf}.name"), &c.name, "CQ");
                if !ix.cqs.insert(&c.name) {
                    self.err(format!("{cf}.name"), format!("{:?} names two CQs", c.name));
                }
                if c.depth == 0 {
                    self.err(format!("{cf}.depth"), "must be more than 0");
                }
            }
            for (j, q) in h.qps.iter().enumerate() {
                let qf = format!("{f}.qp[{j}]");
                self.name(format!("{qf}.name"), &q.name, "QP");
                if ix.qps.insert(&q.name, j).is_some() {
                    self.err(format!("{qf}.name"), format!("{:?} names two QPs", q.name));
                }
                for (field, cq) in [("send_cq", Some(&q.send_cq)), ("recv_cq", q.recv_cq.as_ref())]
                {
                    if let Some(cq) = cq
                        && !ix.cqs.contains(cq.as_str())
                    {
                        self.err(
                            format!("{qf}.{field}"),
                            format!("{cq:?} is not a CQ of this host"),
                        );
                    }
                }
                if !ix.pds.contains(q.pd.as_str()) {
                    self.err(format!("{qf}.pd"), format!("{:?} is not a PD of this host", q.pd));
                }
                if ![256, 512, 1024, 2048, 4096].contains(&q.mtu) {
                    self.err(
                        format!("{qf}.mtu"),
                        format!("{} is not 256, 512, 1024, 2048 or 4096", q.mtu),
                    );
                }
                for (field, v, max) in [
                    ("retry_cnt", q.retry_cnt, 7),
                    ("rnr_retry", q.rnr_retry, 7),
                    ("timeout", q.timeout, 31),
                    ("min_rnr_timer", q.min_rnr_timer, 31),
                ] {
                    if v > max {
                        self.err(
                            format!("{qf}.{field}"),
                            format!("{v} is out of range (0..={max})"),
                        );
                    }
                }
                for (field, v) in [
                    ("sq_depth", q.sq_depth),
                    ("rq_depth", q.rq_depth),
                    ("max_rd_atomic", u32::from(q.max_rd_atomic)),
                ] {
                    if v == 0 {
                        self.err(format!("{qf}.{field}"), "must be more than 0");
                    }
                }
            }
            for (j, d) in h.dma.iter().enumerate() {
                let df = format!("{f}.dma[{j}]");
                self.name(format!("{df}.name"), &d.name, "DMA queue");
                if !ix.dma.insert(&d.name) {
                    self.err(format!("{df}.name"), format!("{:?} names two DMA queues", d.name));
                }
                if !(d.ring_size.is_power_of_two() && (2..=32768).contains(&d.ring_size)) {
                    self.err(
                        format!("{df}.ring_size"),
                        format!("{} is not a power of two in 2..=32768", d.ring_size),
                    );
                }
                if let Some(q) = d.qid {
                    let who = format!("{}.{}", h.name, d.name);
                    if let Some(other) = qids.insert((&h.nic, q), who) {
                        self.err(
                            format!("{df}.qid"),
                            format!("queue {q} of NIC {:?} is also {other}", h.nic),
                        );
                    }
                }
            }
            for (j, c) in h.channels.iter().enumerate() {
                let cf = format!("{f}.channel[{j}]");
                self.name(format!("{cf}.name"), &c.name, "DMA channel");
                if ix.dma.contains(c.name.as_str())
                    || ix.channels.insert(&c.name, (c.dir, c.descs)).is_some()
                {
                    self.err(
                        format!("{cf}.name"),
                        format!("{:?} names two DMA queues or channels", c.name),
                    );
                }
                if !(1..=snic_dma::desc::MAX_CHAIN).contains(&c.descs) {
                    self.err(
                        format!("{cf}.descs"),
                        format!("{} is not in 1..={}", c.descs, snic_dma::desc::MAX_CHAIN),
                    );
                }
                if let Some(k) = c.key {
                    let who = format!("{}.{}", h.name, c.name);
                    if let Some(other) = keys.insert((&h.nic, k), who) {
                        self.err(
                            format!("{cf}.key"),
                            format!("channel {k} of NIC {:?} is also {other}", h.nic),
                        );
                    }
                }
            }
            self.hosts.entry(&h.name).or_insert(ix);
        }
        for (i, n) in s.nics.iter().enumerate() {
            for (place, what, cap) in [
                (0u8, "host", n.memory.host.0),
                (1, "on_chip", n.memory.on_chip.0),
                (2, "on_board", n.memory.on_board.0),
            ] {
                let want = used.get(&(n.name.as_str(), place)).copied().unwrap_or(0);
                if want > cap {
                    self.err(
                        format!("nic[{i}].memory.{what}"),
                        format!("its hosts' regions there need {want} bytes, more than its {cap}"),
                    );
                }
            }
        }
        // QP peers.
        let mut peer_of: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
        for (i, h) in s.hosts.iter().enumerate() {
            for (j, q) in h.qps.iter().enumerate() {
                let f = format!("host[{i}].qp[{j}].peer");
                let Some(p) = &q.peer else { continue };
                let (ph, pq) = match parse_host_ref(p, None) {
                    Ok(r) => r,
                    Err(e) => {
                        self.err(f, e);
                        continue;
                    }
                };
                if ph == h.name {
                    self.err(f, "the peer must be a QP of another host");
                    continue;
                }
                let Some(peer_host) = self.hosts.get(ph.as_str()) else {
                    self.err(f, format!("{ph:?} is not a host"));
                    continue;
                };
                let Some(&k) = peer_host.qps.get(pq.as_str()) else {
                    self.err(f, format!("host {ph:?} has no QP {pq:?}"));
                    continue;
                };
                let me = (h.name.clone(), q.name.clone());
                if let Some(back) = &peer_host.spec.qps[k].peer
                    && parse_host_ref(back, None).ok().as_ref() != Some(&me)
                {
                    self.err(
                        f.clone(),
                        format!("{p} names {back:?} as its peer, not {}.{}", me.0, me.1),
                    );
                }
                let them = (ph, pq);
                for (a, b) in [(me.clone(), them.clone()), (them, me)] {
                    if let Some(old) = peer_of.insert(a.clone(), b.clone())
                        && old != b
                    {
                        self.err(
                            f.clone(),
                            format!(
                                "{}.{} would be connected to both {}.{} and {}.{}",
                                a.0, a.1, old.0, old.1, b.0, b.1
                            ),
                        );
                    }
                }
            }
        }
    }

    /// Check contents; `size` is the buffer's when known.
    fn content(&mut self, field: String, c: &Content, size: Option<u64>) {
        match c {
            Content::Pattern(p) => match crate::packet::from_hex(p) {
                Ok(b) if b.is_empty() => self.err(format!("{field}.pattern"), "an empty pattern"),
                Ok(_) => {}
                Err(e) => self.err(format!("{field}.pattern"), e.to_string()),
            },
            Content::Hex(h) => match crate::packet::from_hex(h) {
                Ok(b) => {
                    if let Some(size) = size
                        && b.len() as u64 > size
                    {
                        self.err(
                            format!("{field}.hex"),
                            format!("{} bytes do not fit in {size}", b.len()),
                        );
                    }
                }
                Err(e) => self.err(format!("{field}.hex"), e.to_string()),
            },
            Content::File(f) => self.file(format!("{field}.file"), f),
            Content::Zero | Content::Fill(_) | Content::Seed(_) | Content::Counter => {}
        }
    }

    fn links_and_ports(&mut self) -> BTreeMap<(String, String), (String, Use)> {
        let s = self.s;
        let mut uses: BTreeMap<(String, String), (String, Use)> = BTreeMap::new();
        for (i, h) in s.hosts.iter().enumerate() {
            if let Some(p) = &h.port {
                let key = (h.nic.clone(), p.clone());
                if let Some((_, Use::Host(other))) = uses.get(&key) {
                    self.err(
                        format!("host[{i}].port"),
                        format!("port {}.{p} is also host {other:?}'s", h.nic),
                    );
                } else {
                    uses.insert(key, (format!("host[{i}].port"), Use::Host(h.name.clone())));
                }
            }
        }
        for (i, l) in s.links.iter().enumerate() {
            let f = format!("link[{i}]");
            self.name(format!("{f}.name"), &l.name, "link");
            if !self.links.insert(&l.name) {
                self.err(format!("{f}.name"), format!("{:?} names two links", l.name));
            }
            let a = self.port_ref(format!("{f}.a"), &l.a);
            let b = self.port_ref(format!("{f}.b"), &l.b);
            if a.is_some() && a == b {
                self.err(format!("{f}.b"), "a link needs two different ports");
            }
            for (end, p) in [("a", a), ("b", b)] {
                let Some(key) = p else { continue };
                match uses.get(&key) {
                    Some((_, Use::Link(other))) => self.err(
                        format!("{f}.{end}"),
                        format!("port {}.{} already carries link {other:?}", key.0, key.1),
                    ),
                    Some((_, Use::Host(h))) => self.err(
                        format!("{f}.{end}"),
                        format!("port {}.{} is host {h:?}'s interface", key.0, key.1),
                    ),
                    None => {
                        uses.insert(key, (format!("{f}.{end}"), Use::Link(l.name.clone())));
                    }
                }
            }
            self.impairments(
                &f,
                &Impairments {
                    loss: Some(l.loss),
                    duplicate: Some(l.duplicate),
                    reorder: Some(l.reorder),
                    queue_limit: Some(l.queue_limit),
                    rate_mbps: Some(l.rate_mbps),
                    ..Default::default()
                },
            );
            for (dir, imp) in [("a_to_b", &l.a_to_b), ("b_to_a", &l.b_to_a)] {
                if let Some(imp) = imp {
                    self.impairments(&format!("{f}.{dir}"), imp);
                }
            }
        }
        uses
    }

    fn impairments(&mut self, f: &str, imp: &Impairments) {
        for (what, p) in
            [("loss", imp.loss), ("duplicate", imp.duplicate), ("reorder", imp.reorder)]
        {
            if let Some(p) = p {
                self.prob(format!("{f}.{what}"), p);
            }
        }
        if imp.queue_limit == Some(0) {
            self.err(format!("{f}.queue_limit"), "must be more than 0");
        }
        if let Some(r) = imp.rate_mbps
            && r.checked_mul(1_000_000).is_none()
        {
            self.err(format!("{f}.rate_mbps"), format!("{r} Mbit/s is too large"));
        }
    }

    fn packets(&mut self, f: &str, packets: &[PacketSpec]) {
        let (mut frames, mut bytes) = (0u64, 0u64);
        for (j, p) in packets.iter().enumerate() {
            let pf = format!("{f}.packets[{j}]");
            let len = match (&p.layers, &p.hex) {
                (Some(l), None) => match crate::packet::build(l) {
                    Ok(b) => b.len(),
                    Err(e) => {
                        self.err(format!("{pf}.layers"), e.to_string());
                        0
                    }
                },
                (None, Some(h)) => match crate::packet::from_hex(h) {
                    Ok(b) if b.len() < 14 => {
                        self.err(
                            format!("{pf}.hex"),
                            format!("{} bytes is shorter than an Ethernet header", b.len()),
                        );
                        0
                    }
                    Ok(b) => b.len(),
                    Err(e) => {
                        self.err(format!("{pf}.hex"), e.to_string());
                        0
                    }
                },
                _ => {
                    self.err(pf.clone(), "give exactly one of `layers` and `hex`");
                    0
                }
            };
            if p.count == 0 {
                self.err(format!("{pf}.count"), "must be more than 0");
            }
            frames = frames.saturating_add(u64::from(p.count));
            bytes = bytes.saturating_add(u64::from(p.count).saturating_mul(len as u64));
            if frames > MAX_FRAMES || bytes > MAX_FRAME_BYTES {
                self.err(
                    format!("{pf}.count"),
                    format!(
                        "the packets come to more than {MAX_FRAMES} frames or {} (every frame is \
                         built before the run)",
                        crate::schema::Size(MAX_FRAME_BYTES)
                    ),
                );
                return;
            }
        }
    }

    fn traffic(&mut self, uses: &BTreeMap<(String, String), (String, Use)>) {
        let s = self.s;
        let mut names = BTreeSet::new();
        for (i, t) in s.traffic.iter().enumerate() {
            let f = format!("traffic[{i}]");
            let name = t.name.clone().unwrap_or_else(|| format!("traffic{i}"));
            if t.name.is_some() {
                self.name(format!("{f}.name"), &name, "traffic");
            }
            if !names.insert(name.clone()) {
                self.err(format!("{f}.name"), format!("{name:?} names two traffic sources"));
            }
            if t.into.contains('.') {
                if let Some(key) = self.port_ref(format!("{f}.into"), &t.into) {
                    match uses.get(&key) {
                        Some((_, Use::Link(l))) => self.err(
                            format!("{f}.into"),
                            format!(
                                "port {} carries link {l:?}: traffic enters a port with no link",
                                t.into
                            ),
                        ),
                        Some((_, Use::Host(h))) => self.err(
                            format!("{f}.into"),
                            format!(
                                "port {} is host {h:?}'s interface: write `into = \"{h}\"`",
                                t.into
                            ),
                        ),
                        None => {}
                    }
                }
            } else {
                match self.hosts.get(t.into.as_str()) {
                    None => self.err(
                        format!("{f}.into"),
                        format!("{:?} is not a host (or write NODE.PORT)", t.into),
                    ),
                    Some(h) if h.spec.port.is_none() => self.err(
                        format!("{f}.into"),
                        format!("host {:?} has no `port` (no network interface)", t.into),
                    ),
                    Some(_) => {}
                }
            }
            let given = [t.pcap.is_some(), t.generator.is_some(), !t.packets.is_empty()];
            if given.iter().filter(|&&g| g).count() != 1 {
                self.err(f.clone(), "give exactly one of `pcap`, `generator` and `packets`");
            }
            if let Some(p) = &t.pcap {
                self.file(format!("{f}.pcap"), p);
            }
            if let Some(g) = &t.generator {
                if g.count == 0 {
                    self.err(format!("{f}.generator.count"), "must be more than 0");
                } else if g.count > MAX_FRAMES {
                    self.err(
                        format!("{f}.generator.count"),
                        format!("{} frames is more than {MAX_FRAMES}", g.count),
                    );
                }
            }
            self.packets(&f, &t.packets);
        }
    }

    /// Check a host object reference `HOST.NAME`; returns the host and the name.
    fn host_obj(
        &mut self,
        field: &str,
        r: &str,
        what: &str,
        pick: fn(&HostIndex<'a>, &str) -> bool,
    ) -> Option<(&'a str, String)> {
        let (h, n) = match parse_host_ref(r, None) {
            Ok(x) => x,
            Err(e) => {
                self.err(field, e);
                return None;
            }
        };
        let Some(host) = self.hosts.get(h.as_str()) else {
            self.err(field, format!("{h:?} is not a host"));
            return None;
        };
        if !pick(host, &n) {
            self.err(field, format!("host {h:?} has no {what} {n:?}"));
            return None;
        }
        Some((host.spec.name.as_str(), n))
    }

    /// Check a buffer `HOST.NAME[+OFF][:LEN]`: the name is a region or an MR of the host, the
    /// range lies within it, and (`registered`) an MR covers it. Returns (host, len).
    fn buf(
        &mut self,
        field: &str,
        r: &str,
        default_host: Option<&str>,
        raw_ok: bool,
        registered: bool,
    ) -> Option<(String, Option<u64>)> {
        let b = match parse_buf(r, default_host) {
            Ok(Buf::Named(b)) => b,
            Ok(Buf::Raw { len, .. }) if raw_ok => return Some((String::new(), len)),
            Ok(Buf::Raw { .. }) => {
                self.err(field, format!("{r:?}: a raw address is not allowed here"));
                return None;
            }
            Err(e) => {
                self.err(field, e);
                return None;
            }
        };
        let Some(host) = self.hosts.get(b.host.as_str()) else {
            self.err(field, format!("{:?} is not a host", b.host));
            return None;
        };
        let Some(&obj) = host.objs.get(b.name.as_str()) else {
            self.err(field, format!("host {:?} has no region or MR {:?}", b.host, b.name));
            return None;
        };
        let (size, region_range) = match obj {
            Obj::Region(size) => {
                (size, host.regions.iter().position(|r| *r == b.name).map(|k| (k, b.offset)))
            }
            Obj::Mr(_, _, len) => (len, None),
        };
        let len = b.len.unwrap_or(size.saturating_sub(b.offset));
        if b.offset.checked_add(len).is_none_or(|e| e > size) {
            self.err(field, format!("{r}: {} + {len} is past the end ({size} bytes)", b.offset));
            return None;
        }
        if registered && let Some((k, off)) = region_range {
            let covered = host.objs.values().any(|o| match *o {
                Obj::Mr(rk, mo, ml) => {
                    rk == k && mo <= off && off.saturating_add(len) <= mo.saturating_add(ml)
                }
                Obj::Region(_) => false,
            });
            if !covered {
                self.err(field, format!("{r}: no MR of host {:?} covers these bytes", b.host));
            }
        }
        Some((b.host, Some(len)))
    }

    fn timeline(&mut self) {
        let s = self.s;
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for (i, op) in s.timeline.iter().enumerate() {
            let f = format!("op[{i}]");
            if let Some(n) = &op.name {
                self.name(format!("{f}.name"), n, "operation");
            }
            let name = op.name.clone().unwrap_or_else(|| format!("op{i}"));
            if names.contains_key(&name) {
                self.err(format!("{f}.name"), format!("{name:?} names two operations"));
            }
            if op.at.is_some() && op.after.is_some() {
                self.err(format!("{f}.after"), "give `at` or `after`, not both");
            }
            if let Some(a) = &op.after
                && !names.contains_key(a)
            {
                let later = s.timeline.iter().enumerate().any(|(k, o)| {
                    k >= i && o.name.clone().unwrap_or_else(|| format!("op{k}")) == *a
                });
                let why = if later { "is not an earlier operation" } else { "is not an operation" };
                self.err(format!("{f}.after"), format!("{a:?} {why}"));
            }
            names.insert(name, i);
            self.action(&f, &op.action);
        }
    }

    fn action(&mut self, f: &str, a: &Action) {
        use snic_pipeline::pipeline::StageSpec;
        let has_stage = |v: &V<'_>, node: &str, want: fn(&StageSpec) -> bool| {
            v.node_stages(node)
                .is_some_and(|st| st.iter().any(|s| s.parse::<StageSpec>().is_ok_and(|s| want(&s))))
        };
        match a {
            Action::PostSend { qp, wrs } => {
                let q = self.host_obj(&format!("{f}.qp"), qp, "QP", |h, n| h.qps.contains_key(n));
                if wrs.is_empty() {
                    self.err(format!("{f}.wrs"), "post at least one WR");
                }
                let peer_host = q.as_ref().and_then(|(h, n)| self.peer_host(h, n));
                let depth = q.as_ref().and_then(|(h, n)| self.qp_spec(h, n)).map(|s| s.sq_depth);
                let count = wrs.iter().fold(0u64, |a, w| a.saturating_add(u64::from(w.repeat)));
                if let Some(d) = depth
                    && count > u64::from(d)
                {
                    self.err(
                        format!("{f}.wrs"),
                        format!("{count} WRs (repeats included) do not fit the send queue ({d})"),
                    );
                }
                for (j, wr) in wrs.iter().enumerate() {
                    self.wr(
                        &format!("{f}.wrs[{j}]"),
                        wr,
                        q.as_ref().map(|(h, _)| *h),
                        peer_host.as_deref(),
                    );
                }
            }
            Action::PostRecv { qp, bufs } => {
                let q = self.host_obj(&format!("{f}.qp"), qp, "QP", |h, n| h.qps.contains_key(n));
                if bufs.is_empty() {
                    self.err(format!("{f}.bufs"), "post at least one buffer");
                }
                let depth = q.as_ref().and_then(|(h, n)| self.qp_spec(h, n)).map(|s| s.rq_depth);
                if let Some(d) = depth
                    && bufs.len() as u64 > u64::from(d)
                {
                    self.err(
                        format!("{f}.bufs"),
                        format!("{} buffers do not fit the receive queue ({d})", bufs.len()),
                    );
                }
                let host = q.map(|(h, _)| h);
                for (j, b) in bufs.iter().enumerate() {
                    let bf = format!("{f}.bufs[{j}]");
                    if let Some((bh, _)) = self.buf(&bf, b, host, false, true)
                        && host.is_some_and(|h| h != bh)
                    {
                        self.err(bf, format!("{b:?} is not memory of the QP's host"));
                    }
                }
            }
            Action::Dma { queue, dir, descs } => {
                let q =
                    self.host_obj(&format!("{f}.queue"), queue, "DMA queue or channel", |h, n| {
                        h.dma.contains(n) || h.channels.contains_key(n)
                    });
                if descs.is_empty() {
                    self.err(format!("{f}.descs"), "post at least one descriptor");
                }
                let chan = q.as_ref().and_then(|(h, n)| {
                    self.hosts.get(h).and_then(|x| x.channels.get(n.as_str())).copied()
                });
                if let Some((cdir, most)) = chan {
                    if cdir != *dir {
                        self.err(
                            format!("{f}.dir"),
                            format!("{queue:?} is a {} channel", dir_name(cdir)),
                        );
                    }
                    if descs.len() > most as usize {
                        self.err(
                            format!("{f}.descs"),
                            format!(
                                "{} descriptors: the chain of {queue:?} holds at most {most}",
                                descs.len()
                            ),
                        );
                    }
                }
                let nic =
                    q.as_ref().and_then(|(h, _)| self.hosts.get(h)).map(|h| h.spec.nic.clone());
                for (j, d) in descs.iter().enumerate() {
                    let df = format!("{f}.descs[{j}]");
                    for (what, b) in [("src", &d.src), ("dst", &d.dst)] {
                        let host = q.as_ref().map(|(h, _)| *h);
                        if let Some((bh, blen)) =
                            self.buf(&format!("{df}.{what}"), b, host, true, false)
                        {
                            if bh.is_empty() {
                                continue;
                            }
                            let bnic = self.hosts.get(bh.as_str()).map(|h| h.spec.nic.clone());
                            if nic.is_some() && bnic != nic {
                                self.err(
                                    format!("{df}.{what}"),
                                    format!("{b:?} is not memory of the queue's NIC"),
                                );
                            } else if blen.is_some_and(|l| l < d.len.0) {
                                self.err(
                                    format!("{df}.len"),
                                    format!("{} bytes do not fit in {b:?}", d.len.0),
                                );
                            }
                        }
                    }
                    if d.len.0 == 0 && !(d.src.starts_with("addr:") || d.dst.starts_with("addr:")) {
                        self.err(format!("{df}.len"), "must be more than 0");
                    }
                }
            }
            Action::Kernel { nic, kernel, .. } => {
                if !matches!(self.nodes.get(nic.as_str()), Some((true, _))) {
                    self.err(format!("{f}.nic"), format!("{nic:?} is not a NIC"));
                }
                let known = snic_compute::kernel::Kernels::with_builtins();
                if known.by_name(kernel).is_none() {
                    let names: Vec<_> = known.list().map(|(_, n, _)| n).collect();
                    self.err(
                        format!("{f}.kernel"),
                        format!("no kernel {kernel:?} (kernels: {})", names.join(", ")),
                    );
                }
            }
            Action::Vswitch { node, policy, edits } => {
                if !self.nodes.contains_key(node.as_str()) {
                    self.err(format!("{f}.node"), format!("{node:?} is not a NIC or switch"));
                } else if !has_stage(self, node, |s| matches!(s, StageSpec::VSwitch)) {
                    self.err(format!("{f}.node"), format!("{node:?} has no `vswitch` stage"));
                }
                if let Some(p) = policy {
                    self.policy(format!("{f}.policy"), p);
                }
                if policy.is_none() && edits.is_empty() {
                    self.err(
                        f,
                        "give `policy`, `edits` or both (the policy first, then the edits)",
                    );
                }
            }
            Action::P4 { node, commands } => {
                if !self.nodes.contains_key(node.as_str()) {
                    self.err(format!("{f}.node"), format!("{node:?} is not a NIC or switch"));
                } else if !has_stage(self, node, |s| matches!(s, StageSpec::P4 { .. })) {
                    self.err(format!("{f}.node"), format!("{node:?} has no `p4:` stage"));
                }
                if commands.is_empty() {
                    self.err(format!("{f}.commands"), "give at least one command");
                }
                for (j, c) in commands.iter().enumerate() {
                    if let Err(e) = snic_p4::cli::parse_line(c, 1) {
                        self.err(format!("{f}.commands[{j}]"), e.to_string());
                    }
                }
            }
            Action::EbpfMap { node, map, key, .. } => {
                if !self.nodes.contains_key(node.as_str()) {
                    self.err(format!("{f}.node"), format!("{node:?} is not a NIC or switch"));
                } else if !has_stage(self, node, |s| matches!(s, StageSpec::Xdp { .. })) {
                    self.err(format!("{f}.node"), format!("{node:?} has no `xdp:` stage"));
                }
                if map.is_empty() {
                    self.err(format!("{f}.map"), "name the map");
                }
                if key.trim().is_empty() {
                    self.err(format!("{f}.key"), "give the key");
                }
            }
            Action::Link { link, state, set } => {
                if !self.links.contains(link.as_str()) {
                    self.err(format!("{f}.link"), format!("{link:?} is not a link"));
                }
                if state.is_none() && set.is_none() {
                    self.err(f, "give `state`, `set` or both");
                }
                if let Some(imp) = set {
                    self.impairments(&format!("{f}.set"), imp);
                }
            }
            Action::Wait { cq, counter, count, idle } => {
                let kinds = [cq.is_some(), counter.is_some(), *idle];
                if kinds.iter().filter(|&&k| k).count() != 1 {
                    self.err(f, "give exactly one of `cq`, `counter` and `idle = true`");
                }
                if let Some(c) = cq {
                    self.host_obj(&format!("{f}.cq"), c, "CQ", |h, n| h.cqs.contains(n));
                }
                if let Some(c) = counter {
                    self.counter(&format!("{f}.counter"), c, false);
                }
                if (cq.is_some() || counter.is_some()) && count.is_none() {
                    self.err(format!("{f}.count"), "give the count to wait for");
                }
                if *idle && count.is_some() {
                    self.err(format!("{f}.count"), "`idle` takes no count");
                }
            }
        }
    }

    fn qp_spec(&self, host: &str, qp: &str) -> Option<&'a crate::schema::QpSpec> {
        let h = self.hosts.get(host)?;
        h.spec.qps.get(*h.qps.get(qp)?)
    }

    fn peer_host(&self, host: &str, qp: &str) -> Option<String> {
        let h = self.hosts.get(host)?;
        let q = &h.spec.qps[*h.qps.get(qp)?];
        if let Some(p) = &q.peer {
            return parse_host_ref(p, None).ok().map(|(h, _)| h);
        }
        let me = format!("{host}.{qp}");
        self.s.hosts.iter().find_map(|o| {
            o.qps
                .iter()
                .any(|q| q.peer.as_deref().map(str::trim) == Some(me.as_str()))
                .then(|| o.name.clone())
        })
    }

    fn wr(&mut self, f: &str, wr: &WrSpec, host: Option<&str>, peer: Option<&str>) {
        let k = wr.op;
        let needs_remote = matches!(
            k,
            WrKind::Write | WrKind::WriteImm | WrKind::Read | WrKind::CmpSwap | WrKind::FetchAdd
        );
        let atomic = matches!(k, WrKind::CmpSwap | WrKind::FetchAdd);
        let rules: [(&str, bool, bool); 6] = [
            ("remote", wr.remote.is_some(), needs_remote),
            ("imm", wr.imm.is_some(), matches!(k, WrKind::SendImm | WrKind::WriteImm)),
            ("invalidate", wr.invalidate.is_some(), k == WrKind::SendInv),
            ("compare", wr.compare.is_some(), k == WrKind::CmpSwap),
            ("swap", wr.swap.is_some(), k == WrKind::CmpSwap),
            ("add", wr.add.is_some(), k == WrKind::FetchAdd),
        ];
        let op = serde_json::to_value(k)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        for (field, given, wanted) in rules {
            match (given, wanted) {
                (false, true) => {
                    self.err(format!("{f}.{field}"), format!("`{op}` needs `{field}`"))
                }
                (true, false) => {
                    self.err(format!("{f}.{field}"), format!("`{op}` takes no `{field}`"))
                }
                _ => {}
            }
        }
        if wr.repeat == 0 {
            self.err(format!("{f}.repeat"), "must be at least 1");
        }
        if atomic && wr.local.len() != 1 {
            self.err(format!("{f}.local"), format!("`{op}` needs one 8-byte local buffer"));
        }
        // The bytes one copy of the WR moves (its local buffers), when known.
        let mut total = Some(0u64);
        let repeat = u64::from(wr.repeat);
        for (j, b) in wr.local.iter().enumerate() {
            let bf = format!("{f}.local[{j}]");
            if let Some((bh, len)) = self.buf(&bf, b, host, false, true) {
                if host.is_some_and(|h| h != bh) {
                    self.err(bf.clone(), format!("{b:?} is not memory of the QP's host"));
                }
                if atomic && len != Some(8) {
                    self.err(
                        bf.clone(),
                        format!("{b:?}: an atomic's buffer is 8 bytes (write `:8`)"),
                    );
                }
                total = total.zip(len).and_then(|(t, l)| t.checked_add(l));
                if let Some(l) = len {
                    self.repeated(&bf, b, host, l, repeat);
                }
            } else {
                total = None;
            }
        }
        if let (Some(r), true) = (&wr.remote, needs_remote) {
            let rf = format!("{f}.remote");
            if let Some((rh, len)) = self.buf(&rf, r, None, false, true) {
                if peer.is_some_and(|p| p != rh) {
                    self.err(rf.clone(), format!("{r:?} is not memory of the peer QP's host"));
                }
                if atomic && len.is_some_and(|l| l < 8) {
                    self.err(rf.clone(), format!("{r:?}: an atomic needs 8 bytes there"));
                }
                if let Some(t) = total {
                    self.repeated(&rf, r, None, t, repeat);
                }
            }
        }
        if let Some(inv) = &wr.invalidate {
            self.host_obj(&format!("{f}.invalidate"), inv, "MR", |h, n| {
                matches!(h.objs.get(n), Some(Obj::Mr(..)))
            });
        }
    }

    /// With `repeat` copies, copy `r` of a WR's buffer `b` starts `r * step` bytes further on
    /// (see [`crate::schema::WrSpec::repeat`]): check the last copy's bytes too.
    fn repeated(&mut self, field: &str, b: &str, host: Option<&str>, step: u64, repeat: u64) {
        if repeat <= 1 {
            return;
        }
        let Ok(Buf::Named(r)) = parse_buf(b, host) else { return };
        let span = step.checked_mul(repeat - 1).and_then(|x| x.checked_add(r.len.unwrap_or(step)));
        let Some(span) = span else {
            self.err(field, format!("`repeat = {repeat}`: the copies of {b:?} overflow"));
            return;
        };
        let whole = format!("{}.{}+{}:{span}", r.host, r.name, r.offset);
        let before = self.out.len();
        self.buf(field, &whole, None, false, true);
        for (_, m) in &mut self.out[before..] {
            *m = format!("`repeat = {repeat}`: the copies of {b:?} need {span} bytes: {m}");
        }
    }

    /// Check a counter name (or pattern with `*` when `pattern`): its first part names a node,
    /// a host or `link.LINK`.
    fn counter(&mut self, f: &str, c: &str, pattern: bool) {
        let parts: Vec<&str> = c.split('.').collect();
        if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
            self.err(
                f,
                format!(
                    "{c:?} is not a counter name (NODE.pipeline.FIELD, link.LINK.a_to_b.FIELD, ...)"
                ),
            );
            return;
        }
        if !pattern && c.contains('*') {
            self.err(f, format!("{c:?}: wildcards are for golden counters only"));
            return;
        }
        let head = parts[0];
        if head.contains('*') {
            return;
        }
        if head == "link" {
            let l = parts[1];
            if !l.contains('*') && !self.links.contains(l) {
                self.err(f, format!("{c:?}: {l:?} is not a link"));
            }
            return;
        }
        if !self.nodes.contains_key(head) && !self.hosts.contains_key(head) {
            self.err(f, format!("{c:?}: {head:?} is not a NIC, switch, host or `link`"));
        }
    }

    fn expect(&mut self, f: &str, e: &ExpectSpec) {
        let kinds = [
            ("counter", e.counter.is_some()),
            ("memory", e.memory.is_some()),
            ("pcap", e.pcap.is_some()),
            ("cqes", e.cqes.is_some()),
            ("end_time", e.end_time),
        ];
        let given: Vec<&str> = kinds.iter().filter(|(_, g)| *g).map(|(k, _)| *k).collect();
        if given.len() != 1 {
            self.err(
                f,
                "give exactly one of `counter`, `memory`, `pcap`, `cqes` and `end_time = true`",
            );
            return;
        }
        let kind = given[0];
        // Fields that belong to another kind.
        let owned: [(&str, bool, &str); 13] = [
            ("eq", e.eq.is_some(), "counter"),
            ("min", e.min.is_some(), "counter"),
            ("max", e.max.is_some(), "counter"),
            ("content", e.content.is_some(), "memory"),
            ("same_as", e.same_as.is_some(), "memory"),
            ("sha256", e.sha256.is_some(), "memory"),
            ("file", e.file.is_some(), "pcap"),
            ("packets", !e.packets.is_empty(), "pcap"),
            ("mask", !e.mask.is_empty(), "pcap"),
            ("any_order", e.any_order, "pcap"),
            ("list", !e.list.is_empty(), "cqes"),
            ("min_time", e.min_time.is_some(), "end_time"),
            ("max_time", e.max_time.is_some(), "end_time"),
        ];
        for (field, g, owner) in owned {
            if g && owner != kind {
                self.err(
                    format!("{f}.{field}"),
                    format!("`{field}` belongs to a `{owner}` expectation, not `{kind}`"),
                );
            }
        }
        match kind {
            "counter" => {
                if let Some(c) = &e.counter {
                    self.counter(&format!("{f}.counter"), c, false);
                }
                if e.eq.is_none() && e.min.is_none() && e.max.is_none() {
                    self.err(f, "give `eq`, `min` or `max`");
                }
                if let (Some(lo), Some(hi)) = (e.min, e.max)
                    && lo > hi
                {
                    self.err(format!("{f}.max"), format!("max {hi} is below min {lo}"));
                }
            }
            "memory" => {
                let m = e.memory.as_deref().unwrap_or_default();
                let len =
                    self.buf(&format!("{f}.memory"), m, None, false, false).and_then(|(_, l)| l);
                let n = [e.content.is_some(), e.same_as.is_some(), e.sha256.is_some()];
                if n.iter().filter(|&&g| g).count() != 1 {
                    self.err(f, "give exactly one of `content`, `same_as` and `sha256`");
                }
                if let Some(c) = &e.content {
                    self.content(format!("{f}.content"), c, len);
                }
                if let Some(other) = &e.same_as
                    && parse_buf(other, None).ok() == parse_buf(m, None).ok()
                    && parse_buf(m, None).is_ok()
                {
                    self.err(
                        format!("{f}.same_as"),
                        format!("{other:?} is the buffer itself: the check could not fail"),
                    );
                }
                if let Some(other) = &e.same_as
                    && let Some((_, olen)) =
                        self.buf(&format!("{f}.same_as"), other, None, false, false)
                    && let (Some(a), Some(b)) = (len, olen)
                    && b < a
                {
                    self.err(
                        format!("{f}.same_as"),
                        format!("{other:?} has {b} bytes, fewer than the {a} compared"),
                    );
                }
                if let Some(h) = &e.sha256
                    && (h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()))
                {
                    self.err(format!("{f}.sha256"), "a SHA-256 is 64 hex digits");
                }
            }
            "pcap" => {
                let p = e.pcap.as_deref().unwrap_or_default();
                self.capture_point(&format!("{f}.pcap"), p);
                if e.file.is_some() && !e.packets.is_empty() {
                    self.err(f, "give `file` or `packets`, not both");
                }
                if let Some(file) = &e.file {
                    self.file(format!("{f}.file"), file);
                }
                self.packets(f, &e.packets);
                for (j, m) in e.mask.iter().enumerate() {
                    if let Err(why) = check_mask(m) {
                        self.err(format!("{f}.mask[{j}]"), why);
                    }
                }
            }
            "cqes" => {
                let c = e.cqes.as_deref().unwrap_or_default();
                self.host_obj(&format!("{f}.cqes"), c, "CQ", |h, n| h.cqs.contains(n));
                for (j, q) in e.list.iter().enumerate() {
                    if let Some(st) = &q.status
                        && !WC_STATUS.contains(&st.as_str())
                    {
                        self.err(
                            format!("{f}.list[{j}].status"),
                            format!("{st:?} is not a status ({})", WC_STATUS.join(", ")),
                        );
                    }
                    if let Some(op) = &q.opcode
                        && !WC_OPCODE.contains(&op.as_str())
                    {
                        self.err(
                            format!("{f}.list[{j}].opcode"),
                            format!("{op:?} is not an opcode ({})", WC_OPCODE.join(", ")),
                        );
                    }
                }
            }
            _ => {
                if e.min_time.is_none() && e.max_time.is_none() {
                    self.err(f, "give `min_time`, `max_time` or both");
                }
                if let (Some(lo), Some(hi)) = (e.min_time, e.max_time)
                    && lo > hi
                {
                    self.err(
                        format!("{f}.max_time"),
                        format!("max_time {hi} is before min_time {lo}"),
                    );
                }
            }
        }
    }

    /// A capture point: `NODE.PORT` or a host with an interface.
    fn capture_point(&mut self, f: &str, p: &str) {
        if p.contains('.') {
            self.port_ref(f.to_string(), p);
        } else {
            match self.hosts.get(p) {
                Some(h) if h.spec.port.is_some() => {}
                Some(_) => self.err(f, format!("host {p:?} has no `port` (no network interface)")),
                None => self.err(f, format!("{p:?} is not a host (or write NODE.PORT)")),
            }
        }
    }

    fn golden(&mut self) {
        let Some(g) = &self.s.golden else { return };
        if let Some(d) = &g.dir
            && d.is_empty()
        {
            self.err("golden.dir", "empty directory name");
        }
        for (j, p) in g.pcaps.iter().enumerate() {
            self.capture_point(&format!("golden.pcaps[{j}]"), p);
        }
        for (j, m) in g.mask.iter().enumerate() {
            if let Err(why) = check_mask(m) {
                self.err(format!("golden.mask[{j}]"), why);
            }
        }
        for (j, m) in g.memory.iter().enumerate() {
            self.buf(&format!("golden.memory[{j}]"), m, None, false, false);
        }
        for (j, c) in g.cqes.iter().enumerate() {
            self.host_obj(&format!("golden.cqes[{j}]"), c, "CQ", |h, n| h.cqs.contains(n));
        }
        for (j, c) in g.counters.iter().enumerate() {
            self.counter(&format!("golden.counters[{j}]"), c, true);
        }
    }
}

/// Most ports of one NIC or switch (a pipeline port id is 16 bits; far fewer make sense).
pub const MAX_PORTS: usize = 4096;
/// The largest memory of each kind a NIC may have (host, on-chip, on-board): the simulation
/// allocates it whole, so a larger one would abort the process instead of being an error.
pub const MAX_NIC_MEMORY: u64 = 4 << 30;
/// Most frames one traffic source (or one `pcap` expectation's `packets`) may describe.
pub const MAX_FRAMES: u64 = 1 << 20;
/// Most bytes one traffic source's (or one expectation's) `packets` may describe.
pub const MAX_FRAME_BYTES: u64 = 1 << 30;

/// The engine's completion statuses, snake case.
pub const WC_STATUS: [&str; 13] = [
    "success",
    "loc_len_err",
    "loc_qp_op_err",
    "loc_prot_err",
    "wr_flush_err",
    "bad_resp_err",
    "loc_access_err",
    "rem_inv_req_err",
    "rem_access_err",
    "rem_op_err",
    "retry_exc_err",
    "rnr_retry_exc_err",
    "fatal_err",
];

/// The engine's completion opcodes, snake case.
pub const WC_OPCODE: [&str; 7] =
    ["send", "rdma_write", "rdma_read", "comp_swap", "fetch_add", "recv", "recv_rdma_with_imm"];

/// A mask: a byte range `A..B` (A < B) or a `layer.field` name.
fn check_mask(m: &str) -> Result<(), String> {
    if let Some((a, b)) = m.split_once("..") {
        let (a, b) = (parse_num(a), parse_num(b));
        return match (a, b) {
            (Ok(a), Ok(b)) if a < b => Ok(()),
            _ => Err(format!("{m:?} is not a byte range A..B with A < B")),
        };
    }
    match m.split_once('.') {
        Some((l, f)) if is_name(l) && is_name(f) => Ok(()),
        _ => Err(format!("{m:?} is neither a field (`ipv4.id`) nor a byte range (`14..16`)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "base"
[[nic]]
name = "nic0"
stages = ["parse", "classify", "l2fwd"]
[[nic]]
name = "nic1"
[[switch]]
name = "sw"
ports = ["p0", "p1", "p2"]

[[host]]
name = "h0"
nic = "nic0"
port = "host"
[[host.region]]
name = "src"
size = "64KiB"
init = { seed = 7 }
[[host.mr]]
name = "smr"
region = "src"
[[host.cq]]
name = "cq"
[[host.qp]]
name = "qp"
send_cq = "cq"
peer = "h1.qp"
[[host.dma]]
name = "q0"
[[host.channel]]
name = "ch0"
dir = "c2h"
key = 2
[[host.channel]]
name = "ch1"
dir = "h2c"
descs = 1

[[host]]
name = "h1"
nic = "nic1"
[[host.region]]
name = "dst"
size = "64KiB"
place = "on_board"
[[host.mr]]
name = "dmr"
region = "dst"
[[host.cq]]
name = "cq"
[[host.qp]]
name = "qp"
send_cq = "cq"

[[link]]
name = "wire"
a = "nic0.wire"
b = "sw.p0"
loss = 0.05
[[link]]
name = "wire1"
a = "nic1.wire"
b = "sw.p1"

[[traffic]]
into = "h0"
packets = [{ layers = 'Ether()/IP(dst="10.0.0.2")/UDP()/Raw(len=10)', count = 3 }]

[[op]]
name = "recv"
do = "post_recv"
qp = "h1.qp"
bufs = ["h1.dmr:4096"]
[[op]]
name = "write"
do = "post_send"
qp = "h0.qp"
wrs = [
  { op = "write", local = ["smr:4096"], remote = "h1.dmr" },
  { op = "fetch_add", local = ["src+8:8"], remote = "h1.dst+16", add = 1 },
]
[[op]]
after = "write"
do = "dma"
queue = "h0.q0"
dir = "h2c"
descs = [{ src = "h0.src", dst = "addr:0x1000", len = 64 }]
[[op]]
do = "link"
link = "wire"
state = "down"
[[op]]
do = "wait"
cq = "h1.cq"
count = 1

[[expect]]
counter = "nic0.drop.policy_deny"
eq = 0
[[expect]]
memory = "h1.dst:4096"
same_as = "h0.src"
[[expect]]
cqes = "h0.cq"
list = [{ status = "success", opcode = "rdma_write" }]
[[expect]]
pcap = "sw.p2"
packets = [{ hex = "ffffffffffff 000000000000 9000" }]
[[expect]]
end_time = true
max_time = "1s"

[golden]
counters = ["nic0.drop.*", "link.wire.a_to_b.*"]
memory = ["h1.dst"]
"#;

    fn check(text: &str) -> Result<Loaded, Vec<LoadError>> {
        check_str(text, Format::Toml, Path::new("t.toml"), Path::new("."))
    }

    /// Line (1-based) of the first line of `text` containing `needle` after `after`.
    fn line(text: &str, after: &str, needle: &str) -> usize {
        let start = text.find(after).expect("after");
        let at = start + text[start..].find(needle).expect("needle");
        line_of(text, at)
    }

    #[test]
    fn the_base_scenario_is_valid() {
        let l = check(BASE).unwrap_or_else(|e| panic!("{e:#?}"));
        assert_eq!(l.scenario.name, "base");
    }

    /// (replace this, with that, field wanted, message part, line marker: (after, needle)).
    type Case<'a> = (&'a str, &'a str, &'a str, &'a str, (&'a str, &'a str));

    #[test]
    fn each_mistake_names_its_field_and_line() {
        #[rustfmt::skip]
        let cases: &[Case<'_>] = &[
            ("name = \"nic1\"", "name = \"nic0\"", "nic[1].name", "names two", ("name = \"nic0\"\n[[switch", "name")),
            ("name = \"sw\"", "name = \"nic0\"", "switch[0].name", "names two", ("[[switch]]", "name")),
            ("stages = [\"parse\", \"classify\", \"l2fwd\"]", "stages = [\"parse\", \"clasify\"]", "nic[0].stages[1]", "unknown stage", ("stages", "\"clasify\"")),
            ("stages = [\"parse\", \"classify\", \"l2fwd\"]", "stages = [\"l2fwd:0=5\"]", "nic[0].stages[0]", "not one of", ("stages", "\"l2fwd")),
            ("nic = \"nic1\"", "nic = \"sw\"", "host[1].nic", "switch, not a NIC", ("name = \"h1\"", "nic =")),
            ("nic = \"nic1\"", "nic = \"nic9\"", "host[1].nic", "not a NIC", ("name = \"h1\"", "nic =")),
            ("port = \"host\"", "port = \"eth9\"", "host[0].port", "no port", ("name = \"h0\"", "port =")),
            ("name = \"smr\"", "name = \"src\"", "host[0].mr[0].name", "two regions or MRs", ("[[host.mr]]", "name")),
            ("region = \"src\"", "region = \"smr\"", "host[0].mr[0].region", "is an MR", ("[[host.mr]]", "region")),
            ("send_cq = \"cq\"\npeer", "send_cq = \"cqx\"\npeer", "host[0].qp[0].send_cq", "not a CQ", ("[[host.qp]]", "send_cq")),
            ("peer = \"h1.qp\"", "peer = \"h0.qp\"", "host[0].qp[0].peer", "another host", ("[[host.qp]]", "peer")),
            ("peer = \"h1.qp\"", "peer = \"h1.qpx\"", "host[0].qp[0].peer", "no QP", ("[[host.qp]]", "peer")),
            ("name = \"q0\"", "name = \"q0\"\nring_size = 100", "host[0].dma[0].ring_size", "power of two", ("name = \"q0\"", "ring_size")),
            ("b = \"sw.p1\"", "b = \"sw.p0\"", "link[1].b", "already carries link", ("name = \"wire1\"", "b =")),
            ("b = \"sw.p1\"", "b = \"sw.p7\"", "link[1].b", "no port", ("name = \"wire1\"", "b =")),
            ("a = \"nic1.wire\"", "a = \"nic0.host\"", "link[1].a", "host \"h0\"", ("name = \"wire1\"", "a =")),
            ("loss = 0.05", "loss = 1.5", "link[0].loss", "probability", ("[[link]]", "loss")),
            ("into = \"h0\"", "into = \"h1\"", "traffic[0].into", "no `port`", ("[[traffic]]", "into")),
            ("into = \"h0\"", "into = \"nic0.wire\"", "traffic[0].into", "carries link", ("[[traffic]]", "into")),
            ("/UDP()/Raw(len=10)", "/UDP(dprt=1)", "traffic[0].packets[0].layers", "no field", ("[[traffic]]", "packets")),
            ("count = 3 }]", "count = 3, hex = \"00\" }]", "traffic[0].packets[0]", "exactly one", ("[[traffic]]", "packets")),
            ("bufs = [\"h1.dmr:4096\"]", "bufs = [\"h1.dmr:99999999\"]", "op[0].bufs[0]", "past the end", ("name = \"recv\"", "bufs")),
            ("bufs = [\"h1.dmr:4096\"]", "bufs = [\"h9.dmr\"]", "op[0].bufs[0]", "not a host", ("name = \"recv\"", "bufs")),
            (", remote = \"h1.dmr\" }", " }", "op[1].wrs[0].remote", "needs `remote`", ("wrs = [", "{ op = \"write\"")),
            (", add = 1 }", " }", "op[1].wrs[1].add", "needs `add`", ("wrs = [", "{ op = \"fetch_add\"")),
            ("remote = \"h1.dmr\" }", "remote = \"h1.dmr\", imm = 3 }", "op[1].wrs[0].imm", "takes no `imm`", ("wrs = [", "{ op = \"write\"")),
            ("local = [\"src+8:8\"]", "local = [\"src+8:4\"]", "op[1].wrs[1].local[0]", "8 bytes", ("wrs = [", "\"src+8:4\"")),
            ("remote = \"h1.dmr\" }", "remote = \"h0.smr\" }", "op[1].wrs[0].remote", "peer QP's host", ("wrs = [", "{ op = \"write\"")),
            ("after = \"write\"", "after = \"later\"", "op[2].after", "not an operation", ("do = \"post_send\"", "after")),
            ("queue = \"h0.q0\"", "queue = \"h0.q1\"", "op[2].queue", "no DMA queue", ("do = \"dma\"", "queue")),
            ("name = \"ch0\"", "name = \"q0\"", "host[0].channel[0].name", "two DMA queues or channels", ("[[host.channel]]", "name")),
            ("name = \"ch1\"\ndir = \"h2c\"\ndescs = 1", "name = \"ch1\"\ndir = \"h2c\"\ndescs = 0", "host[0].channel[1].descs", "not in 1..=", ("name = \"ch1\"", "descs")),
            ("name = \"ch1\"\ndir", "name = \"ch1\"\nkey = 2\ndir", "host[0].channel[1].key", "also h0.ch0", ("name = \"ch1\"", "key")),
            ("dir = \"c2h\"\nkey", "dir = \"d2h\"\nkey", "host[0].channel[0].dir", "unknown variant", ("name = \"ch0\"", "dir")),
            ("queue = \"h0.q0\"", "queue = \"h0.ch0\"", "op[2].dir", "is a c2h channel", ("do = \"dma\"", "dir")),
            ("queue = \"h0.q0\"\ndir = \"h2c\"\ndescs = [{ src = \"h0.src\", dst = \"addr:0x1000\", len = 64 }]", "queue = \"h0.ch1\"\ndir = \"h2c\"\ndescs = [{ src = \"h0.src\", dst = \"addr:0x1000\", len = 64 }, { src = \"h0.src\", dst = \"addr:0x1000\", len = 64 }]", "op[2].descs", "at most 1", ("do = \"dma\"", "descs")),
            ("descs = [{ src = \"h0.src\", dst = \"addr:0x1000\", len = 64 }]", "descs = [{ src = \"h0.src\", dst = \"addr:0x1000\", len = \"1MiB\" }]", "op[2].descs[0].len", "do not fit", ("do = \"dma\"", "descs")),
            ("link = \"wire\"\nstate", "link = \"wir\"\nstate", "op[3].link", "not a link", ("do = \"link\"", "link =")),
            ("cq = \"h1.cq\"\ncount = 1", "cq = \"h1.cq\"", "op[4].count", "count", ("[[op]]\ndo = \"wait\"", "[[op]]")),
            ("counter = \"nic0.drop.policy_deny\"", "counter = \"nic7.drop.policy_deny\"", "expect[0].counter", "not a NIC, switch, host", ("[[expect]]", "counter")),
            ("eq = 0\n", "eq = 0\nsha256 = \"00\"\n", "expect[0].sha256", "belongs to a `memory`", ("[[expect]]", "sha256")),
            ("same_as = \"h0.src\"", "same_as = \"h0.src\"\nsha256 = \"ab\"", "expect[1]", "exactly one of `content`", ("[[expect]]\nmemory", "[[expect]]")),
            ("cqes = \"h0.cq\"", "cqes = \"h0.cqq\"", "expect[2].cqes", "no CQ", ("[[expect]]\ncqes", "cqes")),
            ("status = \"success\"", "status = \"sucess\"", "expect[2].list[0].status", "not a status", ("[[expect]]\ncqes", "list")),
            ("pcap = \"sw.p2\"", "pcap = \"sw.p2\"\ncounter = \"x.y\"", "expect[3]", "exactly one of", ("[[expect]]\npcap", "[[expect]]")),
            ("hex = \"ffffffffffff 000000000000 9000\"", "hex = \"fff\"", "expect[3].packets[0].hex", "odd number", ("[[expect]]\npcap", "packets")),
            ("max_time = \"1s\"", "min_time = \"2s\"\nmax_time = \"1s\"", "expect[4].max_time", "before min_time", ("end_time", "max_time")),
            ("memory = [\"h1.dst\"]", "memory = [\"h1.nope\"]", "golden.memory[0]", "no region or MR", ("[golden]", "memory")),
            ("\"link.wire.a_to_b.*\"", "\"link.wired.a_to_b.*\"", "golden.counters[1]", "not a link", ("[golden]", "counters")),
        ];
        for (from, to, field, msg, (after, needle)) in cases {
            assert!(BASE.contains(from), "{from}");
            let text = BASE.replacen(from, to, 1);
            let errs = check(&text).expect_err(to);
            let e = errs
                .iter()
                .find(|e| e.field.as_deref() == Some(*field))
                .unwrap_or_else(|| panic!("{to}: no error for {field}: {errs:#?}"));
            assert!(e.message.contains(msg), "{to}: {e}");
            assert_eq!(e.line, Some(line(&text, after, needle)), "{to}: {e}");
            assert_eq!(e.file, Path::new("t.toml"));
        }
    }

    #[test]
    fn every_mistake_is_reported() {
        let text = BASE
            .replacen("loss = 0.05", "loss = 2.0", 1)
            .replacen("into = \"h0\"", "into = \"h1\"", 1)
            .replacen("after = \"write\"", "after = \"nope\"", 1);
        let errs = check(&text).expect_err("three mistakes");
        let fields: Vec<_> = errs.iter().filter_map(|e| e.field.clone()).collect();
        assert_eq!(fields, ["link[0].loss", "traffic[0].into", "op[2].after"]);
    }

    #[test]
    fn parse_errors_name_field_and_line() {
        let text = BASE.replacen("size = \"64KiB\"\ninit", "size = \"64 parsecs\"\ninit", 1);
        let errs = check(&text).expect_err("bad size");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field.as_deref(), Some("host[0].region[0].size"));
        assert_eq!(errs[0].line, Some(line(&text, "[[host.region]]", "size")));
        let text = BASE.replacen("name = \"cq\"", "name = \"cq\"\ndepht = 3", 1);
        let errs = check(&text).expect_err("unknown field");
        assert_eq!(errs[0].line, Some(line(&text, "[[host.cq]]", "depht")));
        assert!(errs[0].message.contains("depht"), "{}", errs[0]);
        assert_eq!(errs[0].field.as_deref(), Some("host[0].cq[0].depht"), "{}", errs[0]);
    }

    const JSON: &str = r#"{
  "name": "j",
  "nics": [
    { "name": "nic0" },
    { "name": "nic1", "stages": ["parse", "bogus"] }
  ],
  "links": [
    { "name": "w", "a": "nic0.wire", "b": "nic1.wire", "loss": 0.5 }
  ],
  "ops": [
    { "do": "link", "link": "w", "state": "down" },
    { "do": "link", "link": "x", "state": "up" }
  ]
}
"#;

    #[test]
    fn json_errors_name_field_and_line() {
        let errs = check_str(JSON, Format::Json, Path::new("t.json"), Path::new("."))
            .expect_err("two mistakes");
        let got: Vec<_> =
            errs.iter().map(|e| (e.field.clone().unwrap_or_default(), e.line)).collect();
        assert_eq!(
            got,
            [("nic[1].stages[1]".to_string(), Some(5)), ("op[1].link".to_string(), Some(12))]
        );
        let bad = JSON.replacen("\"loss\": 0.5", "\"loss\": \"lots\"", 1);
        let errs = check_str(&bad, Format::Json, Path::new("t.json"), Path::new("."))
            .expect_err("type error");
        assert_eq!(errs[0].line, Some(8), "{}", errs[0]);
        assert_eq!(errs[0].field.as_deref(), Some("link[0].loss"), "{}", errs[0]);
        // (A NIC's pipeline needs `classify` too: the build would refuse it.)
        let good =
            JSON.replacen("\"bogus\"", "\"classify\", \"l2fwd\"", 1).replacen("\"x\"", "\"w\"", 1);
        check_str(&good, Format::Json, Path::new("t.json"), Path::new("."))
            .unwrap_or_else(|e| panic!("{e:#?}"));
    }

    #[test]
    fn json_channels_alias_names_field_and_line() {
        let text = r#"{
  "name": "j",
  "nics": [{ "name": "nic0" }],
  "hosts": [{
    "name": "h0",
    "nic": "nic0",
    "regions": [{ "name": "a", "size": 4096 }, { "name": "b", "size": 4096, "place": "on_board" }],
    "channels": [
      { "name": "up", "dir": "h2c", "descs": 2 },
      { "name": "down", "dir": "c2h", "key": 3 }
    ]
  }],
  "ops": [
    { "do": "dma", "queue": "h0.down", "dir": "h2c", "descs": [{ "src": "h0.a", "dst": "h0.b", "len": 64 }] },
    { "do": "dma", "queue": "h0.up", "dir": "h2c", "descs": [{ "src": "h0.a", "dst": "h0.b", "len": 64 }] }
  ]
}
"#;
        let errs = check_str(text, Format::Json, Path::new("t.json"), Path::new("."))
            .expect_err("a chain in the wrong direction");
        let got: Vec<_> =
            errs.iter().map(|e| (e.field.clone().unwrap_or_default(), e.line)).collect();
        assert_eq!(got, [("op[0].dir".to_string(), Some(14))], "{errs:#?}");
        assert!(errs[0].message.contains("\"h0.down\" is a c2h channel"), "{}", errs[0]);
        let good = text.replacen("\"queue\": \"h0.down\"", "\"queue\": \"h0.up\"", 1);
        let l = check_str(&good, Format::Json, Path::new("t.json"), Path::new("."))
            .unwrap_or_else(|e| panic!("{e:#?}"));
        let ch = &l.scenario.hosts[0].channels;
        assert_eq!((ch[0].descs, ch[0].key, ch[1].descs, ch[1].key), (2, None, 64, Some(3)));
    }

    #[test]
    fn references_parse() {
        assert_eq!(
            parse_buf_ref("h0.src+0x10:4KiB", None),
            Ok(BufRef { host: "h0".into(), name: "src".into(), offset: 16, len: Some(4096) })
        );
        assert_eq!(
            parse_buf_ref("src", Some("h1")),
            Ok(BufRef { host: "h1".into(), name: "src".into(), offset: 0, len: None })
        );
        assert!(parse_buf_ref("src", None).is_err());
        assert!(parse_buf_ref("h0.src+x", None).is_err());
        assert!(parse_buf_ref("addr:0x10", None).is_err());
        assert_eq!(parse_buf("addr:0x10:8", None), Ok(Buf::Raw { addr: 16, len: Some(8) }));
        assert_eq!(parse_port_ref("nic0.wire"), Ok(("nic0".into(), "wire".into())));
        assert!(parse_port_ref("nic0").is_err());
        assert!(parse_port_ref("a.b.c").is_err());
        assert_eq!(parse_host_ref("h0.qp", None), Ok(("h0".into(), "qp".into())));
        assert_eq!(
            BufRef { host: "h".into(), name: "r".into(), offset: 8, len: Some(4) }.to_string(),
            "h.r+8:4"
        );
    }

    proptest::proptest! {
        /// Damaged scenarios (a line dropped, doubled or cut short) give a scenario or errors
        /// whose lines lie in the text, never a panic.
        #[test]
        fn damaged_scenarios_give_errors_in_the_text(
            line in 0usize..120, how in 0u8..3, cut in 0usize..40, json in proptest::bool::ANY,
        ) {
            let base = if json { JSON } else { BASE };
            let mut lines: Vec<String> = base.lines().map(str::to_string).collect();
            let i = line % lines.len();
            match how {
                0 => {
                    lines.remove(i);
                }
                1 => {
                    let l = lines[i].clone();
                    lines.insert(i, l);
                }
                _ => {
                    let l = &mut lines[i];
                    let mut at = cut.min(l.len());
                    while !l.is_char_boundary(at) {
                        at -= 1;
                    }
                    l.truncate(at);
                }
            }
            let text = lines.join("\n");
            let format = if json { Format::Json } else { Format::Toml };
            if let Err(errs) = check_str(&text, format, Path::new("t"), Path::new(".")) {
                proptest::prop_assert!(!errs.is_empty());
                for e in errs {
                    let l = e.line.unwrap_or(1);
                    proptest::prop_assert!(l >= 1 && l <= lines.len() + 1, "{}", e);
                }
            }
        }
    }

    /// The first scenario and the JSON example of `docs/scenarios.md` are valid.
    #[test]
    fn the_documented_examples_are_valid() {
        let doc = include_str!("../../../docs/scenarios.md");
        let block = |after: &str, lang: &str| {
            let start = doc.find(after).expect("section");
            let open = start + doc[start..].find(&format!("```{lang}\n")).expect("block");
            let body = open + lang.len() + 4;
            doc[body..body + doc[body..].find("```").expect("end")].to_string()
        };
        let toml = block("## A first scenario", "toml");
        check_str(&toml, Format::Toml, Path::new("doc.toml"), Path::new("."))
            .unwrap_or_else(|e| panic!("{e:#?}"));
        let json = block("## The same in JSON", "json");
        check_str(&json, Format::Json, Path::new("doc.json"), Path::new("."))
            .unwrap_or_else(|e| panic!("{e:#?}"));
    }

    #[test]
    fn what_the_run_would_build_whole_is_bounded() {
        let errs = check(&BASE.replacen(
            "name = \"nic1\"\n",
            "name = \"nic1\"\nmemory = { host = \"64GiB\" }\n",
            1,
        ))
        .expect_err("too much memory");
        assert!(errs.iter().any(|e| e.field.as_deref() == Some("nic[1].memory.host")), "{errs:#?}");
        let errs = check(&BASE.replacen("count = 3", "count = 4000000000", 1))
            .expect_err("too many frames");
        assert!(
            errs.iter().any(|e| e.field.as_deref() == Some("traffic[0].packets[0].count")),
            "{errs:#?}"
        );
        let generated = BASE.replacen(
            "packets = [{ layers = 'Ether()/IP(dst=\"10.0.0.2\")/UDP()/Raw(len=10)', count = 3 }]",
            "generator = { count = 9000000000000 }",
            1,
        );
        let errs = check(&generated).expect_err("too many frames");
        assert!(
            errs.iter().any(|e| e.field.as_deref() == Some("traffic[0].generator.count")),
            "{errs:#?}"
        );
    }

    #[test]
    fn repeated_wrs_stay_in_their_buffers_and_queue() {
        // 16 copies of 4 KiB fill the 64 KiB MRs exactly; 17 run past them.
        let ok = BASE.replacen("remote = \"h1.dmr\" }", "remote = \"h1.dmr\", repeat = 16 }", 1);
        check(&ok).unwrap_or_else(|e| panic!("{e:#?}"));
        let past = BASE.replacen("remote = \"h1.dmr\" }", "remote = \"h1.dmr\", repeat = 17 }", 1);
        let errs = check(&past).expect_err("past the MR");
        assert!(
            errs.iter().any(|e| e.field.as_deref() == Some("op[1].wrs[0].local[0]")
                && e.message.contains("repeat = 17")),
            "{errs:#?}"
        );
        assert!(
            errs.iter().any(|e| e.field.as_deref() == Some("op[1].wrs[0].remote")),
            "{errs:#?}"
        );
        let huge =
            BASE.replacen("local = [\"src+8:8\"]", "local = [\"src+8:8\"], repeat = 4000000000", 1);
        let errs = check(&huge).expect_err("more WRs than the send queue");
        assert!(errs.iter().any(|e| e.field.as_deref() == Some("op[1].wrs")), "{errs:#?}");
    }

    #[test]
    fn a_nic_pipeline_the_build_would_refuse_is_an_error() {
        let errs = check(&BASE.replacen(
            "stages = [\"parse\", \"classify\", \"l2fwd\"]",
            "stages = [\"parse\", \"l2fwd\"]",
            1,
        ))
        .expect_err("no classify");
        assert!(
            errs.iter()
                .any(|e| e.field.as_deref() == Some("nic[0].stages")
                    && e.message.contains("classify")),
            "{errs:#?}"
        );
    }

    #[test]
    fn a_rate_the_link_cannot_take_is_an_error() {
        let errs =
            check(&BASE.replacen("loss = 0.05", "loss = 0.05\nrate_mbps = 18446744073709551", 1))
                .expect_err("bits per second overflow");
        assert!(errs.iter().any(|e| e.field.as_deref() == Some("link[0].rate_mbps")), "{errs:#?}");
    }

    #[test]
    fn a_capture_an_expectation_names_must_exist() {
        let text = format!("{BASE}\n[[expect]]\npcap = \"sw.p2\"\nfile = \"no-such.pcap\"\n");
        let errs = check(&text).expect_err("missing capture");
        assert!(errs.iter().any(|e| e.message.contains("no-such.pcap")), "{errs:#?}");
    }

    #[test]
    fn a_buffer_is_not_compared_with_itself() {
        let text = format!("{BASE}\n[[expect]]\nmemory = \"h0.src\"\nsame_as = \"h0.src\"\n");
        let errs = check(&text).expect_err("cannot fail");
        assert!(errs.iter().any(|e| e.message.contains("the buffer itself")), "{errs:#?}");
    }

    #[test]
    fn huge_sizes_are_errors_not_overflows() {
        let text =
            BASE.replacen("size = \"64KiB\"\ninit", "size = \"17179869183GiB\"\ninit", 1).replacen(
                "region = \"src\"",
                "region = \"src\"\noffset = \"17179869183GiB\"\nlen = \"17179869183GiB\"",
                1,
            );
        let errs = check(&text).expect_err("too big");
        assert!(errs.iter().any(|e| e.field.as_deref() == Some("nic[0].memory.host")), "{errs:#?}");
        assert!(errs.iter().any(|e| e.field.as_deref() == Some("host[0].mr[0].len")), "{errs:#?}");
    }

    #[test]
    fn control_operations_need_their_stage() {
        let ops = r#"
[[op]]
do = "vswitch"
node = "sw"
edits = [{ add_rule = "x" }]
[[op]]
do = "p4"
node = "nic0"
commands = ["table_add t a 1 =>"]
[[op]]
do = "ebpf_map"
node = "nic9"
map = "m"
key = "1"
[[op]]
do = "kernel"
nic = "sw"
kernel = "warp"
"#;
        let text = BASE.replacen("[[expect]]", &format!("{ops}\n[[expect]]"), 1);
        let errs = check(&text).expect_err("four operations without their stage");
        let got: Vec<_> =
            errs.iter().map(|e| (e.field.clone().unwrap_or_default(), e.line)).collect();
        let at = |n: &str| Some(line(&text, ops.lines().nth(1).unwrap_or_default(), n));
        assert_eq!(
            got,
            [
                ("op[5].node".to_string(), at("node = \"sw\"")),
                ("op[6].node".to_string(), at("node = \"nic0\"")),
                ("op[7].node".to_string(), at("node = \"nic9\"")),
                ("op[8].nic".to_string(), at("nic = \"sw\"")),
                ("op[8].kernel".to_string(), at("kernel = \"warp\"")),
            ]
        );
        // A vswitch stage makes the first valid, with a policy and edits together.
        let text = text
            .replacen(
                "ports = [\"p0\", \"p1\", \"p2\"]",
                "ports = [\"p0\", \"p1\", \"p2\"]\nstages = [\"parse\", \"vswitch\"]",
                1,
            )
            .replacen("edits = [", "policy = { file = \"Cargo.toml\" }\nedits = [", 1);
        let errs = check(&text).expect_err("three left");
        assert!(errs.iter().all(|e| e.field.as_deref() != Some("op[5].node")), "{errs:#?}");
        assert!(errs.iter().all(|e| e.field.as_deref() != Some("op[5]")), "{errs:#?}");
    }

    /// Found by the `scenario_load` fuzz target: a TOML error with an empty message.
    #[test]
    fn every_error_has_a_message() {
        let mut text = String::from("#0&Sr");
        text.extend(core::iter::repeat_n('\0', 118));
        text += "c+\u{5fd}";
        for format in [Format::Toml, Format::Json] {
            let errs = check_str(&text, format, Path::new("t"), Path::new(".")).expect_err("junk");
            assert!(errs.iter().all(|e| !e.message.is_empty()), "{errs:#?}");
        }
    }

    #[test]
    fn locating_follows_aliases_and_inline_tables() {
        let text = "[[nics]]\nname = \"a\"\n[[nics]]\nname = \"b\"\nrdma = { dscp = 99 }\n";
        let errs = check(text).expect_err("dscp");
        assert_eq!(errs[0].field.as_deref(), Some("nic[1].rdma.dscp"));
        assert_eq!(errs[0].line, Some(5));
    }
}

#[cfg(test)]
mod default_address_tests {
    use super::*;

    fn check_toml(text: &str) -> Result<Loaded, Vec<LoadError>> {
        check_str(text, Format::Toml, Path::new("t.toml"), Path::new("."))
    }

    #[test]
    fn default_addresses_never_collide_and_do_not_run_out_silently() {
        // nic1 takes the address nic0 would get by default.
        let errs =
            check_toml("[[nic]]\nname = \"a\"\n[[nic]]\nname = \"b\"\nips = [\"192.0.2.1\"]\n")
                .expect_err("a collision");
        assert_eq!(errs[0].field.as_deref(), Some("nic[1].ips[0]"), "{errs:?}");
        // 254 NICs with defaults are fine; the 255th needs its own.
        let many =
            |n: usize| (0..n).map(|i| format!("[[nic]]\nname = \"n{i}\"\n")).collect::<String>();
        assert!(check_toml(&many(254)).is_ok());
        let errs = check_toml(&many(255)).expect_err("defaults run out");
        assert!(errs.iter().any(|e| e.field.as_deref() == Some("nic[254]")), "{errs:?}");
        let ports: Vec<String> = (0..=MAX_PORTS).map(|i| format!("\"p{i}\"")).collect();
        let errs = check_toml(&format!("[[nic]]\nname = \"a\"\nports = [{}]\n", ports.join(",")))
            .expect_err("too many ports");
        assert_eq!(errs[0].field.as_deref(), Some("nic[0].ports"), "{errs:?}");
    }
}
