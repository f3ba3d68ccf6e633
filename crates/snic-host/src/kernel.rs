//! The control API of the lookaside kernels: each kernel id has its own slot in the client's
//! BAR (control FIFO, status FIFO, user registers, counters; see [`snic_hostif::abi`]), served
//! by one of snic's compute workers. A command goes to the control FIFO of the kernel it
//! names; its status comes back in that kernel's status FIFO, found by polling the status
//! producer index or, in interrupt mode, by sleeping on the kernel's eventfd.
//!
//! Statuses of one kernel come back in the order its commands were taken. A wait for one
//! workload reads past the statuses of others: those are stashed (per kernel) and handed out
//! by later polls and waits, never lost.

use std::os::fd::AsFd;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use snic_hostif::abi;
use snic_hostif::proto::Request;
use snic_hostif::shm::EventFd;

use crate::conn::{KernelState, lock};
use crate::deadline::Deadline;
use crate::device::Device;
use crate::error::{HostError, Result};

/// A command for a lookaside kernel (a control-FIFO entry) and its status (a status-FIFO
/// entry): snic-compute's types, the same on both sides of the FIFOs.
pub use snic_compute::{AddrArg, KernelCmd, KernelStatus};

/// A kernel snic offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// Kernel id (its slot; the `kernel` field of its commands).
    pub id: u32,
    /// Short name (`"copy"`, `"gemm"` ...); `"kernel<id>"` when this library does not know it.
    pub name: String,
    /// What its arguments are (empty when this library does not know it).
    pub usage: String,
}

/// A kernel's counters for this client, as snic keeps them in the kernel's slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelSlotCounters {
    /// Commands run (failed ones included; wraps at 2^32).
    pub runs: u32,
    /// Commands that failed.
    pub errors: u32,
    /// Status code of the last command.
    pub last_status: u32,
    /// Nanoseconds the kernel ran for this client.
    pub busy_ns: u64,
}

fn check_kernel(kernel: u32) -> Result<()> {
    if kernel >= abi::MAX_KERNELS {
        return Err(HostError::OutOfRange(format!(
            "kernel id {kernel} (must be below {})",
            abi::MAX_KERNELS
        )));
    }
    Ok(())
}

impl Device {
    /// The kernels snic offers (its `KERNELS` register), with names and usage lines from
    /// this library's copy of snic's built-in kernels.
    pub fn kernels(&self) -> Vec<KernelInfo> {
        let mask = self.inner.bar.load_u32(abi::KERNELS);
        let known = snic_compute::builtins();
        (0..abi::MAX_KERNELS)
            .filter(|id| mask & 1 << id != 0)
            .map(|id| match known.iter().find(|k| k.id() == id) {
                Some(k) => KernelInfo { id, name: k.name().into(), usage: k.usage().into() },
                // Served by the device's eBPF runtime, not among the built-ins.
                None if id == snic_compute::ids::EBPF => KernelInfo {
                    id,
                    name: "ebpf".into(),
                    usage: "s0 program slot, s1..s7 its scalars; a0..a7 its memory (a0 = data); \
                            result = r0"
                        .into(),
                },
                None => KernelInfo { id, name: format!("kernel{id}"), usage: String::new() },
            })
            .collect()
    }

    /// The id of the kernel called `name`, if snic offers it.
    pub fn kernel_id(&self, name: &str) -> Option<u32> {
        self.kernels().into_iter().find(|k| k.name == name).map(|k| k.id)
    }

    fn kernel_state(&self, kernel: u32) -> Result<MutexGuard<'_, KernelState>> {
        check_kernel(kernel)?;
        let m = self.inner.kernels.get(kernel as usize).ok_or_else(|| {
            HostError::OutOfRange(format!("kernel id {kernel} has no slot state"))
        })?;
        Ok(lock(m))
    }

    /// Push `cmd` on the control FIFO of the kernel it names ([`HostError::RingFull`] when
    /// that FIFO is full; [`HostError::OutOfRange`] for an id without a slot). snic checks the
    /// arguments; a refused command comes back as an error status.
    pub fn kernel_submit(&self, cmd: &KernelCmd) -> Result<()> {
        let kernel = cmd.kernel;
        let mut k = self.kernel_state(kernel)?;
        let bar = &self.inner.bar;
        let taken = bar.load_u32(abi::kernel_reg(kernel, abi::KCTL_CIDX));
        if k.ctl_pidx.wrapping_sub(taken) >= abi::KFIFO_DEPTH {
            return Err(HostError::RingFull);
        }
        bar.write(abi::kctl_slot(kernel, k.ctl_pidx), &cmd.encode())
            .ok_or_else(|| HostError::OutOfRange("control FIFO slot".into()))?;
        k.ctl_pidx = k.ctl_pidx.wrapping_add(1);
        // Release: the entry is visible before the new producer index.
        bar.store_u32(abi::kernel_reg(kernel, abi::KCTL_PIDX), k.ctl_pidx);
        drop(k);
        self.inner.kick_kernel(kernel);
        Ok(())
    }

    /// Move every status snic wrote for `kernel` into the stash; true when any was read (the
    /// compute worker may then be waiting for room: kicked).
    fn kernel_drain(&self, kernel: u32, k: &mut KernelState) -> bool {
        let bar = &self.inner.bar;
        let written = bar.load_u32(abi::kernel_reg(kernel, abi::KSTS_PIDX));
        let mut took = false;
        while k.sts_cidx != written {
            let mut e = [0u8; abi::KSTS_SIZE];
            if bar.read(abi::ksts_slot(kernel, k.sts_cidx), &mut e).is_none() {
                break;
            }
            k.stash.push_back(KernelStatus::decode(&e));
            k.sts_cidx = k.sts_cidx.wrapping_add(1);
            took = true;
        }
        if took {
            bar.store_u32(abi::kernel_reg(kernel, abi::KSTS_CIDX), k.sts_cidx);
            self.inner.kick_kernel(kernel);
        }
        took
    }

    /// The oldest status of `kernel` not handed out yet, if any (never waits).
    pub fn kernel_poll(&self, kernel: u32) -> Result<Option<KernelStatus>> {
        let mut k = self.kernel_state(kernel)?;
        if k.stash.is_empty() {
            self.kernel_drain(kernel, &mut k);
        }
        Ok(k.stash.pop_front())
    }

    /// Wait up to `timeout` for the status of `workload` on `kernel`: sleeping on the
    /// kernel's eventfd in interrupt mode ([`Device::kernel_set_interrupt`]), else polling
    /// the status FIFO (spinning for 50 us, then napping a sixteenth of the time waited
    /// between looks). Statuses of other workloads read meanwhile are kept for later polls
    /// and waits. With several commands of one workload in flight, the oldest status is
    /// returned.
    pub fn kernel_wait(
        &self,
        kernel: u32,
        workload: u32,
        timeout: Duration,
    ) -> Result<KernelStatus> {
        let mut deadline = Deadline::new(timeout);
        loop {
            let irq = {
                let mut k = self.kernel_state(kernel)?;
                if let Some(s) = take_workload(&mut k, workload) {
                    return Ok(s);
                }
                if self.kernel_drain(kernel, &mut k)
                    && let Some(s) = take_workload(&mut k, workload)
                {
                    return Ok(s);
                }
                if k.interrupt { k.irq.clone() } else { None }
            };
            // The eventfd counts every signal since it was last read: a status written
            // after the drain above has already made it readable. Polling backs off from
            // spinning to short naps once the kernel has run a while.
            match irq {
                Some(e) => deadline.pause(Some(&e))?,
                None => deadline.pause_backoff()?,
            }
        }
    }

    /// Run one command: submit it (waiting for room in the control FIFO while `timeout`
    /// allows) and wait for its status ([`Device::kernel_wait`] on its workload id).
    pub fn kernel_run(&self, cmd: &KernelCmd, timeout: Duration) -> Result<KernelStatus> {
        let mut deadline = Deadline::new(timeout);
        loop {
            match self.kernel_submit(cmd) {
                Err(HostError::RingFull) => {
                    // The kernel may be held back by a full status FIFO: make room.
                    let mut k = self.kernel_state(cmd.kernel)?;
                    self.kernel_drain(cmd.kernel, &mut k);
                    drop(k);
                    deadline.pause(None)?;
                }
                r => break r?,
            }
        }
        self.kernel_wait(cmd.kernel, cmd.workload, deadline.left()?)
    }

    /// Interrupt (`true`) or polled completion for `kernel`. The first switch to interrupt
    /// mode attaches an eventfd to the kernel (a setup request); after that it is one
    /// register write either way.
    pub fn kernel_set_interrupt(&self, kernel: u32, on: bool) -> Result<()> {
        let mut k = self.kernel_state(kernel)?;
        if on && k.irq.is_none() {
            let e = EventFd::new()?;
            self.inner.request_ok(&Request::KernelIrq { kernel }, &[e.fd().as_fd()])?;
            k.irq = Some(Arc::new(e));
        }
        let reg = abi::kernel_reg(kernel, abi::K_CONTROL);
        let ctl = self.inner.bar.load_u32(reg) & !abi::K_CONTROL_IRQ;
        self.inner.bar.store_u32(reg, ctl | if on { abi::K_CONTROL_IRQ } else { 0 });
        k.interrupt = on;
        Ok(())
    }

    /// Whether `kernel` is in interrupt mode (false for a bad id).
    pub fn kernel_interrupt(&self, kernel: u32) -> bool {
        self.kernel_state(kernel).is_ok_and(|k| k.interrupt)
    }

    fn user_reg(kernel: u32, idx: usize) -> Result<usize> {
        check_kernel(kernel)?;
        if idx >= abi::USER_REGS {
            return Err(HostError::OutOfRange(format!(
                "user register {idx} (must be below {})",
                abi::USER_REGS
            )));
        }
        Ok(abi::kernel_user_reg(kernel, idx))
    }

    /// Read user register `idx` of `kernel` (what this client last wrote there).
    pub fn kernel_reg_read(&self, kernel: u32, idx: usize) -> Result<u32> {
        Ok(self.inner.bar.load_u32(Self::user_reg(kernel, idx)?))
    }

    /// Write user register `idx` of `kernel`: commands taken from now on see the value
    /// (snic reads the registers when it takes a command from the FIFO).
    pub fn kernel_reg_write(&self, kernel: u32, idx: usize, v: u32) -> Result<()> {
        self.inner.bar.store_u32(Self::user_reg(kernel, idx)?, v);
        Ok(())
    }

    /// `kernel`'s counters for this client. snic updates them before it publishes a status:
    /// read after a status arrived, they include that command (while a command completes,
    /// the two halves of `busy_ns` may be a moment apart).
    pub fn kernel_counters(&self, kernel: u32) -> Result<KernelSlotCounters> {
        check_kernel(kernel)?;
        let r = |reg| self.inner.bar.load_u32(abi::kernel_reg(kernel, reg));
        let busy_ns = u64::from(r(abi::K_BUSY_NS_HI)) << 32 | u64::from(r(abi::K_BUSY_NS_LO));
        Ok(KernelSlotCounters {
            runs: r(abi::K_RUNS),
            errors: r(abi::K_ERRORS),
            last_status: r(abi::K_LAST_STATUS),
            busy_ns,
        })
    }
}

/// Remove and return the oldest stashed status of `workload`.
fn take_workload(k: &mut KernelState, workload: u32) -> Option<KernelStatus> {
    let i = k.stash.iter().position(|s| s.workload == workload)?;
    k.stash.remove(i)
}
