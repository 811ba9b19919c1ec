//! `intervals.csv`: the per-second series for spreadsheets and plotting
//! tools, one column per outcome class and one per unsent reason, always,
//! and the lost agents' arrivals whose fate is unknown (`unreported`).
//! The header and each row are written apart, so the live output
//! (`run::folder::live`) can append a row as each second settles.

use std::io::Write;

use loadfleet_proto::vocab::{OutcomeClass, UnsentReason};

use crate::report_model::{IntervalReport, Report};

/// The per-second series as CSV, for spreadsheets and plotting tools.
pub(crate) fn write_csv(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    write_header(out)?;
    for iv in &r.intervals {
        write_row(out, iv)?;
    }
    Ok(())
}

/// The header line, naming every column [`write_row`] writes.
pub(crate) fn write_header(out: &mut impl Write) -> std::io::Result<()> {
    write!(out, "t,intended,sent,unsent")?;
    for reason in UnsentReason::ALL {
        write!(out, ",unsent_{reason}")?;
    }
    write!(out, ",unreported,completed,errors")?;
    for c in OutcomeClass::ALL {
        write!(out, ",completed_{c}")?;
    }
    writeln!(out, ",p50_ms,p99_ms,in_flight,max_in_flight,max_lag_ms")
}

/// One second's line.
pub(crate) fn write_row(out: &mut impl Write, iv: &IntervalReport) -> std::io::Result<()> {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    let reason = |k: &str| iv.unsent_by_reason.get(k).copied().unwrap_or(0);
    write!(out, "{},{},{},{}", iv.t, iv.intended, iv.sent, iv.unsent)?;
    for r in UnsentReason::ALL {
        write!(out, ",{}", reason(r.as_str()))?;
    }
    write!(out, ",{},{},{}", iv.unreported, iv.completed, iv.errors)?;
    for c in OutcomeClass::ALL {
        write!(
            out,
            ",{}",
            iv.classes
                .get(&format!("completed_{c}"))
                .copied()
                .unwrap_or(0)
        )?;
    }
    writeln!(
        out,
        ",{},{},{},{},{:.3}",
        opt(iv.p50),
        opt(iv.p99),
        iv.in_flight,
        iv.max_in_flight,
        iv.max_lag_ms
    )
}
