//! The part every output shares: a bounded queue, one worker that posts
//! in order with a timeout and a few retries, and the ledger of what could
//! not be delivered.
//!
//! Invariants:
//! - the fleet only ever pushes into the queue, which never blocks and
//!   never grows past its bound: a slow or dead sink cannot slow the run or
//!   change a figure;
//! - frames are cumulative, so when the queue is full the oldest is
//!   dropped (the newer one carries its totals); its seconds are booked as
//!   lost;
//! - one request in flight per output, retried before the next is sent, so
//!   each series reaches the receiver in order;
//! - credentials travel only in request headers; nothing here prints them.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::sync::Notify;

use super::config::OutputSpec;
use super::frame::Frame;

/// Tries per request before its seconds are booked as lost.
const ATTEMPTS: u32 = 3;

/// Turns frames into HTTP request bodies, one encoder per kind of output.
pub(crate) trait Encoder: Send + 'static {
    /// The body for one frame, and its `content-type` and extra headers.
    fn encode(&mut self, frame: &Frame) -> Encoded;
}

pub(crate) struct Encoded {
    pub body: Bytes,
    pub headers: Vec<(&'static str, &'static str)>,
}

/// What one output could not deliver, for the report's verdict.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ledger {
    pub delivered: u64,
    /// Seconds whose only frame never reached the receiver, one range per
    /// frame (see [`Ledger::lost_ranges`]).
    lost: Vec<Range<u64>>,
    /// The last failure, as the log and the verdict show it.
    pub last_error: Option<String>,
    /// Frames whose request failed or that were dropped.
    pub frames_lost: u64,
    /// The run's last frame (its final totals) reached the receiver.
    pub final_delivered: bool,
}

impl Ledger {
    pub(crate) fn seconds_lost(&self) -> u64 {
        self.lost.iter().map(|r| r.end - r.start).sum()
    }

    fn lose(&mut self, frame: &Frame, why: Option<String>) {
        self.frames_lost += 1;
        self.book(frame);
        // A receiver's own error says more than the queue's.
        if self.last_error.is_none() {
            self.last_error = why;
        }
    }

    /// Books the frame's seconds as lost.
    fn book(&mut self, frame: &Frame) {
        if !frame.seconds.is_empty() {
            self.lost.push(frame.seconds.clone());
        }
    }

    /// The lost seconds as sorted, merged ranges.
    pub(crate) fn lost_ranges(&self) -> Vec<Range<u64>> {
        let mut all = self.lost.clone();
        all.sort_by_key(|r| r.start);
        let mut out: Vec<Range<u64>> = Vec::new();
        for r in all {
            match out.last_mut() {
                Some(prev) if prev.end >= r.start => prev.end = prev.end.max(r.end),
                _ => out.push(r),
            }
        }
        out
    }
}

struct Shared {
    queue: Mutex<State>,
    wake: Notify,
}

struct State {
    frames: VecDeque<Arc<Frame>>,
    closed: bool,
    ledger: Ledger,
}

/// The fleet's end of one output's queue.
pub(crate) struct Queue {
    shared: Arc<Shared>,
    capacity: usize,
}

/// The worker's handle, to wait for it at the end of the run.
pub(crate) struct Worker {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    pub name: String,
}

/// Starts the worker of one output on the current runtime.
pub(crate) fn start(
    spec: &OutputSpec,
    encoder: Box<dyn Encoder>,
) -> anyhow::Result<(Queue, Worker)> {
    let shared = Arc::new(Shared {
        queue: Mutex::new(State {
            frames: VecDeque::new(),
            closed: false,
            ledger: Ledger::default(),
        }),
        wake: Notify::new(),
    });
    let post = Post::new(spec)?;
    let task = tokio::spawn(work(shared.clone(), post, encoder, spec.label()));
    Ok((
        Queue {
            shared: shared.clone(),
            capacity: spec.queue.max(1),
        },
        Worker {
            shared,
            task,
            name: spec.label(),
        },
    ))
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    // A worker that panicked leaves the state as it was: keep using it.
    shared
        .queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Queue {
    /// Hands a frame to the worker without waiting; a full queue drops its
    /// oldest frame.
    pub(crate) fn push(&self, frame: Arc<Frame>) {
        let mut state = lock(&self.shared);
        if state.frames.len() >= self.capacity {
            if let Some(old) = state.frames.pop_front() {
                state.ledger.lose(&old, Some("the queue was full".into()));
            }
        }
        state.frames.push_back(frame);
        drop(state);
        self.shared.wake.notify_one();
    }
}

impl Worker {
    /// Queues `last` (the verdicts), then waits up to `grace` for the queue
    /// to drain, then books what is left as lost. The fleet must be done
    /// pushing.
    pub(crate) async fn finish(self, last: Option<Arc<Frame>>, grace: Duration) -> Ledger {
        {
            let mut state = lock(&self.shared);
            state.frames.extend(last);
            state.closed = true;
        }
        self.shared.wake.notify_one();
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
            let _ = task.await;
        }
        let mut state = lock(&self.shared);
        let left: Vec<_> = state.frames.drain(..).collect();
        for frame in left {
            state.ledger.lose(
                &frame,
                Some("not delivered before the coordinator ended".into()),
            );
        }
        // A frame in flight when the worker was stopped stays booked lost.
        state.ledger.clone()
    }
}

async fn work(shared: Arc<Shared>, mut post: Post, mut encoder: Box<dyn Encoder>, name: String) {
    let mut warned = false;
    loop {
        let next = {
            let mut state = lock(&shared);
            match state.frames.pop_front() {
                Some(f) => {
                    // Booked as lost until it is delivered, so a worker
                    // stopped mid-request never counts it as delivered.
                    state.ledger.book(&f);
                    Some(f)
                }
                None if state.closed => return,
                None => None,
            }
        };
        let Some(frame) = next else {
            shared.wake.notified().await;
            continue;
        };
        let encoded = encoder.encode(&frame);
        let mut outcome = Err(String::new());
        for attempt in 0..ATTEMPTS {
            outcome = post.send(&encoded).await;
            match &outcome {
                Ok(()) => break,
                Err(e) if e.starts_with("refused") => break,
                Err(_) if attempt + 1 < ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
                Err(_) => {}
            }
        }
        let mut state = lock(&shared);
        match outcome {
            Ok(()) => {
                unbook(&mut state.ledger, &frame);
                state.ledger.delivered += 1;
                state.ledger.final_delivered |= frame.last;
            }
            Err(e) => {
                if !warned {
                    // The URL without its query (a v1 InfluxDB password can
                    // sit there), and never a header.
                    eprintln!("warning: output {name}: {e}; the run goes on, and the report will count the seconds not delivered");
                    warned = true;
                }
                state.ledger.frames_lost += 1;
                state.ledger.last_error = Some(e);
            }
        }
    }
}

/// Takes back the seconds booked lost when a frame was taken on.
fn unbook(ledger: &mut Ledger, frame: &Frame) {
    if let Some(i) = ledger.lost.iter().rposition(|r| *r == frame.seconds) {
        ledger.lost.remove(i);
    }
}

/// One output's HTTP target: where to post, with which headers.
struct Post {
    uri: http::Uri,
    /// `host:port`, what the connection dials.
    dial: String,
    authority: String,
    host: String,
    tls: Option<tokio_rustls::TlsConnector>,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    timeout: Duration,
}

impl Post {
    fn new(spec: &OutputSpec) -> anyhow::Result<Self> {
        let uri: http::Uri = spec
            .push_url()
            .parse()
            .map_err(|e| anyhow::anyhow!("{}: not a URL ({e})", spec.label()))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => anyhow::bail!("{}: give an http:// or https:// URL", spec.label()),
        };
        let (authority, host) = match (uri.authority(), uri.host()) {
            (Some(a), Some(h)) => (a.to_string(), h.to_string()),
            _ => anyhow::bail!("{}: the URL has no host", spec.label()),
        };
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            Some(
                super::tls::connector(spec.ca_file.as_deref())
                    .map_err(|e| anyhow::anyhow!("{}: {e:#}", spec.label()))?,
            )
        } else {
            None
        };
        let mut headers = Vec::new();
        for (k, v) in spec.auth_headers() {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| anyhow::anyhow!("{}: header name {k:?}: {e}", spec.label()))?;
            let mut value = http::HeaderValue::from_str(&v).map_err(|_| {
                anyhow::anyhow!(
                    "{}: the value of header {k} is not valid in a header",
                    spec.label()
                )
            })?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        Ok(Self {
            dial: format!("{}:{port}", host),
            uri,
            authority,
            host,
            tls,
            headers,
            timeout: spec.timeout,
        })
    }

    /// One request on a fresh connection, all within the timeout. `Err`
    /// starting with "refused" is an answer that a retry would not change.
    async fn send(&mut self, encoded: &Encoded) -> Result<(), String> {
        match tokio::time::timeout(self.timeout, self.exchange(encoded)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no answer from {} within {}",
                self.authority,
                humantime::format_duration(self.timeout)
            )),
        }
    }

    async fn exchange(&mut self, encoded: &Encoded) -> Result<(), String> {
        let stream = tokio::net::TcpStream::connect(&self.dial)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.authority))?;
        let _ = stream.set_nodelay(true);
        let req = self.request(encoded)?;
        let (status, body) = match &self.tls {
            Some(tls) => {
                let stream = super::tls::handshake(tls, &self.host, stream).await?;
                exchange_on(stream, req, &self.authority).await?
            }
            None => exchange_on(stream, req, &self.authority).await?,
        };
        if status.is_success() {
            return Ok(());
        }
        let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
        let text = text.trim();
        if status.is_client_error() && status.as_u16() != 429 {
            Err(format!("refused with {status}: {text}"))
        } else {
            Err(format!("answered {status}: {text}"))
        }
    }

    fn request(&self, encoded: &Encoded) -> Result<http::Request<Full<Bytes>>, String> {
        let path = self
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let mut req = http::Request::post(path).header("host", &self.authority);
        for (k, v) in &encoded.headers {
            req = req.header(*k, *v);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        req.header(
            "user-agent",
            concat!("loadfleet/", env!("CARGO_PKG_VERSION")),
        )
        .body(Full::new(encoded.body.clone()))
        .map_err(|e| format!("cannot make the request: {e}"))
    }
}

/// One HTTP/1.1 exchange on a connection: the status and the body.
async fn exchange_on<S>(
    io: S,
    req: http::Request<Full<Bytes>>,
    authority: &str,
) -> Result<(http::StatusCode, Bytes), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| format!("{authority}: {e}"))?;
    let conn = tokio::spawn(conn);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("{authority}: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    conn.abort();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(s: std::ops::Range<u64>) -> Arc<Frame> {
        Arc::new(Frame {
            run: 0,
            seconds: s,
            time_ms: 0,
            started_ms: 0,
            scenarios: Vec::new(),
            in_flight: 0,
            agents_alive: 0,
            agents: Vec::new(),
            last: false,
            verdicts: Vec::new(),
        })
    }

    /// A full queue drops its oldest frame and books its seconds; a frame
    /// taken on and then delivered is taken back out of the ledger, even
    /// when later frames were lost meanwhile.
    #[test]
    fn the_ledger_counts_exactly_the_seconds_never_delivered() {
        let shared = Arc::new(Shared {
            queue: Mutex::new(State {
                frames: VecDeque::new(),
                closed: false,
                ledger: Ledger::default(),
            }),
            wake: Notify::new(),
        });
        let q = Queue {
            shared: shared.clone(),
            capacity: 2,
        };
        let in_flight = frame(0..1);
        lock(&shared).ledger.book(&in_flight);
        for s in 1..5 {
            q.push(frame(s..s + 1));
        }
        let mut state = lock(&shared);
        assert_eq!(state.frames.len(), 2);
        unbook(&mut state.ledger, &in_flight);
        assert_eq!(state.ledger.lost_ranges(), vec![1..3]);
        assert_eq!(state.ledger.seconds_lost(), 2);
        assert_eq!(state.ledger.frames_lost, 2);
        assert_eq!(
            state.ledger.last_error.as_deref(),
            Some("the queue was full")
        );
    }
}
