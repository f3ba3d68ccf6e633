//! Hostile setup messages against a live in-process snic host-interface server.
//!
//! The input is cut into messages (a length byte, then that many bytes). A message starting
//! with 0xFF becomes a well-formed `Request` with hostile values built from its bytes (so the
//! request handlers are reached); any other is sent as raw bytes (so the decoder is). Every message must
//! get exactly one response: a server thread that panicked, hung or closed the connection
//! fails the run. A final `Stats` request checks the server still answers.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use snic_device::{Server, ServerConfig, ServerHandle};
use snic_hostif::proto::{Request, Response};
use snic_hostif::shm::SeqPacket;

fn server() -> &'static ServerHandle {
    static S: OnceLock<ServerHandle> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("snic-fuzz-hostif-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let cfg = ServerConfig {
            socket: dir.join("snic.sock"),
            on_chip: 1 << 20,
            on_board: 4 << 20,
            workers: 1,
            huge: false,
            spin_us: 0,
            ..ServerConfig::default()
        };
        Server::start(cfg).expect("server starts")
    })
}

fn call(sock: &SeqPacket, msg: &[u8]) -> Response {
    sock.send(msg, &[]).expect("send");
    let mut buf = vec![0u8; snic_hostif::proto::MAX_MESSAGE];
    let (n, _fds) = sock.recv(&mut buf).expect("the server answers every message");
    assert!(n > 0, "the server closed the connection");
    Response::from_bytes(&buf[..n]).expect("the response is valid JSON")
}

/// A well-formed request with hostile values, built from `b` (first byte picks the request).
fn structured(b: &[u8]) -> Request {
    use snic_hostif::proto::{DevKind, DirName, QueueMode, RdmaRequest};
    let mut w = b.get(1..).unwrap_or_default().chunks(8).map(|c| {
        let mut x = [0u8; 8];
        x[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(x)
    });
    let mut n = move || w.next().unwrap_or(0);
    let kind = |v: u64| if v & 1 == 0 { DevKind::OnChip } else { DevKind::OnBoard };
    match b.first().copied().unwrap_or(0) % 12 {
        0 => Request::AllocDevice { kind: kind(n()), size: n() % (8 << 20), align: n() % 8192 },
        1 => Request::FreeDevice { addr: n() },
        2 => Request::AddQueue {
            mode: if n() & 1 == 0 { QueueMode::Mm } else { QueueMode::St },
            ring_size: n() as u32,
            cmpt_size: n() as u32,
            h2c_ring: n(),
            c2h_ring: n(),
            cmpt_ring: n(),
            align: n() as u32,
            interrupt: false,
            stream_to: Some(n() as u16).filter(|q| q & 1 == 0),
        },
        3 => Request::StartQueue { qid: n() as u16 },
        4 => Request::StopQueue { qid: n() as u16 },
        5 => Request::DeleteQueue { qid: n() as u16 },
        6 => Request::SetChannel {
            dir: if n() & 1 == 0 { DirName::H2c } else { DirName::C2h },
            index: n() as u8,
            align: n() as u32,
            interrupt: false,
        },
        7 => Request::UnregisterHost { iova: n() },
        8 => Request::RegisterHost { len: n() },
        9 => Request::Rdma(RdmaRequest::RegMr { addr: n(), len: n(), access: n() as u32 }),
        10 => Request::Hello { name: String::new(), version: n() as u32 },
        _ => Request::KernelIrq { kernel: n() as u32 },
    }
}

fuzz_target!(|data: &[u8]| {
    let s = server();
    let sock = SeqPacket::connect(s.socket_path()).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    // Say hello first half of the time, so requests past the handshake are reached too.
    if data.first().is_some_and(|b| b & 1 == 1) {
        let hello =
            Request::Hello { name: "fuzz".into(), version: snic_hostif::abi::VERSION_VALUE }
                .to_bytes();
        let _ = call(&sock, &hello);
    }
    let mut rest = data.get(1..).unwrap_or_default();
    while let Some((&len, tail)) = rest.split_first() {
        let len = (len as usize).min(tail.len());
        let (msg, tail) = tail.split_at(len);
        rest = tail;
        if msg.is_empty() {
            continue;
        }
        if msg[0] == 0xFF {
            let _ = call(&sock, &structured(&msg[1..]).to_bytes());
        } else {
            let _ = call(&sock, msg);
        }
    }
    assert!(matches!(
        call(&sock, &Request::Stats.to_bytes()),
        Response::Stats { .. } | Response::Error { .. }
    ));
});
