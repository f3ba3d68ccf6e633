//! eBPF on the NIC: programs people already write for Linux XDP, compiled by
//! `clang -O2 -target bpf`, loaded from their ELF objects ([`object`]), verified before they run
//! ([`verify`](mod@verify), PREVAIL), and run by snic's interpreter or JIT over snic's own maps.

pub mod core;
pub mod helpers;
pub mod insn;
pub mod jit;
pub mod maps;
pub mod object;
pub mod platform;
pub mod raw;
pub mod stage;
pub mod verify;
pub mod vm;
pub mod xdp;

pub use insn::Insn;
pub use jit::{JitError, JitProgram};
pub use maps::{Map, MapError, MapSet};
pub use object::{LoadError, MapKind, MapSpec, Object, ProgKind, Program};
pub use verify::{Refusal, Verdict, verify};
pub use vm::{Env, Fault, PrepareError, Prepared, Worker, XdpCtx, prepare};
pub use xdp::{Engine, LoadFailure, XdpAction, XdpOutcome, XdpProgram};

#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
#[path = "unsafe_programs_tests.rs"]
mod unsafe_programs_tests;
