//! P4-16 for snic: a front end, a v1model executor (`v1model::Switch`) and its control plane
//! (`runtime`), sans-IO. The pipeline stage that runs a program on live traffic is in
//! `snic-io`, which reads the files.
//!
//! What is here so far:
//! - [`span`]: the source map (every file the front end read, by [`span::FileId`]) and
//!   [`span::Span`]s into it; [`diag`]: diagnostics that name the file, line and column with the
//!   source line and a caret.
//! - [`pre`]: the preprocessor (`#include`, `#define`, conditionals, `#line`), whose output
//!   keeps a map back to the original locations.
//! - [`lex`]: the lexer, P4-16 tokens with their byte ranges.
//! - [`stf`]: p4c's STF test format, parsed into commands.
//!
//! - [`builtin`]: our own `core.p4` and `v1model.p4`.
//! - [`algo`]: the pure computations of a v1model executor, bit-exact with BMv2: the input
//!   buffer of hashes and checksums, the hash algorithms, and two-rate three-colour meters.
//! - [`cli`]: BMv2 `simple_switch_CLI` command lines (table entries files, runtime commands),
//!   parsed into commands, with the key and parameter value conversions.
//! - [`runtime`]: `simple_switch_CLI` commands applied to running switches (table entries,
//!   counters, registers, meters, multicast, mirroring), with the CLI's answers as text.
//! - [`table`]: match-action tables (exact, lpm, ternary, range, optional) with BMv2's
//!   semantics, for the executor.
//!
//! The crate reads no file itself: includes are resolved through a [`pre::Loader`] the caller
//! gives ([`builtin::Builtins`] knows the built-in files; the CLI's will add the disk).

pub mod algo;
pub mod ast;
pub mod builtin;
pub mod cli;
pub mod compile;
pub mod diag;
pub mod exec;
pub mod ir;
pub mod lex;
pub mod parse;
pub mod pre;
pub mod runner;
pub mod runtime;
pub mod span;
pub mod stf;
pub mod table;
pub mod v1model;
