//! [`Spread`]: the median, min and max of repeated measurements.

use serde::{Deserialize, Serialize};

/// Median, min and max of one metric over repeated measurements.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `f` applied to the median, the min and the max.
    pub fn map(self, f: impl Fn(f64) -> f64) -> Spread {
        Spread {
            median: f(self.median),
            min: f(self.min),
            max: f(self.max),
        }
    }

    /// Median, min and max of `values` (the median of an even count is the mean of the middle
    /// two); all zero for an empty list.
    pub fn of(values: &[f64]) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_and_max() {
        assert_eq!(
            Spread::of(&[3.0, 1.0, 2.0]),
            Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 10.0]).median, 3.0);
        assert_eq!(Spread::of(&[7.5]).median, 7.5);
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(Spread::of(&[1.0, 3.0]).map(|v| v * 2.0).max, 6.0);
    }
}
