//! Collecting a plan's mistakes: each names its field and line, or the flag
//! it came from, and validation goes on after the first so that one pass
//! shows them all.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

/// One mistake in a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    /// Dotted path of the field, e.g. `scenario[1].rate`, or the flag, e.g.
    /// `--rate`, when the value came from the command line.
    pub field: String,
    /// 1-based line in the plan file, when known.
    pub line: Option<usize>,
    pub message: String,
}

impl PlanError {
    /// Did the mistake come from a flag rather than the file?
    fn is_flag(&self) -> bool {
        self.field.starts_with("--")
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.field, self.message),
            None => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

/// Every mistake found in a plan (validation goes on after the first).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanErrors {
    /// The plan file, or "the command line" for a plan made of flags.
    pub source: String,
    pub errors: Vec<PlanError>,
}

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} has {} problem(s):", self.source, self.errors.len())?;
        for e in &self.errors {
            if e.is_flag() {
                writeln!(f, "  {e}")?;
            } else {
                writeln!(f, "  {}: {e}", self.source)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for PlanErrors {}

/// Collects errors with their lines.
pub(super) struct Check<'a> {
    text: &'a str,
    /// Fields whose value a flag set, with that flag: their mistakes name
    /// the flag, since the file never said it.
    flags: BTreeMap<String, &'static str>,
    /// Fields left out of the plan for an unknown name or a wrong type
    /// (see `super::parse`): already reported, so nothing more is said
    /// about them or what is inside them.
    dropped: Vec<String>,
    pub errors: Vec<PlanError>,
}

impl<'a> Check<'a> {
    pub(super) fn new(
        text: &'a str,
        flags: BTreeMap<String, &'static str>,
        errors: Vec<PlanError>,
        dropped: Vec<String>,
    ) -> Self {
        Check {
            text,
            flags,
            dropped,
            errors,
        }
    }

    /// Was `field` (or the table or list holding it) left out of the plan
    /// for a mistake already reported?
    pub(super) fn dropped(&self, field: &str) -> bool {
        self.dropped.iter().any(|d| {
            field
                .strip_prefix(d.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
    }

    /// Did a flag set `field`?
    pub(super) fn set_by_flag(&self, field: &str) -> bool {
        self.flags.contains_key(field)
    }

    fn line_of(&self, span: Range<usize>) -> Option<usize> {
        let end = span.start.min(self.text.len());
        Some(self.text[..end].matches('\n').count() + 1)
    }

    pub(super) fn err(
        &mut self,
        field: impl Into<String>,
        span: Option<Range<usize>>,
        message: impl Into<String>,
    ) {
        let field = field.into();
        if self.dropped(&field) {
            return;
        }
        let (field, line) = match self.flags.get(&field) {
            Some(flag) => ((*flag).to_string(), None),
            None => (field, span.and_then(|s| self.line_of(s))),
        };
        self.errors.push(PlanError {
            field,
            line,
            message: message.into(),
        });
    }

    pub(super) fn duration(
        &mut self,
        field: &str,
        v: &Option<Spanned<String>>,
    ) -> Option<Duration> {
        let v = v.as_ref()?;
        match humantime::parse_duration(v.get_ref()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(
                    field,
                    Some(v.span()),
                    format!(
                        "{:?} is not a duration ({e}); write e.g. \"30s\", \"2m\" or \"500ms\"",
                        v.get_ref()
                    ),
                );
                None
            }
        }
    }

    /// A duration that must be above zero.
    pub(super) fn nonzero_duration(
        &mut self,
        field: &str,
        v: &Option<Spanned<String>>,
    ) -> Option<Duration> {
        let d = self.duration(field, v)?;
        if d.is_zero() {
            self.err(
                field,
                v.as_ref().map(Spanned::span),
                "must be longer than 0s",
            );
            return None;
        }
        Some(d)
    }

    pub(super) fn plain_duration(
        &mut self,
        field: &str,
        span: Range<usize>,
        v: &str,
    ) -> Option<Duration> {
        match humantime::parse_duration(v) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(
                    field,
                    Some(span),
                    format!("{v:?} is not a duration ({e}); write e.g. \"30s\""),
                );
                None
            }
        }
    }

    /// Records a duration above its bound (from `loadfleet_proto::bounds`,
    /// the limit agents hold assignments to); true when within it.
    pub(super) fn at_most(
        &mut self,
        field: &str,
        span: Option<Range<usize>>,
        d: Duration,
        max: Duration,
    ) -> bool {
        if d <= max {
            return true;
        }
        self.err(
            field,
            span,
            format!(
                "{} is longer than the {} limit; use at most {}",
                humantime::format_duration(d),
                humantime::format_duration(max),
                humantime::format_duration(max)
            ),
        );
        false
    }

    /// [`Check::duration`] within `0..=max`; a value above it is recorded
    /// and replaced by `None`.
    pub(super) fn bounded_duration(
        &mut self,
        field: &str,
        v: &Option<Spanned<String>>,
        max: Duration,
    ) -> Option<Duration> {
        let d = self.duration(field, v)?;
        self.at_most(field, v.as_ref().map(Spanned::span), d, max)
            .then_some(d)
    }

    /// Records a list longer than its bound; true when within it.
    pub(super) fn at_most_entries(
        &mut self,
        field: &str,
        span: Option<Range<usize>>,
        n: usize,
        max: usize,
        fix: &str,
    ) -> bool {
        if n <= max {
            return true;
        }
        self.err(
            field,
            span,
            format!("has {n} entries, more than the {max} allowed; {fix}"),
        );
        false
    }

    pub(super) fn positive(
        &mut self,
        field: &str,
        v: &Option<Spanned<i64>>,
        max: i64,
    ) -> Option<u32> {
        let v = v.as_ref()?;
        let n = *v.get_ref();
        if n < 1 || n > max {
            self.err(
                field,
                Some(v.span()),
                format!("{n} is out of range; use a whole number from 1 to {max}"),
            );
            return None;
        }
        Some(n as u32)
    }
}
