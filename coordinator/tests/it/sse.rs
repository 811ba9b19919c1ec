//! Subscription scenarios with real processes: the coordinator with two
//! local agents, against the testbed's event streams, whose own counts
//! (`GET /__stats/sse`) are the ground truth of what was sent. Each test is
//! bounded: a few seconds of schedule, a fixed number of subscribers, and
//! the harness's time limit on every process.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// The testbed's event counters, by name (`stream_events` as its three
/// numbers, min p50 max, under `stream_events.min` and so on).
fn sse_stats(addr: &str) -> std::collections::BTreeMap<String, u64> {
    let mut s = TcpStream::connect(addr).expect("connect to the testbed");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET /__stats/sse HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("ask for stats");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read stats");
    let body = text.split("\r\n\r\n").nth(1).expect("a body");
    let mut out = std::collections::BTreeMap::new();
    for line in body.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("stream_events"), Some(min)) => {
                let rest: Vec<&str> = words.collect();
                out.insert("stream_events.min".into(), min.parse().expect("a count"));
                out.insert(
                    "stream_events.p50".into(),
                    rest[0].parse().expect("a count"),
                );
                out.insert(
                    "stream_events.max".into(),
                    rest[1].parse().expect("a count"),
                );
            }
            (Some("peer"), _) => {}
            (Some(name), Some(v)) => {
                out.insert(name.to_string(), v.parse().expect("a count"));
            }
            _ => {}
        }
    }
    out
}

/// Runs `plan` (TOML, with `{url}` for the testbed's URL) on two local
/// agents; returns the exit status, output and report.
fn run_plan(test: &str, plan: &str, testbed: &str) -> (Option<i32>, String, Value) {
    let dir = temp_dir(&format!("{test}-plan"));
    let path = write_plan(&dir, &plan.replace("{url}", &format!("http://{testbed}")));
    let (status, output, report, _) = run_report(
        test,
        &[
            "run",
            path.to_str().expect("utf-8 path"),
            "--local-agents",
            "2",
        ],
    );
    (status.code(), output, report)
}

fn sse_of<'a>(report: &'a Value, scenario: &str) -> (&'a Value, &'a Value) {
    let sc = report["scenarios"]
        .as_array()
        .expect("scenarios")
        .iter()
        .find(|s| s["name"] == scenario)
        .unwrap_or_else(|| panic!("no scenario {scenario} in {report}"));
    (sc, &sc["sse"])
}

fn codes(report: &Value) -> Vec<String> {
    report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .map(|v| v["code"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Events the testbed handed to connections that the agents did not read:
/// at most the one in flight on each stream when its subscriber closed it.
fn assert_received_what_was_sent(sse: &Value, stats: &std::collections::BTreeMap<String, u64>) {
    let (received, sent) = (u(&sse["events"]), stats["events"]);
    assert!(
        received <= sent && sent - received <= stats["streams_opened"],
        "agents received {received} events, the testbed sent {sent} on {} streams",
        stats["streams_opened"]
    );
}

/// 5,000 subscribers from two agents, each holding its stream for 10 s at
/// one event a second: every subscriber is accounted for, and what the
/// agents received is what the testbed sent them.
#[test]
fn five_thousand_subscribers_held_for_ten_seconds() {
    let (_testbed, addr) = start_testbed(&["--sse-interval", "1s"]);
    let plan = r#"
[target]
url = "{url}"
max_in_flight = 5000
[run]
drain = "3s"
[[scenario]]
name = "subscribers"
kind = "sse"
rate = 2500
duration = "2s"
hold = "10s"
send_time = "data.sent_us"
send_time_unit = "us"
[[scenario.request]]
path = "/sse"
"#;
    let (_, output, report) = run_plan("sse-5000", plan, &addr);
    let (sc, sse) = sse_of(&report, "subscribers");
    let stats = sse_stats(&addr);
    let intended = u(&sc["intended"]);
    assert_eq!(intended, 5000, "{output}");
    assert_eq!(
        u(&sse["opened"]) + u(&sc["unsent"]["total"]),
        intended,
        "opened + unsent == intended\n{output}"
    );
    assert_eq!(u(&sse["opened"]), stats["streams_opened"], "{output}");
    assert_eq!(u(&sse["reconnects"]), 0, "no reconnect gaps to state");
    assert_eq!(u(&sse["duplicates"]), 0);
    assert_received_what_was_sent(sse, &stats);
    // Ten seconds of hold at one event a second: the first event comes a
    // second after the stream opened, so a subscriber gets 10 less the
    // seconds it took to subscribe (the slowest took the report's max), or
    // one fewer when its last event races the end of its hold.
    let slowest_s = sc["latency_ms"]["max"].as_f64().expect("time to subscribe") / 1000.0;
    let least = 9 - slowest_s.ceil() as u64;
    let per = &sse["events_per_subscriber"];
    assert_eq!(u(&per["count"]), u(&sse["opened"]));
    assert!(
        u(&per["min"]) >= least && u(&per["max"]) <= 10,
        "events per subscriber {per}, slowest subscribe {slowest_s:.3} s"
    );
    assert!(
        stats["stream_events.min"] >= least && stats["stream_events.max"] <= 10,
        "{stats:?}"
    );
    // Held streams and their series.
    let peak = sse["open_streams"]
        .as_array()
        .expect("open_streams")
        .iter()
        .map(|s| u(&s["open"]))
        .max()
        .unwrap_or(0);
    assert_eq!(peak, u(&sse["opened"]), "all held at once at some second");
    assert!(sse["delivery"]["latency_ms"]["count"].as_u64().unwrap_or(0) > 0);
}

/// A broadcast trigger as a second scenario of the same plan: 2,000
/// subscribers, 5 POST /broadcast; every subscriber gets every broadcast,
/// the fan-out spread is reported per id, and on one machine the delivery
/// latency is positive.
#[test]
fn broadcast_reaches_every_subscriber() {
    let (_testbed, addr) = start_testbed(&["--sse-interval", "0s"]);
    let plan = r#"
[target]
url = "{url}"
max_in_flight = 2000
[run]
drain = "2s"
[[scenario]]
name = "subscribers"
kind = "sse"
rate = 2000
duration = "1s"
hold = "7s"
send_time = "data.sent_us"
send_time_unit = "us"
fanout_event = "broadcast"
[[scenario.request]]
path = "/sse"
[[scenario]]
name = "trigger"
start = "2500ms"
rate = 1
duration = "5s"
[[scenario.request]]
method = "POST"
path = "/broadcast"
"#;
    let (_, output, report) = run_plan("sse-broadcast", plan, &addr);
    let stats = sse_stats(&addr);
    let (sc, sse) = sse_of(&report, "subscribers");
    let opened = u(&sse["opened"]);
    assert_eq!(opened + u(&sc["unsent"]["total"]), 2000, "{output}");
    assert_eq!(opened, 2000, "every subscriber opened\n{output}");
    let (trigger, _) = sse_of(&report, "trigger");
    assert_eq!(u(&trigger["status"]["200"]), 5, "{output}");
    assert_eq!(stats["broadcasts"], 5);
    assert_eq!(stats["broadcast_events"], 5 * opened, "{stats:?}");
    // Every subscriber got every event, once.
    assert_eq!(u(&sse["events"]), 5 * opened, "{output}");
    let per = &sse["events_per_subscriber"];
    assert_eq!((u(&per["min"]), u(&per["max"])), (5, 5), "{per}");
    assert_eq!(u(&sse["duplicates"]), 0);
    // Fan-out: five ids, each reached every subscriber.
    let fanout = &sse["fanout"];
    assert_eq!(u(&fanout["ids"]), 5, "{fanout}");
    let rows = fanout["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 5);
    assert!(
        rows.iter().all(|r| u(&r["subscribers"]) == opened),
        "{fanout}"
    );
    // The largest spread is the largest row's (the histogram's max rounds
    // up to its bucket's top, within 0.1 %), and 2,000 sockets are not all
    // written in the same microsecond.
    let spread = fanout["spread_max_ms"].as_f64().expect("a spread");
    let widest = rows
        .iter()
        .map(|r| f(&r["spread_ms"]))
        .fold(0.0_f64, f64::max);
    assert!(widest > 0.0, "{fanout}");
    assert!(
        spread >= widest && spread <= widest * 1.001 + 0.001,
        "spread_max_ms {spread} vs the widest row {widest}: {fanout}"
    );
    // One machine, one clock: no event arrives before it was sent.
    let delivery = &sse["delivery"];
    assert_eq!(u(&delivery["negative"]), 0, "{delivery}");
    assert_eq!(u(&delivery["latency_ms"]["count"]), 5 * opened);
    // Positive, and an event written over loopback is read well within the
    // 7 s hold (5 s leaves room for a stall of the shared test machine).
    let p50 = f(&delivery["latency_ms"]["p50"]);
    let max = f(&delivery["latency_ms"]["max"]);
    assert!(p50 > 0.0 && p50 <= max && max < 5000.0, "{delivery}");
    assert!(!codes(&report).contains(&"CLOCK".to_string()), "{output}");
    assert!(
        output.contains("fan-out: 5 event ids"),
        "the text report shows the fan-out\n{output}"
    );
}

/// A target clock 200 ms ahead: every event seems to arrive before it was
/// sent. The negative latencies are counted and sized, not clamped, and
/// CLOCK says so with the figures.
#[test]
fn clock_skew_gives_counted_negative_latency_and_clock() {
    let (_testbed, addr) = start_testbed(&["--sse-interval", "200ms", "--clock-skew", "200ms"]);
    let plan = r#"
[target]
url = "{url}"
[run]
drain = "2s"
[[scenario]]
name = "subscribers"
kind = "sse"
rate = 50
duration = "1s"
hold = "2s"
send_time = "data.sent_us"
send_time_unit = "us"
[[scenario.request]]
path = "/sse"
"#;
    let (_, output, report) = run_plan("sse-skew", plan, &addr);
    let (_, sse) = sse_of(&report, "subscribers");
    let delivery = &sse["delivery"];
    let events = u(&sse["events"]);
    assert!(events >= 50 * 8, "{output}");
    assert_eq!(
        u(&delivery["negative"]),
        events,
        "every event is negative: {delivery}"
    );
    assert!(
        delivery["latency_ms"].is_null(),
        "none is clamped to 0: {delivery}"
    );
    // At most the skew, less the delivery time; the histogram's three
    // significant digits may round it up by 0.1% (200.063 seen).
    let magnitude = delivery["negative_ms"]["p50"].as_f64().expect("sized");
    assert!((150.0..=200.2).contains(&magnitude), "{delivery}");
    let clock = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .find(|v| v["code"] == "CLOCK")
        .unwrap_or_else(|| panic!("no CLOCK verdict\n{output}"));
    let message = clock["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("{events} of {events} events")),
        "{message}"
    );
    assert!(
        output.contains("NEGATIVE"),
        "the text report shows them\n{output}"
    );
    assert!(
        delivery["rests_on"]
            .as_str()
            .is_some_and(|s| s.contains("assumed")),
        "{delivery}"
    );
}

/// Streams ended by the server every 2 s: closed-model subscribers
/// reconnect after the server's retry:, with Last-Event-ID, and no event is
/// counted twice.
#[test]
fn dropped_streams_reconnect_with_last_event_id() {
    let (_testbed, addr) = start_testbed(&[
        "--sse-interval",
        "200ms",
        "--sse-drop-after",
        "2s",
        "--sse-retry",
        "100ms",
    ]);
    let plan = r#"
[target]
url = "{url}"
[run]
drain = "2s"
[[scenario]]
name = "subscribers"
kind = "sse"
model = "closed"
clients = 40
duration = "7s"
send_time = "data.sent_us"
send_time_unit = "us"
[[scenario.request]]
path = "/sse"
"#;
    let (_, output, report) = run_plan("sse-reconnect", plan, &addr);
    let stats = sse_stats(&addr);
    let (sc, sse) = sse_of(&report, "subscribers");
    assert_eq!(u(&sc["intended"]), 40, "{output}");
    assert_eq!(u(&sse["opened"]), 40, "{output}");
    let reconnects = u(&sse["reconnects"]);
    // Ends at 2, 4 and 6 s: three reconnects each, give or take the edge.
    assert!((40 * 2..=40 * 3).contains(&reconnects), "{sse}");
    assert_eq!(
        u(&sse["resumed"]),
        reconnects,
        "every reconnect sent Last-Event-ID"
    );
    assert_eq!(stats["streams_resumed"], reconnects, "{stats:?}");
    // A stream ended too close to the end of the hold is not reopened.
    let ended = u(&sse["ended_by_server"]);
    assert!(ended >= reconnects && ended - reconnects <= 40, "{sse}");
    assert_eq!(u(&sse["duplicates"]), 0, "no event counted twice");
    assert_received_what_was_sent(sse, &stats);
    assert_eq!(stats["streams_opened"], 40 + reconnects);
    // 7 s at 5 events a second, less a short gap per reconnect.
    let per = &sse["events_per_subscriber"];
    assert!(
        (25..=35).contains(&u(&per["min"])) && u(&per["max"]) <= 35,
        "{per}"
    );
}
