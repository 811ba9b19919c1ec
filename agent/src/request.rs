//! A scenario's requests: the weighted mix of templates, parsed once per
//! assignment and rendered per arrival. Parts without placeholders are
//! prebuilt, so a fully static request costs only clones of
//! reference-counted parts on the request path.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use loadfleet_proto::partition::{Interleave, PartitionError};
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::target::{check_url, UrlError};
use loadfleet_proto::template::{TemplateError, Text, Values};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::UnsentReason;

use std::time::Duration;

use loadfleet_proto::grpc::GrpcError;
use prost_reflect::DescriptorPool;

use crate::allow::AllowList;
use crate::client::grpc::{self, Decoder, Encoder};

/// Why a scenario's request templates cannot be used. The coordinator
/// checks plans the same way, so reaching one of these means the
/// assignment did not come from a valid plan.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MixError {
    /// A scenario must send something.
    #[error("the scenario has no requests")]
    NoRequests,
    /// The method is not an HTTP method token.
    #[error("request method {0:?} is not valid")]
    Method(String),
    /// The URL template has a bad placeholder.
    #[error("url {url:?}")]
    UrlTemplate {
        /// The template as given.
        url: String,
        /// What is wrong with its placeholders.
        #[source]
        source: TemplateError,
    },
    /// A URL without placeholders that cannot be sent to.
    #[error("target url")]
    Url(#[source] UrlError),
    /// The header name is not a valid HTTP header name.
    #[error("header name {0:?} is not valid")]
    HeaderName(String),
    /// A header value template has a bad placeholder.
    #[error("header {name:?}")]
    HeaderTemplate {
        /// The header's name.
        name: String,
        /// What is wrong with its placeholders.
        #[source]
        source: TemplateError,
    },
    /// A header value without placeholders that HTTP cannot carry.
    #[error("header {0:?} has an invalid value")]
    HeaderValue(String),
    /// The body template has a bad placeholder.
    #[error("body")]
    BodyTemplate(#[source] TemplateError),
    /// The request weights cannot be interleaved.
    #[error("request weights")]
    Weights(#[source] PartitionError),
    /// A gRPC request's method or message does not fit the scenario's
    /// descriptor set.
    #[error("gRPC request {method:?}")]
    Grpc {
        /// The method as given.
        method: String,
        /// What is wrong with it.
        #[source]
        source: GrpcError,
    },
}

/// The gRPC half of a request: its message types, and its JSON message
/// when that has placeholders (else the framed body is built once).
struct GrpcSpec {
    encoder: Encoder,
    /// Reads the answer back as JSON, for a flow step that keeps it.
    decoder: Decoder,
    message: Option<Text>,
}

/// One request of a scenario's mix, parsed once.
struct RequestSpec {
    method: Method,
    url: Text,
    uri: Option<Uri>,
    /// `scheme://host[:port]/` when the URL fixes its host, placeholders
    /// or not (see [`origin`]).
    origin: Option<Uri>,
    headers: Vec<(HeaderName, Text)>,
    static_headers: Option<HeaderMap>,
    body: Option<Text>,
    static_body: Bytes,
    /// Headers every request of this kind starts with (gRPC's own).
    base_headers: HeaderMap,
    grpc: Option<GrpcSpec>,
}

impl RequestSpec {
    /// Whether every request of this kind is the same: no placeholder in
    /// its URL, headers or body, and no gRPC framing built per call.
    fn fixed(&self) -> bool {
        self.uri.is_some()
            && self.static_headers.is_some()
            && self.body.is_none()
            && self.grpc.is_none()
    }

    /// `vars` are the values a flow's earlier steps capture (none for a
    /// mix of requests), which its placeholders may name.
    fn from_proto(
        t: &v1::RequestTemplate,
        (columns, vars): (&[String], &[String]),
        grpc: Option<&GrpcContext>,
    ) -> Result<Self, MixError> {
        let method = if t.method.is_empty() {
            Method::GET
        } else {
            Method::from_bytes(t.method.as_bytes())
                .map_err(|_| MixError::Method(t.method.clone()))?
        };
        let url = Text::parse_with_vars(&t.url, columns, vars).map_err(|source| {
            MixError::UrlTemplate {
                url: t.url.clone(),
                source,
            }
        })?;
        let uri = if url.is_static() {
            Some(check_url(&t.url).map_err(MixError::Url)?)
        } else {
            None
        };
        let mut headers = Vec::new();
        for h in &t.headers {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| MixError::HeaderName(h.name.clone()))?;
            let value = Text::parse_with_vars(&h.value, columns, vars).map_err(|source| {
                MixError::HeaderTemplate {
                    name: h.name.clone(),
                    source,
                }
            })?;
            headers.push((name, value));
        }
        let static_headers = if headers.iter().all(|(_, v)| v.is_static()) {
            let mut map = HeaderMap::new();
            for (h, (name, _)) in t.headers.iter().zip(&headers) {
                let value = HeaderValue::from_str(&h.value)
                    .map_err(|_| MixError::HeaderValue(h.name.clone()))?;
                map.append(name.clone(), value);
            }
            Some(map)
        } else {
            None
        };
        if let (false, Some(context)) = (t.grpc_method.is_empty(), grpc) {
            return Self::grpc(
                t,
                (columns, vars),
                context,
                (method, url, uri, headers, static_headers),
            );
        }
        // A body that is not UTF-8 (a binary file) is sent as it is.
        let body = match std::str::from_utf8(&t.body) {
            Ok(text) => {
                Some(Text::parse_with_vars(text, columns, vars).map_err(MixError::BodyTemplate)?)
                    .filter(|b| !b.is_static())
            }
            Err(_) => None,
        };
        Ok(RequestSpec {
            method,
            origin: origin(&url, uri.as_ref()),
            url,
            uri,
            headers,
            static_headers,
            body,
            static_body: Bytes::from(t.body.clone()),
            base_headers: HeaderMap::new(),
            grpc: None,
        })
    }

    /// A gRPC call: its JSON message is encoded once when it has no
    /// placeholders, per request otherwise.
    fn grpc(
        t: &v1::RequestTemplate,
        (columns, vars): (&[String], &[String]),
        context: &GrpcContext,
        (method, url, uri, headers, static_headers): HttpParts,
    ) -> Result<Self, MixError> {
        let fail = |source| MixError::Grpc {
            method: t.grpc_method.clone(),
            source,
        };
        let encoder = Encoder::new(&context.pool, &t.grpc_method).map_err(fail)?;
        let decoder = Decoder::new(&context.pool, &t.grpc_method).map_err(fail)?;
        let json = String::from_utf8_lossy(&t.body);
        let message =
            Text::parse_with_vars(&json, columns, vars).map_err(MixError::BodyTemplate)?;
        let (message, static_body) = if message.is_static() {
            (None, encoder.encode(&json).map_err(fail)?)
        } else {
            (Some(message), Bytes::new())
        };
        Ok(RequestSpec {
            method,
            origin: origin(&url, uri.as_ref()),
            url,
            uri,
            headers,
            static_headers,
            body: None,
            static_body,
            base_headers: grpc::call_headers(context.timeout),
            grpc: Some(GrpcSpec {
                encoder,
                decoder,
                message,
            }),
        })
    }
}

/// `scheme://host[:port]/` of a URL whose host no placeholder touches: a
/// static one (`uri`), or a template whose text up to the first `/` after
/// `://` is literal, so that every URL it renders goes to that host.
fn origin(url: &Text, uri: Option<&Uri>) -> Option<Uri> {
    let prefix = match uri {
        Some(uri) => format!("{}://{}/", uri.scheme_str()?, uri.authority()?),
        None => {
            let text = url.literal_prefix();
            let host = text.find("://")? + 3;
            text[..=host + text[host..].find('/')?].to_string()
        }
    };
    check_url(&prefix).ok()
}

/// The parts of a request that HTTP and gRPC share, as parsed.
type HttpParts = (
    Method,
    Text,
    Option<Uri>,
    Vec<(HeaderName, Text)>,
    Option<HeaderMap>,
);

/// What a scenario's gRPC requests share: the message types, decoded once,
/// and the deadline they carry.
pub(crate) struct GrpcContext {
    pool: DescriptorPool,
    timeout: Duration,
}

impl GrpcContext {
    /// The scenario's descriptor set, decoded; `None` when it has none.
    pub(crate) fn new(descriptors: &[u8], timeout: Duration) -> Result<Option<Self>, MixError> {
        if descriptors.is_empty() {
            return Ok(None);
        }
        let pool = loadfleet_proto::grpc::decode_descriptors(descriptors).map_err(|source| {
            MixError::Grpc {
                method: String::new(),
                source,
            }
        })?;
        Ok(Some(Self { pool, timeout }))
    }
}

/// Whether a request URL (a template or not) starts `http://`, so that
/// whatever its placeholders render it goes over plain TCP.
pub(crate) fn plain_http_url(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
}

/// A scenario's weighted mix of requests and the data they draw from.
pub(crate) struct RequestMix {
    specs: Vec<RequestSpec>,
    interleave: Interleave,
    rows: Vec<Vec<String>>,
    random_rows: bool,
    agent: u32,
    /// `--allow-target`, checked again on every URL rendered from
    /// placeholders.
    allow: AllowList,
    /// Every request's URL starts `http://`, whatever its placeholders
    /// render (see [`RequestMix::plain_http`]).
    plain_http: bool,
}

impl RequestMix {
    /// The mix of `requests`; gRPC ones are encoded with `grpc`'s types
    /// (a scenario that sends one carries them: the assignment's bounds
    /// check refuses one that does not).
    pub(crate) fn from_proto(
        requests: &[v1::RequestTemplate],
        data: Option<&v1::DataTable>,
        grpc: Option<&GrpcContext>,
        agent: u32,
        allow: &AllowList,
    ) -> Result<Self, MixError> {
        Self::with_vars(requests, data, grpc, (agent, allow), &[])
    }

    /// The mix of a flow's steps (one kind per step), whose placeholders
    /// may name the values in `vars`.
    pub(crate) fn with_vars(
        requests: &[v1::RequestTemplate],
        data: Option<&v1::DataTable>,
        grpc: Option<&GrpcContext>,
        (agent, allow): (u32, &AllowList),
        vars: &[String],
    ) -> Result<Self, MixError> {
        if requests.is_empty() {
            return Err(MixError::NoRequests);
        }
        let columns: &[String] = data.map_or(&[], |d| d.columns.as_slice());
        let specs = requests
            .iter()
            .map(|t| RequestSpec::from_proto(t, (columns, vars), grpc))
            .collect::<Result<Vec<_>, _>>()?;
        let weights: Vec<u32> = requests.iter().map(|r| r.weight.max(1)).collect();
        Ok(Self {
            specs,
            interleave: Interleave::new(&weights).map_err(MixError::Weights)?,
            rows: data.map_or_else(Vec::new, |d| {
                d.rows.iter().map(|r| r.values.clone()).collect()
            }),
            random_rows: data.is_some_and(|d| d.random),
            agent,
            allow: allow.clone(),
            plain_http: requests.iter().all(|t| plain_http_url(&t.url)),
        })
    }

    /// Whether every request goes over plain TCP (no TLS): then the
    /// HTTP/1.1 transport knows when each answer arrived, however late it
    /// reads it.
    pub(crate) fn plain_http(&self) -> bool {
        self.plain_http
    }

    /// The origin (`scheme://host[:port]/`) of every request of the mix,
    /// when all share one and no placeholder comes before the end of their
    /// host: the host whose connections a run can open ahead (see
    /// [`crate::client::Transport::open_ahead`]) and the open loop can
    /// drive itself ([`crate::client::Transport::direct`]).
    pub(crate) fn sole_origin(&self) -> Option<&Uri> {
        let first = self.specs.first()?.origin.as_ref()?;
        self.specs
            .iter()
            .all(|spec| spec.origin.as_ref() == Some(first))
            .then_some(first)
    }

    /// How many requests the mix has.
    pub(crate) fn kinds(&self) -> usize {
        self.specs.len()
    }

    /// Which of the mix's requests arrival `seq` is (its index in the
    /// assignment): what its outcome is recorded under, a table lookup.
    pub(crate) fn kind(&self, seq: u64) -> usize {
        if self.specs.len() == 1 {
            return 0;
        }
        self.interleave.owner(seq)
    }

    /// Which of the mix's requests arrival `seq` is, when that request is
    /// the same bytes every time: a transport may then render it once and
    /// keep it, instead of building and rendering it per arrival (some 700
    /// user-space instructions per request).
    pub(crate) fn fixed_kind(&self, seq: u64) -> Option<usize> {
        let kind = self.interleave.owner(seq);
        self.specs[kind].fixed().then_some(kind)
    }

    /// The decoder of request `kind`'s answers when it is a gRPC call: a
    /// flow step's captures and checks read its response as JSON.
    pub(crate) fn grpc_decoder(&self, kind: usize) -> Option<&Decoder> {
        self.specs.get(kind)?.grpc.as_ref().map(|g| &g.decoder)
    }

    /// Builds the request for fleet-wide arrival `seq`. An error means the
    /// rendered values do not form a valid request (e.g. a data value with a
    /// space in a URL) or aim outside `--allow-target`; the arrival is then
    /// counted unsent, never sent. Static URLs were checked against the
    /// list at assignment; rendered ones are checked here, without
    /// allocating.
    pub(crate) fn build(
        &self,
        seq: u64,
        rng: &mut SplitMix64,
    ) -> Result<Request<Full<Bytes>>, UnsentReason> {
        let kind = self.interleave.owner(seq);
        // A request that uses no data draws no row, so the picks are the
        // same whether or not its bytes are kept ([`Self::fixed_kind`]).
        let row = if self.specs[kind].fixed() {
            None
        } else {
            self.row(seq, rng)
        };
        self.build_kind(kind, seq, row, &[], rng)
    }

    /// The data row of arrival `seq` (in turn, or drawn for a random
    /// table); `None` without data. A flow draws one for all its steps.
    pub(crate) fn row(&self, seq: u64, rng: &mut SplitMix64) -> Option<usize> {
        if self.rows.is_empty() {
            None
        } else if self.random_rows {
            Some((rng.next_u64() % self.rows.len() as u64) as usize)
        } else {
            Some((seq % self.rows.len() as u64) as usize)
        }
    }

    /// Builds request `kind` of the mix (a flow's step) for arrival `seq`,
    /// with data row `row` and the flow's captured `vars`; as
    /// [`Self::build`] otherwise.
    pub(crate) fn build_kind(
        &self,
        kind: usize,
        seq: u64,
        row: Option<usize>,
        vars: &[Option<String>],
        rng: &mut SplitMix64,
    ) -> Result<Request<Full<Bytes>>, UnsentReason> {
        let spec = &self.specs[kind];
        let row = row.and_then(|r| self.rows.get(r)).map(Vec::as_slice);
        let mut values = Values {
            seq,
            agent: self.agent,
            rng,
            row,
        };
        let body = match (&spec.body, &spec.grpc) {
            (
                _,
                Some(GrpcSpec {
                    encoder,
                    message: Some(t),
                    ..
                }),
            ) => {
                let mut s = String::new();
                t.render_with_vars(&mut values, vars, &mut s);
                encoder
                    .encode(&s)
                    .map_err(|_| UnsentReason::InvalidRequest)?
            }
            (Some(t), None) => {
                let mut s = String::new();
                t.render_with_vars(&mut values, vars, &mut s);
                Bytes::from(s)
            }
            _ => spec.static_body.clone(),
        };
        let mut req = Request::new(Full::new(body));
        if spec.grpc.is_some() {
            req.extensions_mut().insert(grpc::Call);
        }
        *req.method_mut() = spec.method.clone();
        *req.uri_mut() = match &spec.uri {
            Some(uri) => uri.clone(),
            None => {
                let mut s = String::new();
                spec.url.render_with_vars(&mut values, vars, &mut s);
                let uri: Uri = s.parse().map_err(|_| UnsentReason::InvalidRequest)?;
                self.allow.vet_uri(&uri)?;
                uri
            }
        };
        if !spec.base_headers.is_empty() {
            *req.headers_mut() = spec.base_headers.clone();
        }
        match &spec.static_headers {
            Some(map) if !map.is_empty() && spec.base_headers.is_empty() => {
                *req.headers_mut() = map.clone()
            }
            Some(map) => {
                for (name, value) in map {
                    req.headers_mut().append(name.clone(), value.clone());
                }
            }
            None => {
                for (name, value) in &spec.headers {
                    let mut s = String::new();
                    value.render_with_vars(&mut values, vars, &mut s);
                    let value =
                        HeaderValue::from_str(&s).map_err(|_| UnsentReason::InvalidRequest)?;
                    req.headers_mut().append(name.clone(), value);
                }
            }
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

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
            grpc_method: String::new(),
            name: String::new(),
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

    /// The error and its causes, as the agent prints them.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            text += &format!(": {s}");
            source = s.source();
        }
        text
    }

    #[test]
    fn bad_urls_name_the_problem() {
        let mix = |url: &str| {
            RequestMix::from_proto(
                &[template(url, 1)],
                Some(&data()),
                None,
                0,
                &AllowList::default(),
            )
        };
        let e = chain(&mix("ftp://x/").err().unwrap());
        assert!(e.contains("scheme"), "{e}");
        let e = chain(&mix("/just/a/path").err().unwrap());
        assert!(e.contains("no scheme") || e.contains("no host"), "{e}");
        assert!(mix("http://127.0.0.1:1/x").is_ok());
        let e = chain(&mix("http://h/{{nope}}").err().unwrap());
        assert!(e.contains("nope"), "{e}");
    }

    /// Connections can be opened ahead only to the one host every request
    /// of the mix goes to, known before any URL is rendered.
    #[test]
    fn a_sole_origin_is_one_host_that_no_placeholder_touches() {
        let mix = |urls: &[&str]| {
            let templates: Vec<_> = urls.iter().map(|u| template(u, 1)).collect();
            RequestMix::from_proto(&templates, Some(&data()), None, 0, &AllowList::default())
                .unwrap()
        };
        let origin = |urls: &[&str]| mix(urls).sole_origin().map(|u| u.to_string());
        let h = Some("http://h:8080/".to_string());
        assert_eq!(origin(&["http://h:8080/a", "http://h:8080/b?q=1"]), h);
        assert_eq!(
            origin(&["http://h:8080/a/{{seq}}", "http://h:8080/?u={{data.user}}"]),
            h
        );
        assert_eq!(origin(&["http://h:8080/a", "http://g:8080/a"]), None);
        assert_eq!(origin(&["http://h/a", "https://h/a"]), None);
        assert_eq!(origin(&["http://h:{{agent}}/a"]), None);
        assert_eq!(origin(&["http://{{data.user}}/a"]), None);
        assert_eq!(origin(&["http://h:8080", "http://h:8080/a"]), h);
        assert_eq!(
            origin(&["http://h:8080?q={{seq}}"]),
            None,
            "no '/' ends the host"
        );
    }

    #[tokio::test]
    async fn mix_follows_weights_and_renders_values() {
        let mix = RequestMix::from_proto(
            &[template("http://h/a/{{seq}}", 3), template("http://h/b", 1)],
            Some(&data()),
            None,
            5,
            &AllowList::default(),
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

    /// Only a request with nothing rendered per arrival is fixed: a
    /// placeholder anywhere (URL, header, body) makes it built each time.
    #[test]
    fn only_requests_with_no_placeholder_are_fixed() {
        let fixed = |t: v1::RequestTemplate| {
            let mix = RequestMix::from_proto(&[t], Some(&data()), None, 0, &AllowList::default())
                .unwrap();
            mix.fixed_kind(7)
        };
        let mut plain = template("http://h/a", 1);
        plain.headers[0].value = "ann".into();
        plain.body = b"{}".to_vec();
        assert_eq!(fixed(plain.clone()), Some(0));
        let mut binary = plain.clone();
        binary.body = vec![0xff, 0xfe];
        assert_eq!(fixed(binary), Some(0), "a binary body is sent as it is");
        let mut url = plain.clone();
        url.url = "http://h/{{seq}}".into();
        assert_eq!(fixed(url), None);
        let mut header = plain.clone();
        header.headers[0].value = "{{random_id}}".into();
        assert_eq!(fixed(header), None);
        let mut body = plain;
        body.body = b"{{data.user}}".to_vec();
        assert_eq!(fixed(body), None);
        let mut b = template("http://h/b", 1);
        b.headers.clear();
        b.body.clear();
        let mix = RequestMix::from_proto(
            &[template("http://h/a/{{seq}}", 1), b],
            Some(&data()),
            None,
            0,
            &AllowList::default(),
        )
        .unwrap();
        let kinds: Vec<_> = (0..4).map(|seq| mix.fixed_kind(seq)).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == Some(1)).count(),
            2,
            "{kinds:?}"
        );
        assert_eq!(kinds.iter().filter(|k| k.is_none()).count(), 2, "{kinds:?}");
    }

    #[test]
    fn invalid_rendering_is_unsent_not_sent() {
        let mut t = template("http://{{data.user}}/", 1);
        t.headers.clear();
        let mut table = data();
        table.rows[0].values[0] = "a b".into();
        let mix =
            RequestMix::from_proto(&[t], Some(&table), None, 0, &AllowList::default()).unwrap();
        let mut rng = SplitMix64::new(1);
        assert_eq!(
            mix.build(0, &mut rng).err(),
            Some(UnsentReason::InvalidRequest)
        );
        assert!(mix.build(1, &mut rng).is_ok());
    }

    /// A data value that renders another host is unsent, never sent; the
    /// allowed rows still go.
    #[test]
    fn rendered_hosts_outside_the_allow_list_are_unsent() {
        let mut t = template("http://127.0.0.2:8080/{{data.user}}", 1);
        t.headers.clear();
        let mut table = data();
        // The authority is fixed, so only the path changes...
        table.rows[0].values[0] = "@127.0.0.3:8080/".into();
        let allow = AllowList::parse(&["127.0.0.2:8080"]).unwrap();
        let mix = RequestMix::from_proto(&[t], Some(&table), None, 0, &allow).unwrap();
        let mut rng = SplitMix64::new(1);
        let req = mix.build(0, &mut rng).unwrap();
        assert_eq!(req.uri().host(), Some("127.0.0.2"));
        // ...but a template that renders the whole URL is checked per request.
        let mut t = template("{{data.user}}", 1);
        t.headers.clear();
        table.rows[0].values[0] = "http://127.0.0.3:8080/".into();
        table.rows[1].values[0] = "http://127.0.0.2:8080/ok".into();
        let mix = RequestMix::from_proto(&[t], Some(&table), None, 0, &allow).unwrap();
        assert_eq!(mix.build(0, &mut rng).err(), Some(UnsentReason::NotAllowed));
        assert_eq!(mix.build(1, &mut rng).unwrap().uri().path(), "/ok");
    }
}
