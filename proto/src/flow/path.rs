//! JSON paths (`json.order.id`, `json.items[0].sku`, `json[2]`): the part
//! of a capture or check that picks one value out of a JSON body.

use std::fmt;

use serde_json::Value;

use super::FlowError;

/// One step down a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `.KEY`: a member of an object.
    Key(String),
    /// `[INDEX]`: an element of an array.
    Index(usize),
}

/// A path from the body's root; empty (`json`) is the root itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct JsonPath {
    segments: Vec<Segment>,
}

/// Characters that end a key: they start the next segment, or could not
/// be told apart from the rest of a check.
fn ends_key(c: char) -> bool {
    matches!(c, '.' | '[' | ']' | '"' | '=' | '!') || c.is_whitespace()
}

impl JsonPath {
    /// Parses `rest`, the text after `json`; `expr` is the whole expression,
    /// for errors.
    pub(super) fn parse(mut rest: &str, expr: &str) -> Result<Self, FlowError> {
        let bad = |problem: String| FlowError::BadPath {
            expr: expr.to_string(),
            problem,
        };
        let mut segments = Vec::new();
        while let Some(c) = rest.chars().next() {
            match c {
                '.' => {
                    let key = &rest[1..];
                    let end = key.find(ends_key).unwrap_or(key.len());
                    if end == 0 {
                        return Err(bad("a key is empty".into()));
                    }
                    segments.push(Segment::Key(key[..end].to_string()));
                    rest = &key[end..];
                }
                '[' => {
                    let close = rest
                        .find(']')
                        .ok_or_else(|| bad("a [ has no closing ]".into()))?;
                    let digits = &rest[1..close];
                    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(bad(format!("index {digits:?} is not a number")));
                    }
                    let index = digits
                        .parse()
                        .map_err(|_| bad(format!("index {digits} is too large")))?;
                    segments.push(Segment::Index(index));
                    rest = &rest[close + 1..];
                }
                _ => {
                    return Err(bad(format!(
                        "{:?} is neither .KEY nor [INDEX]",
                        rest.chars().take(20).collect::<String>()
                    )))
                }
            }
        }
        Ok(Self { segments })
    }

    /// The value at the path, if every step exists.
    pub(super) fn lookup<'v>(&self, root: &'v Value) -> Option<&'v Value> {
        self.segments
            .iter()
            .try_fold(root, |v, segment| match segment {
                Segment::Key(k) => v.as_object()?.get(k),
                Segment::Index(i) => v.as_array()?.get(*i),
            })
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("json")?;
        for s in &self.segments {
            match s {
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(rest: &str) -> Result<JsonPath, FlowError> {
        JsonPath::parse(rest, &format!("json{rest}"))
    }

    #[test]
    fn keys_and_indexes_walk_the_value() {
        let v: Value = serde_json::from_str(
            r#"{"order": {"id": 7}, "items": [{"sku": "a"}, {"sku": "b"}], "k-1": true}"#,
        )
        .unwrap();
        let at = |rest: &str| path(rest).unwrap().lookup(&v).cloned();
        assert_eq!(at(".order.id"), Some(7.into()));
        assert_eq!(at(".items[1].sku"), Some("b".into()));
        assert_eq!(at(".k-1"), Some(true.into()));
        assert_eq!(at(""), Some(v.clone()));
        assert_eq!(at(".items[2]"), None);
        assert_eq!(at(".order[0]"), None);
        assert_eq!(at(".items.sku"), None);
        let arr: Value = serde_json::from_str("[[1, 2]]").unwrap();
        assert_eq!(path("[0][1]").unwrap().lookup(&arr), Some(&2.into()));
    }

    #[test]
    fn display_is_the_parsed_text() {
        for text in ["", ".a", ".items[0].sku", "[3].x_y"] {
            assert_eq!(path(text).unwrap().to_string(), format!("json{text}"));
        }
    }

    #[test]
    fn bad_paths_say_what_is_wrong() {
        for (rest, says) in [
            (".", "key is empty"),
            (".a..b", "key is empty"),
            ("[x]", "not a number"),
            ("[]", "not a number"),
            ("[-1]", "not a number"),
            ("[1", "no closing"),
            ("[99999999999999999999999]", "too large"),
            (".a]", "neither"),
            ("x", "neither"),
        ] {
            let e = path(rest).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("json.KEY"), "{rest}: {e}");
        }
    }
}
