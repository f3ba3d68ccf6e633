//! The scenario format: one schema for JSON and TOML files (`docs/scenarios.md` documents every
//! field with an example).
//!
//! A scenario names everything it builds, and later parts refer to earlier ones by name:
//! - a **port** as `NODE.PORT` (`nic0.wire`), where `NODE` is a NIC or a switch;
//! - a **host object** as `HOST.NAME` (`h0.src`, `h0.qp`, `h0.cq`); inside a host's own
//!   definitions the host prefix is left out;
//! - a **buffer** as `HOST.NAME[+OFFSET][:LEN]` where `NAME` is a region or an MR
//!   (`h0.src+4096:1024`); `addr:0x...` is a raw engine address (to write bad descriptors).
//!
//! Times are strings with a unit (`"250ns"`, `"10us"`, `"5ms"`, `"1s"`) or integer nanoseconds;
//! sizes are integers (bytes) or strings with a binary unit (`"64KiB"`, `"16MiB"`, `"1GiB"`).
//!
//! Every struct refuses unknown fields, so a misspelt field is an error that names it.

use core::fmt;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A whole scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The scenario's name (default: the file's stem).
    #[serde(default)]
    pub name: String,
    /// What it shows, in a sentence or two.
    #[serde(default)]
    pub description: String,
    /// Seed of every random choice (links' impairments, generated traffic, seeded memory);
    /// `snic scenario run --seed` overrides it.
    #[serde(default = "one")]
    pub seed: u64,
    /// The run stops here in simulated time if it has not settled: every operation done, no
    /// device with pending work. Default 10 s.
    #[serde(default = "ten_seconds")]
    pub time_limit: SimTime,
    /// Width of one bucket of the time series the report and the plot carry. Default 100 us.
    #[serde(default = "hundred_us")]
    pub sample_interval: SimTime,
    /// The NICs (TOML: `[[nic]]`).
    #[serde(default, rename = "nic", alias = "nics")]
    pub nics: Vec<NicSpec>,
    /// Plain switches: a pipeline over ports, no RoCE engine, no hosts (TOML: `[[switch]]`).
    #[serde(default, rename = "switch", alias = "switches")]
    pub switches: Vec<SwitchSpec>,
    /// Hosts attached to NICs (TOML: `[[host]]`).
    #[serde(default, rename = "host", alias = "hosts")]
    pub hosts: Vec<HostSpec>,
    /// Links between ports (TOML: `[[link]]`).
    #[serde(default, rename = "link", alias = "links")]
    pub links: Vec<LinkSpec>,
    /// Traffic sources (TOML: `[[traffic]]`).
    #[serde(default)]
    pub traffic: Vec<TrafficSpec>,
    /// The timeline of operations (TOML: `[[op]]`), in order.
    #[serde(default, rename = "op", alias = "ops")]
    pub timeline: Vec<OpSpec>,
    /// Expectations checked at the end of the run (TOML: `[[expect]]`).
    #[serde(default)]
    pub expect: Vec<ExpectSpec>,
    /// Golden data recorded by `snic scenario record` and compared by `run`.
    #[serde(default)]
    pub golden: Option<GoldenSpec>,
}

fn one() -> u64 {
    1
}
fn ten_seconds() -> SimTime {
    SimTime(10_000_000_000)
}
fn hundred_us() -> SimTime {
    SimTime(100_000)
}
fn true_() -> bool {
    true
}

// ---------------------------------------------------------------------------------------------
// NICs and switches
// ---------------------------------------------------------------------------------------------

/// One NIC: pipeline, ports, the NIC's own packets, a RoCE engine with its memory, a DMA engine.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NicSpec {
    /// Unique among NICs and switches.
    pub name: String,
    /// The NIC's wire MAC (default `02:00:00:00:NN:01`, `NN` the NIC's index + 1).
    #[serde(default)]
    pub mac: Option<MacAddr>,
    /// RoCE addresses; the first is the engine's GID (default `192.0.2.(index + 1)`).
    #[serde(default)]
    pub ips: Vec<IpAddr>,
    /// Port names; port `i` is the pipeline's `PortId(i)`. Default `["wire", "host"]`.
    #[serde(default = "default_ports")]
    pub ports: Vec<String>,
    /// The port the NIC's own packets (RoCE, ARP, ND) leave by. Default: the first port.
    #[serde(default)]
    pub wire: Option<String>,
    /// Pipeline stages as `snic run --stage` takes them (`parse`, `classify`, `vswitch`,
    /// `p4:PROG.p4,entries=E.txt`, `xdp:PROG.o`, `kernel:NAME,K=V`, `l2fwd:0=1,1=0`, ...);
    /// relative paths are relative to the scenario file; an `xdp:` program ending in `.c` is
    /// compiled with clang first. Empty: `parse`, `classify`, `l2fwd`. `local` is added after
    /// `classify` when not given.
    #[serde(default)]
    pub stages: Vec<String>,
    /// The policy of the `vswitch` stage.
    #[serde(default)]
    pub vswitch: Option<PolicySource>,
    /// Memory sizes.
    #[serde(default)]
    pub memory: NicMemory,
    /// RoCE engine settings.
    #[serde(default)]
    pub rdma: RdmaSpec,
    /// Retry interval of the neighbour table (ARP / ND). Default 20 ms.
    #[serde(default = "twenty_ms")]
    pub neigh_retry: SimTime,
}

fn default_ports() -> Vec<String> {
    vec!["wire".into(), "host".into()]
}
fn twenty_ms() -> SimTime {
    SimTime(20_000_000)
}

/// A switch: a plain pipeline over named ports (no RoCE engine, no hosts).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// Unique among NICs and switches.
    pub name: String,
    /// Port names; port `i` is `PortId(i)`.
    pub ports: Vec<String>,
    /// Stages as for a NIC (no `local`). Default: `parse`, `l2fwd:learn`.
    #[serde(default)]
    pub stages: Vec<String>,
    /// The policy of a `vswitch` stage.
    #[serde(default)]
    pub vswitch: Option<PolicySource>,
}

/// Where a vSwitch policy comes from: a file (`{ file = "policy.toml" }`, as
/// `snic vswitch check` takes it) or inline (`{ inline = { ... } }`, the same document).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum PolicySource {
    /// A policy file, relative to the scenario file.
    File(String),
    /// The policy document itself.
    Inline(serde_json::Value),
}

/// Memory sizes of a NIC.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NicMemory {
    /// Host memory the hosts of this NIC share (their regions, rings in host memory).
    /// Default 16 MiB.
    #[serde(default = "sixteen_mib")]
    pub host: Size,
    /// On-chip device memory. Default 256 KiB.
    #[serde(default = "quarter_mib")]
    pub on_chip: Size,
    /// On-board device memory. Default 16 MiB.
    #[serde(default = "sixteen_mib")]
    pub on_board: Size,
}

impl Default for NicMemory {
    fn default() -> Self {
        NicMemory { host: sixteen_mib(), on_chip: quarter_mib(), on_board: sixteen_mib() }
    }
}

fn sixteen_mib() -> Size {
    Size(16 << 20)
}
fn quarter_mib() -> Size {
    Size(256 << 10)
}

/// RoCE engine settings of a NIC.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RdmaSpec {
    /// Most request packets in flight per QP. Default 64.
    #[serde(default = "sixty_four")]
    pub max_inflight: u32,
    /// Send ECT(0) so the network may mark CE. Default true.
    #[serde(default = "true_")]
    pub ecn: bool,
    /// DCQCN-style congestion control reacting to CNPs. Default true.
    #[serde(default = "true_")]
    pub dcqcn: bool,
    /// DSCP of every packet. Default 26.
    #[serde(default = "dscp")]
    pub dscp: u8,
}

impl Default for RdmaSpec {
    fn default() -> Self {
        RdmaSpec { max_inflight: 64, ecn: true, dcqcn: true, dscp: 26 }
    }
}

fn sixty_four() -> u32 {
    64
}
fn dscp() -> u8 {
    26
}

// ---------------------------------------------------------------------------------------------
// Hosts
// ---------------------------------------------------------------------------------------------

/// A host attached to a NIC: its memory regions, RDMA objects and DMA queues, and optionally
/// its network interface on one of the NIC's ports.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Unique among hosts.
    pub name: String,
    /// The NIC it is attached to.
    pub nic: String,
    /// The NIC port its network interface is on (`host`): what the host sends enters the NIC
    /// there; what the NIC sends out there is what the host receives.
    #[serde(default)]
    pub port: Option<String>,
    /// Memory regions (TOML: `[[host.region]]`).
    #[serde(default, rename = "region", alias = "regions")]
    pub regions: Vec<RegionSpec>,
    /// Protection domains by name. Default: one, `pd`.
    #[serde(default = "default_pds")]
    pub pds: Vec<String>,
    /// Memory registrations (TOML: `[[host.mr]]`).
    #[serde(default, rename = "mr", alias = "mrs")]
    pub mrs: Vec<MrSpec>,
    /// Completion queues (TOML: `[[host.cq]]`).
    #[serde(default, rename = "cq", alias = "cqs")]
    pub cqs: Vec<CqSpec>,
    /// RC queue pairs (TOML: `[[host.qp]]`).
    #[serde(default, rename = "qp", alias = "qps")]
    pub qps: Vec<QpSpec>,
    /// DMA queues (TOML: `[[host.dma]]`).
    #[serde(default, rename = "dma", alias = "dma_queues")]
    pub dma: Vec<DmaQueueSpec>,
    /// DMA channels (TOML: `[[host.channel]]`).
    #[serde(default, rename = "channel", alias = "channels")]
    pub channels: Vec<ChannelSpec>,
}

fn default_pds() -> Vec<String> {
    vec!["pd".into()]
}

/// Where memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// Host memory.
    #[default]
    Host,
    /// The NIC's on-chip device memory.
    OnChip,
    /// The NIC's on-board device memory.
    OnBoard,
}

/// A memory region of a host (in host memory or in its NIC's device memory).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RegionSpec {
    /// Unique within the host (and distinct from its MRs' names).
    pub name: String,
    /// Bytes.
    pub size: Size,
    /// Where it lives. Default host memory.
    #[serde(default)]
    pub place: Place,
    /// Alignment. Default 4 KiB.
    #[serde(default = "four_kib")]
    pub align: Size,
    /// Initial contents. Default zeros.
    #[serde(default)]
    pub init: Content,
}

fn four_kib() -> Size {
    Size(4096)
}

/// Contents of memory: initial contents of a region, or what an expectation wants in one.
/// Written as a table with one key: `{ zero = true }`, `{ fill = 0xab }`, `{ seed = 7 }`,
/// `{ counter = true }`, `{ pattern = "deadbeef" }`, `{ hex = "00 01 02" }`,
/// `{ file = "a.bin" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Content {
    /// All zero.
    #[default]
    #[serde(with = "unit_true")]
    Zero,
    /// Every byte this value.
    Fill(u8),
    /// Bytes from a ChaCha8 stream seeded with this value (and nothing else: the same seed
    /// gives the same bytes in every region and every run).
    Seed(u64),
    /// Byte `i` is `i mod 256`.
    #[serde(with = "unit_true")]
    Counter,
    /// These bytes (hex) repeated to the region's length.
    Pattern(String),
    /// These bytes (hex, spaces allowed), then zeros.
    Hex(String),
    /// A file's bytes (relative to the scenario file), then zeros.
    File(String),
}

/// `zero = true`: a unit variant written as a table key with the value `true`.
mod unit_true {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(true)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
        if bool::deserialize(d)? {
            Ok(())
        } else {
            Err(serde::de::Error::custom("write `true` (or leave the key out)"))
        }
    }
}

/// An access right of an MR or a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessFlag {
    /// The NIC may write (receive, READ responses, atomic results).
    LocalWrite,
    /// Peers may WRITE.
    RemoteWrite,
    /// Peers may READ.
    RemoteRead,
    /// Peers may run atomics.
    RemoteAtomic,
}

/// A memory registration over (part of) a region.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MrSpec {
    /// Unique within the host (and distinct from its regions' names).
    pub name: String,
    /// The region it covers.
    pub region: String,
    /// First byte within the region. Default 0.
    #[serde(default)]
    pub offset: Size,
    /// Bytes. Default: the rest of the region.
    #[serde(default)]
    pub len: Option<Size>,
    /// Its PD. Default `pd`.
    #[serde(default = "default_pd")]
    pub pd: String,
    /// Access rights. Default all four.
    #[serde(default = "all_access")]
    pub access: Vec<AccessFlag>,
}

fn default_pd() -> String {
    "pd".into()
}
fn all_access() -> Vec<AccessFlag> {
    vec![
        AccessFlag::LocalWrite,
        AccessFlag::RemoteWrite,
        AccessFlag::RemoteRead,
        AccessFlag::RemoteAtomic,
    ]
}

/// A completion queue.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CqSpec {
    /// Unique within the host.
    pub name: String,
    /// Entries. Default 1024.
    #[serde(default = "cq_depth")]
    pub depth: u32,
}

fn cq_depth() -> u32 {
    1024
}

/// An RC queue pair, connected to its peer at setup.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QpSpec {
    /// Unique within the host.
    pub name: String,
    /// The QP it is connected to (`HOST.QP`). Naming the peer on one side is enough; when both
    /// name each other they must agree.
    #[serde(default)]
    pub peer: Option<String>,
    /// Its PD. Default `pd`.
    #[serde(default = "default_pd")]
    pub pd: String,
    /// Send CQ.
    pub send_cq: String,
    /// Receive CQ. Default: the send CQ.
    #[serde(default)]
    pub recv_cq: Option<String>,
    /// Where its rings live. Default host memory.
    #[serde(default)]
    pub rings: Place,
    /// Send queue depth. Default 256.
    #[serde(default = "qp_depth")]
    pub sq_depth: u32,
    /// Receive queue depth. Default 256.
    #[serde(default = "qp_depth")]
    pub rq_depth: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096. Default 1024.
    #[serde(default = "mtu")]
    pub mtu: u32,
    /// Local ACK timeout code (4.096 us x 2^timeout). Default 14.
    #[serde(default = "timeout")]
    pub timeout: u8,
    /// Transport retries. Default 7.
    #[serde(default = "seven")]
    pub retry_cnt: u8,
    /// RNR retries (7: infinite). Default 7.
    #[serde(default = "seven")]
    pub rnr_retry: u8,
    /// RNR NAK timer code it advertises. Default 1.
    #[serde(default = "one_u8")]
    pub min_rnr_timer: u8,
    /// Outstanding READ / atomics as requester (and accepted as responder). Default 16.
    #[serde(default = "sixteen")]
    pub max_rd_atomic: u8,
    /// Remote access the QP allows. Default write, read, atomic.
    #[serde(default = "remote_access")]
    pub access: Vec<AccessFlag>,
    /// Every send WQE completes with a CQE. Default false.
    #[serde(default)]
    pub sig_all: bool,
}

fn qp_depth() -> u32 {
    256
}
fn mtu() -> u32 {
    1024
}
fn timeout() -> u8 {
    14
}
fn seven() -> u8 {
    7
}
fn one_u8() -> u8 {
    1
}
fn sixteen() -> u8 {
    16
}
fn remote_access() -> Vec<AccessFlag> {
    vec![AccessFlag::RemoteWrite, AccessFlag::RemoteRead, AccessFlag::RemoteAtomic]
}

/// A DMA queue of a host (QDMA-like: H2C and C2H rings plus a completion ring).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DmaQueueSpec {
    /// Unique within the host.
    pub name: String,
    /// Queue id on its NIC's DMA engine. Default: the next free one.
    #[serde(default)]
    pub qid: Option<u16>,
    /// Descriptors per ring. Default 64.
    #[serde(default = "sixty_four")]
    pub ring_size: u32,
    /// Where its rings live. Default host memory.
    #[serde(default)]
    pub rings: Place,
}

/// A DMA channel of a host (XDMA-like: the host writes a chain of descriptors in memory and
/// starts the channel with the chain's first address; the engine validates the whole chain,
/// then moves its bytes). A `dma` operation whose `queue` names the channel runs one chain.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelSpec {
    /// Unique within the host, among its DMA queues and channels.
    pub name: String,
    /// The channel's direction: every chain run on it moves this way.
    pub dir: DmaDir,
    /// Channel key on its NIC's DMA engine. Default: the next free one.
    #[serde(default)]
    pub key: Option<u32>,
    /// Most descriptors of one chain. Default 64. A descriptor area of this many
    /// descriptors is allocated in host memory when the host is built; every chain is written
    /// there.
    #[serde(default = "sixty_four")]
    pub descs: u32,
}

// ---------------------------------------------------------------------------------------------
// Links and traffic
// ---------------------------------------------------------------------------------------------

/// A link between two ports, with impairments (both ways unless `a_to_b` / `b_to_a` say more).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Unique among links.
    pub name: String,
    /// One end (`NODE.PORT`).
    pub a: String,
    /// The other end (`NODE.PORT`).
    pub b: String,
    /// Probability a frame is lost, 0..=1.
    #[serde(default)]
    pub loss: f64,
    /// Probability a frame is delivered twice.
    #[serde(default)]
    pub duplicate: f64,
    /// Probability a frame is held back by `reorder_delay` so later ones pass it.
    #[serde(default)]
    pub reorder: f64,
    /// How long a reordered frame is held. Default 100 us.
    #[serde(default = "hundred_us")]
    pub reorder_delay: SimTime,
    /// Propagation delay.
    #[serde(default)]
    pub delay: SimTime,
    /// Uniform extra delay in `[0, jitter)` per frame.
    #[serde(default)]
    pub jitter: SimTime,
    /// Line rate in Mbit/s; 0: unlimited (no serialisation delay, no queue).
    #[serde(default)]
    pub rate_mbps: u64,
    /// Most frames waiting for the wire on a rate-limited link; more are tail-dropped.
    /// Default 1024.
    #[serde(default = "queue_limit")]
    pub queue_limit: u64,
    /// On a rate-limited link, mark CE on ECN-capable frames that find more than this many
    /// frames queued (a switch port's ECN threshold, as DCTCP / DCQCN set it). Default: never.
    #[serde(default)]
    pub ecn_threshold: Option<u64>,
    /// Overrides for the a -> b direction.
    #[serde(default)]
    pub a_to_b: Option<Impairments>,
    /// Overrides for the b -> a direction.
    #[serde(default)]
    pub b_to_a: Option<Impairments>,
}

fn queue_limit() -> u64 {
    1024
}

/// Impairments of one direction, each overriding the link's value when given (also the
/// changes a `link` operation makes).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Impairments {
    /// See [`LinkSpec::loss`].
    #[serde(default)]
    pub loss: Option<f64>,
    /// See [`LinkSpec::duplicate`].
    #[serde(default)]
    pub duplicate: Option<f64>,
    /// See [`LinkSpec::reorder`].
    #[serde(default)]
    pub reorder: Option<f64>,
    /// See [`LinkSpec::reorder_delay`].
    #[serde(default)]
    pub reorder_delay: Option<SimTime>,
    /// See [`LinkSpec::delay`].
    #[serde(default)]
    pub delay: Option<SimTime>,
    /// See [`LinkSpec::jitter`].
    #[serde(default)]
    pub jitter: Option<SimTime>,
    /// See [`LinkSpec::rate_mbps`].
    #[serde(default)]
    pub rate_mbps: Option<u64>,
    /// See [`LinkSpec::queue_limit`].
    #[serde(default)]
    pub queue_limit: Option<u64>,
    /// See [`LinkSpec::ecn_threshold`].
    #[serde(default)]
    pub ecn_threshold: Option<u64>,
}

/// A traffic source: frames entering a port (a host's interface or any NIC / switch port
/// with no link on it). Exactly one of `pcap`, `generator` and `packets`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficSpec {
    /// Unique among traffic sources (default `traffic<i>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Where the frames enter: a host (`h0`, its interface) or a port (`NODE.PORT`).
    pub into: String,
    /// When the first frame enters. Default 0.
    #[serde(default)]
    pub start: SimTime,
    /// Frames of a capture file (pcap or pcapng, relative to the scenario file), spaced as
    /// their timestamps are.
    #[serde(default)]
    pub pcap: Option<String>,
    /// Frames from snic's seeded generator (the mix of `snic run`'s `gen:` port).
    #[serde(default)]
    pub generator: Option<GeneratorSpec>,
    /// Frames written out here, one after another.
    #[serde(default)]
    pub packets: Vec<PacketSpec>,
}

/// The seeded generator.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSpec {
    /// Frames.
    pub count: u64,
    /// Seed (default: the scenario's seed).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Time between frames. Default 1 us.
    #[serde(default = "one_us")]
    pub interval: SimTime,
}

fn one_us() -> SimTime {
    SimTime(1_000)
}

/// One scripted frame (repeated `count` times, `interval` apart), written as scapy-like
/// layers (`Ether(dst="02:00:00:00:00:02")/IP(src="10.0.0.1",dst="10.0.0.2")/UDP(dport=7)/Raw(len=64)`)
/// or as hex. Exactly one of `layers` and `hex`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PacketSpec {
    /// Layers, scapy-like (see `docs/scenarios.md` for every layer and field).
    #[serde(default)]
    pub layers: Option<String>,
    /// The whole frame in hex (spaces allowed).
    #[serde(default)]
    pub hex: Option<String>,
    /// Copies. Default 1.
    #[serde(default = "one_u32")]
    pub count: u32,
    /// Time between copies (and before the next spec's first frame). Default 1 us.
    #[serde(default = "one_us")]
    pub interval: SimTime,
    /// When the first copy enters, relative to the source's `start` (default: right after the
    /// previous spec's frames).
    #[serde(default)]
    pub at: Option<SimTime>,
}

fn one_u32() -> u32 {
    1
}

// ---------------------------------------------------------------------------------------------
// The timeline
// ---------------------------------------------------------------------------------------------

/// One operation of the timeline. It starts at `at`, or `delay` after the operation `after`
/// names has completed, or (neither given) `delay` after the previous operation in the list
/// completed. It completes as its kind says (`post_send`: every signaled WR has its CQE;
/// `dma`: every descriptor has completed, or on a channel the chain has run; `wait`: its condition held; others: at once).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OpSpec {
    /// Unique among operations (default `op<i>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Start at this simulated time.
    #[serde(default)]
    pub at: Option<SimTime>,
    /// Start after this operation completed.
    #[serde(default)]
    pub after: Option<String>,
    /// Extra time after `after` (or after the previous operation).
    #[serde(default)]
    pub delay: SimTime,
    /// What to do.
    #[serde(flatten)]
    pub action: Action,
}

/// What an operation does (`do = "..."` selects it).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// Post send WRs on a QP, in one batch (one doorbell).
    PostSend {
        /// `HOST.QP`.
        qp: String,
        /// The WRs.
        wrs: Vec<WrSpec>,
    },
    /// Post receive WRs on a QP.
    PostRecv {
        /// `HOST.QP`.
        qp: String,
        /// Buffers, one WR each (`HOST.MR[+OFF][:LEN]`).
        bufs: Vec<String>,
    },
    /// Post DMA descriptors on a host's queue, in one batch (one doorbell); or, when `queue`
    /// names a channel, write them as one chain and start the channel.
    Dma {
        /// `HOST.QUEUE` or `HOST.CHANNEL`.
        queue: String,
        /// H2C (host to card) or C2H.
        dir: DmaDir,
        /// The descriptors.
        descs: Vec<DescSpec>,
    },
    /// Run a lookaside kernel of a NIC over its memory (`snic kernel list` names them).
    Kernel {
        /// The NIC.
        nic: String,
        /// The kernel (`gemm`, `vadd`, `crc32c`, ...).
        kernel: String,
        /// Its arguments: buffers as `HOST.REGION[+OFF]`, numbers, data types.
        #[serde(default)]
        args: BTreeMap<String, serde_json::Value>,
    },
    /// Change a NIC's vSwitch policy: a whole new policy, or edits as `snic vswitch` takes them.
    Vswitch {
        /// The NIC (or switch).
        node: String,
        /// A whole new policy.
        #[serde(default)]
        policy: Option<PolicySource>,
        /// Edits (`snic vswitch` edit documents), applied in order.
        #[serde(default)]
        edits: Vec<serde_json::Value>,
    },
    /// Run `simple_switch_CLI` commands against a node's `p4` stage.
    P4 {
        /// The NIC (or switch).
        node: String,
        /// Commands (`table_add ...`, `table_delete ...`, `register_write ...`).
        commands: Vec<String>,
    },
    /// Update or delete an entry of a map of a node's `xdp:` program.
    EbpfMap {
        /// The NIC (or switch).
        node: String,
        /// The map's name.
        map: String,
        /// The key (as `snic ebpf map` takes it: hex, decimal, IPv4, prefix).
        key: String,
        /// The value; none deletes the entry.
        #[serde(default)]
        value: Option<String>,
    },
    /// Change a link: cut it (every frame lost), restore it, or change its impairments.
    Link {
        /// The link.
        link: String,
        /// `down` cuts the link, `up` restores it.
        #[serde(default)]
        state: Option<LinkState>,
        /// New impairments, both ways.
        #[serde(default)]
        set: Option<Impairments>,
    },
    /// Wait until a condition holds (the run fails at the time limit if it never does).
    Wait {
        /// A CQ (`HOST.CQ`) has delivered at least `count` CQEs in all.
        #[serde(default)]
        cq: Option<String>,
        /// A counter (as [`ExpectSpec::counter`] names them) reaches at least `count`.
        #[serde(default)]
        counter: Option<String>,
        /// The threshold.
        #[serde(default)]
        count: Option<u64>,
        /// Nothing pending anywhere (every device idle).
        #[serde(default)]
        idle: bool,
    },
}

/// A link's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// Frames pass.
    Up,
    /// Every frame is lost (counted as the link's loss).
    Down,
}

/// A send WR.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WrSpec {
    /// The operation.
    pub op: WrKind,
    /// Local buffers (`HOST.MR[+OFF][:LEN]`, or `MR[+OFF][:LEN]` within the QP's host).
    #[serde(default)]
    pub local: Vec<String>,
    /// Remote buffer (`HOST.MR[+OFF]`) of WRITE, READ and atomics.
    #[serde(default)]
    pub remote: Option<String>,
    /// Immediate data (`send_imm`, `write_imm`).
    #[serde(default)]
    pub imm: Option<u32>,
    /// The rkey to invalidate (`send_inv`): the MR named here (`HOST.MR`).
    #[serde(default)]
    pub invalidate: Option<String>,
    /// `cmp_swap`'s compare value.
    #[serde(default)]
    pub compare: Option<u64>,
    /// `cmp_swap`'s swap value.
    #[serde(default)]
    pub swap: Option<u64>,
    /// `fetch_add`'s addend.
    #[serde(default)]
    pub add: Option<u64>,
    /// Generate a CQE. Default true.
    #[serde(default = "true_")]
    pub signaled: bool,
    /// Wait for earlier READ / atomics first.
    #[serde(default)]
    pub fence: bool,
    /// Set the solicited-event bit.
    #[serde(default)]
    pub solicited: bool,
    /// Caller's id, echoed in the CQE. Default: the WR's index in the operation.
    #[serde(default)]
    pub wr_id: Option<u64>,
    /// Post this WR this many times, each one's buffers `len` further on. Default 1.
    #[serde(default = "one_u32")]
    pub repeat: u32,
}

/// The opcode of a send WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WrKind {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// SEND with invalidate.
    SendInv,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteImm,
    /// RDMA READ.
    Read,
    /// Compare and swap.
    CmpSwap,
    /// Fetch and add.
    FetchAdd,
}

/// A DMA direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DmaDir {
    /// Host to card.
    H2c,
    /// Card to host.
    C2h,
}

/// A DMA descriptor: `len` bytes from `src` to `dst` (buffers `HOST.REGION[+OFF]`, or
/// `addr:0x...` for a raw address: a bad descriptor).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DescSpec {
    /// Source buffer.
    pub src: String,
    /// Destination buffer.
    pub dst: String,
    /// Bytes.
    pub len: Size,
}

// ---------------------------------------------------------------------------------------------
// Expectations and golden data
// ---------------------------------------------------------------------------------------------

/// One expectation, checked at the end of the run. Exactly one of `counter`, `memory`,
/// `pcap`, `cqes`, `end_time`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ExpectSpec {
    /// A name for the report (default: what it checks).
    #[serde(default)]
    pub name: Option<String>,
    /// Check it only when running in this mode (`sim` or `real`): what only the simulation
    /// can promise (seeded loss counts, exact end times, ECN marks a real link cannot make
    /// without netem). Default: both.
    #[serde(default)]
    pub only: Option<Mode>,
    /// A counter: `NODE.pipeline.FIELD`, `NODE.drop.REASON`, `NODE.port.PORT.FIELD`,
    /// `NIC.rdma.FIELD`, `NIC.dma.FIELD`, `NIC.nic.FIELD`, `NODE.vswitch.FIELD`,
    /// `NODE.xdp.FIELD`, `link.LINK.a_to_b.FIELD`, `HOST.cq.CQ.cqes` (`snic scenario run
    /// --json` lists every one). Checked with `eq`, `min`, `max`.
    #[serde(default)]
    pub counter: Option<String>,
    /// Exactly this value.
    #[serde(default)]
    pub eq: Option<u64>,
    /// At least this value.
    #[serde(default)]
    pub min: Option<u64>,
    /// At most this value.
    #[serde(default)]
    pub max: Option<u64>,
    /// A buffer's contents (`HOST.REGION[+OFF][:LEN]`), compared with `content`,
    /// `same_as` or `sha256`.
    #[serde(default)]
    pub memory: Option<String>,
    /// What the buffer holds, described as initial contents are.
    #[serde(default)]
    pub content: Option<Content>,
    /// Another buffer (`HOST.REGION[+OFF]`) whose bytes (at the end of the run) it equals.
    #[serde(default)]
    pub same_as: Option<String>,
    /// SHA-256 of its bytes, hex.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The frames a port sent (`NODE.PORT`, or a host: what it received), compared with the
    /// frames of `file` (pcap) or the `packets` written out here.
    #[serde(default)]
    pub pcap: Option<String>,
    /// Golden capture, relative to the scenario file.
    #[serde(default)]
    pub file: Option<String>,
    /// Frames written out as traffic packets are.
    #[serde(default)]
    pub packets: Vec<PacketSpec>,
    /// Fields not compared (`ipv4.id`, `ipv4.checksum`, `udp.checksum`, `udp.sport`,
    /// `tcp.checksum`, `eth.src`, ... or byte ranges `14..16`).
    #[serde(default)]
    pub mask: Vec<String>,
    /// Compare frames in any order (default: in order).
    #[serde(default)]
    pub any_order: bool,
    /// A CQ's CQEs (`HOST.CQ`), in order.
    #[serde(default)]
    pub cqes: Option<String>,
    /// The CQEs wanted.
    #[serde(default)]
    pub list: Vec<CqeSpec>,
    /// The run's end (simulated) lies in `[min_time, max_time]`.
    #[serde(default)]
    pub end_time: bool,
    /// See `end_time`.
    #[serde(default)]
    pub min_time: Option<SimTime>,
    /// See `end_time`.
    #[serde(default)]
    pub max_time: Option<SimTime>,
}

/// How a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// On the testbed's simulated clock.
    Sim,
    /// On real interfaces (`snic scenario run --real`).
    Real,
}

impl Mode {
    /// `sim` or `real`, as the report's `mode` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Sim => "sim",
            Mode::Real => "real",
        }
    }
}

/// One CQE wanted; a field left out is not compared.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CqeSpec {
    /// `success`, `loc_prot_err`, `rem_access_err`, `retry_exc_err`, `rnr_retry_exc_err`,
    /// `wr_flush_err`, ... (snake case of the engine's `WcStatus`).
    #[serde(default)]
    pub status: Option<String>,
    /// `send`, `rdma_write`, `rdma_read`, `comp_swap`, `fetch_add`, `recv`,
    /// `recv_rdma_with_imm` (snake case of the engine's `WcOpcode`).
    #[serde(default)]
    pub opcode: Option<String>,
    /// Bytes.
    #[serde(default)]
    pub byte_len: Option<u32>,
    /// Immediate data.
    #[serde(default)]
    pub imm: Option<u32>,
    /// The WR's id.
    #[serde(default)]
    pub wr_id: Option<u64>,
}

/// Golden data: what `snic scenario record` writes and `run` compares, in `dir`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenSpec {
    /// Directory, relative to the scenario file. Default `STEM.golden`.
    #[serde(default)]
    pub dir: Option<String>,
    /// Compare the golden data only when running in this mode (as [`ExpectSpec::only`]).
    /// Default: both.
    #[serde(default)]
    pub only: Option<Mode>,
    /// Ports whose sent frames are recorded (`NODE.PORT` or hosts). Default: none.
    #[serde(default)]
    pub pcaps: Vec<String>,
    /// Fields masked when comparing those captures (as [`ExpectSpec::mask`]).
    #[serde(default)]
    pub mask: Vec<String>,
    /// Buffers whose SHA-256 is recorded (`HOST.REGION`). Default: none.
    #[serde(default)]
    pub memory: Vec<String>,
    /// CQs whose CQE lists are recorded (`HOST.CQ`). Default: none.
    #[serde(default)]
    pub cqes: Vec<String>,
    /// Counters recorded, by name or with `*` wildcards (`nic0.drop.*`). Default: none.
    #[serde(default)]
    pub counters: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Scalars
// ---------------------------------------------------------------------------------------------

/// A simulated duration in nanoseconds, written `"10us"` or as integer nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    /// As a `Duration`.
    pub fn duration(self) -> core::time::Duration {
        core::time::Duration::from_nanos(self.0)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, per) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
            if n != 0 && n.is_multiple_of(per) {
                return write!(f, "{}{unit}", n / per);
            }
        }
        write!(f, "{n}ns")
    }
}

impl core::str::FromStr for SimTime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let per: u128 = match unit.trim() {
            "" | "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            u => return Err(format!("unknown time unit {u:?} in {s:?} (ns, us, ms, s)")),
        };
        // Exact decimal arithmetic: "1.001us" is 1001 ns (in f64 it is 1000.9999...).
        let not_time = || format!("{s:?} is not a time (e.g. \"10us\")");
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
            return Err(not_time());
        }
        let digits = |d: &str| -> Result<u128, String> {
            if d.is_empty() {
                return Ok(0);
            }
            d.parse::<u128>().map_err(|_| format!("{s:?} is too large"))
        };
        let frac = frac.trim_end_matches('0');
        if frac.len() > 9 {
            return Err(format!("{s:?} is not a whole number of nanoseconds"));
        }
        let scale = 10u128.pow(frac.len() as u32);
        let whole = digits(int)?.checked_mul(per);
        let part = digits(frac)? * per;
        if !part.is_multiple_of(scale) {
            return Err(format!("{s:?} is not a whole number of nanoseconds"));
        }
        whole
            .and_then(|w| w.checked_add(part / scale))
            .and_then(|ns| u64::try_from(ns).ok())
            .map(SimTime)
            .ok_or_else(|| format!("{s:?} is too large"))
    }
}

impl Serialize for SimTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SimTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SimTime;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a time such as \"10us\" or integer nanoseconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SimTime, E> {
                Ok(SimTime(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SimTime, E> {
                u64::try_from(v).map(SimTime).map_err(|_| E::custom("a time cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SimTime, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A size in bytes, written as an integer or `"64KiB"`, `"16MiB"`, `"1GiB"` (also `K`, `M`,
/// `G`, `KB`..: binary units all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, per) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if n != 0 && n.is_multiple_of(per) {
                return write!(f, "{}{unit}", n / per);
            }
        }
        write!(f, "{n}")
    }
}

impl core::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let shift = match unit.trim() {
            "" | "B" => 0,
            "K" | "KB" | "KiB" | "k" => 10,
            "M" | "MB" | "MiB" => 20,
            "G" | "GB" | "GiB" => 30,
            u => return Err(format!("unknown size unit {u:?} in {s:?} (KiB, MiB, GiB)")),
        };
        let v: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (e.g. \"64KiB\")"))?;
        v.checked_mul(1 << shift).map(Size).ok_or_else(|| format!("{s:?} is too large"))
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"64KiB\" or integer bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v).map(Size).map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A MAC address, `02:00:00:00:00:01`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

impl core::str::FromStr for MacAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in &mut out {
            let p = parts.next().ok_or_else(|| format!("{s:?} is not a MAC address"))?;
            if p.len() != 2 {
                return Err(format!("{s:?} is not a MAC address"));
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?} is not a MAC address"))?;
        }
        if parts.next().is_some() {
            return Err(format!("{s:?} is not a MAC address"));
        }
        Ok(MacAddr(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_parse_and_print_back() {
        assert_eq!("10us".parse::<SimTime>(), Ok(SimTime(10_000)));
        assert_eq!("1.5ms".parse::<SimTime>(), Ok(SimTime(1_500_000)));
        assert_eq!(SimTime(2_000_000).to_string(), "2ms");
        assert!("3 parsecs".parse::<SimTime>().is_err());
        // Exact, not through f64 (where 1.001 x 1000 is 1000.9999...).
        assert_eq!("1.001us".parse::<SimTime>(), Ok(SimTime(1_001)));
        assert_eq!("1.013ms".parse::<SimTime>(), Ok(SimTime(1_013_000)));
        assert_eq!("0.000000001s".parse::<SimTime>(), Ok(SimTime(1)));
        assert_eq!("18446744073709551615".parse::<SimTime>(), Ok(SimTime(u64::MAX)));
        assert_eq!(".5us".parse::<SimTime>(), Ok(SimTime(500)));
        assert!("18446744073709551616".parse::<SimTime>().is_err());
        assert!("99999999999999999999999999999999999999999s".parse::<SimTime>().is_err());
        for bad in ["3.14159us", "1.5ns", "0.0000000001s", ".", "1..2us", "us", ""] {
            assert!(bad.parse::<SimTime>().is_err(), "{bad}");
        }
        assert_eq!("64KiB".parse::<Size>(), Ok(Size(65536)));
        assert_eq!(Size(16 << 20).to_string(), "16MiB");
        assert!("1ZiB".parse::<Size>().is_err());
        assert!("99999999999999GiB".parse::<Size>().is_err());
        assert_eq!("02:00:00:00:0a:01".parse::<MacAddr>(), Ok(MacAddr([2, 0, 0, 0, 10, 1])));
        assert!("02:00:00:00:0a".parse::<MacAddr>().is_err());
    }

    #[test]
    fn a_small_toml_scenario_reads() {
        let s: Scenario = toml::from_str(
            r#"
            name = "t"
            [[nic]]
            name = "nic0"
            [[host]]
            name = "h0"
            nic = "nic0"
            [[host.region]]
            name = "src"
            size = "64KiB"
            init = { seed = 7 }
            [[link]]
            name = "wire"
            a = "nic0.wire"
            b = "nic1.wire"
            loss = 0.05
            [[op]]
            do = "wait"
            idle = true
            [[expect]]
            counter = "nic0.drop.policy_deny"
            eq = 0
            "#,
        )
        .expect("reads");
        assert_eq!(s.nics[0].ports, ["wire", "host"]);
        assert_eq!(s.hosts[0].regions[0].init, Content::Seed(7));
        assert_eq!(
            s.timeline[0].action,
            Action::Wait { cq: None, counter: None, count: None, idle: true }
        );
        let bad = toml::from_str::<Scenario>("[[nic]]\nname = \"x\"\nprots = []\n");
        assert!(bad.unwrap_err().to_string().contains("prots"));
    }
}

#[cfg(test)]
mod op_tests {
    use super::*;

    #[test]
    fn operations_refuse_unknown_fields_and_kinds() {
        let ok: Scenario = toml::from_str(
            "[[op]]\nname = \"w\"\nat = \"5us\"\ndo = \"post_recv\"\nqp = \"h1.qp\"\nbufs = [\"h1.dst\"]\n",
        )
        .expect("reads");
        assert_eq!(ok.timeline[0].at, Some(SimTime(5_000)));
        for bad in [
            "[[op]]\ndo = \"post_recv\"\nqp = \"h1.qp\"\nbufs = []\nbfus = 1\n",
            "[[op]]\ndo = \"teleport\"\n",
        ] {
            assert!(toml::from_str::<Scenario>(bad).is_err(), "{bad}");
        }
    }
}
