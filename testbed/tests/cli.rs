//! End-to-end tests: run the real `loadfleet-testbed` binary on port 0, wait
//! for its `listening on` line, and talk raw HTTP/1.1 to it over blocking
//! sockets, so the tests check exactly what a load generator would see.
//!
//! Every wait is bounded (read timeouts, exit deadlines); children are killed
//! through their own handle when a test ends, and their stderr is printed
//! when a test fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_loadfleet-testbed");
/// Upper bound for anything that should happen "soon" (startup, a reply,
/// an exit); generous because the machine may be busy building.
const PATIENCE: Duration = Duration::from_secs(20);

/// A running testbed; killed when dropped.
struct Testbed {
    child: Child,
    addr: SocketAddr,
    stderr: Option<JoinHandle<String>>,
}

impl Testbed {
    /// Starts the binary with `args` on an ephemeral port and waits for its
    /// readiness line.
    fn start(args: &[&str]) -> Testbed {
        let mut child = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning loadfleet-testbed");
        let stderr = child.stderr.take().map(collect);
        let stdout = child.stdout.take().expect("piped stdout");
        let (line_tx, line_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = line_tx.send(reader.read_line(&mut line).map(|_| line));
            // Keep draining so the child can never block on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let mut testbed = Testbed {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            stderr,
        };
        let line = match line_rx.recv_timeout(PATIENCE) {
            Ok(Ok(line)) => line,
            other => testbed.fail(&format!("no readiness line: {other:?}")),
        };
        match line
            .trim_end()
            .strip_prefix("listening on ")
            .and_then(|addr| addr.parse().ok())
        {
            Some(addr) => testbed.addr = addr,
            None => testbed.fail(&format!("unexpected readiness line {line:?}")),
        }
        testbed
    }

    /// Kills the child and panics with `message` and the child's stderr.
    fn fail(&mut self, message: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let stderr = self
            .stderr
            .take()
            .and_then(|handle| handle.join().ok())
            .unwrap_or_default();
        panic!("{message}\n--- testbed stderr ---\n{stderr}");
    }

    fn get(&self, path: &str) -> Reply {
        request(self.addr, "GET", path, b"")
    }

    /// Signals our own child, which has not been reaped yet (we hold its
    /// handle and have not waited on it), so the pid is still its own.
    fn send_signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits pid_t"));
        kill(pid, signal).unwrap_or_else(|err| panic!("kill({pid}, {signal}): {err}"));
    }

    /// Waits for the child to exit on its own, within PATIENCE.
    fn wait_exit(&mut self) -> ExitStatus {
        wait_exit(&mut self.child)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            if let Some(stderr) = self.stderr.take().and_then(|handle| handle.join().ok()) {
                eprintln!("--- testbed stderr ---\n{stderr}");
            }
        }
    }
}

/// Reads a child's stderr to the end on a thread.
fn collect(mut stderr: ChildStderr) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    })
}

/// Waits at most PATIENCE for `child` to exit; kills it and panics otherwise.
fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child did not exit in time: {other:?}");
            }
        }
    }
}

/// Runs the binary with `args` (no --listen added) to its exit; returns the
/// exit code and stderr.
fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning loadfleet-testbed");
    let stderr = collect(child.stderr.take().expect("piped stderr"));
    let status = wait_exit(&mut child);
    (status.code(), stderr.join().unwrap_or_default())
}

/// One HTTP response as seen on the wire.
#[derive(Debug)]
struct Reply {
    status: u16,
    content_type: Option<String>,
    body: String,
    elapsed: Duration,
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, PATIENCE).expect("connecting to the testbed");
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(PATIENCE))
        .expect("write timeout");
    stream
}

/// Sends one request on a fresh connection and reads the response.
fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Reply {
    let mut reader = BufReader::new(connect(addr));
    exchange(&mut reader, method, path, body)
}

/// Sends one keep-alive request on `reader`'s connection and reads the
/// response, using Content-Length to find its end.
fn exchange(reader: &mut BufReader<TcpStream>, method: &str, path: &str, body: &[u8]) -> Reply {
    let started = Instant::now();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: testbed\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let stream = reader.get_mut();
    stream
        .write_all(head.as_bytes())
        .expect("writing request head");
    stream.write_all(body).expect("writing request body");

    let mut status_line = String::new();
    reader
        .read_line(&mut status_line)
        .expect("reading status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut content_length = 0;
    let mut content_type = None;
    // Bounded: a response head has far fewer lines than this.
    for _ in 0..100 {
        let mut line = String::new();
        reader.read_line(&mut line).expect("reading header");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("header line has a colon");
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => content_length = value.parse().expect("numeric content-length"),
            "content-type" => content_type = Some(value.to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body).expect("reading body");
    Reply {
        status,
        content_type,
        body: String::from_utf8_lossy(&body).into_owned(),
        elapsed: started.elapsed(),
    }
}

/// Sends `n` requests to `path` at the same moment, each on its own
/// connection; returns the replies sorted by status.
fn concurrent_gets(addr: SocketAddr, n: usize) -> Vec<Reply> {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let mut reader = BufReader::new(connect(addr));
                barrier.wait();
                exchange(&mut reader, "GET", &format!("/work/{i}"), b"")
            })
        })
        .collect();
    let mut replies: Vec<Reply> = handles
        .into_iter()
        .map(|handle| handle.join().expect("request thread panicked"))
        .collect();
    replies.sort_by_key(|reply| reply.status);
    replies
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|reply| reply.status).collect()
}

#[test]
fn plain_request_gets_200_text() {
    let testbed = Testbed::start(&[]);
    let reply = testbed.get("/anything/at/all?x=1");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body, "ok\n");
    assert_eq!(reply.content_type.as_deref(), Some("text/plain"));
}

/// `/bytes/N` answers N bytes, through the same knobs as any request, and
/// refuses a size it will not give, naming the bound.
#[test]
fn bytes_answers_the_size_asked() {
    let testbed = Testbed::start(&[]);
    let mut reader = BufReader::new(connect(testbed.addr));
    for n in [0, 1, 1 << 20, 16 << 20] {
        let reply = exchange(&mut reader, "GET", &format!("/bytes/{n}"), b"");
        assert_eq!(reply.status, 200, "/bytes/{n}");
        assert_eq!(reply.body.len(), n);
        assert!(reply.body.bytes().all(|b| b == b'x'), "/bytes/{n}");
    }
    for bad in ["/bytes/16777217", "/bytes/-1", "/bytes/", "/bytes/1k"] {
        let reply = testbed.get(bad);
        assert_eq!(reply.status, 400, "{bad}: {reply:?}");
        assert!(reply.body.contains("from 0 to 16777216"), "{reply:?}");
    }
    let slow = Testbed::start(&["--delay", "200ms"]);
    let reply = slow.get("/bytes/100000");
    assert_eq!((reply.status, reply.body.len()), (200, 100_000));
    assert!(reply.elapsed >= Duration::from_millis(200), "{reply:?}");
}

#[test]
fn keep_alive_and_request_bodies_work() {
    let testbed = Testbed::start(&[]);
    let mut reader = BufReader::new(connect(testbed.addr));
    for i in 0..3 {
        let reply = exchange(&mut reader, "POST", "/submit", &[b'x'; 10_000]);
        assert_eq!(reply.status, 200, "request {i}: {reply:?}");
        let reply = exchange(&mut reader, "GET", "/", b"");
        assert_eq!(reply.status, 200, "request {i}: {reply:?}");
    }
}

#[test]
fn delay_is_a_lower_bound_on_latency() {
    let testbed = Testbed::start(&["--delay", "200ms", "--delay-jitter", "50ms"]);
    let reply = testbed.get("/");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.elapsed >= Duration::from_millis(200), "{reply:?}");
}

/// The delay runs from when the request reached the machine, not from
/// when the testbed read it: a testbed stopped while the request arrives
/// (as a halted CPU woken late is, for less time) still answers a delay
/// after it was sent, and never before.
#[test]
fn delay_runs_from_the_requests_arrival() {
    let testbed = Testbed::start(&["--delay", "300ms"]);
    let mut reader = BufReader::new(connect(testbed.addr));
    // The first exchange also has the kernel start stamping, which it
    // does in deferred work.
    let first = exchange(&mut reader, "GET", "/", b"");
    assert_eq!(first.status, 200, "{first:?}");
    testbed.send_signal(Signal::SIGSTOP);
    let pid = Pid::from_raw(i32::try_from(testbed.child.id()).expect("pid fits pid_t"));
    let resume = thread::spawn(move || {
        thread::sleep(Duration::from_millis(250));
        kill(pid, Signal::SIGCONT)
    });
    let reply = exchange(&mut reader, "GET", "/", b"");
    resume
        .join()
        .expect("the resuming thread")
        .expect("SIGCONT to our own child");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.elapsed >= Duration::from_millis(300),
        "early: {reply:?}"
    );
    assert!(
        reply.elapsed < Duration::from_millis(450),
        "the delay ran from the read, 250 ms after the arrival: {reply:?}"
    );
}

#[test]
fn pool_timeout_answers_503_after_waiting() {
    let testbed = Testbed::start(&["--pool", "1", "--pool-timeout", "50ms", "--delay", "1s"]);
    let replies = concurrent_gets(testbed.addr, 2);
    assert_eq!(statuses(&replies), [200, 503], "{replies:?}");
    assert_eq!(replies[1].body, "pool timeout\n");
    assert!(replies[0].elapsed >= Duration::from_secs(1), "{replies:?}");
    // The 503 comes only after the pool wait, not at once.
    assert!(
        replies[1].elapsed >= Duration::from_millis(50),
        "{replies:?}"
    );
}

#[test]
fn admission_answers_429_fast() {
    let testbed = Testbed::start(&[
        "--admission",
        "1",
        "--admission-timeout",
        "20ms",
        "--delay",
        "1s",
    ]);
    let replies = concurrent_gets(testbed.addr, 2);
    assert_eq!(statuses(&replies), [200, 429], "{replies:?}");
    let rejected = &replies[1];
    assert_eq!(rejected.body, "not admitted\n");
    assert!(
        rejected.elapsed >= Duration::from_millis(20),
        "{rejected:?}"
    );
    // Fast: well under the 1s of work the admitted request does.
    assert!(
        rejected.elapsed < Duration::from_millis(500),
        "{rejected:?}"
    );
}

#[test]
fn error_rate_one_answers_500() {
    let testbed = Testbed::start(&["--error-rate", "1"]);
    for _ in 0..3 {
        let reply = testbed.get("/");
        assert_eq!(reply.status, 500, "{reply:?}");
    }
}

/// With the only pool slot held by a slow request, `/health` still answers
/// at once. A probe answered 503 (pool timeout) proves the slot is held
/// before `/health` is asked, and the slow request still being out when
/// `/health` has answered proves it was held throughout.
#[test]
fn health_bypasses_a_busy_pool() {
    let testbed = Testbed::start(&["--pool", "1", "--pool-timeout", "100ms", "--delay", "3s"]);
    let addr = testbed.addr;
    let busy = thread::spawn(move || request(addr, "GET", "/slow", b""));
    // The slow request has reached the server once `GET /__stats` (which
    // does not count itself) counts it; only then may the probe ask, so the
    // probe cannot take the slot first.
    let deadline = Instant::now() + PATIENCE;
    while !testbed.get("/__stats").body.starts_with("total 1\n") {
        assert!(Instant::now() < deadline, "the slow request never arrived");
        thread::sleep(Duration::from_millis(10));
    }
    let probe = testbed.get("/probe");
    assert_eq!(
        (probe.status, probe.body.as_str()),
        (503, "pool timeout\n"),
        "the slot is held: {probe:?}"
    );
    let health = testbed.get("/health");
    assert_eq!(health.status, 200, "{health:?}");
    assert!(health.elapsed < Duration::from_secs(2), "{health:?}");
    assert!(
        !busy.is_finished(),
        "the slow request still holds the slot when /health answers"
    );
    let busy = busy.join().expect("slow request thread");
    assert_eq!(busy.status, 200, "{busy:?}");
}

#[test]
fn sigterm_and_sigint_exit_zero() {
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let mut testbed = Testbed::start(&[]);
        assert_eq!(testbed.get("/").status, 200);
        testbed.send_signal(signal);
        let status = testbed.wait_exit();
        assert_eq!(status.code(), Some(0), "signal {signal}: {status:?}");
    }
}

/// The first CPU this process may run on, from /proc (Linux).
fn an_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc/self/status");
    let first = list.trim().split([',', '-']).next().unwrap_or_default();
    assert!(!first.is_empty(), "no CPU in Cpus_allowed_list: {list}");
    first.to_owned()
}

#[test]
fn pinned_single_worker_serves() {
    let cpu = an_allowed_cpu();
    let testbed = Testbed::start(&["--cpus", &cpu, "--workers", "1"]);
    assert_eq!(testbed.get("/").status, 200);
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--error-rate", "2"], "--error-rate"),
        (&["--error-rate", "-0.5"], "--error-rate"),
        (&["--pool-timeout", "1s"], "--pool"),
        (&["--admission-timeout", "1s"], "--admission"),
        (&["--pool", "0"], "--pool"),
        (&["--admission", "0"], "--admission"),
        (&["--delay", "soon"], "--delay"),
        (&["--cpus", "x"], "--cpus"),
        // Parses, but no such CPU exists: rejected when pinning.
        (&["--cpus", "1023"], "--cpus"),
        (&["--listen", "nowhere"], "--listen"),
        (&["--shop-pool", "2"], "--shop"),
        (&["--shop", "--shop-pool", "0"], "--shop-pool"),
        (&["--shop", "--shop-decline", "2"], "--shop-decline"),
        (&["--shop", "--grpc"], "--shop"),
    ];
    for (args, flag) in cases {
        let (code, stderr) = run_to_exit(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{args:?} does not name {flag}: {stderr}"
        );
    }
}
