//! Command-line surface of `loadfleet-testbed`.
//!
//! Every flag value is checked while clap parses it (newtypes with `FromStr`,
//! small value-parser functions, `requires` between flags), so a bad value is
//! reported by clap with the flag's name and exit status 2, before anything
//! is bound or pinned.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use tokio::sync::Semaphore;

use crate::{Config, Limit, ShopConfig};

/// The `--cpus` value, parsed as the agent parses its own.
pub use loadfleet_sys::CpuList;

/// A configurable HTTP/1.1 target that reproduces overload shapes: a fixed or
/// jittered service delay, a bounded pool that answers 503 after a wait
/// timeout, an admission semaphore that answers 429 fast, and injected 500s.
///
/// After binding it prints one line, `listening on <addr>`, to stdout.
/// `GET /health` answers 200 at once, bypassing admission, pool and delay.
/// `GET /sse` holds a Server-Sent Events stream (an event with its send
/// time every --sse-interval), `POST /broadcast` sends one event to every
/// open stream, and `GET /__stats/sse` counts what was sent. `/bytes/N`
/// answers N bytes (at most 16 MiB) after the same work as any request.
#[derive(Debug, Clone, Parser)]
#[command(name = "loadfleet-testbed", version)]
pub struct Cli {
    /// Address to listen on; port 0 picks a free port (see the stdout line).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Service delay of every request, spent waiting (not burning CPU) while
    /// holding a pool slot, e.g. "100ms".
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub delay: Duration,

    /// Add a uniformly random extra delay in 0..=DURATION to every request.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub delay_jitter: Duration,

    /// At most N requests do their work at once (a bounded connection pool).
    /// Without it, every request works at once.
    #[arg(long, value_name = "N", value_parser = parse_limit)]
    pub pool: Option<usize>,

    /// How long a request waits for a pool slot before it is answered 503.
    /// Without it, requests queue for a slot without limit.
    #[arg(long, value_name = "DURATION", requires = "pool", value_parser = parse_duration)]
    pub pool_timeout: Option<Duration>,

    /// At most N requests admitted (waiting for the pool or working), checked
    /// before the pool; the others are answered 429.
    #[arg(long, value_name = "N", value_parser = parse_limit)]
    pub admission: Option<usize>,

    /// How long a request may wait for admission before it is answered 429
    /// [default: 0s, i.e. reject at once].
    #[arg(long, value_name = "DURATION", requires = "admission", value_parser = parse_duration)]
    pub admission_timeout: Option<Duration>,

    /// Fraction (0..=1) of requests answered 500 after doing their work.
    // Negative numbers are let through so "-0.5" is reported as out of
    // range rather than as an unknown flag.
    #[arg(
        long,
        value_name = "FRACTION",
        default_value = "0",
        allow_negative_numbers = true
    )]
    pub error_rate: ErrorRate,

    /// Tokio worker threads [default: the CPUs this process may run on,
    /// after --cpus]. With 1, a single-threaded runtime is used.
    #[arg(long, value_name = "N")]
    pub workers: Option<NonZeroUsize>,

    /// Pin the whole process to these CPUs, e.g. "0", "0,1" or "0-3,6", so
    /// that a load generator on the same machine can be kept off them.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<CpuList>,

    /// Serve gRPC (HTTP/2 without TLS) instead of HTTP/1.1: the unary
    /// method loadfleet.testbed.v1.Testbed/Work with the same delay, pool,
    /// admission and error knobs (admission answers RESOURCE_EXHAUSTED, the
    /// pool timeout UNAVAILABLE, injected errors INTERNAL), and reflection.
    /// On exit it prints `grpc-status NAME COUNT` per status answered.
    #[arg(long, conflicts_with = "tls_cert")]
    pub grpc: bool,
    /// Most concurrent streams per HTTP/2 connection (the
    /// SETTINGS_MAX_CONCURRENT_STREAMS the testbed announces; hyper's
    /// default is 200). A client with every stream busy must wait.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub h2_max_streams: Option<u32>,

    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// Time between the events of every `GET /sse` stream; "0s" sends only
    /// what `POST /broadcast` asks for.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub sse_interval: Duration,

    /// End every event stream this long after it opened, so that clients
    /// reconnect (with `Last-Event-ID`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub sse_drop_after: Option<Duration>,

    /// Tell event-stream clients to wait this long before reconnecting
    /// (`retry:` at the start of every stream).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub sse_retry: Option<Duration>,

    /// Shift the send time stamped into events by this much, e.g. "200ms"
    /// (a server clock running ahead) or "-200ms" (behind).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        allow_hyphen_values = true,
        value_parser = parse_skew
    )]
    pub clock_skew: i64,

    /// Serve the stateful shop as well: `POST /login`, `/cart`, `/orders`
    /// and `/payments/{order}`, with sessions, bearer tokens and ids that
    /// are each accepted once (docs/testbed.md, "Shop"). Other paths
    /// answer as without it.
    #[arg(long, conflicts_with = "grpc")]
    pub shop: bool,

    /// Shop requests hold one of N permits of their own pool while they
    /// wait out --delay (in place of --pool), queueing without limit for
    /// one, so a serialised purchase flow slows step by step under
    /// overload.
    #[arg(long, value_name = "N", requires = "shop", value_parser = parse_limit)]
    pub shop_pool: Option<usize>,

    /// Fraction (0..=1) of payments answered `{"status": "declined"}`,
    /// deterministically: the k-th payment is declined when
    /// floor(k*F) > floor((k-1)*F).
    #[arg(
        long,
        value_name = "FRACTION",
        requires = "shop",
        default_value = "0",
        allow_negative_numbers = true,
        value_parser = parse_fraction
    )]
    pub shop_decline: f64,
}

impl Cli {
    /// The server configuration these flags describe.
    pub fn config(&self) -> Config {
        Config {
            delay: self.delay,
            delay_jitter: self.delay_jitter,
            pool: self.pool.map(|permits| Limit {
                permits,
                // No timeout: a pool without one is a plain queue.
                timeout: self.pool_timeout,
            }),
            admission: self.admission.map(|permits| Limit {
                permits,
                // Admission exists to reject fast, so it does not wait
                // unless asked to.
                timeout: Some(self.admission_timeout.unwrap_or(Duration::ZERO)),
            }),
            error_rate: self.error_rate,
            sse: crate::SseConfig {
                interval: self.sse_interval,
                drop_after: self.sse_drop_after,
                retry: self.sse_retry,
                clock_skew_us: self.clock_skew,
            },
            h2_max_streams: self.h2_max_streams,
            shop: self.shop.then_some(ShopConfig {
                pool: self.shop_pool,
                decline: self.shop_decline,
            }),
        }
    }
}

/// Parses a signed duration ("200ms", "-1s") into microseconds.
fn parse_skew(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let (sign, magnitude) = match s.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, s.strip_prefix('+').unwrap_or(s)),
    };
    let duration = parse_duration(magnitude)?;
    let micros = i64::try_from(duration.as_micros())
        .ok()
        .filter(|us| *us <= 86_400_000_000)
        .ok_or_else(|| "must be at most a day either way".to_owned())?;
    Ok(sign * micros)
}

/// Parses a human duration such as "100ms", "2s" or "1m 30s".
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|err| format!("{err} (expected a duration such as \"100ms\" or \"2s\")"))
}

/// Parses a permit count for `--pool` / `--admission`: at least 1 (zero would
/// make every request fail, which is not an experiment) and no more than a
/// tokio semaphore can hold.
fn parse_limit(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|err| format!("{err} (expected a whole number of at least 1)"))?;
    if n == 0 {
        return Err("must be at least 1".to_owned());
    }
    if n > Semaphore::MAX_PERMITS {
        return Err(format!("must be at most {}", Semaphore::MAX_PERMITS));
    }
    Ok(n)
}

/// Parses a fraction within `0.0..=1.0`, as `--error-rate` takes it.
fn parse_fraction(s: &str) -> Result<f64, String> {
    s.parse::<ErrorRate>().map(ErrorRate::get)
}

/// The fraction of requests to answer 500, always within `0.0..=1.0`.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
pub struct ErrorRate(f64);

impl ErrorRate {
    /// No injected errors.
    pub const NONE: ErrorRate = ErrorRate(0.0);

    /// Checks that `fraction` is a number within `0.0..=1.0`.
    pub fn new(fraction: f64) -> Result<Self, String> {
        if (0.0..=1.0).contains(&fraction) {
            Ok(ErrorRate(fraction))
        } else {
            Err(format!(
                "must be a fraction between 0 and 1 (e.g. 0.05), got {fraction}"
            ))
        }
    }

    /// The fraction, within `0.0..=1.0`.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl FromStr for ErrorRate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fraction: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("must be a fraction between 0 and 1 (e.g. 0.05), got {s:?}"))?;
        ErrorRate::new(fraction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn error_rate_must_be_a_fraction() {
        assert_eq!("0".parse::<ErrorRate>().unwrap().get(), 0.0);
        assert_eq!("1".parse::<ErrorRate>().unwrap().get(), 1.0);
        assert_eq!("0.25".parse::<ErrorRate>().unwrap().get(), 0.25);
        for bad in ["2", "-0.1", "NaN", "inf", "x"] {
            assert!(bad.parse::<ErrorRate>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn flags_become_config() {
        let cli = Cli::try_parse_from([
            "loadfleet-testbed",
            "--delay",
            "100ms",
            "--pool",
            "10",
            "--pool-timeout",
            "2s",
            "--admission",
            "12",
        ])
        .unwrap();
        let config = cli.config();
        assert_eq!(config.delay, Duration::from_millis(100));
        assert_eq!(
            config.pool,
            Some(Limit {
                permits: 10,
                timeout: Some(Duration::from_secs(2))
            })
        );
        assert_eq!(
            config.admission,
            Some(Limit {
                permits: 12,
                timeout: Some(Duration::ZERO)
            })
        );
        assert!(!config.is_trivial());
    }

    #[test]
    fn shop_flags_become_config() {
        let cli = Cli::try_parse_from([
            "loadfleet-testbed",
            "--shop",
            "--shop-pool",
            "3",
            "--shop-decline",
            "0.25",
        ])
        .unwrap();
        assert_eq!(
            cli.config().shop,
            Some(ShopConfig {
                pool: Some(3),
                decline: 0.25
            })
        );
        let cli = Cli::try_parse_from(["loadfleet-testbed"]).unwrap();
        assert_eq!(cli.config().shop, None);
    }

    #[test]
    fn defaults_are_the_cheap_path() {
        let cli = Cli::try_parse_from(["loadfleet-testbed"]).unwrap();
        assert_eq!(cli.listen, "127.0.0.1:8080".parse().unwrap());
        assert!(cli.config().is_trivial());
    }

    #[test]
    fn invalid_combinations_name_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&["--pool-timeout", "1s"], "--pool"),
            (&["--admission-timeout", "1s"], "--admission"),
            (&["--pool", "0"], "--pool"),
            (&["--admission", "0"], "--admission"),
            (&["--error-rate", "2"], "--error-rate"),
            (&["--error-rate", "-0.5"], "--error-rate"),
            (&["--delay", "soon"], "--delay"),
            (&["--workers", "0"], "--workers"),
            (&["--cpus", "2-1"], "--cpus"),
            (&["--clock-skew", "2 days"], "--clock-skew"),
            (&["--sse-interval", "often"], "--sse-interval"),
            (&["--shop-pool", "4"], "--shop"),
            (&["--shop-decline", "0.5"], "--shop"),
            (&["--shop", "--shop-pool", "0"], "--shop-pool"),
            (&["--shop", "--shop-decline", "1.5"], "--shop-decline"),
            (&["--shop", "--shop-decline", "-0.1"], "--shop-decline"),
            (&["--shop", "--grpc"], "--shop"),
        ];
        for (args, flag) in cases {
            let err = Cli::try_parse_from(
                std::iter::once("loadfleet-testbed").chain(args.iter().copied()),
            )
            .expect_err("bad flags were accepted");
            let message = err.to_string();
            assert!(message.contains(flag), "{args:?}: {message}");
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }
}
