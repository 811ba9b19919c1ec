//! Server-Sent Events: `GET /sse` holds a stream, `POST /broadcast` sends one
//! event to every open stream, `GET /__stats/sse` says what was sent.
//!
//! The testbed is the ground truth of the SSE tests, so it counts every event
//! it hands to a connection (in total, per source address and per stream) and
//! stamps each event with its wall-clock send time, which the agent turns
//! into delivery latency. `--clock-skew` shifts that stamp, so a test can show
//! that a target clock running ahead gives negative latencies that are
//! counted rather than hidden.
//!
//! Event ids come from one server-wide counter: every periodic event gets its
//! own id, a broadcast gets one id that all its subscribers share (which is
//! what lets the agents measure the fan-out spread of that id). Ids thus rise
//! along every stream, and a client that reconnects with `Last-Event-ID`
//! continues the same sequence: the broadcasts it missed (kept in a short
//! replay buffer) are sent first, ticks resume with fresh, larger ids. A
//! client can therefore tell a duplicate (an id not above the last one) from
//! a gap.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::broadcast;
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// How the SSE endpoints behave, from the `--sse-*` and `--clock-skew` flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseConfig {
    /// Time between periodic events on each stream; zero: broadcasts only.
    pub interval: Duration,
    /// End every stream this long after it opened (a clean end of the
    /// chunked body), to exercise reconnects. `None`: streams stay open.
    pub drop_after: Option<Duration>,
    /// Sent as `retry:` (milliseconds) at the start of every stream.
    pub retry: Option<Duration>,
    /// Added to the wall clock in the send time the events carry, in
    /// microseconds (negative: the clock runs behind).
    pub clock_skew_us: i64,
}

impl Default for SseConfig {
    fn default() -> Self {
        SseConfig {
            interval: Duration::from_secs(1),
            drop_after: None,
            retry: None,
            clock_skew_us: 0,
        }
    }
}

/// Broadcasts a late reconnect can still be sent; older ones are gone, as
/// on any real server with a bounded history.
const REPLAY: usize = 256;
/// Broadcasts queued per stream before a slow stream starts losing them
/// (counted as `lagged`).
const CHANNEL: usize = 1024;

/// One broadcast, formatted once and shared by every stream.
#[derive(Debug, Clone)]
struct Broadcast {
    id: u64,
    frame: Bytes,
}

/// Counters of one source address.
#[derive(Debug, Default)]
struct PeerCounts {
    streams: AtomicU64,
    events: AtomicU64,
}

/// The state every stream shares: the id counter, the broadcast channel and
/// the counters behind `GET /__stats/sse`.
pub(crate) struct Hub {
    config: SseConfig,
    next_id: AtomicU64,
    sender: broadcast::Sender<Broadcast>,
    replay: Mutex<VecDeque<Broadcast>>,
    streams_opened: AtomicU64,
    streams_open: AtomicI64,
    streams_resumed: AtomicU64,
    streams_dropped: AtomicU64,
    events: AtomicU64,
    tick_events: AtomicU64,
    broadcast_events: AtomicU64,
    replayed_events: AtomicU64,
    broadcasts: AtomicU64,
    lagged: AtomicU64,
    peers: Mutex<BTreeMap<IpAddr, Arc<PeerCounts>>>,
    /// Events sent on every stream ever opened, by stream number.
    per_stream: Mutex<Vec<Arc<AtomicU64>>>,
}

impl Hub {
    pub(crate) fn new(config: SseConfig) -> Self {
        let (sender, _) = broadcast::channel(CHANNEL);
        Hub {
            config,
            next_id: AtomicU64::new(1),
            sender,
            replay: Mutex::new(VecDeque::with_capacity(REPLAY)),
            streams_opened: AtomicU64::new(0),
            streams_open: AtomicI64::new(0),
            streams_resumed: AtomicU64::new(0),
            streams_dropped: AtomicU64::new(0),
            events: AtomicU64::new(0),
            tick_events: AtomicU64::new(0),
            broadcast_events: AtomicU64::new(0),
            replayed_events: AtomicU64::new(0),
            broadcasts: AtomicU64::new(0),
            lagged: AtomicU64::new(0),
            peers: Mutex::new(BTreeMap::new()),
            per_stream: Mutex::new(Vec::new()),
        }
    }

    /// The send time events carry: the wall clock plus the configured skew,
    /// in microseconds since the Unix epoch.
    fn stamp_us(&self) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        now.saturating_add(self.config.clock_skew_us)
    }

    fn take_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends one event to every open stream; returns its id and how many
    /// streams it was queued for.
    pub(crate) fn broadcast(&self) -> (u64, usize) {
        let number = self.broadcasts.fetch_add(1, Ordering::Relaxed) + 1;
        let id = self.take_id();
        let data = format!("{{\"sent_us\":{},\"broadcast\":{number}}}", self.stamp_us());
        let event = Broadcast {
            id,
            frame: Bytes::from(format!("id: {id}\nevent: broadcast\ndata: {data}\n\n")),
        };
        {
            let mut replay = self.replay.lock().unwrap_or_else(|e| e.into_inner());
            if replay.len() == REPLAY {
                replay.pop_front();
            }
            replay.push_back(event.clone());
        }
        // No receiver is not an error: a broadcast to nobody reaches nobody.
        let receivers = self.sender.send(event).unwrap_or(0);
        (id, receivers)
    }

    /// Opens a stream for a client at `peer`, resuming after `last_event_id`
    /// when the client sent one.
    pub(crate) fn subscribe(self: &Arc<Self>, peer: IpAddr, last_event_id: Option<u64>) -> SseBody {
        let receiver = self.sender.subscribe();
        let peer = {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(peers.entry(peer).or_default())
        };
        peer.streams.fetch_add(1, Ordering::Relaxed);
        let sent = Arc::new(AtomicU64::new(0));
        let number = {
            let mut per_stream = self.per_stream.lock().unwrap_or_else(|e| e.into_inner());
            per_stream.push(Arc::clone(&sent));
            per_stream.len()
        };
        self.streams_opened.fetch_add(1, Ordering::Relaxed);
        self.streams_open.fetch_add(1, Ordering::Relaxed);

        let mut preamble = format!(": stream {number}\n");
        if let Some(retry) = self.config.retry {
            preamble.push_str(&format!("retry: {}\n", retry.as_millis()));
        }
        preamble.push('\n');
        let mut pending = VecDeque::new();
        if let Some(last) = last_event_id {
            self.streams_resumed.fetch_add(1, Ordering::Relaxed);
            let replay = self.replay.lock().unwrap_or_else(|e| e.into_inner());
            pending.extend(
                replay
                    .iter()
                    .filter(|b| b.id > last)
                    .map(|b| b.frame.clone()),
            );
        }
        let ticker = (!self.config.interval.is_zero()).then(|| {
            let mut ticker = tokio::time::interval_at(
                Instant::now() + self.config.interval,
                self.config.interval,
            );
            // A stalled stream sends one event late, not a burst of them.
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticker
        });
        let stream = Stream {
            hub: Arc::clone(self),
            peer,
            sent,
            receiver,
            ticker,
            end: self.config.drop_after.map(|after| Instant::now() + after),
            preamble: Some(Bytes::from(preamble)),
            pending,
            seq: 0,
        };
        SseBody {
            next: Some(Box::pin(stream.next_frame())),
        }
    }

    /// `GET /__stats/sse`: one `name value` per line, then one line per
    /// source address, then the per-stream event counts as min/p50/max.
    pub(crate) fn stats(&self) -> String {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut text = String::new();
        let mut line = |name: &str, value: String| {
            text.push_str(name);
            text.push(' ');
            text.push_str(&value);
            text.push('\n');
        };
        line("streams_opened", load(&self.streams_opened).to_string());
        line(
            "streams_open",
            self.streams_open.load(Ordering::Relaxed).to_string(),
        );
        line("streams_resumed", load(&self.streams_resumed).to_string());
        line("streams_dropped", load(&self.streams_dropped).to_string());
        line("events", load(&self.events).to_string());
        line("tick_events", load(&self.tick_events).to_string());
        line("broadcast_events", load(&self.broadcast_events).to_string());
        line("replayed_events", load(&self.replayed_events).to_string());
        line("broadcasts", load(&self.broadcasts).to_string());
        line("lagged", load(&self.lagged).to_string());
        let mut counts: Vec<u64> = {
            let per_stream = self.per_stream.lock().unwrap_or_else(|e| e.into_inner());
            per_stream.iter().map(|n| load(n)).collect()
        };
        counts.sort_unstable();
        if let (Some(min), Some(max)) = (counts.first(), counts.last()) {
            let p50 = counts[(counts.len() - 1) / 2];
            line("stream_events", format!("{min} {p50} {max}"));
        }
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        for (ip, peer) in peers.iter() {
            line(
                "peer",
                format!("{ip} {} {}", load(&peer.streams), load(&peer.events)),
            );
        }
        text
    }
}

/// What one open stream needs to produce its next event.
struct Stream {
    hub: Arc<Hub>,
    peer: Arc<PeerCounts>,
    sent: Arc<AtomicU64>,
    receiver: broadcast::Receiver<Broadcast>,
    ticker: Option<Interval>,
    end: Option<Instant>,
    preamble: Option<Bytes>,
    /// Missed broadcasts to send before anything new.
    pending: VecDeque<Bytes>,
    /// Periodic events sent on this stream.
    seq: u64,
}

/// Which counter an event belongs to.
enum Kind {
    Tick,
    Broadcast,
    Replayed,
}

impl Stream {
    /// Waits for the next thing to send; `None` ends the stream.
    async fn next_frame(mut self) -> Option<(Bytes, Stream)> {
        if let Some(preamble) = self.preamble.take() {
            return Some((preamble, self));
        }
        if let Some(frame) = self.pending.pop_front() {
            return Some(self.count(frame, Kind::Replayed));
        }
        loop {
            let hub = Arc::clone(&self.hub);
            let end = self.end;
            let ticker = &mut self.ticker;
            let tick = async move {
                match ticker {
                    Some(ticker) => ticker.tick().await,
                    None => std::future::pending().await,
                }
            };
            let end = async move {
                match end {
                    Some(end) => tokio::time::sleep_until(end).await,
                    None => std::future::pending().await,
                }
            };
            let received = self.receiver.recv();
            tokio::select! {
                biased;
                () = end => {
                    hub.streams_dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                received = received => match received {
                    Ok(event) => return Some(self.count(event.frame, Kind::Broadcast)),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        hub.lagged.fetch_add(missed, Ordering::Relaxed);
                    }
                    // The hub lives as long as the server: never closed.
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = tick => {
                    self.seq += 1;
                    let id = self.hub.take_id();
                    let frame = Bytes::from(format!(
                        "id: {id}\nevent: tick\ndata: {{\"sent_us\":{},\"seq\":{}}}\n\n",
                        self.hub.stamp_us(),
                        self.seq
                    ));
                    return Some(self.count(frame, Kind::Tick));
                }
            }
        }
    }

    fn count(self, frame: Bytes, kind: Kind) -> (Bytes, Stream) {
        let hub = &self.hub;
        hub.events.fetch_add(1, Ordering::Relaxed);
        match kind {
            Kind::Tick => &hub.tick_events,
            Kind::Broadcast => &hub.broadcast_events,
            Kind::Replayed => &hub.replayed_events,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.peer.events.fetch_add(1, Ordering::Relaxed);
        self.sent.fetch_add(1, Ordering::Relaxed);
        (frame, self)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Only the final owner is dropped without being moved on, but every
        // move goes through `next_frame`, which consumes and returns it, so
        // this runs once per stream.
        self.hub.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

type NextFrame = Pin<Box<dyn Future<Output = Option<(Bytes, Stream)>> + Send>>;

/// The response body of one stream: the pending wait for its next event.
pub(crate) struct SseBody {
    next: Option<NextFrame>,
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Some(next) = self.next.as_mut() else {
            return Poll::Ready(None);
        };
        match next.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.next = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some((frame, stream))) => {
                self.next = Some(Box::pin(stream.next_frame()));
                Poll::Ready(Some(Ok(Frame::data(frame))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.next.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Reads `Last-Event-ID` as the id the stream resumes after; ids the testbed
/// did not give out (not a number) are treated as absent.
pub(crate) fn last_event_id(value: Option<&hyper::header::HeaderValue>) -> Option<u64> {
    value?.to_str().ok()?.trim().parse().ok()
}
