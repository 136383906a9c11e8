//! The preregistered hypotheses (`lab/hypotheses.toml`) evaluated on a fixed results file (the
//! support's `fixture`).

use inflight_lab::hypothesis;
use inflight_lab::results::ResultsDoc;

use crate::support::{fixture, repo_file};

fn outcomes(results: &[inflight_lab::results::HypothesisResult]) -> Vec<(String, String)> {
    results
        .iter()
        .map(|r| (r.id.clone(), r.outcome.clone()))
        .collect()
}

#[test]
fn the_committed_hypotheses_evaluate_on_the_fixture() {
    let hs = hypothesis::load(&repo_file("../../lab/hypotheses.toml")).unwrap();
    let doc = fixture();
    let results = hypothesis::evaluate(&hs, &doc);
    let expected: Vec<(String, String)> = [
        ("H1", "pass"),
        ("H2", "pass"),
        ("H3", "pass"),
        ("H4", "pass"),
        ("H5", "pass"),
        ("H6", "pass"),
        ("H7", "fail"),
        ("H8", "pass"),
        ("H9", "pass"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    let got = outcomes(&results);
    assert_eq!(got[..9], expected);
    // The later hypotheses are about strategies and scenarios the fixture's run did not include.
    assert!(
        got[9..].iter().all(|(_, outcome)| outcome == "skipped"),
        "{got:?}"
    );

    // The observed text carries the fixture's numbers, not the thresholds alone.
    let h1 = &results[0];
    assert!(
        h1.observed
            .contains("C1 @1 CPU 5.28 / C1 @2 CPUs 2.66 = 1.985x (>= 1.8: ok)"),
        "{}",
        h1.observed
    );
    let h7 = &results[6];
    assert!(
        h7.observed.contains("= 1.303x (in [0.8, 0.95]: no)"),
        "{}",
        h7.observed
    );
    let h9 = &results[8];
    for cell in ["C2 @1 CPU 0.215", "C3 @1 CPU 0.19 ", "C4 @1 CPU 0.205"] {
        assert!(h9.observed.contains(cell), "{cell} in {}", h9.observed);
    }
    // The same outcomes the lab recorded when it made the fixture (which had only H1-H9).
    assert_eq!(outcomes(&results)[..9], outcomes(&doc.hypotheses));
}

#[test]
fn missing_cells_skip_rather_than_fail() {
    let hs = hypothesis::builtin();
    let mut doc = fixture();
    doc.summary
        .retain(|r| r.cpus == 1.0 && r.scenario != "slow-enrichment");
    let results = hypothesis::evaluate(&hs, &doc);
    let by_id = |id: &str| results.iter().find(|r| r.id == id).unwrap();
    assert_eq!(by_id("H1").outcome, "skipped");
    assert!(
        by_id("H1").observed.contains("C1 @2 CPUs"),
        "{}",
        by_id("H1").observed
    );
    assert_eq!(by_id("H2").outcome, "skipped");
    assert_eq!(by_id("H8").outcome, "skipped");
    assert_eq!(by_id("H9").outcome, "skipped");
    assert_eq!(by_id("H3").outcome, "pass");

    let none = hypothesis::evaluate(&hs, &ResultsDoc::default());
    assert!(none.iter().all(|r| r.outcome == "skipped"));
}

#[test]
fn a_changed_value_changes_the_outcome() {
    let hs = hypothesis::builtin();
    let mut doc = fixture();
    let row = doc
        .summary
        .iter_mut()
        .find(|r| r.strategy == "c4" && r.scenario == "slow-write")
        .unwrap();
    row.write_503s.max = 1.0;
    row.peak_writes_offered.max = 7.0;
    let results = hypothesis::evaluate(&hs, &doc);
    let by_id = |id: &str| results.iter().find(|r| r.id == id).unwrap();
    assert_eq!(by_id("H3").outcome, "fail");
    assert_eq!(by_id("H4").outcome, "fail");
    assert!(
        by_id("H4").observed.contains("C4 @1 CPU 1 (== 0: no)"),
        "{}",
        by_id("H4").observed
    );
}

#[test]
fn a_missing_or_broken_file_is_an_error_naming_it() {
    let err = hypothesis::load(&repo_file("no/such.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no/such.toml"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.toml");
    std::fs::write(&path, "[[hypothesis]]\nid = 1\n").unwrap();
    let err = hypothesis::load(&path).unwrap_err().to_string();
    assert!(err.contains("h.toml"), "{err}");
}
