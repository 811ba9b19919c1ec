//! How a session ends: well ([`SessionEnd`]) or not ([`SessionError`]),
//! each with its exit status, and the reading of a refused call into an
//! error that says what to fix.

use std::time::Duration;

use loadfleet_proto::bounds::BoundsError;

use crate::assignment::{AssignmentError, Refusal};
use crate::exit;

/// How a session ended, for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// The schedule ran and every snapshot was delivered.
    Finished,
    /// The coordinator told us to stop early; what we measured was delivered.
    Stopped,
}

impl SessionEnd {
    /// The agent's exit status for this end (see [`crate::exit`]).
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            SessionEnd::Finished => exit::FINISHED,
            SessionEnd::Stopped => exit::STOPPED,
        }
    }
}

/// Why a session ended without its runs finishing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// `--coordinator` is not a URL the agent can dial.
    #[error(
        "--coordinator {url:?} is not a valid URL (expected http://HOST:PORT or https://HOST:PORT)"
    )]
    CoordinatorUrl {
        /// The flag's value.
        url: String,
        /// The parser's complaint.
        #[source]
        source: tonic::transport::Error,
    },
    /// TLS to an https:// coordinator could not be set up.
    #[error("--coordinator: cannot set up TLS")]
    CoordinatorTls(#[source] tonic::transport::Error),
    /// The token cannot travel in an HTTP header.
    #[error("--token contains characters that cannot go in a header")]
    Token,
    /// The coordinator did not answer within `--connect-timeout`.
    #[error("cannot reach the coordinator at {url} within {timeout:?}")]
    Unreachable {
        /// The coordinator's address.
        url: String,
        /// How long the agent kept trying.
        timeout: Duration,
        /// The last attempt's failure.
        #[source]
        source: tonic::transport::Error,
    },
    /// The coordinator refused our token.
    #[error("the coordinator refused this agent: {0} (check --token / LOADFLEET_TOKEN)")]
    BadToken(String),
    /// The coordinator refused this agent for another reason, e.g. a
    /// different protocol version.
    #[error("the coordinator refused this agent: {0}")]
    Refused(String),
    /// An http:// dial was answered with something other than plain HTTP/2,
    /// which is what a TLS coordinator (`--tls-cert`) sends back.
    #[error("the coordinator at {url} does not answer in plain HTTP/2 ({message}); if it runs with --tls-cert, the coordinator speaks TLS: use https://{rest}", rest = url.trim_start_matches("http://"))]
    PlainToTls {
        /// The --coordinator value.
        url: String,
        /// The transport's complaint.
        message: String,
    },
    /// An https:// coordinator hung up right after the TLS handshake, which
    /// is how one running mutual TLS (`--client-ca`) refuses a client
    /// certificate that is missing or signed by another CA.
    #[error("the coordinator at {url} hung up on this agent ({message}); if it runs with --client-ca (mutual TLS), it refused this agent's client certificate: give --tls-cert/--tls-key with a certificate signed by that CA")]
    ClientCertRefused {
        /// The --coordinator value.
        url: String,
        /// The transport's complaint.
        message: String,
    },
    /// The coordinator already has all the agents it expects.
    #[error("the coordinator has no room for this agent: {0}")]
    NoRoom(String),
    /// The control stream failed with another gRPC status.
    #[error("control stream failed: {message} ({code:?})")]
    Stream {
        /// The gRPC status code.
        code: tonic::Code,
        /// The coordinator's (or the transport's) message.
        message: String,
    },
    /// The coordinator closed the stream before or during a run.
    #[error("the coordinator closed the control stream")]
    Closed,
    /// Our half of the stream is gone, so nothing more can be said.
    #[error("the control stream closed")]
    OutboundClosed,
    /// Dead-man switch: nothing heard from the coordinator for too long.
    #[error("no word from the coordinator for {0:?}; stopped sending (dead-man switch)")]
    Silent(Duration),
    /// Dead-man switch: the coordinator stopped reading our snapshots.
    #[error("the coordinator stopped reading for {0:?}; stopped sending (dead-man switch)")]
    NotReading(Duration),
    /// A second assignment arrived while one was running.
    #[error("the coordinator sent an assignment during a run")]
    AssignmentDuringRun,
    /// A hand-over names agents outside the run; carrying it out could
    /// send arrivals twice or not at all.
    #[error("the coordinator sent a hand-over this agent cannot carry out: {0}")]
    BadTakeover(String),
    /// The process was frozen (SIGSTOP, a paused VM) long enough that the
    /// coordinator may have given its share to others: it leaves the run.
    #[error("this agent was frozen for {0:?} (SIGSTOP? a paused VM?); it fired nothing more and left the run, which counts it lost")]
    Frozen(Duration),
    /// The assignment aims outside `--allow-target` or breaks the plan
    /// bounds; the refusal was sent to the coordinator and nothing was
    /// fired.
    #[error("refused the assignment")]
    AssignmentRefused(#[source] Refusal),
    /// The welcome asks for a dead-man window above the bound; the refusal
    /// was sent to the coordinator.
    #[error("refused the coordinator's welcome")]
    WelcomeRefused(#[source] BoundsError),
    /// The assignment is malformed; nothing was fired.
    #[error("the assignment cannot be carried out")]
    BadAssignment(#[source] AssignmentError),
    /// A worker thread or its runtime could not be started.
    #[error("cannot start a worker")]
    Spawn(#[source] std::io::Error),
}

impl SessionError {
    /// The agent lost its coordinator (silence, a broken or closed stream,
    /// a freeze): a run it was carrying out stopped without the
    /// coordinator's word, and its last figures are worth delivering.
    pub(crate) fn lost_contact(&self) -> bool {
        matches!(
            self,
            SessionError::Silent(_)
                | SessionError::NotReading(_)
                | SessionError::Frozen(_)
                | SessionError::Closed
                | SessionError::OutboundClosed
                | SessionError::Stream { .. }
        )
    }

    /// The agent's exit status for this failure (see [`crate::exit`]).
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            SessionError::CoordinatorUrl { .. }
            | SessionError::CoordinatorTls(_)
            | SessionError::Token
            | SessionError::PlainToTls { .. }
            | SessionError::ClientCertRefused { .. } => exit::BAD_FLAGS,
            SessionError::Unreachable { .. }
            | SessionError::BadToken(_)
            | SessionError::Refused(_)
            | SessionError::NoRoom(_)
            | SessionError::Stream { .. }
            | SessionError::Closed
            | SessionError::OutboundClosed
            | SessionError::Silent(_)
            | SessionError::NotReading(_)
            | SessionError::AssignmentDuringRun
            | SessionError::BadTakeover(_)
            | SessionError::Frozen(_) => exit::COORDINATOR,
            SessionError::AssignmentRefused(_)
            | SessionError::WelcomeRefused(_)
            | SessionError::BadAssignment(_)
            | SessionError::Spawn(_) => exit::ASSIGNMENT,
        }
    }
}

/// Turns a refused call into an error that says what to fix.
fn refusal(status: tonic::Status) -> SessionError {
    let message = status.message().to_string();
    match status.code() {
        tonic::Code::Unauthenticated => SessionError::BadToken(message),
        tonic::Code::FailedPrecondition => SessionError::Refused(message),
        tonic::Code::ResourceExhausted => SessionError::NoRoom(message),
        code => SessionError::Stream { code, message },
    }
}

/// [`refusal`], except that a transport failure on an `http://` dial is
/// first checked for a coordinator that speaks TLS (`--tls-cert`): it
/// answers plain HTTP/2 with a TLS alert and hangs up, which the HTTP/2
/// client reports as "h2 protocol error" or a broken pipe — words that
/// do not say what to fix. On an `https://` dial, a transport failure while
/// `joining` (no welcome yet) is read as a mutual-TLS refusal of the
/// client certificate.
pub(super) async fn refusal_or_tls(
    status: tonic::Status,
    url: &str,
    joining: bool,
) -> SessionError {
    let transport = matches!(
        status.code(),
        tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Unavailable
    );
    if transport && url.starts_with("http://") && speaks_tls(url).await {
        return SessionError::PlainToTls {
            url: url.to_string(),
            message: status.message().to_string(),
        };
    }
    // With TLS 1.3 the client finishes its handshake before the server has
    // checked the client certificate, so a mutual-TLS refusal only shows as
    // the first call failing in the transport, before any welcome.
    let transport = transport || status.code() == tonic::Code::Cancelled;
    if transport && joining && url.starts_with("https://") {
        return SessionError::ClientCertRefused {
            url: url.to_string(),
            message: status.message().to_string(),
        };
    }
    refusal(status)
}

/// Does the server at `url` answer the HTTP/2 preface with a TLS alert
/// record (content type 21, version 3.x)?
async fn speaks_tls(url: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(authority) = url
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.authority().map(|a| a.to_string()))
    else {
        return false;
    };
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(authority.as_str()).await?;
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        let mut head = [0u8; 2];
        s.read_exact(&mut head).await?;
        std::io::Result::Ok(head == [21, 3])
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Ok(true))
    )
}
