use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;
use crate::compare::load::Compared;
use crate::compare::{Input, Table};
use crate::report_model::{Report, Totals};
use crate::thresholds::Threshold;

/// A real report (tests/fixtures/report.json) with every kind of outcome:
/// redirects, client and server errors, transport errors, gRPC statuses,
/// arrivals unsent and requests left in flight.
fn report() -> Value {
    let mut r: Value = serde_json::from_str(include_str!("../../tests/fixtures/report.json"))
        .expect("the fixture is a report");
    let t = &mut r["totals"];
    t["intended"] = json!(1000);
    t["sent"] = json!(990);
    t["unsent"]["total"] = json!(10);
    t["unsent"]["late"] = json!(10);
    t["completed"] = json!(980);
    t["in_flight_at_end"] = json!(10);
    t["status"] = json!({"200": 700, "302": 10, "404": 20, "503": 40});
    t["errors"] = json!({"timeout": 3, "connect_refused": 2});
    t["grpc"] = json!({
        "calls": 205,
        "status": {"OK": 195, "UNAVAILABLE": 10},
        "rate": {"OK": 0.199, "UNAVAILABLE": 0.0102}
    });
    for phase in ["connect_ms", "tls_handshake_ms", "ttfb_ms"] {
        t["phases"][phase] = t["latency_ms"].clone();
    }
    // 404 + 503 + the transport errors + UNAVAILABLE.
    t["failures"] = json!(20 + 40 + 5 + 10);
    r
}

fn totals() -> Totals {
    serde_json::from_value(report()["totals"].clone()).expect("totals")
}

/// Every figure with a fixed identity, and the keyed ones the fixture has.
fn every_figure() -> Vec<Figure> {
    let mut all: Vec<Figure> = HEADLINE.to_vec();
    all.extend(THRESHOLD_NAMES.iter().map(|(_, f)| f.clone()));
    for phase in Phase::ALL {
        all.extend([Quantile::P50, Quantile::P99].map(|q| Figure::Phase(phase, q)));
    }
    all.push(Figure::ConnectionsOpened);
    all.extend(["200", "302", "404", "503"].map(|c| Figure::Status(c.into())));
    all.extend(["timeout", "connect_refused"].map(|k| Figure::ErrorKind(k.into())));
    all.extend([GrpcStatus::Ok, GrpcStatus::Unavailable].map(Figure::Grpc));
    all.sort();
    all.dedup();
    all
}

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Each figure's key names the value it is computed to have, so
/// `report.json`, `repeats.median` and every reader mean the same thing.
#[test]
fn every_figure_resolves_on_a_report_at_its_key() {
    let mut t = report()["totals"].clone();
    t[Figure::Errors.key()] = json!(5);
    let totals = totals();
    // Checks are counted over steps, not kept in totals (see flows.rs).
    for figure in every_figure().into_iter().filter(|f| !f.is_from_steps()) {
        let value = figure.of(&totals);
        assert!(value.is_some(), "{figure:?} resolves");
        assert_eq!(
            at(&t, &figure.key()).and_then(Value::as_f64),
            value,
            "{figure:?} at {}",
            figure.key()
        );
    }
}

#[test]
fn failures_are_counted_by_the_vocabulary_as_the_report_counts_them() {
    let t = totals();
    assert_eq!(Figure::Failures.of(&t), Some(t.failures as f64));
    let fixture: Totals = serde_json::from_value(
        serde_json::from_str::<Value>(include_str!("../../tests/fixtures/report.json"))
            .expect("fixture")["totals"]
            .clone(),
    )
    .expect("totals");
    assert_eq!(Figure::Failures.of(&fixture), Some(fixture.failures as f64));
    assert_eq!(Figure::Errors.of(&t), Some(5.0));
}

#[test]
fn names_and_keys_are_unique() {
    let all = every_figure();
    let mut keys: Vec<String> = all.iter().map(Figure::key).collect();
    let mut labels: Vec<String> = all.iter().map(Figure::label).collect();
    keys.sort();
    keys.dedup();
    labels.sort();
    labels.dedup();
    assert_eq!(keys.len(), all.len(), "{keys:?}");
    assert_eq!(labels.len(), all.len(), "{labels:?}");
}

/// Every threshold that has a `compare` row reads the same value as that
/// row, as a count and as a share.
#[test]
fn thresholds_and_compare_agree_on_every_figure_both_show() {
    let input = |label: &str| Input {
        label: label.into(),
        path: PathBuf::from(format!("/x/{label}/report.json")),
        report: Compared::from_value(report()).expect("compared"),
    };
    let table = Table::build(&[input("a"), input("b")]);
    let t = totals();
    let mut agreed = 0;
    let names = THRESHOLD_NAMES
        .iter()
        .map(|(n, f)| (n.to_string(), f.clone()))
        .chain(
            [GrpcStatus::Ok, GrpcStatus::Unavailable]
                .map(|s| (format!("grpc.{}", s.threshold_name()), Figure::Grpc(s))),
        );
    for (name, figure) in names {
        let count: Threshold = format!("{name}>=0").parse().expect("parses");
        if let Some(row) = table.row(&figure.label()) {
            assert_eq!(count.actual(&t), row.value(0), "{name}");
            agreed += 1;
        }
        if figure.share_of().is_some() {
            let share: Threshold = format!("{name}>=0%").parse().expect("parses");
            if let Some(row) = table.row(&figure.share_label()) {
                assert_eq!(share.actual(&t), row.value(0), "{name} %");
                agreed += 1;
            }
        }
    }
    // p50..max (p999 also as p99.9), unsent, incomplete, rps and ok_rps
    // with their aliases, 2 gRPC statuses; unsent, errors, failures (and
    // its alias failed) and 2 gRPC shares.
    assert_eq!(agreed, 21);
}

/// `--repeat` and `compare` quote the same median, and thresholds are
/// checked against it.
#[test]
fn repeats_compare_and_thresholds_agree_on_the_median() {
    let runs: Vec<Report> = [30.0, 10.0, 20.0, 40.0]
        .iter()
        .map(|p99| {
            let mut r = report();
            r["totals"]["latency_ms"]["p99"] = json!(p99);
            r["totals"]["completed"] = json!(1000 - *p99 as u64);
            serde_json::from_value(r).expect("report")
        })
        .collect();
    let p99: Threshold = "p99<26ms".parse().expect("parses");
    let completed = median(vec![970.0, 990.0, 980.0, 960.0]);
    let (combined, _) = crate::report::repeats::combine(runs, &[p99]);
    let repeats = combined.repeats.as_ref().expect("repeats");
    assert_eq!(repeats.median.get("latency_ms.p99"), Some(25.0));
    assert_eq!(combined.thresholds[0].actual, Some(25.0));
    assert!(combined.thresholds[0].passed);
    let value = serde_json::to_value(&combined).expect("serializes");
    let input = Input {
        label: "r".into(),
        path: PathBuf::from("/x/r/report.json"),
        report: Compared::from_value(value).expect("compared"),
    };
    let table = Table::build(&[input.clone(), input]);
    let row = |f: Figure| table.row(&f.label()).and_then(|r| r.value(0));
    assert_eq!(row(Figure::Latency(Quantile::P99)), Some(25.0));
    // 975 is even-count's mean of the middle two: a whole count still.
    assert_eq!(row(Figure::Completed), completed);
    assert_eq!(completed, Some(975.0));
}

#[test]
fn median_of_odd_even_and_nothing() {
    assert_eq!(median(vec![9.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(vec![1.0, 9.0, 2.0, 4.0]), Some(3.0));
    assert_eq!(median(Vec::new()), None);
}

#[test]
fn a_share_of_nothing_is_unknown() {
    assert_eq!(percent(0.0, 0.0), None);
    assert_eq!(percent(1.0, 4.0), Some(25.0));
    let mut t = totals();
    t.completed = 0;
    assert_eq!(Figure::Failures.share(&t), None);
    assert_eq!(Figure::Unsent.share(&t), Some(1.0));
}
