//! CPU pinning for the whole process.
//!
//! On a one-machine run the target and the load generator fight for CPU
//! (lesson 7 in PRODUCT.md). Pinning the target keeps them apart. It must
//! happen before the tokio runtime is built: threads inherit the affinity of
//! the thread that creates them, and `available_parallelism` (the default
//! worker count) then sees only the pinned CPUs.

use std::io;

use crate::cli::CpuList;

/// Pins the calling thread (and so every thread it creates later) to `cpus`.
///
/// The kernel silently drops CPUs that do not exist or that a cgroup does not
/// allow, as long as one remains; that would make a "pinned" run quietly run
/// elsewhere, so the effective set is read back and any dropped CPU is an
/// error.
#[cfg(target_os = "linux")]
pub fn pin_to_cpus(cpus: &CpuList) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut wanted: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.cpus() {
        // CpuList guarantees cpu < CpuList::MAX_CPUS == CPU_SETSIZE, so the
        // index is within the set.
        // SAFETY: `wanted` is a valid, exclusively borrowed cpu_set_t.
        unsafe { libc::CPU_SET(cpu, &mut wanted) };
    }
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: pid 0 is the calling thread; `wanted` lives across the call and
    // `size` is its size.
    if unsafe { libc::sched_setaffinity(0, size, &wanted) } != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINVAL) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no CPU in {cpus} is online and allowed for this process"),
            ));
        }
        return Err(err);
    }

    // SAFETY: as above; the kernel fills `effective`.
    let mut effective: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, size, &mut effective) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let dropped: Vec<String> = cpus
        .cpus()
        .iter()
        // SAFETY: `effective` is a valid cpu_set_t and cpu < CPU_SETSIZE.
        .filter(|&&cpu| !unsafe { libc::CPU_ISSET(cpu, &effective) })
        .map(ToString::to_string)
        .collect();
    if !dropped.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "CPU {} is offline or not allowed for this process",
                dropped.join(",")
            ),
        ));
    }
    Ok(())
}

/// Pinning is only implemented for Linux.
#[cfg(not(target_os = "linux"))]
pub fn pin_to_cpus(_cpus: &CpuList) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU pinning is only supported on Linux",
    ))
}
