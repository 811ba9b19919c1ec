//! What counts as a target URL, decided once for the plan, the flags and the
//! agent: a coordinator must never accept a URL that its agents would then
//! refuse mid-run, and an agent must refuse exactly what a coordinator would.

use http::Uri;

/// Why a target URL cannot be loaded. Messages say what to write instead;
/// the caller adds the field or flag name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not parseable as a URI at all.
    #[error("{url:?} is not a valid URL ({reason}); write e.g. \"http://HOST:PORT/path\"")]
    Invalid {
        /// The URL as given.
        url: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A scheme other than http or https.
    #[error("scheme {scheme:?} is not supported; use http:// or https://")]
    Scheme {
        /// The scheme as given.
        scheme: String,
    },
    /// No scheme: a bare host or path.
    #[error("{url:?} has no scheme; write \"http://{url}\"")]
    NoScheme {
        /// The URL as given.
        url: String,
    },
    /// A scheme but no host.
    #[error("{url:?} has no host")]
    NoHost {
        /// The URL as given.
        url: String,
    },
    /// A port no connection can be made to: past 65535 (a TCP port is 16
    /// bits), or 0 (no listener has it).
    #[error("{url:?} has port {port}, out of range; a port is 1 to 65535")]
    Port {
        /// The URL as given.
        url: String,
        /// The port as written.
        port: String,
    },
}

/// Checks that `url` is an absolute http(s) URL with a host, and returns it
/// parsed.
pub fn check_url(url: &str) -> Result<Uri, UrlError> {
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| UrlError::Invalid {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(s) => {
            return Err(UrlError::Scheme {
                scheme: s.to_string(),
            })
        }
        None => {
            return Err(UrlError::NoScheme {
                url: url.to_string(),
            })
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost {
            url: url.to_string(),
        });
    }
    if let Some(port) = written_port(&uri).filter(|p| !matches!(p.parse::<u16>(), Ok(1..))) {
        return Err(UrlError::Port {
            url: url.to_string(),
            port: port.to_string(),
        });
    }
    Ok(uri)
}

/// The port as written in the authority, when one is (`h:` has none).
/// The parser keeps any run of digits there, `99999` included, and only
/// its `port_u16` drops one that does not fit: that would then be dialled
/// as the scheme's default port, a target nobody named.
fn written_port(uri: &Uri) -> Option<&str> {
    let authority = uri.authority()?.as_str();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    // An IPv6 literal's colons are inside its brackets.
    let after_host = host_port
        .rsplit_once(']')
        .map_or(host_port, |(_, rest)| rest);
    after_host
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_with_a_host() {
        assert!(check_url("http://127.0.0.1:8080/x?y=1").is_ok());
        assert!(check_url("https://example.test").is_ok());
    }

    #[test]
    fn names_what_is_wrong() {
        assert!(matches!(
            check_url("ftp://h/"),
            Err(UrlError::Scheme { .. })
        ));
        assert!(matches!(
            check_url("h:80"),
            Err(UrlError::Scheme { .. }) | Err(UrlError::NoScheme { .. })
        ));
        assert!(matches!(check_url("/path"), Err(UrlError::NoScheme { .. })));
        assert!(matches!(
            check_url("http://"),
            Err(UrlError::Invalid { .. }) | Err(UrlError::NoHost { .. })
        ));
        assert!(matches!(
            check_url("http://a b"),
            Err(UrlError::Invalid { .. })
        ));
    }

    /// A port past 65535, or 0, is refused with the range; every port in
    /// it, and none at all, is accepted, IPv6 literals and user info too.
    #[test]
    fn ports_are_1_to_65535() {
        for url in [
            "http://127.0.0.1:99999/",
            "http://h:65536",
            "http://h:0/",
            "https://user:pw@h:70000/x",
            "http://[::1]:99999/",
        ] {
            let e = check_url(url).unwrap_err();
            assert!(matches!(e, UrlError::Port { .. }), "{url}: {e:?}");
            assert!(e.to_string().contains("1 to 65535"), "{url}: {e}");
        }
        assert!(check_url("http://127.0.0.1:99999/")
            .unwrap_err()
            .to_string()
            .contains("port 99999"));
        for url in [
            "http://h:1/",
            "http://h:65535",
            "http://h/",
            "http://h:/",
            "https://user:pw@h:8443/x",
            "http://[::1]:8080/",
            "http://[::1]/",
        ] {
            assert!(check_url(url).is_ok(), "{url}");
        }
    }
}

/// The properties `fuzz/fuzz_targets/url_allow.rs` checks for `check_url`,
/// on stable with a bounded number of cases.
#[cfg(test)]
mod props {
    use std::cell::Cell;

    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    /// A URL, and the host it must be accepted with when it is well formed
    /// by construction (`None`: anything goes, but nothing may panic).
    fn url() -> impl Strategy<Value = (String, Option<String>)> {
        prop_oneof![
            ".{0,64}".prop_map(|u| (u, None)),
            (
                "(http|https|ftp|HTTP|file|)",
                "(://|:/|:|//|)",
                "[a-z0-9.@:\\[\\]{}%-]{0,16}",
                "[/?#]?.{0,16}"
            )
                .prop_map(|(s, sep, host, rest)| (format!("{s}{sep}{host}{rest}"), None)),
            (
                "(http|https)",
                "[a-z][a-z0-9-]{0,12}",
                "(:[1-9][0-9]{0,3})?",
                "(/[a-z0-9?=&]{0,12})?"
            )
                .prop_map(|(s, host, port, path)| (
                    format!("{s}://{host}{port}{path}"),
                    Some(host)
                )),
        ]
    }

    /// Any string is accepted or refused without a panic, only an http(s)
    /// URL with a host is accepted, and every well-formed one is accepted
    /// with its host. The cases must reach both outcomes: a property whose
    /// premise never held would check nothing.
    #[test]
    fn only_http_with_a_host_is_accepted() {
        let (accepted, refused) = (Cell::new(0u32), Cell::new(0u32));
        TestRunner::new(Config::with_cases(256))
            .run(&url(), |(url, host)| {
                match check_url(&url) {
                    Ok(uri) => {
                        accepted.set(accepted.get() + 1);
                        prop_assert!(
                            matches!(uri.scheme_str(), Some("http" | "https")),
                            "{url:?}"
                        );
                        prop_assert!(uri.host().is_some_and(|h| !h.is_empty()), "{url:?}");
                        // A port written is the port dialled.
                        prop_assert!(
                            written_port(&uri).is_none() || uri.port_u16().is_some_and(|p| p > 0),
                            "{url:?}"
                        );
                        if let Some(host) = host {
                            prop_assert_eq!(uri.host(), Some(host.as_str()), "{:?}", url);
                        }
                    }
                    Err(e) => {
                        refused.set(refused.get() + 1);
                        prop_assert!(host.is_none(), "{url:?} is well formed but refused: {e}");
                    }
                }
                Ok(())
            })
            .expect("the property holds");
        assert!(
            accepted.get() >= 16 && refused.get() >= 16,
            "{} accepted, {} refused: the cases must reach both outcomes",
            accepted.get(),
            refused.get()
        );
    }
}
