//! Clock offsets between the fleet and each agent, and the common start
//! instant on every agent's own clock.
//!
//! The fleet's clock is its monotonic time since the actor began (ns). A
//! probe is NTP's four timestamps: t1 we sent, t2 the agent received, t3 it
//! answered, t4 we received. The sample with the smallest round trip is the
//! one least bent by queueing, so it is the one kept.

use std::time::{Duration, SystemTime};

use loadfleet_proto::v1;
use tokio::time::Instant;

/// Clock-offset probes per agent; the one with the smallest round trip wins.
pub(super) const PINGS: u64 = 8;
/// Time between clock-probe rounds, so each round's pongs can come back.
pub(super) const PING_GAP: Duration = Duration::from_millis(25);
/// How long stragglers get to answer a probe after the last round.
pub(super) const PONG_WAIT: Duration = Duration::from_secs(2);

/// One clock sample: (round trip, agent clock minus fleet clock), in ns.
pub(super) type Sample = (u64, i64);

/// The sample a pong gives, `received_ns` being t4 on the fleet's clock.
pub(super) fn sample(p: &v1::Pong, received_ns: u64) -> Sample {
    let (t1, t2, t3, t4) = (
        p.coordinator_send_ns as i128,
        p.agent_recv_ns as i128,
        p.agent_send_ns as i128,
        received_ns as i128,
    );
    let rtt = ((t4 - t1) - (t3 - t2)).max(0) as u64;
    let offset = (((t2 - t1) + (t3 - t4)) / 2) as i64;
    (rtt, offset)
}

/// Keeps `new` when its round trip is shorter than the best so far.
pub(super) fn keep_best(best: &mut Option<Sample>, new: Sample) {
    if best.is_none_or(|(rtt, _)| new.0 < rtt) {
        *best = Some(new);
    }
}

/// How far ahead of now the common start is set, so that every
/// assignment arrives before it: a floor, plus four of the slowest round
/// trip, capped at 10 s.
pub(super) fn start_lead(max_rtt_ns: u64) -> Duration {
    Duration::from_millis(500)
        + Duration::from_nanos(max_rtt_ns.saturating_mul(4).min(10_000_000_000))
}

/// `start_ns` on the fleet's clock, read on the agent's clock.
pub(super) fn at_agent(start_ns: u64, offset: i64) -> u64 {
    (start_ns as i128 + offset as i128).max(0) as u64
}

/// Our wall clock (ns since the Unix epoch) minus the fleet's clock
/// (since `epoch`), read together, so wall clocks in agents' figures can
/// be set against the fleet's.
pub(super) fn wall_minus_mono_ns(epoch: Instant) -> i64 {
    let wall = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let mono = epoch.elapsed().as_nanos() as u64;
    i64::try_from(wall - i128::from(mono)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pong(t1: u64, t2: u64, t3: u64) -> v1::Pong {
        v1::Pong {
            seq: 0,
            coordinator_send_ns: t1,
            agent_recv_ns: t2,
            agent_send_ns: t3,
        }
    }

    #[test]
    fn a_symmetric_path_gives_the_offset_and_the_round_trip() {
        // 10 ms each way, the agent 1 s ahead, 2 ms to answer.
        let s = sample(
            &pong(100_000_000, 1_110_000_000, 1_112_000_000),
            122_000_000,
        );
        assert_eq!(s, (20_000_000, 1_000_000_000));
        // An agent behind us gives a negative offset.
        let s = sample(
            &pong(1_000_000_000, 510_000_000, 510_000_000),
            1_020_000_000,
        );
        assert_eq!(s, (20_000_000, -500_000_000));
    }

    #[test]
    fn the_shortest_round_trip_wins() {
        let mut best = None;
        keep_best(&mut best, (30, 5));
        keep_best(&mut best, (10, 7));
        keep_best(&mut best, (10, 9));
        keep_best(&mut best, (20, 1));
        assert_eq!(best, Some((10, 7)));
    }

    #[test]
    fn the_start_on_the_agent_clock_never_goes_below_zero() {
        assert_eq!(at_agent(1_000, 500), 1_500);
        assert_eq!(at_agent(1_000, -5_000), 0);
        assert_eq!(start_lead(0), Duration::from_millis(500));
        assert_eq!(start_lead(u64::MAX), Duration::from_millis(10_500));
    }
}
