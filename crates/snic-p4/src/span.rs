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
    /// The number the first line reports (1, or what a `#line` directive said).
    first_line: u32,
}

impl SourceFile {
    fn new(name: String, text: String) -> Self {
        let mut line_starts = vec![0];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i as u32 + 1);
            }
        }
        SourceFile { name, text, line_starts, first_line: 1 }
    }

    /// The line number the first line reports: 1, or a `#line` directive's for a piece of a
    /// file the preprocessor registered with [`SourceMap::add_at_line`].
    pub fn first_line(&self) -> u32 {
        self.first_line
    }

    /// The 1-based line and column (in characters) of byte `offset` (clamped to the text).
    pub fn line_col(&self, offset: u32) -> (u32, u32) {
        let offset = offset.min(self.text.len() as u32);
        let line = self.line_starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let start = self.line_starts[line] as usize;
        let end = (offset as usize).max(start);
        let col = self.text.get(start..end).map_or(end - start, |s| s.chars().count());
        ((line as u32).saturating_add(self.first_line), col as u32 + 1)
    }

    /// The text of 1-based line `line`, without its newline (empty past the end).
    pub fn line(&self, line: u32) -> &str {
        let Some(index) = line.checked_sub(self.first_line) else {
            return "";
        };
        let Some(&start) = self.line_starts.get(index as usize) else {
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

    /// Add a file whose first line reports as line `first_line` (for `#line`: the preprocessor
    /// registers the text after the directive under the name and number it gave); returns its
    /// id. `first_line` 0 counts as 1.
    pub fn add_at_line(
        &mut self,
        name: impl Into<String>,
        text: impl Into<String>,
        first_line: u32,
    ) -> FileId {
        let mut file = SourceFile::new(name.into(), text.into());
        file.first_line = first_line.max(1);
        self.files.push(file);
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

    #[test]
    fn a_file_added_at_a_line_numbers_from_it() {
        let mut m = SourceMap::new();
        let f = m.add_at_line("gen.p4", "a\nbc\n", 40);
        let file = m.file(f).unwrap();
        assert_eq!(file.first_line(), 40);
        assert_eq!(file.line_col(3), (41, 2));
        assert_eq!(file.line(41), "bc");
        assert_eq!(file.line(39), "");
        assert_eq!(file.line(1), "");
    }
}
