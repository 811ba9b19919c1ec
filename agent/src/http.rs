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
use loadfleet_proto::partition::Interleave;
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::template::{Text, Values};
use loadfleet_proto::v1;

use crate::recorder::Outcome;

/// One request of a scenario's mix, parsed once. Parts without
/// placeholders are prebuilt, so a fully static request costs only clones
/// of reference-counted parts.
struct RequestSpec {
    method: Method,
    url: Text,
    uri: Option<Uri>,
    headers: Vec<(HeaderName, Text)>,
    static_headers: Option<HeaderMap>,
    body: Option<Text>,
    static_body: Bytes,
}

/// A scenario's weighted mix of requests and the data they draw from.
pub struct RequestMix {
    specs: Vec<RequestSpec>,
    interleave: Interleave,
    rows: Vec<Vec<String>>,
    random_rows: bool,
    agent: u32,
}

/// Checks that a URL can be sent to: http with a host.
fn check_uri(url: &str) -> anyhow::Result<Uri> {
    let uri: Uri = url
        .parse()
        .with_context(|| format!("target url {url:?} is not a valid URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => bail!("target url scheme {other:?} is not supported yet; use http://"),
        None => bail!("target url {url:?} has no scheme; use http://HOST:PORT/PATH"),
    }
    if uri.host().is_none() {
        bail!("target url {url:?} has no host");
    }
    Ok(uri)
}

impl RequestMix {
    pub fn from_proto(
        requests: &[v1::RequestTemplate],
        data: Option<&v1::DataTable>,
        agent: u32,
    ) -> anyhow::Result<Self> {
        if requests.is_empty() {
            bail!("the scenario has no requests");
        }
        let columns: &[String] = data.map_or(&[], |d| d.columns.as_slice());
        let mut specs = Vec::with_capacity(requests.len());
        for t in requests {
            let method = if t.method.is_empty() {
                Method::GET
            } else {
                Method::from_bytes(t.method.as_bytes())
                    .with_context(|| format!("request method {:?} is not valid", t.method))?
            };
            let url = Text::parse(&t.url, columns).with_context(|| format!("url {:?}", t.url))?;
            let uri = if url.is_static() {
                Some(check_uri(&t.url)?)
            } else {
                None
            };
            let mut headers = Vec::new();
            for h in &t.headers {
                let name = HeaderName::from_bytes(h.name.as_bytes())
                    .with_context(|| format!("header name {:?} is not valid", h.name))?;
                let value = Text::parse(&h.value, columns)
                    .with_context(|| format!("header {:?}", h.name))?;
                headers.push((name, value));
            }
            let static_headers = if headers.iter().all(|(_, v)| v.is_static()) {
                let mut map = HeaderMap::new();
                for h in &t.headers {
                    let value = HeaderValue::from_str(&h.value)
                        .with_context(|| format!("header {:?} has an invalid value", h.name))?;
                    if let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) {
                        map.append(name, value);
                    }
                }
                Some(map)
            } else {
                None
            };
            // A body that is not UTF-8 (a binary file) is sent as it is.
            let body = match std::str::from_utf8(&t.body) {
                Ok(text) => {
                    Some(Text::parse(text, columns).context("body")?).filter(|b| !b.is_static())
                }
                Err(_) => None,
            };
            specs.push(RequestSpec {
                method,
                url,
                uri,
                headers,
                static_headers,
                body,
                static_body: Bytes::from(t.body.clone()),
            });
        }
        let weights: Vec<u32> = requests.iter().map(|r| r.weight.max(1)).collect();
        Ok(Self {
            specs,
            interleave: Interleave::new(&weights)?,
            rows: data.map_or_else(Vec::new, |d| {
                d.rows.iter().map(|r| r.values.clone()).collect()
            }),
            random_rows: data.is_some_and(|d| d.random),
            agent,
        })
    }

    /// Builds the request for fleet-wide arrival `seq`. An error means the
    /// rendered values do not form a valid request (e.g. a data value with a
    /// space in a URL); the arrival is then counted unsent, never sent.
    pub fn build(
        &self,
        seq: u64,
        rng: &mut SplitMix64,
    ) -> Result<Request<Full<Bytes>>, &'static str> {
        let spec = &self.specs[self.interleave.owner(seq)];
        let row = if self.rows.is_empty() {
            None
        } else if self.random_rows {
            Some(self.rows[(rng.next_u64() % self.rows.len() as u64) as usize].as_slice())
        } else {
            Some(self.rows[(seq % self.rows.len() as u64) as usize].as_slice())
        };
        let mut values = Values {
            seq,
            agent: self.agent,
            rng,
            row,
        };
        let body = match &spec.body {
            None => spec.static_body.clone(),
            Some(t) => {
                let mut s = String::new();
                t.render(&mut values, &mut s);
                Bytes::from(s)
            }
        };
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = spec.method.clone();
        *req.uri_mut() = match &spec.uri {
            Some(uri) => uri.clone(),
            None => {
                let mut s = String::new();
                spec.url.render(&mut values, &mut s);
                let uri: Uri = s.parse().map_err(|_| UNSENT_INVALID_REQUEST)?;
                if uri.host().is_none() {
                    return Err(UNSENT_INVALID_REQUEST);
                }
                uri
            }
        };
        match &spec.static_headers {
            Some(map) if !map.is_empty() => *req.headers_mut() = map.clone(),
            Some(_) => {}
            None => {
                for (name, value) in &spec.headers {
                    let mut s = String::new();
                    value.render(&mut values, &mut s);
                    let value = HeaderValue::from_str(&s).map_err(|_| UNSENT_INVALID_REQUEST)?;
                    req.headers_mut().append(name.clone(), value);
                }
            }
        }
        Ok(req)
    }
}

/// Unsent reason: the rendered template did not form a valid request.
pub const UNSENT_INVALID_REQUEST: &str = "invalid_request";

/// A keep-alive HTTP/1.1 client owned by one worker.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl HttpClient {
    /// `source` binds outgoing connections to a local address, so agents on
    /// one machine can appear as distinct hosts (127.0.0.2, 127.0.0.3, …).
    pub fn new(timeout: Duration, connections: usize, source: Option<IpAddr>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        connector.set_local_address(source);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(connections.max(1))
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self { client, timeout }
    }

    /// Sends one request and reads the whole response body; the body is part
    /// of the latency because a user waits for it too.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Outcome {
        let fut = async {
            let resp = self.client.request(request).await?;
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

    fn template(url: &str, weight: u32) -> v1::RequestTemplate {
        v1::RequestTemplate {
            method: "POST".into(),
            url: url.into(),
            headers: vec![v1::Header {
                name: "x-user".into(),
                value: "{{data.user}}".into(),
            }],
            body: b"seq={{seq}}".to_vec(),
            weight,
        }
    }

    fn data() -> v1::DataTable {
        v1::DataTable {
            columns: vec!["user".into()],
            rows: vec![
                v1::DataRow {
                    values: vec!["ann".into()],
                },
                v1::DataRow {
                    values: vec!["bob".into()],
                },
            ],
            random: false,
        }
    }

    #[test]
    fn bad_urls_name_the_problem() {
        let mix = |url: &str| RequestMix::from_proto(&[template(url, 1)], Some(&data()), 0);
        let e = mix("ftp://x/").err().unwrap().to_string();
        assert!(e.contains("scheme"), "{e}");
        let e = mix("/just/a/path").err().unwrap().to_string();
        assert!(e.contains("no scheme") || e.contains("no host"), "{e}");
        assert!(mix("http://127.0.0.1:1/x").is_ok());
        let e = format!("{:#}", mix("http://h/{{nope}}").err().unwrap());
        assert!(e.contains("nope"), "{e}");
    }

    #[tokio::test]
    async fn mix_follows_weights_and_renders_values() {
        let mix = RequestMix::from_proto(
            &[template("http://h/a/{{seq}}", 3), template("http://h/b", 1)],
            Some(&data()),
            5,
        )
        .unwrap();
        let mut rng = SplitMix64::new(1);
        let mut a = 0;
        for seq in 0..400 {
            let req = mix.build(seq, &mut rng).unwrap();
            if req.uri().path().starts_with("/a/") {
                a += 1;
                assert_eq!(req.uri().path(), format!("/a/{seq}"));
            }
            let user = req.headers()["x-user"].to_str().unwrap().to_string();
            assert_eq!(user, if seq % 2 == 0 { "ann" } else { "bob" });
            let body = req.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, format!("seq={seq}").as_bytes());
        }
        assert_eq!(a, 300, "weights 3:1 give exactly three quarters");
    }

    #[tokio::test]
    async fn closed_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let mix = RequestMix::from_proto(
            &[v1::RequestTemplate {
                url: format!("http://127.0.0.1:{port}/"),
                ..Default::default()
            }],
            None,
            0,
        )
        .unwrap();
        let client = HttpClient::new(Duration::from_secs(2), 1, None);
        let req = mix.build(0, &mut SplitMix64::new(1)).unwrap();
        assert_eq!(client.send(req).await, Outcome::Error("refused"));
    }
}
