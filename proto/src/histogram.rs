//! Histograms on the wire, and the one way they are read as figures.
//!
//! Latency crosses the wire as HdrHistogram V2 bytes, the format every
//! HdrHistogram implementation reads, so merging on the coordinator is an
//! exact `add` and no percentile is ever averaged. The bytes are not
//! deflated: a worker encodes between two arrivals, and deflating costs
//! tens of times more than the plain encoding for a small size gain.
//! Values are microseconds; histograms auto-resize, and the agent clamps
//! values at [`crate::bounds::MAX_RECORDED_MICROS`] so the coordinator's
//! bounds on a decoded histogram hold for every honest one.

use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;

use crate::bounds::{MAX_HISTOGRAM_BYTES, MAX_HISTOGRAM_DIGITS, MAX_HISTOGRAM_HIGHEST};

/// Significant decimal digits kept: 3 gives 0.1% relative precision.
pub const SIGFIG: u8 = 3;

/// A histogram that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The bytes are not a V2 histogram within the bounds.
    #[error("corrupt histogram bytes: {0}")]
    Decode(String),
    /// The histogram could not be serialized (should not happen in memory).
    #[error("cannot encode histogram: {0}")]
    Encode(String),
}

/// A fresh auto-resizing histogram with the precision used everywhere.
pub fn new_histogram() -> Histogram<u64> {
    let mut h = Histogram::new(SIGFIG).expect("3 significant figures is a valid precision");
    h.auto(true);
    h
}

/// Encodes as V2; an empty histogram becomes empty bytes.
pub fn encode(h: &Histogram<u64>) -> Result<Vec<u8>, CodecError> {
    if h.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut out)
        .map_err(|e| CodecError::Encode(format!("{e:?}")))?;
    Ok(out)
}

/// Cookie of a V2 histogram (the only form [`encode`] writes and [`decode`]
/// reads).
const V2_COOKIE: u32 = 0x1c84_9313;
/// Bytes of the V2 header: cookie, payload length, normalizing offset,
/// digits, lowest, highest, conversion ratio.
const V2_HEADER_BYTES: usize = 40;

/// Decodes bytes from [`encode`] (empty bytes give an empty histogram).
///
/// The bytes come from peers, so everything is checked before anything is
/// allocated in proportion to what they claim: hdrhistogram's own
/// deserializer sizes its buffer from the header's payload length before
/// it checks that the bytes exist (40 bytes could claim 2 GiB), and sizes
/// the counts array from the claimed value range. Here the bytes must be
/// at most [`MAX_HISTOGRAM_BYTES`], the payload length must match the bytes
/// that follow the header, and the value range and digits must be within
/// [`MAX_HISTOGRAM_HIGHEST`] and [`MAX_HISTOGRAM_DIGITS`]. Only then does
/// hdrhistogram read them.
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, CodecError> {
    if bytes.is_empty() {
        return Ok(new_histogram());
    }
    if bytes.len() > MAX_HISTOGRAM_BYTES {
        return Err(CodecError::Decode(format!(
            "{} bytes, more than the {MAX_HISTOGRAM_BYTES} a histogram may take",
            bytes.len()
        )));
    }
    check_header(bytes)?;
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| CodecError::Decode(format!("{e:?}")))?;
    h.auto(true);
    Ok(h)
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Checks the V2 header against the bytes that are there and the bounds on
/// value range and precision.
fn check_header(inner: &[u8]) -> Result<(), CodecError> {
    let bad = |m: String| Err(CodecError::Decode(m));
    if inner.len() < V2_HEADER_BYTES {
        return bad(format!(
            "histogram is {} bytes, shorter than its header",
            inner.len()
        ));
    }
    let field = |at| be_u32(inner, at).unwrap_or(u32::MAX);
    let wide = |at| be_u64(inner, at).unwrap_or(u64::MAX);
    if field(0) != V2_COOKIE {
        return bad(format!("cookie {:#x} is not a V2 histogram", field(0)));
    }
    let payload_len = field(4) as usize;
    if payload_len != inner.len() - V2_HEADER_BYTES {
        return bad(format!(
            "header claims a {payload_len}-byte payload but {} bytes are there",
            inner.len() - V2_HEADER_BYTES
        ));
    }
    let digits = field(12);
    if digits > u32::from(MAX_HISTOGRAM_DIGITS) {
        return bad(format!(
            "{digits} significant digits, more than {MAX_HISTOGRAM_DIGITS}"
        ));
    }
    let (lowest, highest) = (wide(16), wide(24));
    if lowest == 0 || highest > MAX_HISTOGRAM_HIGHEST {
        return bad(format!(
            "value range {lowest}..={highest} is outside 1..={MAX_HISTOGRAM_HIGHEST}"
        ));
    }
    Ok(())
}

/// Adds encoded bytes into `into`, exactly.
pub fn merge_into(into: &mut Histogram<u64>, bytes: &[u8]) -> Result<(), CodecError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let h = decode(bytes)?;
    into.add(&h)
        .map_err(|e| CodecError::Decode(format!("{e:?}")))
}

/// A distribution in milliseconds, as every report format states it.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
    /// Number of values the percentiles were read from.
    pub count: u64,
}

/// Reads a microsecond histogram as milliseconds; `None` when it is empty,
/// so "nothing completed" never reads as a latency of 0. The report and
/// the swarm's own account both read here, so equal histograms give equal
/// numbers.
pub fn percentiles(h: &Histogram<u64>) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Some(Percentiles {
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p95: ms(h.value_at_quantile(0.95)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
        mean: h.mean() / 1000.0,
        count: h.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percentiles_read_microseconds_as_milliseconds() {
        assert!(percentiles(&new_histogram()).is_none());
        let mut h = new_histogram();
        for us in [500, 1_000, 1_500] {
            h.record(us).unwrap();
        }
        let p = percentiles(&h).unwrap();
        assert_eq!((p.p50, p.max, p.count), (1.0, 1.5, 3));
        assert!((p.mean - 1.0).abs() < 1e-9);
    }

    #[test]
    fn empty_round_trips_as_empty_bytes() {
        let h = new_histogram();
        assert!(encode(&h).unwrap().is_empty());
        assert!(decode(&[]).unwrap().is_empty());
    }

    #[test]
    fn corrupt_bytes_are_an_error_not_a_panic() {
        assert!(decode(&[1, 2, 3, 4, 5]).is_err());
    }

    /// A V2 histogram with the given header fields and payload, as a
    /// hostile peer would build it.
    fn wrap(payload_len: u32, digits: u32, lowest: u64, highest: u64, payload: &[u8]) -> Vec<u8> {
        let mut inner = Vec::new();
        inner.extend_from_slice(&V2_COOKIE.to_be_bytes());
        inner.extend_from_slice(&payload_len.to_be_bytes());
        inner.extend_from_slice(&0u32.to_be_bytes());
        inner.extend_from_slice(&digits.to_be_bytes());
        inner.extend_from_slice(&lowest.to_be_bytes());
        inner.extend_from_slice(&highest.to_be_bytes());
        inner.extend_from_slice(&1.0f64.to_be_bytes());
        inner.extend_from_slice(payload);
        inner
    }

    /// The bomb from issue 9: a ~40-byte histogram whose inner header claims
    /// a 2 GiB payload. hdrhistogram alone allocates 2 GiB for it.
    #[test]
    fn payload_bomb_is_refused_before_allocation() {
        let bomb = wrap(1 << 31, 3, 1, 2048, &[]);
        assert!(bomb.len() <= 64, "bomb is {} bytes", bomb.len());
        let e = decode(&bomb).unwrap_err().to_string();
        assert!(e.contains("2147483648-byte payload"), "{e}");
    }

    #[test]
    fn huge_value_range_and_digits_are_refused() {
        let e = decode(&wrap(0, 3, 1, 1 << 62, &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("value range"), "{e}");
        let e = decode(&wrap(0, 5, 1, 2048, &[])).unwrap_err().to_string();
        assert!(e.contains("5 significant digits"), "{e}");
    }

    /// Bytes past the cap are refused before their header is read.
    #[test]
    fn oversized_bytes_are_refused() {
        let zeros = vec![0u8; MAX_HISTOGRAM_BYTES];
        let bytes = wrap(zeros.len() as u32, 3, 1, 2048, &zeros);
        let e = decode(&bytes).unwrap_err().to_string();
        assert!(e.contains("more than the"), "{e}");
    }

    /// Bytes that claim a compressed V2 histogram, the form loadfleet sent
    /// before protocol 2, are refused by name.
    #[test]
    fn compressed_histograms_are_refused() {
        let mut bytes = 0x1c84_9314u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(&wrap(0, 3, 1, 2048, &[]));
        let e = decode(&bytes).unwrap_err().to_string();
        assert!(e.contains("is not a V2 histogram"), "{e}");
    }

    /// The largest value an agent records round-trips through the bounds,
    /// and a histogram full of huge counts at that range fits the cap on
    /// its bytes: every honest histogram decodes.
    #[test]
    fn largest_honest_histogram_decodes() {
        let mut h = new_histogram();
        h.record(crate::bounds::MAX_RECORDED_MICROS).unwrap();
        let mut v = 1u64;
        while v < crate::bounds::MAX_RECORDED_MICROS {
            h.record_n(v, u64::MAX / 4).unwrap();
            v = v * 1001 / 1000 + 1;
        }
        let back = decode(&encode(&h).unwrap()).unwrap();
        assert_eq!(back.len(), h.len());
        assert_eq!(back.max(), h.max());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes never panic; whatever decodes is within bounds.
        #[test]
        fn arbitrary_bytes_decode_within_bounds(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(h) = decode(&bytes) {
                prop_assert!(h.high() <= MAX_HISTOGRAM_HIGHEST);
                prop_assert!(h.sigfig() <= MAX_HISTOGRAM_DIGITS);
            }
        }

        /// Arbitrary headers never panic, and only in-bounds ones decode.
        #[test]
        fn arbitrary_headers_decode_within_bounds(
            payload_len in prop_oneof![0u32..64, any::<u32>()],
            digits in 0u32..8,
            lowest in prop_oneof![0u64..4, any::<u64>()],
            highest in prop_oneof![0u64..1_000_000, any::<u64>()],
            payload in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            if let Ok(h) = decode(&wrap(payload_len, digits, lowest, highest, &payload)) {
                prop_assert!(h.high() <= MAX_HISTOGRAM_HIGHEST);
                prop_assert!(h.sigfig() <= MAX_HISTOGRAM_DIGITS);
                prop_assert_eq!(payload_len as usize, payload.len());
            }
        }
    }

    proptest! {
        /// Merging encoded pieces equals recording everything into one
        /// histogram: same count, same min/max, same value at every quantile.
        #[test]
        fn merge_of_encoded_parts_is_exact(
            parts in prop::collection::vec(prop::collection::vec(1u64..100_000_000, 0..200), 1..8)
        ) {
            let mut whole = new_histogram();
            let mut merged = new_histogram();
            for part in &parts {
                let mut h = new_histogram();
                for &v in part {
                    h.record(v).unwrap();
                    whole.record(v).unwrap();
                }
                merge_into(&mut merged, &encode(&h).unwrap()).unwrap();
            }
            prop_assert_eq!(merged.len(), whole.len());
            if !whole.is_empty() {
                prop_assert_eq!(merged.max(), whole.max());
                prop_assert_eq!(merged.min(), whole.min());
                for q in [0.5, 0.9, 0.95, 0.99, 0.999, 1.0] {
                    prop_assert_eq!(merged.value_at_quantile(q), whole.value_at_quantile(q));
                }
            }
        }
    }
}
