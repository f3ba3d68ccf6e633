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
//! 0x00000  ID, VERSION, SCRATCH, CLIENT, MAX_QUEUES, WORKERS, DOORBELLS_IGNORED   (0x0000-0x00ff)
//! 0x00100  kernel FIFO indices: KCTL_PIDX KCTL_CIDX KSTS_PIDX KSTS_CIDX KIRQ
//! 0x00200  control FIFO: KFIFO_DEPTH entries of KCMD_SIZE bytes  (host writes)
//! 0x00400  status FIFO:  KFIFO_DEPTH entries of KSTS_SIZE bytes  (NIC writes)
//! 0x01000  channels: CHANNELS (8) blocks of CHANNEL_STRIDE bytes (H2C 0-3, C2H 0-3)
//! 0x10000  queues: MAX_QUEUES slots of QUEUE_STRIDE bytes
//! ```

use snic_compute::{KernelCmd, KernelStatus};
use snic_dma::desc::Dir;
use snic_dma::engine::{CHANNELS_PER_DIR, MAX_QUEUES};

/// Size of a client's register space.
pub const BAR_SIZE: usize = 0x20000;
/// Size of the NIC page.
pub const NIC_PAGE_SIZE: usize = 4096;
/// Value of [`ID`]: "SNIC".
pub const ID_VALUE: u32 = 0x534E_4943;
/// Value of [`VERSION`] (and of the setup protocol's version).
pub const VERSION_VALUE: u32 = 1;

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
/// NIC: number of worker threads.
pub const WORKERS: usize = 0x0014;
/// NIC: doorbells snic ignored for this client (queue missing, stopped or in error).
pub const DOORBELLS_IGNORED: usize = 0x0018;
/// NIC: the lookaside kernels available, one bit per kernel id ([`kernel`]).
pub const KERNELS: usize = 0x001C;

/// Host: control-FIFO producer (free-running count of commands written).
pub const KCTL_PIDX: usize = 0x0100;
/// NIC: control-FIFO consumer (commands taken).
pub const KCTL_CIDX: usize = 0x0104;
/// NIC: status-FIFO producer (statuses written).
pub const KSTS_PIDX: usize = 0x0108;
/// Host: status-FIFO consumer (statuses read).
pub const KSTS_CIDX: usize = 0x010C;
/// Host: 1 = signal the kernel eventfd (set with the setup request `kernel_irq`) on status.
pub const KIRQ: usize = 0x0110;
/// Control FIFO base.
pub const KCTL_FIFO: usize = 0x0200;
/// Status FIFO base.
pub const KSTS_FIFO: usize = 0x0400;
/// Entries in each kernel FIFO.
pub const KFIFO_DEPTH: u32 = 16;
/// Bytes per control-FIFO entry: kernel u32, tag u32, src u64, dst u64, len u64.
pub const KCMD_SIZE: usize = 32;
/// Bytes per status-FIFO entry: tag u32, status u32, result u64, reserved 16 bytes.
pub const KSTS_SIZE: usize = 32;

/// Offset of control-FIFO entry `n` (a free-running count: taken modulo [`KFIFO_DEPTH`]).
pub const fn kctl_slot(n: u32) -> usize {
    KCTL_FIFO + (n % KFIFO_DEPTH) as usize * KCMD_SIZE
}

/// Offset of status-FIFO entry `n` (a free-running count: taken modulo [`KFIFO_DEPTH`]).
pub const fn ksts_slot(n: u32) -> usize {
    KSTS_FIFO + (n % KFIFO_DEPTH) as usize * KSTS_SIZE
}

/// A control-FIFO entry's bytes (layout at [`KCMD_SIZE`]).
pub fn encode_kcmd(cmd: &KernelCmd) -> [u8; KCMD_SIZE] {
    let mut b = [0u8; KCMD_SIZE];
    b[0..4].copy_from_slice(&cmd.kernel.to_le_bytes());
    b[4..8].copy_from_slice(&cmd.tag.to_le_bytes());
    b[8..16].copy_from_slice(&cmd.src.to_le_bytes());
    b[16..24].copy_from_slice(&cmd.dst.to_le_bytes());
    b[24..32].copy_from_slice(&cmd.len.to_le_bytes());
    b
}

/// The command a control-FIFO entry holds (every bit pattern is a command; the kernel
/// checks its fields).
pub fn decode_kcmd(b: &[u8; KCMD_SIZE]) -> KernelCmd {
    KernelCmd {
        kernel: le_u32(b, 0),
        tag: le_u32(b, 4),
        src: le_u64(b, 8),
        dst: le_u64(b, 16),
        len: le_u64(b, 24),
    }
}

/// A status-FIFO entry's bytes (layout at [`KSTS_SIZE`]; the reserved bytes are zero).
pub fn encode_ksts(st: &KernelStatus) -> [u8; KSTS_SIZE] {
    let mut b = [0u8; KSTS_SIZE];
    b[0..4].copy_from_slice(&st.tag.to_le_bytes());
    b[4..8].copy_from_slice(&st.status.to_le_bytes());
    b[8..16].copy_from_slice(&st.result.to_le_bytes());
    b
}

/// The status a status-FIFO entry holds (the reserved bytes are ignored).
pub fn decode_ksts(b: &[u8; KSTS_SIZE]) -> KernelStatus {
    KernelStatus { tag: le_u32(b, 0), status: le_u32(b, 4), result: le_u64(b, 8) }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from(le_u32(b, at)) | u64::from(le_u32(b, at + 4)) << 32
}

/// Lookaside kernel ids and status codes: snic-compute's numbers, which the FIFO entries carry.
pub mod kernel {
    pub use snic_compute::ids::{COPY, SUM};
    pub use snic_compute::status::{BAD_ADDRESS, BAD_LENGTH, OK, UNKNOWN_KERNEL};
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

const _: () = assert!(QUEUE_BASE + MAX_QUEUES as usize * QUEUE_STRIDE <= BAR_SIZE);
const _: () = assert!(channel_block(Dir::C2h, CHANNELS_PER_DIR - 1) + CHANNEL_STRIDE <= QUEUE_BASE);
const _: () = assert!(channel_index(Dir::C2h, CHANNELS_PER_DIR - 1) == CHANNELS - 1);
const _: () = assert!(KSTS_FIFO + KFIFO_DEPTH as usize * KSTS_SIZE <= CHANNEL_BASE);

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
    fn kernel_fifo_entries_round_trip() {
        let cmd = KernelCmd {
            kernel: 0x0102_0304,
            tag: 0xDEAD_BEEF,
            src: 0x1122_3344_5566_7788,
            dst: 0x99AA_BBCC_DDEE_FF00,
            len: 0x0000_0001_0000_0002,
        };
        let raw = encode_kcmd(&cmd);
        assert_eq!(&raw[0..4], &[4, 3, 2, 1]);
        assert_eq!(&raw[16..24], &0x99AA_BBCC_DDEE_FF00u64.to_le_bytes());
        assert_eq!(decode_kcmd(&raw), cmd);
        let st = KernelStatus { tag: 7, status: kernel::BAD_ADDRESS, result: u64::MAX - 5 };
        let raw = encode_ksts(&st);
        assert_eq!(&raw[4..8], &kernel::BAD_ADDRESS.to_le_bytes());
        assert!(raw[16..].iter().all(|&b| b == 0));
        assert_eq!(decode_ksts(&raw), st);
        let mut dirty = raw;
        dirty[16..].fill(0xFF);
        assert_eq!(decode_ksts(&dirty), st);
        assert_eq!(kctl_slot(0), KCTL_FIFO);
        assert_eq!(kctl_slot(KFIFO_DEPTH + 2), KCTL_FIFO + 2 * KCMD_SIZE);
        assert_eq!(ksts_slot(u32::MAX), KSTS_FIFO + (KFIFO_DEPTH as usize - 1) * KSTS_SIZE);
    }
}
