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
