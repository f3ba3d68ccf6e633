//! Register space ("BAR") of one client, and the NIC page. All registers are 32-bit,
//! little-endian, accessed with atomic loads (acquire) and stores (release) on shared memory.
//!
//! Each client (host process) gets its own BAR, as each PCIe function has its own: its queue
//! doorbells, its channels and its lookaside-kernel FIFOs are its own, so a misbehaving client
//! can only disturb itself. "Host" registers are written by the host and read by snic; "NIC"
//! registers are written by snic. A host that writes a NIC register only confuses itself: snic
//! keeps its own state and never reads them back.
//!
//! ```text
//! 0x00000  ID, VERSION, SCRATCH, CLIENT, MAX_QUEUES, WORKERS, DOORBELLS_IGNORED, KERNELS,
//!          COMPUTE_WORKERS                                          (0x0000-0x00ff)
//! 0x01000  channels: CHANNELS (8) blocks of CHANNEL_STRIDE bytes (H2C 0-3, C2H 0-3)
//! 0x10000  queues: MAX_QUEUES slots of QUEUE_STRIDE bytes
//! 0x20000  kernel slots: MAX_KERNELS (16) slots of KERNEL_STRIDE (0x2000) bytes, one per id
//! ```
//!
//! A lookaside kernel has a slot of its own, as each RecoNIC compute block has its own control
//! and status FIFOs and register file:
//!
//! ```text
//! slot + 0x000  KCTL_PIDX     host  control-FIFO producer (commands written, free-running)
//! slot + 0x004  KCTL_CIDX     NIC   control-FIFO consumer (commands taken)
//! slot + 0x008  KSTS_PIDX     NIC   status-FIFO producer (statuses written)
//! slot + 0x00C  KSTS_CIDX     host  status-FIFO consumer (statuses read)
//! slot + 0x010  K_CONTROL     host  bit 0: signal the kernel's eventfd on status
//! slot + 0x014  K_RUNS        NIC   commands run for this client
//! slot + 0x018  K_ERRORS      NIC   of which failed
//! slot + 0x01C  K_LAST_STATUS NIC   status code of the last command
//! slot + 0x020  K_BUSY_NS     NIC   nanoseconds run for this client (lo, hi at +0x24)
//! slot + 0x040  K_USER        host  USER_REGS (8) registers the kernel reads with each command
//! slot + 0x100  status FIFO   NIC   KFIFO_DEPTH entries of KSTS_SIZE (32) bytes
//! slot + 0x1000 control FIFO  host  KFIFO_DEPTH entries of KCMD_SIZE (256) bytes
//! ```
//!
//! Kernel `k` of every client is served by compute worker `k % compute_workers` (worker index
//! `workers + k % compute_workers` in the NIC page and the kick list: [`kernel_worker`]).

use snic_dma::desc::Dir;
use snic_dma::engine::{CHANNELS_PER_DIR, MAX_QUEUES};

pub use snic_compute::{KCMD_SIZE, KSTS_SIZE, MAX_KERNELS, USER_REGS};

/// Size of a client's register space.
pub const BAR_SIZE: usize = 0x40000;
/// Size of the NIC page.
pub const NIC_PAGE_SIZE: usize = 4096;
/// Value of [`ID`]: "SNIC".
pub const ID_VALUE: u32 = 0x534E_4943;
/// Value of [`VERSION`] (and of the setup protocol's version). 2: one slot per kernel.
pub const VERSION_VALUE: u32 = 2;

/// NIC: identification ([`ID_VALUE`]).
pub const ID: usize = 0x0000;
/// NIC: register-layout version ([`VERSION_VALUE`]).
pub const VERSION: usize = 0x0004;
/// Host: free scratch register (no effect; for testing the path).
pub const SCRATCH: usize = 0x0008;
/// NIC: this client's id.
pub const CLIENT: usize = 0x000C;
/// NIC: number of queue ids ([`MAX_QUEUES`]).
pub const MAX_QUEUES_REG: usize = 0x0010;
/// NIC: number of DMA worker threads.
pub const WORKERS: usize = 0x0014;
/// NIC: doorbells snic ignored for this client (queue missing, stopped or in error, or a
/// kernel FIFO producer index claiming more than the FIFO holds).
pub const DOORBELLS_IGNORED: usize = 0x0018;
/// NIC: the lookaside kernels available, one bit per kernel id ([`kernel`]).
pub const KERNELS: usize = 0x001C;
/// NIC: number of compute worker threads (they serve the kernel slots).
pub const COMPUTE_WORKERS: usize = 0x0020;

/// First kernel slot.
pub const KERNEL_BASE: usize = 0x20000;
/// Bytes per kernel slot.
pub const KERNEL_STRIDE: usize = 0x2000;
/// Slot offset, host: control-FIFO producer (free-running count of commands written).
pub const KCTL_PIDX: usize = 0x00;
/// Slot offset, NIC: control-FIFO consumer (commands taken).
pub const KCTL_CIDX: usize = 0x04;
/// Slot offset, NIC: status-FIFO producer (statuses written).
pub const KSTS_PIDX: usize = 0x08;
/// Slot offset, host: status-FIFO consumer (statuses read).
pub const KSTS_CIDX: usize = 0x0C;
/// Slot offset, host: control bits ([`K_CONTROL_IRQ`]).
pub const K_CONTROL: usize = 0x10;
/// [`K_CONTROL`] bit: signal the kernel's eventfd (attached with the setup request
/// `kernel_irq`) when statuses are written.
pub const K_CONTROL_IRQ: u32 = 1;
/// Slot offset, NIC: commands this kernel ran for this client (failed ones included).
pub const K_RUNS: usize = 0x14;
/// Slot offset, NIC: commands that failed.
pub const K_ERRORS: usize = 0x18;
/// Slot offset, NIC: status code of the last command.
pub const K_LAST_STATUS: usize = 0x1C;
/// Slot offset, NIC: nanoseconds the kernel ran for this client, low 32 bits.
pub const K_BUSY_NS_LO: usize = 0x20;
/// Slot offset, NIC: nanoseconds, high 32 bits.
pub const K_BUSY_NS_HI: usize = 0x24;
/// Slot offset, host: the first of [`USER_REGS`] user registers. Their values when a command
/// is taken are handed to the kernel with it (`Invocation::regs`).
pub const K_USER: usize = 0x40;
/// Slot offset: status FIFO (NIC writes).
pub const KSTS_FIFO: usize = 0x100;
/// Slot offset: control FIFO (host writes).
pub const KCTL_FIFO: usize = 0x1000;
/// Entries in each kernel FIFO.
pub const KFIFO_DEPTH: u32 = 16;

/// Offset of kernel `id`'s slot (`id` below [`MAX_KERNELS`]; others wrap into the range).
pub const fn kernel_slot(id: u32) -> usize {
    KERNEL_BASE + (id % MAX_KERNELS) as usize * KERNEL_STRIDE
}

/// Offset of kernel `id`'s register `reg` (a slot offset such as [`KCTL_PIDX`]).
pub const fn kernel_reg(id: u32, reg: usize) -> usize {
    kernel_slot(id) + reg
}

/// Offset of kernel `id`'s user register `i` (below [`USER_REGS`]; others wrap).
pub const fn kernel_user_reg(id: u32, i: usize) -> usize {
    kernel_slot(id) + K_USER + (i % USER_REGS) * 4
}

/// Offset of kernel `id`'s control-FIFO entry `n` (a free-running count, taken modulo
/// [`KFIFO_DEPTH`]).
pub const fn kctl_slot(id: u32, n: u32) -> usize {
    kernel_slot(id) + KCTL_FIFO + (n % KFIFO_DEPTH) as usize * KCMD_SIZE
}

/// Offset of kernel `id`'s status-FIFO entry `n` (free-running, modulo [`KFIFO_DEPTH`]).
pub const fn ksts_slot(id: u32, n: u32) -> usize {
    kernel_slot(id) + KSTS_FIFO + (n % KFIFO_DEPTH) as usize * KSTS_SIZE
}

/// Which compute worker (0 .. `compute_workers`) serves kernel `id`; its index among all
/// workers (NIC page flag, kick eventfd) is `workers + kernel_worker(id, compute_workers)`.
pub const fn kernel_worker(id: u32, compute_workers: u32) -> u32 {
    if compute_workers == 0 { 0 } else { id % compute_workers }
}

/// Lookaside kernel ids, status codes and argument codes: snic-compute's numbers, which the
/// FIFO entries carry.
pub mod kernel {
    pub use snic_compute::ids::*;
    pub use snic_compute::status::{
        BAD_ADDRESS, BAD_ARGS, BAD_LENGTH, CORRUPT_INPUT, NO_SPACE, OK, OVERLAP, UNKNOWN_KERNEL,
    };
    pub use snic_compute::{dtype, gemm, reduce};
}

/// First channel register block.
pub const CHANNEL_BASE: usize = 0x1000;
/// Bytes per channel block.
pub const CHANNEL_STRIDE: usize = 0x40;
/// Host: bit 0 = interrupt enable (the channel's eventfd, given at setup, is signalled).
pub const CH_CONTROL: usize = 0x00;
/// Host: run sequence. Write DESC_LO/HI, then increment this: that is the doorbell.
pub const CH_RUN_SEQ: usize = 0x04;
/// Host: first descriptor address, low 32 bits.
pub const CH_DESC_LO: usize = 0x08;
/// Host: first descriptor address, high 32 bits.
pub const CH_DESC_HI: usize = 0x0C;
/// NIC: set to the run sequence it finished (written last, after the fields below).
pub const CH_DONE_SEQ: usize = 0x10;
/// NIC: status of the last run ([`snic_dma::desc::Status`] code).
pub const CH_STATUS: usize = 0x14;
/// NIC: descriptors completed by the last run.
pub const CH_DESCS: usize = 0x18;
/// NIC: bytes moved by the last run, low 32 bits.
pub const CH_BYTES_LO: usize = 0x1C;
/// NIC: bytes moved by the last run, high 32 bits.
pub const CH_BYTES_HI: usize = 0x20;
/// NIC: address of the failing descriptor, low 32 bits.
pub const CH_FAULT_LO: usize = 0x24;
/// NIC: address of the failing descriptor, high 32 bits.
pub const CH_FAULT_HI: usize = 0x28;

/// Channels per client: [`CHANNELS_PER_DIR`] of each direction.
pub const CHANNELS: usize = 2 * CHANNELS_PER_DIR as usize;

/// Number (0..[`CHANNELS`]) of channel `index` (0..[`CHANNELS_PER_DIR`]) of direction `dir`:
/// the H2C channels first, then the C2H ones.
pub const fn channel_index(dir: Dir, index: u8) -> usize {
    dir.code() as usize * CHANNELS_PER_DIR as usize + index as usize
}

/// Offset of channel `index` (0..[`CHANNELS_PER_DIR`]) of direction `dir`.
pub const fn channel_block(dir: Dir, index: u8) -> usize {
    CHANNEL_BASE + channel_index(dir, index) * CHANNEL_STRIDE
}

/// First queue slot.
pub const QUEUE_BASE: usize = 0x10000;
/// Bytes per queue slot.
pub const QUEUE_STRIDE: usize = 32;
/// Host: H2C producer index (free-running): the H2C doorbell.
pub const Q_H2C_PIDX: usize = 0x00;
/// Host: C2H producer index: the C2H doorbell.
pub const Q_C2H_PIDX: usize = 0x04;
/// Host: completion-ring consumer index.
pub const Q_CMPT_CIDX: usize = 0x08;
/// NIC: H2C consumer index (slots finished; write-back).
pub const Q_H2C_CIDX: usize = 0x10;
/// NIC: C2H consumer index.
pub const Q_C2H_CIDX: usize = 0x14;
/// NIC: completion entries written.
pub const Q_CMPT_PIDX: usize = 0x18;
/// NIC: queue state ([`QSTATE_ADDED`] ...; in error: 0x100 | status code).
pub const Q_STATE: usize = 0x1C;
/// Queue state value: added, not started.
pub const QSTATE_ADDED: u32 = 0;
/// Queue state value: running.
pub const QSTATE_RUNNING: u32 = 1;
/// Queue state value: stopped.
pub const QSTATE_STOPPED: u32 = 2;
/// Queue state flag: in error (low byte = status code).
pub const QSTATE_ERROR: u32 = 0x100;

/// Offset of queue `qid`'s slot.
pub const fn queue_slot(qid: u16) -> usize {
    QUEUE_BASE + qid as usize * QUEUE_STRIDE
}

const _: () = assert!(QUEUE_BASE + MAX_QUEUES as usize * QUEUE_STRIDE <= KERNEL_BASE);
const _: () = assert!(channel_block(Dir::C2h, CHANNELS_PER_DIR - 1) + CHANNEL_STRIDE <= QUEUE_BASE);
const _: () = assert!(channel_index(Dir::C2h, CHANNELS_PER_DIR - 1) == CHANNELS - 1);
const _: () = assert!(COMPUTE_WORKERS + 4 <= CHANNEL_BASE);
const _: () = assert!(KERNEL_BASE + MAX_KERNELS as usize * KERNEL_STRIDE <= BAR_SIZE);
const _: () = assert!(K_BUSY_NS_HI + 4 <= K_USER);
const _: () = assert!(K_USER + USER_REGS * 4 <= KSTS_FIFO);
const _: () = assert!(KSTS_FIFO + KFIFO_DEPTH as usize * KSTS_SIZE <= KCTL_FIFO);
const _: () = assert!(KCTL_FIFO + KFIFO_DEPTH as usize * KCMD_SIZE <= KERNEL_STRIDE);

/// NIC page: worker `w` writes 1 at `worker_sleeping(w)` before it blocks on its kick eventfd
/// and 0 when it wakes. A host that rings a doorbell then reads this flag (after a SeqCst
/// fence) and, if set, writes the worker's kick eventfd.
pub const fn worker_sleeping(w: u32) -> usize {
    w as usize * 64
}
/// Most workers the NIC page has room for.
pub const MAX_WORKERS: u32 = (NIC_PAGE_SIZE / 64) as u32;

/// Which worker serves queue `qid` (the mapping both sides compute).
pub const fn queue_worker(qid: u16, workers: u32) -> u32 {
    qid as u32 % workers
}

/// Which worker serves channel `index` of `dir` (all eight channels spread over the workers).
pub const fn channel_worker(dir: Dir, index: u8, workers: u32) -> u32 {
    (dir.code() as u32 + index as u32) % workers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_slots_tile_the_bar_without_overlap() {
        assert_eq!(kernel_slot(0), 0x20000);
        assert_eq!(kernel_slot(15) + KERNEL_STRIDE, BAR_SIZE);
        assert_eq!(kernel_reg(3, KSTS_CIDX), 0x2600C);
        assert_eq!(kernel_user_reg(1, 7), 0x22000 + 0x40 + 28);
        assert_eq!(ksts_slot(2, 0), 0x24100);
        assert_eq!(ksts_slot(2, u32::MAX), 0x24100 + 15 * 32);
        assert_eq!(kctl_slot(2, KFIFO_DEPTH + 1), 0x25000 + 256);
        assert_eq!(kctl_slot(15, 15) + KCMD_SIZE, BAR_SIZE);
        // Every register and FIFO entry of every slot is inside that slot, and the slots follow
        // the queues.
        let mut words = vec![false; BAR_SIZE / 4];
        let mut claim = |at: usize, len: usize| {
            for (i, w) in words[at / 4..(at + len) / 4].iter_mut().enumerate() {
                assert!(!*w, "{:#x} claimed twice", at + i * 4);
                *w = true;
            }
        };
        for id in 0..MAX_KERNELS {
            for reg in [KCTL_PIDX, KCTL_CIDX, KSTS_PIDX, KSTS_CIDX, K_CONTROL, K_RUNS, K_ERRORS] {
                claim(kernel_reg(id, reg), 4);
            }
            for reg in [K_LAST_STATUS, K_BUSY_NS_LO, K_BUSY_NS_HI] {
                claim(kernel_reg(id, reg), 4);
            }
            for i in 0..USER_REGS {
                claim(kernel_user_reg(id, i), 4);
            }
            for n in 0..KFIFO_DEPTH {
                claim(ksts_slot(id, n), KSTS_SIZE);
                claim(kctl_slot(id, n), KCMD_SIZE);
            }
        }
        claim(QUEUE_BASE, MAX_QUEUES as usize * QUEUE_STRIDE);
        claim(CHANNEL_BASE, CHANNELS * CHANNEL_STRIDE);
        claim(0, COMPUTE_WORKERS + 4);
        assert_eq!((kernel_worker(5, 2), kernel_worker(5, 0)), (1, 0));
    }
}
