//! What the shop and event-stream tests share: the real binary started on
//! port 0, its readiness line read, and the child killed through its own
//! handle when the test ends.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_loadfleet-testbed");
/// Upper bound for anything that should happen "soon"; generous because
/// the machine may be busy building.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// A running testbed; killed when dropped.
pub(crate) struct Testbed {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Testbed {
    /// Starts the binary with `args` on an ephemeral port and waits for its
    /// readiness line.
    pub(crate) fn start(args: &[&str]) -> Testbed {
        let mut child = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning loadfleet-testbed");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("reading the readiness line");
        let addr = line
            .trim_end()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected readiness line {line:?}"));
        Testbed { child, addr }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
