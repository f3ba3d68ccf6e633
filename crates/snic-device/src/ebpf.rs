//! eBPF programs on the NIC core: `SEC("snic/core")` programs (`snic-ebpf`'s
//! [`CoreProgram`]) served as the lookaside kernel [`ids::EBPF`] through the kernel FIFOs,
//! like the built-in kernels.
//!
//! [`CorePrograms`] is the device's table of loaded programs, by slot, shared by every compute
//! worker and the control plane (`snic serve --core-prog FILE`, `snic ebpf load --core SLOT`).
//! A command's scalar `s0` picks the slot; `s1..s7` are the program's scalars. Each compute
//! worker runs commands with its own [`EbpfKernel`] (its own VM stack and PRNG).
//!
//! Arguments are checked like every kernel's, with [`Invocation::check`]: every address
//! argument must be the client's memory (device memory, or host memory it registered), and,
//! since the program may write any of them, none may overlap another. The argument bytes are
//! copied into buffers, the program runs over those (as slices; the interpreter bounds every
//! access to them), and only when it returns normally are changed bytes written back: a
//! refused command or a program fault writes nothing.

use std::sync::{Arc, RwLock};

use snic_compute::{Invocation, KernelError, LookasideKernel, ids};
use snic_dma::AddressSpace;
use snic_ebpf::core::CoreProgram;
use snic_ebpf::{LoadFailure, MapSet, Object};

/// Program slots of [`CorePrograms`].
pub const CORE_SLOTS: usize = 64;

/// One loaded NIC-core program.
#[derive(Debug)]
pub struct CoreEntry {
    /// The object file it came from.
    pub path: String,
    /// `section/function`.
    pub name: String,
    /// Instruction count.
    pub insns: usize,
    /// The program.
    pub program: CoreProgram,
}

/// The device's NIC-core programs, by slot (shared; cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct CorePrograms {
    slots: Arc<RwLock<Vec<Option<Arc<CoreEntry>>>>>,
}

impl PartialEq for CorePrograms {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.slots, &other.slots)
    }
}

impl Eq for CorePrograms {}

/// Why a NIC-core program was not loaded.
#[derive(Debug, Clone, PartialEq)]
pub enum CoreLoadError {
    /// The slot is not below [`CORE_SLOTS`].
    BadSlot(usize),
    /// The file could not be read.
    Read(String),
    /// The object did not load, verify or prepare.
    Load(LoadFailure),
    /// The maps could not be created.
    Maps(snic_ebpf::MapError),
}

impl std::fmt::Display for CoreLoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoreLoadError::BadSlot(s) => write!(f, "slot {s} is not below {CORE_SLOTS}"),
            CoreLoadError::Read(e) => f.write_str(e),
            CoreLoadError::Load(e) => write!(f, "{e}"),
            CoreLoadError::Maps(e) => write!(f, "creating maps: {e}"),
        }
    }
}

impl std::error::Error for CoreLoadError {}

impl CorePrograms {
    /// No programs.
    pub fn new() -> CorePrograms {
        CorePrograms::default()
    }

    /// Load the `snic/core` program of the object `bytes` (in `section`, or its first) into
    /// `slot`, replacing what was there; `workers` is the number of compute workers (per-CPU
    /// maps). Verified first: on error the slot is unchanged.
    pub fn load(
        &self,
        slot: usize,
        bytes: &[u8],
        path: &str,
        section: Option<&str>,
        workers: usize,
    ) -> Result<Arc<CoreEntry>, CoreLoadError> {
        if slot >= CORE_SLOTS {
            return Err(CoreLoadError::BadSlot(slot));
        }
        let obj = Object::parse(bytes, path).map_err(|e| CoreLoadError::Load(e.into()))?;
        let maps = MapSet::new(&obj, workers.max(1)).map_err(CoreLoadError::Maps)?;
        let program = CoreProgram::load(&obj, section, maps).map_err(CoreLoadError::Load)?;
        let p = obj.programs.iter().find(|p| match section {
            Some(s) => p.section == s,
            None => p.kind == snic_ebpf::ProgKind::NicCore,
        });
        let entry = Arc::new(CoreEntry {
            path: path.to_owned(),
            name: p.map(|p| format!("{}/{}", p.section, p.name)).unwrap_or_default(),
            insns: p.map_or(0, |p| p.insns.len()),
            program,
        });
        let mut slots = self.slots.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() <= slot {
            slots.resize(slot + 1, None);
        }
        slots[slot] = Some(Arc::clone(&entry));
        Ok(entry)
    }

    /// [`CorePrograms::load`] from a file.
    pub fn load_file(
        &self,
        slot: usize,
        path: &std::path::Path,
        section: Option<&str>,
        workers: usize,
    ) -> Result<Arc<CoreEntry>, CoreLoadError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| CoreLoadError::Read(format!("{name}: {e}")))?;
        self.load(slot, &bytes, &name, section, workers)
    }

    /// The program in `slot`.
    pub fn get(&self, slot: usize) -> Option<Arc<CoreEntry>> {
        let slots = self.slots.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.get(slot).cloned().flatten()
    }

    /// `(slot, entry)` of every loaded program.
    pub fn list(&self) -> Vec<(usize, Arc<CoreEntry>)> {
        let slots = self.slots.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.iter().enumerate().filter_map(|(i, e)| e.clone().map(|e| (i, e))).collect()
    }

    /// Compute worker `worker`'s kernel over these programs.
    pub fn kernel(&self, worker: usize) -> EbpfKernel {
        EbpfKernel { programs: self.clone(), vm: snic_ebpf::Worker::new(worker) }
    }
}

/// The [`ids::EBPF`] kernel of one compute worker.
#[derive(Debug)]
pub struct EbpfKernel {
    programs: CorePrograms,
    vm: snic_ebpf::Worker,
}

impl LookasideKernel for EbpfKernel {
    fn id(&self) -> u32 {
        ids::EBPF
    }
    fn name(&self) -> &'static str {
        "ebpf"
    }
    fn usage(&self) -> &'static str {
        "s0 program slot, s1..s7 its scalars; a0..a7 its memory (a0 = data); result = r0"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let n = usize::from(inv.cmd.n_addrs).min(snic_compute::MAX_ADDRS);
        let all: Vec<usize> = (0..n).collect();
        let spans = inv.check(mem, 0..=snic_compute::MAX_ADDRS, 1..=8, &all)?;
        let slot = usize::try_from(inv.scalar(0)).unwrap_or(usize::MAX);
        let entry =
            self.programs.get(slot).ok_or(KernelError::BadArgs("no eBPF program in that slot"))?;
        let mut bufs = Vec::with_capacity(spans.len());
        for (arg, s) in spans.iter().enumerate() {
            let b =
                mem.span_bytes(s, s.len()).map_err(|err| KernelError::BadAddress { arg, err })?;
            bufs.push(b.to_vec());
        }
        let scalars: [u64; 8] = std::array::from_fn(|i| if i < 7 { inv.scalar(i + 1) } else { 0 });
        let r = {
            let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
            entry.program.run_with(&mut self.vm, &mut slices, &scalars, inv.cmd.workload, 0)
        };
        let r0 = r.map_err(|_| KernelError::BadArgs("the eBPF program faulted"))?;
        for (arg, (s, b)) in spans.iter().zip(&bufs).enumerate() {
            let same = mem.span_bytes(s, s.len()).is_ok_and(|old| old == b.as_slice());
            if !same {
                mem.write_span(s, b).map_err(|err| KernelError::BadAddress { arg, err })?;
            }
        }
        Ok(r0)
    }
}
