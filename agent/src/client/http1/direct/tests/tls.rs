//! The loop's own pool over TLS: tickets, cut bodies, floods.

use super::*;

/// The same over TLS, where the pool reads the socket and rustls only
/// decrypts: records cut across reads, and a body that runs to the
/// close ended by the server's `close_notify`.
#[tokio::test]
async fn answers_over_tls_are_read_in_pieces() {
    local(async {
        let (uri, accepted, pool) = tls_server(every_framing(), 1).await;
        reads_every_framing(&uri, &accepted, &pool).await;
    })
    .await;
}

/// A TLS 1.3 server sends its session tickets after the handshake,
/// which reach a connection opened ahead while it is idle: they are
/// the session's, not bytes nobody asked for, and the connection stays
/// for the requests. Bytes that are not TLS at all are a `tls` error.
#[tokio::test]
async fn a_tls_connection_outlives_its_tickets_and_fails_on_garbage() {
    local(async {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (uri, accepted, pool) = tls_server(vec![reply(&[ok]); 3], 1).await;
        pool.open_ahead(1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut done = Vec::new();
        pool.drive(Instant::now(), &mut done);
        assert!(done.is_empty());
        for n in 0..3 {
            pool.submit(get(&uri), Instant::now(), n, &mut done);
            let got = outcomes(&pool, 1).await;
            assert_eq!(got.len(), 1, "answer {n}");
            assert_eq!(got[0].1.outcome, Outcome::Status(200), "{n}");
            assert_eq!(got[0].1.phases.new_connection, n == 0, "{n}");
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "the tickets closed nothing"
        );

        // A server that answers in plain text under the session.
        let outcome = one_tls_exchange(move |mut tls| async move {
            let _ = tls.get_mut().0.write_all(ok).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        })
        .await;
        assert_eq!(outcome, Outcome::Error(ErrorKind::Tls));
    })
    .await;
}

/// A body that runs to the close, over TLS, ends with the server's
/// `close_notify` (see [`answers_over_tls_are_read_in_pieces`]); a bare
/// FIN instead may be a cut, and is a `reset` as through the tasks.
#[tokio::test]
async fn a_tls_body_cut_by_a_bare_fin_is_a_reset() {
    local(async {
        let outcome = one_tls_exchange(|mut tls| async move {
            let _ = tls.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil").await;
            let _ = tls.flush().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            // The TCP side alone: no close_notify.
            let _ = tls.get_mut().0.shutdown().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        })
        .await;
        assert_eq!(outcome, Outcome::Error(ErrorKind::Reset));
    })
    .await;
}

/// A server that keeps sending session messages to an idle connection
/// (here 200 tickets, over 10 KiB) would hold the worker in its reads:
/// the connection is closed after a few full ones, and the next request
/// opens another. (rustls itself refuses a flight of over 64 KiB.)
#[tokio::test]
async fn an_idle_tls_connection_flooded_by_the_server_is_closed() {
    local(async {
        let (acceptor, trust) = tls_pair_sending(200);
        let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (port, accepted) = serve(vec![reply(&[ok])], Some(acceptor)).await;
        let uri: Uri = format!("https://localhost:{port}/").parse().unwrap();
        let pool = pool_with(&uri, 1, Duration::from_secs(5), trust);
        pool.open_ahead(1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut done = Vec::new();
        pool.drive(Instant::now(), &mut done);
        assert!(!pool.full(), "the flooded connection gave its slot back");
        pool.submit(get(&uri), Instant::now(), 1, &mut done);
        let got = outcomes(&pool, 1).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.outcome, Outcome::Status(200));
        assert!(got[0].1.phases.new_connection);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    })
    .await;
}
