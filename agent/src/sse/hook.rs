//! What a worker holds for one subscription scenario, and the one call its
//! scheduler makes per subscriber. The worker keeps its own accounting
//! (sent, in flight, the first answer as the subscriber's outcome); this
//! runs the stream and records what only subscriptions have.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::v1;
use loadfleet_proto::vocab::ErrorKind;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::record::{attach, SseRecorder};
use super::subscriber::{Connect, Connected, Opening, Subscribers, Subscription};
use super::SseSpec;
use crate::client::{Dialer, Io};
use crate::recorder::Outcome;

/// One worker's part of one subscription scenario.
pub(crate) struct Hook {
    spec: Arc<SseSpec>,
    recorder: RefCell<SseRecorder>,
    dialer: Dialer,
    /// How long the first response head may take.
    timeout: Duration,
    common_start: Instant,
    interval_ns: u64,
}

impl Hook {
    /// Connections go out as the worker's `client` says (source addresses,
    /// trust, the timeout for the first answer), but offer only HTTP/1.1
    /// over ALPN, whatever the other transports offer: that is what a held
    /// stream speaks.
    pub(crate) fn new(
        spec: Arc<SseSpec>,
        client: &crate::client::ClientConfig,
        common_start: Instant,
        interval_ns: u64,
    ) -> Self {
        let mut tls = (*client.tls).clone();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Hook {
            spec,
            recorder: RefCell::new(SseRecorder::new()),
            dialer: Dialer::new(client.source, Arc::new(tls))
                .with_more_sources(client.more_sources.clone()),
            timeout: client.timeout,
            common_start,
            interval_ns,
        }
    }

    /// The end of a subscriber's hold: `hold` after its intended instant,
    /// or the end of the scenario's schedule when there is no hold.
    pub(crate) fn until(&self, intended: Instant, schedule_end: Instant) -> Instant {
        if self.spec.hold.is_zero() {
            schedule_end
        } else {
            intended + self.spec.hold
        }
    }

    /// Runs one subscriber until `until` (or a stop). `first` gets the
    /// outcome of its first connection, when that was known, and the
    /// connection's phases: the subscriber's time to subscribe.
    pub(crate) async fn subscribe<B>(
        &self,
        request: &http::Request<B>,
        intended: Instant,
        until: Instant,
        stop: &CancellationToken,
        first: impl FnOnce(Outcome, Instant, Opening),
    ) {
        let subscription = match Subscription::from_request(request) {
            Ok(s) => s,
            Err(kind) => {
                first(Outcome::Error(kind), Instant::now(), Opening::default());
                return;
            }
        };
        let subscribers = Subscribers {
            spec: &self.spec,
            connector: &self.dialer,
            recorder: &self.recorder,
            common_start: self.common_start,
            interval_ns: self.interval_ns,
            timeout: self.timeout,
        };
        subscribers
            .run(&subscription, intended, until, stop, first)
            .await;
    }

    /// Attaches the subscription figures of the intervals before `up_to`
    /// to their snapshots (which the scenario's recorder just closed).
    pub(crate) fn attach(&self, snapshots: &mut [v1::Snapshot], up_to: u64) {
        let figures = self.recorder.borrow_mut().flush(up_to);
        attach(snapshots, figures);
    }
}

impl Connect for Dialer {
    type Io = Io;

    async fn connect(&self, uri: &http::Uri) -> Result<Connected<Io>, ErrorKind> {
        let dialed = self.dial(uri).await.map_err(|e| e.kind())?;
        if dialed.alpn.as_deref().is_some_and(|p| p != b"http/1.1") {
            return Err(ErrorKind::Protocol);
        }
        Ok(Connected {
            io: dialed.io,
            connect: dialed.connect,
            tls: dialed.tls,
        })
    }
}
