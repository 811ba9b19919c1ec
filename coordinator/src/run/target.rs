//! Checks on the target before any agent is assigned: whether it is on
//! loopback, whether its name resolves, and the message types its gRPC
//! reflection gives. A target that fails them would only give errors.

use std::net::IpAddr;
use std::time::Duration;

use crate::console::Console;
use crate::error::{self, Error};
use crate::plan;

/// Does the URL's host name a loopback address?
pub(super) fn is_loopback_target(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match uri.host() {
        Some("localhost") => true,
        Some(h) => h
            .trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// How long the target's reflection service may take to give the message
/// types.
const REFLECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The message types of the plan's gRPC methods, from the target's
/// reflection service, before any agent is assigned: a target that cannot
/// say them would only give errors, so the run is refused (exit 2) with
/// what to do instead.
pub(super) async fn reflect(plan: &plan::Plan, target: &str) -> Result<Vec<u8>, Error> {
    let mut services: Vec<String> = plan
        .grpc_methods()
        .iter()
        .filter_map(|m| loadfleet_proto::grpc::method_name(m).ok())
        .map(|m| m.service.to_string())
        .collect();
    services.dedup();
    crate::grpc::reflect(target, &services, REFLECTION_TIMEOUT)
        .await
        .map_err(|e| error::flags(format!("{e}; nothing was sent")))
}

/// How long the target's name may take to resolve before the run is
/// refused (or, with remote agents, goes ahead with a warning).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves the target's host once, before any agent is assigned: a name
/// that does not resolve would only give errors. Local agents share this
/// machine's resolver, so the run is refused (exit 2); remote agents may
/// resolve names this machine cannot (a cluster's internal DNS), so the
/// run goes ahead with a warning, and the agents count each failure as a
/// `dns` error. The addresses serve the localhost-contamination check.
pub(super) async fn check_target_resolves(
    url: &str,
    local: bool,
    console: &Console,
) -> Result<Vec<IpAddr>, Error> {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return Ok(Vec::new());
    };
    let Some(host) = uri.host().map(|h| h.trim_matches(['[', ']']).to_string()) else {
        return Ok(Vec::new());
    };
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let resolved = match tokio::time::timeout(
        RESOLVE_TIMEOUT,
        tokio::net::lookup_host((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(addrs)) => Ok(addrs.map(|a| a.ip()).collect::<Vec<_>>()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", RESOLVE_TIMEOUT.as_secs())),
    };
    match resolved {
        Ok(ips) if !ips.is_empty() => Ok(ips),
        Ok(_) if local => Err(unresolved(url, &host, "no address")),
        Err(why) if local => Err(unresolved(url, &host, &why)),
        Ok(_) | Err(_) => {
            console.line(&format!(
                "warning: the target host {host:?} of {url} does not resolve on this machine; the remote agents will try their own resolver and count each failure as a dns error"
            ));
            Ok(Vec::new())
        }
    }
}

fn unresolved(url: &str, host: &str, why: &str) -> Error {
    error::flags(format!(
        "the target host {host:?} of {url} does not resolve ({why}); nothing was sent. Check the host name in --url (or the plan's target.url)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_targets_are_recognised() {
        assert!(is_loopback_target("http://127.0.0.1:80/"));
        assert!(is_loopback_target("http://localhost/"));
        assert!(is_loopback_target("http://[::1]:8080/"));
        assert!(!is_loopback_target("http://10.1.2.3/"));
    }
}
