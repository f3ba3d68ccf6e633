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

/// Read and validate the scenario in `path`.
pub fn load_file(path: &Path) -> Result<Loaded, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError {
        file: path.to_path_buf(),
        line: None,
        field: None,
        message: e.to_string(),
    })?;
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Format::Json,
        Some("toml") => Format::Toml,
        _ if text.trim_start().starts_with('{') => Format::Json,
        _ => Format::Toml,
    };
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    load_str(&text, format, path, &dir)
}

/// Read and validate a scenario from `text`; `origin` names it in errors; relative paths are
/// relative to `dir`.
pub fn load_str(
    text: &str,
    format: Format,
    origin: &Path,
    dir: &Path,
) -> Result<Loaded, LoadError> {
    let err = |line, message: String| LoadError {
        file: origin.to_path_buf(),
        line,
        field: None,
        message,
    };
    let mut scenario: Scenario = match format {
        Format::Json => {
            serde_json::from_str(text).map_err(|e| err(Some(e.line()), e.to_string()))?
        }
        Format::Toml => toml::from_str(text).map_err(|e| err(None, e.to_string()))?,
    };
    if scenario.name.is_empty() {
        scenario.name =
            origin.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario").to_string();
    }
    Ok(Loaded { scenario, path: origin.to_path_buf(), dir: dir.to_path_buf() })
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
fn parse_num(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).map_err(|_| format!("{t:?} is not a hex number"));
    }
    t.parse::<crate::schema::Size>().map(|s| s.0)
}
