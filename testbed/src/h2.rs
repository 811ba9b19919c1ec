//! HTTP/2 next to HTTP/1.1 on the same port: hyper-util's auto builder
//! reads the first bytes of each connection and serves the h2c prior-
//! knowledge preface (or ALPN h2 over TLS) as HTTP/2, anything else as
//! HTTP/1.1, so one testbed is the target of both kinds of run.
//!
//! `--h2-max-streams N` caps the concurrent streams a connection may carry
//! (SETTINGS_MAX_CONCURRENT_STREAMS): the open-model truth test needs a
//! server that makes a multiplexing client wait, to show that wait in the
//! latency and not in the service time.

use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;

use crate::Config;

/// The connection builder for the testbed's port.
pub(crate) fn builder(config: &Config) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A load generator may leave keep-alive connections idle between
    // bursts; the target must not be the one closing them. (Also avoids
    // hyper's default 30s timeout, which needs a timer we do not otherwise
    // use.)
    builder.http1().header_read_timeout(None);
    // hyper's own default is 200 concurrent streams; a cap from the flag
    // replaces it.
    if let Some(streams) = config.h2_max_streams {
        builder.http2().max_concurrent_streams(streams);
    }
    builder
}
