//! The `kernel:NAME[,K=V]` stages of a run: streaming kernels (`snic-stream`), one instance
//! per worker, and their control handles for the control plane.
//!
//! [`StreamKernels::from_stages`] builds every kernel stage a stage list names, for every
//! worker, before the pipelines are built; the pipeline factory then takes worker `k`'s
//! instance of the `n`-th kernel stage ([`StreamKernels::take`]). The control plane keeps
//! the [`KernelControl`]s ([`StreamKernels::controls`]), one per kernel stage, named by the
//! kernel (`telemetry`), with `.1`, `.2`, ... for a second and third stage of one kernel.
//!
//! This layer supplies what a sans-IO kernel may not fetch itself: the per-process random
//! salt of `crypt`'s nonces (from `/dev/urandom`).

use snic_pipeline::StageSpec;
use snic_stream::{KernelControl, KernelError, KernelStage, Registry};
use std::io::Read;

/// Every kernel stage of a stage list: controls and the not yet placed worker stages.
#[derive(Debug, Default)]
pub struct StreamKernels {
    controls: Vec<KernelControl>,
    /// `stages[n][k]`: worker `k`'s instance of kernel stage `n`.
    stages: Vec<Vec<Option<KernelStage>>>,
}

/// Four random bytes from the system (the nonce salt). Falls back to the standard library's
/// randomly seeded hasher when `/dev/urandom` cannot be read.
pub fn random_salt() -> [u8; 4] {
    let mut b = [0u8; 4];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if read.is_err() {
        use std::hash::BuildHasher;
        let h = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        b.copy_from_slice(&h.to_le_bytes()[..4]);
    }
    b
}

impl StreamKernels {
    /// Build every `kernel:` stage of `stages` for `workers` workers with the built-in
    /// kernels. An unknown kernel or a bad argument is an error naming the stage.
    pub fn from_stages(stages: &[StageSpec], workers: usize) -> Result<StreamKernels, String> {
        Self::with_registry(&Registry::with_builtins(), stages, workers)
    }

    /// [`StreamKernels::from_stages`] with the kernels of `registry`.
    pub fn with_registry(
        registry: &Registry,
        stages: &[StageSpec],
        workers: usize,
    ) -> Result<StreamKernels, String> {
        Self::with_salt(registry, stages, workers, random_salt())
    }

    /// [`StreamKernels::with_registry`] with a given nonce salt (a reproducible run: the
    /// deterministic testbed derives it from its seed).
    pub fn with_salt(
        registry: &Registry,
        stages: &[StageSpec],
        workers: usize,
        salt: [u8; 4],
    ) -> Result<StreamKernels, String> {
        let mut out = StreamKernels::default();
        for spec in stages {
            let StageSpec::Kernel { name, args } = spec else { continue };
            let same = out.controls.iter().filter(|c| c.kernel() == name.as_str()).count();
            let instance = if same == 0 { name.clone() } else { format!("{name}.{same}") };
            let (ctl, st) = registry
                .stages(&instance, name, args, workers, salt)
                .map_err(|e: KernelError| format!("stage {spec}: {e}"))?;
            out.controls.push(ctl);
            out.stages.push(st.into_iter().map(Some).collect());
        }
        Ok(out)
    }

    /// True when the stage list had no kernel stage.
    pub fn is_empty(&self) -> bool {
        self.controls.is_empty()
    }

    /// The control handles, in stage order.
    pub fn controls(&self) -> &[KernelControl] {
        &self.controls
    }

    /// Worker `worker`'s instance of the `n`-th kernel stage (each is taken once).
    pub fn take(&mut self, n: usize, worker: usize) -> Option<KernelStage> {
        self.stages.get_mut(n)?.get_mut(worker)?.take()
    }

    /// A pipeline factory step for worker `worker`: counts the kernel specs it is shown (the
    /// pipeline builds stages in order) and hands out the matching instance.
    pub fn factory_for(
        &mut self,
        worker: usize,
    ) -> impl FnMut(
        &StageSpec,
    ) -> Option<Result<Box<dyn snic_pipeline::Stage>, snic_pipeline::BuildError>>
    + '_ {
        let mut n = 0;
        move |spec| {
            let StageSpec::Kernel { .. } = spec else { return None };
            let got = self.take(n, worker);
            n += 1;
            Some(got.map(|s| Box::new(s) as Box<dyn snic_pipeline::Stage>).ok_or_else(|| {
                snic_pipeline::BuildError::Stage {
                    stage: spec.to_string(),
                    why: format!("no kernel instance for worker {worker}"),
                }
            }))
        }
    }
}
