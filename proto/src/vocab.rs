//! The words both sides of the wire and every report format share.
//!
//! Outcome classes, unsent reasons, error kinds, verdicts and agent states
//! cross the wire as strings (map keys in `Snapshot`) and reach users as
//! JSON keys, CSV columns, hlog tags, Prometheus labels and text. Each is an
//! enum here with exactly one string form, so a typo cannot create a second
//! spelling that users' scripts would silently miss. See `docs/report.md`
//! for what each one means to a user.

use std::fmt;
use std::str::FromStr;

/// Defines a closed vocabulary: an enum, its one string form, the list of
/// all values, and parsing back from the string form.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in report order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The one string form used on the wire and in every report.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// Position in [`Self::ALL`], for fixed-size per-word arrays
            /// (a count per word costs an index, never a lookup).
            pub const fn index(self) -> usize {
                self as usize
            }
        }

        impl Word for $name {
            const ALL: &'static [$name] = $name::ALL;
            const NAME: &'static str = stringify!($name);
            fn index(self) -> usize {
                $name::index(self)
            }
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownWord;
            fn from_str(s: &str) -> Result<Self, UnknownWord> {
                match s {
                    $( $text => Ok($name::$variant), )+
                    _ => Err(UnknownWord {
                        vocabulary: stringify!($name),
                        word: s.chars().take(64).collect(),
                    }),
                }
            }
        }

        /// In JSON the word is its string form, never the variant name.
        #[cfg(feature = "serde")]
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "serde")]
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let word = String::deserialize(d)?;
                word.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

/// A vocabulary as generic code sees it: figures keyed by its words
/// ([`crate::figures::Counts`]) keep one count per word, at its index.
pub trait Word:
    Copy + Eq + Ord + fmt::Debug + fmt::Display + FromStr<Err = UnknownWord> + 'static
{
    /// Every word, in report order; a word's index is its place here.
    const ALL: &'static [Self];
    /// The vocabulary's name, as [`UnknownWord::vocabulary`] gives it.
    const NAME: &'static str;
    /// Position in [`Self::ALL`].
    fn index(self) -> usize;
    /// The one string form.
    fn as_str(self) -> &'static str;
}

/// A string that is not part of a vocabulary (e.g. an unknown error kind
/// from a peer). The word is cut to 64 characters so a hostile peer cannot
/// make the error message large.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {vocabulary} {word:?}")]
pub struct UnknownWord {
    /// Which vocabulary was asked.
    pub vocabulary: &'static str,
    /// The word that was not found (at most 64 characters).
    pub word: String,
}

vocabulary! {
    /// What became of a request that was sent; each class has its own
    /// latency histogram, because a fast 429 and a slow 503 tell different
    /// stories and must not share percentiles.
    OutcomeClass {
        /// An informational (1xx) final status.
        Informational => "1xx",
        /// A success (2xx).
        Success => "2xx",
        /// A redirect (3xx), not followed.
        Redirect => "3xx",
        /// A client error (4xx), e.g. 429 from an admission limit.
        ClientError => "4xx",
        /// A server error (5xx), e.g. 503 from a pool wait timeout.
        ServerError => "5xx",
        /// No status at all: a transport error (see [`ErrorKind`]).
        Error => "error",
        /// A gRPC call answered `OK`.
        GrpcOk => "grpc_ok",
        /// A gRPC call refused for something the caller did or must fix,
        /// the statuses the standard gRPC-to-HTTP mapping gives a 4xx
        /// (e.g. a fast `RESOURCE_EXHAUSTED` from an admission limit).
        GrpcClientError => "grpc_client_error",
        /// A gRPC call the server failed, the statuses that map to a 5xx
        /// (e.g. `UNAVAILABLE` after a pool wait, `DEADLINE_EXCEEDED`).
        GrpcServerError => "grpc_server_error",
    }
}

impl OutcomeClass {
    /// The class of an HTTP status code. Codes outside 100..=599 are not
    /// valid HTTP and count as server errors, as hyper would never hand one
    /// over.
    pub const fn of_status(code: u16) -> Self {
        match code {
            100..=199 => OutcomeClass::Informational,
            200..=299 => OutcomeClass::Success,
            300..=399 => OutcomeClass::Redirect,
            400..=499 => OutcomeClass::ClientError,
            _ => OutcomeClass::ServerError,
        }
    }

    /// The class of a status code as a snapshot carries it (a `u32`); one
    /// too large for HTTP counts as a server error, as [`Self::of_status`]
    /// counts any code outside 100..=599.
    pub fn of_wire_status(code: u32) -> Self {
        u16::try_from(code).map_or(OutcomeClass::ServerError, OutcomeClass::of_status)
    }

    /// The class of a grpc-status name as a snapshot carries it (checked
    /// against the vocabulary on arrival; an unknown one reads as UNKNOWN
    /// would).
    pub fn of_grpc_word(name: &str) -> Self {
        name.parse::<GrpcStatus>()
            .unwrap_or(GrpcStatus::Unknown)
            .class()
    }

    /// A success: a 2xx answer or a gRPC `OK`. What the successful
    /// throughput counts.
    pub const fn is_ok(self) -> bool {
        matches!(self, OutcomeClass::Success | OutcomeClass::GrpcOk)
    }

    /// A failure: a transport error, a 4xx or 5xx answer, or a gRPC status
    /// other than `OK`. 1xx and 3xx are neither success nor failure.
    pub const fn is_failure(self) -> bool {
        !matches!(
            self,
            OutcomeClass::Success
                | OutcomeClass::GrpcOk
                | OutcomeClass::Informational
                | OutcomeClass::Redirect
        )
    }
}

vocabulary! {
    /// The status of a gRPC call, as its `grpc-status` trailer carries it
    /// (by number) and as reports name it (by the canonical name).
    GrpcStatus {
        /// Not an error.
        Ok => "OK",
        /// Cancelled, typically by the caller.
        Cancelled => "CANCELLED",
        /// An error the server could not classify.
        Unknown => "UNKNOWN",
        /// The request message was not acceptable.
        InvalidArgument => "INVALID_ARGUMENT",
        /// The deadline (the request's timeout) expired before the answer.
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        /// The entity asked for does not exist.
        NotFound => "NOT_FOUND",
        /// The entity to create already exists.
        AlreadyExists => "ALREADY_EXISTS",
        /// The caller may not do this.
        PermissionDenied => "PERMISSION_DENIED",
        /// A quota or limit was hit (e.g. admission control).
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        /// The system is not in a state the operation needs.
        FailedPrecondition => "FAILED_PRECONDITION",
        /// Aborted, typically by a concurrency conflict.
        Aborted => "ABORTED",
        /// Past the valid range.
        OutOfRange => "OUT_OF_RANGE",
        /// The method is not implemented or not served.
        Unimplemented => "UNIMPLEMENTED",
        /// An invariant broke inside the server.
        Internal => "INTERNAL",
        /// The service cannot answer now (e.g. a pool wait timed out).
        Unavailable => "UNAVAILABLE",
        /// Unrecoverable data loss.
        DataLoss => "DATA_LOSS",
        /// The caller has no valid credentials.
        Unauthenticated => "UNAUTHENTICATED",
    }
}

impl GrpcStatus {
    /// The status of a `grpc-status` code; codes beyond 16 are not
    /// defined and read as `UNKNOWN`, as gRPC clients do.
    pub const fn from_code(code: u32) -> Self {
        if (code as usize) < GrpcStatus::ALL.len() {
            GrpcStatus::ALL[code as usize]
        } else {
            GrpcStatus::Unknown
        }
    }

    /// The numeric code on the wire.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The lower-case name thresholds use (`grpc.unavailable<1%`).
    pub fn threshold_name(self) -> String {
        self.as_str().to_ascii_lowercase()
    }

    /// The latency class of a call with this status: statuses the standard
    /// gRPC-to-HTTP mapping gives a 4xx are the caller's, those it gives a
    /// 5xx the server's, so a fast refusal and a slow failure keep their
    /// own percentiles as 429 and 503 do.
    pub const fn class(self) -> OutcomeClass {
        match self {
            GrpcStatus::Ok => OutcomeClass::GrpcOk,
            GrpcStatus::Cancelled
            | GrpcStatus::InvalidArgument
            | GrpcStatus::NotFound
            | GrpcStatus::AlreadyExists
            | GrpcStatus::PermissionDenied
            | GrpcStatus::ResourceExhausted
            | GrpcStatus::FailedPrecondition
            | GrpcStatus::Aborted
            | GrpcStatus::OutOfRange
            | GrpcStatus::Unauthenticated => OutcomeClass::GrpcClientError,
            GrpcStatus::Unknown
            | GrpcStatus::DeadlineExceeded
            | GrpcStatus::Unimplemented
            | GrpcStatus::Internal
            | GrpcStatus::Unavailable
            | GrpcStatus::DataLoss => OutcomeClass::GrpcServerError,
        }
    }
}

vocabulary! {
    /// Why an intended arrival was never sent. Every unsent arrival has one,
    /// so `intended == sent + unsent.total` holds in every report.
    UnsentReason {
        /// The agent's in-flight cap was reached at the arrival; it is
        /// dropped, never queued, so the schedule stays open.
        ConcurrencyLimit => "concurrency_limit",
        /// The agent was further behind schedule than the max lag.
        Late => "late",
        /// The rendered template did not form a valid request.
        InvalidRequest => "invalid_request",
        /// The rendered URL's host and port are outside the agent's
        /// `--allow-target` list; the request never left the agent.
        NotAllowed => "not_allowed",
        /// The agent that owned the arrival was lost before it reported
        /// sending it (booked by the coordinator from the plan).
        AgentLost => "agent_lost",
        /// It waited for one of the agent's own connections (or HTTP/2
        /// streams) until its time ran out, and was never written: the
        /// generator was the limit, not the target.
        PoolTimeout => "pool_timeout",
        /// It was still waiting for one of the agent's own connections when
        /// the drain ended: never written.
        QueuedAtEnd => "queued_at_end",
        /// No agent joined the run, so nobody could send it (booked by the
        /// coordinator from the plan).
        NoAgents => "no_agents",
        /// The run was aborted before the arrival was due (`--on-agent-loss
        /// abort`): an agent that was still running never reached it
        /// (booked by the coordinator from the plan).
        Aborted => "aborted",
    }
}

vocabulary! {
    /// Why a flow ended before its last step passed. Every failed flow has
    /// one, so `started == completed + failed + in_flight_at_end` holds with
    /// the failures split by reason.
    FlowFailure {
        /// A check on a step's answer did not hold.
        Check => "check",
        /// A capture found nothing in a step's answer.
        Capture => "capture",
        /// A step without checks was answered 400 or above (or a gRPC
        /// status other than OK).
        Status => "status",
        /// A step got no answer: a transport error other than a timeout.
        Error => "error",
        /// A step ran past its timeout.
        Timeout => "timeout",
        /// A step could not be sent (it waited for one of the agent's own
        /// connections until its time ran out, or did not render).
        Unsent => "unsent",
    }
}

vocabulary! {
    /// Why a step of a started flow was never reached: the funnel's losses.
    NotReached {
        /// The flow failed at an earlier step.
        FlowFailed => "flow_failed",
        /// The run ended (the drain ran out, or the agent was stopped)
        /// while the flow was at an earlier step.
        RunEnded => "run_ended",
    }
}

vocabulary! {
    /// Why a sent request got no HTTP status: what an operator would act on.
    ErrorKind {
        /// The target refused the connection.
        Refused => "refused",
        /// The connection was reset or closed mid-request.
        Reset => "reset",
        /// The request ran past its timeout.
        Timeout => "timeout",
        /// The TLS handshake failed.
        Tls => "tls",
        /// The target's name did not resolve.
        Dns => "dns",
        /// Connecting failed for another reason.
        Connect => "connect",
        /// No local address or port was free to connect from.
        LocalAddress => "local_address",
        /// The response was not valid HTTP.
        Protocol => "protocol",
        /// Another I/O error on an open connection.
        Io => "io",
        /// The request could not be formed (e.g. no host in the URL).
        InvalidRequest => "invalid_request",
        /// The HTTP/2 peer sent GOAWAY: it is closing the connection and
        /// refused the streams above its last one (e.g. nginx after
        /// `keepalive_requests`, or a server shutting down).
        Goaway => "goaway",
        /// The HTTP/2 peer reset this one stream (RST_STREAM), e.g.
        /// REFUSED_STREAM or CANCEL; the connection stays up.
        StreamReset => "stream_reset",
        /// The TLS peer did not agree to HTTP/2 by ALPN (it speaks only
        /// HTTP/1.1): use protocol = "http1" for it.
        NoH2 => "no_h2",
        /// Anything not covered above.
        Other => "other",
    }
}

vocabulary! {
    /// The HTTP protocol spoken to a target: what a plan asks for
    /// (`protocol`, `--http2`) and what each connection actually spoke (the
    /// report's `protocol` counts).
    HttpProtocol {
        /// HTTP/1.1, cleartext or over TLS (ALPN http/1.1).
        Http1 => "http1",
        /// HTTP/2: over TLS as negotiated by ALPN; asked of an http:// URL,
        /// cleartext with prior knowledge (a connection that then reports
        /// as h2c).
        H2 => "h2",
        /// HTTP/2 in cleartext with prior knowledge (no upgrade dance).
        H2c => "h2c",
    }
}

vocabulary! {
    /// How much a verdict matters for the exit status.
    VerdictLevel {
        /// The experiment did not happen as planned: exit 3.
        Error => "error",
        /// The numbers hold but need a caveat.
        Warn => "warn",
        /// Context worth knowing.
        Info => "info",
    }
}

vocabulary! {
    /// What the report says about the run itself, before any figure.
    VerdictCode {
        /// Nothing (or almost nothing) succeeded, or answers came faster than
        /// the target can produce them: no experiment happened.
        NoExperiment => "NO_EXPERIMENT",
        /// The generator, not the target, was the limit (lag, CPU).
        GeneratorSaturated => "GENERATOR_SATURATED",
        /// Part of the intended load was never sent.
        Unsent => "UNSENT",
        /// The target shares a host with an agent.
        Localhost => "LOCALHOST",
        /// An agent's clock offset is too uncertain to trust cross-agent
        /// timing.
        Clock => "CLOCK",
        /// An agent was lost during the run.
        AgentLost => "AGENT_LOST",
        /// Fewer agents than expected joined, and the run started on them
        /// (`--min-agents`).
        AgentsMissing => "AGENTS_MISSING",
        /// The run was cut short; the figures cover what ran.
        Partial => "PARTIAL",
        /// Snapshots that could not be decoded are missing from the totals.
        CorruptSnapshot => "CORRUPT_SNAPSHOT",
        /// The agents' own connections were all busy and requests waited
        /// for one: the target saw at most that many concurrent requests,
        /// and the run was partly a closed model.
        GeneratorPool => "GENERATOR_POOL",
        /// Failures (errors, 4xx, 5xx) above the warning share of the
        /// completions (an error above the error share).
        Failures => "FAILURES",
        /// Requests were still in flight when the drain ended: they have no
        /// outcome, and the latency figures leave them out.
        Incomplete => "INCOMPLETE",
        /// An agent broke the protocol (a message out of bounds, out of
        /// order or out of phase): it was dropped, or its repeats ignored.
        ProtocolViolation => "PROTOCOL_VIOLATION",
        /// The target's TLS certificates were not checked (`--insecure`):
        /// nothing proves the answers came from the intended server.
        InsecureTls => "INSECURE_TLS",
        /// A live output (`--out-prometheus`, `--out-influxdb`, `--out-otlp`,
        /// `[[output]]`) could not deliver some seconds: its dashboards have
        /// gaps there. The report's figures are whole.
        OutputLost => "OUTPUT_LOST",
        /// The target fell behind the arrivals through a scenario's window:
        /// answers short of what was sent, and latency rising. No steady
        /// state, so no capacity can be read from the rate.
        NotSteady => "NOT_STEADY",
    }
}

vocabulary! {
    /// Where an agent stood when the run ended.
    AgentStatus {
        /// Ran its whole slice and drained.
        Finished => "finished",
        /// Was told to stop before the schedule ended.
        Stopped => "stopped",
        /// Its control stream broke or went silent.
        Lost => "lost",
        /// Never said it finished (e.g. the run ended first).
        Unfinished => "unfinished",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T>(all: &[T])
    where
        T: Copy + PartialEq + fmt::Debug + fmt::Display + FromStr,
    {
        let mut seen = std::collections::BTreeSet::new();
        for v in all {
            let text = v.to_string();
            assert!(seen.insert(text.clone()), "{text} spelled twice");
            assert_eq!(text.parse::<T>().ok(), Some(*v));
        }
    }

    #[test]
    fn every_word_has_one_string_form() {
        round_trips(OutcomeClass::ALL);
        round_trips(UnsentReason::ALL);
        round_trips(ErrorKind::ALL);
        round_trips(VerdictLevel::ALL);
        round_trips(VerdictCode::ALL);
        round_trips(AgentStatus::ALL);
        round_trips(HttpProtocol::ALL);
        round_trips(GrpcStatus::ALL);
    }

    #[test]
    fn grpc_codes_are_the_canonical_numbers() {
        assert_eq!(GrpcStatus::ALL.len(), 17);
        assert_eq!(GrpcStatus::from_code(0), GrpcStatus::Ok);
        assert_eq!(GrpcStatus::from_code(4), GrpcStatus::DeadlineExceeded);
        assert_eq!(GrpcStatus::from_code(8), GrpcStatus::ResourceExhausted);
        assert_eq!(GrpcStatus::from_code(14), GrpcStatus::Unavailable);
        assert_eq!(GrpcStatus::from_code(16), GrpcStatus::Unauthenticated);
        assert_eq!(GrpcStatus::from_code(99), GrpcStatus::Unknown);
        for s in GrpcStatus::ALL {
            assert_eq!(GrpcStatus::from_code(s.code()), *s);
        }
        assert_eq!(
            GrpcStatus::ResourceExhausted.class(),
            OutcomeClass::GrpcClientError
        );
        assert_eq!(
            GrpcStatus::Unavailable.class(),
            OutcomeClass::GrpcServerError
        );
        assert!(GrpcStatus::Ok.class().is_ok());
        assert!(GrpcStatus::Unavailable.class().is_failure());
    }

    #[test]
    fn classes_index_their_position() {
        for (i, c) in OutcomeClass::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
        assert_eq!(OutcomeClass::of_status(429), OutcomeClass::ClientError);
        assert_eq!(OutcomeClass::of_status(503), OutcomeClass::ServerError);
    }

    #[test]
    fn unknown_words_are_cut_short() {
        let long = "x".repeat(1000);
        let err = long.parse::<ErrorKind>().unwrap_err();
        assert_eq!(err.word.len(), 64);
    }
}
