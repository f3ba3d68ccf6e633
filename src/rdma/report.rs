//! The figures of a run (bandwidth, latency), as the client sends them to the server, and
//! their output on either side: perftest's table, or one JSON object per size.

use anyhow::{Result, bail};
use serde_json::json;

use super::args::RdmaOp;

/// perftest's result separator line.
const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
/// perftest's bandwidth header (MB/sec).
const RESULT_FMT: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
/// perftest's bandwidth header with `--report_gbits`.
const RESULT_FMT_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
/// perftest's latency header.
const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Figures of one bandwidth run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Bw {
    pub(super) peak: f64,
    pub(super) avg: f64,
    pub(super) mpps: f64,
}

/// Bandwidth from post and completion times (seconds since the first post): average over the
/// whole run, peak over windows of `window` consecutive completions.
pub(super) fn bw_figures(
    size: u32,
    first_post: f64,
    done: &[f64],
    window: usize,
    gbits: bool,
) -> Bw {
    let unit = |bytes: f64, secs: f64| {
        if gbits { bytes * 8.0 / 1e9 / secs } else { bytes / f64::from(1u32 << 20) / secs }
    };
    let n = done.len();
    let Some(&last) = done.last() else { return Bw { peak: 0.0, avg: 0.0, mpps: 0.0 } };
    let total = (last - first_post).max(1e-9);
    let bytes = f64::from(size) * n as f64;
    let avg = unit(bytes, total);
    let w = window.clamp(1, n);
    let mut peak: f64 = 0.0;
    let mut start = first_post;
    for chunk in done.chunks(w) {
        let end = chunk[chunk.len() - 1];
        let dt = end - start;
        if chunk.len() == w && dt > 0.0 {
            peak = peak.max(unit(f64::from(size) * w as f64, dt));
        }
        start = end;
    }
    Bw { peak: peak.max(avg), avg, mpps: n as f64 / total / 1e6 }
}

fn bw_row(size: u32, iters: u64, b: &Bw) -> String {
    format!(
        " {size:<7}    {iters:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        b.peak, b.avg, b.mpps
    )
}

/// Figures of one latency run, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Lat {
    min: f64,
    max: f64,
    typical: f64,
    avg: f64,
    stdev: f64,
    p99: f64,
    p999: f64,
}

pub(super) fn lat_figures(samples_us: &[f64]) -> Lat {
    let mut s = samples_us.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len().max(1);
    let get =
        |q: f64| s.get(((q * n as f64).ceil() as usize).clamp(1, n) - 1).copied().unwrap_or(0.0);
    let avg = s.iter().sum::<f64>() / n as f64;
    let var = s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    Lat {
        min: s.first().copied().unwrap_or(0.0),
        max: s.last().copied().unwrap_or(0.0),
        typical: s.get(s.len() / 2).copied().unwrap_or(0.0),
        avg,
        stdev: var.sqrt(),
        p99: get(0.99),
        p999: get(0.999),
    }
}

fn lat_row(size: u32, iters: u64, l: &Lat) -> String {
    format!(
        " {size:<7} {iters}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
    )
}

/// What one size produced, as sent from the client to the server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Figures {
    Bw(Bw),
    Lat(Lat),
}

impl Figures {
    pub(super) fn encode(&self) -> Vec<u64> {
        let v: Vec<f64> = match self {
            Figures::Bw(b) => vec![b.peak, b.avg, b.mpps],
            Figures::Lat(l) => vec![l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999],
        };
        v.into_iter().map(f64::to_bits).collect()
    }
    pub(super) fn decode(w: &[u64]) -> Result<Figures> {
        let f: Vec<f64> = w.iter().map(|&x| f64::from_bits(x)).collect();
        match f[..] {
            [peak, avg, mpps] => Ok(Figures::Bw(Bw { peak, avg, mpps })),
            [min, max, typical, avg, stdev, p99, p999] => {
                Ok(Figures::Lat(Lat { min, max, typical, avg, stdev, p99, p999 }))
            }
            _ => bail!("protocol error: {} figures", f.len()),
        }
    }
}

/// Prints the table (or JSON) on either side.
#[derive(Debug)]
pub(super) struct Report {
    pub(super) json: bool,
    pub(super) gbits: bool,
    pub(super) op: RdmaOp,
    pub(super) started: bool,
}

impl Report {
    pub(super) fn row(&mut self, size: u32, iters: u64, f: &Figures, extra: serde_json::Value) {
        if self.json {
            let mut v = match f {
                Figures::Bw(b) => json!({
                    "op": self.op.name(), "mode": "bw", "bytes": size, "iterations": iters,
                    "bw_peak": b.peak, "bw_avg": b.avg,
                    "bw_unit": if self.gbits { "Gb/sec" } else { "MB/sec" },
                    "msg_rate_mpps": b.mpps,
                }),
                Figures::Lat(l) => json!({
                    "op": self.op.name(), "mode": "lat", "bytes": size, "iterations": iters,
                    "t_min_us": l.min, "t_max_us": l.max, "t_typical_us": l.typical,
                    "t_avg_us": l.avg, "t_stdev_us": l.stdev, "p99_us": l.p99, "p999_us": l.p999,
                }),
            };
            if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
                o.extend(e);
            }
            println!("{v}");
            return;
        }
        if !self.started {
            self.started = true;
            println!("{RESULT_LINE}");
            match f {
                Figures::Bw(_) => {
                    println!("{}", if self.gbits { RESULT_FMT_G } else { RESULT_FMT })
                }
                Figures::Lat(_) => println!("{RESULT_FMT_LAT}"),
            }
        }
        match f {
            Figures::Bw(b) => println!("{}", bw_row(size, iters, b)),
            Figures::Lat(l) => println!("{}", lat_row(size, iters, l)),
        }
    }

    pub(super) fn end(&self, verified: Option<bool>) {
        if !self.json && self.started {
            println!("{RESULT_LINE}");
        }
        if verified == Some(true) {
            // JSON mode keeps stdout for JSON lines only.
            if self.json {
                eprintln!("data verified: OK");
            } else {
                println!("data verified: OK");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_row_matches_perftest_columns() {
        let b = Bw { peak: 1234.5, avg: 1000.25, mpps: 0.016004 };
        assert_eq!(
            bw_row(65536, 1000, &b),
            " 65536      1000             1234.50            1000.25\t\t   0.016004"
        );
    }

    #[test]
    fn bw_figures_average_and_peak() {
        // 4 completions of 1 MiB at 1, 2, 3, 3.5 s: 4 MiB in 3.5 s on average; the best
        // two-completion window is 2 MiB in 1.5 s.
        let done = [1.0, 2.0, 3.0, 3.5];
        let b = bw_figures(1 << 20, 0.0, &done, 2, false);
        assert!((b.avg - 4.0 / 3.5).abs() < 1e-9, "{b:?}");
        assert!((b.peak - 2.0 / 1.5).abs() < 1e-9, "{b:?}");
        let g = bw_figures(1 << 20, 0.0, &done, 2, true);
        assert!((g.avg - 4.0 * 8.0 * 1048576.0 / 1e9 / 3.5).abs() < 1e-9);
    }

    #[test]
    fn latency_percentiles() {
        let s: Vec<f64> = (1..=1000).map(f64::from).collect();
        let l = lat_figures(&s);
        assert_eq!((l.min, l.max, l.p99, l.p999), (1.0, 1000.0, 990.0, 999.0));
        assert_eq!(l.typical, 501.0);
        assert!((l.avg - 500.5).abs() < 1e-9);
    }
}
