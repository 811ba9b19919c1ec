//! Reading a plan file's TOML into the raw plan. Serde stops at the first
//! unknown field or value of the wrong type; `plan check` promises every
//! problem, so each such field is named with its line, taken out of the
//! document, and the rest read again — the validator then checks what is
//! left, and says nothing more about the fields taken out.

use serde::Deserialize;
use toml::de::{DeArray, DeTable, DeValue, Deserializer};

use super::check::PlanError;
use super::raw::RawPlan;

/// Most unknown fields and wrong types reported before reading stops: a
/// file with more is not a plan (a wrong file, or another tool's format).
const MAX_PROBLEMS: usize = 100;

/// A plan file read as far as it could be.
pub(super) struct Parsed {
    pub raw: RawPlan,
    /// Unknown fields and values of the wrong type, each naming its field.
    pub errors: Vec<PlanError>,
    /// The fields those name, left out of `raw`.
    pub dropped: Vec<String>,
}

/// Reads `text`; `Err` when not even that was possible (a TOML syntax
/// error, or more than [`MAX_PROBLEMS`]), with what was found until then.
pub(super) fn parse(text: &str) -> Result<Parsed, Vec<PlanError>> {
    let mut doc = DeTable::parse(text).map_err(|e| vec![unplaced(text, &e)])?;
    let mut errors = Vec::new();
    let mut dropped = Vec::new();
    loop {
        let e = match RawPlan::deserialize(Deserializer::from(doc.clone())) {
            Ok(raw) => {
                errors.sort_by_key(|e: &PlanError| e.line);
                return Ok(Parsed {
                    raw,
                    errors,
                    dropped,
                });
            }
            Err(e) => e,
        };
        let taken = e
            .span()
            .and_then(|span| take_out(doc.get_mut(), span.start, ""));
        let Some(field) = taken.filter(|_| errors.len() < MAX_PROBLEMS) else {
            errors.push(unplaced(text, &e));
            return Err(errors);
        };
        errors.push(PlanError {
            field: field.clone(),
            line: e.span().map(|s| line_of(text, s.start)),
            message: fix_for_toml_error(e.message()),
        });
        dropped.push(field);
    }
}

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    let before = &text.as_bytes()[..at.min(text.len())];
    before.iter().filter(|&&b| b == b'\n').count() + 1
}

/// An error that could not be tied to an entry of the document.
fn unplaced(text: &str, e: &toml::de::Error) -> PlanError {
    PlanError {
        field: field_of_toml_error(e.message()),
        line: e.span().map(|s| line_of(text, s.start)),
        message: fix_for_toml_error(e.message()),
    }
}

fn span_has(span: std::ops::Range<usize>, at: usize) -> bool {
    span.contains(&at)
}

/// Takes the innermost entry whose key or value holds byte offset `at` out
/// of `table`, and returns its dotted path (`scenario[0].rate`).
fn take_out(table: &mut DeTable<'_>, at: usize, prefix: &str) -> Option<String> {
    let path = |key: &str| match prefix {
        "" => key.to_string(),
        p => format!("{p}.{key}"),
    };
    for (key, value) in table.iter_mut() {
        if let Some(found) = take_out_of_value(value.get_mut(), at, &path(key.get_ref())) {
            return Some(found);
        }
    }
    let key = table
        .iter()
        .find(|(k, v)| span_has(k.span(), at) || span_has(v.span(), at))
        .map(|(k, _)| k.clone())?;
    table.remove(&key);
    Some(path(key.get_ref()))
}

fn take_out_of_value(value: &mut DeValue<'_>, at: usize, path: &str) -> Option<String> {
    match value {
        DeValue::Table(t) => take_out(t, at, path),
        DeValue::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                if let Some(found) = take_out_of_value(item.get_mut(), at, &format!("{path}[{i}]"))
                {
                    return Some(found);
                }
            }
            // A value of the wrong type in a list goes; a table in a list
            // with nothing wrong inside it is left, and reading stops.
            let i = items
                .iter()
                .position(|item| span_has(item.span(), at) && !item.get_ref().is_table())?;
            let all = std::mem::replace(items, DeArray::new());
            for (k, item) in all.iter().enumerate() {
                if k != i {
                    items.push(item.clone());
                }
            }
            Some(format!("{path}[{i}]"))
        }
        _ => None,
    }
}

/// The dotted field a toml/serde message is about, when it has no place.
fn field_of_toml_error(message: &str) -> String {
    for prefix in ["unknown field `", "missing field `"] {
        if let Some(rest) = message.strip_prefix(prefix) {
            if let Some(end) = rest.find('`') {
                return rest[..end].to_string();
            }
        }
    }
    "plan".to_string()
}

/// A toml/serde message in the plan's words, with what to write instead.
fn fix_for_toml_error(message: &str) -> String {
    let message = plan_words(message.trim());
    let message = message.as_str();
    if message.starts_with("unknown field") || message.starts_with("unknown variant") {
        format!(
            "{message}{}; check the spelling against the plan reference in docs/plans.md",
            closest_expected(message)
        )
    } else if message.starts_with("invalid type") {
        let fix = if message.ends_with("expected a table") {
            "write a table, e.g. { key = value }"
        } else if message.ends_with("expected a list") {
            "write a list, e.g. [ ... ]"
        } else if message.ends_with("expected a string") {
            "quote it: durations and names are strings, e.g. \"30s\""
        } else if ["f64", "i64", "u64", "an integer"]
            .iter()
            .any(|t| message.ends_with(t))
        {
            "rates and counts are plain numbers: write e.g. 100, without a unit or quotes"
        } else {
            "durations are quoted strings (\"30s\"), rates and counts are plain numbers"
        };
        format!("{message}; {fix}")
    } else {
        message.to_string()
    }
}

/// `; did you mean `timeout`?` for serde's "unknown field `timout`,
/// expected one of `url`, `timeout`, …" (or "unknown variant"): the
/// closest of the words it lists, when one is close.
fn closest_expected(message: &str) -> String {
    let quoted = |text: &str| -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let Some((given, expected)) = message.split_once(", expected") else {
        return String::new();
    };
    let Some(word) = quoted(given).into_iter().next() else {
        return String::new();
    };
    let valid = quoted(expected);
    crate::suggest::did_you_mean(&word, valid.iter().map(String::as_str))
}

/// Serde's names for what was expected, as a plan's reader knows them: a
/// table rather than `struct RawStage` (a name inside this crate), a list
/// rather than a sequence.
fn plan_words(message: &str) -> String {
    let message = message.replace("expected a sequence", "expected a list");
    match message.find("expected struct Raw") {
        Some(at) => format!("{}expected a table", &message[..at]),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<(String, Option<usize>)> {
        let errors = match parse(text) {
            Ok(p) => p.errors,
            Err(e) => e,
        };
        errors.into_iter().map(|e| (e.field, e.line)).collect()
    }

    #[test]
    fn every_unknown_field_and_wrong_type_is_named_with_its_line() {
        let text = "[target]\nurl = \"testbed\"\ntimout = \"1s\"\n[[scenario]]\nrate = \"100/s\"\nduration = \"5s\"\nrat = 3\n[[scenario]]\nstages = [{ to = 10, over = \"1s\" }, { to = \"x\", over = \"1s\" }]\n[[scenario.request]]\nweight = \"2\"\n";
        assert_eq!(
            problems(text),
            vec![
                ("target.timout".to_string(), Some(3)),
                ("scenario[0].rate".to_string(), Some(5)),
                ("scenario[0].rat".to_string(), Some(7)),
                ("scenario[1].stages[1].to".to_string(), Some(9)),
                ("scenario[1].request[0].weight".to_string(), Some(11)),
            ]
        );
        let parsed = parse(text).unwrap_or_else(|_| panic!("read"));
        assert_eq!(parsed.raw.scenario.len(), 2);
        assert!(parsed.raw.scenario[0].get_ref().rate.is_none());
        assert!(parsed.raw.scenario[0].get_ref().duration.is_some());
    }

    /// A misspelt key or value is offered the closest valid one, from the
    /// list serde gives; a word close to none of them gets no guess.
    #[test]
    fn a_misspelt_key_or_value_is_offered_the_closest() {
        let messages = |text: &str| -> Vec<String> {
            match parse(text) {
                Ok(p) => p.errors,
                Err(e) => e,
            }
            .into_iter()
            .map(|e| e.message)
            .collect()
        };
        let m = messages(
            "[target]\nurl = \"testbed\"\ntimout = \"1s\"\nmax_inflight = 3\nzzzzzz = 1\n[[scenario]]\nrat = 3\nduration = \"5s\"\n",
        );
        assert_eq!(m.len(), 4, "{m:?}");
        for (at, meant) in [(0, "timeout"), (1, "max_in_flight"), (3, "rate")] {
            assert!(
                m[at].contains(&format!("did you mean `{meant}`?")),
                "{meant}: {}",
                m[at]
            );
            assert!(m[at].contains("docs/plans.md"), "{}", m[at]);
        }
        assert!(!m[2].contains("did you mean"), "{}", m[2]);
        assert_eq!(
            closest_expected("unknown variant `poison`, expected `uniform` or `poisson`"),
            "; did you mean `poisson`?"
        );
        assert_eq!(
            closest_expected("unknown field `x`, there are no fields"),
            ""
        );
    }

    #[test]
    fn a_syntax_error_stops_reading() {
        assert_eq!(
            problems("[target\nurl = 1\n"),
            vec![("plan".to_string(), Some(1))]
        );
    }
}
