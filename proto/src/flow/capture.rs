//! Captures: the values a flow step takes from its answer for later
//! steps' `{{NAME}}` placeholders.

use std::fmt;

use http::HeaderName;
use serde_json::Value;

use super::path::JsonPath;
use super::{bounded, quoted, Answer, FlowError};
use crate::bounds::{MAX_CAPTURE_VALUE_BYTES, MAX_REGEX_COMPILED_BYTES};

/// A parsed capture expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `json.PATH`
    Json(JsonPath),
    /// `header.NAME`: the first value.
    Header(HeaderName),
    /// `regex "PATTERN"` on the body.
    Regex(Pattern),
    /// `cookie.NAME` from the answer's `Set-Cookie` headers.
    Cookie(String),
}

/// A compiled regex that compares by its pattern, so captures compare.
#[derive(Debug, Clone)]
struct Pattern(regex::bytes::Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Pattern {}

impl Capture {
    /// Parses `json.PATH`, `header.NAME`, `regex "PATTERN"` or
    /// `cookie.NAME`. The pattern is taken as written between the outer
    /// quotes (no escapes), and compiled here, so a plan with a bad or
    /// oversized regex is refused before the run.
    pub fn parse(expr: &str) -> Result<Self, FlowError> {
        let e = bounded(expr)?;
        let kind = if let Some(rest) = e
            .strip_prefix("json")
            .filter(|r| r.is_empty() || r.starts_with(['.', '[']))
        {
            Kind::Json(JsonPath::parse(rest, expr)?)
        } else if let Some(name) = e.strip_prefix("header.") {
            Kind::Header(header_name(name, expr)?)
        } else if let Some(name) = e.strip_prefix("cookie.") {
            Kind::Cookie(cookie_name(name, expr)?.to_string())
        } else if let Some(rest) = e
            .strip_prefix("regex")
            .filter(|r| r.starts_with(char::is_whitespace))
        {
            Kind::Regex(compile(quoted(rest.trim_start(), expr)?, expr)?)
        } else {
            return Err(FlowError::UnknownCapture(expr.to_string()));
        };
        Ok(Self { kind })
    }

    /// The captured value, or `None` when the answer does not have it. A
    /// JSON string gives its contents, a number or boolean its JSON text,
    /// an object or array its compact JSON; `null` gives `None`. So does a
    /// value longer than [`MAX_CAPTURE_VALUE_BYTES`]: it is refused, not
    /// cut, since a cut token or id would only fail later and less clearly.
    /// Header, cookie and regex values that are not UTF-8 are `None` too.
    pub fn extract(&self, answer: &Answer<'_>) -> Option<String> {
        let fits = |len: usize| len <= MAX_CAPTURE_VALUE_BYTES;
        let value = match &self.kind {
            Kind::Json(path) => json_text(path.lookup(answer.json()?)?)?,
            Kind::Header(name) => {
                let v = answer.headers.get(name)?.as_bytes();
                std::str::from_utf8(v)
                    .ok()
                    .filter(|v| fits(v.len()))?
                    .to_string()
            }
            Kind::Regex(Pattern(re)) => {
                let caps = re.captures(answer.body)?;
                // A pattern with a group captures the group, even when the
                // group took no part in the match: then there is no value.
                let m = if re.captures_len() > 1 {
                    caps.get(1)
                } else {
                    caps.get(0)
                }?;
                let v = m.as_bytes();
                std::str::from_utf8(v)
                    .ok()
                    .filter(|v| fits(v.len()))?
                    .to_string()
            }
            Kind::Cookie(name) => set_cookie(answer.headers, name)?.to_string(),
        };
        fits(value.len()).then_some(value)
    }
}

impl std::str::FromStr for Capture {
    type Err = FlowError;

    fn from_str(expr: &str) -> Result<Self, FlowError> {
        Self::parse(expr)
    }
}

impl fmt::Display for Capture {
    /// The canonical text, which parses back to the same capture.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Json(path) => write!(f, "{path}"),
            Kind::Header(name) => write!(f, "header.{name}"),
            Kind::Regex(Pattern(re)) => write!(f, "regex \"{}\"", re.as_str()),
            Kind::Cookie(name) => write!(f, "cookie.{name}"),
        }
    }
}

/// A JSON value as a template pastes it.
fn json_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => {
            serde_json::to_string(v).ok()
        }
    }
}

/// A header name as `header.NAME` writes it; matched case-insensitively
/// because the name is kept lowercase.
pub(super) fn header_name(name: &str, expr: &str) -> Result<HeaderName, FlowError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| FlowError::BadHeader(expr.to_string()))
}

/// A cookie name: an HTTP token (RFC 6265 section 4.1.1).
fn cookie_name<'n>(name: &'n str, expr: &str) -> Result<&'n str, FlowError> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(FlowError::BadCookie(expr.to_string()));
    }
    Ok(name)
}

/// The value the answer's `Set-Cookie` headers give cookie `name`; the
/// last one wins, as it would in a browser's jar.
fn set_cookie<'h>(headers: &'h http::HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .rev()
        .find_map(|v| {
            let pair = std::str::from_utf8(v.as_bytes()).ok()?.split(';').next()?;
            let (n, value) = pair.split_once('=')?;
            (n.trim() == name).then_some(value.trim())
        })
}

/// Compiles a capture regex within [`MAX_REGEX_COMPILED_BYTES`]. The regex
/// crate matches in time linear in the body, whatever the pattern.
fn compile(pattern: &str, expr: &str) -> Result<Pattern, FlowError> {
    regex::bytes::RegexBuilder::new(pattern)
        .size_limit(MAX_REGEX_COMPILED_BYTES)
        .dfa_size_limit(MAX_REGEX_COMPILED_BYTES)
        .build()
        .map(Pattern)
        .map_err(|e| FlowError::BadRegex {
            expr: expr.to_string(),
            reason: e
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn take(expr: &str, headers: &http::HeaderMap, body: &[u8]) -> Option<String> {
        Capture::parse(expr)
            .unwrap()
            .extract(&Answer::new(200, headers, body))
    }

    const ORDER: &[u8] = br#"{"order": {"id": 42, "ref": "A-7", "paid": true, "note": null,
        "lines": [1, 2]}, "items": [{"sku": "x1"}], "token": "t0k"}"#;

    #[test]
    fn json_values_come_as_a_template_pastes_them() {
        let h = headers(&[]);
        assert_eq!(take("json.token", &h, ORDER).as_deref(), Some("t0k"));
        assert_eq!(take("json.order.id", &h, ORDER).as_deref(), Some("42"));
        assert_eq!(take("json.order.ref", &h, ORDER).as_deref(), Some("A-7"));
        assert_eq!(take("json.order.paid", &h, ORDER).as_deref(), Some("true"));
        assert_eq!(take("json.items[0].sku", &h, ORDER).as_deref(), Some("x1"));
        assert_eq!(
            take("json.order.lines", &h, ORDER).as_deref(),
            Some("[1,2]")
        );
        assert_eq!(
            take("json.items[0]", &h, ORDER).as_deref(),
            Some(r#"{"sku":"x1"}"#)
        );
        assert_eq!(take("json.order.note", &h, ORDER), None);
        assert_eq!(take("json.order.missing", &h, ORDER), None);
        assert_eq!(take("json.token", &h, b"token=t0k"), None);
    }

    #[test]
    fn headers_match_any_case_and_give_the_first_value() {
        let h = headers(&[("x-request-id", "r1"), ("x-request-id", "r2")]);
        assert_eq!(take("header.X-Request-ID", &h, b"").as_deref(), Some("r1"));
        assert_eq!(take("header.etag", &h, b""), None);
    }

    #[test]
    fn regex_takes_the_first_group_or_the_whole_match() {
        let h = headers(&[]);
        let body = br#"<input name="csrf" value="abc123"> id=77"#;
        assert_eq!(
            take(r#"regex "value="([a-z0-9]+)"""#, &h, body).as_deref(),
            Some("abc123")
        );
        assert_eq!(
            take(r#"regex "id=\d+""#, &h, body).as_deref(),
            Some("id=77")
        );
        assert_eq!(take(r#"regex "(x)?id""#, &h, body), None);
        assert_eq!(take(r#"regex "nope(.)""#, &h, body), None);
        assert_eq!(take(r#"regex "(.)""#, &h, &[0xff, 0xfe]), None);
    }

    #[test]
    fn cookies_come_from_set_cookie_and_the_last_wins() {
        let h = headers(&[
            ("set-cookie", "sid=one; Path=/; HttpOnly"),
            ("set-cookie", "theme = dark"),
            ("set-cookie", "sid=two; Secure"),
            ("set-cookie", "broken"),
        ]);
        assert_eq!(take("cookie.sid", &h, b"").as_deref(), Some("two"));
        assert_eq!(take("cookie.theme", &h, b"").as_deref(), Some("dark"));
        assert_eq!(take("cookie.SID", &h, b""), None);
        assert_eq!(take("cookie.none", &h, b""), None);
    }

    #[test]
    fn values_past_the_bound_are_refused() {
        let big = "v".repeat(MAX_CAPTURE_VALUE_BYTES + 1);
        let fit = "v".repeat(MAX_CAPTURE_VALUE_BYTES);
        for (value, kept) in [(&big, false), (&fit, true)] {
            let body = format!(r#"{{"t": "{value}"}}"#);
            let h = headers(&[("x-t", value), ("set-cookie", &format!("t={value}"))]);
            for expr in ["json.t", "header.x-t", "cookie.t", r#"regex "v+""#] {
                let got = take(expr, &h, body.as_bytes());
                assert_eq!(got.is_some(), kept, "{expr} {}", value.len());
            }
        }
    }

    #[test]
    fn canonical_text_parses_back() {
        for (text, canonical) in [
            ("json.a[0].b", "json.a[0].b"),
            (" header.X-Id ", "header.x-id"),
            ("regex   \"a\"b\"", "regex \"a\"b\""),
            ("cookie.sid", "cookie.sid"),
            ("json", "json"),
        ] {
            let c = Capture::parse(text).unwrap();
            assert_eq!(c.to_string(), canonical);
            assert_eq!(Capture::parse(canonical), Ok(c));
        }
    }

    #[test]
    fn bad_captures_name_the_fix() {
        let e = Capture::parse("jsn.token").unwrap_err().to_string();
        assert_eq!(
            e,
            r#"unknown capture "jsn.token": use json.PATH, header.NAME, regex "PATTERN" or cookie.NAME"#
        );
        for (expr, says) in [
            ("jsonx", "unknown capture"),
            ("regex", "unknown capture"),
            ("", "unknown capture"),
            ("json.a[", "bad JSON path"),
            ("header.a b", "bad header name"),
            ("header.", "bad header name"),
            ("cookie.a;b", "bad cookie name"),
            ("cookie.", "bad cookie name"),
            ("regex abc", "double quotes"),
            ("regex \"(\"", "bad regex"),
            ("regex \"\\w{1000}{1000}\"", "bad regex"),
        ] {
            let e = Capture::parse(expr).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains(&format!("{expr:?}")),
                "{expr}: {e}"
            );
        }
    }

    #[test]
    fn a_backtracking_pattern_runs_in_linear_time() {
        let mut body = vec![b'a'; 100 * 1024];
        body.push(b'b');
        let c = Capture::parse(r#"regex "(a+)+$""#).unwrap();
        let started = Instant::now();
        assert_eq!(c.extract(&Answer::new(200, &headers(&[]), &body)), None);
        // Generous: a backtracking engine would take longer than the
        // universe's age; the regex crate takes milliseconds.
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
