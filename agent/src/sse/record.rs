//! The subscription figures of one worker and scenario, bucketed into the
//! same intervals as its [`crate::recorder::Recorder`], so a flush of both
//! gives one snapshot per interval with its `sse` part attached.

use std::collections::{HashMap, VecDeque};

use hdrhistogram::Histogram;
use loadfleet_proto::bounds::{MAX_FANOUT_IDS, MAX_FANOUT_ID_BYTES, MAX_RECORDED_MICROS};
use loadfleet_proto::figures::{Receipts, SseFigures};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::ErrorKind;

/// Everything one worker's subscribers did in one interval: the snapshot's
/// subscription figures, recorded in place, with the fan-out receipts kept
/// by the raw id bytes as the parser hands them over (made text once, at
/// the flush).
struct Interval {
    figures: SseFigures,
    max_open: u64,
    fanout: HashMap<Box<[u8]>, Receipts>,
}

impl Interval {
    fn new() -> Self {
        Interval {
            figures: SseFigures::default(),
            max_open: 0,
            fanout: HashMap::new(),
        }
    }

    /// Empties the interval for reuse, keeping its allocations.
    fn reset(&mut self) {
        self.figures.reset();
        self.max_open = 0;
        self.fanout.clear();
    }

    /// The wire form of the interval, fan-out receipts moved in.
    fn close(&mut self, open_streams: u64) -> v1::SseFigures {
        for (id, r) in &self.fanout {
            self.figures.fanout.add_id(&String::from_utf8_lossy(id), *r);
        }
        let mut f = v1::SseFigures {
            open_streams,
            max_open_streams: self.max_open.max(open_streams),
            ..Default::default()
        };
        self.figures.encode_into(&mut f);
        f
    }
}

/// Records µs (or a count) into a histogram, kept within the bound every
/// histogram is checked against. Unlike latencies, counts of 0 are kept.
fn record(h: &mut Histogram<u64>, value: u64) {
    if let Err(e) = h.record(value.min(MAX_RECORDED_MICROS)) {
        tracing::error!("histogram rejected {value}: {e}");
    }
}

/// The subscription recorder of one worker for one scenario.
pub(crate) struct SseRecorder {
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
    pub(crate) fn new() -> Self {
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
    pub(crate) fn stream_opened(&mut self, interval: u64, first: bool) {
        self.open_streams += 1;
        let open = self.open_streams;
        let i = self.at(interval);
        i.figures.opened += u64::from(first);
        i.max_open = i.max_open.max(open);
    }

    /// A stream closed, for whatever reason.
    pub(crate) fn stream_closed(&mut self, interval: u64, by_server: bool) {
        self.open_streams = self.open_streams.saturating_sub(1);
        if by_server {
            self.at(interval).figures.ended_by_server += 1;
        }
    }

    /// A connection attempt after the first; `resumed` when it sent
    /// `Last-Event-ID`.
    pub(crate) fn reconnect(&mut self, interval: u64, resumed: bool) {
        let f = &mut self.at(interval).figures;
        f.reconnects += 1;
        f.resumed += u64::from(resumed);
    }

    /// An error on an open stream or a reconnect attempt.
    pub(crate) fn stream_error(&mut self, interval: u64, kind: ErrorKind) {
        self.at(interval).figures.stream_errors.bump(kind);
    }

    /// A reconnect answered without a stream.
    pub(crate) fn refused(&mut self, interval: u64, status: u16) {
        self.at(interval).figures.refused.bump(status);
    }

    pub(crate) fn comment(&mut self, interval: u64) {
        self.at(interval).figures.comments += 1;
    }

    /// One event received; the optional figures are those that apply.
    pub(crate) fn event(&mut self, interval: u64, event: &Received<'_>) {
        let i = self.at(interval);
        let f = &mut i.figures;
        f.events += 1;
        if let Some(first) = event.first_event_micros {
            record(&mut f.first_event, first);
        }
        if let Some(gap) = event.gap_micros {
            record(&mut f.gap, gap);
        }
        match event.latency_micros {
            Some(l) if l >= 0 => record(&mut f.latency, l.unsigned_abs()),
            Some(l) => {
                f.negative += 1;
                record(&mut f.negative_latency, l.unsigned_abs());
            }
            None => f.no_send_time += 1,
        }
        f.duplicates += u64::from(event.duplicate);
        if let Some((id, at_ns)) = event.fanout {
            if id.len() > MAX_FANOUT_ID_BYTES {
                f.fanout_untracked += 1;
            } else if let Some(r) = i.fanout.get_mut(id) {
                r.subscribers += 1;
                r.first_ns = r.first_ns.min(at_ns);
                r.last_ns = r.last_ns.max(at_ns);
            } else if i.fanout.len() < MAX_FANOUT_IDS {
                let r = Receipts {
                    subscribers: 1,
                    first_ns: at_ns,
                    last_ns: at_ns,
                };
                i.fanout.insert(id.into(), r);
            } else {
                f.fanout_untracked += 1;
            }
        }
    }

    /// A subscriber ended after receiving `events` events in all.
    pub(crate) fn subscriber_done(&mut self, interval: u64, events: u64) {
        record(&mut self.at(interval).figures.events_per_subscriber, events);
    }

    /// Closes every interval before `up_to`, as the scenario's recorder
    /// does with its own, so the two lists pair up one to one.
    pub(crate) fn flush(&mut self, up_to: u64) -> Vec<v1::SseFigures> {
        let mut out = Vec::new();
        while self.base < up_to {
            let mut interval = self.open.pop_front().unwrap_or_else(Interval::new);
            out.push(interval.close(self.open_streams));
            interval.reset();
            self.spare.push(interval);
            self.base += 1;
        }
        out
    }
}

/// What the subscriber knows about one received event.
#[derive(Debug, Default)]
pub(crate) struct Received<'a> {
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
pub(crate) fn attach(snapshots: &mut [v1::Snapshot], figures: Vec<v1::SseFigures>) {
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
