//! Streaming kernels: user code that runs on every packet of the packet path, as RecoNIC's
//! streaming compute block runs P4 kernels beside the packet pipeline.
//!
//! A kernel implements [`StreamKernel`]: it sees each packet of a batch (headers and payload),
//! may rewrite it, drop it (counted under a named [`snic_pipeline::DropReason`]) or emit
//! packets of its own, and publishes its results into a [`ResultsRegion`]: device memory in
//! `snic serve` (a host program reads it with the memory API), heap memory in `snic run`.
//! Each kernel has a file of numbered `u32` registers and, when it needs them, key slots,
//! which the control plane sets on a running snic through [`KernelControl`].
//!
//! [`KernelStage`] is the pipeline stage over one kernel instance (one per worker);
//! [`Registry`] builds the built-in kernels by name for the I/O layer's `kernel:NAME[,K=V]`
//! stages:
//! - [`telemetry`]: per-flow packets, bytes, first/last time, inter-arrival and size
//!   histograms, in a bounded table with a counted overflow ([`table`] is its layout and
//!   decoder);
//! - [`crypt`]: ChaCha20-Poly1305 over UDP payloads (encrypt on one NIC, decrypt and verify on
//!   the peer), keys from the control plane.
//!
//! # A kernel of your own
//!
//! ```
//! use snic_pipeline::{Batch, DropReason, PacketBuf, Pipeline, PortId};
//! use snic_stream::{Emit, KernelControl, StreamKernel, Verdict};
//! use snic_time::Instant;
//!
//! /// Drops frames shorter than 64 bytes, counts the others in register 0.
//! #[derive(Debug, Default)]
//! struct Runts {
//!     passed: u32,
//! }
//!
//! impl StreamKernel for Runts {
//!     fn name(&self) -> &'static str {
//!         "runts"
//!     }
//!     fn process(&mut self, _now: Instant, pkt: &mut PacketBuf, _: &mut Emit<'_>) -> Verdict {
//!         if pkt.len() < 64 {
//!             return Verdict::Drop(DropReason::KernelDrop);
//!         }
//!         self.passed += 1;
//!         Verdict::Pass
//!     }
//!     fn read_reg(&self, idx: u32) -> Option<u32> {
//!         (idx == 0).then_some(self.passed)
//!     }
//! }
//!
//! // One instance per worker (here one), and the handle the control plane keeps.
//! let (_ctl, stages) =
//!     KernelControl::new("runts", "kernel:runts", 1, |_| Ok(Box::new(Runts::default())))?;
//! let mut pipeline = Pipeline::new();
//! for s in stages {
//!     pipeline.push(Box::new(s));
//! }
//! let mut batch = Batch::new(4);
//! batch.push_frame(&[0; 60]).unwrap();
//! batch.push_frame(&[0; 64]).unwrap().meta.egress = Some(PortId(1));
//! pipeline.process(Instant::ZERO, &mut batch);
//! assert_eq!(batch.len(), 1);
//! assert_eq!(pipeline.counters().stages[0].drops.get(DropReason::KernelDrop), 1);
//! # Ok::<(), snic_stream::KernelError>(())
//! ```
//!
//! A program that runs its own kernels by name adds them to a [`Registry`]
//! ([`Registry::register`]) and builds its stages from it.
//!
//! This crate is sans-IO: it opens nothing, spawns nothing and reads no clock (time comes in
//! with each batch; randomness for nonces comes in from the I/O layer as a salt). It is not
//! the lookaside kernels' crate (`snic-compute`, kernels over memory driven by FIFOs).

pub mod crypt;
pub mod kernel;
pub mod stage;
pub mod table;
pub mod telemetry;

pub use kernel::{
    Access, Emit, EmitFull, HeapRegion, KernelError, RegInfo, ResultsRegion, StreamKernel, Verdict,
};
pub use stage::{KernelControl, KernelStage};

/// A kernel stage's spec as text for listings and logs, with key material left out
/// (`key=<redacted>`): the control plane and the logs show which stage it is, never its key.
pub fn spec_text(name: &str, args: &[(String, String)]) -> String {
    let mut spec = format!("kernel:{name}");
    for (k, v) in args {
        let v = if k == "key" { "<redacted>" } else { v.as_str() };
        spec.push_str(&format!(",{k}={v}"));
    }
    spec
}

/// The built-in kernels' names.
pub const KERNELS: &[&str] = &["telemetry", "crypt"];

/// What the I/O layer gives a kernel when it builds one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelEnv {
    /// The worker the instance runs on.
    pub worker: u32,
    /// Random bytes chosen once per process (nonce salt of `crypt`).
    pub salt: [u8; 4],
}

/// Builds a kernel from its stage arguments.
pub type Constructor =
    fn(&[(String, String)], KernelEnv) -> Result<Box<dyn StreamKernel>, KernelError>;

/// Kernels by name: the built-ins, and any a user adds with [`Registry::register`].
#[derive(Debug, Clone)]
pub struct Registry {
    kernels: Vec<(&'static str, Constructor)>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::with_builtins()
    }
}

impl Registry {
    /// `telemetry` and `crypt`.
    pub fn with_builtins() -> Registry {
        Registry {
            kernels: vec![
                ("telemetry", |args, env| {
                    Ok(Box::new(telemetry::Telemetry::from_args(args, env.worker)?))
                }),
                ("crypt", |args, env| {
                    Ok(Box::new(crypt::Crypt::from_args(args, env.worker, env.salt)?))
                }),
            ],
        }
    }

    /// Add (or replace) the kernel called `name`.
    pub fn register(&mut self, name: &'static str, make: Constructor) {
        self.kernels.retain(|(n, _)| *n != name);
        self.kernels.push((name, make));
    }

    /// The kernels' names.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.kernels.iter().map(|(n, _)| *n)
    }

    /// Build kernel `name` with `args`.
    pub fn build(
        &self,
        name: &str,
        args: &[(String, String)],
        env: KernelEnv,
    ) -> Result<Box<dyn StreamKernel>, KernelError> {
        let (_, make) = self
            .kernels
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| KernelError::UnknownKernel(name.to_owned()))?;
        make(args, env)
    }

    /// Build the control handle and the `workers` stages of one `kernel:NAME[,K=V]` stage.
    /// `instance` names it for the control plane (see [`KernelControl::instance`]).
    pub fn stages(
        &self,
        instance: &str,
        name: &str,
        args: &[(String, String)],
        workers: usize,
        salt: [u8; 4],
    ) -> Result<(KernelControl, Vec<KernelStage>), KernelError> {
        let spec = spec_text(name, args);
        KernelControl::new(instance, &spec, workers, |worker| {
            self.build(name, args, KernelEnv { worker, salt })
        })
    }
}
