//! The live outputs: what the run has measured, on disk while it runs, so a
//! coordinator killed with SIGKILL (or an evicted pod) leaves everything
//! up to a few seconds before its death behind.
//!
//! - `latency.hlog` and `intervals.csv` get each second appended as it
//!   settles (SETTLE after it closes), whole lines at a time.
//! - `report.partial.json` is the report as if the run had been cut short
//!   at that moment (`partial: true`), replaced every [`PARTIAL_EVERY`]
//!   through a temporary file and a rename, so a reader never sees half a
//!   file. A clean end (report.json written) removes it: its presence means
//!   the coordinator never finished.
//!
//! Settled seconds are folded out of the merged state as they are written,
//! which keeps the coordinator's memory flat in run length.
//!
//! The files are written by a thread of their own: a slow disk delays the
//! files, never the fleet's control loop.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use super::{replace, run_files, PARTIAL_NAME};
use crate::console::Console;
use crate::fleet::{Settled, Sink};
use crate::report::build::{build, interval_report};
use crate::report::{csv, hlog, json, PlanInfo, Report};

/// How often `report.partial.json` is replaced.
pub(crate) const PARTIAL_EVERY: Duration = Duration::from_secs(2);
/// Work for the writer thread, in order.
enum Job {
    /// A run begins: its files are made afresh, with their headers.
    Open {
        hlog: PathBuf,
        csv: PathBuf,
        hlog_header: Vec<u8>,
        csv_header: Vec<u8>,
    },
    /// Whole lines to append, then hand to the OS.
    Hlog(Vec<u8>),
    Csv(Vec<u8>),
    /// A fresh partial report, to put in place of the last.
    Partial(Box<Report>),
}

/// The fleet's [`Sink`]: folds each settled second out of the merged state
/// into the live files.
pub(crate) struct LiveOutputs {
    dir: PathBuf,
    repeats: usize,
    info: PlanInfo,
    scenarios: Vec<String>,
    jobs: mpsc::Sender<Job>,
    /// The run whose files are open.
    open: Option<usize>,
    last_partial: Option<Instant>,
}

/// The writer thread; [`LiveWriter::finish`] waits until all is on disk.
pub(crate) struct LiveWriter {
    thread: std::thread::JoinHandle<()>,
    console: Console,
}

impl LiveOutputs {
    /// Creates `dir` and the first run's files now, so an --out that cannot
    /// be written fails before any load is sent.
    pub(crate) fn start(
        dir: &Path,
        repeats: usize,
        info: PlanInfo,
        console: Console,
    ) -> anyhow::Result<(Self, LiveWriter)> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
        let (hlog, csv) = run_files(dir, 0, repeats);
        for path in [&hlog, &csv] {
            File::create(path)
                .with_context(|| format!("--out: cannot create {}", path.display()))?;
        }
        // A partial report from an earlier coordinator in this folder is not
        // this run's.
        let _ = std::fs::remove_file(dir.join(PARTIAL_NAME));
        let (jobs, queue) = mpsc::channel();
        let partial = dir.join(PARTIAL_NAME);
        let told = console.clone();
        let thread = std::thread::Builder::new()
            .name("live-outputs".into())
            .spawn(move || write_jobs(&queue, &partial, &told))
            .context("cannot start the thread that writes the live outputs")?;
        let scenarios = info.scenarios.iter().map(|s| s.name.clone()).collect();
        Ok((
            Self {
                dir: dir.to_path_buf(),
                repeats,
                info,
                scenarios,
                jobs,
                open: None,
                last_partial: None,
            },
            LiveWriter { thread, console },
        ))
    }

    fn send(&self, job: Job) {
        // The thread only ends when this sender is dropped.
        let _ = self.jobs.send(job);
    }

    fn open_run(&mut self, run: usize, started_at: SystemTime) {
        let (hlog, csv) = run_files(&self.dir, run, self.repeats);
        let mut hlog_header = Vec::new();
        let mut csv_header = Vec::new();
        // Writing into memory cannot fail.
        let _ = hlog::write_header(&mut hlog_header, started_at);
        let _ = csv::write_header(&mut csv_header);
        self.send(Job::Open {
            hlog,
            csv,
            hlog_header,
            csv_header,
        });
        self.open = Some(run);
        self.last_partial = None;
    }
}

impl Sink for LiveOutputs {
    fn settled(&mut self, s: Settled<'_>) {
        if self.open != Some(s.run) {
            self.open_run(s.run, s.started_at);
        }
        let (mut hlog_lines, mut csv_lines) = (Vec::new(), Vec::new());
        for second in s.aggregate.fold_settled(s.below) {
            // Writing into memory cannot fail.
            let _ = hlog::write_entries(
                &mut hlog_lines,
                second.index,
                &second.latency_by_class,
                &self.scenarios,
            );
            if let Some(iv) = &second.first {
                let _ = csv::write_row(&mut csv_lines, &interval_report(second.index, iv));
            }
        }
        if !hlog_lines.is_empty() {
            self.send(Job::Hlog(hlog_lines));
        }
        if !csv_lines.is_empty() {
            self.send(Job::Csv(csv_lines));
        }
        // The end of a run needs no partial report: the final one follows.
        let due = self
            .last_partial
            .is_none_or(|t| t.elapsed() >= PARTIAL_EVERY);
        if s.below != u64::MAX && due {
            self.last_partial = Some(Instant::now());
            let result = (s.so_far)(std::mem::take(s.aggregate));
            let mut report = build(&result, &self.info);
            *s.aggregate = result.aggregate;
            report.partial = true;
            self.send(Job::Partial(Box::new(report)));
        }
    }
}

impl LiveWriter {
    /// Waits until every job is on disk; the [`LiveOutputs`] must be gone
    /// (the fleet drops it when it ends).
    pub(crate) fn finish(self) {
        if self.thread.join().is_err() {
            self.console.line(
                "warning: the thread writing the live outputs failed; the final report is written anyway",
            );
        }
    }
}

/// One live file; after a failed write it is given up on, with one warning.
struct LiveFile {
    path: PathBuf,
    file: Option<File>,
    console: Console,
}

impl LiveFile {
    fn create(path: PathBuf, header: &[u8], console: &Console) -> Self {
        let mut f = LiveFile {
            path,
            file: None,
            console: console.clone(),
        };
        match File::create(&f.path) {
            Ok(file) => {
                f.file = Some(file);
                f.append(header);
            }
            Err(e) => f.give_up(&e),
        }
        f
    }

    /// One `write_all` of whole lines, then no buffering on our side: the
    /// lines are the kernel's once it returns, and survive our death.
    fn append(&mut self, bytes: &[u8]) {
        if let Some(file) = &mut self.file {
            if let Err(e) = file.write_all(bytes) {
                self.give_up(&e);
            }
        }
    }

    fn give_up(&mut self, e: &std::io::Error) {
        self.console.line(&format!(
            "warning: cannot write {} ({e}); it will be incomplete until the run ends",
            self.path.display()
        ));
        self.file = None;
    }
}

fn write_jobs(queue: &mpsc::Receiver<Job>, partial: &Path, console: &Console) {
    let (mut hlog, mut csv) = (None::<LiveFile>, None::<LiveFile>);
    let mut partial_failed = false;
    while let Ok(job) = queue.recv() {
        match job {
            Job::Open {
                hlog: h,
                csv: c,
                hlog_header,
                csv_header,
            } => {
                hlog = Some(LiveFile::create(h, &hlog_header, console));
                csv = Some(LiveFile::create(c, &csv_header, console));
            }
            Job::Hlog(lines) => hlog.iter_mut().for_each(|f| f.append(&lines)),
            Job::Csv(lines) => csv.iter_mut().for_each(|f| f.append(&lines)),
            Job::Partial(report) => {
                let written = replace(partial, |w| json::write_json(w, &report));
                if let Err(e) = written {
                    if !partial_failed {
                        console.line(&format!(
                            "warning: cannot write {}: {e:#}",
                            partial.display()
                        ));
                    }
                    partial_failed = true;
                }
            }
        }
    }
}
