//! The text report users read at the end of `run`, pinned as a snapshot:
//! a change to what they see must show up in review as a changed `.snap`
//! file (`cargo insta review`), never slip in by accident.
//!
//! The fixture is the `report.json` of a real local run
//! (`run --local-agents 2 --duration 3s --rate 100`), so it is also read
//! back through the typed report structs the way `compare` reads reports.

use loadfleet_coordinator::report::{text::write_text, Report};

#[test]
fn text_report_of_a_fixed_report_json() {
    let json = include_str!("fixtures/report.json");
    let report: Report = serde_json::from_str(json).expect("the fixture is a report");
    let mut out = Vec::new();
    write_text(&mut out, &report, false).expect("render to memory");
    let text = String::from_utf8(out).expect("the text report is UTF-8");
    insta::assert_snapshot!(text);
}

/// The typed structs hold every key of a real report, in its order, so
/// reading a report and writing it again changes nothing.
#[test]
fn report_json_round_trips_through_the_typed_structs() {
    let json = include_str!("fixtures/report.json");
    let report: Report = serde_json::from_str(json).expect("the fixture is a report");
    let mut out = Vec::new();
    loadfleet_coordinator::report::json::write_json(&mut out, &report).expect("render to memory");
    assert_eq!(String::from_utf8(out).expect("UTF-8"), json);
}
