//! Plots of a sweep: bandwidth vs transfer size (log2 axis), one line per channel count, one
//! panel per (direction, memory, completion), as SVG and PNG.
//!
//! Text needs a font: one TrueType file is loaded at run time from `SNIC_PLOT_FONT` or a
//! usual system path (Debian's fonts-dejavu-core provides DejaVuSans). Without one, the plots
//! are drawn without any text (lines and grid only) and the caller says so.

use super::point::Point;
use super::size_label;
use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Font files tried in order (after `SNIC_PLOT_FONT`).
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Line colours by channel count (1..4).
const COLORS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(148, 103, 189)];

/// What [`plot`] wrote.
#[derive(Debug, Clone)]
pub struct PlotReport {
    /// The SVG file.
    pub svg: PathBuf,
    /// The PNG file.
    pub png: PathBuf,
    /// Whether text (titles, labels, legend) was drawn.
    pub text: bool,
    /// Why not, when not.
    pub note: String,
}

/// Register a font as "sans-serif" once; Ok(path) or Err(why not).
pub(crate) fn font() -> &'static std::result::Result<String, String> {
    static FONT: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let env = std::env::var("SNIC_PLOT_FONT").ok();
        if env.as_deref() == Some("none") {
            return Err("SNIC_PLOT_FONT=none".into());
        }
        let candidates: Vec<String> =
            env.into_iter().chain(FONT_PATHS.iter().map(|s| s.to_string())).collect();
        for p in &candidates {
            let Ok(bytes) = std::fs::read(p) else { continue };
            // plotters keeps fonts for the life of the process; this happens once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Ok(p.clone());
            }
        }
        Err(format!(
            "no usable font file (tried {}; install fonts-dejavu-core or set SNIC_PLOT_FONT)",
            candidates.join(", ")
        ))
    })
}

/// The (direction, memory, completion) panels present, in first-seen order.
fn panels(points: &[Point]) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut v = Vec::new();
    for p in points {
        let k = (p.dir, p.mem, p.completion);
        if !v.contains(&k) {
            v.push(k);
        }
    }
    v
}

fn grid(n: usize) -> (usize, usize) {
    let cols = if n > 1 { 2 } else { 1 };
    (n.div_ceil(cols).max(1), cols)
}

/// Draw every panel on `root`.
fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    points: &[Point],
    text: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plotting: {x}");
    root.fill(&WHITE).map_err(e)?;
    let root = if text {
        root.titled("snic DMA bandwidth vs transfer size", ("sans-serif", 26)).map_err(e)?
    } else {
        root
    };
    let keys = panels(points);
    let (rows, cols) = grid(keys.len());
    let areas = root.split_evenly((rows, cols));
    let min_size = points.iter().map(|p| p.size).min().unwrap_or(64).max(1);
    let max_size = points.iter().map(|p| p.size).max().unwrap_or(1 << 20).max(min_size);
    let (x0, x1) = ((min_size as f64).log2(), (max_size as f64).log2());
    let (x0, x1) = if x1 > x0 { (x0 - 0.25, x1 + 0.25) } else { (x0 - 1.0, x1 + 1.0) };
    for (area, &(dir, mem, comp)) in areas.iter().zip(&keys) {
        // Each panel has its own bandwidth scale (as the paper's figures).
        let ymax = points
            .iter()
            .filter(|p| (p.dir, p.mem, p.completion) == (dir, mem, comp))
            .map(|p| p.gbps)
            .fold(0.0f64, f64::max)
            .max(0.01)
            * 1.1;
        let mut b = ChartBuilder::on(area);
        b.margin(12);
        if text {
            b.caption(format!("{} {mem}, {comp}", dir.to_uppercase()), ("sans-serif", 20))
                .x_label_area_size(42)
                .y_label_area_size(58);
        }
        let mut chart = b.build_cartesian_2d(x0..x1, 0.0..ymax).map_err(e)?;
        if text {
            chart
                .configure_mesh()
                .x_desc("transfer size (bytes)")
                .y_desc("bandwidth (GB/s)")
                .x_labels(((x1 - x0) as usize + 1).min(12))
                .x_label_formatter(&|x| size_label(x.round().exp2() as u64))
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(e)?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(e)?;
        }
        for n in 1..=4u8 {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| (p.dir, p.mem, p.completion) == (dir, mem, comp) && p.channels == n)
                .map(|p| ((p.size as f64).log2(), p.gbps))
                .collect();
            if pts.is_empty() {
                continue;
            }
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let color = COLORS[usize::from(n - 1)];
            let series = chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(e)?;
            if text {
                series
                    .label(if n == 1 { "1 channel".to_string() } else { format!("{n} channels") })
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
            chart
                .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
                .map_err(e)?;
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(e)?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Write `PREFIX.svg` and `PREFIX.png`.
pub fn plot(points: &[Point], prefix: &Path) -> Result<PlotReport> {
    if points.is_empty() {
        return Err(anyhow!("nothing to plot: the sweep has no points"));
    }
    let (text, note) = match font() {
        Ok(_) => (true, String::new()),
        Err(why) => (false, why.clone()),
    };
    let with_ext = |ext: &str| {
        let mut s = prefix.as_os_str().to_owned();
        s.push(ext);
        PathBuf::from(s)
    };
    let svg = with_ext(".svg");
    let png = with_ext(".png");
    let (rows, cols) = grid(panels(points).len());
    let size = (560 * cols as u32, 380 * rows as u32 + if text { 50 } else { 0 });
    draw(SVGBackend::new(&svg, size).into_drawing_area(), points, text)?;
    draw(BitMapBackend::new(&png, size).into_drawing_area(), points, text)?;
    Ok(PlotReport { svg, png, text, note })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_are_binary() {
        assert_eq!(size_label(64), "64");
        assert_eq!(size_label(4096), "4K");
        assert_eq!(size_label(1 << 20), "1M");
        assert_eq!(size_label(3000), "3000");
    }

    #[test]
    fn plots_are_written_as_svg_and_png() {
        let mut points = Vec::new();
        for (dir, comp) in [("h2c", "poll"), ("c2h", "interrupt")] {
            for n in 1..=4u8 {
                for k in 6..=12u32 {
                    let size = 1u64 << k;
                    points.push(Point {
                        dir,
                        mem: "on-board",
                        completion: comp,
                        channels: n,
                        size,
                        iters: 10,
                        seconds: 0.001,
                        gbps: f64::from(k) * f64::from(n) / 10.0,
                    });
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("snic-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = plot(&points, &dir.join("sweep")).unwrap();
        let svg = std::fs::read_to_string(&r.svg).unwrap();
        assert!(svg.starts_with("<svg") || svg.contains("<svg"), "not an SVG");
        assert!(svg.contains("<polyline") || svg.contains("<path"), "no lines in the SVG");
        if r.text {
            assert!(svg.contains("2 channels") && svg.contains("GB/s"), "legend/labels missing");
        }
        let png = std::fs::read(&r.png).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(png.len() > 1000);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(plot(&[], &dir.join("x")).is_err());
    }

    #[test]
    fn panels_draw_without_a_font() {
        let p = |channels, size, gbps| Point {
            dir: "h2c",
            mem: "on-chip",
            completion: "poll",
            channels,
            size,
            iters: 1,
            seconds: 1.0,
            gbps,
        };
        let points = [p(1, 64, 0.5), p(1, 128, 1.0), p(2, 64, 0.7), p(2, 128, 1.5)];
        let (w, h) = (300u32, 200u32);
        let mut buf = vec![0u8; (w * h * 3) as usize];
        draw(BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area(), &points, false)
            .unwrap();
        // White background with coloured lines on it.
        let colour = COLORS[1];
        let has = buf.chunks(3).any(|px| px == [colour.0, colour.1, colour.2]);
        assert!(has, "the 2-channel line is not drawn");
        assert!(buf.chunks(3).filter(|px| *px == [255, 255, 255]).count() > (w * h / 2) as usize);
    }

    #[test]
    fn grid_fits_all_panels() {
        for n in 1..=8 {
            let (r, c) = grid(n);
            assert!(r * c >= n, "{n} panels in {r}x{c}");
        }
        assert_eq!(grid(8), (4, 2));
    }
}
