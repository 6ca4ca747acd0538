//! SVG charts drawn with plotters' SVG backend: lines and dots on x-y axes
//! ([`xy`], one or several stacked panels) and grouped bars ([`bars`]).
//! Each function returns a whole `<svg>` element to inline in a page; text
//! is left to the browser's fonts (no font files), colours come from one
//! palette so a run keeps its colour across the charts of a page.
//!
//! A logarithmic axis is drawn as log10 of the values on a linear axis,
//! labelled with the values themselves.

use plotters::coord::Shift;
use plotters::prelude::*;

/// One colour per run or series, in order.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The colour of the `index`-th series.
pub fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Line,
    /// Small translucent dots (many points: every request).
    Dots,
    /// Large dots without a line (a few points that are no curve: trials).
    Markers,
    /// A line with a large dot at each point (few points: sweep steps).
    LineAndDots,
}

/// One named series of points.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub mark: Mark,
    /// Index into the palette.
    pub colour: usize,
}

/// One panel: its title, axes and series.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    /// The x axis's range, when the panel must line up with others; else
    /// it spans the data.
    pub x_range: Option<(f64, f64)>,
    pub series: Vec<Series>,
}

impl Panel {
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Self {
        Self {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            log_x: false,
            x_range: None,
            series: Vec::new(),
        }
    }

    /// Whether any series has a point to draw.
    pub fn has_data(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }
}

const WIDTH: u32 = 860;
const PANEL_HEIGHT: u32 = 300;

/// Panels stacked top to bottom, sharing the width; empty panels are left out.
pub fn xy(panels: &[Panel]) -> String {
    let panels: Vec<&Panel> = panels.iter().filter(|p| p.has_data()).collect();
    let height = PANEL_HEIGHT * panels.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let areas = root.split_evenly((panels.len().max(1), 1));
        for (panel, area) in panels.iter().zip(&areas) {
            // Drawing into a string cannot fail; a degenerate range only
            // leaves its panel empty.
            let _ = draw_panel(area, panel);
        }
        let _ = root.present();
    }
    svg
}

type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw_panel(area: &DrawingArea<SVGBackend, Shift>, panel: &Panel) -> DrawResult {
    let transform = |x: f64| if panel.log_x { x.max(1e-6).log10() } else { x };
    let points = || {
        panel
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    let (mut x_range, y_range) = ranges(
        points().map(|&(x, _)| transform(x)),
        points().map(|&(_, y)| y),
    );
    if let Some((from, to)) = panel.x_range.filter(|(from, to)| to > from) {
        x_range = transform(from)..transform(to);
    }
    let log_x = panel.log_x;
    let format_x = move |x: &f64| {
        let value = if log_x { 10f64.powf(*x) } else { *x };
        short_number(value)
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range, y_range)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .x_label_formatter(&format_x)
        .y_label_formatter(&|y| short_number(*y))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for series in &panel.series {
        if series.points.is_empty() {
            continue;
        }
        let colour = self::colour(series.colour);
        let points: Vec<(f64, f64)> = series
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| (transform(x), y))
            .collect();
        let drawn = match series.mark {
            Mark::Line => chart.draw_series(LineSeries::new(points, colour.stroke_width(2)))?,
            Mark::Dots => chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 2, colour.mix(0.6).filled())),
            )?,
            Mark::Markers => chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, colour.filled())),
            )?,
            Mark::LineAndDots => {
                chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?;
                chart.draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 4, colour.filled())),
                )?
            }
        };
        drawn
            .label(series.label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 12))
        .draw()
}

/// Axis ranges around the values, with a little room; a single value gets
/// a range around it.
fn ranges(
    xs: impl Iterator<Item = f64>,
    ys: impl Iterator<Item = f64>,
) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let span = |values: Vec<f64>, from_zero: bool| {
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !low.is_finite() {
            return 0.0..1.0;
        }
        let low = if from_zero { low.min(0.0) } else { low };
        let pad = if high > low {
            (high - low) * 0.05
        } else {
            low.abs().max(1.0) * 0.5
        };
        let start = if from_zero && low >= 0.0 {
            low
        } else {
            low - pad
        };
        start..high + pad
    };
    (span(xs.collect(), false), span(ys.collect(), true))
}

/// A number for an axis label: no more digits than it needs.
fn short_number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 10.0 {
        format!("{value:.0}")
    } else if magnitude >= 1.0 {
        format!("{value:.1}")
    } else if magnitude == 0.0 {
        "0".to_owned()
    } else {
        format!("{value:.2}")
    }
}

/// Grouped bars: one group per category (`groups`), one bar per run in
/// each, the runs in palette order.
pub fn bars(
    title: &str,
    y_label: &str,
    groups: &[String],
    runs: &[(String, Vec<Option<f64>>)],
) -> String {
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH, PANEL_HEIGHT + 40)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let _ = draw_bars(&root, title, y_label, groups, runs);
        let _ = root.present();
    }
    svg
}

fn draw_bars(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    y_label: &str,
    groups: &[String],
    runs: &[(String, Vec<Option<f64>>)],
) -> DrawResult {
    let high = runs
        .iter()
        .flat_map(|(_, values)| values.iter().flatten())
        .copied()
        .fold(0.0, f64::max);
    // Room above the tallest bar for the legend.
    let high = if high > 0.0 { high * 1.35 } else { 1.0 };
    let width = runs.len().max(1) as f64 + 1.0;
    let groups_owned = groups.to_vec();
    let label_group = move |x: &f64| {
        let group = (*x / width).floor();
        let centre = group * width + width / 2.0;
        if (x - centre).abs() < 0.5 && group >= 0.0 {
            groups_owned
                .get(group as usize)
                .cloned()
                .unwrap_or_default()
        } else {
            String::new()
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..width * groups.len().max(1) as f64, 0.0..high)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * (runs.len() + 1) * 2 + 1)
        .x_label_formatter(&label_group)
        .y_desc(y_label)
        .y_label_formatter(&|y| short_number(*y))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (index, (name, values)) in runs.iter().enumerate() {
        let colour = self::colour(index);
        let rectangles = values.iter().enumerate().filter_map(|(group, value)| {
            let value = (*value)?;
            let left = group as f64 * width + 0.5 + index as f64;
            Some(Rectangle::new(
                [(left, 0.0), (left + 0.9, value)],
                colour.filled(),
            ))
        });
        chart
            .draw_series(rectangles)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 12))
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_with_data_are_drawn_and_empty_ones_left_out() {
        let mut cdf = Panel::new("TTFT", "ms", "fraction");
        cdf.log_x = true;
        cdf.series.push(Series {
            label: "run a".into(),
            points: vec![(10.0, 0.1), (20.0, 0.5), (40.0, 1.0)],
            mark: Mark::Line,
            colour: 0,
        });
        let empty = Panel::new("nothing", "x", "y");
        let svg = xy(&[cdf, empty]);
        assert!(svg.starts_with("<svg"), "{svg}");
        // Axes and ticks are black polylines; the data line is in the palette's first colour.
        assert_eq!(svg.matches("stroke=\"#1F77B4\"").count(), 1, "{svg}");
        assert!(svg.contains("run a") && !svg.contains("nothing"));
        assert!(svg.contains(&format!("height=\"{PANEL_HEIGHT}\"")));
    }

    #[test]
    fn bars_draw_one_rectangle_per_value() {
        let svg = bars(
            "p99",
            "ms",
            &["TTFT".into(), "TPOT".into()],
            &[
                ("a".into(), vec![Some(10.0), Some(2.0)]),
                ("b".into(), vec![Some(12.0), None]),
            ],
        );
        assert!(svg.contains(">TTFT<") || svg.contains("TTFT"), "{svg}");
        // Three bars, two legend swatches, the background and the plot area.
        assert!(svg.matches("<rect").count() >= 5, "{svg}");
    }
}
