//! The task-driven HTTP/1.1 client over real sockets: its pool's slots,
//! queue and saturation, and the phases its requests report.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Full;
use loadfleet_proto::vocab::{ErrorKind, HttpProtocol, UnsentReason};
use tokio::time::Instant;

use super::Http1Client;
use crate::client::http1::next_request_head;
use crate::client::progress::Progress;
use crate::client::{ClientConfig, Kind, Outcome, Transport};

#[tokio::test]
async fn closed_port_is_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let c = client(1, Duration::from_secs(2));
    assert_eq!(
        c.send(get(port), Instant::now(), None, &|| ())
            .await
            .outcome,
        Outcome::Error(ErrorKind::Refused)
    );
}

/// A test server on loopback: every accepted connection is handed to
/// `serve` in a task of its own. Returns its port and a counter of the
/// connections it accepted.
async fn server<F, Fut>(serve: F) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream));
        }
    });
    (port, accepted)
}

/// A bare HTTP/1.1 server that answers every request with 200 after
/// `delay`, over keep-alive connections.
async fn slow_server(delay: Duration) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncWriteExt;
    server(move |mut stream| async move {
        let mut pending = Vec::new();
        while next_request_head(&mut stream, &mut pending).await {
            tokio::time::sleep(delay).await;
            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            if stream.write_all(reply).await.is_err() {
                return;
            }
        }
    })
    .await
}

fn get(port: u16) -> Request<Full<Bytes>> {
    let mix = crate::request::RequestMix::from_proto(
        &[loadfleet_proto::v1::RequestTemplate {
            url: format!("http://127.0.0.1:{port}/"),
            ..Default::default()
        }],
        None,
        None,
        0,
        &crate::allow::AllowList::default(),
    )
    .unwrap();
    mix.build(0, &mut loadfleet_proto::rng::SplitMix64::new(1))
        .unwrap()
}

fn client(connections: usize, timeout: Duration) -> Transport {
    Transport::new(ClientConfig {
        timeout,
        connections,
        max_connections: connections,
        source: None,
        more_sources: Vec::new(),
        tls: crate::client::tls::target_config(
            &rustls::RootCertStore::empty(),
            None,
            &[b"http/1.1"],
        )
        .unwrap(),
        protocol: HttpProtocol::Http1,
    })
}

fn h1(t: &Transport) -> &Http1Client {
    match &t.kind {
        Kind::Http1(c) => c,
        Kind::Http2(_) => panic!("an HTTP/1.1 transport was asked for"),
    }
}

/// A request's future lives as long as it is in flight, so with thousands
/// in flight its size is a real share of the agent's memory. What only a
/// new connection needs (lookup, connect, the TLS handshake) and what only
/// HTTP/2 needs are boxed out of it; this keeps it that way.
#[tokio::test]
async fn a_request_in_flight_carries_no_connection_setup() {
    let c = client(1, Duration::from_secs(1));
    let send = c.send(get(1), Instant::now(), None, &|| ());
    let size = std::mem::size_of_val(&send);
    // About 2 KiB in a debug build (less in release); twice that with the
    // HTTP/2 exchange inline.
    assert!(size < 3000, "a request future of {size} bytes");
}

/// An answer that waits in the socket while the worker is busy (or
/// asleep until its next tick) keeps the time it arrived: the kernel's
/// stamp, not the read. The server runs on another thread: it answers
/// the second request when told to, and says when it has; this thread
/// then stays blocked 50 ms more before it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn an_answer_read_late_is_timed_at_its_arrival() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use tokio::io::AsyncWriteExt;
    let (answered_tx, answered_rx) = mpsc::channel::<()>();
    let go = Arc::new(tokio::sync::Notify::new());
    let answers = Arc::new(AtomicUsize::new(0));
    let told = go.clone();
    let (port, _) = server(move |mut stream| {
        let (answered, answers, go) = (answered_tx.clone(), answers.clone(), told.clone());
        async move {
            let mut pending = Vec::new();
            while next_request_head(&mut stream, &mut pending).await {
                // The second answer is the one read late.
                let late = answers.fetch_add(1, Ordering::SeqCst) == 1;
                if late {
                    go.notified().await;
                    // A millisecond on: the kernel's stamp of the answer
                    // then lies clearly after the request went on the
                    // wire, which the client checks before it trusts it.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(reply).await.is_err() {
                    return;
                }
                if late {
                    let _ = answered.send(());
                }
            }
        }
    })
    .await;
    let c = client(1, Duration::from_secs(5));
    // The connection's opening is not under test.
    assert_eq!(
        c.send(get(port), Instant::now(), None, &|| ())
            .await
            .outcome,
        Outcome::Status(200)
    );
    let mut send = std::pin::pin!(c.send(get(port), Instant::now(), None, &|| ()));
    assert!(
        futures::poll!(send.as_mut()).is_pending(),
        "the request is written and its answer awaited"
    );
    go.notify_one();
    answered_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the server answered within 5 s");
    // A loopback write has arrived when it returns: the answer is here.
    let arrived_by = Instant::now();
    std::thread::sleep(Duration::from_millis(50));
    let r = send.await;
    let read = Instant::now();
    assert_eq!(r.outcome, Outcome::Status(200));
    let on_wire = r.on_wire.expect("went on the wire");
    let answered = r.answered.expect("a plain connection stamps its answers");
    assert!(answered >= on_wire);
    // Stamped when it came, not when it was read 50 ms later (1 ms for
    // the kernel clock's conversion).
    assert!(
        answered <= arrived_by + Duration::from_millis(1),
        "answered {:?} after the server said it had answered",
        answered.saturating_duration_since(arrived_by)
    );
    assert!(read - answered >= Duration::from_millis(49));
    let ttfb = r.phases.ttfb.expect("a time to first byte");
    assert!(
        ttfb + Duration::from_millis(49) <= read - on_wire,
        "{ttfb:?}: the time to first byte ends when the answer came"
    );
}

/// With one connection, concurrent requests queue for it and reuse it:
/// all succeed over a single connection, and the slot count returns to
/// one open, idle connection.
#[tokio::test]
async fn requests_beyond_the_pool_wait_and_reuse_the_connection() {
    let (port, accepted) = slow_server(Duration::from_millis(20)).await;
    let c = client(1, Duration::from_secs(5));
    let results =
        futures::future::join_all((0..5).map(|_| c.send(get(port), Instant::now(), None, &|| ())))
            .await;
    for r in &results {
        assert_eq!(r.outcome, Outcome::Status(200));
        assert!(r.on_wire.is_some());
    }
    // Four of them found the connection busy and waited for it.
    assert_eq!(results.iter().filter(|r| r.pool_wait.is_some()).count(), 4);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(h1(&c).ledger().open(), 1);
    assert!(!h1(&c).ledger().has_waiters());
}

/// Keep-alive shows in the phases: the request that opened the
/// connection has a connect time and no reuse, later ones reuse it and
/// have no connect time; every answered one has its time to first byte
/// and body.
#[tokio::test]
async fn only_the_request_that_opens_a_connection_has_a_connect_phase() {
    let (port, _) = slow_server(Duration::from_millis(5)).await;
    let c = client(1, Duration::from_secs(5));
    let first = c.send(get(port), Instant::now(), None, &|| ()).await.phases;
    assert!(first.new_connection && !first.reused);
    assert!(first.connect.is_some() && first.tls.is_none());
    for _ in 0..3 {
        let next = c.send(get(port), Instant::now(), None, &|| ()).await.phases;
        assert!(next.reused && !next.new_connection);
        assert_eq!(next.connect, None);
        assert!(next.ttfb.is_some_and(|t| t >= Duration::from_millis(5)));
        assert!(next.body.is_some());
    }
}

/// A request that times out while queued for the agent's own pool is
/// unsent `pool_timeout`, not a target timeout — and no slot is lost: once the
/// busy connection is free, the pool serves again with one connection.
#[tokio::test]
async fn queued_timeouts_are_named_and_leak_nothing() {
    let (port, accepted) = slow_server(Duration::from_millis(1)).await;
    let c = client(1, Duration::from_millis(100));
    let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
    let key = uri.authority().unwrap().clone();
    // Hold the only slot, as a long request would.
    let held = h1(&c)
        .acquire(&key, &uri, &Progress::new(&|| ()))
        .await
        .unwrap();
    let r = c.send(get(port), Instant::now(), None, &|| ()).await;
    assert_eq!(r.outcome, Outcome::Unsent(UnsentReason::PoolTimeout));
    assert!(r.on_wire.is_none(), "never reached a connection");
    assert!(r.pool_wait.is_some_and(|w| w >= Duration::from_millis(100)));
    assert!(c.take_saturated(Instant::now()) >= Duration::from_millis(100));
    assert_eq!(
        h1(&c).ledger().waiting(),
        0,
        "the one that gave up is not waiting"
    );
    assert_eq!(h1(&c).ledger().open(), 1);
    drop(held); // unfinished: its connection closes, the slot frees
    assert_eq!(h1(&c).ledger().open(), 0);
    assert_eq!(
        c.send(get(port), Instant::now(), None, &|| ())
            .await
            .outcome,
        Outcome::Status(200)
    );
    assert_eq!(
        c.send(get(port), Instant::now(), None, &|| ())
            .await
            .outcome,
        Outcome::Status(200)
    );
    assert_eq!(h1(&c).ledger().open(), 1, "one connection, reused");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A request the worker held in its own queue: its wait there is its
/// pool wait and counts as the pool's saturation; its time runs from
/// when it was queued, and one whose time ran out there is a
/// `pool_timeout` ending at its deadline, never sent.
#[tokio::test]
async fn a_request_held_by_the_worker_keeps_its_wait_and_its_deadline() {
    let (port, accepted) = slow_server(Duration::ZERO).await;
    let timeout = Duration::from_millis(200);
    let c = client(1, timeout);
    assert_eq!(c.free_connections(), Some(1));

    let since = Instant::now();
    let queued = c.queue();
    assert_eq!(h1(&c).ledger().waiting(), 1);
    tokio::time::sleep(Duration::from_millis(30)).await;
    let r = c.send(get(port), since, Some(queued), &|| ()).await;
    assert_eq!(r.outcome, Outcome::Status(200));
    let wait = r.pool_wait.expect("it waited in the worker's queue");
    assert!(wait >= Duration::from_millis(30), "pool wait {wait:?}");
    assert!(r.on_wire.is_some_and(|at| at >= since + wait));
    assert_eq!(h1(&c).ledger().waiting(), 0);
    assert!(c.take_saturated(Instant::now()) >= Duration::from_millis(30));
    assert_eq!(
        c.free_connections(),
        Some(1),
        "the connection is idle again"
    );

    let since = Instant::now() - timeout - Duration::from_millis(5);
    let r = c.send(get(port), since, Some(c.queue()), &|| ()).await;
    assert_eq!(r.outcome, Outcome::Unsent(UnsentReason::PoolTimeout));
    assert!(r.on_wire.is_none(), "never sent");
    assert_eq!(
        r.answered,
        Some(since + timeout),
        "it ended at its deadline"
    );
    assert!(r.pool_wait.is_some_and(|w| w >= timeout));
    assert_eq!(h1(&c).ledger().waiting(), 0);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        c.send(get(port), Instant::now(), None, &|| ())
            .await
            .outcome,
        Outcome::Status(200)
    );
}

/// Connections opened ahead wait idle, within the pool's limit; the
/// first request on each reports its connect time as its own (so
/// opened + reused still counts every request), later ones reuse it,
/// and nothing more is opened.
#[tokio::test]
async fn connections_opened_ahead_serve_the_first_requests() {
    let (port, accepted) = slow_server(Duration::ZERO).await;
    let c = client(3, Duration::from_secs(5));
    let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
    c.open_ahead(&uri, 10).await;
    assert_eq!(h1(&c).ledger().open(), 3, "no more than the pool");
    assert_eq!(c.free_connections(), Some(3), "all idle");
    assert_eq!(c.take_connections(), vec![(HttpProtocol::Http1, 3)]);
    let mut phases = Vec::new();
    for _ in 0..5 {
        let r = c.send(get(port), Instant::now(), None, &|| ()).await;
        assert_eq!(r.outcome, Outcome::Status(200));
        assert!(r.pool_wait.is_none());
        phases.push(r.phases);
    }
    let opened: Vec<_> = phases.iter().filter(|p| p.new_connection).collect();
    assert_eq!(opened.len(), 3, "{phases:?}");
    assert!(opened.iter().all(|p| p.connect.is_some() && !p.reused));
    assert_eq!(phases.iter().filter(|p| p.reused).count(), 2);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(h1(&c).ledger().open(), 3);
}

/// A connection that cannot be opened ahead, or whose opening is
/// dropped half-way (the run started first), leaves no slot taken.
#[tokio::test]
async fn connections_that_do_not_open_ahead_leave_their_slots() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed: Uri = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    drop(listener);
    let c = client(4, Duration::from_secs(1));
    c.open_ahead(&closed, 4).await;
    assert_eq!(h1(&c).ledger().open(), 0);
    assert!(c.take_connections().is_empty());

    let (port, _) = slow_server(Duration::ZERO).await;
    let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
    {
        let mut opening = std::pin::pin!(c.open_ahead(&uri, 4));
        let _ = futures::poll!(opening.as_mut());
    }
    assert_eq!(
        c.free_connections(),
        Some(4),
        "every slot is free or holds an idle connection"
    );
}

/// Full means the next request would queue: every slot taken and no
/// connection idle. An idle connection, or a free slot, is not full.
#[tokio::test]
async fn the_pool_is_full_only_with_every_slot_busy() {
    let (port, _) = slow_server(Duration::ZERO).await;
    let c = client(1, Duration::from_secs(5));
    assert!(!c.pool_full(), "a free slot");
    let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
    let key = uri.authority().unwrap().clone();
    let held = h1(&c)
        .acquire(&key, &uri, &Progress::new(&|| ()))
        .await
        .unwrap();
    assert!(c.pool_full(), "the one slot is leased");
    drop(held);
    assert!(!c.pool_full(), "the slot came back");
    assert_eq!(
        c.send(get(port), Instant::now(), None, &|| ())
            .await
            .outcome,
        Outcome::Status(200)
    );
    assert!(!c.pool_full(), "its connection waits idle");
}

/// Overload: one connection, a 100 ms service and a 300 ms timeout, with
/// far more requests than the connection can carry. A freed connection
/// goes to the oldest waiter, which may have almost none of its wait left:
/// it still gets its whole timeout on the wire, so it is answered and the
/// connection lives on; those whose wait ran out are unsent
/// `pool_timeout`, and nothing is a target `timeout`.
#[tokio::test]
async fn waiters_past_their_time_stay_unsent_and_never_cost_a_connection() {
    let (port, accepted) = slow_server(Duration::from_millis(100)).await;
    let c = client(1, Duration::from_millis(300));
    let results = futures::future::join_all((0..12).map(|i| {
        let c = c.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20 * i)).await;
            c.send(get(port), Instant::now(), None, &|| ()).await
        }
    }))
    .await;
    let count = |kind: Outcome| results.iter().filter(|r| r.outcome == kind).count();
    assert_eq!(count(Outcome::Error(ErrorKind::Timeout)), 0);
    assert!(count(Outcome::Unsent(UnsentReason::PoolTimeout)) >= 4);
    assert!(count(Outcome::Status(200)) >= 4);
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one connection carried every answer"
    );
    assert!(c.take_saturated(Instant::now()) >= Duration::from_millis(300));
}

/// A server that answers the n-th request on each connection with
/// `replies[n]`, written in small pieces, then closes after the last.
/// Returns its port, a count of the connections it accepted and one of
/// those it has closed.
async fn scripted_server(
    replies: Vec<Vec<u8>>,
) -> (
    u16,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let closed = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = closed.clone();
    let (port, accepted) = server(move |mut stream| {
        let replies = replies.clone();
        let closed = counter.clone();
        async move {
            let mut buf = vec![0u8; 4096];
            let mut pending = Vec::new();
            'replies: for reply in replies {
                while !pending.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break 'replies,
                        Ok(n) => pending.extend_from_slice(&buf[..n]),
                    }
                }
                pending.clear();
                for piece in reply.chunks(1000) {
                    if stream.write_all(piece).await.is_err() {
                        break 'replies;
                    }
                }
            }
            drop(stream);
            closed.fetch_add(1, Ordering::SeqCst);
        }
    })
    .await;
    (port, accepted, closed)
}

/// A server that closes an idle keep-alive connection without saying
/// so: the connection goes back to the pool as reusable (only the
/// exchange's own verdict is kept then), and the next request finds it
/// closed when it takes it, so it opens another instead of failing.
#[tokio::test]
async fn a_connection_closed_while_idle_is_not_reused() {
    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec();
    let (port, accepted, closed) = scripted_server(vec![ok]).await;
    let c = client(1, Duration::from_secs(5));
    let first = c.send(get(port), Instant::now(), None, &|| ()).await;
    assert_eq!(first.outcome, Outcome::Status(200));
    // The server's close reaches the idle connection: once the server has
    // closed it, its FIN is on this side of the loopback.
    let deadline = Instant::now() + Duration::from_secs(5);
    while closed.load(std::sync::atomic::Ordering::SeqCst) < 1 {
        assert!(Instant::now() < deadline, "the server never closed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let second = c.send(get(port), Instant::now(), None, &|| ()).await;
    assert_eq!(second.outcome, Outcome::Status(200));
    assert!(second.phases.new_connection);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Large bodies (chunked and by length) arrive in many reads and leave
/// the connection reusable; `Connection: close` ends it, so the next
/// request opens a new one; a response cut short is `reset`.
#[tokio::test]
async fn large_bodies_close_and_truncation_over_a_real_socket() {
    let big = vec![b'x'; 300_000];
    let mut chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for piece in big.chunks(7000) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut sized = format!(
        "HTTP/1.1 201 Created\r\ncontent-length: {}\r\n\r\n",
        big.len()
    )
    .into_bytes();
    sized.extend_from_slice(&big);
    let close = b"HTTP/1.1 503 Busy\r\nconnection: close\r\ncontent-length: 2\r\n\r\nno".to_vec();
    let (port, accepted, _) = scripted_server(vec![chunked, sized, close]).await;
    let c = client(1, Duration::from_secs(5));
    let statuses: Vec<Outcome> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(
                c.send(get(port), Instant::now(), None, &|| ())
                    .await
                    .outcome,
            );
        }
        out
    };
    assert_eq!(
        statuses,
        [
            Outcome::Status(200),
            Outcome::Status(201),
            Outcome::Status(503)
        ]
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The close was honoured: the next request needs a new connection,
    // whose first answer is again the chunked one.
    let next = c.send(get(port), Instant::now(), None, &|| ()).await;
    assert_eq!(next.outcome, Outcome::Status(200));
    assert!(next.phases.new_connection);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Truncation: a server that sends only part of a framed body.
    let (port, _, _) = scripted_server(vec![
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc".to_vec()
    ])
    .await;
    let c = client(1, Duration::from_secs(5));
    assert_eq!(
        c.send(get(port), Instant::now(), None, &|| ())
            .await
            .outcome,
        Outcome::Error(ErrorKind::Reset)
    );
}
