//! `snic serve`: run the host-interface server (setup socket, shared-memory DMA queues and
//! channels, lookaside kernels) until SIGINT/SIGTERM, then print the counters as one JSON line.
//!
//! With `--port` it is a whole NIC (one process, one device): the wire port, the pipeline
//! (parse, classify, `local`, then the stages given), the RDMA engine terminating RoCEv2 for
//! the `--rdma-ip` addresses from the wire and answering ARP / ND for them, the host netdev
//! (`--host-netdev`, a TAP device the host's kernel sees as an ordinary interface: non-RDMA
//! traffic goes there through the pipeline, and what the host sends goes through it to the
//! wire), and the host interface (memory, DMA, kernels, RDMA verbs for host programs, whose QPs
//! then run over the wire port).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use snic_device::{Server, ServerConfig, Wire, default_socket_path};
use snic_io::PortSpec;
use snic_io::nic::{NicNode, build_nic_pipeline};
use snic_io::runtime::VSwitchSettings;
use snic_io::signal::Signals;
use snic_nic::neigh::NeighConfig;
use snic_nic::{Nic, NicConfig};
use snic_pipeline::PortId;
use snic_pipeline::pipeline::{PipelineConfig, StageSpec};
use snic_vswitch::engine::VSwitch;
use snic_wire::ethernet::EthernetAddress;

use crate::control::ControlServer;

use crate::dma::size_label;

/// Arguments of `snic serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Setup socket path [default: $XDG_RUNTIME_DIR/snic.sock, else /tmp/snic-$UID.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// On-chip device memory (bytes; K/M/G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size)]
    pub on_chip: u64,
    /// On-board device memory (bytes; K/M/G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub on_board: u64,
    /// Worker threads (each serves its share of queues and channels).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Compute worker threads (lookaside kernels: kernel id k runs on compute worker
    /// k % N, apart from the DMA workers).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=63))]
    pub compute_workers: u32,
    /// Do not try huge pages for device memory.
    #[arg(long)]
    pub no_huge: bool,
    /// Microseconds a worker busy-polls without work before it sleeps.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub spin_us: u64,
    /// Serve RDMA to clients (QPs and MRs, RoCEv2 over UDP) on this address, e.g.
    /// 127.0.0.1:4791 (the port is the RoCE port every peer uses).
    #[arg(long, value_name = "ADDR", conflicts_with = "port")]
    pub rdma: Option<std::net::SocketAddr>,
    /// Run a whole NIC on this wire port (any port kind: afpacket:eth0, tap:NAME, udp:A,B, ...).
    #[arg(long, value_name = "SPEC", requires = "rdma_ip")]
    pub port: Option<PortSpec>,
    /// A RoCE address of the NIC (IPv4 or IPv6; repeat for several). RoCEv2 packets to it are
    /// the RDMA engine's; the NIC answers ARP and neighbour solicitations for it.
    #[arg(long = "rdma-ip", value_name = "IP", requires = "port")]
    pub rdma_ip: Vec<IpAddr>,
    /// Create the host netdev, a TAP device with this name, as the NIC's port 1: non-RDMA
    /// traffic for the host goes there, and what the host sends on it goes to the wire.
    #[arg(long, value_name = "NAME", requires = "port")]
    pub host_netdev: Option<String>,
    /// A pipeline stage of the NIC, in order (default: parse, classify, l2fwd; `local` is put
    /// right after classify).
    #[arg(long = "stage", value_name = "NAME", requires = "port")]
    pub stages: Vec<String>,
    /// The NIC's MAC [default: for afpacket ports, a locally administered MAC derived from the
    /// interface's (stable across starts), else a random locally administered one].
    #[arg(long, value_name = "MAC", requires = "port")]
    pub mac: Option<String>,
    /// vSwitch policy file (TOML), for a `vswitch` stage (default: the embedded policy).
    #[arg(long, value_name = "PATH", requires = "port")]
    pub policy: Option<String>,
    /// Answer `snic stats --control PATH` (the counters document, refreshed every 100 ms) and,
    /// with a `vswitch` stage, `snic vswitch ... --control PATH` on this Unix socket.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0 picks a
    /// free one, printed on stdout).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// A NIC-core eBPF program (`SEC("snic/core")` object, `FILE[,SECTION]`) to load at
    /// start; repeat for several, in slots 0, 1, ... Host programs run slot `s` as kernel
    /// `ebpf` (id 9) with scalar 0 = `s`; `snic ebpf load --core SLOT` replaces one later.
    #[arg(long = "core-prog", value_name = "FILE")]
    pub core_progs: Vec<String>,
    /// Take over from the `snic serve` answering on this control socket (a hitless upgrade:
    /// its clients keep their sessions, see `src/serve_upgrade.rs`). Start with the same
    /// arguments; give `--control` the same path to be taken over in turn.
    #[arg(long, value_name = "SOCK")]
    pub takeover: Option<PathBuf>,
    #[command(flatten)]
    pub p4rt: crate::p4::P4RuntimeArgs,
}

/// Parse a memory size as [`crate::dma::parse_size`] does (e.g. `4M`: K, M and G are powers
/// of 1024); zero is refused.
pub fn parse_size(s: &str) -> Result<u64, String> {
    match crate::dma::parse_size(s)? {
        0 => Err("size must be non-zero".into()),
        v => Ok(v),
    }
}

/// Run the server until a signal.
pub fn run(args: ServeArgs) -> Result<()> {
    let cfg = ServerConfig {
        socket: args.socket.clone().unwrap_or_else(default_socket_path),
        on_chip: args.on_chip,
        on_board: args.on_board,
        workers: args.workers,
        compute_workers: args.compute_workers,
        huge: !args.no_huge,
        spin_us: args.spin_us,
        rdma: args.rdma,
        core: Some(snic_device::ebpf::CorePrograms::new()),
        ..ServerConfig::default()
    };
    if args.takeover.is_some() {
        // What cannot be taken over is refused before anything is opened.
        crate::serve_upgrade::check_takeover(&args)?;
    }
    let core = cfg.core.clone().unwrap_or_default();
    let mut core_lines = Vec::new();
    for (slot, spec) in args.core_progs.iter().enumerate() {
        let (file, section) = match spec.split_once(',') {
            Some((f, s)) => (f, Some(s)),
            None => (spec.as_str(), None),
        };
        let e = core
            .load_file(slot, std::path::Path::new(file), section, args.compute_workers as usize)
            .map_err(|e| anyhow::anyhow!("--core-prog {spec}: {e}"))?;
        core_lines.push(format!("snic serve: core slot {slot}: {} ({} insns)", e.name, e.insns));
    }
    raise_fd_limit();
    let signals = Signals::install().context("installing signal handlers")?;
    let (on_chip, on_board, workers) = (cfg.on_chip, cfg.on_board, cfg.workers);
    // With a control socket, the NIC's ports and stages can be captured (`snic capture`) and
    // packets traced through a dry run of its pipeline (`snic trace`).
    // A takeover adopts the old process's server (and ports) instead of starting one
    // (src/serve_upgrade.rs).
    let mut handed = match &args.takeover {
        Some(sock) => Some(crate::serve_upgrade::ServeTakeover::begin(sock, &args)?),
        None => None,
    };
    let opened = match (&args.port, handed.as_mut()) {
        (Some(spec), None) => Some(open_nic(spec, &args, args.control.is_some(), None)?),
        (Some(spec), Some(t)) => {
            let n = t
                .wire_ports(spec, &args)
                .and_then(|p| open_nic(spec, &args, args.control.is_some(), p));
            match n {
                Ok(n) => Some(n),
                Err(e) => {
                    t.abort(&e);
                    return Err(e.context("taking over"));
                }
            }
        }
        (None, _) => None,
    };
    let (wire, nic_desc, vswitch, p4, kernels, xdp, ops) = match opened {
        Some(n) => (Some(n.wire), Some(n.desc), n.vswitch, n.p4, n.kernels, n.xdp, n.ops),
        None => (None, None, None, None, Vec::new(), Vec::new(), None),
    };
    let (server, takeover) = match handed {
        Some(mut t) => {
            let adopted = match t.adopt(cfg.clone(), wire, &args) {
                Ok(a) => a,
                Err(e) => {
                    t.abort(&e);
                    return Err(e.context("taking over"));
                }
            };
            // The threads are started (held) before `ready`, so that nothing can fail
            // after the commit: a failure here is an abort, and the old process resumes.
            let prepared = match adopted.prepare().context("starting the adopted server") {
                Ok(p) => p,
                Err(e) => {
                    t.abort(&e);
                    return Err(e.context("taking over"));
                }
            };
            t.confirm()?;
            // Committed: the old process no longer serves; from here on nothing is fatal.
            let server = prepared.go();
            let gap = t.gap();
            if let Err(e) = t.wait_old_gone() {
                eprintln!("snic serve: warning: {e:#}; serving on");
            }
            let report = t.report(gap);
            eprintln!("snic serve: took over from pid {}: {report}", report["old_pid"]);
            (server, Some(report))
        }
        None => {
            let server = Server::start_with(cfg.clone(), wire)
                .with_context(|| format!("starting the server on {}", cfg.socket.display()))?;
            (server, None)
        }
    };
    let huge = server.stats().get("huge_pages").and_then(|v| v.as_bool()).unwrap_or(false);
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "snic serve: listening on {} (workers {workers}, compute workers {}, on-chip {}, on-board {}, huge pages {})",
            server.socket_path().display(),
            cfg.compute_workers,
            size_label(on_chip),
            size_label(on_board),
            if huge { "yes" } else { "no" },
        )?;
        if let Some(a) = cfg.rdma {
            writeln!(out, "snic serve: RDMA (RoCEv2 over UDP) on {a}")?;
        }
        if let Some(d) = &nic_desc {
            writeln!(out, "snic serve: NIC {d}")?;
        }
        for l in &core_lines {
            writeln!(out, "{l}")?;
        }
        // Streaming kernels' results go to device memory, where host programs read them.
        for k in kernels.iter().filter(|k| k.results_len() > 0) {
            let len = k.results_len() as u64;
            let block = server.alloc_device(results_kind(), len).with_context(|| {
                format!("device memory for the results of kernel {}", k.instance())
            })?;
            let addr = block.addr;
            k.attach_region(0, Arc::new(crate::stream::DeviceResults(block)), Some(addr))
                .map_err(|e| anyhow::anyhow!("kernel {}: {e}", k.instance()))?;
            writeln!(
                out,
                "snic serve: kernel {} results at device address {addr:#x} ({len} bytes)",
                k.instance()
            )?;
        }
        out.flush()?;
    }
    let stages: Vec<StageSpec> = args.stages.iter().filter_map(|s| s.parse().ok()).collect();
    let p4_stage = crate::p4::p4_stage(&stages);
    let _p4runtime = args.p4rt.start(
        p4.as_ref().map(|p| p.control()),
        p4_stage.as_ref().map(|(p, i)| (p.as_str(), i.as_slice())),
    )?;
    // The control socket answers from a snapshot the loop below refreshes.
    // The counters document, with where each streaming kernel's results are in device memory.
    // The counters document says when it was taken (as a run's does), so that rates between
    // two snapshots (`snic top`) use the time between them, not between their fetches.
    let started = std::time::Instant::now();
    let stats = || {
        let mut v = server.stats();
        v["elapsed_secs"] = started.elapsed().as_secs_f64().into();
        if let Some(t) = &takeover {
            v["takeover"] = t.clone();
        }
        if !kernels.is_empty() {
            v["stream_kernels"] = crate::stream::results_json(&kernels);
        }
        if !xdp.is_empty() {
            v["xdp"] = crate::ebpf::actions_json(&xdp);
        }
        v
    };
    let latest = Arc::new(Mutex::new(stats().to_string()));
    // With a control socket, a newer process can take this one over (src/serve_upgrade.rs).
    let (handoff, handoff_wake) = crate::serve_upgrade::ServeHandoff::new();
    let mut capture = None;
    let _control = match &args.control {
        Some(path) => {
            let ops = ops.map(|o| {
                let target = crate::trace::TraceTarget::new(
                    o.trace_cfg,
                    o.hub.port_names(),
                    vswitch.clone(),
                    p4.as_ref().map(|p| p.control()),
                    snic_time::MonotonicClock::new(),
                )
                .with_local(o.local);
                (Arc::clone(&o.hub), crate::capture::ops_handler(o.hub, target))
            });
            let (hub, ops) = match ops {
                Some((h, o)) => (Some(h), Some(o)),
                None => (None, None),
            };
            capture = hub;
            let handler = crate::vswitch::control_handler(
                Arc::clone(&latest),
                vswitch,
                p4.map(|p| p.control()),
                kernels.clone(),
                crate::ebpf::Targets {
                    xdp: xdp.clone(),
                    core: Some((core.clone(), args.compute_workers as usize)),
                },
                snic_time::MonotonicClock::new(),
            );
            let h = handoff.clone();
            let mut handler = handler;
            let handler = move |incoming| match incoming {
                crate::control::Incoming::Request(crate::control::Request::Upgrade { channel }) => {
                    h.request(&channel).to_string()
                }
                other => handler(other),
            };
            // Without a NIC there is nothing to capture or trace: those requests are refused.
            Some(match ops {
                Some(ops) => ControlServer::spawn_with_ops(path, handler, Some(ops))?,
                None => ControlServer::spawn(path, handler)?,
            })
        }
        None => None,
    };
    let _metrics = match &args.metrics {
        Some(addr) => {
            let latest = Arc::clone(&latest);
            let server = crate::metrics::MetricsServer::spawn(addr, move || {
                crate::metrics::from_serve(&crate::metrics::parse_latest(&latest)).encode()
            })?;
            println!("snic serve: metrics on http://{}/metrics", server.local_addr());
            std::io::stdout().flush()?;
            Some(server)
        }
        None => None,
    };
    let snapshots = args.control.is_some() || args.metrics.is_some();
    let mut refreshed = std::time::Instant::now();
    while !signals.stop_requested() {
        if signals.take_stats_request() {
            println!("{}", stats());
        }
        if snapshots && refreshed.elapsed() >= Duration::from_millis(100) {
            if let Ok(mut l) = latest.lock() {
                *l = stats().to_string();
            }
            refreshed = std::time::Instant::now();
        }
        if handoff.serve_turn(&server, &args) {
            break;
        }
        let _ = handoff_wake.recv_timeout(Duration::from_millis(50));
    }
    if handoff.handed_over() {
        // The server is the new process's: its last counters here are the snapshot before.
        let last = latest.lock().map(|l| l.clone()).unwrap_or_default();
        server.shutdown().context("leaving the server to the new process")?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{last}")?;
        out.flush()?;
        return Ok(());
    }
    // A running capture ends (`run ended`) and sends its end record before the ports go.
    if let Some(hub) = &capture {
        hub.close(Duration::from_secs(2));
    }
    let stats = stats();
    server.shutdown().context("shutting down")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{stats}")?;
    out.flush()?;
    Ok(())
}

/// The server keeps a descriptor per client, per registered region (its memfd) and per
/// eventfd, and a takeover hands them all over: raise the soft descriptor limit to the hard
/// one (often 1024 against 524288), as servers do. Failing that, it runs with the limit it has.
fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    // `None` is "unlimited".
    let raise = match (l.current, l.maximum) {
        (Some(cur), Some(max)) => cur < max,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if raise {
        let to = Rlimit { current: l.maximum, maximum: l.maximum };
        if let Err(e) = setrlimit(Resource::Nofile, to) {
            tracing::warn!("raising the descriptor limit from {:?}: {e}", l.current);
        }
    }
}

/// The NIC's MAC: `--mac`; else, on an AF_PACKET port, a locally administered MAC derived
/// from the interface's (the same on every start, and not the interface's own: frames for the
/// NIC are then "other host" to the kernel owning the interface, which drops them at once
/// instead of running them through its IP stack, and it never answers for the NIC); else a
/// random locally administered one.
fn nic_mac(spec: &PortSpec, given: Option<&str>) -> Result<EthernetAddress> {
    use std::hash::BuildHasher;
    if let Some(m) = given {
        return parse_mac(m).with_context(|| format!("--mac {m:?}"));
    }
    let seed = if let PortSpec::AfPacket { ifname } = spec {
        let path = format!("/sys/class/net/{ifname}/address");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let own = parse_mac(text.trim()).with_context(|| format!("{path}: {text:?}"))?;
        // FNV-1a (ours, so no toolchain upgrade changes it): the same interface gives the same
        // MAC every time.
        b"snic-nic-mac".iter().chain(&own.0).fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    } else {
        // RandomState is seeded randomly per process: enough entropy for a local MAC.
        std::collections::hash_map::RandomState::new().hash_one(std::process::id())
    };
    let mut b = [0u8; 6];
    b.copy_from_slice(&seed.to_le_bytes()[..6]);
    b[0] = (b[0] & 0xfe) | 0x02;
    Ok(EthernetAddress(b))
}

/// `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Result<EthernetAddress> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        bail!("a MAC is six hex bytes, e.g. 02:00:00:00:00:01");
    }
    let mut b = [0u8; 6];
    for (o, p) in b.iter_mut().zip(parts) {
        *o = u8::from_str_radix(p, 16).with_context(|| format!("{p:?} is not a hex byte"))?;
    }
    if b[0] & 1 == 1 {
        bail!("{s} is a multicast address");
    }
    Ok(EthernetAddress(b))
}

/// An opened NIC: its wire (for the server), a one-line description, the control handles of
/// its stages, and what capture and trace need.
struct OpenedNic {
    wire: Wire,
    desc: String,
    vswitch: Option<VSwitch>,
    p4: Option<snic_io::p4::P4Program>,
    kernels: Vec<snic_stream::KernelControl>,
    xdp: Vec<snic_io::ebpf::XdpControl>,
    /// With a control socket: capture and trace.
    ops: Option<NicOps>,
}

/// What `snic capture` and `snic trace` need of a NIC: the capture hub its ports are wrapped
/// in and its pipeline's stage taps feed, the configuration its pipeline was built from (the
/// `local` stage in place) and that stage, which a dry run runs as it is (it keeps no state).
struct NicOps {
    hub: Arc<crate::capture::CaptureHub>,
    trace_cfg: PipelineConfig,
    local: snic_nic::local::Local,
}

/// Where kernels' results tables are allocated: on-board device memory (the larger kind).
fn results_kind() -> snic_device::DevKind {
    snic_device::DevKind::OnBoard
}

/// Open the NIC's ports and build its data path; also a one-line description, and the vSwitch
/// and the P4 program (their control handles) when stages are ones. With `ops`, the ports are
/// wrapped for capture and the pipeline gets stage taps (both idle until a capture runs).
/// With `handed` (a takeover), the ports are the old NIC's, adopted, and so is its MAC.
fn open_nic(
    spec: &PortSpec,
    args: &ServeArgs,
    ops: bool,
    handed: Option<crate::serve_upgrade::HandedNic>,
) -> Result<OpenedNic> {
    if args.rdma_ip.is_empty() {
        bail!("a NIC needs --rdma-ip (its RoCE address)");
    }
    let mut ips: Vec<IpAddr> = Vec::new();
    for &ip in &args.rdma_ip {
        if !snic_nic::is_unicast(ip) || ip.is_loopback() {
            bail!("--rdma-ip {ip}: a NIC's RoCE address must be a unicast, non-loopback address");
        }
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    let (mac, ports) = match handed {
        Some((ports, mac)) => {
            let mac = EthernetAddress(mac);
            if let Some(m) = &args.mac
                && parse_mac(m)? != mac
            {
                bail!("--mac {m}: the NIC taken over has MAC {mac}");
            }
            (mac, ports)
        }
        None => {
            let mac = nic_mac(spec, args.mac.as_deref())?;
            let wire = spec.open().with_context(|| format!("opening the wire port {spec}"))?;
            let mut ports = vec![wire];
            if let Some(name) = &args.host_netdev {
                let tap = PortSpec::Tap { name: name.clone() };
                ports.push(tap.open().with_context(|| format!("creating the host netdev {name}"))?);
            }
            (mac, ports)
        }
    };
    // The port's largest frame less the L2 room its kind adds (Ethernet header and one VLAN
    // tag, 18 bytes: AF_PACKET and TAP ports report their interface MTU plus 18) is the link
    // MTU the QPs fit.
    let link_mtu = ports[0].caps().max_frame.saturating_sub(18);
    let stages = args
        .stages
        .iter()
        .map(|s| s.parse::<StageSpec>().map_err(|e| anyhow::anyhow!("bad --stage {s:?}: {}", e.0)))
        .collect::<Result<Vec<_>>>()?;
    let mut pcfg = PipelineConfig::new(stages);
    pcfg.ports = ports.len() as u16;
    let vswitch = if pcfg.stages.contains(&StageSpec::VSwitch) {
        let settings = VSwitchSettings { policy: args.policy.clone(), ..Default::default() };
        let vs = settings.build()?;
        // The NIC's ports: 0 is the wire, 1 the host netdev.
        let uplink = vs.policy().underlay.port;
        if uplink != 0 {
            bail!(
                "the vSwitch policy's uplink is port {uplink}; on a NIC the wire is port 0 (and \
                 the host netdev port 1): set [underlay] port = 0"
            );
        }
        Some(vs)
    } else {
        None
    };
    let nic = Nic::new(NicConfig {
        mac,
        ips: ips.clone(),
        wire: PortId(0),
        neigh: NeighConfig::default(),
    });
    let p4 = snic_io::p4::P4Program::from_stages(&pcfg.stages, 1)
        .map_err(|e| anyhow::anyhow!("p4 stage: {e}"))?;
    if let Some(p) = &p4 {
        for w in p.warnings() {
            eprintln!("{w}");
        }
    }
    let mut kernels = snic_io::stream::StreamKernels::from_stages(&pcfg.stages, 1)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut xdp = snic_io::ebpf::XdpPrograms::from_stages(&pcfg.stages, 1)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // The stages as the NIC runs them (`local` in place): what a capture names and a dry run
    // builds.
    pcfg.stages = snic_io::nic::nic_stages(&pcfg.stages)?;
    let hub = ops.then(|| {
        crate::capture::CaptureHub::new(pcfg.stages.iter().map(|s| s.to_string()).collect())
    });
    if let Some(hub) = &hub {
        pcfg.stage_taps = hub.stage_taps();
    }
    let pipeline = build_nic_pipeline(
        &pcfg,
        &nic,
        vswitch.as_ref(),
        p4.as_ref(),
        Some(&mut kernels),
        Some(&mut xdp),
    )?;
    let names: Vec<&str> = pipeline.stage_names().collect();
    let ports_desc: Vec<String> = ports.iter().map(|p| p.name().to_string()).collect();
    let (ports, ops) = match hub {
        Some(hub) => {
            let ports = hub.wrap_ports(ports);
            (ports, Some(NicOps { hub, trace_cfg: pcfg, local: nic.local_stage() }))
        }
        None => (ports, None),
    };
    let desc = format!(
        "ports [{}], stages [{}], RoCE {}, MAC {mac}, link MTU {link_mtu}",
        ports_desc.join(", "),
        names.join(", "),
        ips.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "),
    );
    let node = NicNode::new("nic", pipeline, ports, nic, snic_pipeline::MAX_BATCH);
    Ok(OpenedNic {
        wire: Wire { node, ips, link_mtu },
        desc,
        vswitch,
        p4,
        kernels: kernels.controls().to_vec(),
        xdp: xdp.controls().to_vec(),
        ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999G").is_err());
        assert_eq!(size_label(256 << 20), "256M");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1000), "1000");
    }

    #[test]
    fn macs_parse_and_multicast_is_refused() {
        assert_eq!(parse_mac("02:00:0a:0b:0c:0d").unwrap().0, [2, 0, 0xa, 0xb, 0xc, 0xd]);
        assert_eq!(parse_mac("02-00-00-00-00-01").unwrap().0, [2, 0, 0, 0, 0, 1]);
        assert!(parse_mac("01:00:5e:00:00:01").is_err());
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("02:00:00:00:00:zz").is_err());
    }
}
