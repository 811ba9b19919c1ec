//! The run's folder: every file name in it, made and proven writable
//! before any load goes out ([`prepare_out_dir`]), filled as the run goes
//! ([`live`]), and given the final reports after it ([`write_outputs`]).

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::error::{self, Error};
use crate::report;

pub(super) mod live;

pub(super) const REPORT_JSON: &str = "report.json";
pub(super) const REPORT_HTML: &str = "report.html";
/// Written and removed at once, to prove the folder writable.
const WRITE_PROBE: &str = ".loadfleet-write-test";
/// The report as if the run had been cut short now, while it goes.
pub(super) const PARTIAL_NAME: &str = "report.partial.json";
pub(super) const HLOG_NAME: &str = "latency.hlog";
pub(super) const CSV_NAME: &str = "intervals.csv";

/// The live files of run `run` (0-based): the plain names for a single run;
/// with --repeat, one pair per run, so every run's log is kept.
pub(super) fn run_files(dir: &Path, run: usize, repeats: usize) -> (PathBuf, PathBuf) {
    if repeats > 1 {
        (
            dir.join(format!("latency.run-{}.hlog", run + 1)),
            dir.join(format!("intervals.run-{}.csv", run + 1)),
        )
    } else {
        (dir.join(HLOG_NAME), dir.join(CSV_NAME))
    }
}

/// The output folder, made and proven writable before any load goes out:
/// a bad `--out` found after the run would lose its results. `--out` may
/// name a missing or empty folder; a folder with anything in it is refused
/// unless `overwrite` (`--overwrite`), which first removes the files an
/// earlier run wrote there ([`is_ours`]), so no stale `latency.run-3.hlog`
/// sits next to the new results, and keeps every other file. Without
/// `--out` a fresh `loadfleet-out-<UTC time>` folder is made, with `-2`,
/// `-3`, … when a run started in the same second already took the name.
/// Everything that writes into the run's folder (the live files, the
/// report) goes through the folder this returns.
pub(super) fn prepare_out_dir(out: Option<&Path>, overwrite: bool) -> Result<PathBuf, Error> {
    let dir = match out {
        Some(dir) if dir.exists() && !dir.is_dir() => {
            return Err(error::flags(format!(
                "--out {} is a file, not a folder; give --out a folder path (it is made if missing), or leave --out out for a fresh folder here",
                dir.display()
            )))
        }
        Some(dir) if dir.is_dir() => {
            clear_earlier_run(dir, overwrite)?;
            dir.to_path_buf()
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| {
                error::flags(format!(
                    "--out {}: cannot create the folder ({e}); give a folder path you can write to, or leave --out out for a fresh folder here",
                    dir.display()
                ))
            })?;
            dir.to_path_buf()
        }
        None => fresh_out_dir(Path::new(""), std::time::SystemTime::now()).map_err(|e| {
            error::flags(format!(
                "cannot create an output folder in the working folder ({e}); give --out with a folder you can write to"
            ))
        })?,
    };
    let probe = dir.join(WRITE_PROBE);
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            error::flags(format!(
                "--out {}: cannot write into the folder ({e}); give --out a folder you can write to",
                dir.display()
            ))
        })?;
    Ok(dir)
}

/// Refuses a folder that holds anything, unless `overwrite`; then removes
/// the files loadfleet writes there and nothing else.
fn clear_earlier_run(dir: &Path, overwrite: bool) -> Result<(), Error> {
    let cannot_read = |e: std::io::Error| {
        error::flags(format!(
            "--out {}: cannot read the folder ({e}); give --out a folder you can read and write",
            dir.display()
        ))
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(cannot_read)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(cannot_read)?;
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    if !overwrite {
        let shown: Vec<&str> = names.iter().take(4).map(String::as_str).collect();
        let more = match names.len() - shown.len() {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        return Err(error::flags(format!(
            "--out {} is not empty (it holds {}{more}); give --overwrite to replace an earlier run's files there (other files are kept), or give --out a new or empty folder",
            dir.display(),
            shown.join(", ")
        )));
    }
    for name in names.iter().filter(|n| is_ours(n)) {
        let path = dir.join(name);
        if path.is_file() {
            std::fs::remove_file(&path).map_err(|e| {
                error::flags(format!(
                    "--overwrite: cannot remove {} ({e}); remove it yourself or give --out a new folder",
                    path.display()
                ))
            })?;
        }
    }
    Ok(())
}

/// Whether `name` is a file a run writes into its folder: the reports,
/// the partial report, the interval logs and CSVs (one pair per run with
/// `--repeat`: `latency.run-2.hlog`, `intervals.run-2.csv`), and the
/// temporary files they are written through.
fn is_ours(name: &str) -> bool {
    let name = name.strip_suffix(".tmp").unwrap_or(name);
    let numbered = |prefix: &str, suffix: &str| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    [
        REPORT_JSON,
        REPORT_HTML,
        PARTIAL_NAME,
        HLOG_NAME,
        CSV_NAME,
        WRITE_PROBE,
    ]
    .contains(&name)
        || numbered("latency.run-", ".hlog")
        || numbered("intervals.run-", ".csv")
}

/// `loadfleet-out-20261130T101500Z` under `parent`, made with `create_dir`
/// so two runs never share a folder: the one that loses the race for a name
/// takes the next suffix.
fn fresh_out_dir(parent: &Path, now: std::time::SystemTime) -> std::io::Result<PathBuf> {
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let base = format!("loadfleet-out-{stamp}");
    for n in 1..=1000u32 {
        let dir = parent.join(if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{base} and 999 suffixed folders already exist"),
    ))
}

/// The final outputs, next to the live ones ([`live`]): the reports;
/// `intervals.csv` once more, from the report, so it also counts snapshots
/// that came in after their second was written; the representative run's
/// interval log as `latency.hlog` with --repeat. A clean end removes
/// `report.partial.json`.
pub(super) fn write_outputs(
    dir: &Path,
    report: &report::Report,
    shown: usize,
    repeats: usize,
) -> anyhow::Result<()> {
    let write =
        |name: &str, f: &dyn Fn(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>| {
            let path = dir.join(name);
            let file = std::fs::File::create(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let mut w = std::io::BufWriter::new(file);
            f(&mut w).with_context(|| format!("cannot write {}", path.display()))?;
            use std::io::Write;
            w.flush()
                .with_context(|| format!("cannot write {}", path.display()))
        };
    write(REPORT_JSON, &|w| report::json::write_json(w, report))?;
    replace(&dir.join(CSV_NAME), |w| report::csv::write_csv(w, report))?;
    write(REPORT_HTML, &|w| report::html::write_html(w, report))?;
    if repeats > 1 {
        let (from, _) = run_files(dir, shown, repeats);
        let to = dir.join(HLOG_NAME);
        std::fs::copy(&from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    let partial = dir.join(PARTIAL_NAME);
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", partial.display()))
        }
        _ => Ok(()),
    }
}

/// Writes `path` whole or not at all: into a temporary file next to it,
/// then renamed over it, so a reader (or a crash) never sees half a file.
pub(super) fn replace(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut w = std::io::BufWriter::new(file);
    write(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    drop(w);
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn default_out_dirs_never_collide() {
        let parent = std::env::temp_dir().join(format!("loadfleet-outdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir_all(&parent).unwrap();
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_796_033_700);
        let a = fresh_out_dir(&parent, t).unwrap();
        let b = fresh_out_dir(&parent, t).unwrap();
        let c = fresh_out_dir(&parent, t).unwrap();
        let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name(&a), "loadfleet-out-20261130T101500Z");
        assert_eq!(name(&b), "loadfleet-out-20261130T101500Z-2");
        assert_eq!(name(&c), "loadfleet-out-20261130T101500Z-3");
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn only_the_files_a_run_writes_are_ours() {
        for name in [
            "report.json",
            "report.html",
            "report.partial.json",
            "latency.hlog",
            "intervals.csv",
            "intervals.csv.tmp",
            "latency.run-1.hlog",
            "intervals.run-12.csv",
            ".loadfleet-write-test",
        ] {
            assert!(is_ours(name), "{name}");
        }
        for name in [
            "plan.toml",
            "report.txt",
            "notes.md",
            "latency.run-.hlog",
            "latency.run-x.hlog",
            "intervals.run-2.csv.bak",
            "report.json.orig",
        ] {
            assert!(!is_ours(name), "{name}");
        }
    }
}
