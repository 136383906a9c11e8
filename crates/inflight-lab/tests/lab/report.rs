//! The report written from a fixed results file (the support's `fixture`): every file exists and
//! is well-formed.

use std::path::Path;

use inflight_lab::report;
use inflight_lab::results::ResultsDoc;

use crate::support::fixture;

/// Parses `text` as XML (roxmltree): tags nest and close, attributes are quoted, `&` starts an
/// entity, and there is one root element. Elements in `void` (HTML's `meta`, ...) need no closing
/// tag. Returns the root elements seen.
fn check_well_formed(text: &str, void: &[&str]) -> Result<Vec<String>, String> {
    let xml = close_void_elements(text, void);
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(&xml, options).map_err(|e| e.to_string())?;
    Ok(vec![doc.root_element().tag_name().name().to_string()])
}

/// `text` with each start tag of an element in `void` closed (`<meta charset="utf-8"/>`), as
/// XML needs them.
fn close_void_elements(text: &str, void: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find('>').map_or(rest.len(), |e| e + 1);
        let tag = &rest[..end];
        let name: String = tag[1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if void.contains(&name.as_str()) && tag.ends_with('>') && !tag.ends_with("/>") {
            out.push_str(&tag[..tag.len() - 1]);
            out.push_str("/>");
        } else {
            out.push_str(tag);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn parse_csv_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            (_, '"') => quoted = !quoted,
            (false, ',') => fields.push(String::new()),
            _ => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_report_files_exist_and_are_well_formed() {
    let doc = fixture();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/report");
    report::write_report(&doc, &out).unwrap();
    // To look at the fixture's report in a browser: INFLIGHT_KEEP_REPORT=/some/dir cargo test ...
    if let Some(keep) = std::env::var_os("INFLIGHT_KEEP_REPORT") {
        report::write_report(&doc, Path::new(&keep)).unwrap();
    }

    // runs.csv: the documented columns, one row per run, values that match the runs.
    let csv = read(&out, "runs.csv");
    let mut lines = csv.lines();
    let header = parse_csv_line(lines.next().unwrap());
    assert_eq!(header, report::CSV_COLUMNS);
    let rows: Vec<Vec<String>> = lines.map(parse_csv_line).collect();
    assert_eq!(rows.len(), doc.runs.len());
    for (row, run) in rows.iter().zip(&doc.runs) {
        assert_eq!(row.len(), header.len());
        assert_eq!(row[0], run.strategy);
        assert_eq!(row[1], run.scenario);
        let complete: u64 = row[6].parse().unwrap();
        assert_eq!(complete, run.complete);
        let accepted: f64 = row[12].parse().unwrap();
        assert!((accepted - run.accepted_per_s).abs() < 1e-3);
    }

    // SVG figures: the two bar charts and one timeline per scenario, each a single <svg> root.
    let mut svgs: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    svgs.sort();
    assert_eq!(
        svgs,
        [
            "accepted_per_s.svg",
            "timeline-healthy.svg",
            "timeline-slow-enrichment.svg",
            "timeline-slow-write.svg",
            "write_503s.svg"
        ]
    );
    for name in &svgs {
        let svg = read(&out, name);
        let roots = check_well_formed(&svg, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(roots, ["svg"], "{name}");
        assert!(
            svg.contains("xmlns=\"http://www.w3.org/2000/svg\""),
            "{name}"
        );
    }
    let bars = read(&out, "accepted_per_s.svg");
    assert_eq!(
        bars.matches("<rect ").count(),
        1 + doc.summary.len(),
        "background + one bar per cell"
    );
    let timeline = read(&out, "timeline-slow-write.svg");
    assert_eq!(
        timeline.matches("<polyline ").count(),
        2 * 3,
        "two series for C2, C3, C4"
    );

    // index.html: well-formed, self-contained (figures inline, nothing loaded from elsewhere).
    let html = read(&out, "index.html");
    let roots = check_well_formed(&html, &["meta", "br", "img", "link", "hr", "input"])
        .unwrap_or_else(|e| panic!("index.html: {e}"));
    assert_eq!(roots, ["html"]);
    assert_eq!(html.matches("<svg ").count(), svgs.len());
    assert!(!html.contains("src="), "no external resources");
    assert!(
        !html.contains("http://")
            || html.matches("http://").count()
                == html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
    );
    for h in &doc.hypotheses {
        assert!(html.contains(&format!("<td>{}</td>", h.id)), "{}", h.id);
    }
    assert!(html.contains("<td class=\"fail\">fail</td>"));

    // summary.md: a table per scenario, the hypotheses, the reference figures, the figures.
    let md = read(&out, "summary.md");
    for heading in [
        "### healthy",
        "### slow-write",
        "### slow-enrichment",
        "## Hypotheses",
        "## Next to the seed",
        "## Figures",
    ] {
        assert!(md.contains(heading), "{heading}");
    }
    assert!(md.contains("8 pass, 1 fail, 0 skipped (of 9)"));
    for f in &svgs {
        assert!(md.contains(&format!("]({f})")), "{f} linked");
    }
    // Every markdown table row has as many cells as its header.
    for block in md.split("\n\n").filter(|b| b.starts_with("| ")) {
        let counts: Vec<usize> = block
            .lines()
            .map(|l| l.replace("\\|", "").matches('|').count())
            .collect();
        assert!(counts.windows(2).all(|w| w[0] == w[1]), "{block}");
    }
}

#[test]
fn terminal_tables_show_every_cell_and_hypothesis() {
    let doc = fixture();
    let table = report::summary_table(&doc);
    // A line per cell, under a line per scenario.
    let cells = table.lines().filter(|l| l.starts_with("  C")).count();
    assert_eq!(cells, doc.summary.len(), "{table}");
    for scenario in ["healthy", "slow-write", "slow-enrichment"] {
        assert!(table.lines().any(|l| l == scenario), "{table}");
    }
    // C1 at 2 CPUs in healthy: its median completion in seconds.
    assert!(table.contains("2.66 (2.54-2.77)"), "{table}");
    assert!(table.contains("Times are scaled by 0.1"), "{table}");
    let hyps = report::hypotheses_table(&doc);
    assert!(hyps.contains("FAIL     H7: In healthy"), "{hyps}");
    assert!(hyps.contains("8 pass, 1 fail, 0 skipped (of 9)"), "{hyps}");
    for line in table.lines().chain(hyps.lines()) {
        assert!(line.chars().count() <= report::TERMINAL_WIDTH, "{line}");
    }
    let reference = report::Reference::builtin().table(&doc);
    assert!(
        reference.contains("83.6"),
        "the reference C1 figure: {reference}"
    );
    assert!(
        reference.contains("time scale 0.1"),
        "rescaling is stated: {reference}"
    );
}

#[test]
fn an_empty_results_document_still_gives_a_well_formed_report() {
    let dir = tempfile::tempdir().unwrap();
    report::write_report(&ResultsDoc::default(), dir.path()).unwrap();
    for name in ["accepted_per_s.svg", "write_503s.svg"] {
        let svg = read(dir.path(), name);
        check_well_formed(&svg, &[]).unwrap();
        assert!(svg.contains("no data"));
    }
    check_well_formed(&read(dir.path(), "index.html"), &["meta"]).unwrap();
    assert_eq!(read(dir.path(), "runs.csv").lines().count(), 1);
}

#[test]
fn text_with_markup_characters_is_escaped() {
    let mut doc = fixture();
    doc.hypotheses[0].claim = "a < b & \"c\" > d".into();
    doc.summary[0].scenario = "odd<&>".into();
    let dir = tempfile::tempdir().unwrap();
    report::write_report(&doc, dir.path()).unwrap();
    let html = read(dir.path(), "index.html");
    check_well_formed(&html, &["meta"]).unwrap();
    assert!(html.contains("a &lt; b &amp; &quot;c&quot; &gt; d"));
    check_well_formed(&read(dir.path(), "accepted_per_s.svg"), &[]).unwrap();
}

#[test]
fn a_report_into_an_unwritable_place_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let err = report::write_report(&fixture(), &file.join("sub")).unwrap_err();
    assert!(format!("{err:#}").contains("a-file"), "{err:#}");
}

#[test]
fn the_well_formedness_check_catches_broken_markup() {
    for bad in [
        "<svg><g></svg>",
        "<svg>",
        "<svg x=1></svg>",
        "<svg>a & b</svg>",
        "<svg><text>1 < 2</text></svg>",
        "<svg x=\"1></svg>",
    ] {
        assert!(check_well_formed(bad, &[]).is_err(), "{bad}");
    }
    assert_eq!(
        check_well_formed(
            "<?xml version=\"1.0\"?><svg a=\"1\"><g/><!-- c --><text>&lt;</text></svg>",
            &[]
        )
        .unwrap(),
        ["svg"]
    );
}

#[test]
fn scaled_times_are_said_next_to_each_table() {
    let mut doc = fixture();
    assert_eq!(doc.meta.time_scale, 0.1);
    let dir = tempfile::tempdir().unwrap();
    report::write_report(&doc, dir.path()).unwrap();
    let note = "Times are scaled by 0.1 (--time-scale 0.1)";
    let md = read(dir.path(), "summary.md");
    // One per scenario table, right under it.
    for scenario in ["healthy", "slow-write", "slow-enrichment"] {
        let table = md.split(&format!("### {scenario}\n")).nth(1).unwrap();
        let after = table.split("\n\n").nth(1).unwrap();
        assert!(
            after.starts_with(&format!("_{note}")),
            "{scenario}: {after}"
        );
    }
    let html = read(dir.path(), "index.html");
    assert_eq!(
        html.matches(&format!("<p class=\"note\">{note}")).count(),
        3
    );
    assert!(report::summary_table(&doc).contains(note));

    doc.meta.time_scale = 1.0;
    report::write_report(&doc, dir.path()).unwrap();
    for file in ["summary.md", "index.html"] {
        assert!(
            !read(dir.path(), file).contains("Times are scaled"),
            "{file}"
        );
    }
    assert!(!report::summary_table(&doc).contains("Times are scaled"));
}

#[test]
fn the_page_fits_a_narrow_window() {
    let dir = tempfile::tempdir().unwrap();
    report::write_report(&fixture(), dir.path()).unwrap();
    let html = read(dir.path(), "index.html");
    // Laid out for the device's width, not a desktop's.
    assert!(
        html.contains("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
    );
    // Every table scrolls sideways inside its own block rather than widening the page.
    assert!(html.contains(".scroll{overflow-x:auto"), "{html}");
    assert_eq!(
        html.matches("<div class=\"scroll\">\n<table>").count(),
        html.matches("<table>").count()
    );
    // Ranges in numeric cells never break (a narrow column puts them under the median), figures
    // shrink, and a narrow window gets its own rules.
    assert!(html.contains(".range{white-space:nowrap"));
    assert!(
        html.contains("<td class=\"num\">2.66 <span class=\"range\">(2.54-2.77)</span></td>"),
        "{html}"
    );
    assert!(html.contains("figure svg{max-width:100%;height:auto}"));
    assert!(html.contains("@media (max-width:700px)"));
    // No fixed page width: the body uses the window.
    assert!(!html.contains("max-width:1200px"));
}
