//! The expression language of flows: what a step captures from its answer
//! and what it checks about it.
//!
//! A flow is a scenario whose arrival is a user journey of steps; each
//! step's answer may be checked (`status in 200..299`, `json.state ==
//! "paid"`) and may give values (`json.order.id`, `cookie.session`) to
//! later steps' `{{NAME}}` placeholders ([`crate::template`]). The
//! coordinator parses every expression to refuse a bad plan before the run
//! and the agent parses the same text to run it, so the grammar lives here,
//! once, without I/O.
//!
//! Every expression is bounded ([`crate::bounds::MAX_EXPRESSION_BYTES`]),
//! regexes run in linear time with a bounded program, and answers are read
//! within [`crate::bounds::MAX_ANSWER_KEPT_BYTES`] and
//! [`crate::bounds::MAX_JSON_DEPTH`], so neither a plan nor a target can make
//! an agent stall or blow its stack.

mod answer;
mod capture;
mod check;
mod path;

pub use answer::Answer;
pub use capture::Capture;
pub use check::Check;

use crate::bounds::{MAX_CAPTURE_NAME_BYTES, MAX_EXPRESSION_BYTES};

/// The capture forms, for error messages.
const CAPTURE_FORMS: &str = "json.PATH, header.NAME, regex \"PATTERN\" or cookie.NAME";
/// The check forms, for error messages.
const CHECK_FORMS: &str = "status == N, status != N, status in A..B, json.PATH exists, \
     json.PATH == VALUE, json.PATH != VALUE, body contains \"TEXT\", \
     header.NAME == \"TEXT\" or header.NAME != \"TEXT\"";
/// Placeholder names a template knows without a capture.
const RESERVED_NAMES: [&str; 4] = ["seq", "agent", "random_id", "data"];

/// A capture or check expression that cannot be used, or a capture name
/// that cannot be a placeholder. Each message quotes the expression and
/// says how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// Longer than [`MAX_EXPRESSION_BYTES`]; holds the expression's start.
    #[error(
        "expression starting {0:?} is {1} bytes, more than {MAX_EXPRESSION_BYTES}; shorten it"
    )]
    TooLong(String, usize),
    /// Not one of the capture forms.
    #[error("unknown capture {0:?}: use {CAPTURE_FORMS}")]
    UnknownCapture(String),
    /// Not one of the check forms.
    #[error("unknown check {0:?}: use {CHECK_FORMS}")]
    UnknownCheck(String),
    /// A JSON path that does not parse.
    #[error(
        "bad JSON path in {expr:?}: {problem}; write json.KEY.KEY or json.KEY[INDEX], e.g. json.items[0].sku"
    )]
    BadPath {
        /// The whole expression.
        expr: String,
        /// What is wrong with the path.
        problem: String,
    },
    /// `header.NAME` where NAME is not a valid header name.
    #[error("bad header name in {0:?}: use letters, digits and -, e.g. header.x-request-id")]
    BadHeader(String),
    /// `cookie.NAME` where NAME is not a valid cookie name.
    #[error("bad cookie name in {0:?}: use letters, digits and -_., e.g. cookie.session")]
    BadCookie(String),
    /// A regex that does not compile, or compiles too large.
    #[error("bad regex in {expr:?}: {reason}")]
    BadRegex {
        /// The whole expression.
        expr: String,
        /// The regex crate's reason, on one line.
        reason: String,
    },
    /// A status or status range outside 100..=999, or reversed.
    #[error("bad status in {expr:?}: {problem}; write e.g. status == 200 or status in 200..299")]
    BadStatus {
        /// The whole expression.
        expr: String,
        /// What is wrong with the number.
        problem: String,
    },
    /// A `json.PATH == VALUE` whose VALUE is not a JSON literal.
    #[error(
        "bad value in {expr:?}: {reason}; write a JSON literal such as \"paid\", 3, true or null"
    )]
    BadValue {
        /// The whole expression.
        expr: String,
        /// Why it is not JSON.
        reason: String,
    },
    /// Text (or a regex) not between double quotes.
    #[error("{0:?} needs its text in double quotes, e.g. body contains \"ok\"")]
    Unquoted(String),
    /// A capture name unusable as a `{{NAME}}` placeholder.
    #[error(
        "capture name {0:?} {1}; use up to {MAX_CAPTURE_NAME_BYTES} letters, digits or _, \
         starting with a letter or _, other than seq, agent, random_id or data"
    )]
    BadName(String, &'static str),
}

/// Refuses an expression over [`MAX_EXPRESSION_BYTES`] before anything
/// else reads it.
fn bounded(expr: &str) -> Result<&str, FlowError> {
    if expr.len() > MAX_EXPRESSION_BYTES {
        return Err(FlowError::TooLong(
            expr.chars().take(40).collect(),
            expr.len(),
        ));
    }
    Ok(expr.trim())
}

/// The text between the outer double quotes of `s`, taken as written: no
/// escapes, so a regex keeps its backslashes and inner quotes need none.
fn quoted<'s>(s: &'s str, expr: &str) -> Result<&'s str, FlowError> {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .ok_or_else(|| FlowError::Unquoted(expr.to_string()))
}

/// Checks that `name` can be a captured value's `{{NAME}}`: a short
/// identifier that does not shadow a placeholder templates already know.
/// The coordinator calls it on every capture name of a plan.
pub fn check_capture_name(name: &str) -> Result<(), FlowError> {
    let bad = |why| Err(FlowError::BadName(name.chars().take(80).collect(), why));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_CAPTURE_NAME_BYTES {
        return bad("is too long");
    }
    if name.starts_with(|c: char| c.is_ascii_digit())
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return bad("is not an identifier");
    }
    if RESERVED_NAMES.contains(&name) {
        return bad("is a built-in placeholder");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_names_are_identifiers_that_shadow_nothing() {
        for good in ["token", "order_id", "_x", "A1"] {
            assert_eq!(check_capture_name(good), Ok(()), "{good}");
        }
        for bad in ["", "1x", "a.b", "a b", "seq", "data", "random_id", "é"] {
            let e = check_capture_name(bad).unwrap_err().to_string();
            assert!(e.contains("capture name"), "{bad}: {e}");
        }
        assert!(check_capture_name(&"x".repeat(MAX_CAPTURE_NAME_BYTES + 1)).is_err());
    }

    /// Parsed plans are shared by the agent's tasks behind an `Arc`.
    #[test]
    fn parsed_expressions_cross_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Capture>();
        shared::<Check>();
        fn sent<T: Send>() {}
        sent::<Answer<'static>>();
    }

    #[test]
    fn from_str_is_parse() {
        assert_eq!("json.a".parse::<Capture>(), Capture::parse("json.a"));
        assert_eq!(
            "status == 200".parse::<Check>(),
            Check::parse("status == 200")
        );
        assert!("nope".parse::<Check>().is_err());
    }

    #[test]
    fn every_expression_is_bounded() {
        let long = format!("json.{}", "a".repeat(MAX_EXPRESSION_BYTES));
        let e = Capture::parse(&long).unwrap_err();
        assert!(matches!(e, FlowError::TooLong(_, n) if n == long.len()));
        assert!(e.to_string().contains("shorten"), "{e}");
        let e = Check::parse(&format!("{long} exists")).unwrap_err();
        assert!(matches!(e, FlowError::TooLong(..)));
    }
}

/// Parsing and evaluation never panic, whatever the plan or the target
/// sends; what parses prints to a text that parses to the same thing.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// Fragments of expressions, so that near-misses come up often.
    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,6}",
            Just("json".to_string()),
            Just(".a".to_string()),
            Just("[0]".to_string()),
            Just("[".to_string()),
            Just("header.x-id".to_string()),
            Just("cookie.sid".to_string()),
            Just("regex ".to_string()),
            Just("status".to_string()),
            Just(" == ".to_string()),
            Just(" != ".to_string()),
            Just(" in ".to_string()),
            Just("200..299".to_string()),
            Just(" exists".to_string()),
            Just("body contains ".to_string()),
            Just("\"".to_string()),
            Just("(a+)+".to_string()),
            Just("null".to_string()),
            Just("[[[".to_string()),
        ]
    }

    fn expression() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,64}",
            prop::collection::vec(fragment(), 0..8).prop_map(|v| v.concat()),
        ]
    }

    /// Bodies that are JSON, near-JSON, or bytes.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            Just(br#"{"a":[{"b":1},"x",null,true],"c":{"d":"e"}}"#.to_vec()),
            "[\\[\\]{}\":,a0-9 ]{0,40}".prop_map(String::into_bytes),
        ]
    }

    fn headers() -> impl Strategy<Value = http::HeaderMap> {
        prop::collection::vec(
            (
                prop_oneof![Just("set-cookie"), Just("x-id"), Just("content-type")],
                prop::collection::vec(any::<u8>(), 0..24),
            ),
            0..4,
        )
        .prop_map(|pairs| {
            let mut map = http::HeaderMap::new();
            for (name, value) in pairs {
                if let Ok(v) = http::HeaderValue::from_bytes(&value) {
                    map.append(name, v);
                }
            }
            map
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn parsing_never_panics_and_round_trips(text in expression()) {
            if let Ok(c) = Capture::parse(&text) {
                prop_assert_eq!(Capture::parse(&c.to_string()), Ok(c));
            }
            if let Ok(c) = Check::parse(&text) {
                prop_assert_eq!(Check::parse(&c.text()), Ok(c));
            }
        }

        #[test]
        fn evaluation_never_panics(
            status in any::<u16>(),
            headers in headers(),
            body in body(),
        ) {
            let answer = Answer::new(status, &headers, &body);
            for expr in [
                "json", "json.a[0].b", "json.a[1]", "json.c", "json[0]",
                "header.x-id", "cookie.sid", "regex \"(a|b)\"", "regex \".\"",
            ] {
                let c = Capture::parse(expr).map_err(|e| TestCaseError::fail(e.to_string()))?;
                if let Some(v) = c.extract(&answer) {
                    prop_assert!(v.len() <= crate::bounds::MAX_CAPTURE_VALUE_BYTES);
                }
            }
            for expr in [
                "status == 200", "status in 100..599", "json.a exists",
                "json.c.d == \"e\"", "json.a[0] != {\"b\":1}", "body contains \"a\"",
                "header.x-id == \"1\"", "header.x-id != \"\"",
            ] {
                let c = Check::parse(expr).map_err(|e| TestCaseError::fail(e.to_string()))?;
                c.holds(&answer);
            }
        }
    }
}
