//! Interop, snic → scapy and tshark: frames of every format are written with snic-wire's `Repr`
//! emitters (RoCEv2 with our ICRC) into a pcap, then
//! - `scripts/check_pcap.py` (scapy) recomputes every IPv4/UDP/TCP/ICMP/ICMPv6 checksum and every
//!   RoCEv2 ICRC and must agree with all of them;
//! - `tshark` must decode every frame without a malformed packet or an expert error (checksum
//!   validation switched on), and must see the protocols we meant to write.
//!
//! The same checks run on the frames of snic-io's traffic generator (what `snic run` with no
//! arguments pushes through the pipeline), minus the ones it breaks on purpose.

mod common;

use snic_wire::ethernet::{self, EtherType, EthernetAddress};
use snic_wire::ipv4::{self, IpProtocol};
use snic_wire::roce::{bth, ext, icrc};
use snic_wire::{arp, geneve, gre, icmpv4, icmpv6, ipv6, tcp, udp, vxlan};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0b]);
const PAYLOAD: &[u8] = b"snic emits this!"; // 16 bytes: RoCE payloads need no pad

// ---- builders: each wraps a payload in one header, inner to outer -----------------------

fn eth(ethertype: u16, vlans: &[u16], payload: &[u8]) -> Vec<u8> {
    let tags = vlans.len() * ethernet::VLAN_TAG_LEN;
    let mut buf = vec![0u8; ethernet::HEADER_LEN + tags + payload.len()];
    let first = match vlans.len() {
        0 => ethertype,
        1 => 0x8100,
        _ => 0x88a8,
    };
    ethernet::Repr { src_addr: MAC_A, dst_addr: MAC_B, ethertype: EtherType(first) }
        .emit(&mut ethernet::Frame::new_unchecked(&mut buf[..]));
    for (i, vid) in vlans.iter().enumerate() {
        let next = if i + 1 < vlans.len() { 0x8100 } else { ethertype };
        let at = ethernet::HEADER_LEN + i * ethernet::VLAN_TAG_LEN;
        ethernet::VlanRepr { pcp: 3, dei: false, vid: *vid, ethertype: EtherType(next) }
            .emit(&mut ethernet::VlanTag::new_unchecked(&mut buf[at..]));
    }
    buf[ethernet::HEADER_LEN + tags..].copy_from_slice(payload);
    buf
}

fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut r =
        ipv4::Repr::new(Ipv4Addr::from(src), Ipv4Addr::from(dst), IpProtocol(proto), payload.len());
    r.set_options(options).expect("options fit");
    r.ident = 0x1234;
    let mut buf = vec![0u8; r.buffer_len()];
    let mut p = ipv4::Packet::new_unchecked(&mut buf[..]);
    r.emit(&mut p);
    p.fill_checksum();
    let hl = r.header_len();
    buf[hl..].copy_from_slice(payload);
    buf
}

fn ip6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
    let r = ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol(next),
        payload_len: payload.len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0x12345,
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
    let hl = r.header_len();
    buf[hl..].copy_from_slice(payload);
    buf
}

fn udp_dgram(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let r = udp::Repr { src_port: sport, dst_port: dport, payload_len: payload.len() };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut udp::Packet::new_unchecked(&mut buf[..]));
    buf[udp::HEADER_LEN..].copy_from_slice(payload);
    udp::Packet::new_unchecked(&mut buf[..]).fill_checksum(&src, &dst);
    buf
}

fn tcp_seg(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, syn: bool, payload: &[u8]) -> Vec<u8> {
    let r = tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq_number: 1000,
        ack_number: if syn { 0 } else { 1 },
        flags: if syn {
            tcp::Flags::SYN
        } else {
            tcp::Flags(tcp::Flags::ACK.0 | tcp::Flags::PSH.0)
        },
        window_len: 64240,
        urgent_at: 0,
        max_seg_size: syn.then_some(1460),
        window_scale: syn.then_some(7),
        sack_permitted: syn,
        timestamps: Some((12345, 0)),
        sack_ranges: tcp::SackBlocks::default(),
        payload_len: payload.len(),
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut tcp::Packet::new_unchecked(&mut buf[..]));
    let hl = r.header_len();
    buf[hl..].copy_from_slice(payload);
    tcp::Packet::new_unchecked(&mut buf[..]).fill_checksum(&src, &dst);
    buf
}

fn icmp4_echo(payload: &[u8]) -> Vec<u8> {
    let r = icmpv4::Repr::EchoRequest { ident: 7, seq_no: 1, data_len: payload.len() };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut icmpv4::Packet::new_unchecked(&mut buf[..]));
    buf[r.header_len()..].copy_from_slice(payload);
    icmpv4::Packet::new_unchecked(&mut buf[..]).fill_checksum();
    buf
}

fn icmp6_echo(src: Ipv6Addr, dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let r = icmpv6::Repr::EchoRequest { ident: 7, seq_no: 1, data_len: payload.len() };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut icmpv6::Packet::new_unchecked(&mut buf[..]));
    buf[r.header_len()..].copy_from_slice(payload);
    icmpv6::Packet::new_unchecked(&mut buf[..]).fill_checksum(src, dst);
    buf
}

fn arp_request() -> Vec<u8> {
    let r = arp::Repr {
        operation: arp::Operation::Request,
        source_hardware_addr: MAC_A,
        source_protocol_addr: Ipv4Addr::new(10, 6, 0, 1),
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: Ipv4Addr::new(10, 6, 0, 2),
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut arp::Packet::new_unchecked(&mut buf[..]));
    eth(0x0806, &[], &buf)
}

fn vxlan_hdr(vni: u32, inner: &[u8]) -> Vec<u8> {
    let r = vxlan::Repr { vni };
    let mut buf = vec![0u8; r.buffer_len() + inner.len()];
    r.emit(&mut vxlan::Packet::new_unchecked(&mut buf[..])).expect("vxlan emit");
    buf[r.buffer_len()..].copy_from_slice(inner);
    buf
}

fn geneve_hdr(vni: u32, options: &[u8], inner: &[u8]) -> Vec<u8> {
    let r = geneve::Repr { oam: false, critical: false, protocol: 0x6558, vni, options };
    let mut buf = vec![0u8; r.buffer_len() + inner.len()];
    r.emit(&mut geneve::Packet::new_unchecked(&mut buf[..])).expect("geneve emit");
    buf[r.buffer_len()..].copy_from_slice(inner);
    buf
}

fn nvgre_hdr(vsid: u32, inner: &[u8]) -> Vec<u8> {
    let r = gre::NvgreRepr { vsid, flow_id: 0x2a };
    let mut buf = vec![0u8; r.buffer_len() + inner.len()];
    r.emit(&mut gre::Packet::new_unchecked(&mut buf[..])).expect("nvgre emit");
    buf[r.buffer_len()..].copy_from_slice(inner);
    buf
}

/// An inner Ethernet/IPv4/TCP frame for the tunnels.
fn inner_tcp() -> Vec<u8> {
    let (s, d) = ([172, 16, 0, 1], [172, 16, 0, 2]);
    eth(0x0800, &[], &ip4(s, d, 6, &[], &tcp_seg(s.into(), d.into(), 1234, 8080, true, &[])))
}

/// The RoCEv2 extension headers of one opcode, emitted with snic-wire's Reprs.
fn roce_ext(opcode: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |len: usize, f: &mut dyn FnMut(&mut [u8])| {
        let start = out.len();
        out.resize(start + len, 0);
        f(&mut out[start..]);
    };
    let reth = |b: &mut [u8]| {
        ext::RethRepr { va: 0x0000_7f00_1234_5000, rkey: 0x1000_abcd, dma_len: 16 }
            .emit(&mut ext::Reth::new_unchecked(b))
            .expect("reth");
    };
    let aeth = |b: &mut [u8]| {
        ext::AethRepr { syndrome: ext::Syndrome::Ack { credits: 31 }, msn: 7 }
            .emit(&mut ext::Aeth::new_unchecked(b))
            .expect("aeth");
    };
    match opcode {
        0x05 => put(4, &mut |b| {
            ext::ImmDtRepr { imm: 0xdead_beef }
                .emit(&mut ext::ImmDt::new_unchecked(b))
                .expect("immdt")
        }),
        0x17 => put(4, &mut |b| {
            ext::IethRepr { rkey: 0xcafe_0001 }
                .emit(&mut ext::Ieth::new_unchecked(b))
                .expect("ieth")
        }),
        0x0a | 0x0c => put(16, &mut { reth }),
        0x0b => {
            put(16, &mut { reth });
            put(4, &mut |b| {
                ext::ImmDtRepr { imm: 1 }.emit(&mut ext::ImmDt::new_unchecked(b)).expect("immdt")
            });
        }
        0x10 | 0x11 => put(4, &mut { aeth }),
        0x12 => {
            put(4, &mut { aeth });
            put(8, &mut |b| {
                ext::AtomicAckEthRepr { orig_data: 0x0bad_f00d_0bad_f00d }
                    .emit(&mut ext::AtomicAckEth::new_unchecked(b))
                    .expect("atomicacketh")
            });
        }
        0x13 | 0x14 => put(28, &mut |b| {
            ext::AtomicEthRepr { va: 0x2000, rkey: 0x1111_2222, swap_add: 5, compare: 9 }
                .emit(&mut ext::AtomicEth::new_unchecked(b))
                .expect("atomiceth")
        }),
        0x64 => put(8, &mut |b| {
            ext::DethRepr { qkey: 0x1122_3344, src_qp: 0xabc }
                .emit(&mut ext::Deth::new_unchecked(b))
                .expect("deth")
        }),
        _ => {}
    }
    out
}

/// Does this opcode carry a payload?
fn roce_has_payload(opcode: u8) -> bool {
    snic_wire::roce::opcode::lookup(opcode).expect("known opcode").payload
}

/// A whole RoCEv2 frame over IPv4 or IPv6 with our ICRC and a real UDP checksum.
fn roce_frame(v6: bool, opcode: u8, psn: u32) -> Vec<u8> {
    let mut bytes = vec![0u8; bth::HEADER_LEN];
    bth::Repr {
        opcode,
        solicited: opcode == 0x05,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x11 + u32::from(opcode),
        ack_req: opcode == 0x0a || opcode == 0x13,
        psn,
    }
    .emit(&mut bth::Header::new_unchecked(&mut bytes[..]))
    .expect("bth emit");
    bytes.extend(roce_ext(opcode));
    if roce_has_payload(opcode) {
        bytes.extend_from_slice(PAYLOAD);
    }
    bytes.extend_from_slice(&[0; 4]); // ICRC, filled below
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        ("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap())
    } else {
        ([192, 168, 1, 1].into(), [192, 168, 1, 2].into())
    };
    let dgram = udp_dgram(src, dst, 0xc000 + u16::from(opcode), snic_wire::roce::UDP_PORT, &bytes);
    let mut frame = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            eth(0x0800, &[], &ip4(s.octets(), d.octets(), 17, &[], &dgram))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => eth(0x86dd, &[], &ip6(s, d, 17, &dgram)),
        _ => unreachable!("same family"),
    };
    let ip_at = ethernet::HEADER_LEN;
    icrc::fill(&mut frame[ip_at..]).expect("icrc fill");
    // The ICRC is inside the UDP checksum's coverage: refill the checksum after it.
    let udp_at = ip_at + if v6 { 40 } else { 20 };
    udp::Packet::new_unchecked(&mut frame[udp_at..]).fill_checksum(&src, &dst);
    frame
}

/// Every frame we emit, with the protocol chain tshark must report for it.
fn emitted() -> Vec<(&'static str, Vec<u8>)> {
    let (a4, b4) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let (a, b): (IpAddr, IpAddr) = (a4.into(), b4.into());
    let (a6, b6): (Ipv6Addr, Ipv6Addr) =
        ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
    let mut v = vec![
        (
            "eth:ethertype:ip:udp:data",
            eth(0x0800, &[], &ip4(a4, b4, 17, &[], &udp_dgram(a, b, 10000, 20000, PAYLOAD))),
        ),
        (
            "eth:ethertype:vlan:ethertype:ip:tcp",
            eth(0x0800, &[100], &ip4(a4, b4, 6, &[], &tcp_seg(a, b, 40000, 8080, true, &[]))),
        ),
        (
            "eth:ethertype:ieee8021ad:ethertype:vlan:ethertype:ip:udp:data",
            eth(
                0x0800,
                &[200, 300],
                &ip4(a4, b4, 17, &[], &udp_dgram(a, b, 10001, 20001, PAYLOAD)),
            ),
        ),
        (
            // Router Alert option (RFC 2113): IHL 6.
            "eth:ethertype:ip:udp:data",
            eth(
                0x0800,
                &[],
                &ip4(
                    a4,
                    b4,
                    17,
                    &[0x94, 0x04, 0x00, 0x00],
                    &udp_dgram(a, b, 10002, 20002, PAYLOAD),
                ),
            ),
        ),
        (
            "eth:ethertype:ip:tcp:data",
            eth(0x0800, &[], &ip4(a4, b4, 6, &[], &tcp_seg(a, b, 40001, 8081, false, PAYLOAD))),
        ),
        (
            "eth:ethertype:ip:icmp:data",
            eth(0x0800, &[], &ip4(a4, b4, 1, &[], &icmp4_echo(PAYLOAD))),
        ),
        ("eth:ethertype:arp", arp_request()),
        (
            "eth:ethertype:ipv6:udp:data",
            eth(
                0x86dd,
                &[],
                &ip6(a6, b6, 17, &udp_dgram(a6.into(), b6.into(), 10003, 20003, PAYLOAD)),
            ),
        ),
        (
            "eth:ethertype:ipv6:tcp",
            eth(
                0x86dd,
                &[],
                &ip6(a6, b6, 6, &tcp_seg(a6.into(), b6.into(), 40002, 8082, true, &[])),
            ),
        ),
        (
            "eth:ethertype:ipv6:icmpv6:data",
            eth(0x86dd, &[], &ip6(a6, b6, 58, &icmp6_echo(a6, b6, PAYLOAD))),
        ),
        (
            "eth:ethertype:ip:udp:vxlan:eth:ethertype:ip:tcp",
            eth(
                0x0800,
                &[],
                &ip4(
                    a4,
                    b4,
                    17,
                    &[],
                    &udp_dgram(a, b, 49152, 4789, &vxlan_hdr(0x123456, &inner_tcp())),
                ),
            ),
        ),
        (
            "eth:ethertype:ip:udp:geneve:eth:ethertype:ip:tcp",
            eth(
                0x0800,
                &[],
                &ip4(
                    a4,
                    b4,
                    17,
                    &[],
                    &udp_dgram(
                        a,
                        b,
                        49153,
                        6081,
                        &geneve_hdr(0xabcde, &[0x01, 0x02, 0x80, 0x01, 1, 2, 3, 4], &inner_tcp()),
                    ),
                ),
            ),
        ),
        (
            "eth:ethertype:ip:gre:eth:ethertype:ip:tcp",
            eth(0x0800, &[], &ip4(a4, b4, 47, &[], &nvgre_hdr(0x654321, &inner_tcp()))),
        ),
    ];
    for (i, op) in
        [0x04u8, 0x05, 0x17, 0x0a, 0x0b, 0x0c, 0x10, 0x11, 0x12, 0x13, 0x14].into_iter().enumerate()
    {
        v.push(("eth:ethertype:ip:udp:infiniband", roce_frame(false, op, 100 + i as u32)));
    }
    v.push(("eth:ethertype:ipv6:udp:infiniband", roce_frame(true, 0x0a, 0xffffff)));
    v.push(("eth:ethertype:ipv6:udp:infiniband", roce_frame(true, 0x11, 0)));
    v
}

/// tshark's protocol chain may end with a payload protocol ("data"); compare on our prefix.
fn protocols_match(expected: &str, got: &str) -> bool {
    got == expected || got.strip_prefix(expected).is_some_and(|rest| rest.starts_with(':'))
}

/// Dissectors tshark picks by port number or heuristics for payload bytes that are not theirs
/// (random payloads on port 53, RDMA payloads guessed as RPC-over-RDMA, ...). Their "malformed"
/// verdicts are about our payload filler, not our headers, so they are switched off.
const PAYLOAD_GUESSERS: [&str; 5] = ["rpcordma", "dns", "tapa", "ssh", "tls"];

/// Run `check_pcap.py` (every checksum and ICRC must verify) and check that exactly the frames
/// `roce` (indices from 1) had their ICRC checked: a RoCE frame scapy failed to dissect as BTH
/// would otherwise pass as "ok" without any ICRC check.
fn check_with_scapy(pcap: &Path, roce: &[usize]) {
    let out = common::run_ok(
        Command::new("python3")
            .arg(common::root().join("scripts/check_pcap.py"))
            .arg("--expect-icrc")
            .arg(roce.len().to_string())
            .arg(pcap),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let checked: Vec<usize> = text
        .lines()
        .filter(|l| l.ends_with(" icrc-checked: ok"))
        .map(|l| {
            let (index, _) = l.split_once(':').expect("INDEX: ...");
            index.parse().unwrap_or_else(|e| panic!("bad index in {l:?}: {e}"))
        })
        .collect();
    assert_eq!(checked, roce, "frames whose ICRC scapy checked:\n{text}");
    assert!(
        text.contains(&format!("packets verified ({} ICRCs)", roce.len())),
        "no summary line:\n{text}"
    );
}

/// Run tshark with checksum validation on. Returns the problem lines (malformed frames, expert
/// errors) and each frame's protocol chain.
fn tshark_verdict(pcap: &Path) -> (Vec<String>, Vec<String>) {
    let prefs = ["ip.check_checksum:TRUE", "udp.check_checksum:TRUE", "tcp.check_checksum:TRUE"];
    let mut verbose = Command::new("tshark");
    verbose.arg("-r").arg(pcap).args(["-V", "-z", "expert"]);
    for p in PAYLOAD_GUESSERS {
        verbose.args(["--disable-protocol", p]);
    }
    for p in prefs {
        verbose.args(["-o", p]);
    }
    let out = common::run_ok(&mut verbose);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut problems: Vec<String> = text
        .lines()
        .filter(|l| l.contains("Malformed") || l.contains("[Expert Info (Error"))
        .map(str::to_owned)
        .collect();
    if let Some(at) = text.find("\nErrors (") {
        problems.push(text[at + 1..].lines().take(8).collect::<Vec<_>>().join("\n"));
    }

    let mut fields = Command::new("tshark");
    fields.arg("-r").arg(pcap).args(["-T", "fields", "-e", "frame.protocols"]);
    for p in PAYLOAD_GUESSERS {
        fields.args(["--disable-protocol", p]);
    }
    let out = common::run_ok(&mut fields);
    let chains = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    (problems, chains)
}

/// Assert tshark finds nothing wrong; return the protocol chains.
fn check_with_tshark(pcap: &Path) -> Vec<String> {
    let (problems, chains) = tshark_verdict(pcap);
    assert!(problems.is_empty(), "tshark found problems:\n{}", problems.join("\n"));
    chains
}

/// The checkers themselves must catch what they are meant to: a frame with a wrong IPv4
/// checksum and a RoCE frame with a wrong ICRC make scapy's checker fail naming both packets,
/// and tshark (checksum validation on) report an error.
#[test]
fn the_checkers_catch_a_bad_checksum_and_a_bad_icrc() {
    let test = "interop_emit checkers";
    let mut frames: Vec<Vec<u8>> = emitted().into_iter().map(|(_, f)| f).collect();
    frames.truncate(2);
    let mut bad_ip = frames[0].clone();
    bad_ip[ethernet::HEADER_LEN + 10] ^= 0x01; // IPv4 header checksum
    let mut bad_icrc = roce_frame(false, 0x0a, 1);
    let last = bad_icrc.len() - 1;
    bad_icrc[last] ^= 0x80;
    frames.push(bad_ip);
    frames.push(bad_icrc);
    let dir = common::temp_dir("interop-emit-neg");
    let pcap = dir.join("bad.pcap");
    common::write_pcap(&pcap, &frames);

    if common::have_scapy(test) {
        let out = Command::new("python3")
            .arg(common::root().join("scripts/check_pcap.py"))
            .arg(&pcap)
            .output()
            .unwrap();
        assert!(!out.status.success(), "check_pcap.py passed a corrupted capture");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("packet(s): 3, 4"),
            "check_pcap.py should name packets 3 and 4: {err}"
        );
    }
    if common::have_scapy(test) {
        // --expect-icrc: a capture where fewer RoCE frames than announced got an ICRC check
        // (here: the two good frames, one more than the RoCE frames among them) fails.
        let good = dir.join("good.pcap");
        common::write_pcap(&good, &frames[..2]);
        let roce = emitted().iter().take(2).filter(|(w, _)| w.contains(":infiniband")).count();
        let out = Command::new("python3")
            .arg(common::root().join("scripts/check_pcap.py"))
            .arg("--expect-icrc")
            .arg((roce + 1).to_string())
            .arg(&good)
            .output()
            .unwrap();
        assert!(!out.status.success(), "check_pcap.py ignored --expect-icrc");
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!("ICRC checked in {roce} packet(s), expected {}", roce + 1);
        assert!(err.contains(&want), "{err}");
    }
    if common::have_tshark(test) {
        let (problems, _) = tshark_verdict(&pcap);
        assert!(!problems.is_empty(), "tshark passed a frame with a bad IPv4 checksum");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Self-consistency check, not interop: our own parser reads back what our own emitters wrote
/// (and our ICRC verifies our ICRC). It catches an emitter and parser drifting apart; agreement
/// with other implementations is what the scapy and tshark tests below check.
#[test]
fn emitted_frames_parse_back_cleanly_in_snic() {
    for (i, (what, frame)) in emitted().iter().enumerate() {
        let stack = snic_wire::stack::parse(frame);
        assert!(
            stack.error().is_none(),
            "frame {} ({what}): our own parser rejects it: {:?}",
            i + 1,
            stack.error()
        );
        if what.contains("infiniband") {
            let ip = &frame[ethernet::HEADER_LEN..];
            assert_eq!(icrc::verify(ip), Ok(()), "frame {} ({what}): ICRC", i + 1);
        }
    }
}

#[test]
fn emitted_frames_verify_in_scapy_and_tshark() {
    let frames = emitted();
    let dir = common::temp_dir("interop-emit");
    let pcap = dir.join("emitted.pcap");
    let raw: Vec<Vec<u8>> = frames.iter().map(|(_, f)| f.clone()).collect();
    common::write_pcap(&pcap, &raw);

    if common::have_scapy("interop_emit (scapy)") {
        // The RoCE frames are the ones we labelled with tshark's InfiniBand dissector.
        let roce: Vec<usize> =
            (1..=frames.len()).filter(|i| frames[i - 1].0.contains(":infiniband")).collect();
        assert!(roce.len() >= 10, "only {} RoCE frames emitted", roce.len());
        check_with_scapy(&pcap, &roce);
    }
    if common::have_tshark("interop_emit (tshark)") {
        let chains = check_with_tshark(&pcap);
        assert_eq!(chains.len(), frames.len(), "tshark saw a different number of frames");
        for (i, ((expected, _), got)) in frames.iter().zip(&chains).enumerate() {
            assert!(
                protocols_match(expected, got),
                "frame {}: tshark decodes {got}, expected {expected}",
                i + 1
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn generator_frames_verify_in_scapy_and_tshark() {
    use snic_io::generator::FrameKind;
    let (kinds, frames): (Vec<FrameKind>, Vec<Vec<u8>>) = snic_io::generator::frames(400, 1)
        .into_iter()
        .filter(|(k, _)| !matches!(k, FrameKind::Truncated | FrameKind::BadIcrc))
        .unzip();
    // The RoCE frames, by the generator's own record of what it made.
    let roce: Vec<usize> = (1..=kinds.len())
        .filter(|i| {
            matches!(
                kinds[i - 1],
                FrameKind::RoceSend
                    | FrameKind::RoceWrite
                    | FrameKind::RoceReadReq
                    | FrameKind::RoceReadResp
                    | FrameKind::RoceAck
                    | FrameKind::RoceAtomic
                    | FrameKind::RoceAtomicAck
                    | FrameKind::RoceV6Send
                    | FrameKind::RoceV6Write
            )
        })
        .collect();
    assert!(roce.len() > 50, "the generator should make plenty of RoCE frames");
    assert!(frames.len() > 300, "the generator should mostly make good frames");
    let dir = common::temp_dir("interop-gen");
    let pcap = dir.join("gen.pcap");
    common::write_pcap(&pcap, &frames);
    if common::have_scapy("interop_emit generator (scapy)") {
        check_with_scapy(&pcap, &roce);
    }
    if common::have_tshark("interop_emit generator (tshark)") {
        let chains = check_with_tshark(&pcap);
        assert_eq!(chains.len(), frames.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
