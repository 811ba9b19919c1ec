//! How numbers look in the text and HTML reports, written once so the two
//! agree (a p99 of 12.3ms reads the same in both).

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use loadfleet_proto::vocab::UnsentReason;

/// Milliseconds with a unit and precision that fit their size: 0.42ms,
/// 12.3ms, 1.25s; a dash when the value is not a number.
pub(crate) fn ms(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v >= 1000.0 {
        format!("{:.2}s", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.1}ms")
    } else {
        format!("{v:.2}ms")
    }
}

/// A threshold's `actual` in its own unit, as the text report and the
/// page show it: "19.67%", "420.0ms", "78.0 req/s", "10".
pub(crate) fn threshold_actual(c: &crate::report_model::Checked) -> String {
    match (c.actual, c.unit.as_str()) {
        (None, _) => "n/a".into(),
        (Some(a), "ms") => ms(a),
        (Some(a), "%") => format!("{a:.2}%"),
        (Some(a), "req/s") => format!("{a:.1} req/s"),
        (Some(a), unit) => format!("{a}{unit}"),
    }
}

/// A finite number or 0: what goes into SVG attributes.
pub(crate) fn fin(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

/// ` unreported N` after a line's unsent count, when lost agents left
/// arrivals of unknown fate (`intended == sent + unsent + unreported`);
/// nothing otherwise, so a run without losses reads as before.
pub(crate) fn unreported(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" unreported {n}")
    }
}

pub(crate) fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A number with a fixed number of decimals, or a dash when it is not one.
pub(crate) fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "–".into()
    }
}

/// Seconds, without trailing noise: 4, 2.5, 0.25.
pub(crate) fn secs(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A count with thousands separators: 18,000.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A Unix time as a UTC date and time, "2023-11-14 22:13:20 UTC"; a dash
/// for a time no date can be written for (not positive, past year 9999).
pub(crate) fn utc(unix: f64) -> String {
    let when = (unix.is_finite() && unix > 0.0)
        .then(|| UNIX_EPOCH.checked_add(Duration::from_secs(unix.floor() as u64)))
        .flatten();
    let mut rfc3339 = String::new();
    match when {
        // humantime writes 2023-11-14T22:13:20Z, and fails past 9999.
        Some(t) if write!(rfc3339, "{}", humantime::format_rfc3339_seconds(t)).is_ok() => {
            format!(
                "{} UTC",
                rfc3339.trim_end_matches('Z').replacen('T', " ", 1)
            )
        }
        _ => "–".into(),
    }
}

/// What was asked and spoken, and how TLS was checked; `None` for a report
/// written before the report said so.
pub(crate) fn protocol_line(r: &crate::report_model::Report) -> Option<String> {
    let p = &r.run.protocol;
    if p.asked.is_empty() {
        return None;
    }
    let spoken: Vec<String> = p
        .connections
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let mut line = format!(
        "protocol {} asked; connections by protocol spoken: {}",
        p.asked,
        if spoken.is_empty() {
            "none".to_string()
        } else {
            spoken.join(", ")
        }
    );
    if r.run.tls.insecure {
        line.push_str("; target TLS certificates NOT verified (--insecure)");
    }
    if r.run.tls.client_cert {
        line.push_str("; client certificate shown");
    }
    Some(line)
}

/// The unsent count with every reason that is not zero, as the headline
/// reads it: `1444 (pool_timeout 1444)`, or `0`.
pub(crate) fn unsent(u: &crate::report_model::Unsent) -> String {
    match unsent_reasons(u) {
        None => u.total.to_string(),
        Some(reasons) => format!("{} ({reasons})", u.total),
    }
}

/// Every unsent reason that is not zero with its count, `late 3,
/// pool_timeout 1444`; `None` when nothing was unsent.
pub(crate) fn unsent_reasons(u: &crate::report_model::Unsent) -> Option<String> {
    let reasons: Vec<String> = [
        (UnsentReason::ConcurrencyLimit.as_str(), u.concurrency_limit),
        (UnsentReason::Late.as_str(), u.late),
    ]
    .into_iter()
    .chain(u.other.iter().map(|(k, &n)| (k.as_str(), n)))
    .filter(|&(_, n)| n > 0)
    .map(|(k, n)| format!("{k} {n}"))
    .collect();
    (!reasons.is_empty()).then(|| reasons.join(", "))
}
