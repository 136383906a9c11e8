//! [`nice_step`] and [`ticks`]: the value axes of the hand-written SVG figures (the lab's report
//! and `inflight capacity --svg`), from 0 up in steps of 1, 2 or 5 times a power of ten.
//!
//! ```
//! use inflight_bench::axis::{nice_step, ticks};
//!
//! let step = nice_step(67.0, 5.0);
//! assert_eq!(step, 20.0);
//! let top = (67.0 / step).ceil() * step;
//! assert_eq!(ticks(top, step), [0.0, 20.0, 40.0, 60.0, 80.0]);
//! ```

/// The most ticks [`ticks`] returns, the one at 0 not counted.
pub const MAX_TICKS: usize = 50;

/// A step of 1, 2 or 5 times a power of ten giving about `target` ticks up to `max`; 1 for a
/// `max` that is not a positive finite number.
pub fn nice_step(max: f64, target: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() || !(target > 0.0 && target.is_finite()) {
        return 1.0;
    }
    let raw = max / target;
    let pow = 10f64.powf(raw.log10().floor());
    let frac = raw / pow;
    let nice = if frac <= 1.0 {
        1.0
    } else if frac <= 2.0 {
        2.0
    } else if frac <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * pow
}

/// Tick values 0, step, 2 step, ... up to `max`; at most [`MAX_TICKS`] + 1 of them whatever the
/// input, and only 0 when `max` or `step` is not a usable number.
pub fn ticks(max: f64, step: f64) -> Vec<f64> {
    if !(max.is_finite() && step.is_finite() && step > 0.0 && max >= 0.0) {
        return vec![0.0];
    }
    (0..=MAX_TICKS)
        .map(|i| i as f64 * step)
        .take_while(|t| *t <= max + step * 1e-6)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(67.0, 5.0), 20.0);
        assert_eq!(nice_step(0.3, 3.0), 0.1);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
        assert_eq!(nice_step(f64::NAN, 5.0), 1.0);
        assert_eq!(nice_step(10.0, 0.0), 1.0);
    }

    #[test]
    fn ticks_are_bounded_whatever_the_input() {
        assert_eq!(ticks(1.0, 0.5), vec![0.0, 0.5, 1.0]);
        assert_eq!(ticks(1.0, 1e-10).len(), MAX_TICKS + 1);
        assert_eq!(ticks(f64::INFINITY, 1.0), vec![0.0]);
        assert_eq!(ticks(1.0, 0.0), vec![0.0]);
    }
}
