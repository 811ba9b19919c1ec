//! The run's output folder: made and proven writable before any load goes
//! out, and filled with the final outputs after the run.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::error::{self, Error};
use crate::report;

/// The output folder, made and proven writable before any load goes out:
/// a bad `--out` found after the run would lose its results. `--out` may
/// name a folder that exists (it is reused); without it a fresh
/// `loadfleet-out-<UTC time>` folder is made, with `-2`, `-3`, … when a
/// run started in the same second already took the name. Everything that
/// writes into the run's folder (the live files, the report) goes through
/// the folder this returns.
pub fn prepare_out_dir(out: Option<&Path>) -> Result<PathBuf, Error> {
    let dir = match out {
        Some(dir) if dir.exists() && !dir.is_dir() => {
            return Err(error::flags(format!(
                "--out {} is a file, not a folder; give --out a folder path (it is made if missing), or leave --out out for a fresh folder here",
                dir.display()
            )))
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
    let probe = dir.join(".loadfleet-write-test");
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

/// The final outputs, next to the live ones (`report::live`): the reports;
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
    use report::live;
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
    write("report.json", &|w| report::json::write_json(w, report))?;
    live::replace(&dir.join(live::CSV_NAME), |w| {
        report::csv::write_csv(w, report)
    })?;
    write("report.html", &|w| report::html::write_html(w, report))?;
    if repeats > 1 {
        let (from, _) = live::run_files(dir, shown, repeats);
        let to = dir.join(live::HLOG_NAME);
        std::fs::copy(&from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    let partial = dir.join(live::PARTIAL_NAME);
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", partial.display()))
        }
        _ => Ok(()),
    }
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
}
