//! Shared memory at its bounds: `Mapping` accessors at usize edges, and the DMA engine moving
//! bytes through a clamped `SharedBacking` window without touching the mapping outside it.

use std::sync::Arc;

use snic_dma::desc::{CMPT_SIZE, Completion, Descriptor};
use snic_dma::mem::{AddressSpace, Backing, HostAddr, MemKind};
use snic_dma::{Dir, DmaEngine, Mode, Notify, QueueConfig, Status};
use snic_hostif::shm::{Mapping, SharedBacking};

/// Every accessor refuses ranges whose end overflows usize, and accepts empty accesses at
/// exactly the end (no pointer past the mapping is formed for anything else).
#[test]
fn mapping_accessors_at_usize_edges() {
    let (m, _fd) = Mapping::memfd("snic-review", 4096, false).unwrap();
    let mut one = [0u8; 1];
    assert!(m.read(usize::MAX, &mut one).is_none());
    assert!(m.write(usize::MAX - 1, &[1, 2]).is_none());
    assert!(m.read(4096, &mut one).is_none());
    assert!(m.read(4096, &mut []).is_some());
    assert!(m.write(4096, &[]).is_some());
    assert!(m.write(4097, &[]).is_none());
    assert!(m.atomic_u32(usize::MAX - 3).is_none());
    assert!(m.atomic_u32(4092).is_some());
    assert!(m.atomic_u32(4096).is_none());
    assert_eq!(m.load_u32(usize::MAX - 3), 0);
    m.store_u32(usize::MAX - 3, 5); // ignored, no panic
    let w = SharedBacking { map: Arc::new(m), off: 4096, len: 0 };
    assert_eq!(w.len(), 0);
    assert!(w.range(0, 0).is_empty());
    assert_eq!(w.load_u32_acquire(usize::MAX - 3), 0);
}

/// A window that starts mid-mapping and runs past its end is clamped; the engine's rings and
/// buffers live in it. Transfers touching the window's last bytes work, one byte past is
/// OutOfBounds, and the mapping before the window never changes.
#[test]
fn engine_through_a_clamped_window() {
    let (m, _fd) = Mapping::memfd("snic-review", 16384, false).unwrap();
    m.write(0, &[0xAB; 8192]).unwrap();
    let m = Arc::new(m);
    let win = SharedBacking { map: m.clone(), off: 8192, len: 1 << 20 };
    assert_eq!(win.len(), 8192);
    let base = 0x4000_0000u64;
    let mut space = AddressSpace::new();
    space.map_host_owned(HostAddr::new(base).unwrap(), Box::new(win), 1).unwrap();
    let (_, dev) = space.add_device_region(MemKind::OnChip, 4096).unwrap();
    let dev = dev.raw();
    let mut e = DmaEngine::new(space);
    let cfg = QueueConfig {
        owner: 1,
        mode: Mode::Mm,
        ring_size: 4,
        cmpt_size: 4,
        h2c_ring: base,
        c2h_ring: base + 128,
        cmpt_ring: base + 8192 - 4 * CMPT_SIZE as u64, // the window's last bytes
        align: 1,
        notify: Notify::Poll,
        stream_to: None,
    };
    e.add_queue(0, cfg).unwrap();
    e.start_queue(0).unwrap();
    e.mem.write(dev, &[5u8; 16]).unwrap();
    let last = base + 8192 - 4 * CMPT_SIZE as u64 - 16;
    let put = |e: &mut DmaEngine, a: u64, d: Descriptor| e.mem.write(a, &d.encode()).unwrap();
    put(&mut e, base + 128, Descriptor::new(dev, last, 16));
    put(&mut e, base + 160, Descriptor::new(dev, base + 8192 - 8, 9));
    e.doorbell(0, Dir::C2h, 2);
    while e.poll(64) > 0 {}
    let read = |e: &DmaEngine, i: u64| {
        let mut b = [0u8; CMPT_SIZE];
        e.mem.read(cfg.cmpt_ring + i * CMPT_SIZE as u64, &mut b).unwrap();
        Completion::decode(&b)
    };
    assert_eq!(read(&e, 0).status(), Some(Status::Ok));
    assert_eq!(read(&e, 1).status(), Some(Status::OutOfBounds));
    let mut got = [0u8; 16];
    m.read(8192 + 8192 - 64 - 16, &mut got).unwrap();
    assert_eq!(got, [5u8; 16]);
    let mut before = vec![0u8; 8192];
    m.read(0, &mut before).unwrap();
    assert_eq!(before, vec![0xAB; 8192], "bytes before the window changed");
}
