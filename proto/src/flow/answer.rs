//! The answer a flow step's captures and checks read: status, headers and
//! the kept body, whose JSON is parsed at most once however many
//! expressions read it.

use std::cell::OnceCell;

use serde_json::Value;

use crate::bounds::{MAX_ANSWER_KEPT_BYTES, MAX_JSON_DEPTH};

/// One answer to a flow step's request.
#[derive(Debug)]
pub struct Answer<'a> {
    /// The HTTP status code.
    pub status: u16,
    /// The answer's headers (`Set-Cookie` included, for `cookie.NAME`).
    pub headers: &'a http::HeaderMap,
    /// The body as kept: at most [`MAX_ANSWER_KEPT_BYTES`].
    pub body: &'a [u8],
    /// The body as JSON, once read; `None` when it is not JSON or nests
    /// too deep.
    json: OnceCell<Option<Value>>,
}

impl<'a> Answer<'a> {
    /// An answer over `body`'s first [`MAX_ANSWER_KEPT_BYTES`]: the agent
    /// keeps no more, and cutting here too means no caller can make an
    /// expression read further.
    pub fn new(status: u16, headers: &'a http::HeaderMap, body: &'a [u8]) -> Self {
        Self {
            status,
            headers,
            body: &body[..body.len().min(MAX_ANSWER_KEPT_BYTES)],
            json: OnceCell::new(),
        }
    }

    /// The body as JSON, parsed on first use; `None` for a body that is
    /// not JSON or nests deeper than [`MAX_JSON_DEPTH`].
    pub fn json(&self) -> Option<&Value> {
        self.json.get_or_init(|| parse_json(self.body)).as_ref()
    }
}

/// Parses JSON nested at most [`MAX_JSON_DEPTH`] deep. The depth is
/// measured first, by a scan that does not recurse, so the bound is ours
/// rather than serde_json's recursion limit (128), and no deep value is
/// ever built (dropping one recurses too).
fn parse_json(bytes: &[u8]) -> Option<Value> {
    json_value(bytes).ok()
}

/// Parses JSON within [`MAX_JSON_DEPTH`], or says why not: for a body and
/// for a check's JSON literal alike.
pub(super) fn json_value(bytes: &[u8]) -> Result<Value, String> {
    if nesting(bytes) > MAX_JSON_DEPTH {
        return Err(format!("it nests deeper than {MAX_JSON_DEPTH} levels"));
    }
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// The deepest nesting of `[` and `{` outside strings. For text that is
/// not JSON the figure is meaningless but finite, and the parse that
/// follows refuses the text anyway.
fn nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_read_once_and_only_when_json() {
        let h = http::HeaderMap::new();
        let a = Answer::new(200, &h, br#"{"a": [1, "x"]}"#);
        let first: *const Value = a.json().unwrap();
        let second: *const Value = a.json().unwrap();
        assert_eq!(first, second);
        assert!(Answer::new(200, &h, b"<html>").json().is_none());
        assert!(Answer::new(200, &h, b"").json().is_none());
    }

    #[test]
    fn nesting_counts_brackets_outside_strings() {
        assert_eq!(nesting(br#"{"a":[{"b":"[[[[\"{"}]}"#), 3);
        assert_eq!(nesting(b"1"), 0);
        assert_eq!(nesting(b"]]]][["), 2);
    }

    #[test]
    fn deep_json_is_refused_without_recursing() {
        let h = http::HeaderMap::new();
        let at_bound = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        assert!(Answer::new(200, &h, at_bound.as_bytes()).json().is_some());
        let over = format!("[{at_bound}]");
        assert!(Answer::new(200, &h, over.as_bytes()).json().is_none());
        // Far past serde_json's own limit and any stack: refused by the scan.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(Answer::new(200, &h, deep.as_bytes()).json().is_none());
        let open_only = "[{\"a\":".repeat(100_000);
        assert!(Answer::new(200, &h, open_only.as_bytes()).json().is_none());
    }

    #[test]
    fn the_body_is_cut_at_the_kept_bound() {
        let h = http::HeaderMap::new();
        let body = vec![b' '; MAX_ANSWER_KEPT_BYTES + 10];
        assert_eq!(
            Answer::new(200, &h, &body).body.len(),
            MAX_ANSWER_KEPT_BYTES
        );
    }
}
