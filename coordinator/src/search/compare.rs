//! `compare A/search.json B/search.json`: the ratio of two capacities
//! found within the same SLO ("B sustains 1.80× A's rate"); SLOs are the
//! same when their rules are, however spelt (`p99.9` or `p999`).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::record::{SearchRecord, SCHEMA};
use crate::error::Error;
use crate::thresholds::same_rules;

/// The file a `compare` argument names when it is a search: a
/// `search.json`, or a folder with one and no `report.json`.
fn search_file(path: &Path) -> Option<PathBuf> {
    let file = if path.is_dir() && !path.join("report.json").exists() {
        path.join("search.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v.get("schema")?.as_str()? == SCHEMA).then_some(file)
}

/// With searches to compare, writes their ratio and gives the exit
/// status; `None` when the first argument is not a search (a report).
pub(crate) fn run(
    paths: &[PathBuf],
    json: bool,
    out: &mut impl Write,
) -> Option<Result<u8, Error>> {
    let first = search_file(paths.first()?)?;
    Some(compare(first, &paths[1..], json, out))
}

fn bad(msg: String) -> Error {
    Error::CompareInput(msg)
}

fn load(file: &Path) -> Result<SearchRecord, Error> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| bad(format!("{}: cannot read the search: {e}", file.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| bad(format!("{}: not a {SCHEMA} file: {e}", file.display())))
}

fn label(file: &Path) -> String {
    file.parent().and_then(|p| p.file_name()).map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// Capacity of `b` over that of `a`, and whether it is only a bound.
fn ratio(a: &SearchRecord, b: &SearchRecord) -> Option<(f64, bool)> {
    match (a.result.capacity, b.result.capacity) {
        (Some(a_rate), Some(b_rate)) if a_rate > 0.0 => Some((
            b_rate / a_rate,
            a.result.lower_bound || b.result.lower_bound,
        )),
        _ => None,
    }
}

fn compare(
    first: PathBuf,
    rest: &[PathBuf],
    json: bool,
    out: &mut impl Write,
) -> Result<u8, Error> {
    let mut files = vec![first];
    for p in rest {
        files.push(search_file(p).ok_or_else(|| {
            bad(format!(
                "{}: compare sets a search beside searches only: give search.json files (or their folders)",
                p.display()
            ))
        })?);
    }
    let searches: Vec<(String, SearchRecord)> = files
        .iter()
        .map(|f| load(f).map(|s| (label(f), s)))
        .collect::<Result<_, _>>()?;
    let (base_label, base) = &searches[0];
    if let Some((l, s)) = searches
        .iter()
        .find(|(_, s)| s.settings.varies != base.settings.varies)
    {
        return Err(bad(format!(
            "{l} searched {} and {base_label} {}: a ratio of the two means nothing; compare searches of the same kind",
            s.settings.varies.noun(),
            base.settings.varies.noun()
        )));
    }
    if json {
        let rows: Vec<serde_json::Value> = searches
            .iter()
            .map(|(l, s)| {
                serde_json::json!({
                    "label": l,
                    "status": s.result.status,
                    "varies": s.settings.varies,
                    "capacity": s.result.capacity,
                    "lower_bound": s.result.lower_bound,
                    "slo": s.slo,
                    "resolution": s.settings.resolution,
                    "ratio": ratio(base, s).map(|r| r.0),
                    "ratio_is_bound": ratio(base, s).map(|r| r.1),
                    "same_slo": same_rules(&s.slo, &base.slo),
                })
            })
            .collect();
        serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "searches": rows }))
            .map_err(std::io::Error::from)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(0);
    }
    writeln!(out, "capacity within the SLO")?;
    for (l, s) in &searches {
        let cap = match (s.result.capacity, s.result.lower_bound) {
            (Some(c), false) => s.settings.varies.amount(c),
            (Some(c), true) => format!("at least {}", s.settings.varies.amount(c)),
            (None, _) => "-".into(),
        };
        writeln!(
            out,
            "  {l}: {cap} ({}; SLO {})",
            s.result.status,
            s.slo.join(", ")
        )?;
    }
    for (l, s) in &searches[1..] {
        if !same_rules(&s.slo, &base.slo) {
            writeln!(
                out,
                "  note: {l}'s SLO ({}) is not {base_label}'s ({}): the rates answer different questions",
                s.slo.join(", "),
                base.slo.join(", ")
            )?;
        }
        match ratio(base, s) {
            Some((r, bound)) => {
                let bound = if bound {
                    " (a bound: one of them is a lower bound)"
                } else {
                    ""
                };
                let within = if same_rules(&s.slo, &base.slo) {
                    "within the same SLO"
                } else {
                    "within its own SLO"
                };
                writeln!(
                    out,
                    "{l} sustains {r:.2}× {base_label}'s rate {within}{bound}"
                )?;
            }
            None => writeln!(
                out,
                "{l} and {base_label}: no ratio, one search found no capacity"
            )?,
        }
    }
    let resolution = searches
        .iter()
        .map(|(_, s)| s.settings.resolution)
        .fold(0.0, f64::max);
    writeln!(
        out,
        "  each capacity is within {:.1}% (the searches' resolution)",
        resolution * 100.0
    )?;
    out.flush()?;
    Ok(0)
}
