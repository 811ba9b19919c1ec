//! Time figures are measured and merged in whole microseconds (latency
//! histograms and send lag, as `loadfleet_proto::histogram` keeps them)
//! or nanoseconds (clock offsets, pool saturation), and shown in
//! milliseconds or seconds. These are the only conversions between them,
//! so no reader divides by a constant of its own and a unit is changed in
//! one place.

/// Microseconds as milliseconds.
pub(crate) fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1e3
}

/// Microseconds as seconds.
pub(crate) fn us_to_s(us: u64) -> f64 {
    us as f64 / 1e6
}

/// Seconds as whole microseconds (a bucket bound in a histogram's unit);
/// negative or NaN input gives 0.
pub(crate) fn s_to_us(s: f64) -> u64 {
    (s * 1e6) as u64
}

/// Nanoseconds (signed, as a clock offset may be) as milliseconds.
pub(crate) fn ns_to_ms(ns: impl Into<i128>) -> f64 {
    ns.into() as f64 / 1e6
}

/// Nanoseconds as seconds.
pub(crate) fn ns_to_s(ns: impl Into<i128>) -> f64 {
    ns.into() as f64 / 1e9
}

/// Nanoseconds as whole microseconds, rounded down.
pub(crate) fn ns_to_us(ns: u64) -> u64 {
    ns / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_keep_the_value() {
        assert_eq!(us_to_ms(2_500), 2.5);
        assert_eq!(us_to_s(1_500_000), 1.5);
        assert_eq!(s_to_us(0.0005), 500);
        assert_eq!(s_to_us(-1.0), 0);
        assert_eq!(ns_to_ms(-3_000_000i64), -3.0);
        assert_eq!(ns_to_s(2_000_000_000u64), 2.0);
        assert_eq!(ns_to_us(2_999), 2);
    }
}
