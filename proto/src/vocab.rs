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

    /// Position in [`OutcomeClass::ALL`], for fixed-size per-class arrays on
    /// the request path.
    pub const fn index(self) -> usize {
        self as usize
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
        /// sending it (booked by the coordinator from the plan), or the run
        /// was aborted because an agent was lost.
        AgentLost => "agent_lost",
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
        /// The request ran out of time and spent at least half of it
        /// waiting for one of the agent's own connections: the generator
        /// was the limit, not the target.
        PoolTimeout => "pool_timeout",
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
        /// Anything not covered above.
        Other => "other",
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
        /// The run was cut short; the figures cover what ran.
        Partial => "PARTIAL",
        /// Snapshots that could not be decoded are missing from the totals.
        CorruptSnapshot => "CORRUPT_SNAPSHOT",
        /// The agents' own connections were all busy and requests waited
        /// for one: the target saw at most that many concurrent requests,
        /// and the run was partly a closed model.
        GeneratorPool => "GENERATOR_POOL",
        /// Requests were still in flight when the drain ended: they have no
        /// outcome, and the latency figures leave them out.
        Incomplete => "INCOMPLETE",
        /// An agent broke the protocol (a message out of bounds, out of
        /// order or out of phase): it was dropped, or its repeats ignored.
        ProtocolViolation => "PROTOCOL_VIOLATION",
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
