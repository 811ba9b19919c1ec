//! The `[search]` table with the search's flags over it.

use super::*;
use crate::plan::{resolve_all, Flags, SearchFlags};

fn search(flags: SearchFlags) -> Result<SearchPlan, String> {
    let flags = Flags {
        search: Some(flags),
        ..Flags::default()
    };
    resolve_all(None, &flags)
        .map(|p| p.search)
        .map_err(|e| e.to_string())
}

#[test]
fn the_flags_win_and_their_mistakes_name_the_flag() {
    let s = search(SearchFlags {
        to: Some(80.0),
        step: Some(Duration::from_secs(3)),
        warmup: Some(Duration::from_secs(1)),
        ..SearchFlags::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.from, s.to, s.repeat), (10.0, Some(80.0), 1));
    assert_eq!(s.step, Duration::from_secs(3));
    let e = search(SearchFlags {
        from: Some(100.0),
        to: Some(50.0),
        ..SearchFlags::default()
    })
    .unwrap_err();
    assert!(e.contains("--to: 50 must be above --from 100"), "{e}");
    let e = search(SearchFlags {
        resolution: Some(0.0),
        ..SearchFlags::default()
    })
    .unwrap_err();
    assert!(e.contains("--resolution: 0.0%: give 0.1% to 100%"), "{e}");
}

#[test]
fn each_step_lasts_its_warmup_and_window() {
    let flags = Flags {
        search: Some(SearchFlags {
            step: Some(Duration::from_secs(4)),
            warmup: Some(Duration::from_secs(2)),
            ..SearchFlags::default()
        }),
        ..Flags::default()
    };
    let plan = resolve_all(None, &flags).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.duration(), Duration::from_secs(6));
    assert_eq!(plan.scenarios[0].warmup, Duration::from_secs(2));
}
