//! The agent's CPU use per interval, which the session streams alongside
//! the workers' snapshots.

use std::collections::HashMap;

use loadfleet_proto::v1;

use crate::sys;

/// Process and host CPU use per interval.
pub(super) struct CpuSampler {
    process: f64,
    host: Option<(u64, u64)>,
}

impl CpuSampler {
    pub(super) fn new() -> Self {
        Self {
            process: sys::process_cpu_seconds(),
            host: sys::host_cpu_jiffies(),
        }
    }

    pub(super) fn snapshot(&mut self, index: u64) -> v1::Snapshot {
        let process = sys::process_cpu_seconds();
        let host = sys::host_cpu_jiffies();
        let host_cpu = match (self.host, host) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
            _ => 0.0,
        };
        let cpu_seconds = (process - self.process).max(0.0);
        self.process = process;
        self.host = host;
        v1::Snapshot {
            interval_index: index,
            cpu_seconds,
            host_cpu,
            unsent: HashMap::new(),
            ..Default::default()
        }
    }
}
