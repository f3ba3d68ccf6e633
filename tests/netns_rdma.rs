//! A firewall that drops RoCE datagrams on the output path is a lossy link, not a failure (root
//! only; skipped with a message otherwise; under CI a missing `nft` fails the test).
//!
//! In a network namespace of its own, an nftables rule on the output hook drops 3% of the UDP
//! datagrams to the test's RoCE port. The kernel then refuses those sends with `EPERM`. Two
//! `snic rdma` processes (server on 127.0.0.1, client on 127.0.0.2) run WRITE and READ of 64 KiB
//! messages through it: both must finish with their data verified, and the side that sends the
//! data must have counted the refused datagrams as lost (`tx_lost`) while the RC protocol
//! retransmitted them. Before this was handled, the first refused send ended the run with
//! "RoCE send: Operation not permitted".

mod common;

use common::netns::{have, is_root, must, note, run};
use serde_json::Value;
use std::process::{Command, Output, Stdio};

/// The namespace and its rule; Drop removes them whatever the exit path.
struct Guard {
    ns: String,
}

impl Guard {
    fn create(udp_port: u16) -> Guard {
        let g = Guard { ns: format!("snicloss{}", std::process::id()) };
        must(10, &["ip", "netns", "add", &g.ns]);
        must(10, &["ip", "-n", &g.ns, "link", "set", "lo", "up"]);
        let nft = |args: &[&str]| {
            let mut cmd = vec!["ip", "netns", "exec", &g.ns, "nft"];
            cmd.extend_from_slice(args);
            must(10, &cmd);
        };
        nft(&["add", "table", "inet", "snicloss"]);
        nft(&["add chain inet snicloss out { type filter hook output priority 0 ; }"]);
        let port = udp_port.to_string();
        let drop = ["udp", "dport", &port, "numgen", "random", "mod", "100", "<", "3", "drop"];
        let mut rule = vec!["add", "rule", "inet", "snicloss", "out"];
        rule.extend_from_slice(&drop);
        nft(&rule);
        g
    }

    fn snic(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "timeout", "-k", "2", "60"])
            .arg(env!("CARGO_BIN_EXE_snic"))
            .env_remove("RUST_LOG");
        c
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = run(10, &["ip", "netns", "del", &self.ns]);
    }
}

fn ready() -> bool {
    if !is_root() {
        note("skipping netns_rdma_loss: needs root");
        return false;
    }
    if have("nft") {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but nft (nftables) is missing");
    note("skipping netns_rdma_loss: nft (nftables) is missing");
    false
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run `snic rdma OP` server and client in the namespace; returns (server, client).
fn pair(g: &Guard, op: &str, udp: u16, tcp: u16) -> (Output, Output) {
    let (udp, tcp) = (udp.to_string(), tcp.to_string());
    let common =
        ["--port", &udp, "--tcp-port", &tcp, "--timeout", "30", "-s", "65536", "-n", "100"];
    let server = g
        .snic()
        .args(["rdma", op, "--server", "--json"])
        .args(common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let client = g
        .snic()
        .args(["rdma", op, "--client", "127.0.0.1", "--json"])
        .args(common)
        .output()
        .expect("run client");
    (server.wait_with_output().expect("server output"), client)
}

/// The transport counters of the JSON line a side printed.
fn transport(out: &Output) -> Value {
    let line = text(&out.stdout)
        .lines()
        .find(|l| l.starts_with('{'))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no JSON line in: {}", text(&out.stdout)));
    let v: Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["verified"], Value::Bool(true), "{line}");
    v["transport"].clone()
}

#[test]
fn refused_sends_are_losses_the_rc_protocol_recovers() {
    if !ready() {
        return;
    }
    let (udp, tcp) = (24_870, 28_670);
    let g = Guard::create(udp);
    // WRITE: the client sends the data; READ: the server does (as READ responses).
    for (k, op) in ["write", "read"].into_iter().enumerate() {
        let (s, c) = pair(&g, op, udp, tcp + k as u16);
        assert!(
            s.status.success() && c.status.success(),
            "{op}: server {} / client {}\n--- server\n{}{}\n--- client\n{}{}",
            s.status,
            c.status,
            text(&s.stdout),
            text(&s.stderr),
            text(&c.stdout),
            text(&c.stderr)
        );
        // Both sides print `"verified":true` (checked by `transport`) and the plain line.
        for out in [&s, &c] {
            let all = text(&out.stdout) + &text(&out.stderr);
            assert!(all.contains("data verified: OK"), "{all}");
            transport(out);
        }
        let sender = if op == "write" { &c } else { &s };
        let t = transport(sender);
        let lost = t["tx_lost"].as_u64().expect("tx_lost");
        assert!(lost > 0, "{op}: 3% of the datagrams were dropped, none counted lost: {t}");
        assert_eq!(t["tx_errors"].as_u64(), Some(0), "{op}: {t}");
        note(&format!("netns_rdma_loss {op}: {lost} refused datagrams counted lost, recovered"));
    }
}
