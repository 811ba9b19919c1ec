//! The HTTP/1.1 transport: a hyper client with a keep-alive pool per worker.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use loadfleet_proto::v1;

use crate::recorder::Outcome;

/// What every request of the run looks like, parsed once so that building a
/// request costs only cheap clones of reference-counted parts.
#[derive(Clone)]
pub struct Template {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl Template {
    pub fn from_proto(t: &v1::RequestTemplate) -> anyhow::Result<Self> {
        let method = if t.method.is_empty() {
            Method::GET
        } else {
            Method::from_bytes(t.method.as_bytes())
                .with_context(|| format!("request method {:?} is not valid", t.method))?
        };
        let uri: Uri = t
            .url
            .parse()
            .with_context(|| format!("target url {:?} is not a valid URL", t.url))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => bail!("target url scheme {other:?} is not supported yet; use http://"),
            None => bail!(
                "target url {:?} has no scheme; use http://HOST:PORT/PATH",
                t.url
            ),
        }
        if uri.host().is_none() {
            bail!("target url {:?} has no host", t.url);
        }
        let mut headers = HeaderMap::new();
        for h in &t.headers {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .with_context(|| format!("header name {:?} is not valid", h.name))?;
            let value = HeaderValue::from_str(&h.value)
                .with_context(|| format!("header {:?} has an invalid value", h.name))?;
            headers.append(name, value);
        }
        Ok(Self {
            method,
            uri,
            headers,
            body: Bytes::from(t.body.clone()),
        })
    }

    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    fn request(&self) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        if !self.headers.is_empty() {
            *req.headers_mut() = self.headers.clone();
        }
        req
    }
}

/// A keep-alive HTTP/1.1 client owned by one worker.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    template: Template,
    timeout: Duration,
}

impl HttpClient {
    /// `source` binds outgoing connections to a local address, so agents on
    /// one machine can appear as distinct hosts (127.0.0.2, 127.0.0.3, …).
    pub fn new(
        template: Template,
        timeout: Duration,
        connections: usize,
        source: Option<IpAddr>,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        connector.set_local_address(source);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(connections.max(1))
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self {
            client,
            template,
            timeout,
        }
    }

    /// Sends one request and reads the whole response body; the body is part
    /// of the latency because a user waits for it too.
    pub async fn send(&self) -> Outcome {
        let fut = async {
            let resp = self.client.request(self.template.request()).await?;
            let status = resp.status().as_u16();
            resp.into_body()
                .collect()
                .await
                .map_err(ClientFailure::Body)?;
            Ok::<u16, ClientFailure>(status)
        };
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(status)) => Outcome::Status(status),
            Ok(Err(e)) => Outcome::Error(e.kind()),
            Err(_) => Outcome::Error("timeout"),
        }
    }
}

/// The two ways hyper can fail us, kept apart to classify them.
enum ClientFailure {
    Request(hyper_util::client::legacy::Error),
    Body(hyper::Error),
}

impl From<hyper_util::client::legacy::Error> for ClientFailure {
    fn from(e: hyper_util::client::legacy::Error) -> Self {
        Self::Request(e)
    }
}

impl ClientFailure {
    /// The report's error kind: what an operator would act on.
    fn kind(&self) -> &'static str {
        let (connect, root): (bool, &(dyn std::error::Error + 'static)) = match self {
            ClientFailure::Request(e) => (e.is_connect(), e),
            ClientFailure::Body(e) => (false, e),
        };
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(root);
        while let Some(err) = source {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                return io_kind(io.kind(), connect);
            }
            if let Some(h) = err.downcast_ref::<hyper::Error>() {
                if h.is_incomplete_message() || h.is_canceled() {
                    return "reset";
                }
                if h.is_timeout() {
                    return "timeout";
                }
                if h.is_parse() {
                    return "protocol";
                }
            }
            source = err.source();
        }
        if connect {
            "connect"
        } else {
            "other"
        }
    }
}

fn io_kind(kind: std::io::ErrorKind, connect: bool) -> &'static str {
    use std::io::ErrorKind::*;
    match kind {
        ConnectionRefused => "refused",
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => "reset",
        TimedOut => "timeout",
        AddrNotAvailable | AddrInUse => "local_address",
        NotFound | InvalidInput if connect => "dns",
        _ if connect => "connect",
        _ => "io",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(url: &str) -> anyhow::Result<Template> {
        Template::from_proto(&v1::RequestTemplate {
            method: "POST".into(),
            url: url.into(),
            headers: vec![v1::Header {
                name: "x-test".into(),
                value: "1".into(),
            }],
            body: b"hi".to_vec(),
        })
    }

    #[test]
    fn bad_urls_name_the_problem() {
        let e = template("ftp://x/").err().unwrap().to_string();
        assert!(e.contains("scheme"), "{e}");
        let e = template("/just/a/path").err().unwrap().to_string();
        assert!(e.contains("no scheme") || e.contains("no host"), "{e}");
        assert!(template("http://127.0.0.1:1/x").is_ok());
    }

    #[tokio::test]
    async fn closed_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = HttpClient::new(
            template(&format!("http://127.0.0.1:{port}/")).unwrap(),
            Duration::from_secs(2),
            1,
            None,
        );
        assert_eq!(client.send().await, Outcome::Error("refused"));
    }
}
