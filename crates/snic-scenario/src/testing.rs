//! The test kit (feature `testing`) this crate's tests share: scenarios from TOML text or
//! files, runs that fail the test with the loader's or runner's own message, hex frames.

use crate::load::{Format, Loaded, load_file, load_str};
use crate::{Report, RunOptions};
use std::path::Path;

/// The scenario in `text` (TOML), its relative paths relative to `dir`; panics with the
/// loader's message (file, line, field) when it does not load.
pub fn load_toml_in(text: &str, dir: &Path) -> Loaded {
    load_str(text, Format::Toml, &dir.join("test.toml"), dir).unwrap_or_else(|e| panic!("{e}"))
}

/// [`load_toml_in`] relative to the current directory.
pub fn load_toml(text: &str) -> Loaded {
    load_toml_in(text, Path::new("."))
}

/// The scenario in the file at `path`; panics with the loader's message.
pub fn load_path(path: &Path) -> Loaded {
    load_file(path).unwrap_or_else(|e| panic!("{}: does not load: {e}", path.display()))
}

/// Run `loaded` with `opts`; panics when it cannot run at all (a failed expectation is not a
/// panic: it is in the report).
pub fn run_with(loaded: &Loaded, opts: &RunOptions) -> Report {
    crate::run(loaded, opts)
        .unwrap_or_else(|e| panic!("{}: does not run: {e}", loaded.path.display()))
}

/// Run `loaded` on the simulated clock with its own seed.
pub fn run(loaded: &Loaded) -> Report {
    run_with(loaded, &RunOptions::default())
}

/// Lower-case hex of a frame, as scenario files write frames.
pub fn hex(frame: &[u8]) -> String {
    crate::golden::hex(frame)
}
