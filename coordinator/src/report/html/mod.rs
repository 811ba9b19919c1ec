//! The HTML report: one self-contained page rendered from the same
//! [`Report`] as the JSON.
//!
//! Nothing is fetched from anywhere: no scripts, fonts, style sheets or
//! images. Charts are inline SVG drawn here, with axes, tick labels and a
//! legend, so the page can be mailed, attached to a ticket or opened years
//! later offline. The page follows the text report's order of importance:
//! verdicts first, then intended / sent / unsent, then everything else.
//!
//! The page is built with maud, which escapes every spliced value, so a
//! string from the run (agent ids, hosts, the target URL, verdict
//! messages, threshold text) cannot become markup; the only raw text is
//! the style sheet and the embedded JSON. Every number that ends up in an
//! SVG attribute is checked to be finite, so a strange report can give an
//! odd-looking page but never a broken or injectable one.

mod chart;
mod figures;
mod flows;
mod page;
mod tables;
#[cfg(test)]
mod tests;

pub(crate) use chart::{nice_scale, Chart, Series, XAxis};
pub(crate) use page::write_html;
pub(crate) use page::STYLE;
