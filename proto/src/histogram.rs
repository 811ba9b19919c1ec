//! Histograms on the wire.
//!
//! Latency crosses the wire as deflate-compressed HdrHistogram V2 bytes, the
//! format every HdrHistogram implementation reads, so merging on the
//! coordinator is an exact `add` and no percentile is ever averaged.
//! Values are microseconds; histograms auto-resize so nothing is clamped.

use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

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

/// Decodes bytes from [`encode`] (empty bytes give an empty histogram).
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, CodecError> {
    if bytes.is_empty() {
        return Ok(new_histogram());
    }
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| CodecError::Decode(format!("{e:?}")))?;
    h.auto(true);
    Ok(h)
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
