//! The subscription figures of one worker and scenario, bucketed into the
//! same intervals as its [`crate::recorder::Recorder`], so a flush of both
//! gives one snapshot per interval with its `sse` part attached.

use std::collections::{HashMap, VecDeque};

use hdrhistogram::Histogram;
use loadfleet_proto::bounds::{MAX_FANOUT_IDS, MAX_FANOUT_ID_BYTES, MAX_RECORDED_MICROS};
use loadfleet_proto::histogram::{encode, new_histogram};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::ErrorKind;

/// Receipts of one id in one interval: (subscribers, first ns, last ns).
type Receipts = (u64, u64, u64);

/// Everything one worker's subscribers did in one interval.
struct Interval {
    opened: u64,
    first_event: Histogram<u64>,
    events: u64,
    per_subscriber: Histogram<u64>,
    gap: Histogram<u64>,
    ended_by_server: u64,
    reconnects: u64,
    resumed: u64,
    latency: Histogram<u64>,
    negative_latency: Histogram<u64>,
    negative: u64,
    no_send_time: u64,
    duplicates: u64,
    comments: u64,
    stream_errors: Vec<(ErrorKind, u64)>,
    refused: Vec<(u16, u64)>,
    max_open: u64,
    fanout: HashMap<Box<[u8]>, Receipts>,
    fanout_untracked: u64,
}

impl Interval {
    fn new() -> Self {
        Interval {
            opened: 0,
            first_event: new_histogram(),
            events: 0,
            per_subscriber: new_histogram(),
            gap: new_histogram(),
            ended_by_server: 0,
            reconnects: 0,
            resumed: 0,
            latency: new_histogram(),
            negative_latency: new_histogram(),
            negative: 0,
            no_send_time: 0,
            duplicates: 0,
            comments: 0,
            stream_errors: Vec::new(),
            refused: Vec::new(),
            max_open: 0,
            fanout: HashMap::new(),
            fanout_untracked: 0,
        }
    }

    /// Empties the interval for reuse, keeping its allocations.
    fn reset(&mut self) {
        for h in [
            &mut self.first_event,
            &mut self.per_subscriber,
            &mut self.gap,
            &mut self.latency,
            &mut self.negative_latency,
        ] {
            h.reset();
        }
        for n in [
            &mut self.opened,
            &mut self.events,
            &mut self.ended_by_server,
            &mut self.reconnects,
            &mut self.resumed,
            &mut self.negative,
            &mut self.no_send_time,
            &mut self.duplicates,
            &mut self.comments,
            &mut self.max_open,
            &mut self.fanout_untracked,
        ] {
            *n = 0;
        }
        self.stream_errors.clear();
        self.refused.clear();
        self.fanout.clear();
    }

    fn to_figures(&self, open_streams: u64) -> v1::SseFigures {
        let mut fanout: Vec<v1::SseFanout> = self
            .fanout
            .iter()
            .map(|(id, &(subscribers, first_ns, last_ns))| v1::SseFanout {
                id: String::from_utf8_lossy(id).into_owned(),
                subscribers,
                first_ns,
                last_ns,
            })
            .collect();
        fanout.sort_by(|a, b| a.id.cmp(&b.id));
        v1::SseFigures {
            opened: self.opened,
            first_event: encode_or_empty(&self.first_event),
            events: self.events,
            events_per_subscriber: encode_or_empty(&self.per_subscriber),
            gap: encode_or_empty(&self.gap),
            ended_by_server: self.ended_by_server,
            reconnects: self.reconnects,
            resumed: self.resumed,
            open_streams,
            latency: encode_or_empty(&self.latency),
            negative_latency: encode_or_empty(&self.negative_latency),
            negative: self.negative,
            no_send_time: self.no_send_time,
            duplicates: self.duplicates,
            comments: self.comments,
            stream_errors: self
                .stream_errors
                .iter()
                .map(|&(k, n)| (k.as_str().to_owned(), n))
                .collect(),
            refused: self
                .refused
                .iter()
                .map(|&(code, n)| (u32::from(code), n))
                .collect(),
            max_open_streams: self.max_open.max(open_streams),
            fanout,
            fanout_untracked: self.fanout_untracked,
        }
    }
}

/// Adds one to `key`'s count in a short list.
fn bump<K: PartialEq + Copy>(list: &mut Vec<(K, u64)>, key: K) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, n)) => *n += 1,
        None => list.push((key, 1)),
    }
}

fn encode_or_empty(h: &Histogram<u64>) -> Vec<u8> {
    if h.is_empty() {
        return Vec::new();
    }
    encode(h).unwrap_or_else(|e| {
        tracing::error!("dropping a histogram that failed to encode: {e}");
        Vec::new()
    })
}

/// Records µs (or a count) into a histogram, kept within the bound every
/// histogram is checked against. Unlike latencies, counts of 0 are kept.
fn record(h: &mut Histogram<u64>, value: u64) {
    if let Err(e) = h.record(value.min(MAX_RECORDED_MICROS)) {
        tracing::error!("histogram rejected {value}: {e}");
    }
}

/// The subscription recorder of one worker for one scenario.
pub struct SseRecorder {
    base: u64,
    open: VecDeque<Interval>,
    spare: Vec<Interval>,
    /// Streams open now, the gauge of `open_streams`.
    open_streams: u64,
}

impl Default for SseRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseRecorder {
    pub fn new() -> Self {
        SseRecorder {
            base: 0,
            open: VecDeque::new(),
            spare: Vec::new(),
            open_streams: 0,
        }
    }

    fn at(&mut self, index: u64) -> &mut Interval {
        let offset = index.saturating_sub(self.base) as usize;
        while self.open.len() <= offset {
            let fresh = self.spare.pop().unwrap_or_else(Interval::new);
            self.open.push_back(fresh);
        }
        &mut self.open[offset]
    }

    /// A stream opened (a 2xx event-stream response); `first` for the
    /// subscriber's first connection.
    pub fn stream_opened(&mut self, interval: u64, first: bool) {
        self.open_streams += 1;
        let open = self.open_streams;
        let i = self.at(interval);
        if first {
            i.opened += 1;
        }
        i.max_open = i.max_open.max(open);
    }

    /// A stream closed, for whatever reason.
    pub fn stream_closed(&mut self, interval: u64, by_server: bool) {
        self.open_streams = self.open_streams.saturating_sub(1);
        if by_server {
            self.at(interval).ended_by_server += 1;
        }
    }

    /// A connection attempt after the first; `resumed` when it sent
    /// `Last-Event-ID`.
    pub fn reconnect(&mut self, interval: u64, resumed: bool) {
        let i = self.at(interval);
        i.reconnects += 1;
        if resumed {
            i.resumed += 1;
        }
    }

    /// An error on an open stream or a reconnect attempt.
    pub fn stream_error(&mut self, interval: u64, kind: ErrorKind) {
        bump(&mut self.at(interval).stream_errors, kind);
    }

    /// A reconnect answered without a stream.
    pub fn refused(&mut self, interval: u64, status: u16) {
        bump(&mut self.at(interval).refused, status);
    }

    pub fn comment(&mut self, interval: u64) {
        self.at(interval).comments += 1;
    }

    /// One event received; the optional figures are those that apply.
    pub fn event(&mut self, interval: u64, event: &Received<'_>) {
        let i = self.at(interval);
        i.events += 1;
        if let Some(first) = event.first_event_micros {
            record(&mut i.first_event, first);
        }
        if let Some(gap) = event.gap_micros {
            record(&mut i.gap, gap);
        }
        match event.latency_micros {
            Some(l) if l >= 0 => record(&mut i.latency, l.unsigned_abs()),
            Some(l) => {
                i.negative += 1;
                record(&mut i.negative_latency, l.unsigned_abs());
            }
            None => i.no_send_time += 1,
        }
        if event.duplicate {
            i.duplicates += 1;
        }
        if let Some((id, at_ns)) = event.fanout {
            if id.len() > MAX_FANOUT_ID_BYTES {
                i.fanout_untracked += 1;
            } else if let Some(r) = i.fanout.get_mut(id) {
                r.0 += 1;
                r.1 = r.1.min(at_ns);
                r.2 = r.2.max(at_ns);
            } else if i.fanout.len() < MAX_FANOUT_IDS {
                i.fanout.insert(id.into(), (1, at_ns, at_ns));
            } else {
                i.fanout_untracked += 1;
            }
        }
    }

    /// A subscriber ended after receiving `events` events in all.
    pub fn subscriber_done(&mut self, interval: u64, events: u64) {
        record(&mut self.at(interval).per_subscriber, events);
    }

    /// Closes every interval before `up_to`, as the scenario's recorder
    /// does with its own, so the two lists pair up one to one.
    pub fn flush(&mut self, up_to: u64) -> Vec<v1::SseFigures> {
        let mut out = Vec::new();
        while self.base < up_to {
            let mut interval = self.open.pop_front().unwrap_or_else(Interval::new);
            out.push(interval.to_figures(self.open_streams));
            interval.reset();
            self.spare.push(interval);
            self.base += 1;
        }
        out
    }
}

/// What the subscriber knows about one received event.
#[derive(Debug, Default)]
pub struct Received<'a> {
    /// Set on the subscriber's first event: from its intended instant.
    pub first_event_micros: Option<u64>,
    /// Since the previous event on the same stream.
    pub gap_micros: Option<u64>,
    /// Agent wall clock minus the event's send time; `None` without one.
    pub latency_micros: Option<i64>,
    pub duplicate: bool,
    /// The id to track for the fan-out spread, and when it came (ns after
    /// the common start).
    pub fanout: Option<(&'a [u8], u64)>,
}

/// Attaches each interval's subscription figures to its snapshot.
pub fn attach(snapshots: &mut [v1::Snapshot], figures: Vec<v1::SseFigures>) {
    for (snapshot, figures) in snapshots.iter_mut().zip(figures) {
        snapshot.sse = Some(figures);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::histogram::decode;

    #[test]
    fn figures_land_in_their_intervals() {
        let mut r = SseRecorder::new();
        r.stream_opened(0, true);
        r.event(
            0,
            &Received {
                first_event_micros: Some(1500),
                latency_micros: Some(-300),
                fanout: Some((b"7", 10)),
                ..Default::default()
            },
        );
        r.event(
            1,
            &Received {
                gap_micros: Some(1_000_000),
                latency_micros: Some(250),
                duplicate: true,
                fanout: Some((b"7", 40)),
                ..Default::default()
            },
        );
        r.stream_closed(1, true);
        r.reconnect(1, true);
        r.subscriber_done(1, 0);
        let figures = r.flush(2);
        assert_eq!(figures.len(), 2);
        assert_eq!(
            (figures[0].opened, figures[0].events, figures[0].negative),
            (1, 1, 1)
        );
        assert_eq!(figures[0].open_streams, 0);
        assert_eq!(figures[0].max_open_streams, 1);
        assert_eq!(decode(&figures[0].negative_latency).unwrap().max(), 300);
        assert_eq!(figures[1].duplicates, 1);
        assert_eq!((figures[1].reconnects, figures[1].resumed), (1, 1));
        assert_eq!(figures[1].ended_by_server, 1);
        // A subscriber with no event at all is recorded as 0.
        let per = decode(&figures[1].events_per_subscriber).unwrap();
        assert_eq!((per.len(), per.max()), (1, 0));
        assert_eq!(figures[1].fanout[0].first_ns, 40);
        // Recycled intervals start empty.
        r.event(2, &Received::default());
        let again = r.flush(3);
        assert_eq!((again[0].events, again[0].no_send_time), (1, 1));
        assert!(again[0].fanout.is_empty() && again[0].latency.is_empty());
    }
}
