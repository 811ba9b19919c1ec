//! End-to-end: a run pushed live to a real InfluxDB (Debian's 1.6, the v1
//! `/write?db=` API) and queried back with InfluxQL: per scenario, the
//! per-second counts add up to the report's, the last totals equal them,
//! and the last p99 is the report's, read from the same exact merge.

use crate::common;
use crate::outputs_support;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use outputs_support::*;
use serde_json::Value;

/// `SELECT …  GROUP BY scenario`: per scenario, column name → value of
/// the one row.
fn by_scenario(answer: &Value) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    let series = answer["results"][0]["series"]
        .as_array()
        .unwrap_or_else(|| panic!("no series: {answer}"));
    for s in series {
        let name = s["tags"]["scenario"]
            .as_str()
            .expect("scenario tag")
            .to_string();
        let cols = s["columns"].as_array().expect("columns");
        let row = s["values"][0].as_array().expect("one row");
        let map = cols
            .iter()
            .zip(row)
            .map(|(c, v)| (c.as_str().expect("column").to_string(), v.clone()))
            .collect();
        out.insert(name, map);
    }
    out
}

/// One request in flight per agent, each taking at least 10 ms (the
/// testbed's pool timeout; a 200 takes 20 ms), holds an agent to at most
/// 100 req/s of the 155 it is offered: the unsent counts are never zero on
/// any machine, so their sums are checked for real.
#[test]
fn influxdb_holds_the_reports_counts() {
    let dir = temp_dir("outputs-influx");
    let influx = influxdb(&dir);
    let plan = write_plan(
        &dir,
        r#"
[target]
url = "testbed"
max_in_flight = 1

[[scenario]]
name = "browse"
rate = 250
duration = "3s"

[[scenario]]
name = "buy"
rate = 60
duration = "3s"
"#,
    );
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--local-agents", "2", "--testbed-delay", "20ms"])
        .args(["--testbed-pool", "1", "--testbed-pool-timeout", "10ms"])
        .args(["--out-run-id", "influx-e2e", "--out-per-agent"])
        .arg("--out-influxdb")
        .arg(format!("http://{}/write?db=loadfleet", influx.addr))
        .arg("--out")
        .arg(&out);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(120));
    let r = read_report(&out);
    assert_exit_follows_the_report(status.code(), &r, &output);
    assert!(
        !output.contains("OUTPUT_LOST"),
        "an output lost seconds:\n{output}"
    );
    let q = |s: &str| {
        by_scenario(&influxql(
            &influx.addr,
            &format!("{s} FROM loadfleet WHERE run_id = 'influx-e2e' GROUP BY scenario"),
        ))
    };
    let sums = q("SELECT sum(intended) AS intended, sum(sent) AS sent, sum(unsent) AS unsent, sum(completed) AS completed, sum(status_200) AS ok");
    let lasts = q("SELECT last(intended_total) AS intended, last(sent_total) AS sent, last(unsent_total) AS unsent, last(completed_total) AS completed, last(p99_ms_total) AS p99, last(count_total) AS count");
    let scenarios = r["scenarios"].as_array().expect("scenarios");
    assert_eq!(
        sums.len(),
        scenarios.len(),
        "one series per scenario: {sums:?}"
    );
    for s in scenarios {
        let name = s["name"].as_str().expect("name");
        let (sum, last) = (&sums[name], &lasts[name]);
        for key in ["intended", "sent", "completed"] {
            assert_eq!(u(&sum[key]), u(&s[key]), "{name} sum({key})");
            assert_eq!(u(&last[key]), u(&s[key]), "{name} last({key}_total)");
        }
        assert_eq!(u(&sum["unsent"]), u(&s["unsent"]["total"]), "{name} unsent");
        assert_eq!(
            u(&last["unsent"]),
            u(&s["unsent"]["total"]),
            "{name} unsent_total"
        );
        assert_eq!(
            sum["ok"].as_u64().unwrap_or(0),
            s["status"]["200"].as_u64().unwrap_or(0),
            "{name} 200s"
        );
        assert_eq!(
            u(&last["count"]),
            u(&s["latency_ms"]["count"]),
            "{name} count"
        );
        let p99 = f(&last["p99"]);
        let want = f(&s["latency_ms"]["p99"]);
        assert!(
            (p99 - want).abs() <= want * 0.002,
            "{name} p99 {p99} vs {want}"
        );
    }
    assert!(
        u(&r["totals"]["unsent"]["total"]) > 0,
        "nothing unsent: {output}"
    );
    check_dashboard(&influx.addr, "influx-e2e");
}

/// Every query of deploy/grafana/loadfleet-influxdb.json, with the
/// dashboard's variables filled in, has data in what the run pushed: no
/// query names a measurement, field or tag the output does not write.
fn check_dashboard(addr: &str, run_id: &str) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/loadfleet-influxdb.json"
    );
    let text = std::fs::read_to_string(path).expect("read the dashboard");
    let dash: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries: Vec<String> = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            queries.push(t["query"].as_str().expect("query").to_string());
        }
    }
    for a in dash["annotations"]["list"].as_array().expect("annotations") {
        queries.extend(a["query"].as_str().map(str::to_string));
    }
    for v in dash["templating"]["list"].as_array().expect("variables") {
        if v["type"] == "query" {
            queries.push(v["query"].as_str().expect("query").to_string());
        }
    }
    assert!(queries.len() >= 8, "{queries:?}");
    for q in &queries {
        let q = q
            .replace("$run_id", run_id)
            .replace("$scenario", ".*")
            .replace("$timeFilter", "time > now() - 1h")
            .replace("$__interval", "1s");
        let answer = influxql(addr, &q);
        let result = &answer["results"][0];
        assert!(result.get("error").is_none(), "{q}: {answer}");
        let series = result["series"].as_array().cloned().unwrap_or_default();
        assert!(
            !series.is_empty(),
            "no data for the dashboard's {q}: {answer}"
        );
        // Every column has a value somewhere: a misspelt field reads null.
        for s in &series {
            let columns = s["columns"].as_array().expect("columns");
            let values = s["values"].as_array().expect("values");
            for (c, name) in columns.iter().enumerate().skip(1) {
                assert!(
                    values.iter().any(|row| !row[c].is_null()),
                    "column {name} of the dashboard's {q} has no value: {answer}"
                );
            }
        }
    }
}

/// The v2 API (no Debian package to run it here): a stand-in that answers
/// 204 like InfluxDB 2 and keeps what it got shows the write path, the
/// millisecond precision and the token header, and no token in the output.
#[test]
fn influxdb_v2_writes_carry_the_token() {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel::<(String, String)>();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
            let _ = tx.send((head, String::from_utf8_lossy(&body).into_owned()));
        }
    });
    let dir = temp_dir("outputs-influx-v2");
    let token = dir.join("token");
    std::fs::write(&token, "v2-secret-token\n").expect("write the token");
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "1",
        "--rate",
        "20",
        "--duration",
        "2s",
    ])
    .arg("--out-influxdb")
    .arg(format!("http://{addr}/api/v2/write?org=lf&bucket=runs"))
    .arg("--out-token-file")
    .arg(&token)
    .arg("--out")
    .arg(&out);
    let (_, output) = run(cmd, "coordinator", Duration::from_secs(90));
    assert!(!output.contains("v2-secret-token"), "{output}");
    assert!(!output.contains("OUTPUT_LOST"), "{output}");
    let got: Vec<(String, String)> = rx.try_iter().collect();
    assert!(!got.is_empty(), "nothing was written:\n{output}");
    for (head, body) in &got {
        assert!(
            head.starts_with("POST /api/v2/write?org=lf&bucket=runs&precision=ms HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: token v2-secret-token\r\n"),
            "{head}"
        );
        assert!(body.starts_with("loadfleet") || body.is_empty(), "{body}");
    }
    let r = read_report(&out);
    let last = got
        .iter()
        .rev()
        .find(|(_, b)| b.starts_with("loadfleet,"))
        .map(|(_, b)| b.clone())
        .expect("a point");
    let want = format!("intended_total={}i", u(&r["totals"]["intended"]));
    assert!(last.contains(&want), "{want} in {last}");
}
