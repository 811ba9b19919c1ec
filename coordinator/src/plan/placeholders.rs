//! What a plan's templates (`{{…}}` in a path, header, body or message)
//! may name: the built-in values, the data table's columns and, in a
//! flow's step, the values the steps before it captured. One parse for
//! requests and steps alike, so a step is checked exactly as a request is.

use loadfleet_proto::template::{TemplateError, Text};

/// The names a template may use where it stands.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Placeholders<'a> {
    /// The scenario's data table's columns (`{{data.COLUMN}}`).
    pub columns: &'a [String],
    /// Values captured by the steps before this one (`{{NAME}}`).
    pub captured: &'a [String],
    /// Values captured only by this step or later ones, with where: a
    /// placeholder naming one is refused with that place named, since the
    /// fix is to move the capture or the use, not to spell it otherwise.
    pub later: &'a [(String, String)],
    /// Is the template a flow's step's (which may name captured values)?
    pub in_flow: bool,
}

impl Placeholders<'_> {
    /// `text` parsed, or what is wrong with it in the plan's words.
    pub(super) fn parse(&self, text: &str) -> Result<Text, String> {
        Text::parse_with_vars(text, self.columns, self.captured).map_err(|e| match e {
            TemplateError::Unknown(ref name) => self.unknown(name).unwrap_or_else(|| e.to_string()),
            e => e.to_string(),
        })
    }

    /// The refusal of `{{name}}` inside a flow; `None` outside one.
    fn unknown(&self, name: &str) -> Option<String> {
        if let Some((_, place)) = self.later.iter().find(|(n, _)| n == name) {
            return Some(format!(
                "{{{{{name}}}}} is captured only later, by {place}; a step may use only what the steps before it captured: move the capture to an earlier step or the use to a later one"
            ));
        }
        if !self.in_flow {
            return None;
        }
        let known = match self.captured {
            [] => "none yet".to_string(),
            names => names.join(", "),
        };
        Some(format!(
            "{{{{{name}}}}} is not captured by an earlier step (captured so far: {known}); use seq, agent, random_id, data.COLUMN or a value an earlier step captures"
        ))
    }
}
