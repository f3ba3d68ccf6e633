//! `snic rdma`: perftest-style RDMA benchmarks between two snic processes over RoCEv2 on UDP.
//!
//! `snic rdma write|read|send|atomic --server` on one side, `... --client ADDR` on the other, as
//! `ib_write_bw` / `ib_read_lat` / ... do. The two processes meet on a TCP socket (perftest's
//! port 18515 by default): the client tells the server what to run (operation, sizes, iterations,
//! buffer layout), both exchange their QP information ([`snic_roce::cm`]), connect their QPs
//! and then drive their [`Rnic`](snic_rdma::Rnic) over a
//! [`RoceTransport`](snic_roce::transport::RoceTransport) on the real monotonic clock. The client
//! is the active side in bandwidth mode (the server's responder serves it); in latency mode
//! WRITE and SEND ping-pong between the two. After every size the client reports its figures to
//! the server and the side that received the data checks it: `data verified: OK`, or exit code 1.
//!
//! `blast` runs the raw UDP ceiling ([`snic_roce::blast`]) with the same sizes and batching and
//! prints the same table, so scripts can compare the engine with the socket layer side by side.
//!
//! Output follows perftest's header and column formats; `--json` prints one JSON object per
//! size instead. Nothing here waits forever: every wait is bounded by `--timeout` of inactivity.
//!
//! Files: [`args`] (command line), `plan` (what the client asks for), `ctrl` (the TCP control
//! connection), `side` (NIC, transport and QP of one side, and the loops that drive them),
//! `client` and `server` (the rounds of each side), `verify` (data patterns and checks),
//! `report` (figures and their output), `blast` (the raw UDP ceiling), `takeover` (a new
//! server process taking over a running one's connection: `--handover` / `--takeover`).

pub mod args;
mod blast;
mod client;
mod ctrl;
mod plan;
mod report;
mod server;
mod side;
mod takeover;
mod verify;

use anyhow::Result;
use std::time::Duration;

use args::RdmaArgs;
use client::client;
use server::server;

/// Run `snic rdma`.
pub fn run(args: RdmaArgs) -> Result<()> {
    let timeout = Duration::from_secs_f64(args.timeout);
    if args.server { server(&args, timeout) } else { client(&args, timeout) }
}
