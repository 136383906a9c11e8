//! [`suggest`]: the `[budgets.NAME]` table a measured knee implies, checked by
//! [`inflight::sizing::assess`] so that `inflight check-config` takes it without a warning.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use inflight::sizing::{assess, Warning};
use inflight::{BudgetConfig, Budgets, Rate};

/// Why no budget could be suggested for a name and a knee.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SuggestError {
    /// The name is not a bare TOML key (letters, digits, `_`, `-`).
    #[error("budget name `{0}` must be letters, digits, `_` or `-`")]
    Name(String),
    /// The budget built would not load, or would warn (a bug: the figures are chosen to avoid it).
    #[error("the suggested budget does not check cleanly: {0}")]
    Unchecked(String),
}

/// What the suggestion's `max_concurrent` rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The measured capacity (a knee).
    Knee,
    /// The highest level measured without a knee: the dependency may take more.
    LowerBound,
}

/// The figures a suggestion is built from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// The calls at once to allow.
    pub max_concurrent: u32,
    pub basis: Basis,
    /// Median latency at low load, in milliseconds.
    pub service_time_ms: f64,
    /// 99th percentile latency at `max_concurrent` calls in flight, in milliseconds.
    pub p99_ms: f64,
    /// The most calls per second measured.
    pub max_rate_per_s: f64,
}

/// A `[budgets.NAME]` table to paste into a budgets file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suggestion {
    pub name: String,
    pub basis: Basis,
    pub max_concurrent: u32,
    /// One more round of calls may wait.
    pub max_queued: u32,
    /// Twice the slower of the service time and the p99 at capacity, two significant digits up.
    pub permit_timeout_ms: u64,
    /// Eight times the slower of the service time and the p99 at capacity, two significant
    /// digits up: a call this slow is not an ordinary answer.
    pub call_timeout_ms: u64,
    /// The median latency at low load, rounded up to the millisecond.
    pub service_time_ms: u64,
    /// The most measured, at most `max_concurrent / service_time`, two significant digits down.
    pub target_rate_per_s: f64,
    /// The table as TOML, with a comment line saying where it came from.
    pub toml: String,
}

impl Suggestion {
    /// The suggestion as a budget configuration, the same one its `toml` loads into, for a
    /// program that builds its budgets from a measurement instead of a file.
    ///
    /// ```
    /// use inflight_capacity::suggest::{suggest, Basis, Measured};
    ///
    /// let s = suggest("records", "http://127.0.0.1:9/records", &Measured {
    ///     max_concurrent: 6,
    ///     basis: Basis::Knee,
    ///     service_time_ms: 150.4,
    ///     p99_ms: 231.0,
    ///     max_rate_per_s: 39.2,
    /// })?;
    /// let config = s.config();
    /// assert_eq!(config.max_concurrent(), 6);
    /// assert!(inflight::sizing::assess(&config).warnings.is_empty());
    /// # Ok::<(), inflight_capacity::suggest::SuggestError>(())
    /// ```
    pub fn config(&self) -> BudgetConfig {
        let mut config = BudgetConfig::new(self.max_concurrent as usize)
            .max_queued(self.max_queued as usize)
            .permit_timeout(Duration::from_millis(self.permit_timeout_ms))
            .call_timeout(Duration::from_millis(self.call_timeout_ms))
            .service_time(Duration::from_millis(self.service_time_ms));
        if self.target_rate_per_s > 0.0 {
            config = config.target_rate(Rate::per_second(self.target_rate_per_s));
        }
        config
    }
}

/// The budget for `name` that `measured` implies, checked to load and assess without warnings.
///
/// ```
/// use inflight_capacity::suggest::{suggest, Basis, Measured};
///
/// let s = suggest("records", "http://127.0.0.1:9/records", &Measured {
///     max_concurrent: 6,
///     basis: Basis::Knee,
///     service_time_ms: 150.4,
///     p99_ms: 231.0,
///     max_rate_per_s: 39.2,
/// })?;
/// assert_eq!((s.max_concurrent, s.max_queued, s.service_time_ms), (6, 6, 151));
/// assert_eq!(s.target_rate_per_s, 39.0);
/// assert!(s.toml.contains("[budgets.records]\nmax_concurrent = 6\n"));
/// # Ok::<(), inflight_capacity::suggest::SuggestError>(())
/// ```
///
/// # Errors
///
/// [`SuggestError::Name`] for a name that is not a bare TOML key.
pub fn suggest(name: &str, url: &str, measured: &Measured) -> Result<Suggestion, SuggestError> {
    check_name(name)?;
    let max_concurrent = measured.max_concurrent.max(1);
    let service_time_ms = (measured.service_time_ms.max(0.0).ceil() as u64).max(1);
    let slow = measured.p99_ms.max(service_time_ms as f64);
    let permit_timeout_ms = two_digits_up(2.0 * slow).max(1);
    let call_timeout_ms = two_digits_up(8.0 * slow).max(service_time_ms);
    let ceiling = f64::from(max_concurrent) * 1000.0 / service_time_ms as f64;
    let target_rate_per_s = two_digits_down(measured.max_rate_per_s.min(ceiling));
    let comment = match measured.basis {
        Basis::Knee => format!(
            "# measured by `inflight capacity {url}`: knee at {max_concurrent} calls in flight, {} per call at low load, at most {} measured",
            ms_text(measured.service_time_ms),
            rate_text(measured.max_rate_per_s)
        ),
        Basis::LowerBound => format!(
            "# measured by `inflight capacity {url}`: no knee up to {max_concurrent} calls in flight (it may take more), {} per call at low load",
            ms_text(measured.service_time_ms)
        ),
    };
    let mut toml = format!(
        "{comment}\n[budgets.{name}]\nmax_concurrent = {max_concurrent}\nmax_queued = {max_concurrent}\npermit_timeout = \"{permit_timeout_ms}ms\"\ncall_timeout = \"{call_timeout_ms}ms\"\nservice_time = \"{service_time_ms}ms\"\n"
    );
    if target_rate_per_s > 0.0 {
        toml.push_str(&format!(
            "target_rate = \"{}/s\"\n",
            number(target_rate_per_s)
        ));
    }
    check(&toml)?;
    Ok(Suggestion {
        name: name.to_string(),
        basis: measured.basis,
        max_concurrent,
        max_queued: max_concurrent,
        permit_timeout_ms,
        call_timeout_ms,
        service_time_ms,
        target_rate_per_s,
        toml,
    })
}

/// Checks that `name` can head a `[budgets.NAME]` table as it is.
///
/// # Errors
///
/// [`SuggestError::Name`] unless it is letters, digits, `_` and `-`, not empty.
pub fn check_name(name: &str) -> Result<(), SuggestError> {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        Ok(())
    } else {
        Err(SuggestError::Name(name.to_string()))
    }
}

/// Loads `toml` as a budgets file and assesses each budget; any warning is an error.
fn check(toml: &str) -> Result<(), SuggestError> {
    let budgets =
        Budgets::from_toml_str(toml).map_err(|e| SuggestError::Unchecked(e.to_string()))?;
    let warnings: Vec<Warning> = budgets
        .iter()
        .flat_map(|b| assess(b.config()).warnings)
        .collect();
    if warnings.is_empty() {
        Ok(())
    } else {
        let text: Vec<String> = warnings.iter().map(|w| w.to_string()).collect();
        Err(SuggestError::Unchecked(text.join("; ")))
    }
}

/// `v` rounded up to two significant digits, as whole milliseconds: 62.3 -> 63, 1234 -> 1300.
fn two_digits_up(v: f64) -> u64 {
    let v = v.max(1.0).ceil();
    let step = 10f64.powi((v.log10().floor() as i32 - 1).max(0));
    ((v / step).ceil() * step) as u64
}

/// `v` rounded down to two significant digits: 196.4 -> 190, 5.55 -> 5.5, 0.337 -> 0.33.
fn two_digits_down(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 0.0;
    }
    let exp = v.log10().floor() as i32 - 1;
    let step = 10f64.powi(exp);
    let rounded = (v / step + 1e-9).floor() * step;
    // Drop the float noise of the multiplication (0.33000000000000002).
    let decimals = (-exp).max(0) as usize;
    format!("{rounded:.decimals$}").parse().unwrap_or(rounded)
}

/// A number without trailing zeros: 190, 5.5, 0.33.
fn number(v: f64) -> String {
    let text = format!("{v:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn ms_text(ms: f64) -> String {
    format!("{ms:.1}ms")
}

fn rate_text(rate: f64) -> String {
    format!("{rate:.1}/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(max_concurrent: u32, service_time_ms: f64, p99_ms: f64, rate: f64) -> Measured {
        Measured {
            max_concurrent,
            basis: Basis::Knee,
            service_time_ms,
            p99_ms,
            max_rate_per_s: rate,
        }
    }

    #[test]
    fn rounding() {
        assert_eq!(two_digits_up(62.3), 63);
        assert_eq!(two_digits_up(1234.0), 1300);
        assert_eq!(two_digits_up(0.2), 1);
        assert_eq!(two_digits_up(100.0), 100);
        assert_eq!(two_digits_down(196.4), 190.0);
        assert_eq!(two_digits_down(5.55), 5.5);
        assert_eq!(two_digits_down(0.337), 0.33);
        assert_eq!(two_digits_down(40.0), 40.0);
        assert_eq!(number(0.33), "0.33");
        assert_eq!(number(190.0), "190");
    }

    #[test]
    fn the_budget_checks_cleanly_across_a_wide_range() {
        for cap in [1, 2, 6, 7, 13, 64, 1024] {
            for st in [0.05, 0.9, 1.0, 6.3, 30.2, 151.7, 999.9, 12_345.0] {
                for p99_factor in [1.0, 1.3, 5.0] {
                    // A measured rate above what the rounded service time allows must not warn.
                    for rate_factor in [0.5, 1.0, 1.2] {
                        let rate = f64::from(cap) * 1000.0 / st * rate_factor;
                        let m = measured(cap, st, st * p99_factor, rate);
                        let s = suggest("dep", "http://127.0.0.1/", &m)
                            .unwrap_or_else(|e| panic!("{m:?}: {e}"));
                        assert_eq!(s.max_concurrent, cap);
                        assert!(s.permit_timeout_ms as f64 >= 2.0 * st, "{s:?}");
                        assert!(s.call_timeout_ms >= s.service_time_ms, "{s:?}");
                        assert!(assess(&s.config()).warnings.is_empty(), "{s:?}");
                        let loaded = Budgets::from_toml_str(&s.toml).unwrap();
                        let loaded = loaded.get("dep").unwrap().config();
                        assert_eq!(loaded.max_queued_limit(), s.config().max_queued_limit());
                        assert_eq!(loaded.service_time_hint(), s.config().service_time_hint());
                    }
                }
            }
        }
    }

    #[test]
    fn a_name_must_be_a_bare_key() {
        let m = measured(6, 30.0, 40.0, 190.0);
        for bad in ["", "a.b", "with space", "quote\""] {
            assert_eq!(
                suggest(bad, "http://x/", &m),
                Err(SuggestError::Name(bad.to_string()))
            );
        }
        assert!(suggest("records_v2-a", "http://x/", &m).is_ok());
    }

    #[test]
    fn a_lower_bound_says_so() {
        let mut m = measured(32, 120.0, 180.0, 260.0);
        m.basis = Basis::LowerBound;
        let s = suggest("enrich", "http://127.0.0.1/enrich/1", &m).unwrap();
        assert!(s.toml.starts_with("# measured by"), "{}", s.toml);
        assert!(s.toml.contains("no knee up to 32"), "{}", s.toml);
    }
}
