//! Numbers as the lab's messages, tables and figures print them.

/// Numbers as people read them: integers bare, others to about three significant places,
/// without trailing zeros.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if (v - v.round()).abs() < 1e-9 && v.abs() < 1e15 {
        return format!("{}", v.round() as i64);
    }
    let a = v.abs();
    let text = if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_print_bare_and_others_to_about_three_places() {
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(0.5), "0.5");
        assert_eq!(fmt_num(1.956), "1.96");
        assert_eq!(fmt_num(123.46), "123.5");
        assert_eq!(fmt_num(0.12345), "0.123");
        assert_eq!(fmt_num(f64::INFINITY), "inf");
    }
}
