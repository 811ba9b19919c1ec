//! End-to-end: the scrape endpoint (`--metrics-listen`) and remote write
//! carry one catalogue. From one run that is both scraped and pushed to a
//! real Prometheus (Debian's 2.42, remote-write receiver, native
//! histograms on), every series the endpoint serves is one Prometheus
//! received, under the same name, with the same labels, and of the same
//! type: a histogram there is a native histogram here, a counter is a
//! `_total` series of floats, a gauge one without the suffix.

use crate::common;
use crate::outputs_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use outputs_support::*;

/// A series: its family's name and its labels but `le`.
type Series = (String, BTreeMap<String, String>);

/// The families of a text exposition by name and `# TYPE`, and its
/// series, a classic histogram's `_bucket`/`_sum`/`_count` samples read as
/// their family's one series.
fn exposition(text: &str) -> (BTreeMap<String, String>, BTreeSet<Series>) {
    let mut kinds = BTreeMap::new();
    let mut series = BTreeSet::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').expect("# TYPE name kind");
            kinds.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, rest) = line.split_at(line.find(['{', ' ']).expect("a sample"));
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|base| kinds.get(*base).is_some_and(|k| k == "histogram"))
            .unwrap_or(name);
        assert!(kinds.contains_key(family), "{name} has no # TYPE: {line}");
        let mut labels = labels(rest);
        labels.remove("le");
        series.insert((family.to_string(), labels));
    }
    (kinds, series)
}

/// `{a="1",b="x\"y"}…` as a map (values unescaped).
fn labels(rest: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(body) = rest.strip_prefix('{') else {
        return out;
    };
    let mut chars = body.chars();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() || name.starts_with('}') {
            return out;
        }
        assert_eq!(chars.next(), Some('"'), "label {name} in {rest}");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => {}
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(name.trim_start_matches(',').to_string(), value);
        if chars.clone().next() == Some('}') {
            return out;
        }
    }
}

/// GET /metrics until the coordinator has gone; the last text served.
fn scrape_until_exit(c: &mut Proc, addr: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while c.child.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline, "the coordinator did not end");
        if let Ok((200, body)) = http(addr, "GET", "/metrics", "") {
            if !body.is_empty() {
                last = body;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    last
}

#[test]
fn the_scrape_endpoint_and_remote_write_agree() {
    let dir = temp_dir("outputs-catalogue");
    let prom = prometheus(&dir);
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.args(["run", "--local-agents", "1", "--rate", "100"])
        .args(["--duration", "4s", "--testbed-delay", "2ms"])
        .args([
            "--metrics-listen",
            "127.0.0.1:0",
            "--out-run-id",
            "catalogue",
        ])
        .arg("--out-prometheus")
        .arg(format!("http://{}/api/v1/write", prom.addr))
        .arg("--out")
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("metrics on http://", Duration::from_secs(30));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.strip_suffix("/metrics"))
        .expect("metrics address")
        .to_string();
    let text = scrape_until_exit(&mut c, &addr);
    let (status, output) = c.wait(Duration::from_secs(10));

    // The run did the work, and both ends counted it.
    let r = read_report(&out);
    assert_ok_or_saturated(status, &r, &output);
    let sent = f(&r["totals"]["sent"]);
    assert!(sent > 0.0 && f(&r["totals"]["completed"]) > 0.0, "{output}");
    let sel = r#"run_id="catalogue""#;
    assert_eq!(
        promql_value(
            &prom.addr,
            &format!("sum(loadfleet_requests_sent_total{{{sel}}})")
        ),
        sent,
        "remote write holds the report's count"
    );
    let (kinds, scraped) = exposition(&text);
    let scraped_sent: f64 = text
        .lines()
        .filter(|l| l.starts_with("loadfleet_requests_sent_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        scraped_sent > 0.0 && scraped_sent <= sent,
        "scraped {scraped_sent} sent of {sent}:\n{text}"
    );

    // What Prometheus received of this run.
    let (code, body) = http(
        &prom.addr,
        "POST",
        "/api/v1/series",
        &format!("match[]={}", urlencode(&format!("{{{sel}}}"))),
    )
    .expect("series");
    assert_eq!(code, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let mut pushed: BTreeSet<Series> = BTreeSet::new();
    for s in body["data"].as_array().expect("series") {
        let mut labels: BTreeMap<String, String> = s
            .as_object()
            .expect("labels")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let name = labels.remove("__name__").expect("__name__");
        pushed.insert((name, labels));
    }
    // The verdicts are pushed after the report, when nothing scrapes.
    pushed.retain(|(name, _)| name != "loadfleet_verdict");
    assert!(scraped.len() > 10, "{text}");
    let only = |a: &BTreeSet<Series>, b: &BTreeSet<Series>| -> Vec<Series> {
        a.difference(b).cloned().collect()
    };
    assert!(
        scraped == pushed,
        "only scraped: {:?}\nonly pushed: {:?}",
        only(&scraped, &pushed),
        only(&pushed, &scraped)
    );

    // Types: remote write 1.0 carries none, so each is read off how
    // Prometheus holds the series.
    for (name, kind) in &kinds {
        let got = promql(&prom.addr, &format!("{name}{{{sel}}}"));
        assert!(!got.is_empty(), "{name}: nothing pushed");
        let native = got.iter().all(|s| s.get("histogram").is_some());
        let floats = got.iter().all(|s| s.get("value").is_some());
        match kind.as_str() {
            "histogram" => assert!(native, "{name} is not a native histogram: {got:?}"),
            "counter" => assert!(floats && name.ends_with("_total"), "{name}: {got:?}"),
            "gauge" => assert!(floats && !name.ends_with("_total"), "{name}: {got:?}"),
            other => panic!("{name}: unknown type {other}"),
        }
    }
    assert!(
        kinds.contains_key("loadfleet_pool_saturated_seconds_total"),
        "{text}"
    );
}

/// `loadfleet_pool_saturated_seconds_total` counts the time the agent's
/// own pool was all busy: two connections to a 50 ms target at 100 req/s
/// hold load back for most of the run (GENERATOR_POOL, exit 3), and the
/// pushed series holds about the share of the run the report gives.
#[test]
fn pool_saturation_is_pushed() {
    let dir = temp_dir("outputs-catalogue-pool");
    let prom = prometheus(&dir);
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.args(["run", "--local-agents", "1", "--rate", "100"])
        .args(["--duration", "3s", "--testbed-delay", "50ms"])
        .args(["--connections", "2", "--max-connections", "2"])
        .args(["--out-run-id", "pool", "--out-prometheus"])
        .arg(format!("http://{}/api/v1/write", prom.addr))
        .arg("--out")
        .arg(&out);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(90));
    let r = read_report(&out);
    assert!(u(&r["totals"]["completed"]) > 0, "{output}");
    assert!(verdict(&r, "GENERATOR_POOL").is_some(), "{output}");
    assert_eq!(status.code(), Some(3), "{output}");
    let pushed = promql_value(
        &prom.addr,
        r#"sum(loadfleet_pool_saturated_seconds_total{run_id="pool"})"#,
    );
    let agent = &r["agents"][0];
    let share = f(&agent["pool_saturated_share"]);
    assert!(
        share > 0.3,
        "the pool was saturated most of the run: {agent}"
    );
    // The share is of the run's whole length: the schedule, and at most
    // the drain after it.
    let (duration, drain) = (f(&r["run"]["duration_s"]), f(&r["run"]["drain_s"]));
    assert!(
        pushed >= share * duration * 0.99 && pushed <= share * (duration + drain) * 1.01,
        "pushed {pushed} s, share {share} of {duration} s + {drain} s: {agent}"
    );
}
