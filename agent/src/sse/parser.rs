//! The `text/event-stream` format, as the HTML standard's "event stream
//! interpretation" defines it, fed with whatever chunks the network gives.
//!
//! The parser is incremental: a line, a field or a CRLF pair split across two
//! reads gives the same events as the whole stream at once (the property
//! tests check that for every split). It allocates only while an event is
//! larger than any before it on the same stream: the line, data, type and id
//! buffers are kept and reused, so a held stream of small events costs no
//! allocation per event.

/// Longest line (and longest data of one event) the parser holds, so a
/// stream that never ends a line cannot grow the agent without bound.
pub(crate) const MAX_EVENT_BYTES: usize = 256 * 1024;

/// What the stream said, as the parser reads it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Item<'a> {
    /// A dispatched event.
    Event(Event<'a>),
    /// A comment line (`:` first), the usual keep-alive.
    Comment,
    /// A valid `retry:` field: the reconnection time in milliseconds.
    Retry(u64),
}

/// One dispatched event; the slices live until the next call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Event<'a> {
    /// The last event ID after this event (an `id:` sticks to later events
    /// until another `id:` replaces it).
    pub id: &'a [u8],
    /// Whether this event had an `id:` field of its own.
    pub has_id: bool,
    /// The event type; empty means the default, `message`.
    pub kind: &'a [u8],
    /// The data lines joined by LF, without the final LF.
    pub data: &'a [u8],
}

/// The stream broke the parser's size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event-stream line or event is longer than {MAX_EVENT_BYTES} bytes")]
pub(crate) struct TooLarge;

/// Incremental event-stream parser of one connection.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// The incomplete line carried over from the previous chunk.
    line: Vec<u8>,
    /// The previous chunk ended in CR: an LF starting this one is its pair.
    after_cr: bool,
    /// Still at the very start, where a byte-order mark is skipped.
    started: bool,
    data: Vec<u8>,
    kind: Vec<u8>,
    /// The last event ID buffer, which `id:` sets at once.
    id: Vec<u8>,
    /// The last event ID string, taken from the buffer at each dispatch:
    /// what a reconnect sends.
    dispatched_id: Vec<u8>,
    has_id: bool,
}

impl Parser {
    /// A parser for a new connection. The last event ID starts empty; the
    /// caller keeps it across reconnects (to send as `Last-Event-ID`).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The last event ID: what a reconnect sends as `Last-Event-ID`.
    pub(crate) fn last_id(&self) -> &[u8] {
        &self.dispatched_id
    }

    /// Starts reading a new connection of the same subscription: anything
    /// half-read is dropped (an event cut off by the end of a stream is
    /// never dispatched), the last event ID is kept.
    pub(crate) fn reconnect(&mut self) {
        self.line.clear();
        self.data.clear();
        self.kind.clear();
        self.after_cr = false;
        self.started = false;
        self.has_id = false;
        self.id.clear();
        self.id.extend_from_slice(&self.dispatched_id);
    }

    /// Feeds the next bytes of the stream, calling `on` for each item they
    /// complete, in order.
    pub(crate) fn feed(
        &mut self,
        chunk: &[u8],
        mut on: impl FnMut(Item<'_>),
    ) -> Result<(), TooLarge> {
        if !self.started {
            // The BOM may itself be split across chunks; wait for 3 bytes.
            let have = self.line.len() + chunk.len();
            if have < 3 && [0xEF, 0xBB, 0xBF].starts_with(&[&self.line[..], chunk].concat()) {
                self.line.extend_from_slice(chunk);
                return Ok(());
            }
            self.started = true;
            let mut head = std::mem::take(&mut self.line);
            head.extend_from_slice(chunk);
            let skip = if head.starts_with(&[0xEF, 0xBB, 0xBF]) {
                3
            } else {
                0
            };
            // Rare path (once per connection): parse the joined head whole.
            let result = self.feed_started(&head[skip..], &mut on);
            head.clear();
            if self.line.is_empty() {
                // Keep the allocation for later partial lines.
                self.line = head;
            }
            return result;
        }
        self.feed_started(chunk, &mut on)
    }

    fn feed_started(
        &mut self,
        mut chunk: &[u8],
        on: &mut impl FnMut(Item<'_>),
    ) -> Result<(), TooLarge> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) {
            let terminator = chunk[end];
            if self.line.is_empty() {
                self.line_done_from(&chunk[..end], on)?;
            } else {
                self.push_line(&chunk[..end])?;
                let line = std::mem::take(&mut self.line);
                let result = self.line_done_from(&line, on);
                self.line = line;
                self.line.clear();
                result?;
            }
            chunk = &chunk[end + 1..];
            if terminator == b'\r' {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.push_line(chunk)
    }

    fn push_line(&mut self, bytes: &[u8]) -> Result<(), TooLarge> {
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(TooLarge);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Interprets one complete line.
    fn line_done_from(
        &mut self,
        line: &[u8],
        on: &mut impl FnMut(Item<'_>),
    ) -> Result<(), TooLarge> {
        if line.is_empty() {
            self.dispatch(on);
            return Ok(());
        }
        if line[0] == b':' {
            on(Item::Comment);
            return Ok(());
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"event" => {
                self.kind.clear();
                self.kind.extend_from_slice(value);
            }
            b"data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(TooLarge);
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            // An id with a NUL in it is ignored, as the standard says.
            b"id" if !value.contains(&0) => {
                self.id.clear();
                self.id.extend_from_slice(value);
                self.has_id = true;
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Beyond u64 milliseconds is "never", which saturates.
                let ms = value.iter().fold(0u64, |ms, d| {
                    ms.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
                on(Item::Retry(ms));
            }
            // Unknown fields are ignored.
            _ => {}
        }
        Ok(())
    }

    /// An empty line: the event so far is complete.
    fn dispatch(&mut self, on: &mut impl FnMut(Item<'_>)) {
        let has_id = std::mem::take(&mut self.has_id);
        if self.dispatched_id != self.id {
            self.dispatched_id.clear();
            self.dispatched_id.extend_from_slice(&self.id);
        }
        if self.data.is_empty() {
            // No data field: nothing is dispatched, the type is reset (the
            // id, once set, stays).
            self.kind.clear();
            return;
        }
        self.data.pop();
        on(Item::Event(Event {
            id: &self.id,
            has_id,
            kind: &self.kind,
            data: &self.data,
        }));
        self.data.clear();
        self.kind.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An owned record of what the parser produced, for comparison.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Owned {
        Event {
            id: String,
            has_id: bool,
            kind: String,
            data: String,
        },
        Comment,
        Retry(u64),
    }

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<Owned> {
        let mut parser = Parser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser
                .feed(chunk, |item| {
                    out.push(match item {
                        Item::Event(e) => Owned::Event {
                            id: String::from_utf8_lossy(e.id).into_owned(),
                            has_id: e.has_id,
                            kind: String::from_utf8_lossy(e.kind).into_owned(),
                            data: String::from_utf8_lossy(e.data).into_owned(),
                        },
                        Item::Comment => Owned::Comment,
                        Item::Retry(ms) => Owned::Retry(ms),
                    })
                })
                .unwrap();
        }
        out
    }

    fn event(id: &str, has_id: bool, kind: &str, data: &str) -> Owned {
        Owned::Event {
            id: id.into(),
            has_id,
            kind: kind.into(),
            data: data.into(),
        }
    }

    #[test]
    fn fields_and_multi_line_data() {
        let got = parse_chunks(&[
            b": hello\nretry: 1500\nid: 7\nevent: tick\ndata: a\ndata:b\ndata\n\ndata: next\n\n",
        ]);
        assert_eq!(
            got,
            vec![
                Owned::Comment,
                Owned::Retry(1500),
                event("7", true, "tick", "a\nb\n"),
                // The id sticks; the type does not.
                event("7", false, "", "next"),
            ]
        );
    }

    #[test]
    fn every_line_ending() {
        let lf = parse_chunks(&[b"id: 1\ndata: x\n\n"]);
        assert_eq!(parse_chunks(&[b"id: 1\r\ndata: x\r\n\r\n"]), lf);
        assert_eq!(parse_chunks(&[b"id: 1\rdata: x\r\r"]), lf);
        // A CR then an LF in the next chunk is one line ending, not two.
        assert_eq!(
            parse_chunks(&[b"id: 1\r", b"\ndata: x\r", b"\n\r", b"\n"]),
            lf
        );
    }

    #[test]
    fn what_is_ignored() {
        let got = parse_chunks(&[b"data: only type\nevent: x\n\n\
              event: lonely\n\n\
              id: a\0b\nretry: 12x\nretry:\nfoo: bar\ndata: y\n\n\
              data: no end"]);
        assert_eq!(
            got,
            vec![
                event("", false, "x", "only type"),
                event("", false, "", "y")
            ]
        );
    }

    #[test]
    fn byte_order_mark_is_skipped_even_when_split() {
        let want = vec![event("", false, "", "x")];
        assert_eq!(parse_chunks(&[b"\xEF\xBB\xBFdata: x\n\n"]), want);
        assert_eq!(parse_chunks(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]), want);
        assert_eq!(parse_chunks(&[b"d", b"ata: x\n\n"]), want);
    }

    #[test]
    fn reconnect_keeps_only_the_dispatched_id() {
        let mut parser = Parser::new();
        parser
            .feed(b"id: 3\ndata: a\n\nid: 4\ndata: cut", |_| {})
            .unwrap();
        assert_eq!(parser.last_id(), b"3");
        parser.reconnect();
        let mut got = Vec::new();
        parser
            .feed(b"data: b\n\n", |item| {
                if let Item::Event(e) = item {
                    got.push((e.id.to_vec(), e.data.to_vec()));
                }
            })
            .unwrap();
        assert_eq!(got, vec![(b"3".to_vec(), b"b".to_vec())]);
    }

    #[test]
    fn oversized_line_is_an_error() {
        let mut parser = Parser::new();
        let long = vec![b'a'; MAX_EVENT_BYTES + 1];
        assert_eq!(parser.feed(&long, |_| {}), Err(TooLarge));
    }

    #[test]
    fn empty_id_resets_the_last_event_id() {
        let got = parse_chunks(&[b"id: 5\ndata: a\n\nid\ndata: b\n\n"]);
        assert_eq!(
            got,
            vec![event("5", true, "", "a"), event("", true, "", "b")]
        );
    }

    /// A stream built from arbitrary fields with arbitrary line endings.
    fn stream() -> impl Strategy<Value = Vec<u8>> {
        let ending = prop_oneof![Just("\n"), Just("\r"), Just("\r\n")];
        let line = prop_oneof![
            "[a-z0-9 ]{0,6}".prop_map(|v| format!("data: {v}")),
            "[a-z0-9]{0,3}".prop_map(|v| format!("id:{v}")),
            "[a-z]{0,4}".prop_map(|v| format!("event: {v}")),
            "[0-9]{1,4}".prop_map(|v| format!("retry: {v}")),
            "[a-z ]{0,5}".prop_map(|v| format!(":{v}")),
            Just(String::new()),
            Just("data".to_string()),
        ];
        proptest::collection::vec((line, ending), 0..40).prop_map(|lines| {
            let mut bytes = Vec::new();
            for (line, ending) in lines {
                bytes.extend_from_slice(line.as_bytes());
                bytes.extend_from_slice(ending.as_bytes());
            }
            bytes
        })
    }

    /// Splits `bytes` at the given cut points (sorted, deduplicated).
    fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut chunks = Vec::new();
        let mut from = 0;
        for cut in cuts {
            chunks.push(&bytes[from..cut]);
            from = cut;
        }
        chunks.push(&bytes[from..]);
        chunks
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_items(
            bytes in stream(),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            let whole = parse_chunks(&[&bytes]);
            let chunks = split(&bytes, &cuts);
            prop_assert_eq!(parse_chunks(&chunks), whole.clone());
            // Byte by byte, the most partial of all.
            let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
            prop_assert_eq!(parse_chunks(&bytewise), whole);
        }

        #[test]
        fn line_endings_do_not_matter(bytes in stream()) {
            // Normalise every ending to LF and compare.
            let text = String::from_utf8(bytes.clone()).unwrap();
            let lf = text.replace("\r\n", "\n").replace('\r', "\n");
            prop_assert_eq!(parse_chunks(&[&bytes]), parse_chunks(&[lf.as_bytes()]));
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let mut parser = Parser::new();
            for chunk in split(&bytes, &cuts) {
                let _ = parser.feed(chunk, |_| {});
            }
        }
    }
}
