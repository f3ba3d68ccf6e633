//! The plot of a scenario run (`snic tour --plot`): throughput of every link direction over
//! simulated time (top) and completions per bucket of every CQ (bottom), from the report's
//! time series. SVG, or PNG when the path ends in `.png`.
//!
//! Text uses the font `snic dma sweep` finds (`SNIC_PLOT_FONT` or a usual system path);
//! without one the plot is drawn without text and [`Plotted::note`] says why.

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use snic_scenario::report::Series;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Line colours, cycled.
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// What [`plot`] wrote.
#[derive(Debug, Clone)]
pub struct Plotted {
    /// The file.
    pub path: PathBuf,
    /// Whether text (titles, labels, legends) was drawn.
    pub text: bool,
    /// Why not, when not.
    pub note: String,
}

/// The time axis: a unit that keeps the numbers readable, and its size in nanoseconds.
fn time_unit(span_ns: u64) -> (&'static str, f64) {
    if span_ns >= 2_000_000 { ("ms", 1e6) } else { ("us", 1e3) }
}

/// One panel's lines: (label, points (x in the time unit, y)).
type Lines = Vec<(String, Vec<(f64, f64)>)>;

fn lines(
    series: &BTreeMap<String, Vec<u64>>,
    interval_ns: u64,
    buckets: usize,
    per: f64,
    y: impl Fn(u64) -> f64,
) -> Lines {
    series
        .iter()
        .map(|(name, v)| {
            let pts = v
                .iter()
                .enumerate()
                .take(buckets)
                .map(|(i, &b)| ((i as u64 * interval_ns) as f64 / per, y(b)))
                .collect();
            (name.clone(), pts)
        })
        .collect()
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    x_desc: &str,
    data: &Lines,
    x_max: f64,
    text: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plotting: {x}");
    let y_max =
        data.iter().flat_map(|(_, p)| p.iter().map(|&(_, y)| y)).fold(0.0f64, f64::max).max(1.0)
            * 1.1;
    let mut b = ChartBuilder::on(area);
    b.margin(12);
    if text {
        b.caption(title, ("sans-serif", 20)).x_label_area_size(40).y_label_area_size(64);
    }
    let mut chart = b.build_cartesian_2d(0.0..x_max.max(1e-9), 0.0..y_max).map_err(e)?;
    if text {
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(e)?;
    } else {
        chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(e)?;
    }
    for (i, (name, pts)) in data.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let s = chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(e)?;
        if text {
            s.label(name.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    if text && !data.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    series: &Series,
    text: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plotting: {x}");
    root.fill(&WHITE).map_err(e)?;
    let root = if text { root.titled(title, ("sans-serif", 24)).map_err(e)? } else { root };
    let interval = series.interval_ns.max(1);
    // A run often ends long after its last packet (a time limit, timers): plot up to a little
    // after the last bucket with anything in it.
    let all = || series.links.values().chain(series.completions.values());
    let len = all().map(Vec::len).max().unwrap_or(0);
    let active = all().filter_map(|v| v.iter().rposition(|&x| x != 0)).max();
    let buckets = active.map_or(len, |last| (last + 1 + (last + 1) / 10 + 1).min(len));
    let span = buckets as u64 * interval;
    let (unit, per) = time_unit(span);
    let x_max = span as f64 / per;
    // Bytes per bucket to Mbit/s: bytes * 8 bits / interval ns * 1e3.
    let mbps = |b: u64| b as f64 * 8e3 / interval as f64;
    let links = lines(&series.links, interval, buckets, per, mbps);
    let cqes = lines(&series.completions, interval, buckets, per, |n| n as f64);
    let areas = root.split_evenly((2, 1));
    let x_desc = format!("simulated time ({unit})");
    panel(&areas[0], "throughput per link direction", "Mbit/s", &x_desc, &links, x_max, text)?;
    let per_bucket = format!("CQEs per {}", snic_scenario::schema::SimTime(interval));
    panel(&areas[1], "completions per CQ", &per_bucket, &x_desc, &cqes, x_max, text)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Draw `series` into `path` (PNG when it ends in `.png`, else SVG).
pub fn plot(series: &Series, title: &str, path: &Path) -> Result<Plotted> {
    let (text, note) = match crate::dma::plot::font() {
        Ok(_) => (true, String::new()),
        Err(why) => (false, why.clone()),
    };
    let size = (900, 720);
    let png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if png {
        draw(BitMapBackend::new(path, size).into_drawing_area(), title, series, text)?;
    } else {
        draw(SVGBackend::new(path, size).into_drawing_area(), title, series, text)?;
    }
    Ok(Plotted { path: path.to_path_buf(), text, note })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series() -> Series {
        let mut s = Series { interval_ns: 100_000, ..Series::default() };
        s.links.insert("wire a->b".into(), vec![0, 12_500, 25_000, 12_500]);
        s.links.insert("wire b->a".into(), vec![0, 640, 640, 0]);
        s.completions.insert("h0.cq".into(), vec![0, 3, 5, 1]);
        s
    }

    #[test]
    fn svg_and_png_are_written_from_a_hand_made_series() {
        let dir = std::env::temp_dir().join(format!("snic-scen-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let svg = dir.join("p.svg");
        let p = plot(&series(), "test", &svg).expect("plots");
        let text = std::fs::read_to_string(&p.path).expect("svg written");
        assert!(text.starts_with("<svg") || text.starts_with("<?xml"), "{}", &text[..40]);
        // Three lines: two links and one CQ.
        assert!(text.matches("<polyline").count() >= 3, "{text}");
        let png = dir.join("p.png");
        plot(&series(), "test", &png).expect("plots");
        let bytes = std::fs::read(&png).expect("png written");
        assert_eq!(&bytes[1..4], b"PNG");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_empty_series_still_draws_axes() {
        let dir = std::env::temp_dir().join(format!("snic-scen-plot0-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let svg = dir.join("e.svg");
        plot(&Series::default(), "empty", &svg).expect("plots");
        assert!(std::fs::metadata(&svg).expect("written").len() > 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn throughput_is_in_mbit_per_second() {
        let s = series();
        let l = lines(&s.links, s.interval_ns, 4, 1e3, |b| b as f64 * 8e3 / s.interval_ns as f64);
        // 12,500 bytes in 100 us is 1 Gbit/s.
        assert_eq!(l[0].1[1], (100.0, 1000.0));
    }
}
