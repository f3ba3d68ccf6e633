//! End-to-end runs of the runtime over real files and sockets: pcap in → default chain → pcap
//! out, and a UDP tunnel between two runtimes on 127.0.0.1.

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use snic_io::generator::{FrameKind, frames};
use snic_io::runtime::{RunConfig, RunReport, Runtime};
use snic_io::udp::UdpPort;
use snic_io::{Port, PortSpec};
use snic_pipeline::PortId;
use std::fs::File;
use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

fn write_pcap(path: &Path, frames: &[(FrameKind, Vec<u8>)]) {
    let mut w = PcapWriter::new(File::create(path).unwrap()).unwrap();
    for (i, (_, f)) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f))
            .unwrap();
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.to_vec());
    }
    out
}

fn run(rt: Runtime) -> RunReport {
    let (stop, stats) = (AtomicBool::new(false), AtomicBool::new(false));
    rt.run(&stop, &stats, |_| {}).unwrap()
}

/// The generated frames the default chain forwards: all but the malformed ones.
fn valid(all: &[(FrameKind, Vec<u8>)]) -> Vec<Vec<u8>> {
    all.iter().filter(|(k, _)| !k.is_malformed()).map(|(_, f)| f.clone()).collect()
}

fn pcap_chain(workers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let output = dir.path().join("out.pcap");
    let all = frames(3_000, 21);
    write_pcap(&input, &all);
    let mut cfg = RunConfig::new(vec![
        PortSpec::Pcap { input: Some(input.clone()), output: None },
        PortSpec::Pcap { input: None, output: Some(output.clone()) },
    ]);
    cfg.workers = workers;
    let report = run(Runtime::new(cfg).unwrap());
    let c = &report.counters;

    let rx = c.port(PortId(0)).unwrap().rx_packets;
    let fwd = c.port(PortId(1)).unwrap().tx_packets;
    assert_eq!(rx, 3_000);
    assert_eq!(report.ports[0].counters.rx_packets, 3_000);
    // Every packet is accounted for: forwarded or exactly one counted drop.
    assert_eq!(fwd + c.total_drops(), 3_000, "{report}");
    let malformed = all.iter().filter(|(k, _)| k.is_malformed()).count() as u64;
    assert_eq!(c.total_drops(), malformed, "{report}");

    // The output holds exactly the valid input frames, byte for byte.
    let mut got = read_pcap(&output);
    let mut want = valid(&all);
    assert_eq!(got.len() as u64, fwd);
    if workers > 1 {
        // Flows are spread over workers: order holds within a flow, not across flows.
        got.sort();
        want.sort();
    }
    assert_eq!(got, want);
    let in_bytes: u64 = want.iter().map(|f| f.len() as u64).sum();
    assert_eq!(report.ports[1].counters.tx_bytes, in_bytes);
}

#[test]
fn pcap_in_default_chain_pcap_out_one_worker() {
    pcap_chain(1);
}

#[test]
fn pcap_in_default_chain_pcap_out_two_workers() {
    pcap_chain(2);
}

#[test]
fn udp_tunnel_between_two_runtimes_carries_frames_intact() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("tunnel.pcap");
    let sa = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sb = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (aa, ba) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
    let tunnel_a = UdpPort::from_socket(sa, ba).unwrap();
    let tunnel_b = UdpPort::from_socket(sb, aa).unwrap();

    // B: tunnel → default chain → pcap; stops after 1 s without traffic.
    let mut cfg_b = RunConfig::new(vec![PortSpec::Null, PortSpec::Null]);
    cfg_b.idle_exit_ms = Some(1_000);
    let sink = snic_io::pcap::PcapPort::open(None, Some(&output)).unwrap();
    let ports_b: Vec<Box<dyn Port>> = vec![Box::new(tunnel_b), Box::new(sink)];
    let rt_b = Runtime::with_ports(cfg_b, ports_b, vec![false, false]).unwrap();

    // A: generator → default chain → tunnel; ends when the generator is exhausted.
    let mut cfg_a = RunConfig::new(vec![PortSpec::Null, PortSpec::Null]);
    cfg_a.batch_size = 64;
    let ports_a: Vec<Box<dyn Port>> =
        vec![Box::new(snic_io::generator::GenPort::new(500, 4)), Box::new(tunnel_a)];
    let rt_a = Runtime::with_ports(cfg_a, ports_a, vec![true, false]).unwrap();

    // A starts only once B's loop runs and drains the tunnel: B answers a stats request from
    // inside its loop. (Until then A's datagrams would pile up in B's socket buffer, which
    // without root is capped by net.core.rmem_max and may not hold them all.)
    let (stop_b, stats_b) = (AtomicBool::new(false), AtomicBool::new(true));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (ra, rb) = std::thread::scope(|s| {
        let b = s.spawn(|| {
            rt_b.run(&stop_b, &stats_b, move |_| {
                let _ = ready_tx.send(());
            })
        });
        let ready = ready_rx.recv_timeout(Duration::from_secs(10));
        if ready.is_err() {
            // Let B end (it may be stuck) so the scope can join it, then fail.
            stop_b.store(true, Ordering::Relaxed);
            panic!("runtime B did not start within 10 s: {:?}", b.join());
        }
        let a = run(rt_a);
        (a, b.join().unwrap().unwrap())
    });
    let want = valid(&frames(500, 4));
    let sent = ra.counters.port(PortId(1)).unwrap().tx_packets;
    assert_eq!(sent, want.len() as u64, "{ra}");
    assert_eq!(rb.ports[0].counters.rx_packets, sent, "{rb}");
    assert_eq!(rb.ports[0].counters.rx_errors, 0);
    assert_eq!(read_pcap(&output), want);
}

/// A pause of a running runtime (what a takeover does, see `snic_io::handover`): the first
/// pause is resumed (a rolled-back takeover) and the run goes on receiving; the second hands
/// the UDP port's socket over and stops. The frames sent after that wait in the socket and
/// the port adopted from the handover receives them.
#[test]
fn a_paused_run_hands_its_ports_over_or_resumes() {
    use snic_io::runtime::AfterPause;
    let rx_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (local, remote) = (rx_sock.local_addr().unwrap(), peer.local_addr().unwrap());
    peer.connect(local).unwrap();
    let frames: Vec<Vec<u8>> = valid(&frames(60, 9)).into_iter().take(40).collect();
    assert_eq!(frames.len(), 40);
    let send = |range: std::ops::Range<usize>| {
        for f in &frames[range] {
            peer.send(f).unwrap();
        }
    };
    let tunnel = UdpPort::from_socket(rx_sock, remote).unwrap();
    let cfg = RunConfig::new(vec![PortSpec::Null, PortSpec::Null]);
    let ports: Vec<Box<dyn Port>> =
        vec![Box::new(tunnel), Box::new(snic_io::null::NullPort::new())];
    let rt = Runtime::with_ports(cfg, ports, vec![false, false]).unwrap();
    let (stop, stats, pause) =
        (AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(false));
    let mut pauses = Vec::new();
    let mut handed = None;
    let report = std::thread::scope(|s| {
        let run = s.spawn(|| {
            rt.run_pausable(
                &stop,
                &stats,
                |_| {},
                &pause,
                |ports| {
                    let seen: Vec<(usize, usize, String)> = ports
                        .iter()
                        .map(|p| (p.port, p.queue, p.inner.name().to_string()))
                        .collect();
                    pauses.push(seen);
                    if pauses.len() == 1 {
                        // Lent and given back unused: the run carries on.
                        assert!(ports[0].inner.handover().expect("UDP hands over").is_ok());
                        return AfterPause::Resume;
                    }
                    assert!(ports[1].inner.handover().is_none(), "a null port is opened again");
                    handed = Some(ports[0].inner.handover().expect("UDP hands over").unwrap());
                    AfterPause::Stop
                },
            )
        });
        send(0..10);
        std::thread::sleep(Duration::from_millis(200));
        pause.store(true, Ordering::Relaxed);
        while pause.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        send(10..20);
        std::thread::sleep(Duration::from_millis(200));
        pause.store(true, Ordering::Relaxed);
        let report = run.join().unwrap().unwrap();
        send(20..40);
        report
    });
    assert_eq!(pauses.len(), 2, "{pauses:?}");
    assert_eq!(pauses[0].iter().map(|(p, q, _)| (*p, *q)).collect::<Vec<_>>(), [(0, 0), (1, 0)]);
    let rx = report.ports[0].counters.rx_packets;
    assert_eq!(rx, 20, "the run received before and after the resumed pause: {report}");
    let h = handed.expect("handed over");
    let spec = PortSpec::Udp { local, remote };
    let mut adopted = spec.adopt(&h.state, h.fds).expect("adopt the socket");
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < 20 && t0.elapsed() < Duration::from_secs(5) {
        let mut b = snic_pipeline::Batch::new(64);
        adopted.recv(snic_time::Instant::ZERO, &mut b).unwrap();
        got.extend(b.iter().map(|p| p.data().to_vec()));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(got, frames[20..40].to_vec(), "what came after the handover is the new port's");
}

/// A run of per-worker queues pauses with every queue of every port, by port then queue.
#[test]
fn a_paused_queue_run_lists_every_queue() {
    use snic_io::runtime::AfterPause;
    let mut cfg = RunConfig::new(vec![PortSpec::Null, PortSpec::Null]);
    cfg.workers = 2;
    let rt = Runtime::new(cfg).unwrap();
    assert!(rt.per_worker_queues());
    let (stop, stats, pause) =
        (AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(true));
    let mut seen = Vec::new();
    let mut calls = 0;
    let report = rt
        .run_pausable(
            &stop,
            &stats,
            |_| {},
            &pause,
            |ports| {
                calls += 1;
                seen = ports.iter().map(|p| (p.port, p.queue)).collect();
                if calls == 1 {
                    pause.store(true, Ordering::Relaxed);
                    AfterPause::Resume
                } else {
                    AfterPause::Stop
                }
            },
        )
        .unwrap();
    assert_eq!(calls, 2);
    assert_eq!(seen, [(0, 0), (0, 1), (1, 0), (1, 1)]);
    assert_eq!(report.workers, 2);
}
