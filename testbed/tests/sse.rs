//! The testbed's event streams, end to end over raw sockets: periodic
//! events with a send time, a broadcast with one id for every stream,
//! streams ended by `--sse-drop-after`, `Last-Event-ID` resuming the id
//! sequence with the missed broadcasts, and `GET /__stats/sse` agreeing
//! with what the clients read. Every read has a timeout; the child is
//! killed through its own handle.

mod common;

use common::{Testbed, PATIENCE};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{SystemTime, UNIX_EPOCH};

impl Testbed {
    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect_timeout(&self.addr, PATIENCE).expect("connecting");
        s.set_read_timeout(Some(PATIENCE)).expect("read timeout");
        s
    }

    /// A whole short response (Connection: close), as text.
    fn call(&self, method: &str, path: &str) -> String {
        let mut s = self.connect();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .expect("writing");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("reading");
        text
    }

    fn stats(&self) -> Vec<(String, String)> {
        let text = self.call("GET", "/__stats/sse");
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
        body.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn stat(&self, name: &str) -> u64 {
        self.stats()
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the stats"))
    }

    /// Opens a stream; `last` is sent as Last-Event-ID.
    fn subscribe(&self, last: Option<u64>) -> BufReader<TcpStream> {
        let mut s = self.connect();
        let resume = last.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            s,
            "GET /sse HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n{resume}\r\n"
        )
        .expect("writing");
        let mut reader = BufReader::new(s);
        let mut head = String::new();
        for _ in 0..20 {
            let mut line = String::new();
            reader.read_line(&mut line).expect("reading the head");
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("content-type: text/event-stream"), "{head}");
        reader
    }
}

/// One event as the stream carried it.
#[derive(Debug)]
struct Event {
    id: u64,
    kind: String,
    sent_us: i64,
}

/// Reads events (chunked framing stripped by looking only at field lines)
/// until `n` were read or the stream ended; `None` marks the end.
fn read_events(reader: &mut BufReader<TcpStream>, n: usize) -> (Vec<Event>, bool) {
    let mut events = Vec::new();
    let (mut id, mut kind, mut sent_us) = (None, String::new(), None);
    while events.len() < n {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => return (events, true),
            Ok(_) => {}
            Err(e) => panic!("reading the stream: {e}"),
        }
        let line = line.trim_end();
        if line == "0" {
            // The last chunk: the server ended the stream.
            return (events, true);
        }
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.parse().ok();
        } else if let Some(v) = line.strip_prefix("event: ") {
            kind = v.to_owned();
        } else if let Some(v) = line.strip_prefix("data: ") {
            let at = v.find("\"sent_us\":").expect("a send time") + 10;
            let digits: String = v[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
            sent_us = digits.parse().ok();
        } else if line.is_empty() {
            if let (Some(i), Some(t)) = (id.take(), sent_us.take()) {
                events.push(Event {
                    id: i,
                    kind: std::mem::take(&mut kind),
                    sent_us: t,
                });
            }
        }
    }
    (events, false)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[test]
fn ticks_broadcasts_and_stats_agree() {
    let tb = Testbed::start(&["--sse-interval", "100ms"]);
    let mut a = tb.subscribe(None);
    let mut b = tb.subscribe(None);
    let (first, _) = read_events(&mut a, 2);
    assert!(first.iter().all(|e| e.kind == "tick"), "{first:?}");
    assert!(first[0].id < first[1].id, "ids rise: {first:?}");
    let sent = first[1].sent_us;
    assert!(
        (now_us() - sent).abs() < 5_000_000,
        "send time is the wall clock"
    );

    let reply = tb.call("POST", "/broadcast");
    assert!(reply.contains("subscribers 2"), "{reply}");
    let find = |r: &mut BufReader<TcpStream>| {
        let (events, _) = read_events(r, 20);
        events
            .into_iter()
            .find(|e| e.kind == "broadcast")
            .expect("the broadcast")
    };
    let (ba, bb) = (find(&mut a), find(&mut b));
    assert_eq!(ba.id, bb.id, "one id for every subscriber");
    drop((a, b));

    assert_eq!(tb.stat("broadcasts"), 1);
    assert_eq!(tb.stat("broadcast_events"), 2);
    assert_eq!(tb.stat("streams_opened"), 2);
    assert!(tb.stat("tick_events") >= 4);
    assert_eq!(
        tb.stat("events"),
        tb.stat("tick_events") + tb.stat("broadcast_events") + tb.stat("replayed_events")
    );
}

#[test]
fn drop_after_ends_streams_and_last_event_id_resumes() {
    let tb = Testbed::start(&[
        "--sse-interval",
        "100ms",
        "--sse-drop-after",
        "600ms",
        "--sse-retry",
        "50ms",
        "--clock-skew",
        "-300ms",
    ]);
    let mut a = tb.subscribe(None);
    let (events, ended) = read_events(&mut a, 100);
    assert!(ended, "the stream was ended by the server");
    assert!((3..=7).contains(&events.len()), "{events:?}");
    let skew = now_us() - events.last().map_or(0, |e| e.sent_us);
    assert!(
        skew >= 300_000,
        "the send time runs 300 ms behind: {skew} µs"
    );
    let last = events.last().map_or(0, |e| e.id);

    // A broadcast while nobody listens, then a reconnect after it.
    assert!(tb.call("POST", "/broadcast").contains("subscribers 0"));
    let mut again = tb.subscribe(Some(last));
    let (resumed, _) = read_events(&mut again, 2);
    assert_eq!(resumed[0].kind, "broadcast", "the missed broadcast first");
    assert!(
        resumed.iter().all(|e| e.id > last),
        "{resumed:?} after {last}"
    );
    drop(again);
    assert_eq!(tb.stat("streams_resumed"), 1);
    assert_eq!(tb.stat("replayed_events"), 1);
    assert!(tb.stat("streams_dropped") >= 1);
}
