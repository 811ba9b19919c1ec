//! Target URLs and the agent's `--allow-target` list. Input: allow-list
//! entries, one a line, then a line `--`, then a URL template, then a line
//! `--`, then a value every placeholder renders to.
//!
//! Properties: nothing panics; `check_url` accepts only http(s) with a
//! host; and a template the list accepts at assignment, rendered with any
//! value, either fails to parse or is still allowed at send time (the
//! assignment check alone already keeps load on the list).
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadfleet_agent::allow::AllowList;
use loadfleet_proto::target::check_url;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, "\n--\n");
    let (Some(list), Some(url)) = (parts.next(), parts.next()) else {
        if let Ok(uri) = check_url(text) {
            assert!(matches!(uri.scheme_str(), Some("http" | "https")));
            assert!(uri.host().is_some_and(|h| !h.is_empty()));
        }
        return;
    };
    let value = parts.next().unwrap_or("");
    let entries: Vec<&str> = list.lines().collect();
    let Ok(allow) = AllowList::parse(&entries) else {
        return;
    };
    if let Ok(uri) = check_url(url) {
        assert!(matches!(uri.scheme_str(), Some("http" | "https")));
        assert!(uri.host().is_some_and(|h| !h.is_empty()));
    }
    if allow.check_template(url).is_err() {
        return;
    }
    let mut rendered = String::new();
    let mut rest = url;
    while let Some(open) = rest.find("{{") {
        rendered.push_str(&rest[..open]);
        match rest[open + 2..].find("}}") {
            Some(close) => {
                rendered.push_str(value);
                rest = &rest[open + 2 + close + 2..];
            }
            None => {
                rest = &rest[open..];
                break;
            }
        }
    }
    rendered.push_str(rest);
    if let Ok(uri) = check_url(&rendered) {
        assert!(
            allow.vet_uri(&uri).is_ok(),
            "template {url:?} passed {allow} but renders to {rendered:?}"
        );
    }
});
