//! The comparison as text (a legend, one row per figure, notes and
//! footnotes) and as JSON for scripts (`compare --json`).

use std::io::Write;

use serde_json::{json, Value};

use super::table::{Ratio, Row, Table};
use crate::figures::Unit;

/// `1.04`, `12.3`, `250`, `inf`; `(ns)` when not significant.
pub(crate) fn fmt_ratio(r: &Ratio) -> String {
    let Some(v) = r.value else {
        return "-".into();
    };
    let s = if v.is_infinite() {
        "inf".to_string()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    };
    if r.significant == Some(false) {
        format!("{s} (ns)")
    } else {
        s
    }
}

pub(super) fn fmt_value(v: Option<f64>, unit: Unit) -> String {
    let Some(v) = v else {
        return "-".into();
    };
    match unit {
        Unit::Count if v.fract() == 0.0 => format!("{v:.0}"),
        Unit::Count | Unit::Rate => format!("{v:.1}"),
        Unit::Percent => format!("{v:.2}%"),
        Unit::Ms if v < 1.0 => format!("{v:.3}"),
        Unit::Ms if v < 1000.0 => format!("{v:.2}"),
        Unit::Ms => format!("{v:.1}"),
    }
}

impl Row {
    /// The figure of one report, formatted in its unit; `-` when unknown.
    pub(crate) fn cell(&self, report: usize) -> String {
        fmt_value(self.value(report), self.unit)
    }
}

impl Table {
    /// The table as text: a legend, one row per figure, notes, footnotes.
    pub(crate) fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "loadfleet compare — {} reports, ratios relative to A",
            self.columns.len()
        )?;
        writeln!(out)?;
        let label_w = self.columns.iter().map(|c| c.1.len()).max().unwrap_or(0);
        for (id, label, path, repeats) in &self.columns {
            let reps = match repeats {
                Some(n) if *n > 0 => format!("  ({n} repeats, median shown)"),
                Some(_) => "  (repeats, median shown)".to_string(),
                None => String::new(),
            };
            writeln!(out, "  {id}  {label:<label_w$}  {}{reps}", path.display())?;
        }
        writeln!(out)?;

        let mut header = vec!["figure".to_string()];
        header.extend(self.columns.iter().map(|c| c.1.clone()));
        header.extend(self.columns[1..].iter().map(|c| format!("{}/A", c.0)));
        let mut lines = vec![header];
        for row in &self.rows {
            let mut line = vec![row.figure.clone()];
            line.extend((0..self.columns.len()).map(|i| row.cell(i)));
            line.extend(row.ratios.iter().map(fmt_ratio));
            lines.push(line);
        }
        let mut verdicts = vec!["verdicts".to_string()];
        verdicts.extend(self.verdicts.iter().map(|v| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(",")
            }
        }));
        verdicts.extend(self.columns[1..].iter().map(|_| String::new()));
        lines.push(verdicts);

        let widths: Vec<usize> = (0..lines[0].len())
            .map(|c| {
                lines
                    .iter()
                    .map(|l| l[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for line in &lines {
            let mut s = format!("  {:<w$}", line[0], w = widths[0]);
            for (cell, w) in line[1..].iter().zip(&widths[1..]) {
                s.push_str(&format!("  {cell:>w$}"));
            }
            writeln!(out, "{}", s.trim_end())?;
        }

        if !self.notes.is_empty() {
            writeln!(out)?;
            writeln!(out, "notes:")?;
            for n in &self.notes {
                writeln!(out, "  {n}")?;
            }
        }
        writeln!(out)?;
        for f in &self.footnotes {
            writeln!(out, "  * {f}")?;
        }
        Ok(())
    }

    /// The same table for scripts (`compare --json`).
    pub(crate) fn to_json(&self) -> Value {
        let finite = |v: Option<f64>| {
            v.filter(|x| x.is_finite())
                .map_or(Value::Null, |x| json!(x))
        };
        let reports: Vec<Value> = self
            .columns
            .iter()
            .map(|(id, label, path, repeats)| {
                json!({
                    "id": id,
                    "label": label,
                    "path": path.display().to_string(),
                    "repeats": repeats,
                })
            })
            .collect();
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let ratios: Vec<Value> = r
                    .ratios
                    .iter()
                    .zip(&self.columns[1..])
                    .map(|(q, c)| {
                        json!({
                            "of": format!("{}/A", c.0),
                            "ratio": finite(q.value),
                            "infinite": q.value.is_some_and(f64::is_infinite),
                            "significant": q.significant,
                        })
                    })
                    .collect();
                let ranges: Vec<Value> = r
                    .values
                    .iter()
                    .map(|v| v.range.map_or(Value::Null, |(lo, hi)| json!([lo, hi])))
                    .collect();
                json!({
                    "figure": r.figure,
                    "values": r.values.iter().map(|v| finite(v.value)).collect::<Vec<_>>(),
                    "ranges": ranges,
                    "ratios": ratios,
                })
            })
            .collect();
        json!({
            "schema": "loadfleet.compare/v1",
            "reports": reports,
            "rows": rows,
            "verdicts": self.verdicts,
            "notes": self.notes,
            "footnotes": self.footnotes,
        })
    }
}
