//! Hosts of a scenario on a hand-built testbed: two whole NICs on a virtual link, the hosts
//! built from a TOML scenario ([`Hosts::build`]), the scenario's operations run one after
//! another (each starts when the previous one completed), and the expectations checked.
//!
//! What is checked: RDMA WRITE, READ, SEND and both atomics move the right bytes and give the
//! right CQEs, with QPs and buffers in device memory; DMA H2C and C2H with bad descriptors
//! among good ones (the good ones move their bytes, the bad ones complete with an error, no
//! other byte changes); DMA channels running H2C and C2H chains, and a chain with a bad
//! descriptor failing as a whole (not even its good descriptors move a byte); a GEMM kernel's product against one computed here; and that failed
//! expectations say where they fail.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_io::script::ScriptPort;
use snic_io::vlink::{LinkConfig, VLink};
use snic_nic::NicConfig;
use snic_nic::neigh::NeighConfig;
use snic_pipeline::PortId;
use snic_rdma::RnicConfig;
use snic_scenario::hosts::Hosts;
use snic_scenario::load::Loaded;
use snic_scenario::schema::{Action, DescSpec, DmaDir, Size};
use snic_scenario::testing;
use snic_testbed::{NodeId, Testbed};
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;

/// Two NICs, `nic0` and `nic1`, on one 25 Gbit/s wire with 2 us of delay (lossy when `loss`).
fn bed(loss: f64, seed: u64) -> (Testbed, BTreeMap<String, NodeId>) {
    let link = LinkConfig {
        loss,
        delay: Duration::from_micros(2),
        rate_bps: 25_000_000_000,
        queue_limit: 1 << 16,
        ..LinkConfig::default()
    };
    let (w0, w1) = VLink::symmetric("wire", link, seed);
    let mut tb = Testbed::new();
    let mut nics = BTreeMap::new();
    for (i, w) in [w0, w1].into_iter().enumerate() {
        let (host_port, _) = ScriptPort::new(&format!("host{i}"));
        let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, i as u8 + 1));
        let rnic = RnicConfig {
            local_ip: ip,
            host_pool: 16 << 20,
            on_chip: 256 << 10,
            on_board: 16 << 20,
            max_inflight: 64,
            ..RnicConfig::default()
        };
        let cfg = NicConfig {
            mac: EthernetAddress([0x02, 0, 0, 0, i as u8 + 1, 1]),
            ips: vec![ip],
            wire: PortId(0),
            neigh: NeighConfig {
                retry_interval: Duration::from_millis(20),
                ..NeighConfig::default()
            },
        };
        let ports: Vec<Box<dyn snic_io::Port>> = vec![Box::new(w), Box::new(host_port)];
        let id = tb.add_nic(&format!("nic{i}"), cfg, rnic, &[], ports).expect("NIC");
        nics.insert(format!("nic{i}"), id);
    }
    (tb, nics)
}

fn load(text: &str) -> Loaded {
    testing::load_toml(text)
}

/// Build the hosts and run every operation of the timeline in order, each once the previous
/// one has completed; returns the hosts and every operation's outcome.
fn run(text: &str, loss: f64, seed: u64) -> (Testbed, Hosts, Loaded, Vec<Result<Instant, String>>) {
    let loaded = load(text);
    let (mut tb, nics) = bed(loss, seed);
    let mut hosts = Hosts::build(&loaded, seed, &mut tb, &nics).expect("the hosts build");
    let mut outcomes = Vec::new();
    for op in &loaded.scenario.timeline {
        assert!(Hosts::handles(&op.action), "{op:?}");
        let now = tb.now();
        let id = hosts.start(&mut tb, now, &op.action).expect("the operation starts");
        let limit = Instant::ZERO + Duration::from_secs(5);
        let outcome = loop {
            let now = tb.now();
            hosts.poll(&mut tb, now);
            if let Some(s) = hosts.status(id) {
                break s;
            }
            assert!(tb.now() < limit, "{op:?} still pending at {}", tb.now());
            tb.step().expect("the testbed steps");
        };
        outcomes.push(outcome);
    }
    // Whatever is still in flight (ACKs), then the last CQEs.
    tb.drive(100_000).expect("the testbed settles");
    let now = tb.now();
    hosts.poll(&mut tb, now);
    (tb, hosts, loaded, outcomes)
}

/// Every expectation holds, except those named `must fail ...`, which fail with a diff.
fn check_all(tb: &Testbed, hosts: &Hosts, loaded: &Loaded) -> Vec<String> {
    let mut diffs = Vec::new();
    for e in &loaded.scenario.expect {
        let r = hosts.check(tb, loaded, e).expect("a memory or cqes expectation");
        if r.name.starts_with("must fail") {
            assert!(!r.passed, "{} passed: {r:?}", r.name);
            diffs.push(r.diff.clone().expect("a failure has a diff"));
        } else {
            assert!(
                r.passed,
                "{}: want {}, got {}\n{}",
                r.name,
                r.want,
                r.got,
                r.diff.unwrap_or_default()
            );
        }
    }
    diffs
}

const RDMA: &str = r#"
name = "hosts-rdma"
[[nic]]
name = "nic0"
[[nic]]
name = "nic1"
[[link]]
name = "wire"
a = "nic0.wire"
b = "nic1.wire"

[[host]]
name = "h0"
nic = "nic0"
[[host.region]]
name = "src"
size = "64KiB"
init = { seed = 7 }
[[host.region]]
name = "dst"
size = "16KiB"
place = "on_chip"
init = { fill = 0xee }
[[host.mr]]
name = "srcmr"
region = "src"
[[host.mr]]
name = "dstmr"
region = "dst"
[[host.cq]]
name = "cq"
[[host.qp]]
name = "qp"
peer = "h1.qp"
send_cq = "cq"
rings = "on_chip"
mtu = 1024

[[host]]
name = "h1"
nic = "nic1"
[[host.region]]
name = "buf"
size = "64KiB"
place = "on_board"
init = { seed = 9 }
[[host.region]]
name = "rx"
size = "4KiB"
init = { fill = 0x33 }
[[host.region]]
name = "atom"
size = 64
init = { hex = "efbeadde00000000 0100000000000000" }
[[host.mr]]
name = "bufmr"
region = "buf"
[[host.mr]]
name = "rxmr"
region = "rx"
[[host.mr]]
name = "atommr"
region = "atom"
[[host.mr]]
name = "invmr"
region = "atom"
offset = 32
len = 32
[[host.cq]]
name = "cq"
[[host.qp]]
name = "qp"
send_cq = "cq"
rings = "on_board"
mtu = 1024

[[op]]
do = "post_recv"
qp = "h1.qp"
bufs = ["h1.rxmr:1024", "h1.rxmr+2048:16", "h1.rxmr+3072:64"]

[[op]]
do = "post_send"
qp = "h0.qp"
wrs = [
  { op = "write", local = ["srcmr:4096"], remote = "h1.bufmr" },
  { op = "read", local = ["dstmr:2048"], remote = "h1.bufmr+8192" },
  { op = "send", local = ["srcmr+100:1000"] },
  { op = "cmp_swap", local = ["dstmr+4096:8"], remote = "h1.atommr", compare = 0xdeadbeef, swap = 42 },
  { op = "fetch_add", local = ["dstmr+4104:8"], remote = "h1.atommr+8", add = 5 },
  { op = "write", local = ["srcmr+16384:1024"], remote = "h1.bufmr+32768", repeat = 3, signaled = false },
  { op = "write_imm", local = ["srcmr:0"], remote = "h1.bufmr", imm = 0, signaled = true, wr_id = 99 },
]

[[op]]
do = "post_send"
qp = "h0.qp"
wrs = [
  { op = "write", local = ["srcmr:16"], remote = "h1.rxmr+4000", wr_id = 7 },
  { op = "send_inv", local = ["srcmr:8"], invalidate = "h1.invmr", wr_id = 8 },
]

[[expect]]
memory = "h1.buf:4096"
same_as = "h0.src"
[[expect]]
memory = "h0.dst:2048"
same_as = "h1.buf+8192"
[[expect]]
memory = "h0.dst+2048:2048"
content = { fill = 0xee }
[[expect]]
memory = "h1.rx:1000"
same_as = "h0.src+100"
[[expect]]
memory = "h1.rx+1000:1048"
content = { fill = 0x33 }
[[expect]]
memory = "h1.rx+3072:8"
same_as = "h0.src"
[[expect]]
memory = "h1.atom:16"
content = { hex = "2a00000000000000 0600000000000000" }
[[expect]]
memory = "h0.dst+4096:16"
content = { hex = "efbeadde00000000 0100000000000000" }
[[expect]]
memory = "h1.buf+32768:3072"
same_as = "h0.src+16384"
[[expect]]
memory = "h1.rx+4000:16"
same_as = "h0.src:16"
[[expect]]
cqes = "h0.cq"
list = [
  { wr_id = 0, status = "success", opcode = "rdma_write" },
  { wr_id = 1, status = "success", opcode = "rdma_read", byte_len = 2048 },
  { wr_id = 2, status = "success", opcode = "send" },
  { wr_id = 3, status = "success", opcode = "comp_swap" },
  { wr_id = 4, status = "success", opcode = "fetch_add" },
  { wr_id = 99, status = "success", opcode = "rdma_write" },
  { wr_id = 7, status = "success", opcode = "rdma_write" },
  { wr_id = 8, status = "success", opcode = "send" },
]
[[expect]]
cqes = "h1.cq"
list = [
  { wr_id = 0, status = "success", opcode = "recv", byte_len = 1000 },
  { wr_id = 1, status = "success", opcode = "recv_rdma_with_imm", imm = 0, byte_len = 0 },
  { wr_id = 2, status = "success", opcode = "recv", byte_len = 8 },
]
[[expect]]
name = "must fail: the WRITE's bytes are not zero"
memory = "h1.buf:4096"
content = { zero = true }
[[expect]]
name = "must fail: a wrong opcode"
cqes = "h0.cq"
list = [{ opcode = "rdma_read" }]
[[expect]]
name = "must fail: a wrong hash"
memory = "h1.atom:16"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
"#;

#[test]
fn rdma_of_every_kind_moves_the_bytes_and_completes() {
    let (tb, hosts, loaded, outcomes) = run(RDMA, 0.0, 1);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let diffs = check_all(&tb, &hosts, &loaded);
    assert!(diffs[0].contains("first difference at byte 0"), "{}", diffs[0]);
    assert!(
        diffs[1].contains("CQE 0") && diffs[1].contains("opcode rdma_write (want rdma_read)"),
        "{}",
        diffs[1]
    );
    assert!(diffs[1].contains("8 CQEs, want 1"), "{}", diffs[1]);
    // QPs and buffers in device memory.
    for (nic, want) in [("nic0", snic_dma::MemKind::OnChip), ("nic1", snic_dma::MemKind::OnBoard)] {
        let id = BTreeMap::from_iter(bed(0.0, 1).1)[nic];
        let d = tb.nic(id).expect("a NIC");
        let qpns: Vec<u32> = d.rnic.qpns().collect();
        assert_eq!(qpns.len(), 1);
        let (sq, rq) = d.rnic.qp_rings(qpns[0]).expect("rings");
        assert_eq!(d.rnic.mem().kind_of(sq), Some(want), "{nic}");
        assert_eq!(d.rnic.mem().kind_of(rq.expect("an RQ")), Some(want), "{nic}");
    }
    let mut c = BTreeMap::new();
    hosts.counters(&mut c);
    assert_eq!(c["h0.cq.cq.cqes"], 8);
    assert_eq!(c["h0.cq.cq.errors"], 0);
    assert_eq!(c["h1.cq.cq.cqes"], 3);
    assert_eq!(c["h0.qp.qp.send_posted"], 11);
    assert_eq!(c["h1.qp.qp.recv_posted"], 3);
    assert_eq!(c["h1.qp.qp.recv_cqes"], 3);
    // The SEND with invalidate invalidated h1.invmr's rkey.
    let inv = hosts.cqes("h1.cq").expect("h1.cq")[2].1;
    assert!(inv.invalidated_rkey.is_some(), "{inv:?}");
    let golden = hosts.cqe_json("h1.cq");
    assert_eq!(golden[0]["opcode"], "recv");
    assert_eq!(golden[1]["imm"], 0);
    assert_eq!(hosts.memory_sha256(&tb, "h1.atom:16").unwrap().len(), 64);
}

#[test]
fn rdma_over_a_lossy_link_is_the_same_and_reproducible() {
    let mut resent = 0;
    for seed in [3, 4, 5] {
        let (tb, hosts, loaded, outcomes) = run(RDMA, 0.15, seed);
        assert!(outcomes.iter().all(Result::is_ok), "seed {seed}: {outcomes:?}");
        check_all(&tb, &hosts, &loaded);
        resent +=
            (0..2).map(|i| tb.nic(NodeId(i)).expect("a NIC").rnic.stats().retransmits).sum::<u64>();
        let again = run(RDMA, 0.15, seed);
        assert_eq!(format!("{outcomes:?}"), format!("{:?}", again.3), "seed {seed}");
        assert_eq!(format!("{:?}", hosts.cqes("h0.cq")), format!("{:?}", again.1.cqes("h0.cq")));
    }
    assert!(resent > 0, "the lossy link lost nothing the engines had to resend");
}

#[test]
fn remote_access_errors_complete_the_operation_with_an_error_cqe() {
    let text = RDMA.replace(
        "name = \"bufmr\"\nregion = \"buf\"",
        "name = \"bufmr\"\nregion = \"buf\"\naccess = [\"local_write\"]",
    );
    let loaded = load(&text);
    let (mut tb, nics) = bed(0.0, 1);
    let mut hosts = Hosts::build(&loaded, 1, &mut tb, &nics).expect("built");
    let write = &loaded.scenario.timeline[1].action;
    let now = tb.now();
    let id = hosts.start(&mut tb, now, write).expect("posted");
    for _ in 0..10_000 {
        let now = tb.now();
        hosts.poll(&mut tb, now);
        if hosts.status(id).is_some() {
            break;
        }
        tb.step().expect("steps");
    }
    assert!(matches!(hosts.status(id), Some(Ok(_))), "{:?}", hosts.status(id));
    let log = hosts.cqes("h0.cq").expect("the CQ");
    assert_eq!(log[0].1.status, snic_rdma::WcStatus::RemAccessErr, "{log:?}");
    let mut c = BTreeMap::new();
    hosts.counters(&mut c);
    assert!(c["h0.cq.cq.errors"] >= 1);
}

const DMA: &str = r#"
name = "hosts-dma"
[[nic]]
name = "nic0"
[[host]]
name = "h0"
nic = "nic0"
[[host.region]]
name = "hsrc"
size = "16KiB"
init = { seed = 3 }
[[host.region]]
name = "hdst"
size = "16KiB"
init = { fill = 0xee }
[[host.region]]
name = "dev"
size = "16KiB"
place = "on_board"
init = { fill = 0x55 }
[[host.dma]]
name = "q"
ring_size = 16
rings = "on_chip"

[[op]]
do = "dma"
queue = "h0.q"
dir = "h2c"
descs = [
  { src = "h0.hsrc", dst = "h0.dev", len = 4096 },
  { src = "addr:0xdead0000", dst = "h0.dev+4096", len = 4096 },
  { src = "h0.hsrc+8192", dst = "h0.dev+8192", len = 4096 },
]

[[op]]
do = "dma"
queue = "h0.q"
dir = "c2h"
descs = [
  { src = "h0.dev", dst = "h0.hdst", len = 4096 },
  { src = "h0.dev+4096", dst = "addr:0x10", len = 4096 },
  { src = "h0.hsrc", dst = "h0.hdst+4096", len = 4096 },
  { src = "h0.dev+8192", dst = "h0.hdst+8192", len = 4096 },
]

[[expect]]
memory = "h0.dev:4096"
same_as = "h0.hsrc"
[[expect]]
memory = "h0.dev+4096:4096"
content = { fill = 0x55 }
[[expect]]
memory = "h0.dev+8192:4096"
same_as = "h0.hsrc+8192"
[[expect]]
memory = "h0.dev+12288:4096"
content = { fill = 0x55 }
[[expect]]
memory = "h0.hdst:4096"
same_as = "h0.hsrc"
[[expect]]
memory = "h0.hdst+4096:4096"
content = { fill = 0xee }
[[expect]]
memory = "h0.hdst+12288:4096"
content = { fill = 0xee }
[[expect]]
name = "must fail: hdst+8192 is not what it was"
memory = "h0.hdst+8192:4096"
content = { fill = 0xee }
[[expect]]
memory = "h0.hdst+8192:4096"
same_as = "h0.hsrc+8192"
[[expect]]
memory = "h0.hsrc"
content = { seed = 3 }
"#;

#[test]
fn dma_with_bad_descriptors_among_good_ones() {
    let (tb, hosts, loaded, outcomes) = run(DMA, 0.0, 1);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let diffs = check_all(&tb, &hosts, &loaded);
    assert!(diffs[0].contains("byte 0") && diffs[0].contains("want 0xee"), "{}", diffs[0]);
    let mut c = BTreeMap::new();
    hosts.counters(&mut c);
    assert_eq!(c["h0.dma.q.posted"], 7);
    assert_eq!(c["h0.dma.q.completed"], 4);
    assert_eq!(c["h0.dma.q.errors"], 3);
    assert_eq!(c["h0.dma.q.bytes"], 4 * 4096);
    assert_eq!(c["nic0.dma.descs"], 4);
    assert_eq!(c["nic0.dma.h2c_bytes"], 8192);
    assert_eq!(c["nic0.dma.c2h_bytes"], 8192);
    assert_eq!(c["nic0.dma.errors"], 3);
    assert_eq!(c["nic0.dma.errors.unmapped"], 2);
    assert_eq!(c["nic0.dma.errors.wrong_direction"], 1);
    // Two producer doorbells, and the host's two completion-ring consumer doorbells.
    assert_eq!(c["nic0.dma.doorbells"], 4);
    assert_eq!(c["nic1.dma.descs"], 0);

    // More descriptors than the ring holds are refused before any is written.
    let mut tb = tb;
    let mut hosts = hosts;
    let desc = DescSpec { src: "h0.hsrc".into(), dst: "h0.dev".into(), len: Size(64) };
    let big = Action::Dma { queue: "h0.q".into(), dir: DmaDir::H2c, descs: vec![desc; 17] };
    let now = tb.now();
    let e = hosts.start(&mut tb, now, &big).expect_err("17 descriptors in a 16-slot ring");
    assert!(e.to_string().contains("do not fit"), "{e}");
}

const CHANNELS: &str = r#"
name = "hosts-dma-channels"
[[nic]]
name = "nic0"
[[host]]
name = "h0"
nic = "nic0"
[[host.region]]
name = "hsrc"
size = "16KiB"
init = { seed = 5 }
[[host.region]]
name = "hdst"
size = "16KiB"
init = { fill = 0xee }
[[host.region]]
name = "dev"
size = "16KiB"
place = "on_board"
init = { fill = 0x55 }
[[host.channel]]
name = "up"
dir = "h2c"
descs = 4
[[host.channel]]
name = "down"
dir = "c2h"
key = 7

[[op]]
do = "dma"
queue = "h0.up"
dir = "h2c"
descs = [
  { src = "h0.hsrc", dst = "h0.dev", len = 4096 },
  { src = "h0.hsrc+4096", dst = "h0.dev+4096", len = 1000 },
  { src = "h0.hsrc+8192", dst = "h0.dev+8192", len = 4096 },
]

[[op]]
do = "dma"
queue = "h0.down"
dir = "c2h"
descs = [
  { src = "h0.dev", dst = "h0.hdst", len = 4096 },
  { src = "h0.dev+4096", dst = "h0.hdst+4096", len = 1000 },
  { src = "h0.dev+8192", dst = "h0.hdst+8192", len = 4096 },
]

# A good descriptor, a bad one (unmapped source), a good one: the engine validates the whole
# chain before it moves a byte, so none of the three moves anything.
[[op]]
do = "dma"
queue = "h0.up"
dir = "h2c"
descs = [
  { src = "h0.hsrc+12288", dst = "h0.dev+12288", len = 1024 },
  { src = "addr:0xdead0000", dst = "h0.dev+13312", len = 1024 },
  { src = "h0.hsrc+14336", dst = "h0.dev+14336", len = 1024 },
]

# A C2H chain whose destination is device memory: the wrong direction.
[[op]]
do = "dma"
queue = "h0.down"
dir = "c2h"
descs = [{ src = "h0.dev+12288", dst = "h0.dev+14336", len = 512 }]

[[expect]]
memory = "h0.dev:4096"
same_as = "h0.hsrc"
[[expect]]
memory = "h0.dev+4096:1000"
same_as = "h0.hsrc+4096:1000"
[[expect]]
name = "past the 1000 bytes of the second descriptor"
memory = "h0.dev+5096:3096"
content = { fill = 0x55 }
[[expect]]
memory = "h0.dev+8192:4096"
same_as = "h0.hsrc+8192"
[[expect]]
name = "the failed chain moved nothing, its good descriptors neither"
memory = "h0.dev+12288:4096"
content = { fill = 0x55 }
[[expect]]
memory = "h0.hdst:4096"
same_as = "h0.hsrc"
[[expect]]
memory = "h0.hdst+4096:1000"
same_as = "h0.hsrc+4096:1000"
[[expect]]
memory = "h0.hdst+5096:3096"
content = { fill = 0xee }
[[expect]]
memory = "h0.hdst+8192:4096"
same_as = "h0.hsrc+8192"
[[expect]]
memory = "h0.hdst+12288:4096"
content = { fill = 0xee }
[[expect]]
memory = "h0.hsrc"
content = { seed = 5 }
"#;

#[test]
fn dma_channels_run_chains_and_a_bad_descriptor_fails_the_whole_chain() {
    let (tb, hosts, loaded, outcomes) = run(CHANNELS, 0.0, 1);
    // A failed chain completes its operation too: the status is in the counters.
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert!(check_all(&tb, &hosts, &loaded).is_empty());
    let mut c = BTreeMap::new();
    hosts.counters(&mut c);
    let want = [
        ("h0.dma.up.runs", 2),
        ("h0.dma.up.completed", 1),
        ("h0.dma.up.errors", 1),
        ("h0.dma.up.bytes", 9192),
        ("h0.dma.up.descs", 3),
        ("h0.dma.down.runs", 2),
        ("h0.dma.down.completed", 1),
        ("h0.dma.down.errors", 1),
        ("h0.dma.down.bytes", 9192),
        ("h0.dma.down.descs", 3),
        ("nic0.dma.channel_runs", 4),
        ("nic0.dma.channel_errors", 2),
        ("nic0.dma.channel_errors.unmapped", 1),
        ("nic0.dma.channel_errors.wrong_direction", 1),
        ("nic0.dma.descs", 6),
        ("nic0.dma.h2c_bytes", 9192),
        ("nic0.dma.c2h_bytes", 9192),
        ("nic0.dma.errors", 0),
        ("nic0.dma.completions", 0),
    ];
    for (k, v) in want {
        assert_eq!(c.get(k), Some(&v), "{k}");
    }

    // Refused before anything is written: the wrong direction, more descriptors than the
    // channel's area holds, a second chain while one runs.
    let (mut tb, mut hosts) = (tb, hosts);
    let desc = DescSpec { src: "h0.hsrc".into(), dst: "h0.dev".into(), len: Size(64) };
    let now = tb.now();
    let wrong = Action::Dma { queue: "h0.up".into(), dir: DmaDir::C2h, descs: vec![desc.clone()] };
    let e = hosts.start(&mut tb, now, &wrong).expect_err("a C2H chain on an H2C channel");
    assert!(e.to_string().contains("cannot run"), "{e}");
    let big = Action::Dma { queue: "h0.up".into(), dir: DmaDir::H2c, descs: vec![desc.clone(); 5] };
    let e = hosts.start(&mut tb, now, &big).expect_err("5 descriptors in an area of 4");
    assert!(e.to_string().contains("do not fit"), "{e}");
    let one = Action::Dma { queue: "h0.up".into(), dir: DmaDir::H2c, descs: vec![desc] };
    let first = hosts.start(&mut tb, now, &one).expect("the channel is idle");
    let e = hosts.start(&mut tb, now, &one).expect_err("the channel is busy");
    assert!(e.to_string().contains("still running"), "{e}");
    assert_eq!(hosts.status(first), None);
    hosts.poll(&mut tb, now);
    assert_eq!(hosts.status(first), Some(Ok(now)));
    let mut c = BTreeMap::new();
    hosts.counters(&mut c);
    assert_eq!((c["h0.dma.up.runs"], c["h0.dma.up.bytes"]), (3, 9192 + 64));
}

const GEMM: &str = r#"
name = "hosts-gemm"
[[nic]]
name = "nic0"
[[nic]]
name = "nic1"
[[host]]
name = "h1"
nic = "nic1"
[[host.region]]
name = "a"
size = 80
place = "on_board"
init = { seed = 1 }
[[host.region]]
name = "b"
size = 60
init = { seed = 2 }
[[host.region]]
name = "c"
size = 192
place = "on_board"
init = { fill = 0xff }
[[host.region]]
name = "small"
size = 64
place = "on_board"
[[host.region]]
name = "x"
size = 16
init = { hex = "01000000 02000000 03000000 ffffffff" }
[[host.region]]
name = "y"
size = 16
place = "on_chip"
init = { hex = "0a000000 14000000 1e000000 02000000" }
[[host.region]]
name = "out"
size = 32
place = "on_chip"
init = { fill = 0x77 }

[[op]]
do = "kernel"
nic = "nic1"
kernel = "gemm"
args = { a = "h1.a", b = "h1.b", c = "h1.c", m = 8, n = 6, k = 10, dtype = "i8" }

[[op]]
do = "kernel"
nic = "nic1"
kernel = "crc32c"
args = { data = "h1.a" }

[[op]]
do = "kernel"
nic = "nic1"
kernel = "gemm"
args = { a = "h1.a", b = "h1.b", c = "h1.small", m = 8, n = 6, k = 10, dtype = "i8" }

[[op]]
do = "kernel"
nic = "nic1"
kernel = "vadd"
args = { x = "h1.x", y = "h1.y", out = "h1.out", dtype = "i32", n = 4 }

[[op]]
do = "kernel"
nic = "nic1"
kernel = "copy"
args = { src = "h1.x+4:8", dst = "h1.out+20" }
"#;

#[test]
fn a_gemm_kernel_computes_the_product() {
    let (tb, hosts, _, outcomes) = run(GEMM, 0.0, 1);
    assert!(outcomes[0].is_ok() && outcomes[1].is_ok(), "{outcomes:?}");
    assert!(outcomes[3].is_ok() && outcomes[4].is_ok(), "{outcomes:?}");
    let err = outcomes[2].as_ref().expect_err("C too small for the product");
    assert!(err.contains("bad_length"), "{err}");
    let seeded = |seed: u64, len: usize| {
        let mut v = vec![0u8; len];
        ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
        v
    };
    let (a, b) = (seeded(1, 80), seeded(2, 60));
    let mut want = Vec::new();
    for i in 0..8 {
        for j in 0..6 {
            let v: i32 = (0..10)
                .map(|l| i32::from(a[i * 10 + l] as i8) * i32::from(b[l * 6 + j] as i8))
                .sum();
            want.extend_from_slice(&v.to_le_bytes());
        }
    }
    assert_eq!(hosts.read(&tb, "h1.c").expect("C"), want);
    assert_eq!(hosts.read(&tb, "h1.small").expect("untouched"), vec![0; 64]);
    let mut c = BTreeMap::new();
    hosts.counters(&mut c);
    assert_eq!((c["nic1.kernel.runs"], c["nic1.kernel.errors"]), (5, 1));
    // VADD over 4 i32 (wrapping), then COPY of x's middle 8 bytes behind it.
    let out = hosts.read(&tb, "h1.out").expect("out");
    let words: Vec<u32> =
        out.chunks(4).map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes"))).collect();
    assert_eq!(words, [11, 22, 33, 1, 0x7777_7777, 2, 3, 0x7777_7777]);
}

#[test]
fn a_kernel_size_past_its_buffers_is_an_error_not_a_shorter_run() {
    // x, y and out hold 4 i32; 5 (or 2^64 - 1) elements do not fit.
    for n in ["5", "\"0xffffffffffffffff\""] {
        let text = format!(
            "{GEMM}\n[[op]]\nat = 0\ndo = \"kernel\"\nnic = \"nic1\"\nkernel = \"vadd\"\n\
             args = {{ x = \"h1.x\", y = \"h1.y\", out = \"h1.out\", dtype = \"i32\", n = {n} }}\n"
        );
        let loaded = load(&text);
        let (mut tb, nics) = bed(0.0, 1);
        let mut hosts = Hosts::build(&loaded, 1, &mut tb, &nics).expect("the hosts build");
        let op = &loaded.scenario.timeline[5].action;
        let now = tb.now();
        let err = hosts.start(&mut tb, now, op).expect_err("n past the buffers").to_string();
        assert!(err.contains("argument x") || err.contains("argument n"), "{err}");
    }
}

#[test]
fn build_errors_name_what_is_wrong() {
    for (bad, why) in [
        (RDMA.replace("nic = \"nic1\"", "nic = \"nic9\""), "no NIC nic9"),
        (
            RDMA.replace(
                "size = \"64KiB\"\nplace = \"on_board\"",
                "size = \"64MiB\"\nplace = \"on_board\"",
            ),
            "region buf",
        ),
        (RDMA.replace("peer = \"h1.qp\"", "peer = \"h1.nope\""), "no peer QP h1.nope"),
        (RDMA.replace("mtu = 1024\n\n[[host]]", "mtu = 1000\n\n[[host]]"), "MTU 1000"),
    ] {
        // Unvalidated (`load` refuses some of these already): the hosts' own checks.
        let scenario = toml::from_str(&bad).expect("the TOML reads");
        let loaded = Loaded { scenario, path: "<test>".into(), dir: ".".into() };
        let (mut tb, nics) = bed(0.0, 1);
        let e = Hosts::build(&loaded, 1, &mut tb, &nics).expect_err(why).to_string();
        assert!(e.contains(why), "{e}");
    }
}
