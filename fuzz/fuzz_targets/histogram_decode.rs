//! Histogram bytes from agents: decoding never panics or allocates past the
//! bounds, a decoded histogram is within `proto::bounds`, and it re-encodes
//! to bytes that decode to the same counts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadfleet_proto::bounds::{MAX_HISTOGRAM_DIGITS, MAX_HISTOGRAM_HIGHEST};
use loadfleet_proto::histogram::{decode, encode, merge_into, new_histogram};

fuzz_target!(|data: &[u8]| {
    let Ok(h) = decode(data) else {
        return;
    };
    assert!(h.high() <= MAX_HISTOGRAM_HIGHEST);
    assert!(h.sigfig() <= MAX_HISTOGRAM_DIGITS);
    let again = decode(&encode(&h).expect("a decoded histogram encodes")).expect("re-decodes");
    assert_eq!(again.len(), h.len());
    let mut into = new_histogram();
    merge_into(&mut into, data).expect("bytes that decode also merge");
    assert_eq!(into.len(), h.len());
});
