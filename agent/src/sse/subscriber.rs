//! One subscriber: open a stream, read its events, and keep it open until
//! the subscriber is done, reconnecting as the SSE standard says (after the
//! reconnection time, which `retry:` sets, sending `Last-Event-ID`).
//!
//! A subscriber is one task holding one buffer of [`READ_BUF`] bytes (more
//! only while a response head or an event is larger) and one event parser,
//! both reused across events and reconnects.

use std::cell::RefCell;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use loadfleet_proto::vocab::ErrorKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::parser::{Item, Parser};
use super::record::{Received, SseRecorder};
use super::{SendTime, SseSpec};
use crate::client::stream_io_kind;
use crate::client::wire::{self, BodyDecoder, Head};
use crate::recorder::Outcome;

/// Read buffer of a stream: a few events' worth.
pub(crate) const READ_BUF: usize = 2048;

/// Opens connections for subscribers (the worker's dialer).
pub(crate) trait Connect {
    type Io: AsyncRead + AsyncWrite + Unpin;
    /// A connection to the target of `uri`, TLS included for https.
    fn connect(
        &self,
        uri: &::http::Uri,
    ) -> impl Future<Output = Result<Connected<Self::Io>, ErrorKind>>;
}

/// A connection just opened, with what opening it took.
pub(crate) struct Connected<Io> {
    pub io: Io,
    pub connect: Duration,
    pub tls: Option<Duration>,
}

/// Where a subscriber's first connection spent its time until the
/// response headers: its time to subscribe, split as a request's phases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Opening {
    pub connect: Option<Duration>,
    pub tls: Option<Duration>,
    /// From the request going out to the response headers.
    pub ttfb: Option<Duration>,
}

/// What every subscriber of one scenario on one worker shares.
pub(crate) struct Subscribers<'a, C> {
    pub spec: &'a SseSpec,
    pub connector: &'a C,
    pub recorder: &'a RefCell<SseRecorder>,
    /// The common start, which intervals and fan-out instants count from.
    pub common_start: Instant,
    pub interval_ns: u64,
    /// How long the first response head may take.
    pub timeout: Duration,
}

/// One subscriber's request, rendered once.
pub(crate) struct Subscription {
    pub uri: ::http::Uri,
    /// Request line and headers, without the final empty line (so that
    /// `Last-Event-ID` can follow on a reconnect).
    pub head: Vec<u8>,
}

impl Subscription {
    /// Renders a request for a held stream: always a GET with `Accept:
    /// text/event-stream`, the template's own headers kept.
    pub(crate) fn from_request<B>(request: &::http::Request<B>) -> Result<Self, ErrorKind> {
        let uri = request.uri().clone();
        let host = uri.authority().ok_or(ErrorKind::InvalidRequest)?.as_str();
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut head = Vec::with_capacity(128 + path.len());
        head.extend_from_slice(b"GET ");
        head.extend_from_slice(path.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        head.extend_from_slice(host.as_bytes());
        head.extend_from_slice(b"\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n");
        for (name, value) in request.headers() {
            if name == ::http::header::HOST || name == ::http::header::ACCEPT {
                continue;
            }
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        Ok(Subscription { uri, head })
    }
}

/// A response head read, and whether it opens an event stream.
struct Opened {
    head: Head,
    /// `Content-Type` is `text/event-stream`.
    event_stream: bool,
}

/// Whether a `Content-Type` value is `text/event-stream` (parameters
/// aside).
fn is_event_stream(value: &[u8]) -> bool {
    let media = value.split(|&b| b == b';').next().unwrap_or_default();
    media
        .trim_ascii()
        .eq_ignore_ascii_case(b"text/event-stream")
}

/// How one connection of a subscriber ended.
enum End {
    /// The subscriber is done (its hold is over, or the run stopped).
    Done,
    /// The server ended the body: reconnect.
    ServerEnded,
    /// A transport error: reconnect.
    Failed(ErrorKind),
    /// The server answered without a stream: the standard says fail, not
    /// reconnect.
    Refused,
}

/// What a subscriber carries from one connection to the next.
struct State {
    parser: Parser,
    buf: Vec<u8>,
    /// Events over the subscriber's whole life.
    events: u64,
    /// Highest numeric id seen, to tell a replay from a new event.
    last_numeric_id: Option<u64>,
    reconnect: Duration,
    first_event_seen: bool,
    /// The phases of the connection being opened.
    opening: Opening,
}

impl<C: Connect> Subscribers<'_, C> {
    fn interval(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.common_start).as_nanos() as u64 / self.interval_ns.max(1)
    }

    /// Runs one subscriber from `intended` until `until` (or a stop).
    /// `first` is told the outcome of the first connection (a status, or
    /// the error) and when it was known: the subscription's time to
    /// subscribe.
    pub(crate) async fn run(
        &self,
        subscription: &Subscription,
        intended: Instant,
        until: Instant,
        stop: &CancellationToken,
        first: impl FnOnce(Outcome, Instant, Opening),
    ) {
        let mut state = State {
            parser: Parser::new(),
            buf: Vec::with_capacity(READ_BUF),
            events: 0,
            last_numeric_id: None,
            reconnect: self.spec.reconnect,
            first_event_seen: false,
            opening: Opening::default(),
        };
        let mut first = Some(first);
        loop {
            let end = tokio::select! {
                end = self.connection(subscription, &mut state, intended, &mut first) => end,
                () = tokio::time::sleep_until(until) => End::Done,
                () = stop.cancelled() => End::Done,
            };
            let now = Instant::now();
            let interval = self.interval(now);
            match end {
                End::Done => {
                    // Gave up waiting for the first answer: that is its
                    // outcome, unless the run was stopped (then it is
                    // abandoned, as any request in flight).
                    if let Some(first) = first.take() {
                        if !stop.is_cancelled() {
                            first(Outcome::Error(ErrorKind::Timeout), now, state.opening);
                        }
                    }
                    break;
                }
                End::Refused => break,
                End::ServerEnded => {}
                End::Failed(kind) => {
                    if first.is_none() {
                        self.recorder.borrow_mut().stream_error(interval, kind);
                    }
                }
            }
            if let Some(first) = first.take() {
                // Never opened: the first attempt's failure is the outcome.
                if let End::Failed(kind) = end {
                    first(Outcome::Error(kind), now, state.opening);
                }
            }
            let again = now + state.reconnect;
            if again >= until {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(again) => {}
                () = stop.cancelled() => break,
            }
            self.recorder.borrow_mut().reconnect(
                self.interval(Instant::now()),
                !state.parser.last_id().is_empty(),
            );
        }
        self.recorder
            .borrow_mut()
            .subscriber_done(self.interval(Instant::now()), state.events);
    }

    /// One connection: open, subscribe, read events until it ends. The
    /// caller ends it (by dropping this future) when the subscriber is done.
    async fn connection(
        &self,
        subscription: &Subscription,
        state: &mut State,
        intended: Instant,
        first: &mut Option<impl FnOnce(Outcome, Instant, Opening)>,
    ) -> End {
        let opened = tokio::time::timeout(self.timeout, self.open(subscription, state)).await;
        let now = Instant::now();
        let (mut io, Opened { head, event_stream }) = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(kind)) => return End::Failed(kind),
            Err(_) => return End::Failed(ErrorKind::Timeout),
        };
        let interval = self.interval(now);
        let is_first = first.is_some();
        if let Some(first) = first.take() {
            first(Outcome::Status(head.status), now, state.opening);
        }
        if !(200..300).contains(&head.status) || !event_stream {
            if !is_first {
                self.recorder.borrow_mut().refused(interval, head.status);
            }
            return End::Refused;
        }
        self.recorder.borrow_mut().stream_opened(interval, is_first);
        let end = self
            .read_events(
                &mut io,
                state,
                BodyDecoder::new(head.framing),
                head.len,
                intended,
            )
            .await;
        let by_server = matches!(end, End::ServerEnded);
        self.recorder
            .borrow_mut()
            .stream_closed(self.interval(Instant::now()), by_server);
        end
    }

    /// Connects, sends the request and reads the response head into
    /// `state.buf` (which then holds the head and any body bytes after it).
    async fn open(
        &self,
        subscription: &Subscription,
        state: &mut State,
    ) -> Result<(C::Io, Opened), ErrorKind> {
        state.opening = Opening::default();
        let Connected {
            mut io,
            connect,
            tls,
        } = self.connector.connect(&subscription.uri).await?;
        state.opening.connect = Some(connect);
        state.opening.tls = tls;
        let sent = Instant::now();
        let last_id = state.parser.last_id();
        let mut request = Vec::with_capacity(subscription.head.len() + 24 + last_id.len());
        request.extend_from_slice(&subscription.head);
        if !last_id.is_empty() {
            request.extend_from_slice(b"Last-Event-ID: ");
            request.extend_from_slice(last_id);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        io.write_all(&request)
            .await
            .map_err(|e| stream_io_kind(&e))?;
        drop(request);
        state.buf.clear();
        loop {
            if state.buf.len() == state.buf.capacity() {
                state.buf.reserve(state.buf.capacity().max(READ_BUF));
            }
            let n = io
                .read_buf(&mut state.buf)
                .await
                .map_err(|e| stream_io_kind(&e))?;
            if n == 0 {
                return Err(ErrorKind::Reset);
            }
            let mut event_stream = false;
            let parsed = wire::parse_head(&state.buf, false, |h| {
                if h.name.eq_ignore_ascii_case("content-type") {
                    event_stream = is_event_stream(h.value);
                }
            });
            match parsed {
                Ok(Some(head)) => {
                    state.opening.ttfb = Some(sent.elapsed());
                    return Ok((io, Opened { head, event_stream }));
                }
                Ok(None) => {}
                Err(_) => return Err(ErrorKind::Protocol),
            }
        }
    }

    /// Reads the body of an open stream; `skip` bytes of `state.buf` are
    /// the response head.
    async fn read_events(
        &self,
        io: &mut C::Io,
        state: &mut State,
        mut body: BodyDecoder,
        skip: usize,
        intended: Instant,
    ) -> End {
        state.parser.reconnect();
        let mut last_event: Option<Instant> = None;
        let mut from = skip;
        loop {
            if from < state.buf.len() {
                let received = (Instant::now(), wall_ns());
                let chunk = std::mem::take(&mut state.buf);
                let result = self.consume(
                    &chunk[from..],
                    &mut body,
                    state,
                    received,
                    &mut last_event,
                    intended,
                );
                state.buf = chunk;
                if let Err(kind) = result {
                    return End::Failed(kind);
                }
            }
            if body.is_done() {
                return End::ServerEnded;
            }
            state.buf.clear();
            if state.buf.capacity() > 4 * READ_BUF {
                state.buf.shrink_to(READ_BUF);
            }
            from = 0;
            match io.read_buf(&mut state.buf).await {
                Ok(0) if body.ends_at_close() => return End::ServerEnded,
                Ok(0) => return End::Failed(ErrorKind::Reset),
                Ok(_) => {}
                Err(e) => return End::Failed(stream_io_kind(&e)),
            }
        }
    }

    /// Decodes one read's bytes and records every event in them.
    fn consume(
        &self,
        bytes: &[u8],
        body: &mut BodyDecoder,
        state: &mut State,
        (now, wall): (Instant, i128),
        last_event: &mut Option<Instant>,
        intended: Instant,
    ) -> Result<(), ErrorKind> {
        let interval = self.interval(now);
        let at_ns = now.saturating_duration_since(self.common_start).as_nanos() as u64;
        let mut recorder = self.recorder.borrow_mut();
        let mut too_large = false;
        let State {
            parser,
            events,
            last_numeric_id,
            reconnect,
            first_event_seen,
            ..
        } = state;
        body.feed(bytes, |data| {
            let fed = parser.feed(data, |item| match item {
                Item::Comment => recorder.comment(interval),
                Item::Retry(ms) => *reconnect = Duration::from_millis(ms),
                Item::Event(event) => {
                    *events += 1;
                    let numeric = event
                        .has_id
                        .then(|| std::str::from_utf8(event.id).ok()?.parse::<u64>().ok())
                        .flatten();
                    let duplicate = match (numeric, *last_numeric_id) {
                        (Some(id), Some(last)) if id <= last => true,
                        (Some(id), _) => {
                            *last_numeric_id = Some(id);
                            false
                        }
                        _ => false,
                    };
                    let tracked = event.has_id
                        && !event.id.is_empty()
                        && (self.spec.fanout_event.is_empty()
                            || self.spec.fanout_event.as_bytes() == event.kind);
                    let received = Received {
                        first_event_micros: (!std::mem::replace(first_event_seen, true))
                            .then(|| now.saturating_duration_since(intended).as_micros() as u64),
                        gap_micros: last_event
                            .replace(now)
                            .map(|prev| now.saturating_duration_since(prev).as_micros() as u64),
                        latency_micros: self
                            .spec
                            .send_time
                            .read(event.id, event.data)
                            .map(|sent_ns| ((wall - sent_ns) / 1000) as i64),
                        duplicate,
                        fanout: tracked.then_some((event.id, at_ns)),
                    };
                    recorder.event(interval, &received);
                }
            });
            too_large |= fed.is_err();
        })
        .map_err(|_| ErrorKind::Protocol)?;
        if too_large {
            return Err(ErrorKind::Protocol);
        }
        Ok(())
    }
}

/// The agent's wall clock, ns since the Unix epoch.
fn wall_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

impl SendTime {
    /// The send time in an event, ns since the Unix epoch.
    pub(crate) fn read(&self, id: &[u8], data: &[u8]) -> Option<i128> {
        match self {
            SendTime::None => None,
            SendTime::Id(unit) => unit.to_ns(parse_number(id)?),
            SendTime::Field { quoted, unit } => {
                let at = memchr::memmem::find(data, quoted)?;
                let rest = &data[at + quoted.len()..];
                let rest = rest
                    .trim_ascii_start()
                    .strip_prefix(b":")?
                    .trim_ascii_start();
                let len = rest
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .unwrap_or(rest.len());
                unit.to_ns(parse_number(&rest[..len])?)
            }
        }
    }
}

/// A JSON number (or a bare id): integers exactly, others as f64.
fn parse_number(bytes: &[u8]) -> Option<Number> {
    let text = std::str::from_utf8(bytes.trim_ascii()).ok()?;
    match text.parse::<i64>() {
        Ok(n) => Some(Number::Int(n)),
        Err(_) => text
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .map(Number::Float),
    }
}

/// A send time as written in the event.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
}

#[cfg(test)]
mod tests {
    use super::is_event_stream;

    #[test]
    fn an_event_stream_is_told_by_its_media_type_alone() {
        assert!(is_event_stream(b"text/event-stream"));
        assert!(is_event_stream(b" Text/Event-Stream ; charset=utf-8"));
        assert!(!is_event_stream(b"text/plain"));
        assert!(!is_event_stream(b"text/event-streams"));
        assert!(!is_event_stream(b""));
    }
}
