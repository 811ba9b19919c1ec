//! Where the lines a person watching a run reads go: standard error for the
//! coordinator, a transcript in memory for tests. Every such line passes
//! through one [`Console`], so tests can assert what the user was told, and
//! logs (`tracing`) stay apart from it.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

/// The user's console. Clones write to the same place.
#[derive(Debug, Clone)]
pub struct Console(Target);

#[derive(Debug, Clone)]
enum Target {
    Stderr,
    /// Every line, in order, without the line breaks around it.
    Captured(Arc<Mutex<Vec<String>>>),
}

impl Console {
    /// The coordinator's standard error.
    pub fn stderr() -> Self {
        Console(Target::Stderr)
    }

    /// A console that keeps its lines for [`Console::lines`].
    pub fn captured() -> Self {
        Console(Target::Captured(Arc::default()))
    }

    /// One line.
    pub fn line(&self, text: &str) {
        match &self.0 {
            Target::Stderr => eprintln!("{text}"),
            Target::Captured(lines) => keep(lines, text),
        }
    }

    /// One line about an event during the run. On a terminal it must not
    /// share the live progress bar's line, so it starts on a fresh one.
    pub fn notice(&self, text: &str) {
        match &self.0 {
            Target::Stderr => eprintln!("\n{text}"),
            Target::Captured(lines) => keep(lines, text),
        }
    }

    /// Redraws the live progress bar in place; only on a terminal.
    pub fn redraw(&self, text: &str) {
        match &self.0 {
            Target::Stderr => eprint!("\r\x1b[2K{text}"),
            Target::Captured(lines) => keep(lines, text),
        }
    }

    /// Whether a person's terminal shows the lines, so a bar can be redrawn.
    pub fn is_terminal(&self) -> bool {
        match &self.0 {
            Target::Stderr => std::io::stderr().is_terminal(),
            Target::Captured(_) => false,
        }
    }

    /// The lines written so far; always empty for standard error.
    pub fn lines(&self) -> Vec<String> {
        match &self.0 {
            Target::Stderr => Vec::new(),
            Target::Captured(lines) => lines
                .lock()
                .map_or_else(|e| e.into_inner().clone(), |l| l.clone()),
        }
    }
}

fn keep(lines: &Mutex<Vec<String>>, text: &str) {
    // A panic elsewhere while holding the lock leaves the lines intact.
    let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
    lines.push(text.to_string());
}
