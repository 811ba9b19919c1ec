//! `--allow-target`: the hosts this agent may send to, checked twice. At
//! assignment, every URL template must fix its scheme and authority before
//! any placeholder, and that authority must be on the list. At send time,
//! the rendered URL's host and port are compared again, so no data value or
//! parser quirk can aim a request elsewhere: such a request is counted
//! unsent (`not_allowed`) and never leaves the agent. The list guards
//! against the coordinator itself (a stolen token, a rogue peer), so nothing
//! the coordinator sends is trusted here.

use http::Uri;
use loadfleet_proto::target::check_url;
use loadfleet_proto::vocab::UnsentReason;

/// One allowed target: a host, and a port unless any port is fine.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// Lower-case, IPv6 without brackets.
    host: String,
    port: Option<u16>,
}

/// A `--allow-target` value that is not `host` or `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--allow-target {entry:?}: {problem}; write HOST, HOST:PORT or [IPv6]:PORT")]
pub(crate) struct AllowListError {
    /// The entry as given.
    pub entry: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

/// Why this agent will not send where an assignment points. The message
/// goes back to the coordinator, whose report names the refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TargetRefused {
    /// A placeholder comes before the end of the URL's authority (in the
    /// scheme, the host or the port), so the target is only known per
    /// request.
    #[error(
        "target {url:?} has no fixed scheme and host before its first placeholder, and this agent only sends to --allow-target {allow}"
    )]
    NoFixedHost {
        /// The URL template, cut to 200 characters.
        url: String,
        /// The allow list, comma-separated.
        allow: String,
    },
    /// The host and port are not in the allow list.
    #[error("target {host}:{port} is not in this agent's --allow-target list ({allow})")]
    NotAllowed {
        /// The target's host, as written.
        host: String,
        /// The target's port (the scheme's default when not written).
        port: u16,
        /// The allow list, comma-separated.
        allow: String,
    },
}

/// The parsed `--allow-target` list; empty allows any target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AllowList {
    entries: Vec<Entry>,
}

impl AllowList {
    /// Parses the flag's values (`host`, `host:port`, `[v6]:port`, or a
    /// bare IPv6 address).
    pub(crate) fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, AllowListError> {
        let mut entries = Vec::with_capacity(values.len());
        for value in values {
            let raw = value.as_ref();
            let bad = |problem| AllowListError {
                entry: raw.chars().take(200).collect(),
                problem,
            };
            let v = raw.trim();
            if v.is_empty() {
                return Err(bad("the entry is empty"));
            }
            if v.contains(['/', '@', '?', '#', '{', ' ']) {
                return Err(bad("give a host, not a URL"));
            }
            let (host, port) = if let Some(rest) = v.strip_prefix('[') {
                let (host, after) = rest.split_once(']').ok_or_else(|| bad("unclosed ["))?;
                match after {
                    "" => (host, None),
                    _ => match after.strip_prefix(':').map(str::parse::<u16>) {
                        Some(Ok(port)) => (host, Some(port)),
                        _ => return Err(bad("the port is not a number from 0 to 65535")),
                    },
                }
            } else if v.matches(':').count() > 1 {
                // A bare IPv6 address: no port can be told apart.
                (v, None)
            } else if let Some((host, port)) = v.split_once(':') {
                match port.parse::<u16>() {
                    Ok(port) => (host, Some(port)),
                    Err(_) => return Err(bad("the port is not a number from 0 to 65535")),
                }
            } else {
                (v, None)
            };
            if host.is_empty() {
                return Err(bad("the host is empty"));
            }
            entries.push(Entry {
                host: host.to_ascii_lowercase(),
                port,
            });
        }
        Ok(Self { entries })
    }

    /// Whether `host` (as a URI has it, IPv6 in brackets or not) and `port`
    /// are allowed. Allocates nothing: it runs for every request whose URL
    /// has placeholders.
    pub(crate) fn permits(&self, host: &str, port: u16) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        self.entries
            .iter()
            .any(|e| e.host.eq_ignore_ascii_case(host) && e.port.is_none_or(|p| p == port))
    }

    /// Whether a parsed request URI may be sent, as the client would dial
    /// it: http or https with a host (else `invalid_request`), and that
    /// host and port (the scheme's default when not written) on the list
    /// (else `not_allowed`).
    pub(crate) fn vet_uri(&self, uri: &Uri) -> Result<(), UnsentReason> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(UnsentReason::InvalidRequest),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or(UnsentReason::InvalidRequest)?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        if self.permits(host, port) {
            Ok(())
        } else {
            Err(UnsentReason::NotAllowed)
        }
    }

    /// Checks a URL template at assignment: its scheme and authority must be
    /// literal (no placeholder before the `/`, `?` or `#` that ends the
    /// authority) and allowed.
    pub(crate) fn check_template(&self, url: &str) -> Result<(), TargetRefused> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let no_fixed_host = || TargetRefused::NoFixedHost {
            url: url.chars().take(200).collect(),
            allow: self.to_string(),
        };
        let fixed = match url.find("{{") {
            None => url,
            Some(open) => {
                let prefix = &url[..open];
                let scheme_end = prefix.find("://").ok_or_else(no_fixed_host)?;
                let authority = &prefix[scheme_end + 3..];
                let end = authority.find(['/', '?', '#']).ok_or_else(no_fixed_host)?;
                &prefix[..scheme_end + 3 + end]
            }
        };
        let uri = check_url(fixed).map_err(|_| no_fixed_host())?;
        if self.vet_uri(&uri).is_ok() {
            return Ok(());
        }
        let https = uri.scheme_str() == Some("https");
        Err(TargetRefused::NotAllowed {
            host: uri.host().unwrap_or_default().chars().take(200).collect(),
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            allow: self.to_string(),
        })
    }
}

impl std::fmt::Display for AllowList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let host = if e.host.contains(':') {
                format!("[{}]", e.host)
            } else {
                e.host.clone()
            };
            match e.port {
                Some(p) => write!(f, "{host}:{p}")?,
                None => f.write_str(&host)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> AllowList {
        AllowList::parse(v).unwrap()
    }

    #[test]
    fn entries_parse() {
        let l = list(&["10.0.0.9:8080", "API.example", "[::1]:9", "fe80::1"]);
        assert_eq!(l.to_string(), "10.0.0.9:8080,api.example,[::1]:9,[fe80::1]");
        for bad in ["", "h:x", "http://h/", "[::1", "[::1]x", ":80", "h:99999"] {
            let e = AllowList::parse(&[bad]).unwrap_err().to_string();
            assert!(e.contains("--allow-target"), "{bad}: {e}");
        }
    }

    #[test]
    fn templates_need_a_fixed_allowed_authority() {
        let l = list(&["10.0.0.9:8080", "api.example"]);
        assert!(l.check_template("http://10.0.0.9:8080/x/{{seq}}").is_ok());
        assert!(l
            .check_template("http://API.example/x?y={{data.u}}")
            .is_ok());
        assert!(l.check_template("https://api.example:9000/").is_ok());
        let e = l
            .check_template("http://10.0.0.9:9090/")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("10.0.0.9:9090") && e.contains("--allow-target"),
            "{e}"
        );
        for hostile in [
            "{{data.u}}://10.0.0.9:8080/",
            "http{{data.s}}://10.0.0.9:8080/",
            "http://{{data.host}}/",
            "http://10.0.0.9:{{data.port}}/",
            "http://10.0.0.9:8080{{data.rest}}",
            "http://api.example{{data.tld}}/",
            "http://user{{data.at}}api.example/",
        ] {
            assert!(
                matches!(
                    l.check_template(hostile),
                    Err(TargetRefused::NoFixedHost { .. })
                ),
                "{hostile}"
            );
        }
        assert!(list(&[]).check_template("{{data.u}}").is_ok());
    }

    #[test]
    fn rendered_uris_are_matched_on_host_and_port() {
        let l = list(&["127.0.0.2:8080", "[::1]"]);
        let vet = |u: &str| l.vet_uri(&u.parse().unwrap());
        assert_eq!(vet("http://127.0.0.2:8080/a"), Ok(()));
        assert_eq!(vet("http://[::1]:1234/"), Ok(()));
        let refused = Err(UnsentReason::NotAllowed);
        assert_eq!(vet("http://127.0.0.2/"), refused);
        assert_eq!(vet("https://127.0.0.2/"), refused);
        assert_eq!(vet("http://127.0.0.3:8080/"), refused);
        assert_eq!(vet("http://127.0.0.2:8080@127.0.0.3:8080/"), refused);
        let invalid = Err(UnsentReason::InvalidRequest);
        assert_eq!(vet("ftp://127.0.0.2:8080/"), invalid);
        assert_eq!(vet("/relative"), invalid);
        let open = list(&[]);
        assert_eq!(open.vet_uri(&"http://anything/".parse().unwrap()), Ok(()));
        assert_eq!(open.vet_uri(&"ftp://anything/".parse().unwrap()), invalid);
    }
}

/// The properties `fuzz/fuzz_targets/url_allow.rs` checks, on stable with a
/// bounded number of cases.
#[cfg(test)]
mod props {
    use std::cell::Cell;

    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    /// Every placeholder in `url` replaced by `value`, as the agent renders
    /// a data column.
    fn render(url: &str, value: &str) -> String {
        let mut out = String::new();
        let mut rest = url;
        while let Some(open) = rest.find("{{") {
            out.push_str(&rest[..open]);
            match rest[open + 2..].find("}}") {
                Some(close) => {
                    out.push_str(value);
                    rest = &rest[open + 2 + close + 2..];
                }
                None => {
                    rest = &rest[open..];
                    break;
                }
            }
        }
        out.push_str(rest);
        out
    }

    fn template() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            Just("{{data.u}}".to_string()),
            Just("://".to_string()),
            Just("http".to_string()),
            Just("allowed".to_string()),
            Just(":8080".to_string()),
            Just("@".to_string()),
            "[/?#:.\\[\\]\\\\]",
            "[a-z0-9]{0,4}",
        ];
        // Templates shaped as a plan writes them, so that many are accepted
        // and the rendering property below is reached.
        let shaped = (
            "(http|https)",
            "(allowed:8080|allowed|127\\.0\\.0\\.1|127\\.0\\.0\\.1:[0-9]{1,4}|other:8080)",
            "[/?#]?",
            "[a-z0-9/=&]{0,6}",
        )
            .prop_map(|(scheme, authority, end, before)| {
                format!("{scheme}://{authority}{end}{before}{{{{data.u}}}}")
            });
        prop_oneof![
            1 => ".{0,48}".boxed(),
            1 => prop::collection::vec(part, 0..10).prop_map(|v| v.concat()).boxed(),
            3 => shaped.boxed(),
        ]
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("http://victim/?".to_string()),
            Just("@victim".to_string()),
            Just("victim:80/".to_string()),
            ".{0,16}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Parsing any list entries never panics.
        #[test]
        fn any_entries_parse_without_panic(entries in prop::collection::vec(".{0,24}", 0..4)) {
            let _ = AllowList::parse(&entries);
        }
    }

    /// A template the list accepts at assignment stays on the list for any
    /// value its placeholders render to: whatever parses as a URL after
    /// rendering still passes the send-time check. The cases must reach that
    /// check often: a property whose premise never held would check nothing.
    #[test]
    fn accepted_templates_stay_on_the_list() {
        let allow = list(&["allowed:8080", "127.0.0.1"]);
        let vetted = Cell::new(0u32);
        TestRunner::new(Config::with_cases(256))
            .run(&(template(), value()), |(url, value)| {
                if allow.check_template(&url).is_ok() {
                    let rendered = render(&url, &value);
                    if let Ok(uri) = check_url(&rendered) {
                        vetted.set(vetted.get() + 1);
                        prop_assert!(
                            allow.vet_uri(&uri).is_ok(),
                            "{url:?} passed but renders to {rendered:?}"
                        );
                    }
                }
                Ok(())
            })
            .expect("the property holds");
        assert!(
            vetted.get() >= 16,
            "only {} of 256 cases reached the send-time check",
            vetted.get()
        );
    }

    fn list(v: &[&str]) -> AllowList {
        AllowList::parse(v).unwrap()
    }
}
