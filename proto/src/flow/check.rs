//! Checks: what a flow step requires of its answer for the step to pass.

use std::fmt;

use http::HeaderName;
use serde_json::Value;

use super::answer::json_value;
use super::capture::header_name;
use super::path::JsonPath;
use super::{bounded, quoted, Answer, FlowError};

/// A parsed check expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `status == N`, `status != N`
    Status(Op, u16),
    /// `status in A..B`, both ends included.
    StatusIn(u16, u16),
    /// `json.PATH exists`: present, even if `null`.
    JsonExists(JsonPath),
    /// `json.PATH == VALUE`, `json.PATH != VALUE`
    Json(JsonPath, Op, Value),
    /// `body contains "TEXT"`
    BodyContains(String),
    /// `header.NAME == "TEXT"`, `header.NAME != "TEXT"`
    Header(HeaderName, Op, String),
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
}

impl Op {
    fn parse(op: &str) -> Option<Self> {
        match op {
            "==" => Some(Self::Eq),
            "!=" => Some(Self::Ne),
            _ => None,
        }
    }

    fn apply(self, equal: bool) -> bool {
        match self {
            Self::Eq => equal,
            Self::Ne => !equal,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Eq => "==",
            Self::Ne => "!=",
        })
    }
}

impl Check {
    /// Parses one of the check forms: `status == N`, `status != N`,
    /// `status in A..B`, `json.PATH exists`, `json.PATH == VALUE`,
    /// `json.PATH != VALUE` (VALUE a JSON literal), `body contains "TEXT"`,
    /// `header.NAME == "TEXT"`, `header.NAME != "TEXT"`. Quoted text is
    /// taken as written between the outer quotes, without escapes.
    pub fn parse(expr: &str) -> Result<Self, FlowError> {
        let e = bounded(expr)?;
        let unknown = || FlowError::UnknownCheck(expr.to_string());
        // The subject ends where an operator may start, so `status==200`
        // reads as `status == 200`.
        let end = e
            .find(|c: char| c.is_whitespace() || c == '=' || c == '!')
            .unwrap_or(e.len());
        let (subject, rest) = (&e[..end], e[end..].trim_start());
        let (op, operand) = match ["==", "!="].iter().find(|op| rest.starts_with(**op)) {
            Some(op) => (*op, rest[op.len()..].trim_start()),
            None => rest
                .split_once(char::is_whitespace)
                .map_or((rest, ""), |(w, r)| (w, r.trim_start())),
        };
        let kind = if let Some(path) = subject
            .strip_prefix("json")
            .filter(|r| r.is_empty() || r.starts_with(['.', '[']))
        {
            let path = JsonPath::parse(path, expr)?;
            match (op, Op::parse(op)) {
                ("exists", _) if operand.is_empty() => Kind::JsonExists(path),
                (_, Some(op)) => Kind::Json(path, op, literal(operand, expr)?),
                _ => return Err(unknown()),
            }
        } else if let Some(name) = subject.strip_prefix("header.") {
            let op = Op::parse(op).ok_or_else(unknown)?;
            Kind::Header(
                header_name(name, expr)?,
                op,
                quoted(operand, expr)?.to_string(),
            )
        } else {
            match (subject, op) {
                ("status", "in") => {
                    let (lo, hi) = status_range(operand, expr)?;
                    Kind::StatusIn(lo, hi)
                }
                ("status", _) => {
                    Kind::Status(Op::parse(op).ok_or_else(unknown)?, status(operand, expr)?)
                }
                ("body", "contains") => Kind::BodyContains(quoted(operand, expr)?.to_string()),
                _ => return Err(unknown()),
            }
        };
        Ok(Self { kind })
    }

    /// True when the answer passes. A JSON check on a body that is not
    /// JSON, or whose path is missing, does not hold, `!=` included; a
    /// header `!=` holds when no value of the header is the text (so also
    /// when the header is missing).
    pub fn holds(&self, answer: &Answer<'_>) -> bool {
        let at = |path: &JsonPath| answer.json().and_then(|j| path.lookup(j));
        match &self.kind {
            Kind::Status(op, code) => op.apply(answer.status == *code),
            Kind::StatusIn(lo, hi) => (*lo..=*hi).contains(&answer.status),
            Kind::JsonExists(path) => at(path).is_some(),
            Kind::Json(path, op, value) => at(path).is_some_and(|v| op.apply(json_eq(v, value))),
            Kind::BodyContains(text) => {
                memchr::memmem::find(answer.body, text.as_bytes()).is_some()
            }
            Kind::Header(name, op, text) => op.apply(
                answer
                    .headers
                    .get_all(name)
                    .iter()
                    .any(|v| v.as_bytes() == text.as_bytes()),
            ),
        }
    }

    /// The canonical text, which parses back to the same check: how a
    /// report names the check that failed.
    pub fn text(&self) -> String {
        self.to_string()
    }
}

impl std::str::FromStr for Check {
    type Err = FlowError;

    fn from_str(expr: &str) -> Result<Self, FlowError> {
        Self::parse(expr)
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Status(op, code) => write!(f, "status {op} {code}"),
            Kind::StatusIn(lo, hi) => write!(f, "status in {lo}..{hi}"),
            Kind::JsonExists(path) => write!(f, "{path} exists"),
            Kind::Json(path, op, value) => write!(f, "{path} {op} {value}"),
            Kind::BodyContains(text) => write!(f, "body contains \"{text}\""),
            Kind::Header(name, op, text) => write!(f, "header.{name} {op} \"{text}\""),
        }
    }
}

/// A status code as HTTP has them: three digits.
fn status(text: &str, expr: &str) -> Result<u16, FlowError> {
    text.parse()
        .ok()
        .filter(|code| (100..=999).contains(code))
        .ok_or_else(|| FlowError::BadStatus {
            expr: expr.to_string(),
            problem: format!("{text:?} is not a status from 100 to 999"),
        })
}

/// `A..B`, both ends included and in order.
fn status_range(text: &str, expr: &str) -> Result<(u16, u16), FlowError> {
    let bad = |problem| FlowError::BadStatus {
        expr: expr.to_string(),
        problem,
    };
    let (lo, hi) = text
        .split_once("..")
        .ok_or_else(|| bad(format!("{text:?} is not a range A..B")))?;
    let (lo, hi) = (status(lo.trim(), expr)?, status(hi.trim(), expr)?);
    if lo > hi {
        return Err(bad(format!("the range {lo}..{hi} is empty")));
    }
    Ok((lo, hi))
}

/// A check's JSON literal, held to the same depth bound as a body.
fn literal(text: &str, expr: &str) -> Result<Value, FlowError> {
    json_value(text.as_bytes()).map_err(|reason| FlowError::BadValue {
        expr: expr.to_string(),
        reason,
    })
}

/// JSON equality, except that numbers compare by value when either is a
/// float, so `json.total == 3` holds for a body's `3.0`.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            x.as_f64() == y.as_f64()
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_str(value).unwrap());
        }
        map
    }

    const PAID: &[u8] =
        br#"{"state": "paid", "total": 3.0, "count": 3, "items": [{"sku": "a"}], "note": null}"#;

    fn holds(expr: &str, status: u16, h: &http::HeaderMap, body: &[u8]) -> bool {
        Check::parse(expr)
            .unwrap()
            .holds(&Answer::new(status, h, body))
    }

    #[test]
    fn status_checks() {
        let h = headers(&[]);
        assert!(holds("status == 200", 200, &h, b""));
        assert!(holds("status==201", 201, &h, b""));
        assert!(!holds("status == 200", 201, &h, b""));
        assert!(holds("status != 500", 200, &h, b""));
        assert!(!holds("status != 500", 500, &h, b""));
        assert!(holds("status in 200..299", 200, &h, b""));
        assert!(holds("status in 200..299", 299, &h, b""));
        assert!(!holds("status in 200..299", 300, &h, b""));
        assert!(!holds("status in 200..299", 199, &h, b""));
    }

    #[test]
    fn json_checks() {
        let h = headers(&[]);
        for (expr, want) in [
            ("json.state exists", true),
            ("json.note exists", true),
            ("json.gone exists", false),
            ("json.items[0].sku exists", true),
            ("json.items[1] exists", false),
            (r#"json.state == "paid""#, true),
            (r#"json.state != "paid""#, false),
            (r#"json.state == "due""#, false),
            ("json.count == 3", true),
            ("json.total == 3", true),
            ("json.count == 3.0", true),
            ("json.count == \"3\"", false),
            ("json.note == null", true),
            ("json.items[0] == {\"sku\": \"a\"}", true),
            ("json.items == [{\"sku\":\"a\"}]", true),
            ("json.gone != 1", false),
            ("json.count != 4", true),
        ] {
            assert_eq!(holds(expr, 200, &h, PAID), want, "{expr}");
        }
        for expr in [
            "json exists",
            "json.state exists",
            r#"json.state != "paid""#,
        ] {
            assert!(!holds(expr, 200, &h, b"<html>"), "{expr}");
        }
    }

    #[test]
    fn body_and_header_checks() {
        let h = headers(&[
            ("content-type", "application/json"),
            ("vary", "a"),
            ("vary", "b"),
        ]);
        assert!(holds(r#"body contains "paid""#, 200, &h, PAID));
        assert!(holds(r#"body contains """#, 200, &h, b""));
        assert!(!holds(r#"body contains "due""#, 200, &h, PAID));
        assert!(holds(
            r#"body contains "say "hi"""#,
            200,
            &h,
            br#"<say "hi">"#
        ));
        assert!(holds(
            r#"header.Content-Type == "application/json""#,
            200,
            &h,
            b""
        ));
        assert!(holds(r#"header.vary == "b""#, 200, &h, b""));
        assert!(!holds(r#"header.vary != "b""#, 200, &h, b""));
        assert!(holds(r#"header.vary != "c""#, 200, &h, b""));
        assert!(holds(r#"header.etag != "x""#, 200, &h, b""));
        assert!(!holds(r#"header.etag == "x""#, 200, &h, b""));
    }

    #[test]
    fn text_is_canonical_and_parses_back() {
        for (text, canonical) in [
            ("status==200", "status == 200"),
            ("status  !=  500", "status != 500"),
            ("status in 200 .. 299", "status in 200..299"),
            ("json.a[0] exists", "json.a[0] exists"),
            (
                "json.a ==  { \"b\" : [1, 2.5] }",
                "json.a == {\"b\":[1,2.5]}",
            ),
            ("json.s==\"paid\"", "json.s == \"paid\""),
            ("body contains \" a \"", "body contains \" a \""),
            ("header.X-Id != \"7\"", "header.x-id != \"7\""),
        ] {
            let c = Check::parse(text).unwrap();
            assert_eq!(c.text(), canonical);
            assert_eq!(Check::parse(canonical), Ok(c));
        }
    }

    #[test]
    fn bad_checks_name_the_fix() {
        let e = Check::parse("status = 200").unwrap_err().to_string();
        assert!(
            e.starts_with(r#"unknown check "status = 200": use status == N"#),
            "{e}"
        );
        for (expr, says) in [
            ("status", "unknown check"),
            ("status > 200", "unknown check"),
            ("body == \"x\"", "unknown check"),
            ("json.a", "unknown check"),
            ("json.a exists now", "unknown check"),
            ("json.a contains \"x\"", "unknown check"),
            ("header.x exists", "unknown check"),
            ("code == 200", "unknown check"),
            ("status == 20", "bad status"),
            ("status == 1000", "bad status"),
            ("status == ok", "bad status"),
            ("status in 299..200", "is empty"),
            ("status in 200", "not a range"),
            ("json.a == paid", "bad value"),
            ("json.a ==", "bad value"),
            ("json.a[x] exists", "bad JSON path"),
            ("body contains paid", "double quotes"),
            ("header.x == y", "double quotes"),
            ("header.a:b == \"y\"", "bad header name"),
        ] {
            let e = Check::parse(expr).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains(&format!("{expr:?}")),
                "{expr}: {e}"
            );
        }
        let deep = format!("json.a == {}", "[".repeat(100));
        let e = Check::parse(&deep).unwrap_err().to_string();
        assert!(e.contains("deeper than 64"), "{e}");
    }
}
