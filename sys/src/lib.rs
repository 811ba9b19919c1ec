//! The Linux system calls loadfleet needs, written once for the agent, the
//! testbed and the coordinator, through `nix` rather than raw `libc`.
//!
//! - [`CpuList`], [`allowed_cpus`] and [`pin_to_cpus`]: the `--cpus` flags
//!   and local mode's split of CPUs between the target and the agents.
//! - [`process_cpu_seconds`] and [`host_cpu_jiffies`]: how busy the generator
//!   and its host are, so a report can tell when the generator set the pace;
//!   [`thread_cpu_time`], so a worker can tell being stopped from being busy.
//! - [`host_addresses`] and [`hostname`]: who the agent is, and whether the
//!   target lives on its own machine.
//! - [`bind_address_no_port`]: many connections from one bound source address.
//! - [`stamp_arrivals`], [`recv_stamped`] and [`recv_stamped_buf`]: when an
//!   answer reached the machine, whenever it is read.
//! - [`timer::PreciseTimer`]: arrival instants kept to microseconds.
//! - [`WatchedPoll`]: an epoll set of the caller's own, in tokio's reactor.
//! - [`raise_open_files`]: room for tens of thousands of held streams.
//! - [`read_secret`]: a token or password from a file (a Docker secret).
//!
//! Linux only, like the agent it serves.

// The one crate allowed `unsafe` (the workspace denies it): what `nix` and
// tokio leave to raw calls is wrapped here behind safe functions.
#![allow(unsafe_code)]
mod cpus;
mod host;
mod limits;
mod net;
mod poll;
mod read_buf;
mod secret;
pub mod timer;

pub use cpus::{allowed_cpus, pin_to_cpus, CpuList};
pub use host::{host_addresses, host_cpu_jiffies, hostname, process_cpu_seconds, thread_cpu_time};
pub use limits::{raise_open_files, OpenFiles};
pub use net::{
    bind_address_no_port, recv_stamped, recv_stamped_into, stamp_arrivals, Arrival, Clocks,
};
pub use poll::WatchedPoll;
pub use read_buf::recv_stamped_buf;
pub use secret::read_secret;

use nix::errno::Errno;

/// What can go wrong here. CPU-list variants read as the rest of a sentence
/// that starts with the flag's name, which the caller adds.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CPU-list entry (or one end of a range) is not a whole number.
    #[error("{entry:?} is not a CPU number (expected e.g. \"0\", \"0,1\" or \"0-3\")")]
    NotACpu { entry: String },
    /// A CPU-list has nothing between two commas, or at one end.
    #[error("empty entry in CPU list {list:?} (expected e.g. \"0\", \"0,1\" or \"0-3\")")]
    EmptyEntry { list: String },
    /// A range such as "3-1" whose end comes before its start.
    #[error("range {range:?} runs backwards")]
    BackwardsRange { range: String },
    /// A CPU index beyond what the kernel's affinity mask can hold.
    #[error("CPU {cpu} is out of range (at most {})", CpuList::MAX_CPUS - 1)]
    CpuOutOfRange { cpu: usize },
    /// A list built from no CPU at all (pinning to it would be meaningless).
    #[error("the CPU list is empty")]
    NoCpus,
    /// The kernel refused the whole mask: none of its CPUs is online and
    /// allowed (by the cgroup or the parent's affinity) for this process.
    #[error("no CPU in {cpus} is online and allowed for this process")]
    NoCpuAllowed { cpus: CpuList },
    /// The kernel kept some of the asked CPUs but silently dropped these, so
    /// a "pinned" run would quietly run elsewhere.
    #[error("CPU {} is offline or not allowed for this process", join(dropped))]
    CpusDropped { dropped: Vec<usize> },
    /// A system call failed; `call` names it.
    #[error("{call}: {source}")]
    Os {
        call: &'static str,
        #[source]
        source: Errno,
    },
    /// tokio's reactor would not watch the timer's descriptor (no runtime
    /// with I/O enabled, or the epoll set is full).
    #[error("cannot register the timer with tokio's reactor: {0}")]
    Reactor(#[source] std::io::Error),
}

impl Error {
    /// A closure for `map_err` that names the failed call.
    fn os(call: &'static str) -> impl FnOnce(Errno) -> Error {
        move |source| Error::Os { call, source }
    }
}

/// CPU numbers as "1,5": how the kernel's refusal is reported, one by one.
fn join(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
