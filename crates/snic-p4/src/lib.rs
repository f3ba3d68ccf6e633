//! P4-16 for snic: a front end, an executor for two architectures (`v1model::Switch`: BMv2's
//! v1model, and P4.org's Portable NIC Architecture, PNA) and its control plane (`runtime`),
//! sans-IO. The pipeline stage that runs a program on live traffic is in
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
//! - [`builtin`]: our own `core.p4`, `v1model.p4` and `pna.p4`.
//! - [`compile`] / [`ir`]: the checker and compiler to a slot IR; `main` may be a `V1Switch` or
//!   a `PNA_NIC` ([`ir::Arch`]).
//! - [`v1model`]: the [`v1model::Switch`] running either architecture. v1model: BMv2
//!   `simple_switch`'s pipeline. PNA: main parser, pre control, main control, main deparser;
//!   the packet leaves by the last `send_to_port`, else is dropped; `recirculate()`; direction
//!   from [`v1model::Switch::set_host_ports`]. Both: tables the data plane adds to
//!   (`add_on_miss`, `add_entry`) and idle timeouts in packet time
//!   ([`v1model::Switch::take_idle_expired`], [`v1model::Switch::expire`],
//!   [`v1model::Switch::table_set_entry_ttl`], expire time profiles).
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
