//! What the tests share: the crate's own files, and a fixed results document.

use std::path::PathBuf;

use inflight_lab::results::ResultsDoc;

/// `rel` from the crate's folder (`crates/inflight-lab`).
pub fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The `results.json` of a real `inflight lab run --quick --repeats 2 --records 100` (C1-C4).
pub fn fixture() -> ResultsDoc {
    let text = std::fs::read_to_string(repo_file("tests/fixtures/results-quick.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}
