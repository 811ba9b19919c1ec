use super::head::MAX_HEADERS;
use super::*;

/// Feeds `bytes` in pieces of `step` as a connection would deliver them
/// (keeping what the reader did not use), until the response is done.
fn read_in_steps(method: &Method, bytes: &[u8], step: usize) -> (Complete, usize) {
    let mut reader = ResponseReader::new(method);
    let mut pending: Vec<u8> = Vec::new();
    let mut offset = 0; // of pending[0] in bytes
    let mut at = 0;
    loop {
        let end = (at + step).min(bytes.len());
        pending.extend_from_slice(&bytes[at..end]);
        at = end;
        match reader.feed(&pending).expect("valid response") {
            Fed::Done(n, done) => return (done, offset + n),
            Fed::More(n) => {
                pending.drain(..n);
                offset += n;
            }
        }
        if at == bytes.len() {
            let done = reader.closed().expect("complete at close");
            return (done, bytes.len());
        }
    }
}

fn every_step(method: &Method, bytes: &[u8]) -> (Complete, usize) {
    let whole = read_in_steps(method, bytes, bytes.len().max(1));
    for step in 1..bytes.len().min(40) {
        assert_eq!(read_in_steps(method, bytes, step), whole, "step {step}");
    }
    whole
}

#[test]
fn content_length_body_in_any_split() {
    let r = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
    let (done, used) = every_step(&Method::GET, r);
    assert_eq!(
        done,
        Complete {
            status: 200,
            reusable: true
        }
    );
    assert_eq!(used, r.len());
}

#[test]
fn chunked_body_with_extensions_and_trailers() {
    let r = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n\
              4;ext=1\r\nwiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nx-trailer: 1\r\n\r\n";
    let (done, used) = every_step(&Method::GET, r);
    assert_eq!(
        done,
        Complete {
            status: 201,
            reusable: true
        }
    );
    assert_eq!(used, r.len());
}

#[test]
fn connection_close_and_http10_are_not_reusable() {
    let r = b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 2\r\n\r\nok";
    assert!(!every_step(&Method::GET, r).0.reusable);
    let r = b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok";
    assert!(!every_step(&Method::GET, r).0.reusable);
    let r = b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 2\r\n\r\nok";
    assert!(every_step(&Method::GET, r).0.reusable);
    let r = b"HTTP/1.1 200 OK\r\nConnection: upgrade, close\r\ncontent-length: 0\r\n\r\n";
    assert!(!every_step(&Method::GET, r).0.reusable);
}

#[test]
fn body_until_close() {
    let r = b"HTTP/1.1 200 OK\r\n\r\nall of this until the end";
    let (done, used) = every_step(&Method::GET, r);
    assert_eq!(
        done,
        Complete {
            status: 200,
            reusable: false
        }
    );
    assert_eq!(used, r.len());
    // Closed in the middle of a framed body: truncated.
    let mut reader = ResponseReader::new(&Method::GET);
    let cut = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
    assert_eq!(reader.feed(cut), Ok(Fed::More(cut.len())));
    assert_eq!(reader.closed(), Err(WireError::Truncated));
    // Closed before any head.
    assert_eq!(
        ResponseReader::new(&Method::GET).closed(),
        Err(WireError::Truncated)
    );
}

#[test]
fn bodyless_responses() {
    for r in [
        &b"HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\n\r\n",
    ] {
        assert_eq!(
            every_step(&Method::GET, r),
            (
                Complete {
                    status: r[9..12].iter().fold(0, |a, d| a * 10 + u16::from(d - b'0')),
                    reusable: true
                },
                r.len()
            )
        );
    }
    let r = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n";
    assert_eq!(
        every_step(&Method::HEAD, r),
        (
            Complete {
                status: 200,
                reusable: true
            },
            r.len()
        )
    );
}

#[test]
fn interim_responses_are_skipped() {
    let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
              HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    assert_eq!(
        every_step(&Method::POST, r),
        (
            Complete {
                status: 200,
                reusable: true
            },
            r.len()
        )
    );
}

/// Two responses back to back in one read: the reader takes exactly the
/// first, and a fresh reader the second from where it stopped.
#[test]
fn pipelined_responses_are_taken_one_at_a_time() {
    let first = &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\none"[..];
    let second =
        &b"HTTP/1.1 503 Busy\r\ntransfer-encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n"[..];
    let both = [first, second].concat();
    let mut reader = ResponseReader::new(&Method::GET);
    let Ok(Fed::Done(n, done)) = reader.feed(&both) else {
        panic!("first response not read whole");
    };
    assert_eq!((n, done.status), (first.len(), 200));
    let mut reader = ResponseReader::new(&Method::GET);
    assert_eq!(
        reader.feed(&both[n..]),
        Ok(Fed::Done(
            second.len(),
            Complete {
                status: 503,
                reusable: true
            }
        ))
    );
}

#[test]
fn malformed_heads_and_framing_are_errors() {
    let bad: &[(&[u8], WireError)] = &[
        (
            b"HTTP/2 200 OK\r\n\r\n",
            WireError::Malformed("not HTTP/1.x"),
        ),
        (
            b"SSH-2.0-OpenSSH\r\n\r\n",
            WireError::Malformed("not HTTP/1.x"),
        ),
        (
            b"HTTP/1.1 abc OK\r\n\r\n",
            WireError::Malformed("invalid status"),
        ),
        (
            b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
            WireError::Malformed("invalid header name"),
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1x\r\n\r\n",
            WireError::BadLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            WireError::BadLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            WireError::BadLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            WireError::BadLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            WireError::BadChunk(ChunkError::SizeNotHex),
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabXY",
            WireError::BadChunk(ChunkError::DataEnd),
        ),
    ];
    for (bytes, want) in bad {
        let got = ResponseReader::new(&Method::GET).feed(bytes);
        assert_eq!(
            got.as_ref().err(),
            Some(want),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("x-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(
        ResponseReader::new(&Method::GET).feed(&many),
        Err(WireError::Malformed("too many headers"))
    );
}

#[test]
fn a_head_that_never_ends_is_refused_at_the_bound() {
    let mut head = b"HTTP/1.1 200 OK\r\nx-long: ".to_vec();
    head.resize(MAX_HEAD_BYTES + 10, b'a');
    let mut reader = ResponseReader::new(&Method::GET);
    assert_eq!(reader.feed(&head), Err(WireError::HeadTooLarge));
    let mut reader = ResponseReader::new(&Method::GET);
    assert_eq!(reader.feed(&head[..100]), Ok(Fed::More(0)));
}

#[test]
fn both_lengths_frame_by_chunks_and_forbid_reuse() {
    let r = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
    assert_eq!(
        every_step(&Method::GET, r),
        (
            Complete {
                status: 200,
                reusable: false
            },
            r.len()
        )
    );
}

fn parts(request: http::request::Builder) -> Parts {
    request.body(()).unwrap().into_parts().0
}

#[test]
fn requests_render_in_origin_form() {
    let mut out = Vec::new();
    let request =
        parts(http::Request::get("http://example.test:8080/a/b?c=1").header("x-one", "1"));
    render(&request, "example.test:8080", &Bytes::new(), &mut out);
    assert_eq!(
        out,
        b"GET /a/b?c=1 HTTP/1.1\r\nhost: example.test:8080\r\nx-one: 1\r\n\r\n"
    );
    let request = parts(http::Request::post("http://h/").header("host", "other"));
    render(&request, "h", &Bytes::from_static(b"{}"), &mut out);
    assert_eq!(
        out,
        b"POST / HTTP/1.1\r\nhost: other\r\ncontent-length: 2\r\n\r\n{}"
    );
    let request = parts(http::Request::post("http://h"));
    render(&request, "h", &Bytes::new(), &mut out);
    assert_eq!(
        out,
        b"POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n"
    );
}

/// A connection's answers read with its head memo read exactly as
/// without: the same head again is taken from the memo, a changed one
/// (another length, a close, chunked, a HEAD request) parsed afresh.
#[test]
fn a_remembered_head_reads_as_a_parsed_one() {
    let heads: [&[u8]; 5] = [
        b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 3\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 3\r\n\r\nxyz",
        b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 503 No\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    ];
    let mut memo = HeadMemo::default();
    for (i, &answer) in [0, 0, 1, 2, 2, 0, 3, 4, 4, 0]
        .map(|k| heads[k])
        .iter()
        .enumerate()
    {
        for method in [Method::GET, Method::HEAD] {
            let plain = ResponseReader::new(&method).feed(answer);
            let remembered = ResponseReader::new(&method).feed_remembering(answer, Some(&mut memo));
            assert_eq!(plain, remembered, "answer {i} to {method}");
        }
    }
    let mut reader = ResponseReader::new(&Method::GET);
    reader.feed_remembering(heads[0], Some(&mut memo)).ok();
    assert_eq!(
        memo.matches(heads[1], false).map(|h| h.len),
        Some(heads[1].len() - 3)
    );
    assert_eq!(memo.matches(heads[2], false), None);
    assert_eq!(
        memo.matches(heads[1], true),
        None,
        "a HEAD answer frames apart"
    );
}

proptest::proptest! {
    /// Whatever answers a connection gets, in whatever pieces, the memo
    /// changes nothing a reader says.
    #[test]
    fn the_head_memo_never_changes_a_reading(
        answers in proptest::collection::vec((0usize..4, 0usize..40, proptest::bool::ANY), 1..12),
    ) {
        let mut memo = HeadMemo::default();
        for (kind, len, close) in answers {
            let head = match kind {
                0 => format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n"),
                1 => "HTTP/1.1 204 No Content\r\n".to_string(),
                2 => format!("HTTP/1.0 200 OK\r\nContent-Length: {len}\r\n"),
                _ => "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n".to_string(),
            };
            let close = if close { "Connection: close\r\n" } else { "" };
            let body = "b".repeat(len);
            let bytes = format!("{head}{close}\r\n{body}");
            let plain = ResponseReader::new(&Method::GET).feed(bytes.as_bytes());
            let remembered = ResponseReader::new(&Method::GET)
                .feed_remembering(bytes.as_bytes(), Some(&mut memo));
            proptest::prop_assert_eq!(plain, remembered);
        }
    }
}

/// The head parser frames by the framing headers and hands every other
/// header to its caller once (the subscriber reads the type from them).
#[test]
fn headers_that_do_not_frame_go_to_the_caller() {
    let wire = b"HTTP/1.1 100 Continue\r\nx-interim: 1\r\n\r\n\
                 HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                 Transfer-Encoding: chunked\r\nConnection: keep-alive\r\nX-Other: 2\r\n\r\nbody";
    let mut seen = Vec::new();
    let head = parse_head(wire, false, |h| seen.push(h.name.to_string()))
        .expect("valid head")
        .expect("whole head");
    assert_eq!(seen, ["Content-Type", "X-Other"]);
    assert_eq!(head.status, 200);
    assert!(head.keep_alive);
    assert_eq!(head.len, wire.len() - 4);
    assert_eq!(parse_head(&wire[..60], false, |_| {}), Ok(None));
}
