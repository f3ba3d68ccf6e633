//! The server side of `snic rdma`: it accepts the client, takes its plan, and per size serves
//! the benchmark (the passive side, or its half of a ping-pong), checks the data it received
//! and sends its verdict.

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_json::json;
use snic_rdma::{Cqe, SendWr, WrOp};
use snic_time::Clock;
use std::time::Duration;

use super::args::{RdmaArgs, RdmaOp};
use super::blast::blast_server;
use super::ctrl::{Ctrl, accept, canonical, expect_tag, tag};
use super::plan::Plan;
use super::report::{Figures, Report};
use super::side::{Side, drive_until, post_recv, setup, wait_marker, wait_recv};
use super::takeover::{self, HandedOver, Phase};
use super::verify::{check_message, first_diff, lat_message, message};
use crate::handover::{Channel, ChannelListener};

pub(super) fn server(a: &RdmaArgs, timeout: Duration) -> Result<()> {
    ensure!(
        a.op != RdmaOp::Blast || (a.handover.is_none() && a.takeover.is_none()),
        "blast has no connection to hand over"
    );
    let r = match &a.takeover {
        // A server that takes over listens for the next one only once the old one is gone:
        // both may be given the same path.
        Some(path) => takeover::resume(a, path, timeout),
        None => serve_new(a, timeout, handover_listener(a)?),
    };
    match r {
        Err(e) if e.is::<HandedOver>() => {
            eprintln!("{e}");
            Ok(())
        }
        r => r,
    }
}

/// The listener of `--handover`, if given.
pub(super) fn handover_listener(a: &RdmaArgs) -> Result<Option<ChannelListener>> {
    match &a.handover {
        Some(p) => {
            let l = Channel::listen(p).with_context(|| format!("--handover {}", p.display()))?;
            Ok(Some(l))
        }
        None => Ok(None),
    }
}

/// A server of its own: it accepts the client and serves the whole run.
fn serve_new(a: &RdmaArgs, timeout: Duration, listener: Option<ChannelListener>) -> Result<()> {
    let stream = accept(a.tcp_port, a.ipv6, timeout)?;
    let local_ip = match a.local_ip {
        Some(ip) => ip,
        None => canonical(stream.local_addr()?.ip()),
    };
    let mut ctrl = Ctrl::new(stream, timeout)?;
    let hello = ctrl.recv_exact()?;
    let words: [u64; 8] =
        hello.as_slice().try_into().map_err(|_| anyhow!("protocol error: bad hello"))?;
    let plan = Plan::decode(&words)?;
    ensure!(
        plan.op == a.op,
        "the client runs `{}`, this server `{}`: start both with the same operation",
        plan.op.name(),
        a.op.name()
    );
    ensure!(plan.lat == a.lat, "the client and the server disagree on --lat");
    if plan.op == RdmaOp::Blast {
        return blast_server(ctrl, a, local_ip);
    }
    let mut side = setup(ctrl, plan, a, local_ip, false)?;
    side.listener = listener;
    if plan.op == RdmaOp::Send && !plan.lat {
        // One RECV per slot, reposted as each completes.
        for slot in 0..u64::from(plan.slots) {
            post_recv(&mut side, slot, plan.max_size)?;
        }
    }
    serve(side, a, Phase { round: None, all_ok: true }, None)
}

/// The server's loop over the sizes the client runs, from `at` (a fresh server: between
/// sizes; a server that took over: where the old one was). `handover`: the figures of the
/// takeover this process made, reported with the first size and at the end.
pub(super) fn serve(
    mut side: Side,
    a: &RdmaArgs,
    at: Phase,
    handover: Option<takeover::Gap>,
) -> Result<()> {
    let plan = side.plan;
    let mut rep = Report { json: a.json, gbits: a.report_gbits, op: a.op, started: false };
    let mut all_ok = at.all_ok;
    let mut resume = at.round;
    loop {
        let (size, iters, bad_at) = if let Some((size, iters)) = resume.take() {
            (size, iters, server_round_rest(&mut side, size, iters, all_ok)?)
        } else {
            side.phase = Some(Phase { round: None, all_ok });
            let m = side.drive_until_msg();
            side.phase = None;
            let m = m?;
            match m.first() {
                Some(&tag::END) => break,
                Some(&tag::RUN) if m.len() == 3 => {}
                _ => bail!("protocol error: unexpected message {m:?}"),
            }
            let size = u32::try_from(m[1]).ok().filter(|&s| s > 0 && s <= plan.max_size);
            let size = size.ok_or_else(|| anyhow!("protocol error: size {}", m[1]))?;
            let iters = m[2];
            ensure!(iters > 0, "protocol error: zero iterations");
            (size, iters, server_round(&mut side, size, iters, all_ok)?)
        };
        let m = side.ctrl.recv()?;
        expect_tag(&m, tag::RESULT)?;
        let figs = Figures::decode(&m[1..])?;
        let ok = bad_at.is_none();
        side.ctrl.send(&[tag::VERDICT, u64::from(ok), bad_at.unwrap_or(0)])?;
        let mut extra = json!({
            "verified": plan.verify.then_some(ok),
            "engine": side.rnic.stats(),
            "transport": side.tx.stats(),
        });
        if let Some(g) = &handover {
            extra["handover"] = g.json(side.rnic.stats());
        }
        rep.row(size, iters, &figs, extra);
        if plan.verify && !ok {
            all_ok = false;
            eprintln!("data verification FAILED at {size} bytes (offset {bad_at:?})");
        }
    }
    rep.end(plan.verify.then_some(all_ok));
    if let Some(g) = &handover {
        eprintln!("{}", g.summary(side.rnic.stats()));
    }
    ensure!(all_ok, "data verification failed");
    Ok(())
}

/// One size at the server. Returns the first bad offset found by verification, if any.
/// `all_ok`: the sizes so far verified (carried by a takeover).
fn server_round(s: &mut Side, size: u32, iters: u64, all_ok: bool) -> Result<Option<u64>> {
    let plan = s.plan;
    for slot in 0..u64::from(plan.buf_slots()) {
        let addr = s.slot_addr(slot);
        let m = match plan.op {
            // READ sources: slot s holds message(s, s).
            RdmaOp::Read if !plan.lat => message(slot, slot, size),
            RdmaOp::Read => message(0, 0, size),
            _ => vec![0u8; size as usize],
        };
        s.mem_write(addr, &m)?;
    }
    if plan.op == RdmaOp::Atomic {
        s.mem_write(s.mr.addr, &0u64.to_le_bytes())?;
    }
    s.ctrl.send(&[tag::READY])?;
    s.touch();
    server_round_rest(s, size, iters, all_ok)
}

/// Whether a server may hand over in the middle of a size of `plan` (while the client
/// drives and the server's responder serves it: WRITE, READ, atomics in bandwidth mode).
pub(super) fn round_hands_over(plan: &Plan) -> bool {
    !plan.lat && matches!(plan.op, RdmaOp::Write | RdmaOp::Read | RdmaOp::Atomic)
}

/// A size at the server from the client's start on (the buffers filled and READY sent).
fn server_round_rest(s: &mut Side, size: u32, iters: u64, all_ok: bool) -> Result<Option<u64>> {
    let plan = s.plan;
    let slots = u64::from(plan.slots);
    let mut bad: Option<u64> = None;
    if plan.lat && matches!(plan.op, RdmaOp::Write | RdmaOp::Send) {
        // The ping-pong ends with both sides' DONE.
        server_pong(s, size, iters)?;
    } else if plan.op == RdmaOp::Send {
        // Check every message as it lands, then give its slot back.
        let mut k = 0u64;
        let mut got: Vec<Cqe> = Vec::new();
        // Slot bodies computed once per size: checking must keep up with the wire, or the
        // socket overflows and the sender retransmits.
        let bodies: Vec<Vec<u8>> = if plan.verify {
            (0..slots).map(|slot| message(0, slot, size)).collect()
        } else {
            Vec::new()
        };
        drive_until(s, |s| {
            let n = s.poll(s.rcq)?;
            got.clear();
            got.extend_from_slice(&s.cqes[..n]);
            for c in &got {
                ensure!(c.byte_len == size, "received {} bytes, expected {size}", c.byte_len);
                if plan.verify && bad.is_none() {
                    let mem = s.mem_read(s.slot_addr(c.wr_id), size as usize)?;
                    bad = check_message(mem, k, &bodies[(k % slots) as usize])
                        .map(|o| k * u64::from(size) + o as u64);
                }
                post_recv(s, c.wr_id, plan.max_size)?;
                k += 1;
            }
            let _ = s.poll(s.scq)?;
            Ok(k >= iters)
        })?;
        let m = s.drive_until_msg()?;
        expect_tag(&m, tag::DONE)?;
        s.ctrl.send(&[tag::DONE])?;
        return Ok(bad);
    } else {
        // The client drives; serve until it is done.
        if round_hands_over(&plan) {
            s.phase = Some(Phase { round: Some((size, iters)), all_ok });
        }
        let m = s.drive_until_msg();
        s.phase = None;
        let m = m?;
        expect_tag(&m, tag::DONE)?;
        s.ctrl.send(&[tag::DONE])?;
    }
    if !plan.verify {
        return Ok(None);
    }
    match plan.op {
        RdmaOp::Write if !plan.lat => {
            for slot in 0..slots.min(iters) {
                let last = slot + slots * ((iters - 1 - slot) / slots);
                let want = message(last, slot, size);
                let got = s.mem_read(s.slot_addr(slot), size as usize)?;
                if let Some(o) = first_diff(got, &want) {
                    bad = Some(slot * plan.stride + o as u64);
                    break;
                }
            }
        }
        RdmaOp::Write | RdmaOp::Send => {
            let want = lat_message(iters - 1, size);
            let got = s.mem_read(s.slot_addr(0), size as usize)?;
            bad = first_diff(got, &want).map(|o| o as u64);
        }
        RdmaOp::Atomic => {
            let v = u64::from_le_bytes(s.mem_read(s.mr.addr, 8)?.try_into()?);
            if v != iters {
                eprintln!("atomic counter is {v}, expected {iters}");
                bad = Some(0);
            }
        }
        _ => {}
    }
    Ok(bad)
}

/// The server's half of a WRITE or SEND ping-pong: wait for ping `i`, answer with pong `i`.
fn server_pong(s: &mut Side, size: u32, iters: u64) -> Result<()> {
    let last = u64::from(size.max(1)) - 1;
    let send = s.plan.op == RdmaOp::Send;
    if send {
        post_recv(s, 0, size)?;
    }
    let base = s.sends_done;
    for i in 0..iters {
        if send {
            wait_recv(s, size)?;
            post_recv(s, 0, size)?;
        } else {
            let at = s.slot_addr(0) + last;
            wait_marker(s, at, i)?;
        }
        let m = lat_message(i, size);
        let src = s.slot_addr(1);
        s.mem_write(src, &m)?;
        let op = if send { WrOp::Send } else { WrOp::Write { remote: s.remote(0) } };
        let wr = SendWr::new(i, op, s.sge(1, size));
        let now = s.clock.now();
        s.rnic.post_send(s.qpn, &wr, now).map_err(|e| anyhow!("post_send: {e}"))?;
        let _ = s.poll(s.scq)?;
    }
    let want = base + iters;
    drive_until(s, |s| {
        s.poll(s.scq)?;
        Ok(s.sends_done >= want)
    })?;
    s.finish()
}
