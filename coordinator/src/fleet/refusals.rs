//! Agents the service turned away before they joined (a wrong token, a
//! protocol version or hello it cannot take): how many, from where and
//! why. A run that then waits in vain for its agents says so, rather than
//! only "0 of 1 agent(s) joined", since the cause is known here.
//!
//! Bounded, as strangers may knock without end: a few reasons, a few
//! addresses each, the rest counted.

use std::net::{IpAddr, SocketAddr};

/// Reasons kept apart; a refusal for another reason still counts, under
/// the last one kept.
const MAX_REASONS: usize = 8;
/// Addresses named per reason; more are counted.
const MAX_ADDRESSES: usize = 5;
/// Refusals each told on the console as they happen; later ones are only
/// counted, so a stranger knocking in a loop cannot flood the console.
const MAX_TOLD: u64 = 20;

/// The refusals of one reason.
#[derive(Debug)]
struct Reason {
    why: String,
    count: u64,
    /// Hosts, not ports: an agent retrying comes from a fresh port each time.
    from: Vec<Option<IpAddr>>,
    more_addresses: bool,
}

/// Every refusal so far.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    reasons: Vec<Reason>,
    total: u64,
}

impl Refusals {
    /// Counts one refusal; returns the console line to write about it, or
    /// `None` past [`MAX_TOLD`] (the line then says later ones are counted).
    pub(super) fn note(&mut self, peer: Option<SocketAddr>, why: &str) -> Option<String> {
        self.total += 1;
        let at = match self.reasons.iter().position(|r| r.why == why) {
            Some(at) => at,
            None if self.reasons.len() < MAX_REASONS => {
                self.reasons.push(Reason {
                    why: why.to_string(),
                    count: 0,
                    from: Vec::new(),
                    more_addresses: false,
                });
                self.reasons.len() - 1
            }
            None => self.reasons.len() - 1,
        };
        let r = &mut self.reasons[at];
        r.count += 1;
        let host = peer.map(|p| p.ip());
        if !r.from.contains(&host) {
            if r.from.len() < MAX_ADDRESSES {
                r.from.push(host);
            } else {
                r.more_addresses = true;
            }
        }
        let from = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
        match self.total {
            n if n < MAX_TOLD => Some(format!("refused an agent from {from}: {why}")),
            MAX_TOLD => Some(format!(
                "refused an agent from {from}: {why} ({MAX_TOLD} refusals; further ones are only counted)"
            )),
            _ => None,
        }
    }

    /// `refused 2 agent connection(s): 2 from 10.0.0.5 (wrong or missing
    /// token; …)`, or `None` when none was refused.
    pub(super) fn summary(&self) -> Option<String> {
        if self.total == 0 {
            return None;
        }
        let parts: Vec<String> = self
            .reasons
            .iter()
            .map(|r| {
                let hosts: Vec<String> = r
                    .from
                    .iter()
                    .map(|h| h.map_or_else(|| "an unknown address".to_string(), |h| h.to_string()))
                    .collect();
                format!(
                    "{} from {}{} ({})",
                    r.count,
                    hosts.join(", "),
                    if r.more_addresses { " and others" } else { "" },
                    r.why
                )
            })
            .collect();
        Some(format!(
            "refused {} agent connection(s): {}",
            self.total,
            parts.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str, port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::new(ip.parse().unwrap(), port))
    }

    const TOKEN: &str = "wrong or missing token; start the agent with the coordinator's --token";

    #[test]
    fn counts_by_reason_and_host() {
        let mut r = Refusals::default();
        assert_eq!(r.summary(), None);
        let told = r.note(peer("10.0.0.5", 4000), TOKEN);
        assert_eq!(
            told.as_deref(),
            Some(format!("refused an agent from 10.0.0.5:4000: {TOKEN}").as_str())
        );
        r.note(peer("10.0.0.5", 4001), TOKEN);
        r.note(peer("10.0.0.6", 4000), TOKEN);
        r.note(None, "agent speaks protocol version 9");
        assert_eq!(
            r.summary().unwrap(),
            format!("refused 4 agent connection(s): 3 from 10.0.0.5, 10.0.0.6 ({TOKEN}); 1 from an unknown address (agent speaks protocol version 9)")
        );
    }

    /// Knocking in a loop: the console is told a bounded number of times,
    /// the summary stays short, and every refusal is counted.
    #[test]
    fn stays_bounded() {
        let mut r = Refusals::default();
        let mut told = 0;
        for i in 0..1000u32 {
            let ip = format!("10.0.{}.{}", i / 250, i % 250);
            if r.note(peer(&ip, 1), &format!("reason {}", i % 20))
                .is_some()
            {
                told += 1;
            }
        }
        assert_eq!(told, MAX_TOLD);
        assert_eq!(r.reasons.len(), MAX_REASONS);
        assert!(r.reasons.iter().all(|x| x.from.len() <= MAX_ADDRESSES));
        let summary = r.summary().unwrap();
        assert!(
            summary.starts_with("refused 1000 agent connection(s): "),
            "{summary}"
        );
        assert!(summary.contains("and others"), "{summary}");
        assert!(summary.len() < 2000, "{}", summary.len());
    }
}
