//! The direct pool over real sockets, plain and TLS: framings, reads in
//! pieces, bounds, deadlines, and the slots and connections it keeps.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Full;
use loadfleet_proto::vocab::{ErrorKind, HttpProtocol, UnsentReason};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::answer::LOOK_BUDGET;
use super::outgoing::full_bytes;
use super::{DirectPool, Outgoing};
use crate::client::http1::ledger::FITTING_TO_TRUST;
use crate::client::http1::next_request_head;
use crate::client::http1::read::READ_MAX;
use crate::client::http1::wire::{render, MAX_HEAD_BYTES};
use crate::client::{ClientConfig, Exchanged, Outcome, Transport};

mod pool;
mod tls;

/// What the test server does with one request: write these pieces, a
/// few milliseconds apart (so an answer arrives cut in several reads),
/// then close the connection at once, or not.
#[derive(Clone)]
struct Reply {
    pieces: Vec<&'static [u8]>,
    close: bool,
}

fn reply(pieces: &[&'static [u8]]) -> Reply {
    Reply {
        pieces: pieces.to_vec(),
        close: false,
    }
}

/// A server on loopback that answers requests, on whatever connection
/// they come, with the replies in order (none: it never answers).
/// Returns its URL and a count of the connections it accepted.
async fn server(replies: Vec<Reply>) -> (Uri, Arc<AtomicUsize>) {
    let (port, accepted) = serve(replies, None).await;
    (
        format!("http://127.0.0.1:{port}/").parse().unwrap(),
        accepted,
    )
}

/// [`server`] over TLS, with a certificate for `localhost`: its URL, the
/// count, and a pool (of `connections`) that trusts the certificate.
async fn tls_server(
    replies: Vec<Reply>,
    connections: usize,
) -> (Uri, Arc<AtomicUsize>, Rc<DirectPool<u32>>) {
    let (acceptor, trust) = tls_pair();
    let (port, accepted) = serve(replies, Some(acceptor)).await;
    let uri: Uri = format!("https://localhost:{port}/").parse().unwrap();
    let pool = pool_with(&uri, connections, Duration::from_secs(5), trust);
    (uri, accepted, pool)
}

/// A server's TLS side for `localhost`, and a client's that trusts it.
fn tls_pair() -> (tokio_rustls::TlsAcceptor, Arc<rustls::ClientConfig>) {
    tls_pair_sending(2)
}

/// [`tls_pair`] whose server sends `tickets` session tickets after each
/// handshake (rustls sends 2).
fn tls_pair_sending(tickets: usize) -> (tokio_rustls::TlsAcceptor, Arc<rustls::ClientConfig>) {
    let (mut config, trust) = crate::client::tls::testing::localhost(&[b"http/1.1"]);
    config.send_tls13_tickets = tickets;
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), trust)
}

/// One request to a TLS server of its own, whose request head is read
/// and the rest left to `answer`: the request's outcome.
async fn one_tls_exchange<F, A>(answer: F) -> Outcome
where
    F: FnOnce(tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> A + Send + 'static,
    A: std::future::Future<Output = ()> + Send,
{
    let (acceptor, trust) = tls_pair();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(stream).await.unwrap();
        let mut pending = Vec::new();
        if next_request_head(&mut tls, &mut pending).await {
            answer(tls).await;
        }
    });
    let uri: Uri = format!("https://localhost:{port}/").parse().unwrap();
    let pool = pool_with(&uri, 1, Duration::from_secs(5), trust);
    let mut done = Vec::new();
    pool.submit(get(&uri), Instant::now(), 1, &mut done);
    let got = outcomes(&pool, 1).await;
    assert_eq!(got.len(), 1);
    got[0].1.outcome
}

/// The servers' loop: plain TCP, or TLS through `tls`; the port and the
/// count of connections accepted. A reply that closes ends the session
/// as a TLS server does (`close_notify`, then the FIN).
async fn serve(
    replies: Vec<Reply>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let replies = replies.clone();
            match &tls {
                None => {
                    tokio::spawn(answer(stream, replies));
                }
                Some(acceptor) => {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            answer(stream, replies).await;
                        }
                    });
                }
            }
        }
    });
    (port, accepted)
}

/// One connection of [`serve`]'s.
async fn answer(
    mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    replies: Arc<Mutex<VecDeque<Reply>>>,
) {
    let mut pending = Vec::new();
    while next_request_head(&mut stream, &mut pending).await {
        let Some(r) = replies.lock().unwrap().pop_front() else {
            continue;
        };
        for (i, piece) in r.pieces.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            if stream.write_all(piece).await.is_err() {
                return;
            }
        }
        if r.close {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

fn pool(uri: &Uri, connections: usize, timeout: Duration) -> Rc<DirectPool<u32>> {
    let tls =
        crate::client::tls::target_config(&rustls::RootCertStore::empty(), None, &[b"http/1.1"])
            .unwrap();
    pool_with(uri, connections, timeout, tls)
}

fn pool_with(
    uri: &Uri,
    connections: usize,
    timeout: Duration,
    tls: Arc<rustls::ClientConfig>,
) -> Rc<DirectPool<u32>> {
    let transport = Transport::new(ClientConfig {
        timeout,
        connections,
        max_connections: connections,
        source: None,
        more_sources: Vec::new(),
        tls,
        protocol: HttpProtocol::Http1,
    });
    Rc::new(transport.direct(uri).expect("HTTP/1.1").unwrap())
}

fn get(uri: &Uri) -> Outgoing {
    Outgoing::built(
        Request::get(uri.clone())
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
}

/// A request of a kind that never changes goes out, every time, as the
/// same request built and rendered afresh would, and keeps its method:
/// the answer to a HEAD has no body, whatever its length says.
#[tokio::test]
async fn a_fixed_request_goes_out_as_rendered_every_time() {
    local(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let uri: Uri = format!("http://127.0.0.1:{port}/a/b?c=d").parse().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut answered = 0;
            while answered < 3 {
                let mut buf = [0u8; 1024];
                let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
                    .await
                    .unwrap();
                assert!(n > 0, "the client closed early");
                seen.extend_from_slice(&buf[..n]);
                let heads = seen.windows(4).filter(|w| w == b"\r\n\r\n").count();
                while answered < heads {
                    let answer: &[u8] = if answered == 2 {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                    };
                    stream.write_all(answer).await.unwrap();
                    answered += 1;
                }
            }
            seen
        });
        let pool = pool(&uri, 1, Duration::from_secs(5));
        let request = || {
            Request::post(uri.clone())
                .header("x-kind", "fixed")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap()
        };
        let fixed = pool.fix(request());
        let head = pool.fix(
            Request::head(uri.clone())
                .body(Full::new(Bytes::new()))
                .unwrap(),
        );
        for (n, out) in [fixed.clone(), fixed, head].into_iter().enumerate() {
            let mut done = Vec::new();
            pool.submit(Outgoing::Fixed(out), Instant::now(), n as u32, &mut done);
            assert!(done.is_empty(), "nothing fails at once");
            let got = outcomes(&pool, 1).await;
            assert_eq!(got.len(), 1, "answer {n}");
            assert_eq!(
                got[0].1.outcome,
                Outcome::Status(200),
                "{n}: {:?}",
                got[0].1
            );
        }
        let (parts, body) = request().into_parts();
        let mut one = Vec::new();
        render(
            &parts,
            &format!("127.0.0.1:{port}"),
            &full_bytes(body),
            &mut one,
        );
        let expected = one.repeat(2);
        let seen = server.await.unwrap();
        assert!(
            seen.starts_with(&expected),
            "{:?}",
            String::from_utf8_lossy(&seen)
        );
        assert_eq!(
            &seen[expected.len()..],
            format!("HEAD /a/b?c=d HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n").as_bytes()
        );
    })
    .await;
}

/// Drives the pool as the open loop does until `n` outcomes are in
/// (within 5 s), in the order they came.
async fn outcomes(pool: &Rc<DirectPool<u32>>, n: usize) -> Vec<(u32, Exchanged)> {
    let mut done = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while done.len() < n && Instant::now() < end {
        tokio::select! {
            _ = pool.news() => {}
            _ = tokio::time::sleep_until(pool.next_deadline().unwrap_or(end)) => {}
        }
        pool.drive(Instant::now(), &mut done);
    }
    done
}

async fn local<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::LocalSet::new().run_until(f).await
}

/// Answers framed every way HTTP/1.1 allows, arriving in pieces, are
/// read whole; one whose body runs to the close ends its connection,
/// the others leave it for the next request.
#[tokio::test]
async fn answers_of_every_framing_are_read_in_pieces() {
    local(async {
        let (uri, accepted) = server(every_framing()).await;
        let pool = pool(&uri, 1, Duration::from_secs(5));
        reads_every_framing(&uri, &accepted, &pool).await;
    })
    .await;
}

fn every_framing() -> Vec<Reply> {
    vec![
        reply(&[
            b"HTTP/1.1 200 OK\r\ncontent-len",
            b"gth: 5\r\n\r\nhel",
            b"lo",
        ]),
        reply(&[
            b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n",
            b"3\r\nabc\r\n",
            b"2;ext=1\r\nde\r\n0\r\ntrailer: x\r\n\r\n",
        ]),
        reply(&[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"]),
        Reply {
            pieces: vec![b"HTTP/1.1 202 Accepted\r\n\r\nuntil", b" the close"],
            close: true,
        },
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]),
    ]
}

/// Sends [`every_framing`]'s five requests one after another and checks
/// their outcomes.
async fn reads_every_framing(uri: &Uri, accepted: &AtomicUsize, pool: &Rc<DirectPool<u32>>) {
    let mut statuses = Vec::new();
    for n in 0..5 {
        let mut done = Vec::new();
        pool.submit(get(uri), Instant::now(), n, &mut done);
        assert!(done.is_empty(), "nothing fails at once");
        let got = outcomes(pool, 1).await;
        assert_eq!(got.len(), 1, "answer {n}");
        let (tag, ex) = got[0];
        assert_eq!(tag, n);
        assert!(ex.on_wire.is_some() && ex.pool_wait.is_none());
        assert!(ex.answered.is_some_and(|at| at >= ex.on_wire.unwrap()));
        assert!(
            ex.phases.ttfb.is_some() && ex.phases.body.is_some(),
            "{n}: {ex:?}"
        );
        assert_eq!(ex.phases.new_connection, n == 0 || n == 4, "{n}");
        statuses.push(ex.outcome);
    }
    let status = |s| Outcome::Status(s);
    assert_eq!(
        statuses,
        vec![
            status(200),
            status(201),
            status(204),
            status(202),
            status(200)
        ]
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "one close, one reopen");
    assert_eq!(pool.take_connections(), vec![(HttpProtocol::Http1, 2)]);
}

/// Answers are read as they come while the pool has yet to see
/// enough of them end within a socket's window, and again for the
/// rest of the run once one outgrows it; answers that fit may wait
/// for the loop's tick.
#[tokio::test]
async fn an_answer_held_back_at_the_window_asks_to_be_read_as_it_comes() {
    local(async {
        let body: &'static [u8] = Box::leak(vec![b'x'; 4 << 20].into_boxed_slice());
        let head: &'static [u8] = Box::leak(
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
                .into_bytes()
                .into_boxed_slice(),
        );
        let small = reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]);
        let large = Reply {
            pieces: vec![head, body],
            close: false,
        };
        let learning = usize::from(FITTING_TO_TRUST);
        let mut replies = vec![small.clone(); learning];
        replies.extend([large, small]);
        let (uri, _) = server(replies).await;
        let pool = pool(&uri, 1, Duration::from_secs(5));
        let mut done = Vec::new();
        for tag in 0..learning {
            pool.submit(get(&uri), Instant::now(), tag as u32, &mut done);
            assert!(
                pool.answers_need_reading(),
                "answer {tag}: too early to tell"
            );
            assert_eq!(outcomes(&pool, 1).await[0].1.outcome, Outcome::Status(200));
        }
        pool.submit(get(&uri), Instant::now(), 1, &mut done);
        assert!(!pool.answers_need_reading(), "answers that fit");
        // Slept through, as a tick would: the server fills the window
        // and waits.
        tokio::time::sleep(Duration::from_millis(30)).await;
        pool.drive(Instant::now(), &mut done);
        assert!(done.is_empty(), "4 MiB in one look");
        assert!(pool.answers_need_reading());
        let got = outcomes(&pool, 1).await;
        assert_eq!(got[0].1.outcome, Outcome::Status(200));
        assert!(!pool.answers_need_reading(), "nothing under way");
        pool.submit(get(&uri), Instant::now(), 2, &mut done);
        assert!(pool.answers_need_reading(), "learnt for the run");
        assert_eq!(outcomes(&pool, 1).await[0].1.outcome, Outcome::Status(200));
    })
    .await;
}

/// A request larger than the socket (and, over TLS, the session's
/// buffer) takes at once goes out whole over later writes, plain or
/// TLS, and its answer is read after it.
#[tokio::test]
async fn a_request_larger_than_the_socket_takes_goes_out_whole() {
    local(async {
        for tls in [false, true] {
            let (acceptor, trust) = tls_pair();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                if tls {
                    let stream = acceptor.accept(stream).await.unwrap();
                    count_body(stream).await;
                } else {
                    count_body(stream).await;
                }
            });
            let scheme = if tls { "https" } else { "http" };
            let uri: Uri = format!("{scheme}://localhost:{port}/").parse().unwrap();
            let pool = pool_with(&uri, 1, Duration::from_secs(5), trust);
            let body = Bytes::from(vec![b'x'; BIG_BODY]);
            let request = Request::post(uri.clone()).body(Full::new(body)).unwrap();
            let mut done = Vec::new();
            pool.submit(Outgoing::built(request), Instant::now(), 1, &mut done);
            let got = outcomes(&pool, 1).await;
            assert_eq!(got.len(), 1, "tls {tls}");
            assert_eq!(got[0].1.outcome, Outcome::Status(200), "tls {tls}");
        }
    })
    .await;
}

/// Larger than a loopback socket's send buffer takes at once, and than
/// rustls buffers unsent.
const BIG_BODY: usize = 8 << 20;

/// Reads one request's head and its `content-length` body after a
/// pause (so the client's socket fills), then answers 200 if the body
/// came whole, 400 otherwise.
async fn count_body(mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin) {
    use tokio::io::AsyncReadExt;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let head_end = loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    };
    let mut body = seen.len() - head_end;
    while body < BIG_BODY {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body += n,
        }
    }
    let status: &[u8] = if body == BIG_BODY {
        b"200 OK"
    } else {
        b"400 Bad"
    };
    let answer = [b"HTTP/1.1 ", status, b"\r\ncontent-length: 0\r\n\r\n"].concat();
    let _ = stream.write_all(&answer).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// A malformed answer is a protocol error, an answer cut short by the
/// close is a reset, and bytes after an answer (nobody asked for them)
/// end its connection: each time the next request opens a new one.
#[tokio::test]
async fn bad_answers_fail_and_close_their_connection() {
    local(async {
        let (uri, accepted) = server(vec![
            reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"]),
            Reply {
                pieces: vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"],
                close: true,
            },
            reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n"]),
            reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]),
        ])
        .await;
        let pool = pool(&uri, 1, Duration::from_secs(5));
        let mut got = Vec::new();
        for n in 0..4 {
            pool.submit(get(&uri), Instant::now(), n, &mut Vec::new());
            got.extend(outcomes(&pool, 1).await);
        }
        let kinds: Vec<_> = got.iter().map(|(_, ex)| ex.outcome).collect();
        assert_eq!(
            kinds,
            vec![
                Outcome::Error(ErrorKind::Protocol),
                Outcome::Error(ErrorKind::Reset),
                Outcome::Status(200),
                Outcome::Status(200),
            ]
        );
        assert!(
            got[0].1.phases.ttfb.is_none(),
            "no answer, no time to first byte"
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    })
    .await;
}

/// A hostile server whose head never ends: the loop reads it only up
/// to the reader's bound, then fails the request as a protocol error
/// and drops the connection, instead of buffering without end.
#[tokio::test]
async fn a_head_that_never_ends_is_cut_at_the_bound() {
    local(async {
        let endless: &'static [u8] = Box::leak(
            [
                b"HTTP/1.1 200 OK\r\n".as_slice(),
                &b"x-pad: y\r\n".repeat(10_000),
            ]
            .concat()
            .into_boxed_slice(),
        );
        assert!(endless.len() > MAX_HEAD_BYTES);
        let (uri, _) = server(vec![reply(&[endless])]).await;
        let pool = pool(&uri, 1, Duration::from_secs(5));
        pool.submit(get(&uri), Instant::now(), 0, &mut Vec::new());
        let got = outcomes(&pool, 1).await;
        assert_eq!(got[0].1.outcome, Outcome::Error(ErrorKind::Protocol));
        assert_eq!(
            pool.state.borrow().ledger.open(),
            0,
            "the connection is dropped"
        );
    })
    .await;
}

/// A look takes a bounded part of what a socket holds, and the next
/// drive reads on without waiting for an edge (none comes for bytes
/// already there): a server streaming an endless body as fast as
/// loopback goes cannot hold the loop in its reads, away from its
/// arrivals and that request's deadline. The socket's buffer is made
/// large enough to hold the whole 2 MiB answer unread.
#[tokio::test]
async fn a_look_reads_a_bounded_part_and_the_next_goes_on() {
    local(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let written = Rc::new(Cell::new(false));
        let flag = written.clone();
        tokio::task::spawn_local(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut pending = Vec::new();
            let body = vec![b'x'; 2 << 20];
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            while next_request_head(&mut stream, &mut pending).await {
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.write_all(&body).await.unwrap();
                flag.set(true);
            }
        });
        let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let pool = pool(&uri, 1, Duration::from_secs(5));
        let mut done = Vec::new();
        pool.open_ahead(1).await;
        for slot in pool.state.borrow().slots.iter().flatten() {
            nix::sys::socket::setsockopt(
                &slot.stream,
                nix::sys::socket::sockopt::RcvBuf,
                &(8 << 20),
            )
            .unwrap();
        }
        pool.submit(get(&uri), Instant::now(), 0, &mut done);
        let end = Instant::now() + Duration::from_secs(5);
        while !written.get() && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(written.get(), "the answer fits in the socket");
        let mut looks = 0;
        while done.is_empty() && looks < 100 {
            assert!(
                looks == 0 || pool.has_news(),
                "look {looks} left the rest unread"
            );
            pool.drive(Instant::now(), &mut done);
            looks += 1;
        }
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].1.outcome, Outcome::Status(200));
        assert!(
            looks >= (2 << 20) / (LOOK_BUDGET + READ_MAX),
            "{looks} looks"
        );
    })
    .await;
}
