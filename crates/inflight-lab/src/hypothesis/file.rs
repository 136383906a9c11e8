//! The hypotheses file read: each `[[hypothesis]]` checked into a [`Hypothesis`], with messages
//! that name the file and the hypothesis.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

use super::{
    Baseline, Compare, Hypothesis, HypothesisError, Measure, Stat, Test, Threshold,
    BUILTIN_HYPOTHESES,
};
use crate::results::{ClassMetric, Metric};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    hypothesis: Vec<RawHypothesis>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHypothesis {
    id: String,
    claim: String,
    metric: String,
    class: Option<String>,
    scenario: String,
    #[serde(default)]
    stat: Stat,
    strategies: Vec<String>,
    #[serde(default = "default_cpus")]
    cpus: Vec<f64>,
    #[serde(default = "default_replicas")]
    replicas: u32,
    ratio_to: Option<Baseline>,
    minus: Option<Baseline>,
    compare: Option<Compare>,
    threshold: Option<toml::Value>,
    between: Option<Vec<f64>>,
}

fn default_cpus() -> Vec<f64> {
    vec![1.0]
}

fn default_replicas() -> u32 {
    1
}

impl RawHypothesis {
    fn validate(self) -> Result<Hypothesis, String> {
        if self.id.trim().is_empty() {
            return Err("id must not be empty".into());
        }
        let metric = match (
            Metric::from_name(&self.metric),
            ClassMetric::from_name(&self.metric),
            self.class,
        ) {
            (Some(metric), _, None) => Measure::Summary(metric),
            (Some(_), _, Some(class)) => {
                return Err(format!(
                    "class = {class:?} takes a class metric ({}), not `{}`",
                    class_metric_names(),
                    self.metric
                ))
            }
            (_, Some(metric), Some(class)) if !class.trim().is_empty() => {
                Measure::Class { class, metric }
            }
            (_, Some(_), _) => {
                return Err(format!(
                    "metric `{}` is about one class's records: name it with class = \"NAME\"",
                    self.metric
                ))
            }
            (None, None, _) => {
                let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
                return Err(format!(
                    "unknown metric `{}`; known metrics: {}; with class = \"NAME\": {}",
                    self.metric,
                    known.join(", "),
                    class_metric_names()
                ));
            }
        };
        if self.strategies.is_empty() {
            return Err("strategies must name at least one strategy".into());
        }
        if self.cpus.is_empty() || self.cpus.iter().any(|c| !c.is_finite() || *c <= 0.0) {
            return Err(format!(
                "cpus must be a list of CPU counts above 0, got {:?}",
                self.cpus
            ));
        }
        for (field, cell) in [("ratio_to", &self.ratio_to), ("minus", &self.minus)] {
            if let Some(cell) = cell {
                if !cell.cpus.is_finite() || cell.cpus <= 0.0 {
                    return Err(format!("{field}.cpus must be above 0, got {}", cell.cpus));
                }
            }
        }
        if self.replicas == 0 {
            return Err("replicas must be at least 1".into());
        }
        if self.ratio_to.is_some() && self.minus.is_some() {
            return Err("give ratio_to or minus, not both".into());
        }
        let test = match (self.compare, self.threshold, self.between) {
            (Some(op), Some(threshold), None) => {
                let threshold = match threshold {
                    toml::Value::Integer(i) => Threshold::Value(i as f64),
                    toml::Value::Float(f) if f.is_finite() => Threshold::Value(f),
                    toml::Value::String(s) if s == "cpus" => Threshold::Cpus,
                    other => {
                        return Err(format!(
                            "threshold must be a number or \"cpus\", got {other}"
                        ))
                    }
                };
                Test::Compare(op, threshold)
            }
            (None, None, Some(range)) => match range.as_slice() {
                [lo, hi] if lo.is_finite() && hi.is_finite() && lo <= hi => Test::Between(*lo, *hi),
                _ => {
                    return Err(format!(
                        "between must be [lo, hi] with lo <= hi, got {range:?}"
                    ))
                }
            },
            (Some(_), None, None) => return Err("compare needs a threshold".into()),
            (None, Some(_), None) => return Err("threshold needs a compare".into()),
            _ => return Err(
                "give either compare + threshold, or between = [lo, hi] (not both, not neither)"
                    .into(),
            ),
        };
        Ok(Hypothesis {
            id: self.id,
            claim: self.claim,
            metric,
            scenario: self.scenario,
            stat: self.stat,
            strategies: self.strategies,
            cpus: self.cpus,
            replicas: self.replicas,
            ratio_to: self.ratio_to,
            minus: self.minus,
            test,
        })
    }
}

fn class_metric_names() -> String {
    let names: Vec<&str> = ClassMetric::ALL.iter().map(|m| m.name()).collect();
    names.join(", ")
}

/// Parses and validates a hypotheses file's text; `origin` names it in error messages.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Hypothesis>, HypothesisError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| HypothesisError::Parse {
        origin: origin.to_string(),
        message: e.to_string().trim().to_string(),
    })?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(raw.hypothesis.len());
    for h in raw.hypothesis {
        let id = h.id.clone();
        if !seen.insert(id.clone()) {
            return Err(HypothesisError::Invalid {
                origin: origin.to_string(),
                id,
                message: "the id is used twice".into(),
            });
        }
        out.push(h.validate().map_err(|message| HypothesisError::Invalid {
            origin: origin.to_string(),
            id,
            message,
        })?);
    }
    Ok(out)
}

/// Reads and validates a hypotheses file.
pub fn load(path: &Path) -> Result<Vec<Hypothesis>, HypothesisError> {
    let text = std::fs::read_to_string(path).map_err(|source| HypothesisError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// The hypotheses compiled into the binary (a copy of `lab/hypotheses.toml`).
pub fn builtin() -> Vec<Hypothesis> {
    parse(BUILTIN_HYPOTHESES, "built-in").expect("the built-in hypotheses file is valid")
}

/// The one hypothesis of `text`, for tests.
#[cfg(test)]
pub(super) fn parse_one(text: &str) -> Hypothesis {
    let mut hs = parse(text, "t.toml").unwrap();
    assert_eq!(hs.len(), 1);
    hs.remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_file_is_valid_and_covers_the_reference_claims() {
        let hs = builtin();
        let ids: Vec<_> = hs.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(
            ids[..9],
            ["H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8", "H9"]
        );
        for id in ["H12", "H13", "H17", "H20", "H21", "H22", "H23"] {
            assert!(ids.contains(&id), "{id} missing");
        }
    }

    #[test]
    fn a_class_metric_and_a_class_go_together() {
        let text = |metric: &str, class: &str| {
            format!("[[hypothesis]]\nid = \"x\"\nclaim = \"c\"\nmetric = \"{metric}\"\n{class}\nscenario = \"s\"\nstrategies = [\"a\"]\ncompare = \">=\"\nthreshold = 1\n")
        };
        for (metric, class, says) in [
            (
                "class_accepted_fraction",
                "",
                "name it with class = \"NAME\"",
            ),
            (
                "class_accepted_fraction",
                "class = \" \"",
                "name it with class",
            ),
            (
                "accepted_per_s",
                "class = \"interactive\"",
                "takes a class metric (class_records",
            ),
            (
                "class_p99",
                "class = \"interactive\"",
                "with class = \"NAME\": class_records",
            ),
        ] {
            let e = parse(&text(metric, class), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{metric} {class}: {e}");
        }
        let h = parse_one(&text("class_accepted_fraction", "class = \"batch\""));
        assert_eq!(
            h.metric,
            Measure::Class {
                class: "batch".into(),
                metric: ClassMetric::AcceptedFraction
            }
        );
    }

    #[test]
    fn bad_files_name_what_is_wrong() {
        let base =
            "[[hypothesis]]\nid = \"x\"\nclaim = \"c\"\nscenario = \"s\"\nstrategies = [\"c1\"]\n";
        let cases = [
            (format!("{base}metric = \"nope\"\ncompare = \"<\"\nthreshold = 1\n"), "unknown metric `nope`"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\n"), "compare needs a threshold"),
            (format!("{base}metric = \"failed\"\ncompare = \"~\"\nthreshold = 1\n"), "compare"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = \"x\"\n"), "threshold must be a number"),
            (format!("{base}metric = \"failed\"\nbetween = [2, 1]\n"), "lo <= hi"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\nbetween = [0, 1]\n"), "not both"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\ncpus = []\n"), "cpus"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\n{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\n"), "used twice"),
        ];
        for (text, needle) in cases {
            let err = parse(&text, "t.toml").unwrap_err().to_string();
            assert!(err.contains(needle), "{needle:?} not in {err:?}");
        }
    }
}
