//! https:// targets: the testbed serving TLS with a certificate from a CA of
//! the test's own, agents trusting it through LOADFLEET_CA_CERT — and a
//! run without that trust failing every request as `tls`, loudly.

mod common;

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
        ],
        &[("LOADFLEET_CA_CERT", &cert)],
    );
    assert_eq!(status.code(), Some(0), "{output}");
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), 400);
    assert_eq!(u(&t["status"]["200"]), 400, "{output}");
    assert!(
        t["errors"].as_object().is_none_or(|e| e.is_empty()),
        "{output}"
    );
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
    assert_eq!(u(&t["errors"]["tls"]), u(&t["sent"]), "{output}");
    assert!(output.contains("NO_EXPERIMENT"), "{output}");
}
