//! [`figure`]: throughput and p99 latency against concurrency, the knee marked, as hand-written
//! SVG with deterministic output.

use std::fmt::Write as _;

use inflight_bench::axis::{nice_step, ticks};

use crate::knee::Verdict;
use crate::report::CapacityReport;

const WIDTH: f64 = 640.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 24.0;
const PANEL_H: f64 = 170.0;
const TOP: f64 = 62.0;
const GAP: f64 = 46.0;
const THROUGHPUT_COLOR: &str = "#4e79a7";
const P99_COLOR: &str = "#e15759";
const P50_COLOR: &str = "#888888";
const KNEE_COLOR: &str = "#59a14f";
const TARGET_COLOR: &str = "#b07aa1";

/// One point of a series: concurrency, value, and whether the level was under the error
/// threshold.
type Dot = (u32, f64, bool);

/// A line of dots in one colour.
struct Series<'a> {
    dots: &'a [Dot],
    color: &'a str,
}

/// The figure of a report: throughput (top) and p50/p99 latency (below) against concurrency on
/// a log-2 axis, and when the target's calls in flight were read, a third panel with their
/// maximum next to the client's; levels over the error threshold drawn hollow; the knee as a
/// vertical line.
pub fn figure(report: &CapacityReport) -> String {
    let panels = if report.target_in_flight_source.is_some() {
        3.0
    } else {
        2.0
    };
    let height = TOP + panels * PANEL_H + (panels - 1.0) * GAP + 56.0;
    let mut svg = String::new();
    let title = format!("Capacity of {} {}", report.method, report.url);
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n<title>{}</title>\n<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"white\"/>\n<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>\n<text x=\"{}\" y=\"36\" text-anchor=\"middle\">{}</text>",
        esc(&title),
        WIDTH / 2.0,
        esc(&title),
        WIDTH / 2.0,
        esc(&report.conclusion())
    );
    let levels: Vec<_> = report.levels.iter().filter(|l| l.requests > 0).collect();
    if levels.is_empty() {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n</svg>",
            WIDTH / 2.0,
            height / 2.0
        );
        return svg;
    }
    let lo = f64::from(levels[0].concurrency).log2();
    let hi = f64::from(levels[levels.len() - 1].concurrency).log2();
    let plot_w = WIDTH - LEFT - RIGHT;
    let x = |c: u32| {
        let v = f64::from(c).log2();
        if hi > lo {
            LEFT + (v - lo) / (hi - lo) * plot_w
        } else {
            LEFT + plot_w / 2.0
        }
    };
    let threshold = report.rules.stop_on_errors;
    let clean = |l: &crate::level::Level| l.error_rate() <= threshold;

    let top = TOP;
    let throughput: Vec<Dot> = levels
        .iter()
        .map(|l| (l.concurrency, l.throughput_per_s, clean(l)))
        .collect();
    let main = Series {
        dots: &throughput,
        color: THROUGHPUT_COLOR,
    };
    panel(&mut svg, top, "calls/s (2xx)", &main, None, &x);

    let bottom = TOP + PANEL_H + GAP;
    let p99: Vec<Dot> = levels
        .iter()
        .filter_map(|l| l.p99_ms.map(|v| (l.concurrency, v, clean(l))))
        .collect();
    let p50: Vec<Dot> = levels
        .iter()
        .filter_map(|l| l.p50_ms.map(|v| (l.concurrency, v, clean(l))))
        .collect();
    let main = Series {
        dots: &p99,
        color: P99_COLOR,
    };
    let second = Series {
        dots: &p50,
        color: P50_COLOR,
    };
    panel(&mut svg, bottom, "latency ms", &main, Some(&second), &x);
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"><tspan fill=\"{P99_COLOR}\">p99 (solid)</tspan>  <tspan fill=\"{P50_COLOR}\">p50 (dashed)</tspan></text>",
        WIDTH - RIGHT,
        bottom - 8.0
    );

    let mut last = bottom;
    if report.target_in_flight_source.is_some() {
        let third = bottom + PANEL_H + GAP;
        let target: Vec<Dot> = levels
            .iter()
            .filter_map(|l| {
                let max = l.target_in_flight.as_ref()?.max?;
                Some((l.concurrency, max, clean(l)))
            })
            .collect();
        let client: Vec<Dot> = levels
            .iter()
            .map(|l| (l.concurrency, f64::from(l.concurrency), clean(l)))
            .collect();
        let main = Series {
            dots: &target,
            color: TARGET_COLOR,
        };
        let second = Series {
            dots: &client,
            color: P50_COLOR,
        };
        panel(&mut svg, third, "calls in flight", &main, Some(&second), &x);
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"><tspan fill=\"{TARGET_COLOR}\">as the target saw them, most at once (solid)</tspan>  <tspan fill=\"{P50_COLOR}\">sent by the client (dashed)</tspan></text>",
            WIDTH - RIGHT,
            third - 8.0
        );
        last = third;
    }

    // The x axis, labelled with every level measured (probes included, they are few).
    let axis_y = last + PANEL_H;
    let mut last_label = f64::NEG_INFINITY;
    for l in &levels {
        let lx = x(l.concurrency);
        if lx - last_label >= 18.0 {
            let _ = writeln!(
                svg,
                "<text x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                axis_y + 14.0,
                l.concurrency
            );
            last_label = lx;
        }
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">concurrency (calls in flight, log scale); hollow: over {:.0}% errors</text>",
        LEFT + plot_w / 2.0,
        axis_y + 32.0,
        threshold * 100.0
    );

    if let Verdict::Knee { capacity, .. } = report.verdict {
        let kx = x(capacity);
        let _ = writeln!(
            svg,
            "<line x1=\"{kx:.1}\" y1=\"{top:.1}\" x2=\"{kx:.1}\" y2=\"{axis_y:.1}\" stroke=\"{KNEE_COLOR}\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{KNEE_COLOR}\" font-weight=\"bold\">capacity {capacity}</text>",
            kx + 4.0,
            top - 6.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// One panel: a y axis from 0 with grid lines, a line through the points, dots (hollow when
/// over the error threshold), and optionally a second, dashed series.
fn panel(
    svg: &mut String,
    top: f64,
    label: &str,
    main: &Series<'_>,
    second: Option<&Series<'_>>,
    x: &dyn Fn(u32) -> f64,
) {
    let max = main
        .dots
        .iter()
        .chain(second.map_or(&[][..], |s| s.dots).iter())
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let max = if max > 0.0 { max } else { 1.0 };
    let step = nice_step(max, 4.0);
    let y_max = (max / step).ceil() * step;
    let y = |v: f64| top + PANEL_H - (v.max(0.0) / y_max) * PANEL_H;
    for tick in ticks(y_max, step) {
        let ty = y(tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{ty:.1}\" x2=\"{:.1}\" y2=\"{ty:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            ty + 4.0,
            num(tick)
        );
    }
    let _ = writeln!(
        svg,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        top + PANEL_H / 2.0,
        esc(label)
    );
    // The second series first, so that the main one is drawn over it where they meet.
    let mut series = Vec::new();
    if let Some(s) = second {
        series.push((s.dots, s.color, " stroke-dasharray=\"4 3\""));
    }
    series.push((main.dots, main.color, ""));
    for (points, color, dash) in series {
        if points.is_empty() {
            continue;
        }
        let path: Vec<String> = points
            .iter()
            .enumerate()
            .map(|(i, (c, v, _))| {
                format!(
                    "{}{:.1} {:.1}",
                    if i == 0 { "M" } else { "L" },
                    x(*c),
                    y(*v)
                )
            })
            .collect();
        let _ = writeln!(
            svg,
            "<path d=\"{}\" stroke=\"{color}\" stroke-width=\"2\" fill=\"none\"{dash}/>",
            path.join(" ")
        );
        for (c, v, clean) in points {
            let fill = if *clean { color } else { "white" };
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{fill}\" stroke=\"{color}\" stroke-width=\"1.5\"><title>{c}: {}</title></circle>",
                x(*c),
                y(*v),
                num(*v)
            );
        }
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
        y(0.0),
        WIDTH - RIGHT,
        y(0.0)
    );
}

fn num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::report;

    #[test]
    fn the_knee_is_marked_and_output_is_deterministic() {
        let r = report(&[1, 2, 4, 5, 6, 7, 8, 16], None);
        let svg = figure(&r);
        assert_eq!(svg, figure(&r));
        assert!(svg.starts_with("<svg xmlns"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(">capacity 6</text>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        // The refused level is drawn hollow.
        assert!(svg.contains("fill=\"white\" stroke=\"#4e79a7\""));
    }

    #[test]
    fn the_targets_calls_in_flight_get_a_third_panel() {
        let plain = figure(&report(&[1, 2, 4, 8, 16], None));
        assert!(!plain.contains("calls in flight</text>"), "{plain}");
        let r = crate::report::tests::report_with_target(&[1, 2, 4, 8, 16]);
        let svg = figure(&r);
        assert_eq!(svg, figure(&r));
        assert!(svg.contains(">calls in flight</text>"), "{svg}");
        assert!(svg.contains("as the target saw them"), "{svg}");
        assert!(svg.contains("<title>16: 6</title>"), "{svg}");
        assert!(!svg.contains("NaN"), "{svg}");
    }

    #[test]
    fn one_level_or_none_still_draws() {
        let svg = figure(&report(&[4], None));
        assert!(!svg.contains("NaN"), "{svg}");
        let svg = figure(&report(&[], None));
        assert!(svg.contains("no data"), "{svg}");
    }
}
