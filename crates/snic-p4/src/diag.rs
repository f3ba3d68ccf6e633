//! Diagnostics: errors and warnings that name the file, line and column, with the source line
//! and a caret under the place.

use crate::span::{SourceMap, Span};
use core::fmt::Write as _;

/// How bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The program is refused.
    Error,
    /// The program is accepted; something deserves a look.
    Warning,
}

/// One message about the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Where, when known.
    pub span: Option<Span>,
    /// What, in one sentence. Unsupported features start with `unsupported: `.
    pub message: String,
}

impl Diagnostic {
    /// An error at `span`.
    pub fn error(span: Option<Span>, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Error, span, message: message.into() }
    }

    /// A warning at `span`.
    pub fn warning(span: Option<Span>, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, span, message: message.into() }
    }

    /// An error for a feature snic does not implement: `unsupported: what`.
    pub fn unsupported(span: Option<Span>, what: impl core::fmt::Display) -> Self {
        Self::error(span, format!("unsupported: {what}"))
    }

    /// `file:line:col: error: message`, then the source line and a caret under the span.
    pub fn render(&self, map: &SourceMap) -> String {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let Some((span, file)) = self.span.and_then(|s| Some((s, map.file(s.file)?))) else {
            return format!("{kind}: {}", self.message);
        };
        let (line, col) = file.line_col(span.start);
        let mut out = format!("{}:{line}:{col}: {kind}: {}\n", file.name, self.message);
        let text = file.line(line);
        let (_, end_col) = file.line_col(span.end.max(span.start + 1));
        let width = if file.line_col(span.end).0 == line { end_col.saturating_sub(col) } else { 1 };
        let _ = write!(
            out,
            "{text}\n{}{}",
            " ".repeat(col as usize - 1),
            "^".repeat(width.max(1) as usize)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span::SourceMap;

    #[test]
    fn render_names_the_place_and_underlines_it() {
        let mut m = SourceMap::new();
        let f = m.add("x.p4", "control c() {\n    apply { foo(); }\n}\n");
        let d = Diagnostic::error(Some(Span { file: f, start: 26, end: 29 }), "no such action");
        assert_eq!(
            d.render(&m),
            "x.p4:2:13: error: no such action\n    apply { foo(); }\n            ^^^"
        );
        let u = Diagnostic::unsupported(None, "header unions in select");
        assert_eq!(u.render(&m), "error: unsupported: header unions in select");
    }
}
