//! Documented features, each run end to end with the real binaries and
//! checked as README.md and docs/*.md promise it: first that the run did
//! its work (requests sent, and the target counted them), then the figure
//! the feature is about, then the exact exit status.

mod fleet;
mod outputs;
mod plans;
