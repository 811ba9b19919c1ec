//! `[tls] client_cert` towards a target that asks for one: Debian's nginx
//! (installed by scripts/test.sh) with `ssl_verify_client on`, trusting a
//! CA of the test's own. With the plan's client certificate every request
//! is answered 200; without it nginx answers each one 400.

use crate::common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// nginx in the foreground in its own folder, serving TLS on `port` and
/// asking every client for a certificate from `client_ca`; stopped by its
/// PID when dropped.
struct Nginx {
    proc: Proc,
    port: u16,
}

impl Nginx {
    fn start(dir: &Path, cert: &str, key: &str, client_ca: &str) -> Nginx {
        let port = closed_port();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  default_type text/plain;\n\
               server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {cert}; ssl_certificate_key {key};\n\
                 ssl_client_certificate {client_ca}; ssl_verify_client on;\n\
                 location / {{ return 200 \"ok\\n\"; }} }}\n\
             }}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let mut cmd = Command::new(nginx_binary());
        cmd.arg("-p").arg(dir).arg("-c").arg(&conf_path);
        let proc = Proc::spawn(cmd, "nginx");
        // nginx prints no readiness line: wait (bounded) until it accepts.
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx is not listening on {port} after 20 s; its error log:\n{}",
                std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { proc, port }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: nginx's graceful stop; the Proc kills it if it lingers.
        signal(self.proc.pid(), libc::SIGQUIT);
    }
}

/// nginx from the system's packages, or a failure naming the setup script:
/// a test that skipped without it would check nothing.
fn nginx_binary() -> PathBuf {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join("nginx"))
        .find(|p| p.is_file())
        .expect("nginx is not installed; scripts/test.sh installs it")
}

/// A CA certificate, and a client certificate with its key signed by it,
/// written as PEM files in `dir`: (ca, client cert, client key).
fn client_identity(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "client CA");
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut leaf = rcgen::CertificateParams::new(vec!["agent".to_string()]).expect("params");
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).expect("leaf");
    let paths = (
        dir.join("client-ca.pem"),
        dir.join("client.pem"),
        dir.join("client.key"),
    );
    std::fs::write(&paths.0, ca_cert.pem()).expect("write CA");
    std::fs::write(&paths.1, cert.pem()).expect("write client cert");
    std::fs::write(&paths.2, key.serialize_pem()).expect("write client key");
    paths
}

/// A 2 s run at 50 req/s of `tls` (the plan's `[tls]` body) towards the
/// nginx; its per-status counts.
fn statuses(test: &str, port: u16, tls: &str) -> (serde_json::Value, String) {
    let dir = temp_dir(&format!("{test}-plan"));
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "https://localhost:{port}/"
[tls]
{tls}
[[scenario]]
name = "mtls"
rate = 50
duration = "2s"
"#
        ),
    );
    let (_, output, r, _) = run_report(
        test,
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--local-agents",
            "1",
        ],
    );
    assert_eq!(u(&r["totals"]["sent"]), 100, "{output}");
    (r["totals"]["status"].clone(), output)
}

#[test]
fn client_certificate_is_presented_to_a_target_that_asks() {
    let dir = temp_dir("client-cert-nginx");
    let (cert, key) = localhost_certificate(&dir);
    let (ca, client_cert, client_key) = client_identity(&dir);
    let nginx = Nginx::start(&dir, &cert, &key, &ca.to_string_lossy());

    let (with, output) = statuses(
        "client-cert",
        nginx.port,
        &format!(
            "ca_cert = \"{cert}\"\nclient_cert = \"{}\"\nclient_key = \"{}\"",
            client_cert.display(),
            client_key.display()
        ),
    );
    assert_eq!(with, serde_json::json!({ "200": 100 }), "{output}");

    let (without, output) = statuses(
        "no-client-cert",
        nginx.port,
        &format!("ca_cert = \"{cert}\""),
    );
    assert_eq!(without, serde_json::json!({ "400": 100 }), "{output}");
}
