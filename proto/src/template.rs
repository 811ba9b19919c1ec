//! Request templates with per-request values.
//!
//! Placeholders are parsed once, here, by both sides: the coordinator to
//! reject a bad plan before the run, the agent to render each request. A
//! text without placeholders renders to itself, so the agent can build such
//! requests once and clone them.

use crate::rng::SplitMix64;

/// One part of a parsed text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Literal(String),
    /// `{{seq}}`: the arrival's fleet-wide index within its scenario.
    Seq,
    /// `{{agent}}`: the index of the agent sending it.
    Agent,
    /// `{{random_id}}`: 16 random hex digits.
    RandomId,
    /// `{{data.COLUMN}}`: a column of the scenario's data table.
    Data(usize),
    /// `{{NAME}}`: a value an earlier step of a flow captured
    /// ([`crate::flow::Capture`]), by its index among the flow's names.
    Var(usize),
}

/// A placeholder that cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without a closing `}}`.
    #[error("unclosed placeholder starting at {0:?}; close it with }}}}")]
    Unclosed(String),
    /// Not one of the known names.
    #[error("unknown placeholder {{{{{0}}}}}; use seq, agent, random_id or data.COLUMN")]
    Unknown(String),
    /// Not one of the known names, in a flow step that may also use the
    /// names earlier steps capture (listed second).
    #[error(
        "unknown placeholder {{{{{0}}}}}; use seq, agent, random_id, data.COLUMN \
         or a name an earlier step captures ({1})"
    )]
    UnknownVar(String, String),
    /// `data.X` where the data table has no column X.
    #[error(
        "placeholder {{{{data.{0}}}}} names a column the data file does not have (columns: {1})"
    )]
    NoColumn(String, String),
}

/// A parsed text: literal parts and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    pieces: Vec<Piece>,
}

impl Text {
    /// Parses `{{name}}` placeholders; `columns` are the data table's.
    pub fn parse(text: &str, columns: &[String]) -> Result<Self, TemplateError> {
        Self::parse_with_vars(text, columns, &[])
    }

    /// Parses a flow step's text, where `{{NAME}}` may also be one of
    /// `vars`, the names earlier steps capture; the built-in names come
    /// first ([`crate::flow::check_capture_name`] keeps captures from
    /// shadowing them).
    pub fn parse_with_vars(
        text: &str,
        columns: &[String],
        vars: &[String],
    ) -> Result<Self, TemplateError> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                pieces.push(Piece::Literal(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| TemplateError::Unclosed(rest[open..].chars().take(20).collect()))?;
            let name = after[..close].trim();
            pieces.push(match name {
                "seq" => Piece::Seq,
                "agent" => Piece::Agent,
                "random_id" => Piece::RandomId,
                _ => match name.strip_prefix("data.") {
                    Some(col) => {
                        Piece::Data(columns.iter().position(|c| c == col).ok_or_else(|| {
                            TemplateError::NoColumn(col.to_string(), columns.join(", "))
                        })?)
                    }
                    None => match vars.iter().position(|v| v == name) {
                        Some(i) => Piece::Var(i),
                        None if vars.is_empty() => {
                            return Err(TemplateError::Unknown(name.to_string()))
                        }
                        None => {
                            return Err(TemplateError::UnknownVar(
                                name.to_string(),
                                vars.join(", "),
                            ))
                        }
                    },
                },
            });
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Literal(rest.to_string()));
        }
        Ok(Self { pieces })
    }

    /// True when the text has no placeholders.
    pub fn is_static(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Literal(_)))
    }

    /// The text before its first placeholder (all of it, when it has
    /// none).
    pub fn literal_prefix(&self) -> &str {
        match self.pieces.first() {
            Some(Piece::Literal(s)) => s,
            _ => "",
        }
    }

    /// True when the text reads the data table.
    pub fn uses_data(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Data(_)))
    }

    /// Appends the rendered text to `out`.
    pub fn render(&self, ctx: &mut Values<'_>, out: &mut String) {
        self.render_with_vars(ctx, &[], out);
    }

    /// Appends the rendered text of a flow step to `out`; `vars` are the
    /// captured values in the order of the names given to
    /// [`Text::parse_with_vars`]. A value not captured (absent, or past the
    /// end of `vars`) renders empty, as a missing data row does.
    pub fn render_with_vars(
        &self,
        ctx: &mut Values<'_>,
        vars: &[Option<String>],
        out: &mut String,
    ) {
        use std::fmt::Write;
        for p in &self.pieces {
            match p {
                Piece::Literal(s) => out.push_str(s),
                Piece::Seq => {
                    let _ = write!(out, "{}", ctx.seq);
                }
                Piece::Agent => {
                    let _ = write!(out, "{}", ctx.agent);
                }
                Piece::RandomId => {
                    let _ = write!(out, "{:016x}", ctx.rng.next_u64());
                }
                Piece::Data(col) => {
                    if let Some(v) = ctx.row.and_then(|r| r.get(*col)) {
                        out.push_str(v);
                    }
                }
                Piece::Var(i) => {
                    if let Some(Some(v)) = vars.get(*i) {
                        out.push_str(v);
                    }
                }
            }
        }
    }
}

/// The per-request values placeholders draw from.
pub struct Values<'a> {
    pub seq: u64,
    pub agent: u32,
    pub rng: &'a mut SplitMix64,
    pub row: Option<&'a [String]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols() -> Vec<String> {
        vec!["user".into(), "item".into()]
    }

    #[test]
    fn renders_every_placeholder() {
        let t = Text::parse(
            "/u/{{data.user}}/i/{{ seq }}?a={{agent}}&r={{random_id}}",
            &cols(),
        )
        .unwrap();
        assert!(!t.is_static());
        assert!(t.uses_data());
        let mut rng = SplitMix64::new(1);
        let row = vec!["ann".to_string(), "7".to_string()];
        let mut out = String::new();
        t.render(
            &mut Values {
                seq: 42,
                agent: 3,
                rng: &mut rng,
                row: Some(&row),
            },
            &mut out,
        );
        assert!(out.starts_with("/u/ann/i/42?a=3&r="), "{out}");
        assert_eq!(out.len(), "/u/ann/i/42?a=3&r=".len() + 16);
    }

    #[test]
    fn plain_text_is_static() {
        let t = Text::parse("/health", &[]).unwrap();
        assert!(t.is_static());
    }

    #[test]
    fn bad_placeholders_are_named() {
        assert_eq!(
            Text::parse("/{{nope}}", &[]),
            Err(TemplateError::Unknown("nope".into()))
        );
        assert!(matches!(
            Text::parse("/{{seq", &[]),
            Err(TemplateError::Unclosed(_))
        ));
        let e = Text::parse("{{data.zip}}", &cols())
            .unwrap_err()
            .to_string();
        assert!(e.contains("zip") && e.contains("user, item"), "{e}");
    }

    #[test]
    fn captured_names_render_their_values() {
        let vars = vec!["token".to_string(), "order_id".to_string()];
        let t =
            Text::parse_with_vars("/o/{{ order_id }}?t={{token}}&s={{seq}}", &[], &vars).unwrap();
        assert!(!t.is_static());
        let mut rng = SplitMix64::new(1);
        let mut ctx = Values {
            seq: 5,
            agent: 0,
            rng: &mut rng,
            row: None,
        };
        let mut out = String::new();
        t.render_with_vars(&mut ctx, &[Some("t0k".into()), Some("42".into())], &mut out);
        assert_eq!(out, "/o/42?t=t0k&s=5");
        out.clear();
        t.render_with_vars(&mut ctx, &[None], &mut out);
        assert_eq!(out, "/o/?t=&s=5");
        out.clear();
        t.render(&mut ctx, &mut out);
        assert_eq!(out, "/o/?t=&s=5");
    }

    #[test]
    fn an_unknown_name_lists_the_captured_ones() {
        let vars = vec!["token".to_string(), "order_id".to_string()];
        let e = Text::parse_with_vars("{{tokn}}", &[], &vars).unwrap_err();
        assert_eq!(
            e,
            TemplateError::UnknownVar("tokn".into(), "token, order_id".into())
        );
        let e = e.to_string();
        assert!(
            e.contains("{{tokn}}") && e.contains("token, order_id"),
            "{e}"
        );
        assert_eq!(
            Text::parse_with_vars("{{seq}}", &[], &["seq".into()]),
            Text::parse("{{seq}}", &[])
        );
    }
}

/// The properties `fuzz/fuzz_targets/template_render.rs` checks, on stable
/// with a bounded number of cases.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn render(t: &Text, row: Option<&[String]>) -> String {
        let mut rng = SplitMix64::new(7);
        let mut out = String::new();
        t.render(
            &mut Values {
                seq: u64::MAX,
                agent: u32::MAX,
                rng: &mut rng,
                row,
            },
            &mut out,
        );
        out
    }

    /// Pieces of template text, so that placeholders (good and bad) come up
    /// often, not once in a million strings.
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,8}",
            Just("{{".to_string()),
            Just("}}".to_string()),
            Just("{{seq}}".to_string()),
            Just("{{ agent }}".to_string()),
            Just("{{random_id}}".to_string()),
            Just("{{data.user}}".to_string()),
            Just("{{data.}}".to_string()),
            Just("{{data.zip}}".to_string()),
            Just("{{{".to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any text parses or is refused without a panic; an accepted one
        /// renders with or without a data row, and a text without
        /// placeholders renders to itself.
        #[test]
        fn any_text_parses_and_renders_without_panic(
            text in prop_oneof![".{0,64}", prop::collection::vec(piece(), 0..12).prop_map(|v| v.concat())],
        ) {
            let columns = vec!["user".to_string(), "item".to_string()];
            if let Ok(t) = Text::parse(&text, &columns) {
                let row = ["u{{seq}}".to_string(), String::new()];
                for row in [None, Some(&row[..])] {
                    let out = render(&t, row);
                    if t.is_static() {
                        prop_assert_eq!(&out, &text);
                    }
                }
            }
        }
    }
}
