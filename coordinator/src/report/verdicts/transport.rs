//! What a run in which every request failed in transport most likely
//! means, in plain words: "nothing listens at 127.0.0.1:1" says more to a
//! new user than "150 refused". Read from the error kind seen most, and
//! the addresses the plan sends to.

use std::collections::BTreeMap;

use loadfleet_proto::vocab::ErrorKind;

/// `nothing listens at 127.0.0.1:1 (check …)` for the error kind seen
/// most, or `None` for a kind with no likely cause to name.
pub(super) fn likely_cause(errors: &BTreeMap<String, u64>, addresses: &[String]) -> Option<String> {
    let (kind, _) = errors.iter().max_by_key(|(_, n)| **n)?;
    let at = match addresses {
        [] => "the target's address".to_string(),
        [one] => one.clone(),
        many => many.join(" or "),
    };
    // The host names alone, for a name that did not resolve.
    let hosts = {
        let mut hosts: Vec<&str> = addresses
            .iter()
            .map(|a| a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h))
            .collect();
        hosts.dedup();
        if hosts.is_empty() {
            "the target's host name".to_string()
        } else {
            hosts.join(" or ")
        }
    };
    let cause = match kind.parse::<ErrorKind>().ok()? {
        ErrorKind::Refused => format!(
            "nothing listens at {at} (check the URL's host and port, and that the target is up)"
        ),
        ErrorKind::Timeout => format!(
            "{at} does not answer within the timeout (--timeout, target.timeout): a host that is down, a firewall that drops the packets, or a target far slower than the timeout"
        ),
        ErrorKind::Dns => format!(
            "{hosts} does not resolve from the agents (check the host name, and the agents' DNS)"
        ),
        ErrorKind::Tls => format!(
            "the TLS handshake with {at} fails (is it an https:// server, and does its certificate check out against [tls] ca_cert?)"
        ),
        ErrorKind::Connect => format!(
            "{at} cannot be reached from the agents (no route to it: check the address, and the network between them)"
        ),
        ErrorKind::Reset => format!(
            "{at} accepts connections and closes them unanswered (is it the right port, and the protocol it speaks: http or https, HTTP/1.1 or HTTP/2?)"
        ),
        _ => return None,
    };
    Some(cause)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(kinds: &[(&str, u64)]) -> BTreeMap<String, u64> {
        kinds.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[test]
    fn names_the_likely_cause_of_the_kind_seen_most() {
        let one = ["127.0.0.1:1".to_string()];
        assert_eq!(
            likely_cause(&errors(&[("refused", 150)]), &one).as_deref(),
            Some("nothing listens at 127.0.0.1:1 (check the URL's host and port, and that the target is up)")
        );
        let timeout = likely_cause(&errors(&[("refused", 2), ("timeout", 148)]), &one).unwrap();
        assert!(
            timeout.starts_with("127.0.0.1:1 does not answer within the timeout"),
            "{timeout}"
        );
        let two = ["a.test:80".to_string(), "b.test:443".to_string()];
        let dns = likely_cause(&errors(&[("dns", 3)]), &two).unwrap();
        assert!(
            dns.starts_with("a.test or b.test does not resolve"),
            "{dns}"
        );
        let refused = likely_cause(&errors(&[("refused", 3)]), &[]).unwrap();
        assert!(
            refused.starts_with("nothing listens at the target's address"),
            "{refused}"
        );
        assert_eq!(likely_cause(&errors(&[("other", 3)]), &one), None);
        assert_eq!(likely_cause(&errors(&[]), &one), None);
    }
}
