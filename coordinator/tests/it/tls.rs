//! https:// targets: the testbed serving TLS with a certificate from a CA of
//! the test's own, agents trusting it through LOADFLEET_CA_CERT — and a
//! run without that trust failing every request as `tls`, loudly.

use crate::common;

use common::*;

#[test]
fn https_target_with_a_trusted_ca() {
    let dir = temp_dir("tls-ok");
    let (cert, key) = localhost_certificate(&dir);
    let (_testbed, addr) = start_testbed(&["--tls-cert", &cert, "--tls-key", &key]);
    let port = addr.rsplit(':').next().expect("port");
    let url = format!("https://localhost:{port}/");
    let (status, output, r, _) = run_report_with_env(
        "tls-ok-run",
        &[
            "run",
            "--local-agents",
            "2",
            "--rate",
            "200",
            "--duration",
            "2s",
            "--url",
            &url,
            "--connections",
            "4",
        ],
        &[("LOADFLEET_CA_CERT", &cert)],
    );
    assert_ok_or_saturated(status, &r, &output);
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), 400);
    assert_eq!(u(&t["status"]["200"]), 400, "{output}");
    assert!(
        t["errors"].as_object().is_none_or(|e| e.is_empty()),
        "{output}"
    );
    // The phases: every request either opened a connection or reused one,
    // keep-alive means a handful were opened (at most 4 per agent), and
    // each one opened has a connect and a TLS-handshake time.
    let p = &t["phases"];
    let opened = u(&p["connections_opened"]);
    assert!((1..=8).contains(&opened), "{p}");
    assert_eq!(opened + u(&p["connections_reused"]), 400, "{p}");
    assert_eq!(u(&p["tls_handshake_ms"]["count"]), opened, "{p}");
    assert_eq!(u(&p["connect_ms"]["count"]), opened, "{p}");
    assert_eq!(u(&p["ttfb_ms"]["count"]), 400, "{p}");
    assert!(p["tls_handshake_ms"]["p50"]
        .as_f64()
        .is_some_and(|ms| ms > 0.0));
}

#[test]
fn untrusted_certificate_is_a_tls_error_and_no_experiment() {
    let dir = temp_dir("tls-bad");
    let (cert, key) = localhost_certificate(&dir);
    let (_testbed, addr) = start_testbed(&["--tls-cert", &cert, "--tls-key", &key]);
    let port = addr.rsplit(':').next().expect("port");
    let url = format!("https://localhost:{port}/");
    let (status, output, r, _) = run_report(
        "tls-bad-run",
        &[
            "run",
            "--local-agents",
            "1",
            "--rate",
            "50",
            "--duration",
            "1s",
            "--url",
            &url,
        ],
    );
    assert_eq!(status.code(), Some(3), "{output}");
    let t = &r["totals"];
    // Every arrival went out and failed its handshake: none is left
    // unsent, so "every error is tls" is about 50 requests, not none.
    assert_eq!(u(&t["sent"]), 50, "{t}");
    assert_eq!(u(&t["errors"]["tls"]), 50, "{output}");
    assert!(output.contains("NO_EXPERIMENT"), "{output}");
}

// Mutual TLS on the control plane: the coordinator runs with --client-ca and
// only agents showing a client certificate signed by that CA get in; the
// token alone is not enough.

/// A CA of the test's own; `leaf` signs a client certificate with it.
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new(dir: &std::path::Path, name: &str) -> (Ca, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA");
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, cert.pem()).expect("write CA");
        (Ca { cert, key }, path.to_string_lossy().into_owned())
    }

    /// A client certificate and key signed by this CA, written as PEM files.
    fn leaf(&self, dir: &std::path::Path, name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).expect("params");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("leaf");
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).expect("write cert");
        std::fs::write(&k, key.serialize_pem()).expect("write key");
        (
            c.to_string_lossy().into_owned(),
            k.to_string_lossy().into_owned(),
        )
    }
}

/// A coordinator waiting for one remote agent over mutual TLS; returns it,
/// its https:// control URL and the server certificate agents must trust.
fn mtls_coordinator(
    target: &str,
    out: &std::path::Path,
    client_ca: &str,
) -> (Proc, String, String) {
    let (server_cert, server_key) = localhost_certificate(out);
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--listen",
        "127.0.0.1:0",
        "--token",
        "t",
        "--agent-timeout",
        "4s",
        "--expect-agents",
        "1",
        "--rate",
        "100",
        "--duration",
        "1s",
        "--url",
        target,
        "--tls-cert",
        &server_cert,
        "--tls-key",
        &server_key,
        "--client-ca",
        client_ca,
        // The certificates sit in the folder; --overwrite keeps them.
        "--overwrite",
        "--out",
    ])
    .arg(out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let port = line
        .split("listening on ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .and_then(|a| a.rsplit(':').next())
        .expect("address in the line")
        .to_string();
    (c, format!("https://localhost:{port}"), server_cert)
}

fn mtls_agent(url: &str, server_cert: &str, extra: &[&str]) -> Proc {
    let mut cmd = agent();
    cmd.args([
        "--coordinator",
        url,
        "--token",
        "t",
        "--connect-timeout",
        "3s",
        "--ca-cert",
        server_cert,
    ])
    .args(extra);
    Proc::spawn(cmd, "agent")
}

use std::time::Duration;

#[test]
fn mutual_tls_agent_with_a_certificate_from_the_ca_runs() {
    let out = temp_dir("mtls-ok");
    let (_testbed, addr) = start_testbed(&[]);
    let (ca, ca_path) = Ca::new(&out, "fleet-ca");
    let (cert, key) = ca.leaf(&out, "agent-1");
    let (c, url, server_cert) = mtls_coordinator(&format!("http://{addr}/"), &out, &ca_path);
    let a = mtls_agent(
        &url,
        &server_cert,
        &["--tls-cert", &cert, "--tls-key", &key],
    );
    let (status, output) = c.wait(Duration::from_secs(60));
    assert_ok_or_saturated(status, &read_report(&out), &output);
    let (agent_status, agent_output) = a.wait(Duration::from_secs(15));
    assert_eq!(agent_status.code(), Some(0), "{agent_output}");
    assert_eq!(u(&read_report(&out)["totals"]["status"]["200"]), 100);
}

/// The refused cases: the agent exits non-zero naming the client
/// certificate, the coordinator never starts the run and no load is sent.
fn refused(test: &str, agent_identity: Option<&str>) {
    let out = temp_dir(test);
    let target = Silent::new();
    let (_ca, ca_path) = Ca::new(&out, "fleet-ca");
    let (c, url, server_cert) = mtls_coordinator(&target.url(), &out, &ca_path);
    let extra = match agent_identity {
        Some(name) => {
            let (other, _) = Ca::new(&out, "other-ca");
            let (cert, key) = other.leaf(&out, name);
            vec!["--tls-cert".to_string(), cert, "--tls-key".to_string(), key]
        }
        None => Vec::new(),
    };
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let (agent_status, agent_output) =
        mtls_agent(&url, &server_cert, &extra).wait(Duration::from_secs(30));
    assert_eq!(agent_status.code(), Some(2), "{agent_output}");
    assert!(
        agent_output.contains("--tls-cert") && agent_output.contains("client certificate"),
        "{agent_output}"
    );
    let (status, output) = c.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(3), "{output}");
    assert!(output.contains("0 of 1 agent(s) joined"), "{output}");
    assert_eq!(target.connections(), 0, "no load may be sent");
    // Intended follows the plan: all of it unsent, as nobody ran it.
    let r = read_report(&out);
    assert_eq!(
        u(&r["totals"]["unsent"]["no_agents"]),
        u(&r["totals"]["intended"])
    );
}

#[test]
fn mutual_tls_agent_without_a_client_certificate_is_refused() {
    refused("mtls-none", None);
}

#[test]
fn mutual_tls_agent_with_a_certificate_from_another_ca_is_refused() {
    refused("mtls-other", Some("stranger"));
}

#[test]
fn mutual_tls_flags_are_checked() {
    let out = temp_dir("mtls-flags");
    let (_ca, ca_path) = Ca::new(&out, "fleet-ca");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--expect-agents",
        "1",
        "--token",
        "t",
        "--listen",
        "127.0.0.1:0",
        "--url",
        "http://127.0.0.1:9/",
        "--client-ca",
        &ca_path,
    ]);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains("--client-ca") && output.contains("--tls-cert"),
        "{output}"
    );

    let mut cmd = agent();
    cmd.args([
        "--coordinator",
        "https://localhost:9",
        "--token",
        "t",
        "--tls-key",
        &ca_path,
    ]);
    let (status, output) = run(cmd, "agent", Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("--tls-key needs --tls-cert"), "{output}");

    let mut cmd = agent();
    cmd.args([
        "--coordinator",
        "http://127.0.0.1:9",
        "--token",
        "t",
        "--tls-cert",
        &ca_path,
        "--tls-key",
        &ca_path,
    ]);
    let (status, output) = run(cmd, "agent", Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("https://"), "{output}");
}
