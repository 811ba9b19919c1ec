//! What a process learns about itself and its machine: CPU use (so the
//! report can tell when the generator, not the target, set the pace), its
//! host name and its interface addresses.

use std::net::IpAddr;

use nix::ifaddrs::getifaddrs;
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;

/// CPU seconds (user + system) this process has used so far; 0 if the
/// kernel will not say, which only a broken kernel would do for
/// `RUSAGE_SELF`, so a sampler sees no use rather than failing a run.
pub fn process_cpu_seconds() -> f64 {
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let secs = |tv: TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

/// CPU time the calling thread has used so far; `None` if the kernel will
/// not say. A thread that was stopped (SIGSTOP, a paused VM) gains none,
/// one that was merely busy gains about as much as the wall clock.
pub fn thread_cpu_time() -> Option<std::time::Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(std::time::Duration::from)
}

/// Host-wide CPU counters (busy, total) in jiffies from /proc/stat; `None`
/// where that file does not exist.
pub fn host_cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_proc_stat(&stat)
}

/// The aggregate "cpu" line of /proc/stat as (busy, total): idle and iowait
/// are the only fields that are not work.
fn parse_proc_stat(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    if fields.len() < 4 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// This machine's host name, for the report.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// The addresses of this host's interfaces, so the coordinator can flag a
/// target that lives on an agent's own machine. Empty if the kernel will
/// not list them: the check is advice, not a reason to fail.
pub fn host_addresses() -> Vec<IpAddr> {
    let Ok(interfaces) = getifaddrs() else {
        return Vec::new();
    };
    interfaces
        .filter_map(|interface| {
            let addr = interface.address?;
            if let Some(v4) = addr.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_among_host_addresses() {
        let addrs = host_addresses();
        assert!(addrs.iter().any(|a| a.is_loopback()), "{addrs:?}");
    }

    #[test]
    fn cpu_time_moves_forward() {
        let a = process_cpu_seconds();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_seconds() >= a);
    }

    #[test]
    fn proc_stat_counts_idle_and_iowait_as_not_busy() {
        let stat = "cpu  10 2 3 80 5 0 0 0 0 0\ncpu0 10 2 3 80 5 0 0 0 0 0\n";
        assert_eq!(parse_proc_stat(stat), Some((15, 100)));
        assert_eq!(parse_proc_stat("cpu 1 2\n"), None);
        assert_eq!(parse_proc_stat(""), None);
        assert!(host_cpu_jiffies().is_some());
    }
}
