//! Payloads copied into place in the same pass as their ICRC check (`Rnic::handle_packet`): a
//! corrupted READ response is counted, completes nothing, and the READ still completes with
//! the exact bytes once the requester asks again.

mod common;

use common::*;
use snic_rdma::*;
use snic_time::Instant;

#[test]
fn corrupt_read_response_is_counted_and_the_read_completes_exact() {
    let (mut a, mut b) = pair(0x10, retrying_attr());
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
    b.nic.mem_mut().write(b.buf, &data).unwrap();
    let now = Instant::ZERO;
    let wr = SendWr::new(5, WrOp::Read { remote: b.remote(0) }, a.sge(4096, 3000)).signaled(true);
    a.nic.post_send(a.qpn, &wr, now).unwrap();
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    while let Some(n) = a.nic.poll_transmit(now, &mut buf) {
        b.nic.handle_packet(now, &buf[..n]);
    }
    // B's three responses; the second arrives with a payload bit flipped.
    let mut k = 0;
    while let Some(n) = b.nic.poll_transmit(now, &mut buf) {
        if k == 1 {
            buf[n - 100] ^= 0x08;
        }
        a.nic.handle_packet(now, &buf[..n]);
        k += 1;
    }
    assert_eq!(k, 3);
    let s = a.nic.stats();
    // The first was placed while checked; the third came after a gap (checked, then dropped).
    assert_eq!((s.rx_bad_icrc, s.rx_placed, s.dup_responses), (1, 1, 1));
    assert!(a.poll_all().is_empty(), "nothing completes on a bad ICRC");

    let mut net = Net::clean(now);
    let mut done = Vec::new();
    assert!(net.run(&mut a, &mut b, |a, _| {
        done.extend(a.poll_all());
        !done.is_empty()
    }));
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].wr_id, done[0].status, done[0].byte_len), (5, WcStatus::Success, 3000));
    assert!(a.nic.mem().slice(a.buf + 4096, 3000).unwrap() == &data[..]);
    let s = a.nic.stats();
    // Asked again from the missing response: two more, both placed.
    assert_eq!((s.rx_bad_icrc, s.rx_placed), (1, 3));
}
