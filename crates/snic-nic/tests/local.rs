//! The `local` stage in a pipeline (parse, classify, local): which packets the NIC takes for
//! itself, and that everything else goes on untouched. The ARP and ND frames are the ones a
//! real neighbour table ([`Neighbours`]) emits, so the stage and the table agree.

use core::net::IpAddr;

use snic_nic::local::Local;
use snic_nic::neigh::{NeighConfig, Neighbours, Resolve};
use snic_pipeline::stage::StageCtx;
use snic_pipeline::testing::frames::{IP_A, IP_B, MAC_A, MAC_B, Write, roce_write, udp64, vxlan};
use snic_pipeline::{Batch, Pipeline, PortId, Stage};
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;

/// Sends every packet it sees to port 0 (so what went on past `local` leaves the pipeline).
struct ToPort0;

impl Stage for ToPort0 {
    fn name(&self) -> &str {
        "to_port0"
    }
    fn process(&mut self, _: Instant, batch: &mut Batch, _: &mut StageCtx<'_>) {
        for p in batch.iter_mut() {
            p.meta.egress = Some(PortId(0));
        }
    }
}

/// parse, classify, local(ips), to_port0; returns (frames that went on, frames delivered locally) by
/// their index in `frames`, and the `local` stage's counters.
fn run(ips: &[IpAddr], frames: &[Vec<u8>]) -> (Vec<usize>, Vec<usize>, (u64, u64, u64)) {
    run_stage(Local::new(ips), frames)
}

/// [`run`] with a given `local` stage.
fn run_stage(local: Local, frames: &[Vec<u8>]) -> (Vec<usize>, Vec<usize>, (u64, u64, u64)) {
    let mut p = Pipeline::from_strs(&["parse", "classify"]).unwrap();
    p.push(Box::new(local));
    p.push(Box::new(ToPort0));
    let mut b = Batch::new(64);
    for (i, f) in frames.iter().enumerate() {
        // Each frame is tagged with its index as its ingress port (only `on_port` reads it).
        b.push_frame(f).unwrap().meta.ingress = PortId(i as u16);
    }
    p.process(Instant::ZERO, &mut b);
    let went_on = b.iter().map(|p| usize::from(p.meta.ingress.0)).collect();
    let mut local = Batch::new(64);
    p.take_local(&mut local);
    let delivered = local.iter().map(|p| usize::from(p.meta.ingress.0)).collect();
    let c = p.counters();
    let s = c.stages.iter().find(|s| s.name == "local").unwrap();
    (went_on, delivered, (s.packets_in, s.packets_out, s.local))
}

/// The frames `who` (at `mac`, owning `ips`) sends to resolve `dst` from `src`.
fn solicit(mac: [u8; 6], ips: &[IpAddr], src: IpAddr, dst: IpAddr) -> (Neighbours, Vec<u8>) {
    let mut n = Neighbours::new(NeighConfig::default(), EthernetAddress(mac), ips);
    let ip_pkt = [0x45u8; 20];
    assert_eq!(n.resolve(Instant::ZERO, dst, src, &ip_pkt), Resolve::Queued);
    let mut buf = vec![0u8; 2048];
    let len = n.poll_transmit(Instant::ZERO, &mut buf).expect("a solicitation");
    buf.truncate(len);
    (n, buf)
}

/// The answer `who` gives to `frame`.
fn answer(mac: [u8; 6], ips: &[IpAddr], frame: &[u8]) -> Vec<u8> {
    let mut n = Neighbours::new(NeighConfig::default(), EthernetAddress(mac), ips);
    n.handle_frame(Instant::ZERO, frame);
    let mut buf = vec![0u8; 2048];
    let len = n.poll_transmit(Instant::ZERO, &mut buf).expect("an answer");
    buf.truncate(len);
    buf
}

#[test]
fn roce_for_our_address_is_delivered_and_the_rest_goes_on() {
    let ours: Vec<IpAddr> = vec![IP_B.into()];
    let frames = vec![
        roce_write(Write::default(), false), // 0: RoCE to IP_B: ours
        udp64(1000, 2000),                   // 1: plain UDP
        roce_write(Write { dest_qp: 7, ..Write::default() }, false), // 2: ours
        vxlan(42, &roce_write(Write::default(), false)), // 3: RoCE inside a tunnel
    ];
    let (on, local, (i, o, l)) = run(&ours, &frames);
    assert_eq!(local, vec![0, 2]);
    assert_eq!(on, vec![1, 3]);
    assert_eq!((i, o, l), (4, 2, 2));
    // The same RoCE packets are not ours when the NIC's address is another.
    let (on, local, _) = run(&[IP_A.into()], &frames);
    assert!(local.is_empty());
    assert_eq!(on, vec![0, 1, 2, 3]);
}

#[test]
fn arp_for_our_address_and_the_answers_to_our_requests_are_delivered() {
    let a: Vec<IpAddr> = vec![IP_A.into()];
    let b: Vec<IpAddr> = vec![IP_B.into()];
    // B asks for A; A answers B.
    let (_, request) = solicit(MAC_B, &b, IP_B.into(), IP_A.into());
    let reply = answer(MAC_A, &a, &request);
    // A request for a third address, and our request seen by ourselves: not ours to answer.
    let (_, other) = solicit(MAC_B, &b, IP_B.into(), "10.0.0.9".parse().unwrap());
    let frames = vec![request.clone(), reply.clone(), other];
    let (on, local, _) = run(&a, &frames);
    assert_eq!(local, vec![0], "A takes the request for A");
    assert_eq!(on, vec![1, 2]);
    let (on, local, _) = run(&b, &frames);
    assert_eq!(local, vec![1], "B takes the reply to its request");
    assert_eq!(on, vec![0, 2]);
}

#[test]
fn neighbour_solicitations_for_us_and_advertisements_to_us_are_delivered() {
    let a6: IpAddr = "fd00::a".parse().unwrap();
    let b6: IpAddr = "fd00::b".parse().unwrap();
    let (_, ns) = solicit(MAC_B, &[b6], b6, a6);
    let na = answer(MAC_A, &[a6], &ns);
    let (_, ns_other) = solicit(MAC_B, &[b6], b6, "fd00::99".parse().unwrap());
    let frames = vec![ns, na, ns_other];
    let (on, local, _) = run(&[a6], &frames);
    assert_eq!(local, vec![0], "A takes the solicitation for A");
    assert_eq!(on, vec![1, 2]);
    let (on, local, _) = run(&[b6], &frames);
    // The advertisement's target is A, but it is sent to B: B asked.
    assert_eq!(local, vec![1], "B takes the advertisement answering it");
    assert_eq!(on, vec![0, 2]);
    // A NIC with no IPv6 address takes none of them.
    let (on, local, _) = run(&[IP_A.into()], &frames);
    assert!(local.is_empty());
    assert_eq!(on, vec![0, 1, 2]);
}

#[test]
fn a_nic_takes_its_packets_from_its_wire_port_only() {
    let ours: Vec<IpAddr> = vec![IP_B.into()];
    let (_, request) = solicit(MAC_A, &[IP_A.into()], IP_A.into(), IP_B.into());
    // Frame i arrives on port i: the same RoCE packet and ARP request on the wire (port 0)
    // and from the host netdev (port 1).
    let roce = roce_write(Write::default(), false);
    let (on, local, _) = run_stage(Local::new(&ours).on_port(PortId(0)), &[roce.clone(), roce]);
    assert_eq!((on, local), (vec![1], vec![0]));
    let (on, local, _) =
        run_stage(Local::new(&ours).on_port(PortId(0)), &[request.clone(), request]);
    assert_eq!((on, local), (vec![1], vec![0]), "the host's ARP goes on through the pipeline");
}

proptest::proptest! {
    /// Any bytes, and real frames with a bit flipped: the stage never panics, and every packet
    /// that reaches it goes on or is delivered, exactly once, as its counters say.
    #[test]
    fn arbitrary_frames_go_on_or_are_delivered_exactly_once(
        frames in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..200), 0..20),
        flip in proptest::num::usize::ANY,
    ) {
        // Half the frames are real ones of the NIC's traffic with one byte flipped.
        let mut frames = frames;
        let real = [roce_write(Write::default(), false), udp64(1, 2)];
        for (i, f) in frames.iter_mut().enumerate().filter(|(i, _)| i % 2 == 0) {
            let mut r = real[i % 2].clone();
            let at = flip % r.len();
            r[at] ^= 1 << (i % 8);
            *f = r;
        }
        let ours: Vec<IpAddr> = vec![IP_B.into(), "fd00::b".parse().unwrap()];
        let (on, local, (i, o, l)) = run(&ours, &frames);
        let mut seen: Vec<usize> = on.iter().chain(&local).copied().collect();
        seen.sort_unstable();
        // Parse may drop malformed frames before `local`; what reaches it goes on or is
        // delivered, and none is seen twice.
        proptest::prop_assert!(i <= frames.len() as u64);
        proptest::prop_assert_eq!(i, o + l);
        proptest::prop_assert_eq!((o, l), (on.len() as u64, local.len() as u64));
        let before = seen.len();
        seen.dedup();
        proptest::prop_assert_eq!(seen.len(), before);
    }
}
