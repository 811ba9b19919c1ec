//! Debian's nginx (installed by scripts/test.sh) as a foreground process in
//! a test's own folder, on a free loopback port, stopped by its PID when
//! dropped: a server we did not write, for checking what a client really
//! sends. Each answered request is logged as `STATUS METHOD URI`, so a
//! test can count what nginx let through and what it turned away.

#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{closed_port, signal, Proc};

pub(crate) struct Nginx {
    proc: Proc,
    dir: PathBuf,
    pub addr: String,
}

impl Nginx {
    /// Serves one `server` on 127.0.0.1 whose body (directives and
    /// locations) is `server_body`.
    pub(crate) fn start(dir: &Path, server_body: &str) -> Nginx {
        let port = closed_port();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  log_format answered '$status $request_method $uri';\n  access_log {d}/access.log answered;\n\
               client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  default_type text/plain;\n\
               server {{ listen 127.0.0.1:{port};\n{server_body}\n }}\n\
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
        Nginx {
            proc,
            dir: dir.to_path_buf(),
            addr: format!("127.0.0.1:{port}"),
        }
    }

    /// The status of every request nginx answered so far, in order (its
    /// access log is written as each request ends).
    pub(crate) fn statuses(&self) -> Vec<u16> {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        log.lines()
            .map(|l| {
                l.split(' ')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("not a status in nginx's log line {l:?}"))
            })
            .collect()
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
pub(crate) fn nginx_binary() -> PathBuf {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join("nginx"))
        .find(|p| p.is_file())
        .expect("nginx is not installed; scripts/test.sh installs it (apt-get install nginx)")
}
