//! Answers kept for a flow: the keeper on its own, then
//! [`crate::client::Transport::send_keeping`] against real local servers
//! (HTTP/1.1 with length and chunked bodies, h2c, gRPC on h2c): what is
//! kept, that a body past the keep is cut and drained, and that the
//! connection then carries the next request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request};
use http_body_util::Full;
use loadfleet_proto::vocab::{GrpcStatus, HttpProtocol};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::{unframe, Keeper, Kept, Sink};
use crate::client::http1::next_request_head;
use crate::client::{grpc, ClientConfig, Exchanged, Outcome, Transport};

/// Bytes that tell their place apart, to check which ones were kept.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_keeper_keeps_the_first_bytes_and_counts_the_rest() {
    let mut keeper = Keeper::new(4, false);
    keeper.head(b"HTTP/1.1 200 OK\r\n\r\n");
    for piece in [&b"ab"[..], b"cdef", b"gh"] {
        keeper.data(piece);
    }
    assert_eq!(keeper.head_bytes(), b"HTTP/1.1 200 OK\r\n\r\n");
    let kept = keeper.finish(200, HeaderMap::new());
    assert_eq!(kept.body, Bytes::from_static(b"abcd"));
    assert!(kept.truncated);
    let mut exact = Keeper::new(4, false);
    exact.data(b"abcd");
    assert!(!exact.finish(200, HeaderMap::new()).truncated);
}

#[test]
fn a_grpc_message_is_kept_without_its_frame() {
    let message = pattern(300);
    let framed = grpc_frame(&message);
    // In pieces cut inside the frame header.
    let mut keeper = Keeper::new(1000, true);
    keeper.data(&framed[..3]);
    keeper.data(&framed[3..]);
    let kept = keeper.finish(200, HeaderMap::new());
    assert_eq!(kept.body, Bytes::from(message.clone()));
    assert!(!kept.truncated);
    // Cut by the keep: the keep counts message bytes, not the frame's.
    let mut keeper = Keeper::new(10, true);
    keeper.data(&framed);
    let kept = keeper.finish(200, HeaderMap::new());
    assert_eq!(kept.body, Bytes::from(message[..10].to_vec()));
    assert!(kept.truncated);
    // A second message is not kept, and says so.
    let mut keeper = Keeper::new(1000, true);
    keeper.data(&framed);
    keeper.data(&grpc_frame(b"more"));
    let kept = keeper.finish(200, HeaderMap::new());
    assert_eq!(kept.body.len(), 300);
    assert!(kept.truncated);
    // Trailers only: no message.
    assert_eq!(unframe(Vec::new(), 0), (Bytes::new(), false));
    // An answer that never reached gRPC keeps its body as it came.
    let mut keeper = Keeper::new(1000, true);
    keeper.data(b"no gRPC here");
    assert_eq!(
        keeper.finish(503, HeaderMap::new()).body,
        Bytes::from_static(b"no gRPC here")
    );
}

fn grpc_frame(message: &[u8]) -> Vec<u8> {
    loadfleet_proto::grpc::frame(message)
}

fn transport(protocol: HttpProtocol) -> Transport {
    let roots = rustls::RootCertStore::empty();
    let alpn: &[&[u8]] = match protocol {
        HttpProtocol::Http1 => &[b"http/1.1"],
        _ => &[b"h2"],
    };
    Transport::new(ClientConfig {
        timeout: Duration::from_secs(5),
        connections: 1,
        max_connections: 1,
        source: None,
        more_sources: Vec::new(),
        tls: crate::client::tls::target_config(&roots, None, alpn).unwrap(),
        protocol,
    })
}

fn get(port: u16) -> Request<Full<Bytes>> {
    Request::get(format!("http://127.0.0.1:{port}/step"))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn keeping(c: &Transport, request: Request<Full<Bytes>>, keep: usize) -> (Exchanged, Kept) {
    let (exchanged, kept) = c
        .send_keeping(request, Instant::now(), None, &|| (), keep)
        .await;
    let kept = kept.unwrap_or_else(|| panic!("no answer kept: {:?}", exchanged.outcome));
    (exchanged, kept)
}

/// An HTTP/1.1 server on loopback that answers the requests on each
/// keep-alive connection with `answers` in turn, round and round; returns
/// its port and the connections it accepted.
async fn http1_server(answers: Vec<Vec<u8>>) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let answers = Arc::new(answers);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let answers = answers.clone();
            tokio::spawn(async move {
                let mut pending = Vec::new();
                for answer in answers.iter().cycle() {
                    if !next_request_head(&mut stream, &mut pending).await
                        || stream.write_all(answer).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (port, accepted)
}

const SMALL: &[u8] = b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\n\
    x-flow: step-1\r\nset-cookie: a=1\r\nset-cookie: b=2\r\n\r\nhello";

/// A length-framed body of `n` pattern bytes.
fn with_length(n: usize) -> Vec<u8> {
    let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {n}\r\n\r\n").into_bytes();
    answer.extend(pattern(n));
    answer
}

/// A chunked body of `pieces` chunks of `size` pattern bytes each (the
/// pattern running on across them), with a chunk extension and a trailer.
fn chunked(pieces: usize, size: usize) -> Vec<u8> {
    let body = pattern(pieces * size);
    let mut answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for chunk in body.chunks(size) {
        answer.extend(format!("{:x};ext=1\r\n", chunk.len()).into_bytes());
        answer.extend_from_slice(chunk);
        answer.extend_from_slice(b"\r\n");
    }
    answer.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
    answer
}

#[tokio::test]
async fn http1_keeps_status_headers_and_body_as_send_measures_them() {
    // An interim head first: the kept headers are the final head's.
    let mut answer = b"HTTP/1.1 100 Continue\r\nx-interim: 1\r\n\r\n".to_vec();
    answer.extend_from_slice(SMALL);
    let (port, accepted) = http1_server(vec![answer]).await;
    let c = transport(HttpProtocol::Http1);
    let (exchanged, kept) = keeping(&c, get(port), 1024).await;
    assert_eq!(exchanged.outcome, Outcome::Status(201));
    assert_eq!(kept.status, 201);
    assert_eq!(kept.headers["x-flow"], "step-1");
    assert_eq!(kept.headers["content-length"], "5");
    let cookies: Vec<_> = kept.headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    assert!(!kept.headers.contains_key("x-interim"));
    assert_eq!(kept.body, Bytes::from_static(b"hello"));
    assert!(!kept.truncated);
    let phases = exchanged.phases;
    assert!(phases.new_connection && phases.ttfb.is_some() && phases.body.is_some());
    assert!(exchanged.answered.is_some());
    // The measured path and the keeping one take turns on one connection.
    let measured = c.send(get(port), Instant::now(), None, &|| ()).await;
    assert_eq!(measured.outcome, Outcome::Status(201));
    assert!(measured.phases.reused);
    let (again, kept) = keeping(&c, get(port), 1024).await;
    assert!(again.phases.reused);
    assert_eq!(kept.body, Bytes::from_static(b"hello"));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// A body past the keep is cut, read to its end all the same, and the
/// connection carries the next request: for a length and for chunks.
#[tokio::test]
async fn http1_bodies_past_the_keep_are_cut_and_drained() {
    let big = 300 * 1024;
    for (name, long) in [
        ("length", with_length(big)),
        ("chunked", chunked(30, 10 * 1024)),
    ] {
        let (port, accepted) = http1_server(vec![long, SMALL.to_vec()]).await;
        let c = transport(HttpProtocol::Http1);
        let (exchanged, kept) = keeping(&c, get(port), 1000).await;
        assert_eq!(exchanged.outcome, Outcome::Status(200), "{name}");
        assert_eq!(kept.body, Bytes::from(pattern(1000)), "{name}");
        assert!(kept.truncated, "{name}");
        let (next, kept) = keeping(&c, get(port), 1000).await;
        assert_eq!(next.outcome, Outcome::Status(201), "{name}");
        assert!(next.phases.reused, "{name}: the same connection");
        assert_eq!(kept.body, Bytes::from_static(b"hello"), "{name}");
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "{name}");
    }
}

/// A chunked body within the keep is kept whole, without its framing,
/// and ends where the chunks end (its trailer is not a header).
#[tokio::test]
async fn http1_chunked_bodies_are_kept_decoded() {
    let (port, _) = http1_server(vec![chunked(3, 700)]).await;
    let c = transport(HttpProtocol::Http1);
    let (_, kept) = keeping(&c, get(port), 2100).await;
    assert_eq!(kept.body, Bytes::from(pattern(2100)));
    assert!(!kept.truncated);
    assert_eq!(kept.headers["transfer-encoding"], "chunked");
}

/// What an h2c test server answers each stream with.
#[derive(Clone)]
struct H2Answer {
    head: http::Response<()>,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

/// An h2c server on loopback answering every stream with `answer`;
/// returns its port.
async fn h2_server(answer: H2Answer) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(io).await else {
                    return;
                };
                while let Some(Ok((_, mut respond))) = conn.accept().await {
                    let answer = answer.clone();
                    tokio::spawn(async move {
                        let ends = answer.body.is_empty() && answer.trailers.is_none();
                        let Ok(mut stream) = respond.send_response(answer.head, ends) else {
                            return;
                        };
                        if !answer.body.is_empty() {
                            let _ = stream.send_data(answer.body, answer.trailers.is_none());
                        }
                        if let Some(trailers) = answer.trailers {
                            let _ = stream.send_trailers(trailers);
                        }
                    });
                }
            });
        }
    });
    port
}

fn h2_answer(status: u16, headers: &[(&'static str, &'static str)], body: Vec<u8>) -> H2Answer {
    let mut head = http::Response::builder().status(status);
    for (name, value) in headers {
        head = head.header(*name, *value);
    }
    H2Answer {
        head: head.body(()).unwrap(),
        body: Bytes::from(body),
        trailers: None,
    }
}

fn trailers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                http::HeaderName::from_static(k),
                HeaderValue::from_static(v),
            )
        })
        .collect()
}

#[tokio::test]
async fn h2c_keeps_status_headers_trailers_and_body() {
    tokio::task::LocalSet::new()
        .run_until(async {
            let mut answer = h2_answer(202, &[("x-flow", "step-2")], b"accepted".to_vec());
            answer.trailers = Some(trailers(&[("x-checksum", "abc"), ("x-checksum", "def")]));
            let port = h2_server(answer).await;
            let c = transport(HttpProtocol::H2c);
            let (exchanged, kept) = keeping(&c, get(port), 1024).await;
            assert_eq!(exchanged.outcome, Outcome::Status(202));
            assert_eq!(kept.status, 202);
            assert_eq!(kept.headers["x-flow"], "step-2");
            let sums: Vec<_> = kept.headers.get_all("x-checksum").iter().collect();
            assert_eq!(sums, ["abc", "def"]);
            assert_eq!(kept.body, Bytes::from_static(b"accepted"));
            assert!(!kept.truncated);
            assert!(exchanged.phases.ttfb.is_some() && exchanged.phases.body.is_some());
        })
        .await;
}

#[tokio::test]
async fn h2c_bodies_past_the_keep_are_cut_and_the_connection_goes_on() {
    tokio::task::LocalSet::new()
        .run_until(async {
            let port = h2_server(h2_answer(200, &[], pattern(200 * 1024))).await;
            let c = transport(HttpProtocol::H2c);
            for _ in 0..3 {
                let (exchanged, kept) = keeping(&c, get(port), 1000).await;
                assert_eq!(exchanged.outcome, Outcome::Status(200));
                assert_eq!(kept.body, Bytes::from(pattern(1000)));
                assert!(kept.truncated);
            }
            assert_eq!(c.take_connections(), vec![(HttpProtocol::H2c, 1)]);
        })
        .await;
}

fn grpc_call(port: u16) -> Request<Full<Bytes>> {
    let mut request = Request::post(format!("http://127.0.0.1:{port}/test.Echo/Say"))
        .body(Full::new(Bytes::from(grpc_frame(b"\x08\x01"))))
        .unwrap();
    *request.headers_mut() = grpc::call_headers(Duration::from_secs(5));
    request.extensions_mut().insert(grpc::Call);
    request
}

#[tokio::test]
async fn grpc_keeps_the_message_and_the_status_from_the_trailers() {
    tokio::task::LocalSet::new()
        .run_until(async {
            let message = pattern(300);
            let mut answer = h2_answer(
                200,
                &[("content-type", "application/grpc")],
                grpc_frame(&message),
            );
            answer.trailers = Some(trailers(&[("grpc-status", "0")]));
            let port = h2_server(answer).await;
            let c = transport(HttpProtocol::H2c);
            let (exchanged, kept) = keeping(&c, grpc_call(port), 1024).await;
            assert_eq!(exchanged.outcome, Outcome::Grpc(GrpcStatus::Ok));
            assert_eq!(kept.status, 200);
            assert_eq!(kept.headers["grpc-status"], "0");
            assert_eq!(kept.headers["content-type"], "application/grpc");
            assert_eq!(kept.body, Bytes::from(message.clone()));
            assert!(!kept.truncated);
            let (_, cut) = keeping(&c, grpc_call(port), 10).await;
            assert_eq!(cut.body, Bytes::from(message[..10].to_vec()));
            assert!(cut.truncated);
        })
        .await;
}

/// A trailers-only answer (an error before any message) keeps its
/// status from the headers and no body.
#[tokio::test]
async fn grpc_trailers_only_answers_keep_their_status() {
    tokio::task::LocalSet::new()
        .run_until(async {
            let answer = h2_answer(
                200,
                &[
                    ("content-type", "application/grpc"),
                    ("grpc-status", "5"),
                    ("grpc-message", "no such user"),
                ],
                Vec::new(),
            );
            let port = h2_server(answer).await;
            let c = transport(HttpProtocol::H2c);
            let (exchanged, kept) = keeping(&c, grpc_call(port), 1024).await;
            assert_eq!(exchanged.outcome, Outcome::Grpc(GrpcStatus::NotFound));
            assert_eq!(kept.headers["grpc-status"], "5");
            assert_eq!(kept.headers["grpc-message"], "no such user");
            assert!(kept.body.is_empty() && !kept.truncated);
        })
        .await;
}

/// No answer, nothing kept: the outcome is the one `send` gives.
#[tokio::test]
async fn a_failed_exchange_keeps_nothing() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let c = transport(HttpProtocol::Http1);
    let (exchanged, kept) = c
        .send_keeping(get(port), Instant::now(), None, &|| (), 1024)
        .await;
    assert_eq!(
        exchanged.outcome,
        Outcome::Error(loadfleet_proto::vocab::ErrorKind::Refused)
    );
    assert!(kept.is_none());
}
