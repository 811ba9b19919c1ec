//! The pool's ledger: waiting for a slot, deadlines, idle closes and dials.

use super::*;

/// With one connection, requests beyond it wait, oldest first, and
/// keep that wait as their pool wait; all go over the one connection.
#[tokio::test]
async fn requests_beyond_the_pool_wait_their_turn() {
    local(async {
        let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (uri, accepted) = server(vec![reply(&[ok]); 4]).await;
        let pool = pool(&uri, 1, Duration::from_secs(5));
        let mut done = Vec::new();
        for n in 0..4 {
            pool.submit(get(&uri), Instant::now(), n, &mut done);
        }
        assert!(pool.full());
        let got = outcomes(&pool, 4).await;
        assert_eq!(
            got.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert!(got.iter().all(|(_, ex)| ex.outcome == Outcome::Status(200)));
        assert!(got[0].1.pool_wait.is_none());
        assert!(got[1..].iter().all(|(_, ex)| ex.pool_wait.is_some()));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert!(pool.take_saturated(Instant::now()) > Duration::ZERO);
        assert!(!pool.full(), "the connection is idle again");
    })
    .await;
}

/// A server that never answers: the one waiting behind the request on the
/// wire is unsent `pool_timeout` at its deadline, never written; the one
/// on the wire has its whole timeout from going on the wire, then times
/// out; the stuck connection is closed and its slot serves again.
#[tokio::test]
async fn requests_out_of_time_end_at_their_deadlines() {
    local(async {
        let (uri, accepted) = server(Vec::new()).await;
        let timeout = Duration::from_millis(150);
        let pool = pool(&uri, 1, timeout);
        let sent = Instant::now();
        pool.submit(get(&uri), sent, 0, &mut Vec::new());
        pool.submit(get(&uri), sent, 1, &mut Vec::new());
        let got = outcomes(&pool, 2).await;
        assert_eq!(got.len(), 2);
        let wire = got.iter().find(|(n, _)| *n == 0).unwrap().1;
        assert_eq!(wire.outcome, Outcome::Error(ErrorKind::Timeout));
        let on_wire = wire.on_wire.expect("it went on the wire");
        assert_eq!(wire.answered, Some(on_wire + timeout));
        let queued = got.iter().find(|(n, _)| *n == 1).unwrap().1;
        assert_eq!(queued.answered, Some(sent + timeout));
        assert_eq!(queued.outcome, Outcome::Unsent(UnsentReason::PoolTimeout));
        assert!(queued.on_wire.is_none());
        assert_eq!(queued.pool_wait, Some(timeout));
        assert!(!pool.full(), "the stuck connection gave its slot back");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    })
    .await;
}

/// An answer that ends after its request's deadline is a timeout, even
/// when the pool is driven only later (a worker asleep until its next
/// arrival) and reads it whole before it looks at the deadlines.
#[tokio::test]
async fn an_answer_read_after_its_deadline_is_a_timeout() {
    local(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let (written, all_written) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut pending = Vec::new();
            assert!(next_request_head(&mut stream, &mut pending).await);
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
                .await
                .unwrap();
            // The body comes 3 ms after the head: well after the deadline.
            tokio::time::sleep(Duration::from_millis(3)).await;
            stream.write_all(b"ok").await.unwrap();
            let _ = written.send(());
            // Open until the test is done with the connection.
            let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut [0u8; 1]).await;
        });
        let timeout = Duration::from_millis(1);
        let pool = pool(&uri, 1, timeout);
        pool.open_ahead(1).await;
        let sent = Instant::now();
        pool.submit(get(&uri), sent, 0, &mut Vec::new());
        // All of the answer is on this side (a loopback write has
        // arrived when it returns) before the pool first looks.
        tokio::time::timeout(Duration::from_secs(5), all_written)
            .await
            .expect("the server wrote its answer within 5 s")
            .expect("the server wrote its answer");
        let mut done = Vec::new();
        pool.drive(Instant::now(), &mut done);
        assert_eq!(done.len(), 1);
        let ex = &done[0].1;
        assert_eq!(ex.outcome, Outcome::Error(ErrorKind::Timeout));
        assert_eq!(ex.answered, Some(sent + timeout));
        assert!(
            !pool.full(),
            "the connection, its answer whole, serves again"
        );
    })
    .await;
}

/// Waits, at most 5 s, until `done` holds, looking again whenever the
/// pool has news or a millisecond has passed: the event, not a guess of
/// how long it takes.
async fn until(pool: &Rc<DirectPool<u32>>, what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < end, "not within 5 s: {what}");
        tokio::select! {
            _ = pool.news() => {}
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
    }
}

/// A keep-alive connection the server closes right after its answer
/// (its end comes with the answer's bytes, in the same edge) is not
/// kept for the next request, which opens a new one instead of failing
/// on it.
#[tokio::test]
async fn a_connection_closed_while_idle_is_not_reused() {
    local(async {
        let (uri, accepted) = server(vec![Reply {
            pieces: vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"],
            close: true,
        }])
        .await;
        let pool = pool(&uri, 1, Duration::from_secs(5));
        pool.submit(get(&uri), Instant::now(), 0, &mut Vec::new());
        let got = outcomes(&pool, 1).await;
        assert_eq!(got[0].1.outcome, Outcome::Status(200));
        // The answer said nothing of closing, so the connection is idle
        // until its close is read.
        until(&pool, "the close is read", || {
            pool.drive(Instant::now(), &mut Vec::new());
            pool.state.borrow().ledger.open() == 0
        })
        .await;
        assert!(!pool.full());
        pool.submit(get(&uri), Instant::now(), 1, &mut Vec::new());
        until(&pool, "a new connection is accepted", || {
            accepted.load(Ordering::SeqCst) == 2
        })
        .await;
    })
    .await;
}

/// A port nobody listens on: the request that dialled fails as
/// refused, with no connection and its slot given back.
#[tokio::test]
async fn a_refused_dial_fails_its_request_and_frees_the_slot() {
    local(async {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let pool = pool(&uri, 1, Duration::from_secs(2));
        pool.submit(get(&uri), Instant::now(), 7, &mut Vec::new());
        let got = outcomes(&pool, 1).await;
        assert_eq!(got[0].0, 7);
        assert_eq!(got[0].1.outcome, Outcome::Error(ErrorKind::Refused));
        assert!(got[0].1.on_wire.is_none());
        assert_eq!(pool.state.borrow().ledger.open(), 0);
    })
    .await;
}

/// Connections opened ahead wait idle; the first request on each
/// reports its connect time as its own, and nothing more is opened.
#[tokio::test]
async fn connections_opened_ahead_serve_the_first_requests() {
    local(async {
        let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        let (uri, accepted) = server(vec![reply(&[ok]); 4]).await;
        let pool = pool(&uri, 2, Duration::from_secs(5));
        pool.open_ahead(5).await;
        assert_eq!(
            pool.state.borrow().ledger.idle(),
            2,
            "no more than the pool"
        );
        for n in 0..4 {
            pool.submit(get(&uri), Instant::now(), n, &mut Vec::new());
        }
        let got = outcomes(&pool, 4).await;
        assert!(got.iter().all(|(_, ex)| ex.outcome == Outcome::Status(200)));
        let opened = got
            .iter()
            .filter(|(_, ex)| ex.phases.new_connection)
            .count();
        assert_eq!(opened, 2);
        assert!(got
            .iter()
            .all(|(_, ex)| ex.phases.new_connection == ex.phases.connect.is_some()));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    })
    .await;
}

/// Opening ahead is cut short when the run starts first: the dials
/// still under way take no slot, so the pool can open all of its own.
#[tokio::test]
async fn dials_ahead_cut_short_take_no_slot() {
    local(async {
        // A server that never accepts, its queue of one full: the
        // kernel drops further handshakes, so a dial to it hangs.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        while let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            queued.push(s);
            assert!(queued.len() < 16, "the queue never filled");
        }
        let uri: Uri = format!("http://{addr}/").parse().unwrap();
        let pool = pool(&uri, 2, Duration::from_secs(5));
        let cut = tokio::time::timeout(Duration::from_millis(50), pool.open_ahead(2)).await;
        assert!(cut.is_err(), "the dials were still under way");
        assert_eq!(pool.state.borrow().ledger.open(), 0);
        assert!(!pool.full(), "both slots free");
    })
    .await;
}
