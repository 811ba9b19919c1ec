//! The live view of a run on the console.

use std::time::Duration;

use crate::console::Console;
use crate::fleet::Progress;

/// The live view: a bar with elapsed/remaining and the current rates on a
/// terminal, one plain line per second otherwise (logs, CI). After the
/// schedule ends the clock counts the drain against its own limit, so a
/// line never reads `[10.0s/5s]`.
pub(super) fn print(console: &Console, p: &Progress, drain: Duration) {
    let elapsed = p.elapsed.as_secs_f64();
    let total = p.duration.as_secs_f64().max(1e-9);
    let figures = format!(
        "sent {}/s done {}/s · intended {} sent {} unsent {}{} · failures {} (errors {}) · in flight {} · p99 {} · agents {}",
        p.sent_rps,
        p.completed_rps,
        p.intended,
        p.sent,
        p.unsent,
        crate::report::format::unreported(p.unreported),
        p.failures,
        p.errors,
        p.in_flight,
        p.p99_ms.map_or("-".into(), |v| format!("{v:.1}ms")),
        p.agents_alive
    );
    let clock = clock(p.elapsed, p.duration, drain);
    if console.is_terminal() {
        let done = (elapsed / total).clamp(0.0, 1.0);
        let width = 24;
        let filled = (done * width as f64).round() as usize;
        console.redraw(&format!(
            "[{}{}] {:>3.0}% {clock} · {figures}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            done * 100.0
        ));
    } else {
        console.line(&format!("[{clock}] {figures}"));
    }
}

/// `  3.0s/5s` while the schedule runs, `drain 2.0s/5s` after it.
fn clock(elapsed: Duration, duration: Duration, drain: Duration) -> String {
    let total = duration.as_secs_f64();
    match elapsed.checked_sub(duration) {
        Some(over) if !over.is_zero() => format!(
            "drain {:.1}s/{:.0}s",
            over.as_secs_f64().min(drain.as_secs_f64()),
            drain.as_secs_f64()
        ),
        _ => format!("{:>5.1}s/{total:.0}s", elapsed.as_secs_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_counts_the_drain_apart() {
        let s = Duration::from_secs_f64;
        assert_eq!(clock(s(3.0), s(5.0), s(5.0)), "  3.0s/5s");
        assert_eq!(clock(s(5.0), s(5.0), s(5.0)), "  5.0s/5s");
        assert_eq!(clock(s(7.0), s(5.0), s(5.0)), "drain 2.0s/5s");
        // Agents reporting late never push the drain past its limit.
        assert_eq!(clock(s(12.0), s(5.0), s(5.0)), "drain 5.0s/5s");
    }
}
