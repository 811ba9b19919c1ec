//! A flow's cookie jar: what its answers set, sent back with its later
//! steps by RFC 6265's domain, path, expiry and `Secure` rules (the
//! `cookie_store` crate, as reqwest keeps cookies). One jar per flow, so
//! flows never share a session, as separate users would not.
//!
//! A target is input like any other: a cookie longer than
//! [`MAX_COOKIE_BYTES`] is not kept, and a jar holds at most
//! [`MAX_COOKIES_PER_FLOW`], so a storm of `Set-Cookie` headers costs a
//! flow bounded memory and its requests a bounded `Cookie` header.

use cookie_store::CookieStore;
use http::header::{COOKIE, SET_COOKIE};
use http::{HeaderMap, HeaderValue, Uri};
use loadfleet_proto::bounds::{MAX_COOKIES_PER_FLOW, MAX_COOKIE_BYTES};
use url::Url;

/// One flow's cookies.
#[derive(Default)]
pub(crate) struct Jar {
    store: CookieStore,
    /// Cookies kept so far (replacements included: the count only grows,
    /// so the bound holds without walking the store).
    kept: usize,
}

/// The URL form the store reads; `None` for a URI without a scheme and a
/// host (which no cookie could match).
fn url_of(uri: &Uri) -> Option<Url> {
    Url::parse(&uri.to_string()).ok()
}

impl Jar {
    /// Keeps the cookies `headers` set for a request to `uri`.
    pub(crate) fn keep(&mut self, uri: &Uri, headers: &HeaderMap) {
        let Some(url) = url_of(uri) else { return };
        for value in headers.get_all(SET_COOKIE) {
            if self.kept >= MAX_COOKIES_PER_FLOW {
                return;
            }
            let Ok(text) = value.to_str() else { continue };
            if text.len() > MAX_COOKIE_BYTES {
                continue;
            }
            if self.store.parse(text, &url).is_ok() {
                self.kept += 1;
            }
        }
    }

    /// Adds the cookies that go with a request to `uri` to its headers, as
    /// one `Cookie` header.
    pub(crate) fn attach(&self, uri: &Uri, headers: &mut HeaderMap) {
        if self.kept == 0 {
            return;
        }
        let Some(url) = url_of(uri) else { return };
        let mut line = String::new();
        for (name, value) in self.store.get_request_values(&url) {
            if !line.is_empty() {
                line.push_str("; ");
            }
            line.push_str(name);
            line.push('=');
            line.push_str(value);
        }
        if line.is_empty() {
            return;
        }
        if let Ok(v) = HeaderValue::from_str(&line) {
            headers.append(COOKIE, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(SET_COOKIE, HeaderValue::from_str(v).expect("header value"));
        }
        h
    }

    fn cookie_for(jar: &Jar, uri: &str) -> Option<String> {
        let mut h = HeaderMap::new();
        jar.attach(&uri.parse().expect("uri"), &mut h);
        h.get(COOKIE)
            .map(|v| v.to_str().expect("ascii").to_string())
    }

    #[test]
    fn cookies_go_back_by_domain_and_path() {
        let mut jar = Jar::default();
        let login: Uri = "http://127.0.0.1:8080/login".parse().expect("uri");
        jar.keep(
            &login,
            &set(&["session=abc; Path=/; HttpOnly", "cart=1; Path=/cart"]),
        );
        assert_eq!(
            cookie_for(&jar, "http://127.0.0.1:8080/orders").as_deref(),
            Some("session=abc")
        );
        let both = cookie_for(&jar, "http://127.0.0.1:8080/cart/x").expect("cookies");
        assert!(
            both.contains("session=abc") && both.contains("cart=1"),
            "{both}"
        );
        assert_eq!(
            cookie_for(&jar, "http://127.0.0.2:8080/orders"),
            None,
            "another host"
        );
    }

    #[test]
    fn a_storm_of_cookies_is_bounded() {
        let mut jar = Jar::default();
        let uri: Uri = "http://127.0.0.1/".parse().expect("uri");
        let many: Vec<String> = (0..MAX_COOKIES_PER_FLOW * 4)
            .map(|i| format!("c{i}=v; Path=/"))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        jar.keep(&uri, &set(&refs));
        let long = format!("big={}; Path=/", "x".repeat(MAX_COOKIE_BYTES));
        jar.keep(&uri, &set(&[&long]));
        let sent = cookie_for(&jar, "http://127.0.0.1/").expect("cookies");
        assert_eq!(sent.split("; ").count(), MAX_COOKIES_PER_FLOW);
        assert!(!sent.contains("big="));
    }
}
