//! Real receivers for the live-output tests, started on loopback from
//! Debian's packages (.ci/run installs them): Prometheus 2.42 with its
//! remote-write receiver and native histograms, VictoriaMetrics, InfluxDB
//! 1.6; and sinks
//! that misbehave (a port that accepts and never answers).
//!
//! Each receiver keeps its data in the test's own temp folder and is
//! stopped through its handle (by PID) when the test ends.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{closed_port, Proc};

/// Fails, pointing at .ci/run, when a receiver's binary is missing: a test
/// that silently passes without its receiver checks nothing.
pub(crate) fn require(binary: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(binary).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "{binary} is needed (Debian package {package}); .ci/run installs it (apt-get install {package})"
    );
}

/// A receiver process, killed by its PID when dropped.
pub(crate) struct Receiver {
    pub proc: Option<Proc>,
    pub addr: String,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// Prometheus on 127.0.0.1, storing under `dir`.
pub(crate) fn prometheus(dir: &Path) -> Receiver {
    prometheus_with(dir, None)
}

/// Prometheus serving https with this certificate and key (PEM files).
pub(crate) fn prometheus_tls(dir: &Path, cert: &str, key: &str) -> Receiver {
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"),
    )
    .expect("write web.yml");
    prometheus_with(dir, Some(&web))
}

fn prometheus_with(dir: &Path, web: Option<&Path>) -> Receiver {
    require("prometheus", "prometheus");
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, "global: {}\n").expect("write prometheus.yml");
    let addr = format!("127.0.0.1:{}", closed_port());
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .args([
            "--web.enable-remote-write-receiver",
            "--enable-feature=native-histograms",
        ]);
    if let Some(web) = web {
        cmd.arg(format!("--web.config.file={}", web.display()));
    }
    let mut proc = Proc::spawn(cmd, "prometheus");
    proc.wait_for_line(
        "Server is ready to receive web requests",
        Duration::from_secs(60),
    );
    Receiver {
        proc: Some(proc),
        addr,
    }
}

/// VictoriaMetrics on 127.0.0.1, storing under `dir`, answering queries
/// with what was just written (no latency offset, no cache).
pub(crate) fn victoria_metrics(dir: &Path) -> Receiver {
    require("victoria-metrics", "victoria-metrics");
    let addr = format!("127.0.0.1:{}", closed_port());
    let mut cmd = Command::new("victoria-metrics");
    cmd.arg(format!("-storageDataPath={}", dir.join("vm").display()))
        .arg(format!("-httpListenAddr={addr}"))
        .args(["-search.latencyOffset=0s", "-search.disableCache"]);
    let mut proc = Proc::spawn(cmd, "victoria-metrics");
    proc.wait_for_line("started VictoriaMetrics", Duration::from_secs(60));
    Receiver {
        proc: Some(proc),
        addr,
    }
}

/// InfluxDB 1.x on 127.0.0.1 with its files under `dir`, and a database
/// `loadfleet`.
pub(crate) fn influxdb(dir: &Path) -> Receiver {
    require("influxd", "influxdb");
    let port = closed_port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.join("influxdb.conf");
    let d = |s: &str| dir.join(s).display().to_string();
    std::fs::write(
        &config,
        format!(
            "reporting-disabled = true\nbind-address = \"127.0.0.1:{}\"\n[meta]\n  dir = \"{}\"\n[data]\n  dir = \"{}\"\n  wal-dir = \"{}\"\n[http]\n  bind-address = \"{addr}\"\n  log-enabled = false\n[monitor]\n  store-enabled = false\n",
            closed_port(),
            d("meta"),
            d("data"),
            d("wal")
        ),
    )
    .expect("write influxdb.conf");
    let mut cmd = Command::new("influxd");
    cmd.arg("-config").arg(&config);
    let proc = Proc::spawn(cmd, "influxd");
    let r = Receiver {
        proc: Some(proc),
        addr,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((204, _)) = http(&r.addr, "GET", "/ping", "") {
            break;
        }
        assert!(Instant::now() < deadline, "influxd did not answer /ping");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, body) = http(
        &r.addr,
        "POST",
        "/query?q=CREATE%20DATABASE%20loadfleet",
        "",
    )
    .expect("create database");
    assert_eq!(status, 200, "{body}");
    r
}

/// One HTTP/1.0 exchange; the status and the body.
pub(crate) fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A PromQL instant query; the `data.result` array.
pub(crate) fn promql(addr: &str, query: &str) -> Vec<serde_json::Value> {
    let (status, body) = http(
        addr,
        "POST",
        "/api/v1/query",
        &format!("query={}", urlencode(query)),
    )
    .expect("query prometheus");
    assert_eq!(status, 200, "{query}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("prometheus answers JSON");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// A PromQL query's one value.
pub(crate) fn promql_value(addr: &str, query: &str) -> f64 {
    let r = promql(addr, query);
    assert_eq!(r.len(), 1, "{query}: {r:?}");
    r[0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{query}: {r:?}"))
}

/// An InfluxQL query on database `loadfleet`; the first series' rows as
/// (columns, values).
pub(crate) fn influxql(addr: &str, query: &str) -> serde_json::Value {
    let (status, body) = http(
        addr,
        "POST",
        &format!("/query?db=loadfleet&q={}", urlencode(query)),
        "",
    )
    .expect("query influxdb");
    assert_eq!(status, 200, "{query}: {body}");
    serde_json::from_str(&body).expect("influxdb answers JSON")
}

/// A port that accepts connections and never answers; held open until
/// dropped.
pub(crate) struct Mute {
    pub addr: String,
    _thread: std::thread::JoinHandle<()>,
}

impl Mute {
    pub(crate) fn new() -> Self {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming().map_while(Result::ok) {
                held.push(s);
            }
        });
        Mute {
            addr,
            _thread: thread,
        }
    }
}
