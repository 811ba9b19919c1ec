//! What the agent learns about its own machine: CPU use (so the report can
//! tell when the generator, not the target, set the pace) and CPU pinning.

use anyhow::{bail, Context};

/// Parses a CPU list like `0`, `0,2` or `0-3,6` into CPU numbers.
pub fn parse_cpu_list(list: &str) -> anyhow::Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parse = |s: &str| {
            s.trim()
                .parse::<usize>()
                .with_context(|| format!("--cpus: {s:?} is not a CPU number (expected e.g. 0,2-3)"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse(a)?, parse(b)?);
                if a > b {
                    bail!("--cpus: range {part:?} runs backwards (write {b}-{a})");
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(parse(part)?),
        }
    }
    if cpus.is_empty() {
        bail!("--cpus: the list is empty (expected e.g. 0,2-3)");
    }
    if let Some(&too_big) = cpus.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
        bail!("--cpus: CPU {too_big} is beyond what this system can address");
    }
    Ok(cpus)
}

/// Pins the whole process (call before any thread starts, so every thread
/// inherits the mask).
pub fn pin_to_cpus(cpus: &[usize]) -> anyhow::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it,
    // and indices were checked against CPU_SETSIZE by parse_cpu_list.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        bail!("--cpus: cannot pin to CPUs {cpus:?}: {err} (does this machine have them?)");
    }
    Ok(())
}

/// CPU seconds (user + system) this process has used so far.
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0.0;
        }
        usage
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Host-wide CPU counters (busy, total) in jiffies from /proc/stat; `None`
/// where that file does not exist.
pub fn host_cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
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
/// target that lives on an agent's own machine.
pub fn host_addresses() -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    // SAFETY: getifaddrs allocates a list we only read and then free with
    // freeifaddrs; every pointer is checked for null before use, and
    // sockaddr is only reinterpreted as the family it declares.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut cur = head;
        while !cur.is_null() {
            let addr = (*cur).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(addr as *const libc::sockaddr_in);
                        out.push(std::net::IpAddr::from(
                            u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                        ));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(addr as *const libc::sockaddr_in6);
                        out.push(std::net::IpAddr::from(sin6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_errors_name_the_flag() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        for bad in ["", "x", "3-1", "99999"] {
            let e = parse_cpu_list(bad).unwrap_err().to_string();
            assert!(e.contains("--cpus"), "{bad}: {e}");
        }
    }

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
}
