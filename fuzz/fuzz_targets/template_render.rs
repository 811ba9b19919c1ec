//! Request templates: parsing never panics, rendering never panics (with or
//! without a data row), and a text without placeholders renders to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::template::{Text, Values};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let columns = vec!["user".to_string(), "item".to_string()];
    let Ok(t) = Text::parse(text, &columns) else {
        return;
    };
    let row = vec!["u{{seq}}".to_string(), String::new()];
    for row in [None, Some(&row[..])] {
        let mut rng = SplitMix64::new(7);
        let mut out = String::new();
        t.render(
            &mut Values {
                seq: u64::MAX,
                agent: u32::MAX,
                rng: &mut rng,
                row,
            },
            &mut out,
        );
        if t.is_static() {
            assert_eq!(out, text);
        }
    }
});
