//! CPU lists and pinning.
//!
//! On a one-machine run the target and the load generator fight for CPU;
//! pinning them to different CPUs keeps them apart. Pinning must happen
//! before the tokio runtime is built: threads inherit the affinity of the
//! thread that creates them, and `available_parallelism` (the default worker
//! count) then sees only the pinned CPUs.

use std::fmt;
use std::str::FromStr;

use nix::errno::Errno;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::Error;

/// A non-empty set of CPU indices, written like Linux's cpulist format:
/// "0", "0,1", "0-3,6". Kept sorted and without duplicates, every index
/// below [`CpuList::MAX_CPUS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// The highest CPU index the kernel's affinity mask (`cpu_set_t`) can
    /// hold, plus one.
    pub const MAX_CPUS: usize = CpuSet::count();

    /// The set of these CPUs, in any order and with repeats allowed.
    pub fn new(cpus: impl IntoIterator<Item = usize>) -> Result<Self, Error> {
        let mut cpus: Vec<usize> = cpus.into_iter().collect();
        if let Some(&cpu) = cpus.iter().find(|&&cpu| cpu >= Self::MAX_CPUS) {
            return Err(Error::CpuOutOfRange { cpu });
        }
        if cpus.is_empty() {
            return Err(Error::NoCpus);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuList(cpus))
    }

    /// The CPU indices, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// The kernel's mask of these CPUs.
    fn to_cpu_set(&self) -> Result<CpuSet, Error> {
        let mut set = CpuSet::new();
        for &cpu in &self.0 {
            // Cannot fail: every index is below MAX_CPUS.
            set.set(cpu).map_err(Error::os("CPU_SET"))?;
        }
        Ok(set)
    }
}

impl FromStr for CpuList {
    type Err = Error;

    fn from_str(list: &str) -> Result<Self, Self::Err> {
        let parse_cpu = |entry: &str| -> Result<usize, Error> {
            let cpu = entry.trim().parse().map_err(|_| Error::NotACpu {
                entry: entry.to_owned(),
            })?;
            if cpu >= Self::MAX_CPUS {
                return Err(Error::CpuOutOfRange { cpu });
            }
            Ok(cpu)
        };
        let mut cpus = Vec::new();
        for item in list.split(',') {
            if item.trim().is_empty() {
                return Err(Error::EmptyEntry {
                    list: list.to_owned(),
                });
            }
            match item.split_once('-') {
                Some((first, last)) => {
                    let (first, last) = (parse_cpu(first)?, parse_cpu(last)?);
                    if first > last {
                        return Err(Error::BackwardsRange {
                            range: item.trim().to_owned(),
                        });
                    }
                    cpus.extend(first..=last);
                }
                None => cpus.push(parse_cpu(item)?),
            }
        }
        CpuList::new(cpus)
    }
}

impl fmt::Display for CpuList {
    /// Writes the canonical cpulist form, merging runs into ranges.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0.as_slice();
        let mut first_item = true;
        while let Some(&start) = rest.first() {
            let run = rest
                .iter()
                .enumerate()
                .take_while(|&(i, &cpu)| cpu == start + i)
                .count();
            if !first_item {
                f.write_str(",")?;
            }
            first_item = false;
            if run == 1 {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{}", start + run - 1)?;
            }
            rest = &rest[run..];
        }
        Ok(())
    }
}

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> Result<CpuList, Error> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(Error::os("sched_getaffinity"))?;
    CpuList::new((0..CpuList::MAX_CPUS).filter(|&cpu| set.is_set(cpu).unwrap_or(false)))
}

/// Pins the calling thread (and so every thread it creates later) to `cpus`.
///
/// The kernel silently drops CPUs that do not exist or that a cgroup does not
/// allow, as long as one remains; that would make a "pinned" run quietly run
/// elsewhere, so the effective set is read back and any dropped CPU is an
/// error.
pub fn pin_to_cpus(cpus: &CpuList) -> Result<(), Error> {
    match sched_setaffinity(Pid::from_raw(0), &cpus.to_cpu_set()?) {
        Ok(()) => {}
        Err(Errno::EINVAL) => return Err(Error::NoCpuAllowed { cpus: cpus.clone() }),
        Err(source) => {
            return Err(Error::Os {
                call: "sched_setaffinity",
                source,
            })
        }
    }
    let effective = allowed_cpus()?;
    let dropped: Vec<usize> = cpus
        .cpus()
        .iter()
        .copied()
        .filter(|cpu| effective.cpus().binary_search(cpu).is_err())
        .collect();
    if dropped.is_empty() {
        Ok(())
    } else {
        Err(Error::CpusDropped { dropped })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn cpu_lists_parse_and_print_canonically() {
        let list: CpuList = "3, 0-1,1,6-7".parse().unwrap();
        assert_eq!(list.cpus(), &[0, 1, 3, 6, 7]);
        assert_eq!(list.to_string(), "0-1,3,6-7");
        assert_eq!("0".parse::<CpuList>().unwrap().to_string(), "0");
        assert_eq!("0-2,5".parse::<CpuList>().unwrap().cpus(), &[0, 1, 2, 5]);
    }

    #[test]
    fn bad_cpu_lists_are_rejected() {
        for bad in [
            "", ",", "a", "1-", "-1", "3-1", "0,,1", "0,", "1024", "0-99999",
        ] {
            assert!(bad.parse::<CpuList>().is_err(), "{bad:?} was accepted");
        }
        assert!(CpuList::new([]).is_err());
        assert!(CpuList::new([CpuList::MAX_CPUS]).is_err());
    }

    #[test]
    fn pinning_to_the_allowed_cpus_keeps_them() {
        let allowed = allowed_cpus().unwrap();
        pin_to_cpus(&allowed).unwrap();
        assert_eq!(allowed_cpus().unwrap(), allowed);
    }

    #[test]
    fn pinning_to_a_cpu_that_does_not_exist_fails() {
        let last = CpuList::new([CpuList::MAX_CPUS - 1]).unwrap();
        let err = pin_to_cpus(&last).unwrap_err();
        assert!(matches!(err, Error::NoCpuAllowed { .. }), "{err}");
    }

    proptest! {
        #[test]
        fn format_then_parse_gives_the_same_list(
            cpus in proptest::collection::vec(0..CpuList::MAX_CPUS, 1..64),
        ) {
            let list = CpuList::new(cpus).unwrap();
            let text = list.to_string();
            prop_assert_eq!(text.parse::<CpuList>().unwrap(), list);
        }

        #[test]
        fn parsing_is_order_and_repeat_blind(
            cpus in proptest::collection::vec(0..CpuList::MAX_CPUS, 1..64),
        ) {
            let text = cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
            let list: CpuList = text.parse().unwrap();
            prop_assert_eq!(list, CpuList::new(cpus).unwrap());
        }
    }
}
