//! Plan text from users: parsing never panics, and an accepted plan stays
//! within `proto::bounds` (so neither side can be made to allocate or
//! overflow by it), with a small preview.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadfleet_coordinator::plan::{self, Model, PREVIEW_AGENTS, PREVIEW_ROWS};
use loadfleet_proto::bounds;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A base that does not exist: data and body files are never read.
    let Ok(p) = plan::parse(
        text,
        "fuzz",
        std::path::Path::new("/nonexistent/loadfleet-fuzz"),
    ) else {
        return;
    };
    assert!(p.scenarios.len() <= bounds::MAX_SCENARIOS);
    assert!(p.run.drain <= bounds::MAX_DRAIN);
    assert!(p.target.timeout <= bounds::MAX_TIMEOUT);
    for s in &p.scenarios {
        assert!(s.start <= bounds::MAX_START);
        assert!(s.duration <= bounds::MAX_SCENARIO);
        assert!(s.requests.len() <= bounds::MAX_REQUESTS);
        match &s.model {
            Model::Open(sched) => {
                assert!(sched.stages().len() <= bounds::MAX_STAGES);
                for st in sched.stages() {
                    for r in [st.from_rps, st.to_rps] {
                        assert!((0.0..=bounds::MAX_RATE).contains(&r), "rate {r}");
                    }
                }
                assert!(sched.expected_count() <= bounds::MAX_ARRIVALS);
            }
            Model::Closed(pop) => {
                assert!(pop.stages.len() <= bounds::MAX_STAGES);
                assert!(pop.max_clients() as f64 <= bounds::MAX_CLIENTS);
                assert!(pop.think <= bounds::MAX_THINK);
            }
        }
        // `preview` walks every arrival of an open schedule: only small
        // ones here, so each case stays fast.
        if matches!(&s.model, Model::Open(sched) if sched.expected_count() > 1e5) {
            continue;
        }
        let pv = plan::preview(s, 3);
        assert!(pv.rows.len() as u64 <= PREVIEW_ROWS);
        assert!(pv.rows.iter().all(|(_, a)| a.len() <= PREVIEW_AGENTS));
    }
});
