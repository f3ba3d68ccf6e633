//! Whole scenarios on the simulated clock: NICs, hosts and links built from a file, traffic,
//! link and policy changes on the timeline, expectations and golden data.

use snic_scenario::testing;
use snic_scenario::{Loaded, Report, RunOptions};
use std::path::PathBuf;

/// A UDP frame as hex.
fn udp_hex(
    src: [u8; 6],
    dst: [u8; 6],
    sip: [u8; 4],
    dip: [u8; 4],
    sport: u16,
    dport: u16,
) -> String {
    let b = etherparse::PacketBuilder::ethernet2(src, dst).ipv4(sip, dip, 64).udp(sport, dport);
    let payload = [0x5au8; 64];
    let mut out = Vec::new();
    b.write(&mut out, &payload).expect("frame");
    testing::hex(&out)
}

const VM0: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];
const VM1: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];

fn a_to_b(dport: u16) -> String {
    udp_hex(VM0, VM1, [10, 0, 0, 1], [10, 0, 0, 2], 5000, dport)
}

fn run(l: &Loaded, seed: Option<u64>) -> Report {
    testing::run_with(l, &RunOptions { seed, ..RunOptions::default() })
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("snic-scenario-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tempdir");
    d
}

/// Two NICs forwarding host traffic by l2fwd over one link; `link` is the link's extra lines.
fn two_nics(link: &str, frames: u32, extra: &str) -> String {
    format!(
        r#"
name = "two_nics"
seed = 5
time_limit = "10ms"
sample_interval = "20us"

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
delay = "3us"
{link}

[[traffic]]
into = "h0"
packets = [ {{ hex = "{hex}", count = {frames}, interval = "1us" }} ]

{extra}
"#,
        hex = a_to_b(9000)
    )
}

#[test]
fn a_lossy_link_carries_host_traffic_between_two_nics() {
    let text = two_nics(
        "loss = 0.1\nduplicate = 0.02",
        300,
        r#"
[[expect]]
counter = "link.wire.a_to_b.offered"
eq = 300

[[expect]]
name = "the seeded loss happened"
counter = "link.wire.a_to_b.lost"
min = 10
max = 60

[[expect]]
counter = "nic1.drop.no_egress"
eq = 0
"#,
    );
    let l = testing::load_toml(&text);
    let r = run(&l, None);
    assert!(r.passed, "{}", r.to_text());
    let c = &r.counters;
    let delivered = c["link.wire.a_to_b.delivered"];
    assert_eq!(delivered, 300 - c["link.wire.a_to_b.lost"] + c["link.wire.a_to_b.duplicated"]);
    // What crossed the link is what nic1 received on its wire and forwarded to h1.
    assert_eq!(c["nic1.port.wire.rx_packets"], delivered);
    assert_eq!(c["nic1.port.host.tx_packets"], delivered);
    assert_eq!(c["nic0.port.host.rx_packets"], 300);
    assert_eq!(c["nic0.pipeline.rx_packets"], 300);
    // The series holds every delivered byte, in buckets of 20 us.
    let series = &r.series.links["wire a->b"];
    assert_eq!(r.series.interval_ns, 20_000);
    assert_eq!(series.iter().sum::<u64>(), c["link.wire.a_to_b.delivered_bytes"]);
    assert!(series.iter().filter(|b| **b > 0).count() > 10, "{series:?}");

    // A capture expectation: h1 got copies of the frame h0 sent, in any order.
    let want = format!(
        "{text}\n[[expect]]\npcap = \"h1\"\nany_order = true\npackets = [ {{ hex = \"{}\", count = {delivered} }} ]\n",
        a_to_b(9000)
    );
    let r2 = run(&testing::load_toml(&want), None);
    assert!(r2.passed, "{}", r2.to_text());
}

#[test]
fn the_same_seed_gives_the_same_report_and_another_seed_does_not() {
    let l = testing::load_toml(&two_nics("loss = 0.2\nreorder = 0.1\njitter = \"2us\"", 200, ""));
    let a = serde_json::to_string(&run(&l, None)).expect("json");
    let b = serde_json::to_string(&run(&l, None)).expect("json");
    assert_eq!(a, b);
    let c = serde_json::to_string(&run(&l, Some(99))).expect("json");
    assert_ne!(a, c);
}

#[test]
fn a_cut_link_loses_every_frame_until_restored() {
    let text = two_nics(
        "",
        100,
        r#"
[[op]]
name = "cut"
at = "20us"
do = "link"
link = "wire"
state = "down"

[[op]]
name = "restore"
at = "50us"
do = "link"
link = "wire"
state = "up"

[[op]]
name = "slower"
at = "60us"
do = "link"
link = "wire"
set = { delay = "10us" }

[[expect]]
name = "frames sent 20..49 us are lost"
counter = "link.wire.a_to_b.lost"
eq = 30

[[expect]]
counter = "nic1.port.host.tx_packets"
eq = 70

[[expect]]
name = "the last frame (99 us) arrives 10 us later"
end_time = true
min_time = "109us"
max_time = "109us"
"#,
    );
    let r = run(&testing::load_toml(&text), None);
    assert!(r.passed, "{}", r.to_text());
    let cut = &r.ops[0];
    assert_eq!(
        (cut.name.as_str(), cut.started_ns, cut.done_ns),
        ("cut", Some(20_000), Some(20_000))
    );
    assert_eq!(r.ops[1].done_ns, Some(50_000));
}

#[test]
fn a_capture_mismatch_shows_the_first_differing_frame_decoded() {
    let text = two_nics(
        "",
        3,
        &format!(
            r#"
[[expect]]
name = "exact"
pcap = "h1"
packets = [ {{ hex = "{same}", count = 3 }} ]

[[expect]]
name = "wrong port"
pcap = "nic1.host"
packets = [ {{ hex = "{other}", count = 3 }} ]

[[expect]]
name = "wrong port, masked"
pcap = "h1"
mask = ["udp.dport", "udp.checksum"]
packets = [ {{ hex = "{other}", count = 3 }} ]

[[expect]]
name = "too few"
pcap = "h1"
packets = [ {{ hex = "{same}", count = 4 }} ]
"#,
            same = a_to_b(9000),
            other = a_to_b(9001)
        ),
    );
    let r = run(&testing::load_toml(&text), None);
    assert!(!r.passed);
    let by = |n: &str| r.expectations.iter().find(|e| e.name == n).expect(n);
    assert!(by("exact").passed, "{:?}", by("exact"));
    assert!(by("wrong port, masked").passed, "{:?}", by("wrong port, masked"));
    let bad = by("wrong port");
    assert!(!bad.passed);
    let diff = bad.diff.as_deref().unwrap_or("");
    // The UDP destination port is bytes 36..38 of an untagged IPv4 frame; 9000 and 9001 differ in the second.
    assert!(diff.starts_with("frame 0 differs at byte 37"), "{diff}");
    assert!(diff.contains("udp 5000 > 9001") && diff.contains("udp 5000 > 9000"), "{diff}");
    assert!(diff.contains("ipv4 10.0.0.1 > 10.0.0.2"), "{diff}");
    let few = by("too few");
    assert!(!few.passed && few.diff.as_deref().unwrap_or("").contains("first missing frame 3"));
    assert!(r.to_text().contains("FAIL wrong port"), "{}", r.to_text());
}

#[test]
fn the_time_limit_ends_a_run_that_never_settles() {
    let text = two_nics(
        "",
        5,
        r#"
time_limit = "200us"

[[op]]
name = "never"
do = "wait"
counter = "nic1.port.host.tx_packets"
count = 1000
"#,
    );
    // `time_limit` must sit before the tables: put it at the top.
    let text = text
        .replace("\ntime_limit = \"200us\"\n", "\n")
        .replace("time_limit = \"10ms\"", "time_limit = \"200us\"");
    let r = run(&testing::load_toml(&text), None);
    assert!(!r.passed);
    assert_eq!(r.end_ns, 200_000);
    assert!(
        r.errors.iter().any(|e| e.contains("time limit 200us") && e.contains("never")),
        "{:?}",
        r.errors
    );
    assert_eq!(r.ops[0].done_ns, None);
    assert_eq!(r.counters["nic1.port.host.tx_packets"], 5);
}

const POLICY0: &str = r#"
[underlay]
port = 0
ip = "192.168.100.1"
mac = "02:00:00:00:01:01"
gateway_mac = "02:00:00:00:02:01"
vxlan_port = 4789
ttl = 64

[[vport]]
id = 0
name = "vm0"
port = 1
mac = "02:00:00:00:00:0a"
ips = ["10.0.0.1"]
vni = 42

  [[vport.layer]]
  name = "acl"
  kind = "acl"
  default = "deny"
  rules = [
    { id = 1, priority = 10, dir = "out", match = { "ip.dst" = "10.0.0.0/24" }, action = "allow-stateful" },
    { id = 2, priority = 10, dir = "in", match = { "ip.src" = "10.0.0.0/24" }, action = "allow" },
  ]

  [[vport.layer]]
  name = "route"
  kind = "route"
  rules = [
    { id = 1, dir = "out", match = { "ip.dst" = "10.0.0.0/8" }, action = { route = "vnet" } },
  ]

  [[vport.layer]]
  name = "vnet"
  kind = "vnet"
  mappings = [
    { ca = "10.0.0.2", pa = "192.168.100.2", mac = "02:00:00:00:00:0b", vni = 42 },
  ]
  rules = [
    { id = 1, dir = "out", action = { encap = "vxlan", vni = 42 } },
    { id = 2, dir = "in", action = "decap" },
  ]
"#;

#[test]
fn a_vswitch_policy_change_mid_flow_denies_then_allows_again() {
    let dir = tempdir("vswitch");
    std::fs::write(dir.join("nic0.toml"), POLICY0).expect("policy");
    let policy1 = POLICY0
        .replace("192.168.100.1", "192.168.100.X")
        .replace("192.168.100.2", "192.168.100.1")
        .replace("192.168.100.X", "192.168.100.2")
        .replace("02:00:00:00:01:01", "02:00:00:00:0X:01")
        .replace("02:00:00:00:02:01", "02:00:00:00:01:01")
        .replace("02:00:00:00:0X:01", "02:00:00:00:02:01")
        .replace("vm0", "vm1")
        .replace(
            "02:00:00:00:00:0a\"\nips = [\"10.0.0.1\"]",
            "02:00:00:00:00:0b\"\nips = [\"10.0.0.2\"]",
        )
        .replace("ca = \"10.0.0.2\"", "ca = \"10.0.0.1\"")
        .replace("mac = \"02:00:00:00:00:0b\", vni", "mac = \"02:00:00:00:00:0a\", vni");
    std::fs::write(dir.join("nic1.toml"), policy1).expect("policy");
    let text = format!(
        r#"
name = "vnet"
time_limit = "10ms"

[[nic]]
name = "nic0"
stages = ["parse", "classify", "vswitch"]
vswitch = {{ file = "nic0.toml" }}

[[nic]]
name = "nic1"
stages = ["parse", "classify", "vswitch"]
vswitch = {{ file = "nic1.toml" }}

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
delay = "2us"
rate_mbps = 10000

[[traffic]]
into = "h0"
start = "10us"
packets = [ {{ hex = "{a}", count = 20, interval = "5us" }} ]

[[op]]
at = "52us"
do = "vswitch"
node = "nic0"
edits = [ {{ op = "add-rule", vport = 0, layer = "acl", rule = "id=9 priority=1 dir=out ip.dst=10.0.0.2 l4.dst=9000 action=deny" }} ]

[[op]]
at = "82us"
do = "vswitch"
node = "nic0"
edits = [ {{ op = "remove-rule", vport = 0, layer = "acl", id = 9 }} ]

[[expect]]
name = "denied while the rule was in force (55..80 us)"
counter = "nic0.drop.policy_deny"
eq = 6

[[expect]]
counter = "link.wire.a_to_b.delivered"
eq = 14

[[expect]]
name = "h1 gets flow A decapsulated"
pcap = "h1"
packets = [ {{ hex = "{a}", count = 14 }} ]
"#,
        a = a_to_b(9000)
    );
    let r = run(&testing::load_toml_in(&text, &dir), None);
    assert!(r.passed, "{}", r.to_text());
    assert!(r.counters["nic0.vswitch.generation"] >= 2, "{}", r.to_text());
    // The encapsulated frames on the wire are VXLAN (UDP 4789), bigger than the inner ones.
    assert!(r.counters["link.wire.a_to_b.delivered_bytes"] > 14 * 106, "{}", r.to_text());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn golden_data_is_recorded_then_compared() {
    let dir = tempdir("golden");
    let text = two_nics(
        "loss = 0.1",
        50,
        "[golden]\npcaps = [\"h1\", \"nic0.wire\"]\ncounters = [\"link.wire.a_to_b.*\"]\n",
    );
    let l = testing::load_toml_in(&text, &dir);
    let opts = RunOptions::default();
    // Before recording, the comparison fails and says how to record.
    let r = run(&l, None);
    assert!(!r.passed && r.expectations.iter().any(|e| e.want.contains("scenario record")));
    let (_, files) = snic_scenario::record(&l, &opts).expect("record");
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(dir.join("test.golden/h1.pcap").exists());
    let r = run(&l, None);
    assert!(r.passed, "{}", r.to_text());
    assert!(r.expectations.iter().any(|e| e.kind == "golden:pcap" && e.name.contains("h1")));
    assert!(r.expectations.iter().any(|e| e.kind == "golden:counter"));
    // A counter missing from the recording (as one the engine gains later) is no difference
    // while it is zero, and one when it moved.
    let gpath = dir.join("test.golden/golden.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&gpath).expect("golden.json")).expect("json");
    for (gone, moved) in [("link.wire.a_to_b.tail_dropped", false), ("link.wire.a_to_b.lost", true)]
    {
        let mut d = doc.clone();
        d["counters"].as_object_mut().expect("counters").remove(gone).expect("recorded");
        std::fs::write(&gpath, serde_json::to_string(&d).expect("json")).expect("write");
        let r = run(&l, None);
        assert_eq!(r.passed, !moved, "{gone}: {}", r.to_text());
    }
    std::fs::write(&gpath, serde_json::to_string(&doc).expect("json")).expect("write");
    // Another seed loses other frames: the golden data no longer holds.
    let r = run(&l, Some(1234));
    assert!(!r.passed);
    let bad: Vec<_> = r.expectations.iter().filter(|e| !e.passed).map(|e| e.name.clone()).collect();
    assert!(bad.iter().any(|n| n.contains("lost") || n.contains("h1")), "{bad:?}");

    // --pcap writes every port and link direction.
    let pdir = dir.join("pcaps");
    let opts = RunOptions { pcap_dir: Some(pdir.clone()), ..RunOptions::default() };
    snic_scenario::run(&l, &opts).expect("run");
    for f in [
        "nic1.host.pcap",
        "link.wire.a_to_b.pcap",
        "link.wire.b_to_a.pcap",
        "host.h0.tx.pcap",
        "host.h1.rx.pcap",
    ] {
        assert!(pdir.join(f).exists(), "{f}");
    }
    let frames = |f: &str| snic_scenario::world::read_capture(&pdir.join(f)).expect("pcap").len();
    // h0 sent 50; all went onto the link (the loss happens on it); h1 got what survived.
    assert_eq!(frames("host.h0.tx.pcap"), 50);
    assert_eq!(frames("link.wire.a_to_b.pcap"), 50);
    let r = run(&l, None);
    assert_eq!(frames("host.h1.rx.pcap") as u64, r.counters["link.wire.a_to_b.delivered"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `frame` (untagged IPv4) with its ECN field set to `ecn`, the header checksum fixed.
fn with_ecn(hex: &str, ecn: u8) -> String {
    let mut f: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect();
    f[15] = (f[15] & !3) | ecn;
    f[24] = 0;
    f[25] = 0;
    let mut sum: u32 =
        f[14..34].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn a_congested_link_marks_ce_above_its_ecn_threshold() {
    // 40 ECT(0) frames at once into a 100 Mbit/s link whose threshold is 8 queued frames:
    // frames 9..39 (31 of them) find more than 8 queued and are marked; 10 not ECN-capable
    // ones after them are not.
    let ect = with_ecn(&a_to_b(9000), 2);
    let text = two_nics("rate_mbps = 100\necn_threshold = 8", 0, "")
        .replace(
            &format!("packets = [ {{ hex = \"{}\", count = 0, interval = \"1us\" }} ]", a_to_b(9000)),
            &format!(
                "packets = [ {{ hex = \"{ect}\", count = 40, interval = \"0ns\" }}, {{ hex = \"{}\", count = 10, interval = \"0ns\" }} ]",
                a_to_b(9000)
            ),
        );
    let text = format!(
        "{text}\n[[expect]]\ncounter = \"link.wire.a_to_b.ecn_marked\"\neq = 40\n[[expect]]\ncounter = \"nic1.port.host.tx_packets\"\neq = 50\n"
    );
    let r = run(&testing::load_toml(&text), None);
    let marked = r.counters["link.wire.a_to_b.ecn_marked"];
    assert_eq!(marked, 31, "{}", r.to_text());
    // The CE frames h1 got still carry a valid IPv4 header checksum (the pipeline's parse
    // stage would have dropped them otherwise), and all 50 arrived.
    assert_eq!(r.counters["nic1.port.host.tx_packets"], 50);
    assert!(!r.passed, "the eq = 40 expectation is wrong on purpose");
    let e = r.expectations.iter().find(|e| e.name.ends_with("ecn_marked")).expect("expectation");
    assert_eq!((e.passed, e.got.as_str()), (false, "31"));
}

#[test]
fn a_trace_filter_puts_each_packets_path_in_the_notes() {
    let l = testing::load_toml(&two_nics("", 2, ""));
    let opts = RunOptions { trace: Some("udp dst 9000".into()), ..RunOptions::default() };
    let r = snic_scenario::run(&l, &opts).expect("run");
    assert!(r.passed, "{}", r.to_text());
    let nic1: Vec<_> = r.notes.iter().filter(|n| n.starts_with("trace nic1:")).collect();
    assert!(!nic1.is_empty(), "{:?}", r.notes);
    assert!(
        r.notes.iter().any(|n| n.starts_with("trace nic0:") && n.contains("l2fwd")),
        "{:?}",
        r.notes
    );
}

#[test]
fn expectations_for_the_other_mode_are_not_checked_and_say_so() {
    let text = two_nics(
        "",
        10,
        r#"
[[expect]]
counter = "link.wire.a_to_b.offered"
eq = 10

[[expect]]
name = "only on real interfaces"
only = "real"
counter = "link.wire.a_to_b.offered"
eq = 12345

[[expect]]
name = "only in the simulation"
only = "sim"
counter = "link.wire.a_to_b.delivered"
eq = 9
"#,
    );
    let r = run(&testing::load_toml(&text), None);
    let names: Vec<&str> = r.expectations.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["link.wire.a_to_b.offered", "only in the simulation"]);
    // The sim-only one is checked (and fails: 10 were delivered), the real-only one is not.
    assert!(r.expectations[0].passed && !r.expectations[1].passed, "{}", r.to_text());
    assert!(!r.passed);
    assert!(r.notes.iter().any(|n| n.contains("1 expectation(s) apply only to the other mode")));
}

#[test]
fn references_with_spaces_run_as_they_check() {
    // `check` trims `HOST.NAME` and `NODE.PORT`; the run must find the same objects.
    let text = r#"
[[nic]]
name = "n0"
[[nic]]
name = "n1"
[[host]]
name = "h0"
nic = "n0"
region = [{ name = "src", size = "4KiB", init = { seed = 3 } }]
mr = [{ name = "m", region = "src" }]
cq = [{ name = "cq" }]
qp = [{ name = "qp", send_cq = "cq", peer = " h1.qp " }]
[[host]]
name = "h1"
nic = "n1"
region = [{ name = "dst", size = "4KiB" }]
mr = [{ name = "m", region = "dst" }]
cq = [{ name = "cq" }]
qp = [{ name = "qp", send_cq = "cq", peer = "h0.qp" }]
[[link]]
name = "w"
a = "n0.wire"
b = "n1.wire"
[[op]]
do = "post_send"
qp = " h0.qp"
wrs = [{ op = "write", local = ["h0.m"], remote = "h1.m" }]
[[op]]
do = "wait"
cq = "h0.cq "
count = 1
[[expect]]
memory = "h1.dst"
same_as = "h0.src"
[[expect]]
cqes = " h0.cq"
list = [{ status = "success", opcode = "rdma_write" }]
[[expect]]
pcap = "n1.host "
"#;
    let loaded = snic_scenario::load::load_str(
        text,
        snic_scenario::load::Format::Toml,
        std::path::Path::new("spaces.toml"),
        std::path::Path::new("."),
    )
    .expect("loads");
    let report = snic_scenario::run(&loaded, &snic_scenario::RunOptions::default()).expect("runs");
    assert!(report.passed, "{}", report.to_text());
}

#[test]
fn a_wait_on_a_counter_that_does_not_exist_says_so() {
    let text = two_nics(
        "",
        3,
        "[[op]]\nname = \"typo\"\ndo = \"wait\"\ncounter = \"nic1.port.host.tx_packetz\"\ncount = 3\n",
    );
    let r = run(&testing::load_toml(&text), None);
    assert!(!r.passed);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("typo: there is no counter \"nic1.port.host.tx_packetz\"")),
        "{}",
        r.to_text()
    );
    // The right name is satisfied and names no missing counter.
    let r = run(&testing::load_toml(&text.replace("tx_packetz", "tx_packets")), None);
    assert!(r.passed && r.errors.is_empty(), "{}", r.to_text());
}

#[test]
fn a_capture_file_is_replayed_at_its_own_times() {
    use snic_scenario::world::{read_capture, write_capture};
    use snic_time::Instant;
    let dir = tempdir("replay");
    // Three frames 5 us and then 15 us apart, at an arbitrary epoch.
    let f = |port: u16| {
        let h = a_to_b(port);
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
            .collect()
    };
    let t0 = Instant::from_secs(1_700_000_000);
    let us = core::time::Duration::from_micros;
    let frames = vec![(t0, f(1)), (t0 + us(5), f(2)), (t0 + us(20), f(3))];
    write_capture(&dir.join("in.pcap"), &frames).expect("write");
    let text =
        two_nics("", 1, "[[traffic]]\ninto = \"h0\"\nstart = \"100us\"\npcap = \"in.pcap\"\n");
    let opts = RunOptions { pcap_dir: Some(dir.join("out")), ..RunOptions::default() };
    let r = testing::run_with(&testing::load_toml_in(&text, &dir), &opts);
    assert!(r.passed, "{}", r.to_text());
    // h0 sent the scripted frame at 0, then the capture's frames at 100, 105 and 120 us.
    let sent = read_capture(&dir.join("out/host.h0.tx.pcap")).expect("h0's capture");
    let times: Vec<_> = sent.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [us(0), us(100), us(105), us(120)]);
    let bytes: Vec<_> = sent.into_iter().skip(1).map(|(_, b)| b).collect();
    assert_eq!(bytes, frames.into_iter().map(|(_, b)| b).collect::<Vec<Vec<u8>>>());
    let _ = std::fs::remove_dir_all(&dir);
}
