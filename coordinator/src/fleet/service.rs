//! The thin tonic service: authenticate, read the hello (or a lost agent's
//! `Deliver`), then hand the stream to the fleet actor. All run state lives in the actor; this file
//! only translates between gRPC and the actor's events.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::v1::{self, agent_message, control_server::Control};
use loadfleet_proto::{PROTOCOL_HEADER, PROTOCOL_VERSION};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Loss;

/// Messages to one agent; a `Status` ends its stream with that error.
pub type AgentTx = mpsc::Sender<Result<v1::CoordinatorMessage, Status>>;

/// When an agent's last message arrived, stamped by the task reading its
/// stream the moment it reads one, so the fleet judges silence by arrival,
/// never by when the actor got round to the message.
#[derive(Debug)]
pub struct LastSeen {
    epoch: tokio::time::Instant,
    ns: AtomicU64,
}

impl LastSeen {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: tokio::time::Instant::now(),
            ns: AtomicU64::new(0),
        })
    }

    /// A message arrived now.
    pub fn stamp(&self) {
        let ns = self.epoch.elapsed().as_nanos() as u64;
        self.ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Time since the last message (or since the hello, before any).
    pub fn silence(&self) -> Duration {
        let last = Duration::from_nanos(self.ns.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

/// What the service tells the fleet actor.
pub enum FleetEvent {
    /// An authenticated agent said hello and wants a place in the fleet.
    Join {
        hello: v1::Hello,
        peer: Option<SocketAddr>,
        tx: AgentTx,
        /// Stamped by the stream's reader on every message.
        seen: Arc<LastSeen>,
        reply: oneshot::Sender<Result<u32, Status>>,
    },
    /// An agent the fleet lost comes back on a new stream to deliver its
    /// last figures (`Deliver`); the reply is its index, or why not.
    Deliver {
        deliver: v1::Deliver,
        peer: Option<SocketAddr>,
        tx: AgentTx,
        seen: Arc<LastSeen>,
        reply: oneshot::Sender<Result<u32, Status>>,
    },
    /// A message from a joined agent, stamped on arrival so clock probes
    /// are not skewed by time spent queued for the actor.
    Message {
        agent: u32,
        /// Boxed: a snapshot makes it many times larger than the others.
        msg: Box<v1::AgentMessage>,
        received: tokio::time::Instant,
    },
    /// The agent's stream ended (cleanly or not).
    Gone { agent: u32, loss: Loss },
    /// A would-be agent was turned away before joining (a wrong token, a
    /// protocol it does not speak): the fleet tells the console and, when
    /// agents then fail to join, says why.
    Refused {
        peer: Option<SocketAddr>,
        /// What the agent was told.
        why: String,
    },
}

pub struct ControlService {
    token: String,
    events: mpsc::Sender<FleetEvent>,
}

impl ControlService {
    pub fn new(token: String, events: mpsc::Sender<FleetEvent>) -> Self {
        Self { token, events }
    }

    /// Tells the fleet an agent from `peer` was refused with `status`
    /// (logged instead when the fleet is gone), and returns the status
    /// for the agent.
    async fn refuse(&self, peer: Option<SocketAddr>, status: Status) -> Status {
        let why = status.message().to_string();
        if self
            .events
            .send(FleetEvent::Refused { peer, why })
            .await
            .is_err()
        {
            let from = peer.map_or_else(|| "an unknown address".to_string(), |a| a.to_string());
            tracing::warn!("refused an agent from {from}: {}", status.message());
        }
        status
    }
}

/// Compares without an early exit, so the time taken does not reveal how
/// much of a guessed token was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn check_metadata(meta: &tonic::metadata::MetadataMap, token: &str) -> Result<(), Status> {
    let version = meta
        .get(PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok());
    match version {
        Some(v) if v == PROTOCOL_VERSION => {}
        Some(v) => {
            return Err(Status::failed_precondition(format!(
                "agent speaks protocol version {v} but this coordinator speaks {PROTOCOL_VERSION}; run the same loadfleet release on both"
            )))
        }
        None => {
            return Err(Status::failed_precondition(format!(
                "missing {PROTOCOL_HEADER} metadata; is this a loadfleet agent?"
            )))
        }
    }
    let presented = meta
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !same_secret(presented.as_bytes(), token.as_bytes()) {
        return Err(Status::unauthenticated(
            "wrong or missing token; start the agent with the coordinator's --token",
        ));
    }
    Ok(())
}

#[tonic::async_trait]
impl Control for ControlService {
    type SessionStream = ReceiverStream<Result<v1::CoordinatorMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let peer = request.remote_addr();
        if let Err(refused) = check_metadata(request.metadata(), &self.token) {
            return Err(self.refuse(peer, refused).await);
        }
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no hello within 10s"))??;
        let hello = match first.and_then(|m| m.kind) {
            Some(agent_message::Kind::Hello(h)) => h,
            Some(agent_message::Kind::Deliver(d)) => return self.deliver(d, peer, inbound).await,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message must be a hello (or a lost agent's delivery)",
                ))
            }
        };
        // Before anything of the hello is stored or logged whole: a hostile
        // agent could claim a megabyte of id or 2^32 CPUs.
        if let Err(e) = loadfleet_proto::bounds::check_hello(&hello) {
            let status =
                Status::invalid_argument(format!("hello refused, protocol violation: {e}"));
            return Err(self.refuse(peer, status).await);
        }
        if let Err(status) = check_version(hello.protocol_version) {
            return Err(self.refuse(peer, status).await);
        }
        self.hand_to_fleet(1024, inbound, |tx, seen, reply| FleetEvent::Join {
            hello,
            peer,
            tx,
            seen,
            reply,
        })
        .await
    }
}

fn check_version(version: u32) -> Result<(), Status> {
    if version == PROTOCOL_VERSION {
        return Ok(());
    }
    Err(Status::failed_precondition(format!(
        "agent speaks protocol version {version} but this coordinator speaks {PROTOCOL_VERSION}; run the same loadfleet release on both"
    )))
}

impl ControlService {
    /// A lost agent's stream that delivers its last figures: checked, then
    /// handed to the fleet, which says whether it awaits them; what follows
    /// on the stream is forwarded like any agent's messages.
    async fn deliver(
        &self,
        deliver: v1::Deliver,
        peer: Option<SocketAddr>,
        inbound: Streaming<v1::AgentMessage>,
    ) -> Result<Response<ReceiverStream<Result<v1::CoordinatorMessage, Status>>>, Status> {
        let from = peer.map_or_else(|| "an unknown address".to_string(), |a| a.to_string());
        if let Err(e) = loadfleet_proto::bounds::check_deliver(&deliver) {
            tracing::warn!("refused a delivery from {from}: it breaks the protocol: {e}");
            return Err(Status::invalid_argument(format!(
                "delivery refused, protocol violation: {e}"
            )));
        }
        if let Err(status) = check_version(deliver.protocol_version) {
            return Err(self.refuse(peer, status).await);
        }
        self.hand_to_fleet(16, inbound, |tx, seen, reply| FleetEvent::Deliver {
            deliver,
            peer,
            tx,
            seen,
            reply,
        })
        .await
    }

    /// Hands a checked stream to the fleet as the event `event` makes, with
    /// an outbox of `capacity` messages; once the fleet names the agent,
    /// what follows on the stream is forwarded as its messages.
    async fn hand_to_fleet(
        &self,
        capacity: usize,
        inbound: Streaming<v1::AgentMessage>,
        event: impl FnOnce(AgentTx, Arc<LastSeen>, oneshot::Sender<Result<u32, Status>>) -> FleetEvent,
    ) -> Result<Response<ReceiverStream<Result<v1::CoordinatorMessage, Status>>>, Status> {
        let gone = || Status::unavailable("the coordinator is shutting down");
        let (tx, rx) = mpsc::channel(capacity);
        let (reply, answered) = oneshot::channel();
        let seen = LastSeen::new();
        self.events
            .send(event(tx, seen.clone(), reply))
            .await
            .map_err(|_| gone())?;
        let agent = answered.await.map_err(|_| gone())??;
        self.forward(agent, seen, inbound);
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    /// Forwards agent `agent`'s messages to the fleet as they arrive, then
    /// the end of its stream.
    fn forward(&self, agent: u32, seen: Arc<LastSeen>, mut inbound: Streaming<v1::AgentMessage>) {
        let events = self.events.clone();
        tokio::spawn(async move {
            let loss = loop {
                match inbound.message().await {
                    Ok(Some(msg)) => {
                        seen.stamp();
                        // A heartbeat only says the agent is there, which
                        // the stamp just recorded: it never waits in the
                        // actor's queue behind snapshots.
                        if matches!(msg.kind, Some(agent_message::Kind::Heartbeat(_))) {
                            continue;
                        }
                        let received = tokio::time::Instant::now();
                        let ev = FleetEvent::Message {
                            agent,
                            msg: Box::new(msg),
                            received,
                        };
                        if events.send(ev).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => break Loss::StreamClosed,
                    Err(status) => break Loss::StreamFailed(status.message().to_string()),
                }
            };
            let _ = events.send(FleetEvent::Gone { agent, loss }).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(version: Option<&str>, auth: Option<&str>) -> tonic::metadata::MetadataMap {
        let mut m = tonic::metadata::MetadataMap::new();
        if let Some(v) = version {
            m.insert(PROTOCOL_HEADER, v.parse().unwrap());
        }
        if let Some(a) = auth {
            m.insert("authorization", a.parse().unwrap());
        }
        m
    }

    #[test]
    fn metadata_checks() {
        let v = PROTOCOL_VERSION.to_string();
        assert!(check_metadata(&meta(Some(&v), Some("Bearer s3cret")), "s3cret").is_ok());
        let e = check_metadata(&meta(Some(&v), Some("Bearer nope")), "s3cret").unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let e = check_metadata(&meta(Some("99"), Some("Bearer s3cret")), "s3cret").unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains("99"));
        assert!(check_metadata(&meta(None, Some("Bearer s3cret")), "s3cret").is_err());
    }
}
