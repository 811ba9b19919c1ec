//! Local mode: agent *processes* (not tasks) and the built-in testbed on
//! this machine, pinned to different CPUs where there are enough, so that
//! the target and the generator at least do not share cores.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::error::{self, Error};

/// Finds a sibling binary (built by the same workspace), or the one named
/// by `LOADFLEET_<NAME>_BIN`. An empty variable counts as unset, as shells
/// treat `VAR=`; one naming no file is refused by name before anything
/// starts, rather than failing later as a bare "No such file".
pub(crate) fn sibling_binary(name: &str) -> Result<PathBuf, Error> {
    let var = format!(
        "LOADFLEET_{}_BIN",
        name.trim_start_matches("loadfleet-").to_uppercase()
    );
    if let Some(path) = std::env::var_os(&var).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(error::flags(format!(
                "{var} names {}, which is not a file; point it at a {name} binary, or unset it to use the one next to the coordinator",
                path.display()
            )));
        }
        return Ok(path);
    }
    let exe = std::env::current_exe().context("cannot locate the running coordinator binary")?;
    let dir = exe
        .parent()
        .context("the coordinator binary has no parent folder")?;
    // Test binaries live in target/<profile>/deps, the real ones one level up.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(anyhow!(
        "cannot find {name} next to the coordinator (looked in {}); build the whole workspace (cargo build --release) or set {var}",
        dir.display()
    )
    .into())
}

/// CPUs this process may run on, in order; none if the kernel will not
/// say, which local mode treats like a single CPU (nothing is pinned).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    loadfleet_sys::allowed_cpus().map_or_else(|_| Vec::new(), |cpus| cpus.cpus().to_vec())
}

/// Which CPUs the target and the agents get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuSplit {
    pub target: Vec<usize>,
    pub agents: Vec<usize>,
}

/// Target on the first half of the CPUs, agents on the rest; `None` on a
/// single CPU, where nothing can be kept apart.
pub(crate) fn split_cpus(cpus: &[usize]) -> Option<CpuSplit> {
    if cpus.len() < 2 {
        return None;
    }
    let half = cpus.len() / 2;
    Some(CpuSplit {
        target: cpus[..half].to_vec(),
        agents: cpus[half..].to_vec(),
    })
}

/// CPUs as "2,3": the form the LOCALHOST verdict prints, and the one that
/// `--cpus` of the testbed and the agents accepts.
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Starts the testbed `bin` and waits for its `listening on ADDR` line.
pub(crate) async fn start_testbed(
    bin: &Path,
    args: &[String],
    cpus: Option<&[usize]>,
) -> anyhow::Result<(Child, SocketAddr)> {
    let mut cmd = Command::new(bin);
    cmd.arg("--listen").arg("127.0.0.1:0").args(args);
    if let Some(cpus) = cpus {
        cmd.arg("--cpus").arg(cpu_list(cpus));
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let stdout = child.stdout.take().context("testbed stdout not captured")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .context("the testbed did not report its address within 10s")?
        .context("cannot read the testbed's output")?
        .context("the testbed exited before listening")?;
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|a| a.trim().parse().ok())
        .with_context(|| format!("unexpected testbed output {line:?}"))?;
    Ok((child, addr))
}

/// Starts `n` agents (`bin`) dialing `coordinator`; agent `i` sends from
/// 127.0.0.(2+i) so each looks like its own host to the target.
pub(crate) fn start_agents(
    bin: &Path,
    n: u32,
    coordinator: &str,
    token: &str,
    cpus: Option<&[usize]>,
) -> anyhow::Result<Vec<Child>> {
    (0..n)
        .map(|i| {
            let mut cmd = Command::new(bin);
            cmd.arg("--coordinator")
                .arg(coordinator)
                .arg("--id")
                .arg(format!("local-{i}"))
                .arg("--connect-timeout")
                .arg("15s")
                // The coordinator prints their join, share and finish.
                .arg("--quiet")
                .env("LOADFLEET_TOKEN", token);
            if i < 250 {
                cmd.arg("--bind").arg(format!("127.0.0.{}", i + 2));
            }
            if let Some(cpus) = cpus {
                cmd.arg("--cpus").arg(cpu_list(cpus));
            }
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("cannot start {}", bin.display()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_split_target_and_agents() {
        assert_eq!(split_cpus(&[0]), None);
        assert_eq!(
            split_cpus(&[0, 1]),
            Some(CpuSplit {
                target: vec![0],
                agents: vec![1]
            })
        );
        assert_eq!(
            split_cpus(&[0, 1, 2, 3, 4]),
            Some(CpuSplit {
                target: vec![0, 1],
                agents: vec![2, 3, 4]
            })
        );
        assert_eq!(cpu_list(&[2, 3]), "2,3");
    }
}
