//! HTTP/2 against servers we did not write: Debian's nginx (installed by
//! scripts/test.sh) serving HTTP/1.1, h2c and h2 over TLS with a certificate made
//! here; and the open-model truth over multiplexed streams, with the
//! testbed capping concurrent streams.

use crate::common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// nginx as a foreground process in its own folder, on free loopback
/// ports, stopped by its PID when dropped.
struct Nginx {
    proc: Proc,
    dir: PathBuf,
    /// The self-signed certificate (PEM) of its TLS port, for `localhost`.
    cert: String,
}

/// The ports one nginx serves on 127.0.0.1.
struct Ports {
    http1: u16,
    h2c: u16,
    h2_tls: u16,
    /// h2c closing each connection with GOAWAY after 10 requests.
    h2c_goaway: u16,
}

impl Nginx {
    fn start(test: &str) -> (Nginx, Ports) {
        let dir = temp_dir(test);
        let (cert, key) = localhost_certificate(&dir);
        let ports = Ports {
            http1: closed_port(),
            h2c: closed_port(),
            h2_tls: closed_port(),
            h2c_goaway: closed_port(),
        };
        let d = dir.display();
        // nginx 1.22 (Debian 12): `listen ... http2` (the `http2 on`
        // directive came in 1.25). keepalive_requests bounds the requests
        // of an HTTP/2 connection too (since 1.19.7): after that many it
        // sends GOAWAY.
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  keepalive_requests 100000;\n  default_type text/plain;\n\
               server {{ listen 127.0.0.1:{}; location / {{ return 200 \"ok\\n\"; }} }}\n\
               server {{ listen 127.0.0.1:{} http2; location / {{ return 200 \"ok\\n\"; }} }}\n\
               server {{ listen 127.0.0.1:{} ssl http2; ssl_certificate {cert}; ssl_certificate_key {key}; location / {{ return 200 \"ok\\n\"; }} }}\n\
               server {{ listen 127.0.0.1:{} http2; keepalive_requests 10; location / {{ return 200 \"ok\\n\"; }} }}\n\
             }}\n",
            ports.http1, ports.h2c, ports.h2_tls, ports.h2c_goaway
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let nginx = which("nginx");
        let mut cmd = Command::new(nginx);
        cmd.arg("-p").arg(&dir).arg("-c").arg(&conf_path);
        let proc = Proc::spawn(cmd, "nginx");
        let server = Nginx {
            proc,
            dir,
            cert: cert.clone(),
        };
        for port in [ports.http1, ports.h2c, ports.h2_tls, ports.h2c_goaway] {
            server.wait_listening(port);
        }
        (server, ports)
    }

    /// Waits (bounded) until nginx accepts on `port`: it prints no
    /// readiness line of its own.
    fn wait_listening(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx is not listening on {port} after 20 s; its error log:\n{}",
                std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: nginx's graceful stop; the Proc kills it if it lingers.
        signal(self.proc.pid(), libc::SIGQUIT);
    }
}

/// The path of a program from the system's packages, or a failure that
/// points at scripts/test.sh: a test that skips without it would check nothing.
fn which(program: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let path = Path::new(dir).join(program);
        if path.is_file() {
            return path;
        }
    }
    panic!("{program} is not installed; scripts/test.sh installs it (apt-get install {program})");
}

/// A short open run at `url` with one local agent; the report.
fn run(test: &str, url: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let mut args = vec![
        "run",
        "--url",
        url,
        "--rate",
        "200",
        "--duration",
        "2s",
        "--local-agents",
        "1",
        "--connections",
        "2",
    ];
    args.extend_from_slice(extra);
    let (_, output, report, _) = run_report(test, &args);
    (output, report)
}

fn connections(report: &serde_json::Value) -> Vec<(String, u64)> {
    report["run"]["protocol"]["connections"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), u(v))).collect())
        .unwrap_or_default()
}

/// Every request of the run answered 200.
fn all_ok(report: &serde_json::Value, output: &str) {
    let t = &report["totals"];
    assert_eq!(u(&t["intended"]), 400, "{output}");
    assert_eq!(t["status"]["200"].as_u64(), Some(400), "{t}\n{output}");
    assert!(
        t["errors"].as_object().is_none_or(|e| e.is_empty()),
        "{t}\n{output}"
    );
}

#[test]
fn nginx_speaks_each_protocol_and_the_report_names_it() {
    let (nginx, ports) = Nginx::start("h2-nginx");
    let dir = temp_dir("h2-nginx-plan");
    let cert = &nginx.cert;

    // HTTP/1.1: the default.
    let url = format!("http://127.0.0.1:{}/", ports.http1);
    let (output, report) = run("h2-nginx-http1", &url, &[]);
    all_ok(&report, &output);
    assert_eq!(report["run"]["protocol"]["asked"], "http1");
    let conns = connections(&report);
    assert!(
        !conns.is_empty() && conns.iter().all(|(p, _)| p == "http1"),
        "{conns:?}"
    );

    // h2c with prior knowledge: --http2 on an http:// URL.
    let url = format!("http://127.0.0.1:{}/", ports.h2c);
    let (output, report) = run("h2-nginx-h2c", &url, &["--http2"]);
    all_ok(&report, &output);
    assert_eq!(report["run"]["protocol"]["asked"], "h2");
    let conns = connections(&report);
    assert!(
        conns.len() == 1 && conns[0].0 == "h2c" && (1..=2).contains(&conns[0].1),
        "at most --connections 2, each h2c: {conns:?}\n{output}"
    );
    assert!(output.contains("spoken: h2c"), "{output}");

    // h2 over TLS by ALPN, the certificate trusted through the plan.
    let plan = dir.join("h2.toml");
    std::fs::write(
        &plan,
        format!(
            "[target]\nurl = \"https://localhost:{}/\"\nprotocol = \"h2\"\nconnections = 2\n\
             [tls]\nca_cert = \"{cert}\"\n\
             [[scenario]]\nrate = 200\nduration = \"2s\"\n",
            ports.h2_tls
        ),
    )
    .expect("write plan");
    let (_, output, report, out) = run_report(
        "h2-nginx-tls",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--local-agents",
            "1",
        ],
    );
    all_ok(&report, &output);
    let conns = connections(&report);
    assert!(
        conns.len() == 1 && conns[0].0 == "h2" && (1..=2).contains(&conns[0].1),
        "{conns:?}\n{output}"
    );
    assert_eq!(report["run"]["tls"]["ca_cert"], true);
    assert_eq!(report["run"]["tls"]["insecure"], false);
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("spoken: h2 "),
        "the HTML report names the protocol"
    );

    // The same self-signed target with --insecure instead: it runs, and
    // the report says the certificate was not checked.
    let url = format!("https://localhost:{}/", ports.h2_tls);
    let (output, report) = run("h2-nginx-insecure", &url, &["--http2", "--insecure"]);
    all_ok(&report, &output);
    assert_eq!(report["run"]["tls"]["insecure"], true);
    let verdicts = report["verdicts"].to_string();
    assert!(verdicts.contains("INSECURE_TLS"), "{verdicts}");
    assert!(output.contains("NOT verified"), "{output}");

    // Without either, the self-signed certificate is refused: tls errors.
    let (_, report) = run("h2-nginx-untrusted", &url, &["--http2"]);
    assert_eq!(
        u(&report["totals"]["errors"]["tls"]),
        400,
        "{}",
        report["totals"]
    );

    // HTTP/1.1 asked of the TLS port that also offers h2: ALPN settles on
    // http/1.1, and the report says so.
    let (output, report) = run("h2-nginx-http1-on-tls", &url, &["--insecure"]);
    all_ok(&report, &output);
    let conns = connections(&report);
    assert!(conns.len() == 1 && conns[0].0 == "http1", "{conns:?}");
}

/// nginx ends each HTTP/2 connection with GOAWAY after 10 requests: the
/// agent opens new connections and carries on, and anything the GOAWAY
/// refused is counted as `goaway`, apart from every other outcome.
#[test]
fn goaway_after_n_requests_opens_new_connections() {
    let (_nginx, ports) = Nginx::start("h2-goaway");
    let url = format!("http://127.0.0.1:{}/", ports.h2c_goaway);
    let (output, report) = run("h2-goaway-run", &url, &["--http2"]);
    let t = &report["totals"];
    let ok = u(&t["status"]["200"]);
    let goaway = t["errors"]["goaway"].as_u64().unwrap_or(0);
    assert_eq!(ok + goaway, 400, "{t}\n{output}");
    let others: Vec<_> = t["errors"]
        .as_object()
        .map(|e| e.keys().filter(|k| *k != "goaway").cloned().collect())
        .unwrap_or_default();
    assert!(others.is_empty(), "only GOAWAY may fail requests: {t}");
    assert!(ok > 300, "{t}\n{output}");
    // Each connection carried at most 10 requests.
    let opened: u64 = connections(&report).iter().map(|(_, n)| n).sum();
    assert!(
        opened >= ok.div_ceil(10),
        "{opened} connections for {ok} answers\n{output}"
    );
}

/// Lesson 2 over HTTP/2: one connection whose peer allows 10 concurrent
/// streams, each answered after 100 ms, can carry 100 req/s. At 300 req/s
/// the arrivals wait for a stream in the agent: that wait is in the latency
/// (from the intended instant, p50 far above 100 ms) but not in the service
/// time (near 100 ms), it shows as pool wait, and nothing waits beyond
/// --max-in-flight: the rest is counted unsent. (The pool is capped at its
/// one connection: uncapped, the agent would open more.)
#[test]
fn open_model_truth_over_multiplexed_streams() {
    let (_testbed, addr) = start_testbed(&["--delay", "100ms", "--h2-max-streams", "10"]);
    let url = format!("http://{addr}/");
    let (_, output, report, _) = run_report(
        "h2-truth",
        &[
            "run",
            "--url",
            &url,
            "--http2",
            "--connections",
            "1",
            "--max-connections",
            "1",
            "--rate",
            "300",
            "--duration",
            "3s",
            "--max-in-flight",
            "40",
            "--local-agents",
            "1",
        ],
    );
    let t = &report["totals"];
    assert_eq!(
        connections(&report),
        vec![("h2c".to_string(), 1)],
        "{output}"
    );
    let latency_p50 = t["latency_ms"]["p50"].as_f64().expect("latency");
    let service_p50 = t["service_time_ms"]["p50"].as_f64().expect("service time");
    let service_p99 = t["service_time_ms"]["p99"].as_f64().expect("service time");
    assert!(latency_p50 > 250.0, "latency p50 {latency_p50} ms\n{t}");
    assert!(
        // The testbed's 100 ms sleep, plus what a loaded CI machine adds.
        (100.0..160.0).contains(&service_p50) && service_p99 < 400.0,
        "service time p50 {service_p50} ms, p99 {service_p99} ms\n{t}"
    );
    assert!(
        u(&t["pool_wait_ms"]["count"]) > 100,
        "arrivals waited for a stream: {t}"
    );
    // 10 streams at 100 ms carry ~100 req/s; the cap of 40 in flight sheds
    // the rest as unsent, never queued without bound.
    let unsent = u(&t["unsent"]["concurrency_limit"]);
    assert!(unsent > 300, "unsent concurrency_limit {unsent}\n{t}");
    for iv in report["intervals"].as_array().expect("intervals") {
        assert!(u(&iv["max_in_flight"]) <= 40, "{iv}");
    }
    assert_eq!(u(&t["intended"]), u(&t["sent"]) + u(&t["unsent"]["total"]));
    assert_eq!(u(&t["status"]["200"]), u(&t["completed"]), "{t}");
    let verdicts = report["verdicts"].to_string();
    assert!(verdicts.contains("GENERATOR_POOL"), "{verdicts}");
}
