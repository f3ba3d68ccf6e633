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
