//! Connection setup for RDMA over a TCP side channel, as perftest does: each side sends its
//! QP number, first PSN, GID (an IP address for RoCEv2), RoCE UDP port, buffer rkey/address/
//! length and path MTU as one JSON line, reads the peer's, and moves its QP INIT -> RTR -> RTS
//! with them ([`connect_qp`]). [`barrier`] and [`send_u64`] / [`recv_u64`] keep the two
//! processes in step and exchange results.

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use snic_rdma::{Access, Mtu, QpAttr, Rnic, VerbsError};
use snic_time::Instant;

/// What one side tells the other about its QP and buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpInfo {
    /// QP number.
    pub qpn: u32,
    /// First PSN this side sends (the peer's `rq_psn`).
    pub psn: u32,
    /// GID: the address RoCE packets go to.
    pub gid: IpAddr,
    /// RoCE UDP port (both sides must use the same one).
    pub udp_port: u16,
    /// rkey of the buffer the peer may WRITE / READ / run atomics on.
    pub rkey: u32,
    /// Address of that buffer (engine address space).
    pub addr: u64,
    /// Length of that buffer.
    pub len: u64,
    /// Path MTU this side wants (256..=4096).
    pub mtu: u32,
}

/// How long [`exchange`] waits for the peer's line.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest line [`exchange`] accepts.
const MAX_LINE: usize = 4096;

/// Send `mine` as one JSON line and read the peer's (waiting at most [`EXCHANGE_TIMEOUT`]).
/// Garbage or a closed connection is an `InvalidData` / `UnexpectedEof` error naming the
/// problem. The stream's previous read timeout is restored.
pub fn exchange(stream: &mut TcpStream, mine: &QpInfo) -> io::Result<QpInfo> {
    let mut line = serde_json::to_string(mine).map_err(io::Error::other)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    stream.flush()?;
    let old = stream.read_timeout()?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    let got = read_line(stream);
    stream.set_read_timeout(old)?;
    let got = got?;
    serde_json::from_slice(&got).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("peer sent a bad QP info line ({e}): {:?}", String::from_utf8_lossy(&got)),
        )
    })
}

/// Read bytes up to a newline, one at a time so nothing after the line is consumed.
fn read_line(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    let mut b = [0u8; 1];
    loop {
        match stream.read(&mut b) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the connection during the QP info exchange",
                ));
            }
            Ok(_) if b[0] == b'\n' => return Ok(out),
            Ok(_) => {
                if out.len() >= MAX_LINE {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "peer's QP info line is too long (not a snic peer?)",
                    ));
                }
                out.push(b[0]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "timed out waiting for the peer's QP info",
                ));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The byte both sides send at a barrier.
const BARRIER: u8 = b'B';

/// Both sides reach this point before either goes on: one byte each way.
pub fn barrier(stream: &mut TcpStream) -> io::Result<()> {
    stream.write_all(&[BARRIER])?;
    stream.flush()?;
    let mut b = [0u8; 1];
    stream.read_exact(&mut b)?;
    if b[0] != BARRIER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad barrier byte {:#04x} from the peer", b[0]),
        ));
    }
    Ok(())
}

/// Send one number (big-endian), e.g. a result for the peer to print.
pub fn send_u64(stream: &mut TcpStream, v: u64) -> io::Result<()> {
    stream.write_all(&v.to_be_bytes())?;
    stream.flush()
}

/// Receive one number sent with [`send_u64`].
pub fn recv_u64(stream: &mut TcpStream) -> io::Result<u64> {
    let mut b = [0u8; 8];
    stream.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// The largest valid path MTU not above `bytes`; `None` below 256.
pub fn mtu_at_most(bytes: u32) -> Option<Mtu> {
    [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512, Mtu::M256]
        .into_iter()
        .find(|m| m.bytes() <= bytes)
}

/// Bytes a RoCEv2 packet carries around its payload, beyond the IP header: UDP (8), BTH (12),
/// the largest extension headers of a payload-carrying packet (RETH 16 + ImmDt 4, a WRITE with
/// immediate) and the ICRC (4).
pub const ROCE_OVERHEAD: usize = 8 + 12 + 16 + 4 + 4;

/// The largest path MTU (256..4096) whose packets fit a link of `link_mtu` bytes, as rxe
/// derives a QP's MTU from its netdev's: the link MTU less the IP header (20 or 40 bytes) and
/// [`ROCE_OVERHEAD`]. `None` when not even 256 fits.
pub fn mtu_for_link(link_mtu: usize, ipv6: bool) -> Option<Mtu> {
    let ip = if ipv6 { 40 } else { 20 };
    let room = link_mtu.checked_sub(ip + ROCE_OVERHEAD)?;
    mtu_at_most(u32::try_from(room).unwrap_or(u32::MAX))
}

/// The path MTU for a QP towards `peer`: [`mtu_for_link`] of the route's MTU
/// ([`snic_io::sys::sock::route_mtu`]).
pub fn path_mtu_to(peer: IpAddr) -> io::Result<Mtu> {
    let link = snic_io::sys::sock::route_mtu(peer)?;
    mtu_for_link(link, peer.is_ipv6()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("route MTU {link} to {peer} is too small for RoCE"),
        )
    })
}

/// Connect `qpn` to the peer described by `remote`: INIT (remote WRITE, READ and atomic
/// allowed) -> RTR -> RTS, with timeout 14, retry_cnt 7, rnr_retry 7, min_rnr_timer 12,
/// max_rd_atomic / max_dest_rd_atomic 16, our first PSN `my_psn`, and the path MTU the peer
/// asked for (`remote.mtu`, rounded down to a valid MTU). Both sides advertise the same MTU in
/// the usual case; when they may differ use [`connect_qp_mtu`], which takes the smaller.
/// The QP must be in RESET or INIT.
pub fn connect_qp(
    rnic: &mut Rnic,
    qpn: u32,
    remote: &QpInfo,
    my_psn: u32,
    now: Instant,
) -> Result<(), VerbsError> {
    connect_qp_mtu(rnic, qpn, remote, my_psn, Mtu::M4096.bytes(), now)
}

/// [`connect_qp`] with this side's MTU: the path MTU is `min(remote.mtu, my_mtu)`, the same on
/// both sides when each passes what it advertised.
pub fn connect_qp_mtu(
    rnic: &mut Rnic,
    qpn: u32,
    remote: &QpInfo,
    my_psn: u32,
    my_mtu: u32,
    now: Instant,
) -> Result<(), VerbsError> {
    let mtu = mtu_at_most(remote.mtu.min(my_mtu)).ok_or(VerbsError::InvalidAttr("mtu"))?;
    if remote.udp_port != rnic.config().udp_port {
        return Err(VerbsError::InvalidAttr("udp_port: both sides must use the same RoCE port"));
    }
    let attr = QpAttr {
        access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        path_mtu: mtu,
        dest_qpn: remote.qpn,
        rq_psn: remote.psn,
        remote: Some(remote.gid),
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        sq_psn: my_psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..QpAttr::default()
    };
    rnic.connect_rc(qpn, &attr, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_mtu_follows_the_link_mtu_as_rxe_does() {
        assert_eq!(mtu_for_link(1500, false), Some(Mtu::M1024));
        assert_eq!(mtu_for_link(1500, true), Some(Mtu::M1024));
        assert_eq!(mtu_for_link(9000, false), Some(Mtu::M4096));
        assert_eq!(mtu_for_link(65536, false), Some(Mtu::M4096));
        // 2048 + 20 + 44 = 2112 is the least link that carries 2048 over IPv4.
        assert_eq!(mtu_for_link(2112, false), Some(Mtu::M2048));
        assert_eq!(mtu_for_link(2111, false), Some(Mtu::M1024));
        assert_eq!(mtu_for_link(576, false), Some(Mtu::M512));
        assert_eq!(mtu_for_link(300, false), None);
        assert_eq!(mtu_for_link(0, true), None);
        assert_eq!(path_mtu_to("127.0.0.1".parse().unwrap()).unwrap(), Mtu::M4096);
    }
    use std::net::TcpListener;
    use std::thread;

    fn info(qpn: u32) -> QpInfo {
        QpInfo {
            qpn,
            psn: 0xab_cdef,
            gid: "127.0.0.2".parse().unwrap(),
            udp_port: 4791,
            rkey: 0x1234,
            addr: 0x10_0000_1000,
            len: 1 << 20,
            mtu: 4096,
        }
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (s, c)
    }

    #[test]
    fn exchange_barrier_and_numbers() {
        let (mut s, mut c) = pair();
        let server = thread::spawn(move || {
            let peer = exchange(&mut s, &info(0x11)).unwrap();
            barrier(&mut s).unwrap();
            send_u64(&mut s, 0xdead_beef_0000_0001).unwrap();
            let v = recv_u64(&mut s).unwrap();
            (peer, v)
        });
        let peer = exchange(&mut c, &info(0x12)).unwrap();
        barrier(&mut c).unwrap();
        assert_eq!(recv_u64(&mut c).unwrap(), 0xdead_beef_0000_0001);
        send_u64(&mut c, 7).unwrap();
        let (speer, v) = server.join().unwrap();
        assert_eq!(peer, info(0x11));
        assert_eq!(speer, info(0x12));
        assert_eq!(v, 7);
        // The read timeout the exchange used is not left behind.
        assert_eq!(c.read_timeout().unwrap(), None);
    }

    #[test]
    fn garbage_and_eof_are_clear_errors() {
        let (mut s, mut c) = pair();
        s.write_all(b"HTTP/1.1 200 OK\n").unwrap();
        let e = exchange(&mut c, &info(1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("bad QP info"), "{e}");
        // A bad barrier byte.
        s.write_all(b"X").unwrap();
        assert_eq!(barrier(&mut c).unwrap_err().kind(), io::ErrorKind::InvalidData);
        // The peer stops sending (still open, so our own line is not refused).
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(exchange(&mut c, &info(1)).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        drop(s);
    }

    #[test]
    fn too_long_line_is_refused() {
        let (mut s, mut c) = pair();
        let t = thread::spawn(move || {
            let _ = s.write_all(&vec![b'{'; MAX_LINE + 10]);
            s
        });
        let e = exchange(&mut c, &info(1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        drop(t.join().unwrap());
    }

    #[test]
    fn mtu_rounds_down() {
        assert_eq!(mtu_at_most(4096), Some(Mtu::M4096));
        assert_eq!(mtu_at_most(9000), Some(Mtu::M4096));
        assert_eq!(mtu_at_most(1500), Some(Mtu::M1024));
        assert_eq!(mtu_at_most(256), Some(Mtu::M256));
        assert_eq!(mtu_at_most(255), None);
    }

    #[test]
    fn connect_qp_reaches_rts_with_the_peer_attrs() {
        use snic_rdma::{QpInit, RnicConfig};
        let mut r = Rnic::new(RnicConfig {
            host_pool: 1 << 20,
            on_chip: 0,
            on_board: 0,
            ..RnicConfig::default()
        })
        .unwrap();
        let pd = r.alloc_pd();
        let cq = r.create_cq(16);
        let qpn = r
            .create_qp(QpInit {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                max_send_wr: 16,
                max_recv_wr: 16,
                placement: snic_dma::MemKind::Host,
                sq_sig_all: false,
            })
            .unwrap();
        let mut remote = info(0x33);
        remote.gid = "127.0.0.9".parse().unwrap();
        remote.mtu = 2048;
        connect_qp_mtu(&mut r, qpn, &remote, 0x42, 4096, Instant::ZERO).unwrap();
        let a = r.query_qp(qpn).unwrap();
        assert_eq!(a.state, snic_rdma::QpState::Rts);
        assert_eq!(a.path_mtu, Mtu::M2048);
        assert_eq!(a.dest_qpn, 0x33);
        assert_eq!(a.rq_psn, remote.psn);
        assert_eq!(a.sq_psn, 0x42);
        assert_eq!(a.remote, Some(remote.gid));
        assert_eq!((a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer), (14, 7, 7, 12));
        // Already in RTS: a second connect is refused, not silently redone.
        assert!(connect_qp(&mut r, qpn, &remote, 0x42, Instant::ZERO).is_err());
        // A peer on another RoCE port is refused.
        remote.udp_port = 4792;
        let q2 = r
            .create_qp(QpInit {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                max_send_wr: 4,
                max_recv_wr: 4,
                placement: snic_dma::MemKind::Host,
                sq_sig_all: false,
            })
            .unwrap();
        assert_eq!(
            connect_qp(&mut r, q2, &remote, 0, Instant::ZERO).unwrap_err(),
            VerbsError::InvalidAttr("udp_port: both sides must use the same RoCE port")
        );
    }
}
