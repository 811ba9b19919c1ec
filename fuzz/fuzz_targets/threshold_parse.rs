//! `--threshold` expressions: parsing never panics, and an accepted one
//! prints as text that parses back to the same threshold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadfleet_coordinator::thresholds::Threshold;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = text.parse::<Threshold>() {
        let back: Threshold = t.to_string().parse().expect("printed threshold parses");
        assert_eq!(back, t);
    }
});
