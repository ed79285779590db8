//! SVG figures for the evaluations: grouped bar charts and line charts,
//! written by hand so building needs no font or drawing library. Values
//! that are not finite are left out (a gap), never drawn at a made-up
//! height.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// One named series: a bar in every group, or a line.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// One value per group (bars) or per x value (lines).
    pub values: Vec<f64>,
}

impl Series {
    pub fn new(name: impl Into<String>, values: Vec<f64>) -> Self {
        Series {
            name: name.into(),
            values,
        }
    }
}

/// Grouped bars: one group per category (a workload), one bar per series
/// (a scheme) inside it.
#[derive(Debug, Clone, Default)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<Series>,
    /// A dashed horizontal line (1.0 for "same as the baseline").
    pub reference: Option<f64>,
}

/// Lines over shared x values (categories evenly spaced, such as
/// bandwidth factors or time intervals).
#[derive(Debug, Clone, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x: Vec<String>,
    pub series: Vec<Series>,
    pub reference: Option<f64>,
}

const W: f64 = 760.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 70.0;
/// Colour-blind-safe palette (Okabe–Ito), cycled.
const COLOURS: &[&str] = &[
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

/// Escapes text for SVG character data and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

/// Round tick step giving about `n` ticks over `span`.
fn tick_step(span: f64, n: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f < 1.5 {
        1.0
    } else if f < 3.0 {
        2.0
    } else if f < 7.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// The y axis: [lo, hi] rounded out to ticks, covering 0 and the reference.
fn y_range(values: impl Iterator<Item = f64>, reference: Option<f64>) -> (f64, f64, f64) {
    let mut lo: f64 = 0.0;
    let mut hi: f64 = reference.unwrap_or(0.0);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    let step = tick_step(hi - lo, 6.0);
    ((lo / step).floor() * step, (hi / step).ceil() * step, step)
}

/// Frame, title, y axis (fitted to the series and the reference) with grid
/// and labels, legend; returns the y mapping and the axis range.
fn frame(
    svg: &mut String,
    title: &str,
    y_label: &str,
    series: &[Series],
    reference: Option<f64>,
) -> (impl Fn(f64) -> f64 + use<>, (f64, f64)) {
    let (lo, hi, step) = y_range(
        series.iter().flat_map(|s| s.values.iter().copied()),
        reference,
    );
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    let names = names.as_slice();
    let plot_h = H - TOP - BOTTOM;
    let y = move |v: f64| TOP + plot_h * (1.0 - (v - lo) / (hi - lo));
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
        (LEFT + W - RIGHT) / 2.0,
        esc(title)
    );
    let n = ((hi - lo) / step).round() as i64;
    for i in 0..=n {
        let v = lo + i as f64 * step;
        let yy = y(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            fmt_tick(v, step)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        esc(y_label)
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="black"/><line x1="{LEFT}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="black"/>"#,
        H - BOTTOM,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    for (i, name) in names.iter().enumerate() {
        let yy = TOP + 8.0 + i as f64 * 18.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{}" y="{:.1}">{}</text>"#,
            W - RIGHT + 12.0,
            yy - 10.0,
            COLOURS[i % COLOURS.len()],
            W - RIGHT + 30.0,
            yy,
            esc(name)
        );
    }
    (y, (lo, hi))
}

fn fmt_tick(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else {
        let digits = (-step.log10().floor()) as usize;
        format!("{v:.digits$}")
    }
}

fn reference_line(svg: &mut String, y: &dyn Fn(f64) -> f64, reference: Option<f64>) {
    if let Some(r) = reference.filter(|r| r.is_finite()) {
        let yy = y(r);
        let _ = writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="black" stroke-dasharray="5,4"/>"#,
            W - RIGHT
        );
    }
}

/// An x-axis category label, rotated when there are many.
fn x_label(svg: &mut String, x: f64, text: &str, rotate: bool) {
    let yy = H - BOTTOM + 16.0;
    if rotate {
        let _ = writeln!(
            svg,
            r#"<text transform="translate({x:.1},{yy:.1}) rotate(-35)" text-anchor="end">{}</text>"#,
            esc(text)
        );
    } else {
        let _ = writeln!(
            svg,
            r#"<text x="{x:.1}" y="{yy:.1}" text-anchor="middle">{}</text>"#,
            esc(text)
        );
    }
}

impl BarChart {
    pub fn to_svg(&self) -> String {
        let mut svg = String::new();
        let (y, range) = frame(
            &mut svg,
            &self.title,
            &self.y_label,
            &self.series,
            self.reference,
        );
        let plot_w = W - LEFT - RIGHT;
        let groups = self.groups.len().max(1) as f64;
        let group_w = plot_w / groups;
        let bar_w = group_w * 0.8 / self.series.len().max(1) as f64;
        let zero = y(0f64.clamp(range.0, range.1));
        for (g, label) in self.groups.iter().enumerate() {
            let gx = LEFT + g as f64 * group_w + group_w * 0.1;
            for (i, s) in self.series.iter().enumerate() {
                let Some(&v) = s.values.get(g) else { continue };
                if !v.is_finite() {
                    continue;
                }
                let (top, bottom) = if y(v) < zero {
                    (y(v), zero)
                } else {
                    (zero, y(v))
                };
                let _ = writeln!(
                    svg,
                    r#"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {} = {v:.4}</title></rect>"#,
                    gx + i as f64 * bar_w,
                    bar_w.max(0.5),
                    (bottom - top).max(0.0),
                    COLOURS[i % COLOURS.len()],
                    esc(label),
                    esc(&s.name)
                );
            }
            x_label(
                &mut svg,
                LEFT + (g as f64 + 0.5) * group_w,
                label,
                self.groups.len() > 8,
            );
        }
        reference_line(&mut svg, &y, self.reference);
        svg.push_str("</svg>\n");
        svg
    }
}

impl LineChart {
    pub fn to_svg(&self) -> String {
        let mut svg = String::new();
        let (y, _) = frame(
            &mut svg,
            &self.title,
            &self.y_label,
            &self.series,
            self.reference,
        );
        let plot_w = W - LEFT - RIGHT;
        let n = self.x.len().max(1) as f64;
        let x = |i: usize| LEFT + plot_w * (i as f64 + 0.5) / n;
        // Label at most ~12 x values so they stay readable.
        let every = self.x.len().div_ceil(12).max(1);
        for (i, label) in self.x.iter().enumerate() {
            if i % every == 0 {
                x_label(&mut svg, x(i), label, false);
            }
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            H - 20.0,
            esc(&self.x_label)
        );
        reference_line(&mut svg, &y, self.reference);
        for (si, s) in self.series.iter().enumerate() {
            let colour = COLOURS[si % COLOURS.len()];
            // A non-finite value breaks the line into separate pieces.
            let mut piece: Vec<(f64, f64)> = Vec::new();
            let mut pieces = Vec::new();
            for (i, &v) in s.values.iter().enumerate().take(self.x.len()) {
                if v.is_finite() {
                    piece.push((x(i), y(v)));
                } else if !piece.is_empty() {
                    pieces.push(std::mem::take(&mut piece));
                }
            }
            pieces.push(piece);
            for p in pieces.iter().filter(|p| !p.is_empty()) {
                let pts: Vec<String> = p.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
                let _ = writeln!(
                    svg,
                    r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                    pts.join(" ")
                );
                for (a, b) in p {
                    let _ = writeln!(
                        svg,
                        r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{colour}"/>"#
                    );
                }
            }
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// Writes an SVG file, creating its directory.
pub fn write(path: &Path, svg: &str) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_one_rect_per_finite_value_with_escaped_labels() {
        let c = BarChart {
            title: "speedup <over> remote".into(),
            y_label: "x".into(),
            groups: vec!["pr".into(), "a&b".into()],
            series: vec![
                Series::new("lc", vec![1.0, 2.0]),
                Series::new("daemon", vec![3.0, f64::NAN]),
            ],
            reference: Some(1.0),
        };
        let svg = c.to_svg();
        assert!(svg.starts_with("<svg"));
        assert!(svg.ends_with("</svg>\n"));
        // Three finite bars plus two legend swatches and the background.
        assert_eq!(svg.matches("<rect").count(), 3 + 2 + 1);
        assert!(svg.contains("speedup &lt;over&gt; remote"));
        assert!(svg.contains(">a&amp;b<"));
        assert!(svg.contains("stroke-dasharray"));
        // Axis from 0 to 3 in steps of 0.5.
        assert!(svg.contains(">3.0<") && svg.contains(">0.0<"));
    }

    #[test]
    fn lines_break_at_gaps() {
        let c = LineChart {
            title: "t".into(),
            x_label: "interval".into(),
            y_label: "GB/s".into(),
            x: (0..4).map(|i| i.to_string()).collect(),
            series: vec![Series::new("s", vec![1.0, f64::INFINITY, 2.0, 3.0])],
            reference: None,
        };
        let svg = c.to_svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(10.0, 5.0), 2.0);
        assert_eq!(tick_step(0.3, 6.0), 0.05);
        assert_eq!(y_range([0.5, 2.6].into_iter(), None), (0.0, 3.0, 0.5));
    }
}
