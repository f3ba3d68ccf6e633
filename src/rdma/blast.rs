//! `snic rdma blast`: the raw UDP ceiling ([`snic_roce::blast`]) with the sizes and
//! batching of a RoCE run, reported in the same table.

use anyhow::{Context, Result, anyhow, bail};
use serde_json::json;
use snic_roce::blast::{BlastReceiver, BlastReport, BlastTarget, blast_send};
use snic_roce::transport::TransportOpts;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::args::{RdmaArgs, sizes};
use super::ctrl::{Ctrl, expect_tag, tag};
use super::report::{Bw, Figures, Report};

/// Datagrams of one message and the UDP payload of each, as the engine would send it: BTH (12)
/// + up to one MTU of payload + ICRC (4); the first packet's RETH is left out.
fn blast_shape(size: u32, mtu: u32) -> (u64, usize) {
    let per = u64::from(size.div_ceil(mtu).max(1));
    (per, 16 + size.min(mtu) as usize)
}

pub(super) fn blast_client(
    mut ctrl: Ctrl,
    a: &RdmaArgs,
    local_ip: IpAddr,
    server: IpAddr,
) -> Result<()> {
    let mut rep = Report { json: a.json, gbits: a.report_gbits, op: a.op, started: false };
    // The RoCE transport's sendmmsg batch, so both sides of the comparison batch alike.
    let batch = TransportOpts::default().batch;
    let dst = SocketAddr::new(server, a.port);
    let mtu = a.mtu_towards(server)?;
    for size in sizes(a) {
        let (per, dgram) = blast_shape(size, mtu);
        let count = per.saturating_mul(a.iters);
        ctrl.send(&[tag::RUN, u64::from(size), a.iters])?;
        expect_tag(&ctrl.recv()?, tag::READY)?;
        let sent = blast_send(SocketAddr::new(local_ip, 0), dst, dgram, count, batch, !a.no_gso)
            .with_context(|| format!("UDP blast to {dst}"))?;
        ctrl.send(&[tag::DONE, sent.datagrams, sent.elapsed_ns])?;
        let m = ctrl.recv()?;
        expect_tag(&m, tag::VERDICT)?;
        let got = BlastReport {
            datagrams: m.get(1).copied().unwrap_or(0),
            bytes: m.get(2).copied().unwrap_or(0),
            elapsed_ns: sent.elapsed_ns,
        };
        let figs = Figures::Bw(blast_figures(size, per, &got, a.report_gbits));
        let mut msg = vec![tag::RESULT];
        msg.extend(figs.encode());
        ctrl.send(&msg)?;
        let extra = json!({ "sent": sent, "received": got, "lost": count - got.datagrams.min(count),
                            "datagram_bytes": dgram, "gso": !a.no_gso });
        rep.row(size, a.iters, &figs, extra);
    }
    ctrl.send(&[tag::END])?;
    rep.end(None);
    Ok(())
}

/// Message-equivalent figures of a blast: whole messages delivered over the sender's time.
fn blast_figures(size: u32, per: u64, got: &BlastReport, gbits: bool) -> Bw {
    let secs = (got.elapsed_ns as f64 / 1e9).max(1e-9);
    let msgs = (got.datagrams / per.max(1)) as f64;
    let bytes = msgs * f64::from(size);
    let avg = if gbits { bytes * 8.0 / 1e9 / secs } else { bytes / f64::from(1u32 << 20) / secs };
    // One measurement window only: the peak is the average.
    Bw { peak: avg, avg, mpps: msgs / secs / 1e6 }
}

pub(super) fn blast_server(mut ctrl: Ctrl, a: &RdmaArgs, local_ip: IpAddr) -> Result<()> {
    let bind = SocketAddr::new(local_ip, a.port);
    let mut rx = BlastReceiver::bind(bind, !a.no_gso).with_context(|| format!("bind {bind}"))?;
    let mut rep = Report { json: a.json, gbits: a.report_gbits, op: a.op, started: false };
    let mtu = a.mtu_towards(ctrl.s.peer_addr().context("control connection")?.ip())?;
    loop {
        let m = ctrl.recv()?;
        match m.first() {
            Some(&tag::END) => break,
            Some(&tag::RUN) if m.len() == 3 => {}
            _ => bail!("protocol error: unexpected message {m:?}"),
        }
        let size = u32::try_from(m[1]).map_err(|_| anyhow!("protocol error: size"))?;
        let iters = m[2];
        let (per, _) = blast_shape(size, mtu);
        let count = per.saturating_mul(iters);
        ctrl.send(&[tag::READY])?;
        let mut got = BlastReport::default();
        let mut sender_done = false;
        let started = std::time::Instant::now();
        while got.datagrams < count {
            let left = count - got.datagrams;
            // Short slices so the control socket is looked at: the sender's DONE ends the wait
            // for datagrams the kernel dropped.
            let wait =
                if sender_done { Duration::from_millis(200) } else { Duration::from_millis(10) };
            let r = rx.run(BlastTarget::Datagrams(left), wait).context("UDP blast receive")?;
            got.datagrams += r.datagrams;
            got.bytes += r.bytes;
            if sender_done && r.datagrams == 0 {
                break;
            }
            if !sender_done {
                if let Some(m) = ctrl.try_recv()? {
                    expect_tag(&m, tag::DONE)?;
                    sender_done = true;
                } else if started.elapsed() > ctrl.timeout {
                    bail!("the blast did not end within {:?}", ctrl.timeout);
                }
            }
        }
        if !sender_done {
            expect_tag(&ctrl.recv()?, tag::DONE)?;
        }
        ctrl.send(&[tag::VERDICT, got.datagrams, got.bytes])?;
        let m = ctrl.recv()?;
        expect_tag(&m, tag::RESULT)?;
        let figs = Figures::decode(&m[1..])?;
        let extra = json!({ "received": got, "lost": count - got.datagrams.min(count) });
        rep.row(size, iters, &figs, extra);
    }
    rep.end(None);
    Ok(())
}
