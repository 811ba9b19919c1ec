//! The HTML report: one self-contained page rendered from the same
//! [`Report`] as the JSON.
//!
//! Nothing is fetched from anywhere: no scripts, fonts, style sheets or
//! images. Charts are inline SVG drawn here, with axes, tick labels and a
//! legend, so the page can be mailed, attached to a ticket or opened years
//! later offline. The page follows the text report's order of importance:
//! verdicts first, then intended / sent / unsent, then everything else.
//!
//! Every string that comes from the run (agent ids, hosts, the target URL,
//! verdict messages, threshold text) is escaped, and every number that ends
//! up in an SVG attribute is checked to be finite, so a strange report can
//! give an odd-looking page but never a broken or injectable one.

mod chart;
mod page;
#[cfg(test)]
mod tests;

pub use page::{render, write_html};
