//! `--real`: scenarios' systems on real interfaces (root only; skipped with a message
//! otherwise).
//!
//! Two whole NICs (pipeline, own packets, RoCE engine) on the two ends of a veth pair, each in
//! a network namespace of its own, each with a host interface (a veth pair to a host
//! namespace, frames injected and captured there with AF_PACKET), driven by the real clock:
//! host traffic crosses both NICs by `l2fwd`, a lossy link loses what nftables says and counts
//! it, a cut link loses everything, and an RDMA WRITE crosses the veth (the NICs resolve each
//! other by ARP on it). Every namespace is gone afterwards.

use snic_io::Port;
use snic_io::script::ScriptHandle;
use snic_nic::NicConfig;
use snic_nic::neigh::NeighConfig;
use snic_pipeline::PortId;
use snic_pipeline::pipeline::StageSpec;
use snic_rdma::testing::{EndOpts, connect_qp, drain_cq};
use snic_rdma::{Access, QpAttr, Remote, SendWr, SgList, Sge, WcStatus, WrOp};
use snic_scenario::ScenarioError;
use snic_scenario::real::netns;
use snic_scenario::real::ports::RealPorts;
use snic_scenario::schema::{LinkSpec, LinkState};
use snic_testbed::{NodeId, RealClock, Testbed};
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The tests run one at a time (each checks that its namespaces are gone, with no other
/// test's in the way): `None` (a note said why) when not root, else the turn.
fn root_only(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if !netns::is_root() {
        note(&format!("{test}: skipped: --real needs root (network namespaces)"));
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// No namespace of this process is left.
fn assert_no_namespaces() {
    let left = netns::leftover_namespaces();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}

const NIC_MAC: [[u8; 6]; 2] = [[2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 2, 1]];
const HOST_MAC: [[u8; 6]; 2] = [[2, 0, 0, 0, 0x0a, 1], [2, 0, 0, 0, 0x0a, 2]];

fn link(loss: f64) -> LinkSpec {
    let mut l: LinkSpec =
        toml::from_str("name = \"wire\"\na = \"nic0.wire\"\nb = \"nic1.wire\"").expect("a link");
    l.loss = loss;
    l
}

/// A UDP frame from host 0 to host 1 carrying `seq`.
fn frame(seq: u32) -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2(HOST_MAC[0], HOST_MAC[1])
        .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
        .udp(4000, 7)
        .write(&mut f, &[seq.to_be_bytes().as_slice(), &[0x5a; 60]].concat())
        .expect("a frame");
    f
}

/// Two NICs on a veth link, each with a host interface, on the real clock.
struct Bed {
    ports: RealPorts,
    tb: Testbed,
    nic: [NodeId; 2],
    host: [ScriptHandle; 2],
    clock: RealClock,
    namespaces: Vec<String>,
}

impl Bed {
    fn new(wire: &LinkSpec) -> Bed {
        let mut ports = RealPorts::new().expect("root");
        let (w0, w1) = ports.link(wire, 1).expect("the veth link");
        let mut tb = Testbed::new();
        let mut nic = [NodeId(0); 2];
        let mut host = Vec::new();
        let stages: Vec<StageSpec> = ["parse", "classify", "l2fwd:0=1,1=0"]
            .iter()
            .map(|s| s.parse().expect("a stage"))
            .collect();
        for (i, w) in [w0, w1].into_iter().enumerate() {
            let (hp, handle) = ports.host_port_with_handle(&format!("nic{i}"), "host").unwrap();
            let opts = EndOpts { host_pool: 4 << 20, ..EndOpts::default() };
            let rnic = opts.config(i as u8 + 1);
            let cfg = NicConfig {
                mac: EthernetAddress(NIC_MAC[i]),
                ips: vec![rnic.local_ip],
                wire: PortId(0),
                neigh: NeighConfig {
                    retry_interval: Duration::from_millis(20),
                    ..Default::default()
                },
            };
            let p: Vec<Box<dyn Port>> = vec![w, hp];
            nic[i] = tb.add_nic(&format!("nic{i}"), cfg, rnic, &stages, p).expect("a NIC");
            host.push(handle);
        }
        for pump in ports.take_pumps() {
            tb.add_device(Box::new(pump));
        }
        let clock = RealClock::start(ports.poll_fds().to_vec());
        let namespaces = ports.namespaces().to_vec();
        assert_eq!(namespaces.len(), 5, "{namespaces:?}");
        Bed { ports, tb, nic, host: [host.remove(0), host.remove(0)], clock, namespaces }
    }

    /// Run on the real clock until `done` or 5 s.
    fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut Testbed) -> bool) {
        let limit = self.clock.now().saturating_add(Duration::from_secs(5));
        let ok = self.clock.run_while(&mut self.tb, limit, &mut done).expect("the testbed runs");
        assert!(ok, "timed out waiting for {what}");
    }

    /// Keep running for `d` (frames in flight land).
    fn settle(&mut self, d: Duration) {
        let limit = self.clock.now().saturating_add(d);
        self.clock.run_while(&mut self.tb, limit, |_| false).expect("the testbed runs");
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        let mut c = BTreeMap::new();
        self.ports.counters(&mut c);
        c
    }

    /// Queue `n` frames (sequence numbers from `first`) on host 0, 200 us apart from now.
    fn send(&mut self, first: u32, n: u32) -> Vec<Vec<u8>> {
        let t = self.clock.now();
        (first..first + n)
            .map(|s| {
                let f = frame(s);
                let at = t.saturating_add(Duration::from_micros(200 * u64::from(s - first)));
                self.host[0].push(at, f.clone());
                f
            })
            .collect()
    }

    /// Tear down and check that every namespace is gone.
    fn finish(mut self) {
        drop(self.tb);
        let left = self.ports.teardown();
        assert!(left.is_empty(), "{left:?}");
        let listed = netns::cmd("ip", &["netns", "list"], None).expect("ip netns list");
        for ns in &self.namespaces {
            assert!(!listed.contains(ns.as_str()), "{ns} still there:\n{listed}");
        }
        assert_no_namespaces();
    }
}

#[test]
fn host_traffic_crosses_two_nics_over_a_real_veth() {
    let Some(_turn) = root_only("host_traffic_crosses_two_nics_over_a_real_veth") else { return };
    let mut bed = Bed::new(&link(0.0));
    let want = bed.send(0, 20);
    let h1 = bed.host[1].clone();
    bed.run_until("20 frames at host 1", |_| h1.sent_count() >= 20);
    bed.settle(Duration::from_millis(20));
    let got: Vec<Vec<u8>> = bed.host[1].take_sent().into_iter().map(|(_, f)| f).collect();
    assert_eq!(got, want, "host 1 receives exactly what host 0 sent, in order");
    assert_eq!(bed.host[0].sent_count(), 0, "nothing comes back to host 0");
    let c = bed.counters();
    assert_eq!(c["link.wire.a_to_b.offered"], 20, "{c:?}");
    assert_eq!(c["link.wire.a_to_b.delivered"], 20, "{c:?}");
    assert_eq!(c["link.wire.a_to_b.lost"], 0);
    assert_eq!(c["link.wire.b_to_a.offered"], 0, "{c:?}");
    // The NICs' AF_PACKET ports counted the frames: nic1's wire port received 20, its host
    // port sent 20.
    let p = bed.tb.nic(bed.nic[1]).unwrap().node.port_counters();
    assert_eq!((p[0].1.rx_packets, p[1].1.tx_packets), (20, 20), "{p:?}");
    bed.finish();
}

#[test]
fn loss_on_a_real_link_is_applied_counted_and_changed() {
    let Some(_turn) = root_only("loss_on_a_real_link_is_applied_counted_and_changed") else {
        return;
    };
    let mut bed = Bed::new(&link(0.5));
    bed.send(0, 200);
    let h0 = bed.host[0].clone();
    bed.run_until("200 frames injected", |_| h0.queued() == 0);
    bed.settle(Duration::from_millis(30));
    let c = bed.counters();
    let (offered, delivered, lost) = (
        c["link.wire.a_to_b.offered"],
        c["link.wire.a_to_b.delivered"],
        c["link.wire.a_to_b.lost"],
    );
    assert_eq!(offered, 200, "{c:?}");
    assert_eq!(delivered + lost, offered, "{c:?}");
    assert!((60..=140).contains(&lost), "50% loss lost {lost} of 200");
    assert_eq!(bed.host[1].sent_count() as u64, delivered);

    // Cut: everything lost from now on; the counter keeps what the old rule dropped.
    bed.ports.change_link("wire", Some(LinkState::Down), None).expect("cut");
    bed.send(1000, 20);
    bed.run_until("20 more frames injected", |_| h0.queued() == 0);
    bed.settle(Duration::from_millis(30));
    let c = bed.counters();
    assert_eq!(c["link.wire.a_to_b.lost"], lost + 20, "{c:?}");
    assert_eq!(c["link.wire.a_to_b.delivered"], delivered);
    // Restored, with no loss: everything passes.
    let clean = snic_scenario::schema::Impairments { loss: Some(0.0), ..Default::default() };
    bed.ports.change_link("wire", Some(LinkState::Up), Some(&clean)).expect("restore");
    bed.send(2000, 20);
    bed.run_until("20 more frames injected", |_| h0.queued() == 0);
    bed.settle(Duration::from_millis(30));
    let c = bed.counters();
    assert_eq!(c["link.wire.a_to_b.delivered"], delivered + 20, "{c:?}");
    assert_eq!(c["link.wire.a_to_b.lost"], lost + 20);
    bed.finish();
}

#[test]
fn rdma_write_crosses_a_real_veth() {
    let Some(_turn) = root_only("rdma_write_crosses_a_real_veth") else { return };
    let mut bed = Bed::new(&link(0.0));
    const LEN: u32 = 64 << 10;
    let opts = EndOpts::default();
    let mut qp = [0u32; 2];
    let mut cq = Vec::new();
    let mut buf = [0u64; 2];
    let mut mr = Vec::new();
    for i in 0..2 {
        let d = bed.tb.nic_mut(bed.nic[i]).unwrap();
        let pd = d.rnic.alloc_pd();
        let c = d.rnic.create_cq(16);
        qp[i] = d.rnic.create_qp(opts.qp_init(pd, c, c)).expect("a QP");
        buf[i] = d.rnic.alloc_buf(snic_dma::MemKind::Host, u64::from(LEN), 4096).unwrap();
        mr.push(d.rnic.reg_mr(pd, buf[i], u64::from(LEN), Access::ALL).expect("an MR"));
        cq.push(c);
    }
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    bed.tb.nic_mut(bed.nic[0]).unwrap().rnic.mem_mut().write(buf[0], &data).unwrap();
    for i in 0..2 {
        let peer_ip = bed.tb.nic(bed.nic[1 - i]).unwrap().rnic.config().local_ip;
        let attr = QpAttr { access: Access::ALL, ..QpAttr::default() };
        let d = bed.tb.nic_mut(bed.nic[i]).unwrap();
        connect_qp(&mut d.rnic, qp[i], qp[1 - i], peer_ip, 100, 100, attr);
    }
    let now = bed.clock.catch_up(&mut bed.tb, Instant::MAX).unwrap();
    let sgl = SgList::one(Sge { addr: buf[0], len: LEN, lkey: mr[0].lkey });
    let remote = Remote { addr: buf[1], rkey: mr[1].rkey };
    let wr = SendWr::new(9, WrOp::Write { remote }, sgl);
    bed.tb.nic_mut(bed.nic[0]).unwrap().rnic.post_send(qp[0], &wr, now).expect("posted");
    let (n0, cq0) = (bed.nic[0], cq[0]);
    let mut cqes = Vec::new();
    bed.run_until("the WRITE's completion", |tb| {
        cqes.extend(drain_cq(&mut tb.nic_mut(n0).unwrap().rnic, cq0));
        !cqes.is_empty()
    });
    assert_eq!(cqes.len(), 1);
    assert_eq!((cqes[0].status, cqes[0].wr_id), (WcStatus::Success, 9));
    let mut got = vec![0u8; LEN as usize];
    bed.tb.nic(bed.nic[1]).unwrap().rnic.mem().read(buf[1], &mut got).unwrap();
    assert!(got == data, "the peer's memory holds the written bytes");
    // The NICs resolved each other on the veth and the WRITE's packets crossed it.
    let c = bed.counters();
    assert!(c["link.wire.a_to_b.delivered"] >= u64::from(LEN / 1024), "{c:?}");
    assert!(c["link.wire.b_to_a.delivered"] >= 2, "ARP reply and ACKs: {c:?}");
    bed.finish();
}

/// Not root: a clear error. Root: the smallest scenario (one NIC, nothing to do) runs,
/// settles, passes and leaves nothing behind.
#[test]
fn real_mode_needs_root_and_cleans_up_after_itself() {
    let text = "[[nic]]\nname = \"nic0\"\n";
    if !netns::is_root() {
        let loaded = snic_scenario::load::load_str(
            text,
            snic_scenario::load::Format::Toml,
            std::path::Path::new("t.toml"),
            std::path::Path::new("."),
        )
        .expect("loads");
        let opts = snic_scenario::RunOptions { real: true, ..Default::default() };
        match snic_scenario::run(&loaded, &opts) {
            Err(ScenarioError::Unsupported(m)) => {
                assert_eq!(m, "--real needs root (network namespaces)")
            }
            other => panic!("want Unsupported, got {:?}", other.map(|r| r.passed)),
        }
        return;
    }
    let Some(_turn) = root_only("real_mode_needs_root_and_cleans_up_after_itself") else { return };
    let report = run_real(text);
    assert!(report.passed, "{}", report.to_text());
    assert!(report.end_ns < 2_000_000_000, "settles at once: {}", report.end_ns);
}

// ---------------------------------------------------------------------------------------------
// Whole scenarios with --real
// ---------------------------------------------------------------------------------------------

use snic_scenario::testing::hex;

fn run_real(toml_text: &str) -> snic_scenario::Report {
    let loaded = snic_scenario::testing::load_toml(toml_text);
    let opts = snic_scenario::RunOptions { real: true, ..Default::default() };
    let t0 = std::time::Instant::now();
    let report = snic_scenario::run(&loaded, &opts).expect("the scenario runs");
    note(&format!("{} ({:?})", report.to_text(), t0.elapsed()));
    assert_no_namespaces();
    report
}

#[test]
fn a_two_nic_scenario_forwards_host_traffic_over_a_real_veth() {
    let Some(_turn) = root_only("a_two_nic_scenario_forwards_host_traffic_over_a_real_veth") else {
        return;
    };
    let f = hex(&frame(1));
    let text = format!(
        r#"
name = "real-l2fwd"
time_limit = "3s"
[[nic]]
name = "nic0"
stages = ["parse", "classify", "l2fwd:0=1,1=0"]
[[nic]]
name = "nic1"
stages = ["parse", "classify", "l2fwd:0=1,1=0"]
[[host]]
name = "h0"
nic = "nic0"
port = "host"
[[host]]
name = "h1"
nic = "nic1"
port = "host"
[[link]]
name = "wire"
a = "nic0.wire"
b = "nic1.wire"
delay = "10us"
[[traffic]]
into = "h0"
start = "2ms"
packets = [{{ hex = "{f}", count = 10, interval = "200us" }}]
[[op]]
do = "wait"
counter = "nic1.port.host.tx_packets"
count = 10
[[expect]]
pcap = "h1"
packets = [{{ hex = "{f}", count = 10 }}]
[[expect]]
counter = "link.wire.a_to_b.delivered"
eq = 10
[[expect]]
counter = "nic1.port.host.tx_packets"
eq = 10
"#
    );
    let report = run_real(&text);
    assert_eq!(report.mode, "real");
    assert!(report.passed, "{}", report.to_text());
    assert!(
        report.notes.iter().any(|n| n.contains("delay") && n.contains("not applied")),
        "the delay that could not be applied is said: {:?}",
        report.notes
    );
}

#[test]
fn an_rdma_write_scenario_runs_over_a_real_veth() {
    let Some(_turn) = root_only("an_rdma_write_scenario_runs_over_a_real_veth") else { return };
    let text = r#"
name = "real-rdma"
time_limit = "5s"
[[nic]]
name = "nic0"
[[nic]]
name = "nic1"
[[host]]
name = "h0"
nic = "nic0"
[[host.region]]
name = "src"
size = "64KiB"
init = { seed = 7 }
[[host.mr]]
name = "src_mr"
region = "src"
[[host.cq]]
name = "cq"
[[host.qp]]
name = "qp"
peer = "h1.qp"
send_cq = "cq"
[[host]]
name = "h1"
nic = "nic1"
[[host.region]]
name = "dst"
size = "64KiB"
[[host.mr]]
name = "dst_mr"
region = "dst"
[[host.cq]]
name = "cq"
[[host.qp]]
name = "qp"
send_cq = "cq"
[[link]]
name = "wire"
a = "nic0.wire"
b = "nic1.wire"
loss = 0.05
[[op]]
do = "post_send"
qp = "h0.qp"
wrs = [{ op = "write", local = ["src_mr"], remote = "h1.dst_mr" }]
[[expect]]
memory = "h1.dst"
same_as = "h0.src"
[[expect]]
cqes = "h0.cq"
list = [{ status = "success", opcode = "rdma_write", byte_len = 65536 }]
"#;
    let report = run_real(text);
    assert!(report.passed, "{}", report.to_text());
    let c = &report.counters;
    assert!(c.get("link.wire.a_to_b.delivered").is_some_and(|&n| n >= 64), "{c:?}");
    // 5% loss on the veth: whatever was lost, the engine's retransmissions made up for it.
    let lost = c["link.wire.a_to_b.lost"] + c["link.wire.b_to_a.lost"];
    let offered = c["link.wire.a_to_b.offered"] + c["link.wire.b_to_a.offered"];
    assert_eq!(
        offered,
        c["link.wire.a_to_b.delivered"] + c["link.wire.b_to_a.delivered"] + lost,
        "{c:?}"
    );
}

#[test]
fn a_failed_build_leaves_no_namespace() {
    let Some(_turn) = root_only("a_failed_build_leaves_no_namespace") else { return };
    // The link's namespaces and veths are made before the NIC's pipeline fails to build (a
    // P4 program that is not there; the loader would refuse it, so it comes in afterwards).
    let text = r#"
[[nic]]
name = "nic0"
[[nic]]
name = "nic1"
[[link]]
name = "wire"
a = "nic0.wire"
b = "nic1.wire"
"#;
    let mut loaded = snic_scenario::load::load_str(
        text,
        snic_scenario::load::Format::Toml,
        std::path::Path::new("bad.toml"),
        std::path::Path::new("."),
    )
    .expect("loads");
    loaded.scenario.nics[1].stages =
        ["parse", "classify", "p4:/nonexistent/prog.p4"].map(String::from).to_vec();
    let opts = snic_scenario::RunOptions { real: true, ..Default::default() };
    let e = snic_scenario::run(&loaded, &opts).expect_err("the P4 program does not exist");
    assert!(matches!(e, ScenarioError::Setup(_)), "{e}");
    assert_no_namespaces();
}

#[test]
fn a_real_run_is_bounded_by_its_time_limit() {
    let Some(_turn) = root_only("a_real_run_is_bounded_by_its_time_limit") else { return };
    let text = r#"
time_limit = "10ms"
[[nic]]
name = "nic0"
[[op]]
do = "wait"
counter = "nic0.port.wire.rx_packets"
count = 1
"#;
    let t0 = std::time::Instant::now();
    let report = run_real(text);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(!report.passed);
    assert!(report.errors.iter().any(|e| e.contains("time limit")), "{:?}", report.errors);
    // A limit written for the simulated clock is too short for real interfaces: raised to
    // the real floor, and said so.
    assert!(report.end_ns >= 1_000_000_000, "{}", report.end_ns);
    assert!(report.notes.iter().any(|n| n.contains("taken as 1000 ms")), "{:?}", report.notes);
}

#[test]
fn a_rate_limited_link_gets_a_token_bucket() {
    let Some(_turn) = root_only("a_rate_limited_link_gets_a_token_bucket") else { return };
    let mut l = link(0.0);
    l.rate_mbps = 100;
    let bed = Bed::new(&l);
    let ends = bed.ports.link_ends("wire").expect("the link");
    let mid = bed.ports.namespaces().iter().find(|n| n.ends_with("l-wire")).cloned().unwrap();
    for dev in ["to_a", "to_b"] {
        let q = netns::cmd("tc", &["-n", &mid, "qdisc", "show", "dev", dev], None).unwrap();
        assert!(q.contains("tbf") && q.contains("100Mbit"), "{dev}: {q}");
    }
    // The ports' own interfaces keep their default queueing.
    let q =
        netns::cmd("tc", &["-n", &ends[0].0, "qdisc", "show", "dev", &ends[0].1], None).unwrap();
    assert!(!q.contains("tbf"), "{q}");
    bed.finish();
}

/// One description, both worlds: every scenario of the library (`scenarios/`, listed, so new
/// files are picked up) passes on real interfaces too; expectations only the simulation can
/// promise say `only = "sim"` and are reported as not checked.
#[test]
fn every_library_scenario_passes_on_real_interfaces() {
    let Some(_turn) = root_only("every_library_scenario_passes_on_real_interfaces") else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("scenarios/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml" || e == "json"))
        .collect();
    files.sort();
    let mut ran = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read");
        // Support files (vSwitch policies) sit beside the scenarios.
        if !["[[nic]]", "[[switch]]", "\"nic\"", "\"switch\""].iter().any(|k| text.contains(k)) {
            continue;
        }
        let loaded = snic_scenario::testing::load_path(&path);
        let opts = snic_scenario::RunOptions { real: true, ..Default::default() };
        let report = snic_scenario::testing::run_with(&loaded, &opts);
        assert_eq!(report.mode, "real");
        assert!(report.passed, "{} on real interfaces:\n{}", path.display(), report.to_text());
        assert_no_namespaces();
        ran += 1;
    }
    assert!(ran >= 8, "only {ran} scenarios found in {}", dir.display());
}

#[test]
fn port_names_that_are_no_interface_names_do_not_clash() {
    let Some(_turn) = root_only("port_names_that_are_no_interface_names_do_not_clash") else {
        return;
    };
    // `p1` is a port's own name; the long one needs a fallback, which must not be `p1` too;
    // `lo` exists in every namespace already.
    let text = r#"
time_limit = "10ms"
[[nic]]
name = "nic0"
ports = ["p1", "averyveryverylongportname", "lo"]
stages = ["parse", "classify", "l2fwd:0=1,1=0"]
[[op]]
do = "wait"
idle = true
"#;
    let report = run_real(text);
    assert!(report.passed, "{}", report.to_text());
}
