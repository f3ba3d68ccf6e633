//! The source map: every file the front end read, and spans into them.

/// Index of a file in a [`SourceMap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

/// A byte range `start..end` of one file's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// The file.
    pub file: FileId,
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

/// One file's name, text and where its lines start.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The name diagnostics print (a path, or `<core.p4>` for a built-in).
    pub name: String,
    /// The text.
    pub text: String,
    line_starts: Vec<u32>,
}

impl SourceFile {
    fn new(name: String, text: String) -> Self {
        let mut line_starts = vec![0];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i as u32 + 1);
            }
        }
        SourceFile { name, text, line_starts }
    }

    /// The 1-based line and column (in characters) of byte `offset` (clamped to the text).
    pub fn line_col(&self, offset: u32) -> (u32, u32) {
        let offset = offset.min(self.text.len() as u32);
        let line = self.line_starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let start = self.line_starts[line] as usize;
        let end = (offset as usize).max(start);
        let col = self.text.get(start..end).map_or(end - start, |s| s.chars().count());
        (line as u32 + 1, col as u32 + 1)
    }

    /// The text of 1-based line `line`, without its newline (empty past the end).
    pub fn line(&self, line: u32) -> &str {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1) as usize) else {
            return "";
        };
        let rest = &self.text[start as usize..];
        rest.split('\n').next().unwrap_or("").trim_end_matches('\r')
    }
}

/// Every file read, in the order read.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a file; returns its id.
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        self.files.push(SourceFile::new(name.into(), text.into()));
        FileId(self.files.len() as u32 - 1)
    }

    /// The file `id` (`None` for an id this map did not give).
    pub fn file(&self, id: FileId) -> Option<&SourceFile> {
        self.files.get(id.0 as usize)
    }

    /// How many files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when no file was added.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based_and_clamped() {
        let mut m = SourceMap::new();
        let f = m.add("a.p4", "header h {\n  bit<8> x;\n}\n");
        let file = m.file(f).unwrap();
        assert_eq!(file.line_col(0), (1, 1));
        assert_eq!(file.line_col(13), (2, 3));
        assert_eq!(file.line(2), "  bit<8> x;");
        assert_eq!(file.line_col(10_000), (4, 1));
        assert_eq!(file.line(99), "");
        assert!(m.file(FileId(7)).is_none());
    }
}
