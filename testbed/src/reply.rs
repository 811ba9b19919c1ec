//! What the testbed answers with, but event streams: a short body.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

/// Every response the testbed gives but event streams: a short body.
pub(crate) type TextResponse = Response<Full<Bytes>>;
/// What a request's future yields; handling a request cannot fail.
pub(crate) type Answer = Result<TextResponse, Infallible>;

/// A plain-text response (a static body costs no copy or allocation).
pub(crate) fn reply(status: StatusCode, body: impl Into<Bytes>) -> TextResponse {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}
