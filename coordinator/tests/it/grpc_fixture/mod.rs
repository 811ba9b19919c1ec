//! The Python gRPC server of tests/support/grpc_server.py (PyPI's grpcio,
//! installed by scripts/test.sh), and the testbed's gRPC counts, as the
//! tests hold reports against them.

#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{signal, Proc};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/grpc_server.py");

/// The Python gRPC server, started with `args`; returns it and its
/// `host:port`. Fails pointing at scripts/test.sh when grpcio is missing.
pub(crate) fn start_fixture(args: &[&str]) -> (Proc, String) {
    let probe = Command::new("python3")
        .args(["-c", "import grpc, grpc_reflection"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        probe,
        "python3 with grpcio and grpcio-reflection is needed (PyPI); scripts/test.sh installs them"
    );
    let mut cmd = Command::new("python3");
    cmd.arg(FIXTURE).args(args);
    let mut server = Proc::spawn(cmd, "grpc fixture");
    let line = server.wait_for_line("listening on", Duration::from_secs(30));
    let addr = line.rsplit(' ').next().expect("address").to_string();
    (server, addr)
}

/// What a stopped server printed: `counts`, `{method: {status: n}}` (the
/// testbed's `grpc-status NAME N` lines as `{status: n}` under ""), and,
/// from the Python server, `received`, `{method: {request name: n}}`.
pub(crate) struct Stopped {
    pub counts: Value,
    pub received: Value,
}

/// Stops a server by its pid (SIGTERM) and reads what it printed.
pub(crate) fn stop(server: Proc) -> Stopped {
    signal(server.pid(), libc::SIGTERM);
    let (status, output) = server.wait(Duration::from_secs(20));
    assert!(
        status.success(),
        "the server did not stop cleanly:\n{output}"
    );
    let line = |prefix: &str| {
        output
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|json| serde_json::from_str::<Value>(json).expect("the server prints JSON"))
    };
    if let Some(counts) = line("[stdout] counts ") {
        let received = line("[stdout] received ").expect("the server prints what it received");
        return Stopped { counts, received };
    }
    let mut counts = serde_json::Map::new();
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix("[stdout] grpc-status ") {
            let (name, n) = rest.split_once(' ').expect("NAME N");
            counts.insert(name.into(), Value::from(n.parse::<u64>().expect("a count")));
        }
    }
    Stopped {
        counts: serde_json::json!({ "": counts }),
        received: Value::Null,
    }
}

/// [`stop`]'s counts.
pub(crate) fn stop_and_count(server: Proc) -> Value {
    stop(server).counts
}

/// A server-side count, 0 when absent.
pub(crate) fn server_count(counts: &Value, method: &str, status: &str) -> u64 {
    counts[method][status].as_u64().unwrap_or(0)
}
