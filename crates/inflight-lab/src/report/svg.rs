//! The report's figures, hand-written SVG with deterministic output: bars of a metric per cell
//! with min-max whiskers, and calls in flight over time per scenario.

use std::fmt::Write as _;

use inflight_bench::axis::{nice_step, ticks};

use super::{cpu_limited, esc_xml, scale_note, scenarios, strategies, strategy_label};
use crate::hypothesis::fmt_num;
use crate::results::{cpus_words, Metric, ResultsDoc, RunResult, SummaryRow};

/// One SVG figure of the report.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File name inside the report directory, e.g. `accepted_per_s.svg`.
    pub file: String,
    pub title: String,
    pub caption: String,
    pub svg: String,
}

const PALETTE: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
];
const ENRICH_COLOR: &str = "#4e79a7";
const RECORDS_COLOR: &str = "#e15759";

fn svg_open(width: f64, height: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n<title>{}</title>\n<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"white\"/>\n<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
        esc_xml(title),
        width / 2.0,
        esc_xml(title)
    )
}

/// Bars of the median per (strategy, cpus) cell, grouped by scenario, with min-max whiskers.
fn bar_chart(doc: &ResultsDoc, metric: Metric, title: &str, y_label: &str) -> String {
    let groups: Vec<(String, Vec<&SummaryRow>)> = scenarios(doc)
        .into_iter()
        .map(|s| {
            let rows = doc.summary.iter().filter(|r| r.scenario == s).collect();
            (s, rows)
        })
        .filter(|(_, rows): &(String, Vec<&SummaryRow>)| !rows.is_empty())
        .collect();
    let bars: usize = groups.iter().map(|(_, rows)| rows.len()).sum();
    let (left, right, top, bottom) = (64.0, 20.0, 40.0, 64.0);
    let bar_w = 34.0;
    let gap = 26.0;
    let width = (left + right + bars as f64 * bar_w + groups.len() as f64 * gap).max(420.0);
    let height = 340.0;
    let plot_h = height - top - bottom;
    let mut svg = svg_open(width, height, title);
    if bars == 0 {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n</svg>",
            width / 2.0,
            height / 2.0
        );
        return svg;
    }
    // A non-finite value (e.g. a rate over a zero completion time) is drawn as 0, never as NaN.
    let value = |r: &SummaryRow| r.get(metric).map(|v| if v.is_finite() { v } else { 0.0 });
    let max = groups
        .iter()
        .flat_map(|(_, rows)| rows.iter().map(|r| value(r).max))
        .fold(0.0f64, f64::max);
    // All-zero (or non-finite) data still gets a 0..1 axis rather than a degenerate one.
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let step = nice_step(max, 5.0);
    let y_max = (max / step).ceil() * step;
    let y = |v: f64| top + plot_h - (v / y_max) * plot_h;
    // Grid and y axis.
    for tick in ticks(y_max, step) {
        let ty = y(tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{ty:.1}\" x2=\"{:.1}\" y2=\"{ty:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            width - right,
            left - 6.0,
            ty + 4.0,
            fmt_num(tick)
        );
    }
    let _ = writeln!(
        svg,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        top + plot_h / 2.0,
        esc_xml(y_label)
    );
    let strategy_order = strategies(doc);
    // Centre the bars when the chart is wider than they need (few bars, minimum width).
    let needed = bars as f64 * bar_w + groups.len() as f64 * gap;
    let mut x = left + gap / 2.0 + ((width - left - right - needed) / 2.0).max(0.0);
    for (scenario, rows) in &groups {
        let group_start = x;
        for r in rows {
            let v = value(r);
            let color_index = strategy_order
                .iter()
                .position(|s| s == &r.strategy)
                .unwrap_or(0);
            let color = PALETTE[color_index % PALETTE.len()];
            // A second CPU count of the same strategy is drawn lighter.
            let opacity = if (r.cpus - 1.0).abs() < 1e-9 {
                1.0
            } else {
                0.55
            };
            let (y0, y1) = (y(v.median), y(0.0));
            let _ = writeln!(
                svg,
                "<rect x=\"{:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" fill-opacity=\"{opacity}\"><title>{} {}, {}: median {} (min {}, max {})</title></rect>",
                x + 3.0,
                bar_w - 6.0,
                (y1 - y0).max(0.0),
                esc_xml(&strategy_label(&r.strategy)),
                esc_xml(scenario),
                esc_xml(&cpus_words(r.cpus, !r.unlimited)),
                fmt_num(v.median),
                fmt_num(v.min),
                fmt_num(v.max)
            );
            let cx = x + bar_w / 2.0;
            let (ymin, ymax) = (y(v.min), y(v.max));
            let _ = writeln!(
                svg,
                "<path d=\"M{cx:.1} {ymin:.1} V{ymax:.1} M{:.1} {ymin:.1} H{:.1} M{:.1} {ymax:.1} H{:.1}\" stroke=\"#222\" stroke-width=\"1.2\" fill=\"none\"/>",
                cx - 5.0,
                cx + 5.0,
                cx - 5.0,
                cx + 5.0
            );
            let _ = writeln!(
                svg,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
                ymax - 4.0,
                esc_xml(&fmt_num(v.median))
            );
            let label = if (r.cpus - 1.0).abs() < 1e-9 {
                strategy_label(&r.strategy)
            } else {
                format!("{} {}c", strategy_label(&r.strategy), fmt_num(r.cpus))
            };
            let _ = writeln!(
                svg,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                top + plot_h + 14.0,
                esc_xml(&label)
            );
            x += bar_w;
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>",
            (group_start + x) / 2.0,
            top + plot_h + 32.0,
            esc_xml(scenario)
        );
        x += gap;
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
        y(0.0),
        width - right,
        y(0.0)
    );
    let _ = writeln!(
        svg,
        "<text x=\"{left}\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">bars: median over repeats; whiskers: min-max; {}</text>",
        height - 8.0,
        if cpu_limited(doc) {
            "\"2c\": 2 CPUs"
        } else {
            "no CPU limit: every bar had all the host's CPUs (\"2c\": 2 planned)"
        }
    );
    svg.push_str("</svg>\n");
    svg
}

/// Keeps at most `max_points` points, each the maximum of its bucket so peaks survive.
fn downsample(values: &[u32], max_points: usize) -> Vec<(usize, u32)> {
    if values.len() <= max_points {
        return values.iter().copied().enumerate().collect();
    }
    let bucket = values.len().div_ceil(max_points);
    values
        .chunks(bucket)
        .enumerate()
        .map(|(i, chunk)| (i * bucket, chunk.iter().copied().max().unwrap_or(0)))
        .collect()
}

/// The run drawn for a strategy in a scenario: fewest CPUs, then first repeat, with a timeline.
fn timeline_run<'a>(doc: &'a ResultsDoc, scenario: &str, strategy: &str) -> Option<&'a RunResult> {
    doc.runs
        .iter()
        .filter(|r| r.scenario == scenario && r.strategy == strategy)
        .filter(|r| !r.timeline.enrichment.is_empty() || !r.timeline.records.is_empty())
        .min_by(|a, b| a.cpus.total_cmp(&b.cpus).then(a.repeat.cmp(&b.repeat)))
}

/// Calls in flight per dependency over time: one panel per strategy, one run each.
fn timeline_chart(doc: &ResultsDoc, scenario: &str) -> Option<String> {
    let runs: Vec<&RunResult> = strategies(doc)
        .iter()
        .filter_map(|s| timeline_run(doc, scenario, s))
        .collect();
    if runs.is_empty() {
        return None;
    }
    let seconds = |r: &RunResult| {
        let interval = if r.timeline.interval_ms > 0.0 {
            r.timeline.interval_ms
        } else {
            10.0
        };
        r.timeline.enrichment.len().max(r.timeline.records.len()) as f64 * interval / 1000.0
    };
    let longest = runs.iter().map(|r| seconds(r)).fold(0.0f64, f64::max);
    let shortest = runs
        .iter()
        .map(|r| seconds(r))
        .fold(f64::INFINITY, f64::min);
    // One time axis for all panels makes them comparable, but when one run is far longer (C1 at
    // one CPU takes ~80 s, the others ~3 s) the short ones shrink to a sliver: then each panel
    // gets its own axis, and the figure says so.
    let shared_axis = longest <= 3.0 * shortest.max(1e-3);
    let x_axis = |secs: f64| {
        let raw = secs.max(1e-3);
        let step = nice_step(raw, 8.0);
        (((raw / step).ceil() * step), step)
    };
    let (left, right, top, panel_h, panel_gap) = (64.0, 20.0, 84.0, 110.0, 58.0);
    let width = 780.0;
    let height = top + runs.len() as f64 * (panel_h + panel_gap) + 20.0;
    let plot_w = width - left - right;
    let title = format!("Calls in flight per dependency over time: {scenario}");
    let mut svg = svg_open(width, height, &title);
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"34\" x2=\"{}\" y2=\"34\" stroke=\"{ENRICH_COLOR}\" stroke-width=\"2\"/><text x=\"{}\" y=\"38\">enrichment calls in flight</text><line x1=\"{}\" y1=\"34\" x2=\"{}\" y2=\"34\" stroke=\"{RECORDS_COLOR}\" stroke-width=\"2\"/><text x=\"{}\" y=\"38\">writes in flight</text>",
        left + 20.0,
        left + 26.0,
        left + 200.0,
        left + 220.0,
        left + 226.0
    );
    // Only a run whose limit moves has a limit series: name the dashed lines only if one is drawn.
    let limits_drawn = runs
        .iter()
        .any(|r| !r.timeline.enrichment_limit.is_empty() || !r.timeline.records_limit.is_empty());
    if limits_drawn {
        let _ = writeln!(
            svg,
            "<line x1=\"{}\" y1=\"34\" x2=\"{}\" y2=\"34\" stroke=\"#555\" stroke-width=\"1.3\" stroke-dasharray=\"5 3\"/><text x=\"{}\" y=\"38\">dashed: the adaptive limit of the calls of its colour</text>",
            left + 340.0,
            left + 360.0,
            left + 366.0
        );
    }
    for (i, run) in runs.iter().enumerate() {
        let py = top + i as f64 * (panel_h + panel_gap);
        let (x_max, x_step) = x_axis(if shared_axis { longest } else { seconds(run) });
        let interval_s = if run.timeline.interval_ms > 0.0 {
            run.timeline.interval_ms / 1000.0
        } else {
            0.01
        };
        let peak = run
            .timeline
            .enrichment
            .iter()
            .chain(&run.timeline.records)
            .copied()
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        // An adaptive limit is drawn dashed over its calls in flight, clipped a quarter above
        // their peak (an unused limit climbing to its maximum would flatten the calls).
        let peak =
            if run.timeline.enrichment_limit.is_empty() && run.timeline.records_limit.is_empty() {
                peak
            } else {
                (peak * 1.25).ceil()
            };
        // Calls in flight are whole numbers: no tick at 0.5.
        let y_step = nice_step(peak, 3.0).max(1.0);
        let y_max = (peak / y_step).ceil() * y_step;
        let x = |t: f64| left + t / x_max * plot_w;
        let y = |v: f64| py + panel_h - v / y_max * panel_h;
        let _ = writeln!(
            svg,
            "<text x=\"{left}\" y=\"{:.1}\" font-weight=\"bold\">{}, {}, repeat {}: {} accepted/s</text>",
            py - 28.0,
            esc_xml(&strategy_label(&run.strategy)),
            esc_xml(&cpus_words(run.cpus, !run.unlimited)),
            run.repeat,
            fmt_num(run.accepted_per_s)
        );
        let _ = writeln!(
            svg,
            "<text x=\"{left}\" y=\"{:.1}\" font-size=\"10\" fill=\"#333\">{}</text>",
            py - 12.0,
            esc_xml(&measured_peaks(run))
        );
        let _ = writeln!(
            svg,
            "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\" font-size=\"10\" fill=\"#555\">calls in flight</text>",
            py + panel_h / 2.0
        );
        for tick in ticks(y_max, y_step) {
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                y(tick),
                width - right,
                y(tick),
                left - 6.0,
                y(tick) + 4.0,
                fmt_num(tick)
            );
        }
        for t in ticks(x_max, x_step) {
            let _ = writeln!(
                svg,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
                x(t),
                py + panel_h,
                x(t),
                py + panel_h + 4.0,
                x(t),
                py + panel_h + 14.0,
                fmt_num(t)
            );
        }
        for (series, color, dash) in [
            (&run.timeline.enrichment, ENRICH_COLOR, ""),
            (&run.timeline.records, RECORDS_COLOR, ""),
            (
                &run.timeline.enrichment_limit,
                ENRICH_COLOR,
                " stroke-dasharray=\"5 3\"",
            ),
            (
                &run.timeline.records_limit,
                RECORDS_COLOR,
                " stroke-dasharray=\"5 3\"",
            ),
        ] {
            if series.is_empty() {
                continue;
            }
            let mut points = String::new();
            for (idx, v) in downsample(series, 900) {
                let _ = write!(
                    points,
                    "{:.1},{:.1} ",
                    x(idx as f64 * interval_s),
                    y((v as f64).min(y_max))
                );
            }
            let _ = writeln!(
                svg,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.3\"{dash}/>",
                points.trim_end()
            );
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
            py + panel_h,
            width - right,
            py + panel_h
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">seconds since the first record started{}</text>",
        left + plot_w / 2.0,
        height - 4.0,
        if shared_axis {
            ""
        } else {
            " (each panel has its own time axis)"
        }
    );
    svg.push_str("</svg>\n");
    Some(svg)
}

/// The peaks a run measured, for a timeline's panel: the runner's own gauges count every call,
/// where the drawn samples (every 10 ms) can miss a brief peak; the sim counts the writes inside
/// the system of record. A document from before the runner counted its writes' peak shows the
/// samples' peak instead.
fn measured_peaks(run: &RunResult) -> String {
    let sampled = |v: &[u32]| u64::from(v.iter().copied().max().unwrap_or(0));
    let enrichment = run
        .peak_enrichment_in_flight
        .max(sampled(&run.timeline.enrichment));
    let writes = run
        .peak_writes_in_flight
        .max(sampled(&run.timeline.records));
    format!(
        "measured peaks: {enrichment} enrichment calls and {writes} writes in flight (runner), {} writes at the system of record at once (sim)",
        run.peak_writes_offered
    )
}

/// File-name-safe form of a scenario name.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The report's figures: a bar chart of each metric the registry charts
/// ([`Shown::chart`](crate::results::Shown::chart)), accepted/s and 503s, then one timeline
/// figure per scenario.
pub fn figures(doc: &ResultsDoc) -> Vec<Figure> {
    // Said under the figures whose numbers the time scale changes (rates, seconds).
    let scaled = scale_note(doc)
        .map(|note| format!(" {note}"))
        .unwrap_or_default();
    let mut out: Vec<Figure> = Metric::ALL
        .into_iter()
        .filter_map(|metric| {
            let def = metric.def();
            let chart = def.shown.chart?;
            let note = if def.unit.scales_with_time() {
                scaled.as_str()
            } else {
                ""
            };
            Some(Figure {
                file: format!("{}.svg", def.name),
                title: chart.title.into(),
                caption: format!("{}{note}", chart.caption),
                svg: bar_chart(doc, metric, chart.heading, chart.axis),
            })
        })
        .collect();
    for scenario in scenarios(doc) {
        if let Some(svg) = timeline_chart(doc, &scenario) {
            out.push(Figure {
                file: format!("timeline-{}.svg", slug(&scenario)),
                title: format!("Calls in flight over time: {scenario}"),
                caption: format!(
                    "Enrichment calls and writes the runner had in flight, sampled every 10 ms, for one run of each strategy in {scenario} (fewest CPUs, first repeat). A brief peak can fall between two samples: each panel's title gives the peaks the runner and the sim measured.{scaled}"
                ),
                svg,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Spread;

    #[test]
    fn all_zero_and_non_finite_bars_draw_quickly() {
        let row = |v: f64| SummaryRow {
            strategy: "c1".into(),
            scenario: "s".into(),
            cpus: 1.0,
            write_503s: Spread {
                median: v,
                min: v,
                max: v,
            },
            ..Default::default()
        };
        for v in [0.0, f64::INFINITY, f64::NAN, 1e-12] {
            let doc = ResultsDoc {
                summary: vec![row(v)],
                ..Default::default()
            };
            let svg = bar_chart(&doc, Metric::Write503s, "t", "y");
            assert!(svg.len() < 20_000, "{v}: {} bytes", svg.len());
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
    }

    #[test]
    fn timelines_give_the_measured_peaks_and_label_their_axis() {
        let mut run = crate::results::sample_run("c2", "healthy", 1.0, 1, 3.0);
        // Sampled every 10 ms, the writes peak at 7; the runner counted 10 at once, the sim 9.
        run.timeline = crate::results::Timeline {
            interval_ms: 10.0,
            enrichment: vec![3, 32, 30, 5],
            records: vec![1, 7, 4, 0],
            ..Default::default()
        };
        run.peak_enrichment_in_flight = 32;
        run.peak_writes_in_flight = 10;
        run.peak_writes_offered = 9;
        let doc = ResultsDoc {
            runs: vec![run],
            ..Default::default()
        };
        let svg = timeline_chart(&doc, "healthy").unwrap();
        assert!(
            svg.contains("measured peaks: 32 enrichment calls and 10 writes in flight (runner), 9 writes at the system of record at once (sim)"),
            "{svg}"
        );
        assert!(!svg.contains("peak 32 enrichment, 7 writes"), "{svg}");
        assert!(svg.contains("rotate(-90)\" text-anchor=\"middle\" font-size=\"10\" fill=\"#555\">calls in flight</text>"), "{svg}");
        // A document from before the runner counted its writes' peak: the samples' peak.
        let mut old = doc.clone();
        old.runs[0].peak_writes_in_flight = 0;
        let svg = timeline_chart(&old, "healthy").unwrap();
        assert!(svg.contains("and 7 writes in flight"), "{svg}");
    }

    #[test]
    fn the_legend_names_an_adaptive_limit_only_when_one_is_drawn() {
        let mut run = crate::results::sample_run("c4", "slow-write", 1.0, 1, 3.0);
        run.timeline = crate::results::Timeline {
            interval_ms: 10.0,
            enrichment: vec![3, 24, 20, 5],
            records: vec![1, 6, 4, 0],
            ..Default::default()
        };
        let mut doc = ResultsDoc {
            runs: vec![run.clone()],
            ..Default::default()
        };
        let svg = timeline_chart(&doc, "slow-write").unwrap();
        assert!(svg.contains(">writes in flight</text>"), "{svg}");
        assert!(
            !svg.contains("adaptive") && !svg.contains("dashed"),
            "{svg}"
        );
        assert!(!svg.contains("stroke-dasharray"), "{svg}");
        // A second strategy whose records budget adapts: its limit is drawn, and named.
        let mut adaptive = run;
        adaptive.strategy = "c5".into();
        adaptive.timeline.records_limit = vec![4, 8, 6, 6];
        doc.runs.push(adaptive);
        let svg = timeline_chart(&doc, "slow-write").unwrap();
        assert_eq!(
            svg.matches("stroke-dasharray").count(),
            2,
            "legend and C5's limit"
        );
        assert!(
            svg.contains(">dashed: the adaptive limit of the calls of its colour</text>"),
            "{svg}"
        );
    }

    #[test]
    fn downsampling_keeps_peaks() {
        let mut v = vec![0u32; 10_000];
        v[4321] = 17;
        let d = downsample(&v, 900);
        assert!(d.len() <= 900);
        assert_eq!(d.iter().map(|(_, v)| *v).max(), Some(17));
        assert_eq!(downsample(&[1, 2], 900), vec![(0, 1), (1, 2)]);
    }
}
