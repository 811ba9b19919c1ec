//! Histograms on the wire.
//!
//! Latency crosses the wire as deflate-compressed HdrHistogram V2 bytes, the
//! format every HdrHistogram implementation reads, so merging on the
//! coordinator is an exact `add` and no percentile is ever averaged.
//! Values are microseconds; histograms auto-resize, and the agent clamps
//! values at [`crate::bounds::MAX_RECORDED_MICROS`] so the coordinator's
//! bounds on a decoded histogram hold for every honest one.

use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::io::Read;

use crate::bounds::{MAX_HISTOGRAM_DIGITS, MAX_HISTOGRAM_HIGHEST, MAX_HISTOGRAM_INFLATED_BYTES};

/// Significant decimal digits kept: 3 gives 0.1% relative precision.
pub const SIGFIG: u8 = 3;

/// A histogram that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The bytes are not a V2 (optionally compressed) histogram.
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

/// Encodes as compressed V2; an empty histogram becomes empty bytes.
pub fn encode(h: &Histogram<u64>) -> Result<Vec<u8>, CodecError> {
    if h.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(|e| CodecError::Encode(format!("{e:?}")))?;
    Ok(out)
}

/// Cookie of a deflate-compressed V2 histogram (the only form [`encode`]
/// writes and [`decode`] reads).
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// Cookie of the V2 histogram inside the deflate stream.
const V2_COOKIE: u32 = 0x1c84_9313;
/// Bytes of the V2 header: cookie, payload length, normalizing offset,
/// digits, lowest, highest, conversion ratio.
const V2_HEADER_BYTES: usize = 40;

/// Decodes bytes from [`encode`] (empty bytes give an empty histogram).
///
/// The bytes come from peers, so everything is checked before anything is
/// allocated in proportion to what they claim: hdrhistogram's own
/// deserializer sizes its buffer from the inner header's payload length
/// before it checks that the bytes exist (40 bytes could claim 2 GiB), and
/// sizes the counts array from the claimed value range. Here the deflate
/// stream is inflated into at most [`MAX_HISTOGRAM_INFLATED_BYTES`], the
/// inner payload length must match what was inflated, and the value range
/// and digits must be within [`MAX_HISTOGRAM_HIGHEST`] and
/// [`MAX_HISTOGRAM_DIGITS`]. Only then does hdrhistogram read the (now
/// bounded) inner bytes.
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, CodecError> {
    if bytes.is_empty() {
        return Ok(new_histogram());
    }
    let inner = inflate_bounded(bytes)?;
    check_header(&inner)?;
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &inner[..])
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

/// Checks the outer header and inflates, stopping one byte past the cap.
fn inflate_bounded(bytes: &[u8]) -> Result<Vec<u8>, CodecError> {
    let bad = |m: String| Err(CodecError::Decode(m));
    match be_u32(bytes, 0) {
        Some(V2_COMPRESSED_COOKIE) => {}
        Some(c) => return bad(format!("cookie {c:#x} is not a compressed V2 histogram")),
        None => return bad(format!("{} bytes is shorter than a header", bytes.len())),
    }
    let Some(compressed_len) = be_u32(bytes, 4) else {
        return bad("no compressed length".into());
    };
    let body = &bytes[8..];
    if compressed_len as usize != body.len() {
        return bad(format!(
            "header claims {compressed_len} compressed bytes but {} follow",
            body.len()
        ));
    }
    let mut inner = Vec::new();
    flate2::read::ZlibDecoder::new(body)
        .take(MAX_HISTOGRAM_INFLATED_BYTES as u64 + 1)
        .read_to_end(&mut inner)
        .map_err(|e| CodecError::Decode(format!("deflate stream: {e}")))?;
    if inner.len() > MAX_HISTOGRAM_INFLATED_BYTES {
        return bad(format!(
            "inflates to more than {MAX_HISTOGRAM_INFLATED_BYTES} bytes"
        ));
    }
    Ok(inner)
}

/// Checks the inner V2 header against the bytes that are there and the
/// bounds on value range and precision.
fn check_header(inner: &[u8]) -> Result<(), CodecError> {
    let bad = |m: String| Err(CodecError::Decode(m));
    if inner.len() < V2_HEADER_BYTES {
        return bad(format!(
            "inner histogram is {} bytes, shorter than its header",
            inner.len()
        ));
    }
    let field = |at| be_u32(inner, at).unwrap_or(u32::MAX);
    let wide = |at| be_u64(inner, at).unwrap_or(u64::MAX);
    if field(0) != V2_COOKIE {
        return bad(format!("inner cookie {:#x} is not V2", field(0)));
    }
    let payload_len = field(4) as usize;
    if payload_len != inner.len() - V2_HEADER_BYTES {
        return bad(format!(
            "inner header claims a {payload_len}-byte payload but {} bytes are there",
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// A compressed V2 histogram around the given inner header fields and
    /// payload, as a hostile peer would build it.
    fn wrap(payload_len: u32, digits: u32, lowest: u64, highest: u64, payload: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut inner = Vec::new();
        inner.extend_from_slice(&V2_COOKIE.to_be_bytes());
        inner.extend_from_slice(&payload_len.to_be_bytes());
        inner.extend_from_slice(&0u32.to_be_bytes());
        inner.extend_from_slice(&digits.to_be_bytes());
        inner.extend_from_slice(&lowest.to_be_bytes());
        inner.extend_from_slice(&highest.to_be_bytes());
        inner.extend_from_slice(&1.0f64.to_be_bytes());
        inner.extend_from_slice(payload);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&inner).unwrap();
        let body = z.finish().unwrap();
        let mut out = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
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

    /// A deflate stream that inflates past the cap stops at the cap.
    #[test]
    fn inflate_is_capped() {
        let zeros = vec![0u8; 4 * MAX_HISTOGRAM_INFLATED_BYTES];
        let bytes = wrap(zeros.len() as u32, 3, 1, 2048, &zeros);
        assert!(bytes.len() < 64 * 1024);
        let e = decode(&bytes).unwrap_err().to_string();
        assert!(e.contains("inflates to more than"), "{e}");
    }

    /// The largest value an agent records round-trips through the bounds,
    /// and a histogram full of huge counts at that range fits the inflate
    /// cap: every honest histogram decodes.
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

        /// Arbitrary headers behind a valid deflate stream never panic, and
        /// only in-bounds ones decode.
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
