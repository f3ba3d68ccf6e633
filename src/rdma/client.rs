//! The client side of `snic rdma`: it connects, sends the plan, and per size runs the
//! benchmark as the active side (bandwidth: a window of posted WRs; latency: ping-pong or one
//! request at a time), then exchanges figures and verdicts with the server.

use anyhow::{Context, Result, anyhow, ensure};
use serde_json::json;
use snic_rdma::{Remote, SendWr, WrOp};
use snic_time::Clock;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::args::{RdmaArgs, RdmaOp, sizes};
use super::blast::blast_client;
use super::ctrl::{Ctrl, canonical, connect, expect_tag, resolve, tag};
use super::plan::Plan;
use super::report::{Figures, Report, bw_figures, lat_figures};
use super::side::{Side, drive_until, post_recv, setup, wait_marker, wait_recv};
use super::verify::{header, lat_message, message};

pub(super) fn client(a: &RdmaArgs, timeout: Duration) -> Result<()> {
    let host = a.client.as_deref().ok_or_else(|| anyhow!("--client ADDR or --server"))?;
    let server = resolve(host, a.tcp_port, a.ipv6)?;
    let stream = connect(server, timeout)?;
    // Both processes bind the RoCE UDP port. On IPv4 loopback a second loopback address keeps
    // them apart; elsewhere (IPv6 loopback has only ::1) they share the address and port (see
    // `setup`).
    let local_ip = match a.local_ip {
        Some(ip) => ip,
        None if server.ip().is_loopback() && server.is_ipv4() => {
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))
        }
        None => canonical(stream.local_addr()?.ip()),
    };
    let mut ctrl = Ctrl::new(stream, timeout)?;
    let plan = Plan::new(a);
    ctrl.send(&plan.encode())?;
    if a.op == RdmaOp::Blast {
        return blast_client(ctrl, a, local_ip, server.ip());
    }
    let mut side = setup(ctrl, plan, a, local_ip, true)?;
    let mut rep = Report { json: a.json, gbits: a.report_gbits, op: a.op, started: false };
    let mut all_ok = true;
    for size in sizes(a) {
        side.ctrl.send(&[tag::RUN, u64::from(size), a.iters])?;
        let m = side.ctrl.recv()?;
        expect_tag(&m, tag::READY)?;
        side.touch();
        let (figs, local_ok) = client_round(&mut side, a, size)?;
        side.finish()?;
        let mut msg = vec![tag::RESULT];
        msg.extend(figs.encode());
        side.ctrl.send(&msg)?;
        let v = side.ctrl.recv()?;
        expect_tag(&v, tag::VERDICT)?;
        let remote_ok = v.get(1) == Some(&1);
        let ok = local_ok.unwrap_or(true) && remote_ok;
        let extra = json!({
            "verified": plan.verify.then_some(ok),
            "engine": side.rnic.stats(),
            "transport": side.tx.stats(),
        });
        rep.row(size, a.iters, &figs, extra);
        if plan.verify && !ok {
            all_ok = false;
            let whose = if remote_ok { "client" } else { "server" };
            let at = if remote_ok { None } else { v.get(2).copied() };
            eprintln!("data verification FAILED at {size} bytes ({whose} side, offset {at:?})");
        }
    }
    side.ctrl.send(&[tag::END])?;
    rep.end(plan.verify.then_some(all_ok));
    ensure!(all_ok, "data verification failed");
    Ok(())
}

/// One size at the client. Returns the figures and the client's own verification (READ and
/// atomics check at the client; `None` when nothing is checked here).
fn client_round(s: &mut Side, a: &RdmaArgs, size: u32) -> Result<(Figures, Option<bool>)> {
    let slots = u64::from(s.plan.slots);
    // Fresh slot bodies each size; READ destinations cleared so stale data cannot pass.
    for slot in 0..u64::from(s.plan.buf_slots()) {
        let addr = s.slot_addr(slot);
        let m = if s.plan.op == RdmaOp::Read {
            vec![0u8; size as usize]
        } else {
            message(0, slot, size)
        };
        s.mem_write(addr, &m)?;
    }
    if s.plan.lat {
        return client_lat(s, a, size);
    }
    let depth = u64::from(a.tx_depth.min(s.plan.slots)).max(1);
    let batch = u64::from(a.batch).min(depth);
    let iters = a.iters;
    let mut done = Vec::with_capacity(iters as usize);
    let mut wrs: Vec<SendWr> = Vec::with_capacity(batch as usize);
    let (mut posted, mut completed) = (0u64, 0u64);
    let mut local_ok = true;
    let checks = s.plan.verify;
    let t0 = s.clock.now();
    let secs = |t: snic_time::Instant| (t - t0).as_secs_f64();
    while completed < iters {
        while posted < iters && posted - completed + batch.min(iters - posted) <= depth {
            let n = batch.min(iters - posted);
            wrs.clear();
            for i in posted..posted + n {
                let slot = i % slots;
                let op = match s.plan.op {
                    RdmaOp::Write => WrOp::Write { remote: s.remote(slot) },
                    RdmaOp::Read => WrOp::Read { remote: s.remote(slot) },
                    RdmaOp::Send => WrOp::Send,
                    _ => atomic_op(s, i),
                };
                if matches!(s.plan.op, RdmaOp::Write | RdmaOp::Send) {
                    let h = header(i, size);
                    let addr = s.slot_addr(slot);
                    s.mem_write(addr, &h[..h.len().min(size as usize)])?;
                }
                let len = if s.plan.op == RdmaOp::Atomic { 8 } else { size };
                wrs.push(SendWr::new(i, op, s.sge(slot, len)));
            }
            let now = s.clock.now();
            s.rnic.post_send_batch(s.qpn, &wrs, now).map_err(|e| anyhow!("post_send: {e}"))?;
            // The doorbell: the NIC fetches the new WQEs and transmits what it can now (one
            // transport pass, i.e. one sendmmsg). With `--batch N` this happens once per N
            // WQEs, as RecoNIC's batch mode rings one doorbell per batch.
            s.tx.send(&mut s.rnic, now).context("RoCE send")?;
            posted += n;
        }
        let busy = s.progress()?;
        let n = s.poll(s.scq)?;
        if n > 0 {
            let t = secs(s.clock.now());
            for k in 0..n {
                let c = s.cqes[k];
                ensure!(
                    c.wr_id == completed,
                    "completion out of order: {} for {completed}",
                    c.wr_id
                );
                if s.plan.op == RdmaOp::Atomic && checks {
                    // The original value is the chain's position: every atomic ran once, in order.
                    let got = u64::from_le_bytes(
                        s.mem_read(s.slot_addr(completed % slots), 8)?.try_into()?,
                    );
                    if got != completed {
                        local_ok = false;
                    }
                }
                completed += 1;
                done.push(t);
            }
        } else if !busy {
            s.idle()?;
        }
    }
    if s.plan.op == RdmaOp::Read && checks {
        for slot in 0..slots.min(iters) {
            let want = message(slot, slot, size);
            if s.mem_read(s.slot_addr(slot), size as usize)? != &want[..] {
                local_ok = false;
            }
        }
    }
    let bw = bw_figures(size, 0.0, &done, depth as usize, a.report_gbits);
    let own = matches!(s.plan.op, RdmaOp::Read | RdmaOp::Atomic) && checks;
    Ok((Figures::Bw(bw), own.then_some(local_ok)))
}

fn atomic_op(s: &Side, i: u64) -> WrOp {
    let remote = Remote { addr: s.remote.addr, rkey: s.remote.rkey };
    if s.plan.cmp_swap {
        WrOp::CmpSwap { remote, compare: i, swap: i + 1 }
    } else {
        WrOp::FetchAdd { remote, add: 1 }
    }
}

fn client_lat(s: &mut Side, a: &RdmaArgs, size: u32) -> Result<(Figures, Option<bool>)> {
    let iters = a.iters;
    let mut samples = Vec::with_capacity(iters as usize);
    let mut local_ok = true;
    let checks = s.plan.verify;
    let last = u64::from(size.max(1)) - 1;
    if s.plan.op == RdmaOp::Send {
        post_recv(s, 0, size)?;
    }
    let base = s.sends_done;
    for i in 0..iters {
        let t0 = s.clock.now();
        match s.plan.op {
            RdmaOp::Write | RdmaOp::Send => {
                // Slot 1 is the source, slot 0 receives the peer's pong.
                let m = lat_message(i, size);
                let src = s.slot_addr(1);
                s.mem_write(src, &m)?;
                let op = if s.plan.op == RdmaOp::Write {
                    WrOp::Write { remote: s.remote(0) }
                } else {
                    WrOp::Send
                };
                let wr = SendWr::new(i, op, s.sge(1, size));
                s.rnic.post_send(s.qpn, &wr, t0).map_err(|e| anyhow!("post_send: {e}"))?;
                if s.plan.op == RdmaOp::Write {
                    let at = s.slot_addr(0) + last;
                    wait_marker(s, at, i)?;
                } else {
                    wait_recv(s, size)?;
                    post_recv(s, 0, size)?;
                }
            }
            _ => {
                let op = match s.plan.op {
                    RdmaOp::Read => WrOp::Read { remote: s.remote(0) },
                    _ => atomic_op(s, i),
                };
                let len = if s.plan.op == RdmaOp::Atomic { 8 } else { size };
                let wr = SendWr::new(i, op, s.sge(0, len));
                s.rnic.post_send(s.qpn, &wr, t0).map_err(|e| anyhow!("post_send: {e}"))?;
                let mut got = 0;
                drive_until(s, |s| {
                    got += s.poll(s.scq)?;
                    Ok(got > 0)
                })?;
                if s.plan.op == RdmaOp::Atomic && checks {
                    let v = u64::from_le_bytes(s.mem_read(s.slot_addr(0), 8)?.try_into()?);
                    local_ok &= v == i;
                }
            }
        }
        let dt = (s.clock.now() - t0).as_secs_f64() * 1e6;
        // Ping-pongs measure a round trip; perftest reports half of it.
        samples.push(if matches!(s.plan.op, RdmaOp::Write | RdmaOp::Send) { dt / 2.0 } else { dt });
    }
    // Every ping must complete (be acknowledged) before the round ends.
    let want = base + iters;
    drive_until(s, |s| {
        s.poll(s.scq)?;
        Ok(s.sends_done >= want)
    })?;
    if checks {
        match s.plan.op {
            RdmaOp::Write | RdmaOp::Send => {
                let want = lat_message(iters - 1, size);
                local_ok &= s.mem_read(s.slot_addr(0), size as usize)? == &want[..];
            }
            RdmaOp::Read => {
                let want = message(0, 0, size);
                local_ok &= s.mem_read(s.slot_addr(0), size as usize)? == &want[..];
            }
            _ => {}
        }
    }
    Ok((Figures::Lat(lat_figures(&samples)), checks.then_some(local_ok)))
}
