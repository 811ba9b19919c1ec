//! Limits on everything that crosses a boundary: plans, assignments and
//! snapshots. Both sides check them before they allocate or add, so the
//! numbers live here, once. A coordinator refuses a plan that an agent would
//! refuse as an assignment, and an agent refuses what no valid plan makes.

use std::time::Duration;

/// Highest open-model rate, fleet-wide (arrivals per second).
pub const MAX_RATE: f64 = 10_000_000.0;
/// Most closed-model clients, fleet-wide.
pub const MAX_CLIENTS: f64 = 1_000_000.0;
/// Most arrivals one scenario may hold.
pub const MAX_ARRIVALS: f64 = 2e9;
/// Longest scenario (warm-up included).
pub const MAX_SCENARIO: Duration = Duration::from_secs(30 * 24 * 3600);
/// Largest data file or request body shipped to agents.
pub const MAX_DATA_BYTES: u64 = 16 * 1024 * 1024;
/// Largest control message either side accepts (an assignment carries the
/// data files).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
