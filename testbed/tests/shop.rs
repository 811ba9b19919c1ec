//! The shop of `loadfleet-testbed --shop`, end to end: the real binary on
//! port 0, driven by hyper's client over HTTP/1.1 keep-alive and h2c, as a
//! generator's scenario would drive it. The purchase journey by hand, the
//! 401s, the refusals of a reused cart and a second payment, the exact
//! decline share, the shop pool, and `GET /__stats` agreeing with all of
//! it. Every request has a timeout; the child is killed through its own
//! handle.

mod common;

use common::{Testbed, PATIENCE};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::header::HeaderMap;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

impl Testbed {
    /// A keep-alive connection, over HTTP/1.1 or (`h2`) h2c.
    async fn connect(&self, h2: bool) -> Client {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connecting to the testbed");
        let io = TokioIo::new(tcp);
        if h2 {
            let (send, connection) = http2::handshake(TokioExecutor::new(), io)
                .await
                .expect("h2c handshake");
            tokio::spawn(connection);
            Client::H2(send)
        } else {
            let (send, connection) = http1::handshake(io).await.expect("HTTP/1.1 handshake");
            tokio::spawn(connection);
            Client::H1(send)
        }
    }

    /// The counts of `GET /__stats`, by name.
    async fn stats(&self) -> BTreeMap<String, u64> {
        let reply = self
            .connect(false)
            .await
            .call("GET", "/__stats", &[], "")
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        reply
            .body
            .lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(name, n)| (name.to_owned(), n.parse().expect("a count")))
            .collect()
    }
}

/// One connection's request sender.
enum Client {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One answer as the client saw it.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    /// The body as JSON, with the answer in the panic if it is not.
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|err| panic!("{err}: {self:?}"))
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no {name}: {self:?}"))
    }
}

impl Client {
    /// Sends one request with `headers` and `body`; the whole answer.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("http://testbed{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("a request");
        let exchange = async {
            let response = match self {
                Client::H1(send) => send.send_request(request).await,
                Client::H2(send) => send.send_request(request).await,
            }
            .expect("an answer");
            let (parts, body) = response.into_parts();
            let body = body.collect().await.expect("the body").to_bytes();
            Reply {
                status: parts.status,
                headers: parts.headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            }
        };
        tokio::time::timeout(PATIENCE, exchange)
            .await
            .unwrap_or_else(|_| panic!("{method} {path}: no answer in {PATIENCE:?}"))
    }
}

/// What login gave: the session cookie's value and the bearer token.
struct Login {
    session: String,
    token: String,
}

impl Login {
    fn cookie(&self) -> String {
        // Among other cookies, as a browser-like client sends them.
        format!("theme=dark; session={}; lang=en", self.session)
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }
}

async fn login(client: &mut Client) -> Login {
    let reply = client
        .call("POST", "/login", &[], r#"{"user": "alice"}"#)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.header("content-type"), "application/json");
    let token = reply.json()["token"].as_str().expect("a token").to_owned();
    let cookie = reply.header("set-cookie");
    let session = cookie
        .strip_prefix("session=")
        .and_then(|rest| rest.strip_suffix("; Path=/; HttpOnly"))
        .unwrap_or_else(|| panic!("Set-Cookie {cookie:?}"))
        .to_owned();
    assert!(!token.is_empty() && !session.is_empty() && token != session);
    Login { session, token }
}

async fn new_cart(client: &mut Client, login: &Login) -> String {
    let reply = client
        .call("POST", "/cart", &[("cookie", &login.cookie())], "")
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert_eq!(reply.header("content-type"), "application/json");
    reply.json()["cart_id"]
        .as_str()
        .expect("a cart_id")
        .to_owned()
}

async fn order(client: &mut Client, login: &Login, cart: &str) -> Reply {
    let body = format!(r#"{{"cart": "{cart}"}}"#);
    let headers = [
        ("cookie", login.cookie()),
        ("authorization", login.bearer()),
        ("content-type", "application/json".to_owned()),
    ];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    client.call("POST", "/orders", &headers, &body).await
}

async fn new_order(client: &mut Client, login: &Login, cart: &str) -> String {
    let reply = order(client, login, cart).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert_eq!(reply.header("content-type"), "application/json");
    let id = reply.json()["order"]["id"]
        .as_str()
        .expect("order.id")
        .to_owned();
    assert_eq!(reply.header("location"), format!("/orders/{id}"));
    id
}

async fn pay(client: &mut Client, login: &Login, order: &str) -> Reply {
    let path = format!("/payments/{order}");
    client
        .call("POST", &path, &[("cookie", &login.cookie())], "")
        .await
}

/// The whole journey by hand, once over HTTP/1.1 keep-alive and once over
/// h2c, every id fresh; then the counts.
#[tokio::test]
async fn a_purchase_journey_by_hand() {
    let testbed = Testbed::start(&["--shop"]);
    let mut ids = Vec::new();
    for h2 in [false, true] {
        let mut client = testbed.connect(h2).await;
        let login = login(&mut client).await;
        let cart = new_cart(&mut client, &login).await;
        let order = new_order(&mut client, &login, &cart).await;
        let paid = pay(&mut client, &login, &order).await;
        assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
        assert_eq!(paid.header("content-type"), "application/json");
        assert_eq!(paid.json(), serde_json::json!({ "status": "paid" }));
        ids.extend([login.session, login.token, cart, order]);
    }
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "ids repeat: {ids:?}");

    let stats = testbed.stats().await;
    for (name, n) in [
        ("total", 8),
        ("shop_login_served", 2),
        ("shop_cart_served", 2),
        ("shop_orders_served", 2),
        ("shop_payments_served", 2),
        ("shop_orders_refused", 0),
        ("shop_payments_refused", 0),
        ("shop_unauthorized", 0),
        ("shop_payments_declined", 0),
    ] {
        assert_eq!(stats.get(name), Some(&n), "{name}: {stats:?}");
    }
    // Other paths answer as without --shop.
    let mut client = testbed.connect(false).await;
    for (method, path) in [("GET", "/"), ("GET", "/login"), ("POST", "/elsewhere")] {
        let reply = client.call(method, path, &[], "").await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::OK, "ok\n"),
            "{method} {path}"
        );
    }
}

/// Without the session cookie, or without the bearer token login gave
/// with that same cookie, every step after login answers 401.
#[tokio::test]
async fn steps_without_cookie_or_token_are_unauthorized() {
    let testbed = Testbed::start(&["--shop"]);
    let mut client = testbed.connect(false).await;
    let alice = login(&mut client).await;
    let bob = login(&mut client).await;
    let cart = new_cart(&mut client, &alice).await;
    let forged = Login {
        session: "0".repeat(32),
        token: alice.token.clone(),
    };
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("/cart", vec![]),
        ("/cart", vec![("cookie", forged.cookie())]),
        // A token is not a session.
        (
            "/cart",
            vec![("cookie", format!("session={}", alice.token))],
        ),
        ("/orders", vec![("authorization", alice.bearer())]),
        ("/orders", vec![("cookie", alice.cookie())]),
        // Bob's token with Alice's session.
        (
            "/orders",
            vec![("cookie", alice.cookie()), ("authorization", bob.bearer())],
        ),
        ("/payments/x", vec![]),
    ];
    for (path, headers) in &cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let reply = client.call("POST", path, &headers, "").await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{path} {headers:?}: {reply:?}"
        );
        assert_eq!(reply.header("content-type"), "application/json");
        assert!(reply.json()["error"].is_string(), "{reply:?}");
    }
    // The refusals took nothing: Alice's cart still orders.
    new_order(&mut client, &alice, &cart).await;
    let stats = testbed.stats().await;
    for (name, n) in [
        ("shop_unauthorized", 7),
        ("shop_cart_unauthorized", 3),
        ("shop_orders_unauthorized", 3),
        ("shop_payments_unauthorized", 1),
        ("shop_cart_served", 1),
        ("shop_orders_served", 1),
        ("shop_orders_refused", 0),
    ] {
        assert_eq!(stats.get(name), Some(&n), "{name}: {stats:?}");
    }
}

/// A cart orders once and an order pays once; ids the shop did not issue
/// are refused.
#[tokio::test]
async fn a_reused_cart_and_a_second_payment_are_refused() {
    let testbed = Testbed::start(&["--shop"]);
    let mut client = testbed.connect(false).await;
    let login = login(&mut client).await;
    let cart = new_cart(&mut client, &login).await;
    let order_id = new_order(&mut client, &login, &cart).await;

    let reused = order(&mut client, &login, &cart).await;
    assert_eq!(reused.status, StatusCode::NOT_FOUND, "{reused:?}");
    assert_eq!(
        reused.json(),
        serde_json::json!({ "error": "unknown cart" })
    );
    let invented = order(&mut client, &login, &"f".repeat(32)).await;
    assert_eq!(invented.status, StatusCode::NOT_FOUND, "{invented:?}");

    assert_eq!(
        pay(&mut client, &login, &order_id).await.status,
        StatusCode::OK
    );
    let again = pay(&mut client, &login, &order_id).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{again:?}");
    assert!(again.json()["error"].is_string(), "{again:?}");
    let unknown = pay(&mut client, &login, &cart).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{unknown:?}");

    let stats = testbed.stats().await;
    for (name, n) in [
        ("shop_orders_served", 1),
        ("shop_orders_refused", 2),
        ("shop_payments_served", 1),
        ("shop_payments_refused", 2),
        ("shop_unauthorized", 0),
    ] {
        assert_eq!(stats.get(name), Some(&n), "{name}: {stats:?}");
    }
}

/// `--shop-decline 0.25`: of 8 payments exactly the 4th and the 8th are
/// declined, each still a 200 and served.
#[tokio::test]
async fn a_decline_share_declines_exactly() {
    let testbed = Testbed::start(&["--shop", "--shop-decline", "0.25"]);
    let mut client = testbed.connect(false).await;
    let login = login(&mut client).await;
    let mut declined = Vec::new();
    for k in 1..=8 {
        let cart = new_cart(&mut client, &login).await;
        let order = new_order(&mut client, &login, &cart).await;
        let reply = pay(&mut client, &login, &order).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        match reply.json()["status"].as_str() {
            Some("declined") => declined.push(k),
            Some("paid") => {}
            _ => panic!("payment {k}: {reply:?}"),
        }
    }
    assert_eq!(declined, [4, 8]);
    let stats = testbed.stats().await;
    assert_eq!(stats.get("shop_payments_served"), Some(&8), "{stats:?}");
    assert_eq!(stats.get("shop_payments_declined"), Some(&2), "{stats:?}");
}

/// `--shop-pool 1 --delay 100ms`: concurrent shop steps queue for the one
/// permit, so three logins at once take three delays; a login alone is
/// delayed as any request is.
#[tokio::test]
async fn the_shop_pool_serialises_steps_under_the_delay() {
    let testbed = Testbed::start(&["--shop", "--shop-pool", "1", "--delay", "100ms"]);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let mut client = testbed.connect(false).await;
        tasks.push(tokio::spawn(async move { login(&mut client).await.token }));
    }
    for task in tasks {
        task.await.expect("a login task");
    }
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    let mut client = testbed.connect(false).await;
    let alone = Instant::now();
    login(&mut client).await;
    assert!(
        alone.elapsed() >= Duration::from_millis(100),
        "{:?}",
        alone.elapsed()
    );
}
