//! SVG figures for the evaluations: grouped bar charts and line charts over
//! categories, drawn with plotters' SVG backend (no fonts needed). Values
//! that are not finite are left out (a gap), never drawn at a made-up
//! height.

use std::io;
use std::ops::Range;
use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

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

/// A figure plotters could not draw (the SVG goes to a string, so only a
/// layout error can cause it).
#[derive(Debug, thiserror::Error)]
#[error("drawing the figure {title:?}: {message}")]
pub struct FigureError {
    pub title: String,
    pub message: String,
}

const SIZE: (u32, u32) = (760, 420);
/// The legend's column, right of the plot so it never hides data.
const LEGEND_W: u32 = 150;
/// Colour-blind-safe palette (Okabe–Ito), cycled.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0xF0, 0xE4, 0x42),
    RGBColor(0x00, 0x00, 0x00),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The y axis: covering 0, the reference and every finite value, with a
/// little room above the highest.
fn y_range<'a>(values: impl Iterator<Item = &'a f64>, reference: Option<f64>) -> Range<f64> {
    let mut lo: f64 = 0.0;
    let mut hi: f64 = reference.filter(|r| r.is_finite()).unwrap_or(0.0);
    for &v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    lo..hi + (hi - lo) * 0.05
}

/// The label of category `x` when `x` is a whole index; empty between
/// categories (where plotters may put a tick).
fn category(labels: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    labels.get(i as usize).cloned().unwrap_or_default()
}

/// Everything but the data: title, axes with categories at whole x values
/// (at most `labels` of them labelled, at steps plotters picks; upright
/// when `rotate`), the dashed reference, the legend; `body` draws the data.
struct Frame<'s> {
    title: &'s str,
    x_label: Option<&'s str>,
    y_label: &'s str,
    categories: &'s [String],
    labels: usize,
    rotate: bool,
    series: &'s [Series],
    reference: Option<f64>,
}

impl Frame<'_> {
    fn draw(
        &self,
        body: impl FnOnce(&mut Chart<'_, '_>) -> Result<(), String>,
    ) -> Result<String, FigureError> {
        let mut svg = String::new();
        self.draw_into(&mut svg, body)
            .map_err(|message| FigureError {
                title: self.title.to_string(),
                message,
            })?;
        Ok(svg)
    }

    fn draw_into(
        &self,
        svg: &mut String,
        body: impl FnOnce(&mut Chart<'_, '_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (plot, legend) = root.split_horizontally(SIZE.0 - LEGEND_W);
        let x = -0.5..self.categories.len().max(1) as f64 - 0.5;
        let values = self.series.iter().flat_map(|s| s.values.iter());
        let mut chart = ChartBuilder::on(&plot)
            .caption(self.title, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(if self.rotate { 80 } else { 40 })
            .y_label_area_size(60)
            .build_cartesian_2d(x.clone(), y_range(values, self.reference))
            .map_err(e)?;
        // Many categories are labelled upright, below the axis, by hand:
        // plotters centres a rotated label on its tick, across the axis.
        let label = |v: &f64| {
            if self.rotate {
                String::new()
            } else {
                category(self.categories, *v)
            }
        };
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .x_labels(self.labels)
            .x_label_formatter(&label)
            .y_desc(self.y_label);
        if let Some(x_label) = self.x_label {
            mesh.x_desc(x_label);
        }
        mesh.draw().map_err(e)?;
        if self.rotate {
            let y0 = chart.y_range().start;
            let style = TextStyle::from(("sans-serif", 12).into_font())
                .transform(FontTransform::Rotate90)
                .pos(Pos::new(HPos::Left, VPos::Center));
            for (i, name) in self.categories.iter().enumerate() {
                let (px, py) = chart.backend_coord(&(i as f64, y0));
                root.draw(&Text::new(name.as_str(), (px, py + 8), &style))
                    .map_err(e)?;
            }
        }
        if let Some(r) = self.reference.filter(|r| r.is_finite()) {
            let line = DashedLineSeries::new([(x.start, r), (x.end, r)], 5, 4, BLACK.into());
            chart.draw_series(line).map_err(e)?;
        }
        body(&mut chart)?;
        for (i, s) in self.series.iter().enumerate() {
            let y = 40 + i as i32 * 18;
            let swatch = Rectangle::new([(12, y), (24, y + 12)], colour(i).filled());
            legend.draw(&swatch).map_err(e)?;
            let name = Text::new(s.name.as_str(), (30, y), ("sans-serif", 12));
            legend.draw(&name).map_err(e)?;
        }
        root.present().map_err(e)
    }
}

impl BarChart {
    pub fn to_svg(&self) -> Result<String, FigureError> {
        let frame = Frame {
            title: &self.title,
            x_label: None,
            y_label: &self.y_label,
            categories: &self.groups,
            labels: self.groups.len(),
            rotate: self.groups.len() > 8,
            series: &self.series,
            reference: self.reference,
        };
        let groups = self.groups.len();
        let bar_w = 0.8 / self.series.len().max(1) as f64;
        frame.draw(|chart| {
            for (i, s) in self.series.iter().enumerate() {
                let fill = colour(i).filled();
                let bars = s.values.iter().take(groups).enumerate();
                let bars = bars.filter(|(_, v)| v.is_finite()).map(|(g, &v)| {
                    let left = g as f64 - 0.4 + i as f64 * bar_w;
                    Rectangle::new([(left, 0.0), (left + bar_w, v)], fill)
                });
                chart.draw_series(bars).map_err(|e| e.to_string())?;
            }
            Ok(())
        })
    }
}

impl LineChart {
    pub fn to_svg(&self) -> Result<String, FigureError> {
        let frame = Frame {
            title: &self.title,
            x_label: Some(&self.x_label),
            y_label: &self.y_label,
            categories: &self.x,
            // At most 12 labels so they stay readable.
            labels: self.x.len().min(12),
            rotate: false,
            series: &self.series,
            reference: self.reference,
        };
        frame.draw(|chart| {
            for (si, s) in self.series.iter().enumerate() {
                // A non-finite value breaks the line into separate pieces.
                let mut pieces: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
                for (i, &v) in s.values.iter().enumerate().take(self.x.len()) {
                    if v.is_finite() {
                        pieces
                            .last_mut()
                            .into_iter()
                            .for_each(|p| p.push((i as f64, v)));
                    } else if pieces.last().is_some_and(|p| !p.is_empty()) {
                        pieces.push(Vec::new());
                    }
                }
                for piece in pieces.into_iter().filter(|p| !p.is_empty()) {
                    let line = LineSeries::new(piece, colour(si).stroke_width(2)).point_size(3);
                    chart.draw_series(line).map_err(|e| e.to_string())?;
                }
            }
            Ok(())
        })
    }
}

/// A figure of either kind, drawn when it is written.
#[derive(Debug, Clone)]
pub enum Figure {
    Bar(BarChart),
    Line(LineChart),
}

impl Figure {
    pub fn to_svg(&self) -> Result<String, FigureError> {
        match self {
            Figure::Bar(c) => c.to_svg(),
            Figure::Line(c) => c.to_svg(),
        }
    }
}

impl From<BarChart> for Figure {
    fn from(c: BarChart) -> Self {
        Figure::Bar(c)
    }
}

impl From<LineChart> for Figure {
    fn from(c: LineChart) -> Self {
        Figure::Line(c)
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

    fn count(svg: &str, element: &str, colour: &str) -> usize {
        svg.lines()
            .filter(|l| l.starts_with(element) && l.contains(colour))
            .count()
    }

    fn bars(reference: Option<f64>) -> BarChart {
        BarChart {
            title: "speedup <over> remote".into(),
            y_label: "x".into(),
            groups: vec!["pr".into(), "a&b".into()],
            series: vec![
                Series::new("lc", vec![1.0, 2.0]),
                Series::new("daemon", vec![3.0, f64::NAN]),
            ],
            reference,
        }
    }

    #[test]
    fn bars_one_rect_per_finite_value_with_escaped_labels() {
        let svg = bars(Some(1.0)).to_svg().unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.ends_with("</svg>\n"));
        // Each series: its finite bars plus its legend swatch.
        assert_eq!(count(&svg, "<rect", "#0072B2"), 2 + 1);
        assert_eq!(count(&svg, "<rect", "#E69F00"), 1 + 1);
        assert!(svg.contains("speedup &lt;over&gt; remote"));
        assert!(svg.contains("a&amp;b"));
        assert!(svg.contains(">\ndaemon\n<") || svg.contains(">daemon<"));
        // The dashed reference: black segments that the chart without it lacks.
        let without = bars(None).to_svg().unwrap();
        assert!(count(&svg, "<polyline", "#000000") > count(&without, "<polyline", "#000000"));
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
        let svg = c.to_svg().unwrap();
        assert_eq!(count(&svg, "<polyline", "#0072B2"), 2);
        assert_eq!(count(&svg, "<circle", "#0072B2"), 3);
    }

    #[test]
    fn empty_and_all_gap_charts_still_draw() {
        let empty = LineChart::default().to_svg().unwrap();
        assert!(empty.starts_with("<svg"));
        let gaps = BarChart {
            groups: vec!["a".into()],
            series: vec![Series::new("s", vec![f64::NAN])],
            ..BarChart::default()
        };
        assert_eq!(count(&gaps.to_svg().unwrap(), "<rect", "#0072B2"), 1);
    }

    #[test]
    fn y_axis_covers_zero_the_reference_and_every_value() {
        let r = y_range([0.5, 2.6, f64::NAN].iter(), Some(3.0));
        assert!(r.start == 0.0 && r.end >= 3.0);
        let r = y_range([-1.0].iter(), None);
        assert!(r.start == -1.0 && r.end >= 0.0);
        assert!(y_range([].iter(), None).end > 0.0);
    }

    #[test]
    fn categories_label_whole_positions_only() {
        let l: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
        assert_eq!(category(&l, 2.0), "c2");
        assert_eq!(category(&l, 2.5), "");
        assert_eq!(category(&l, -0.5), "");
        assert_eq!(category(&l, 9.0), "");
    }

    #[test]
    fn every_group_is_labelled_and_long_lines_only_some() {
        for n in 1..=24 {
            let groups: Vec<String> = (0..n).map(|i| format!("g{i}x")).collect();
            let c = BarChart {
                groups: groups.clone(),
                series: vec![Series::new("s", vec![1.0; n])],
                ..BarChart::default()
            };
            let svg = c.to_svg().unwrap();
            for g in &groups {
                assert!(svg.contains(&format!("\n{g}\n")), "{n} groups: {g}");
            }
        }
        let c = LineChart {
            x: (0..200).map(|i| format!("t{i}x")).collect(),
            series: vec![Series::new("s", vec![1.0; 200])],
            ..LineChart::default()
        };
        let svg = c.to_svg().unwrap();
        let shown = (0..200)
            .filter(|i| svg.contains(&format!("\nt{i}x\n")))
            .count();
        assert!((2..=12).contains(&shown), "{shown}");
    }
}
