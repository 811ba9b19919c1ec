//! The last figures of a run the agent left without its coordinator.
//!
//! While a run goes, [`Undelivered`] keeps every snapshot the coordinator
//! has not yet said it took in (`Heartbeat.snapshots_merged`). When the
//! agent stops on its own mid-run (the dead-man switch, a broken stream, a
//! freeze), its workers' last snapshots join them, and [`deliver`] dials
//! the coordinator again for up to `--deliver-grace`, opening a stream
//! with `Deliver` (its fleet index and the run's key) instead of a hello,
//! then the snapshots with their own sequence numbers and `Finished`. The
//! coordinator takes in those it lacks, so the agent's `sent` stays exact
//! and only what never arrives is counted unreported
//! (docs/design/fleet-protocol.md).

use std::collections::VecDeque;
use std::time::Duration;

use loadfleet_proto::bounds::{MAX_LATE_SNAPSHOTS, MAX_UNDELIVERED_BYTES};
use loadfleet_proto::v1::{self, agent_message, coordinator_message};
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use super::connect::{self, message, KeepAlive};
use super::{Phase, Session, SessionError};
use crate::config::AgentConfig;
use crate::worker::WorkerEvent;

/// The snapshots of the current run the coordinator has not confirmed,
/// oldest first, within [`MAX_LATE_SNAPSHOTS`] and
/// [`MAX_UNDELIVERED_BYTES`]: past either, the agent stops keeping them and
/// will deliver nothing, rather than grow while a coordinator stalls.
#[derive(Debug, Default)]
pub(super) struct Undelivered {
    kept: VecDeque<v1::Snapshot>,
    bytes: usize,
    overflowed: bool,
}

impl Undelivered {
    /// Keeps a copy of a snapshot about to be sent.
    pub(super) fn keep(&mut self, s: &v1::Snapshot) {
        if self.overflowed {
            return;
        }
        self.bytes += s.encoded_len();
        self.kept.push_back(s.clone());
        if self.bytes > MAX_UNDELIVERED_BYTES || self.kept.len() as u64 > MAX_LATE_SNAPSHOTS {
            tracing::warn!(
                "{} snapshot(s) ({} bytes) wait for the coordinator to take them in; keeping no more, so they cannot be delivered if it is lost",
                self.kept.len(),
                self.bytes
            );
            self.overflowed = true;
            self.kept = VecDeque::new();
            self.bytes = 0;
        }
    }

    /// The coordinator took in every snapshot up to `seq`.
    pub(super) fn merged(&mut self, seq: u64) {
        while self.kept.front().is_some_and(|s| s.seq <= seq) {
            if let Some(s) = self.kept.pop_front() {
                self.bytes = self.bytes.saturating_sub(s.encoded_len());
            }
        }
    }

    /// What is still to deliver, oldest first; `None` once it overflowed.
    pub(super) fn take(&mut self) -> Option<Vec<v1::Snapshot>> {
        if self.overflowed {
            return None;
        }
        self.bytes = 0;
        Some(std::mem::take(&mut self.kept).into())
    }
}

/// A run's last figures, ready to deliver.
#[derive(Debug)]
pub(super) struct LastFigures {
    /// `Welcome.agent_index`.
    pub(super) agent_index: u32,
    /// `Assignment.run_key`.
    pub(super) run_key: u64,
    /// Every snapshot not confirmed, in sequence.
    pub(super) snapshots: Vec<v1::Snapshot>,
    pub(super) finished: v1::Finished,
}

/// How a delivery ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Delivery {
    /// The coordinator confirmed every snapshot.
    Delivered,
    /// The coordinator refused them (the run is over, or they broke the
    /// protocol); trying again would not change its answer.
    Refused(String),
    /// Nobody took them within the grace period, or nothing listens at the
    /// coordinator's address any more.
    GaveUp(String),
}

/// How one attempt ended short of a confirmation.
enum Failed {
    Refused(String),
    /// Nothing listens at the coordinator's address: it is gone, and the
    /// run with it.
    Gone(String),
    Retry(String),
}

/// Tries to deliver `last` until the coordinator confirms or refuses it,
/// nothing listens any more, or `config.deliver_grace` has passed.
pub(super) async fn deliver(config: &AgentConfig, last: &LastFigures) -> Delivery {
    let deadline = Instant::now() + config.deliver_grace;
    let mut backoff = Duration::from_millis(200);
    let mut why = "no attempt fitted in --deliver-grace".to_string();
    while Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, attempt(config, last)).await {
            Err(_) => break,
            Ok(Ok(())) => return Delivery::Delivered,
            Ok(Err(Failed::Refused(r))) => return Delivery::Refused(r),
            Ok(Err(Failed::Gone(g))) => return Delivery::GaveUp(g),
            Ok(Err(Failed::Retry(r))) => {
                tracing::info!("could not deliver the last figures yet ({r}); trying again");
                why = r;
                tokio::time::sleep_until(deadline.min(Instant::now() + backoff)).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
    Delivery::GaveUp(format!(
        "no coordinator took them within --deliver-grace {} (last: {why})",
        humantime::format_duration(config.deliver_grace)
    ))
}

/// One connection: `Deliver`, the snapshots, `Finished`, then the
/// coordinator's confirmation.
async fn attempt(config: &AgentConfig, last: &LastFigures) -> Result<(), Failed> {
    let endpoint = connect::endpoint(config, KeepAlive::DELIVERY)
        .map_err(|e| Failed::Refused(e.to_string()))?;
    let channel = endpoint.connect().await.map_err(|e| {
        if refused(&e) {
            Failed::Gone(format!(
                "nothing listens at {} any more: the coordinator is gone",
                config.coordinator
            ))
        } else {
            Failed::Retry(format!("cannot reach {}: {e}", config.coordinator))
        }
    })?;
    let mut client = connect::client(channel);
    // Every message is queued before the call, and the queue's end
    // half-closes the request: the coordinator reads them whenever it runs.
    let (tx, rx) = mpsc::channel(last.snapshots.len() + 2);
    let first = message(agent_message::Kind::Deliver(v1::Deliver {
        protocol_version: config.protocol_version,
        agent_id: config.id.clone(),
        agent_index: last.agent_index,
        run_key: last.run_key,
    }));
    let all = std::iter::once(first)
        .chain(
            last.snapshots
                .iter()
                .map(|s| message(agent_message::Kind::Snapshot(s.clone()))),
        )
        .chain(std::iter::once(message(agent_message::Kind::Finished(
            last.finished,
        ))));
    for m in all {
        // The channel holds them all.
        let _ = tx.try_send(m);
    }
    drop(tx);
    let request = connect::call(config, ReceiverStream::new(rx))
        .map_err(|e| Failed::Refused(e.to_string()))?;
    let mut inbound = client
        .session(request)
        .await
        .map_err(status_failure)?
        .into_inner();
    loop {
        match inbound.message().await {
            Ok(Some(v1::CoordinatorMessage {
                kind: Some(coordinator_message::Kind::Heartbeat(hb)),
            })) if hb.snapshots_merged >= last.finished.snapshots => return Ok(()),
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(Failed::Retry(
                    "the coordinator ended the stream without confirming".into(),
                ))
            }
            Err(status) => return Err(status_failure(status)),
        }
    }
}

/// A refusal stands; a transport failure is worth another attempt.
fn status_failure(status: tonic::Status) -> Failed {
    let message = status.message().to_string();
    match status.code() {
        tonic::Code::Unauthenticated
        | tonic::Code::FailedPrecondition
        | tonic::Code::InvalidArgument
        | tonic::Code::NotFound
        | tonic::Code::ResourceExhausted => Failed::Refused(message),
        code => Failed::Retry(format!("{message} ({code:?})")),
    }
}

/// Was the connection refused (nothing listens at the address)?
fn refused(e: &tonic::transport::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = s.source();
    }
    false
}

/// How long the workers get to stop and hand over their last snapshots:
/// stopped, they leave at once, so this only bounds a wedged one.
const WIND_DOWN: Duration = Duration::from_secs(5);

impl Session<'_> {
    /// The run stops without its coordinator (`why`): its workers are
    /// stopped and their last snapshots kept with those not confirmed,
    /// then the last interval's CPU use and `Finished`, as at a run's end.
    /// `None` when no run was going, `--deliver-grace` is 0, or there is
    /// nothing whole to deliver (a worker that never stopped, snapshots past
    /// the bounds, a coordinator that gave no run key).
    pub(super) async fn wind_down(
        &mut self,
        why: &SessionError,
        events: &mut mpsc::UnboundedReceiver<WorkerEvent>,
    ) -> Option<LastFigures> {
        let grace = self.config.deliver_grace;
        if grace.is_zero() || !matches!(self.phase, Phase::Running(_)) {
            return None;
        }
        self.say(&format!(
            "lost the coordinator ({why}); delivering the run's last figures for up to {}",
            humantime::format_duration(grace)
        ));
        let Phase::Running(mut run) =
            std::mem::replace(&mut self.phase, Phase::Ready { last_run: None })
        else {
            return None;
        };
        run.stop.cancel();
        run.cut_short = true;
        let deadline = Instant::now() + WIND_DOWN;
        while run.workers_running > 0 {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(WorkerEvent::Snapshots(snaps))) => {
                    for mut s in snaps {
                        run.snapshots += 1;
                        s.seq = run.snapshots;
                        run.undelivered.keep(&s);
                    }
                }
                Ok(Some(WorkerEvent::Done { in_flight_at_end })) => {
                    run.in_flight_at_end += in_flight_at_end;
                    run.workers_running -= 1;
                }
                Ok(Some(WorkerEvent::Frozen(_))) => {}
                Ok(None) | Err(_) => {
                    tracing::warn!("a worker did not stop within {WIND_DOWN:?}: its last figures cannot be delivered whole");
                    return None;
                }
            }
        }
        for t in std::mem::take(&mut run.threads) {
            let _ = t.join();
        }
        let index = Instant::now()
            .saturating_duration_since(run.start)
            .as_nanos() as u64
            / run.interval.as_nanos().max(1) as u64;
        run.snapshots += 1;
        let cpu = v1::Snapshot {
            seq: run.snapshots,
            ..run.cpu.snapshot(index)
        };
        run.undelivered.keep(&cpu);
        let (Some(agent_index), true) = (self.fleet_index, run.run_key != 0) else {
            tracing::warn!(
                "the coordinator gave this run no key: its last figures cannot be delivered"
            );
            return None;
        };
        Some(LastFigures {
            agent_index,
            run_key: run.run_key,
            snapshots: run.undelivered.take()?,
            finished: v1::Finished {
                in_flight_at_end: run.in_flight_at_end,
                cut_short: true,
                snapshots: run.snapshots,
            },
        })
    }
}

/// Says how the delivery ended, on stderr like the session's other lines.
pub(super) fn report(config: &AgentConfig, last: &LastFigures, delivery: Delivery) {
    let me = &config.id;
    match delivery {
        Delivery::Delivered if !config.quiet => eprintln!(
            "loadfleet-agent {me}: delivered the run's last figures ({} snapshot(s)) after losing the coordinator",
            last.snapshots.len()
        ),
        Delivery::Delivered => {}
        Delivery::Refused(why) => eprintln!(
            "loadfleet-agent {me}: the coordinator refused the run's last figures: {why}"
        ),
        Delivery::GaveUp(why) => {
            eprintln!("loadfleet-agent {me}: could not deliver the run's last figures: {why}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(seq: u64) -> v1::Snapshot {
        v1::Snapshot {
            seq,
            intended: 1,
            ..Default::default()
        }
    }

    #[test]
    fn keeps_what_is_not_confirmed() {
        let mut u = Undelivered::default();
        for seq in 1..=5 {
            u.keep(&snapshot(seq));
        }
        u.merged(3);
        let left: Vec<u64> = u.take().unwrap().iter().map(|s| s.seq).collect();
        assert_eq!(left, vec![4, 5]);
        assert_eq!(u.take().unwrap(), Vec::new());
    }

    #[test]
    fn gives_up_past_the_bound() {
        let mut u = Undelivered::default();
        let mut big = snapshot(1);
        big.service_time = vec![0; MAX_UNDELIVERED_BYTES / 2];
        u.keep(&big);
        assert!(!u.overflowed);
        big.seq = 2;
        u.keep(&big);
        big.seq = 3;
        u.keep(&big);
        assert!(u.take().is_none(), "past the bound it keeps nothing");
        u.keep(&snapshot(4));
        assert!(u.take().is_none(), "and stays so for the run");
    }
}
