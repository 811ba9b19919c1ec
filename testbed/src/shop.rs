//! The stateful shop of `--shop`: `POST /login`, `/cart`, `/orders` and
//! `/payments/{order}`, the contract in docs/testbed.md ("Shop").
//!
//! A multi-step scenario is only checked if the target can tell a correct
//! flow from one that sends the right paths with made-up values, so every
//! id is issued by the shop and accepted once, the cookie and the bearer
//! token must be the ones login gave out together, and the shop counts
//! what it served, refused and declined for a test to hold against what
//! the generator reports. Each request first passes admission, a pool and
//! the delay as any request does (the server's `work`), so under
//! overload every step of a flow slows together.

mod state;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{
    HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE,
};
use hyper::{Method, Response, StatusCode};
use tracing::debug;

use crate::gate::Gate;
use crate::reply::TextResponse;
use crate::{Limit, ShopConfig};
use state::{Id, State, MAX_LIVE};

/// The largest request body a shop step reads: far more than `{"cart":
/// "…"}` needs, and a bound on what a client can make it hold.
const MAX_BODY: usize = 64 << 10;

/// One shop endpoint, from a request's method and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Login,
    Cart,
    Orders,
    /// The path's order id, as sent.
    Payment(String),
}

impl Route {
    /// The shop endpoint a request is for; `None` for anything else, which
    /// the testbed answers as it does without `--shop`.
    pub(crate) fn of(method: &Method, path: &str) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        match path {
            "/login" => Some(Route::Login),
            "/cart" => Some(Route::Cart),
            "/orders" => Some(Route::Orders),
            _ => path
                .strip_prefix("/payments/")
                .map(|order| Route::Payment(order.to_owned())),
        }
    }
}

/// The shop: its state, its own pool and its counts.
pub(crate) struct Shop {
    state: Mutex<State>,
    /// `--shop-pool`, held in place of `--pool`; it waits without limit.
    pool: Option<Gate>,
    counts: Counts,
}

/// What the shop answered, for `GET /__stats`.
#[derive(Default)]
struct Counts {
    login: Tally,
    cart: Tally,
    orders: Tally,
    payments: Tally,
    /// Payments answered `declined` (also counted as served).
    declined: AtomicU64,
}

/// The answers of one endpoint, by outcome.
#[derive(Default)]
struct Tally {
    /// Answered 2xx.
    served: AtomicU64,
    /// Answered 400, 404 or 409: the step was not taken.
    refused: AtomicU64,
    /// Answered 401.
    unauthorized: AtomicU64,
}

/// How a step ended, for the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Served,
    Declined,
    Refused,
    Unauthorized,
}

/// A step's answer and how it ended.
type Step = (TextResponse, Outcome);

impl Counts {
    fn record(&self, route: &Route, outcome: Outcome) {
        let tally = match route {
            Route::Login => &self.login,
            Route::Cart => &self.cart,
            Route::Orders => &self.orders,
            Route::Payment(_) => &self.payments,
        };
        let counter = match outcome {
            Outcome::Served => &tally.served,
            Outcome::Declined => {
                self.declined.fetch_add(1, Ordering::Relaxed);
                &tally.served
            }
            Outcome::Refused => &tally.refused,
            Outcome::Unauthorized => &tally.unauthorized,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Shop {
    /// `--shop-pool`, which shop requests hold in place of `--pool`.
    pub(crate) fn pool(&self) -> Option<&Gate> {
        self.pool.as_ref()
    }

    pub(crate) fn new(config: &ShopConfig) -> Self {
        Shop {
            state: Mutex::new(State::new(MAX_LIVE, config.decline)),
            pool: config.pool.map(|permits| {
                Gate::new(&Limit {
                    permits,
                    timeout: None,
                })
            }),
            counts: Counts::default(),
        }
    }

    /// The `shop_… N` lines of `GET /__stats`.
    pub(crate) fn stats(&self) -> String {
        let c = &self.counts;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let unauthorized = [&c.cart, &c.orders, &c.payments].map(|t| get(&t.unauthorized));
        let lines = [
            ("login_served", get(&c.login.served)),
            ("cart_served", get(&c.cart.served)),
            ("orders_served", get(&c.orders.served)),
            ("payments_served", get(&c.payments.served)),
            ("orders_refused", get(&c.orders.refused)),
            ("payments_refused", get(&c.payments.refused)),
            ("unauthorized", unauthorized.iter().sum()),
            ("payments_declined", get(&c.declined)),
            ("cart_unauthorized", unauthorized[0]),
            ("orders_unauthorized", unauthorized[1]),
            ("payments_unauthorized", unauthorized[2]),
            ("forgotten", self.lock().forgotten()),
        ];
        lines
            .iter()
            .map(|(name, n)| format!("shop_{name} {n}\n"))
            .collect()
    }

    /// The state. A step holds it only through map operations that do
    /// not panic, so a poisoned lock cannot hide a half-taken step and is
    /// still used.
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The step itself, once the request has done its work.
    pub(crate) fn answer(&self, route: &Route, headers: &HeaderMap, body: &[u8]) -> TextResponse {
        let mut state = self.lock();
        let step = match route {
            Route::Login => Ok(login(&mut state)),
            Route::Cart => session(&mut state, headers).map(|_| cart(&mut state)),
            Route::Orders => session(&mut state, headers)
                .and_then(|session| bearer(&mut state, session, headers))
                .map(|()| order(&mut state, body)),
            Route::Payment(order) => session(&mut state, headers).map(|_| pay(&mut state, order)),
        };
        drop(state);
        let (response, outcome) = step.unwrap_or_else(unauthorized);
        self.counts.record(route, outcome);
        response
    }
}

/// `POST /login`: a new session in a cookie, its token in the body.
fn login(state: &mut State) -> Step {
    let (session, token) = state.login();
    let mut response = json(StatusCode::OK, format!("{{\"token\":\"{token}\"}}"));
    // Hex ids make a valid header value; the check only keeps this free
    // of a panic path.
    if let Ok(cookie) = HeaderValue::from_str(&format!("session={session}; Path=/; HttpOnly")) {
        response.headers_mut().insert(SET_COOKIE, cookie);
    }
    (response, Outcome::Served)
}

/// The live session whose cookie the request carries, or why not.
fn session(state: &mut State, headers: &HeaderMap) -> Result<Id, &'static str> {
    session_cookie(headers)
        .find(|id| state.sessions.get_mut(*id).is_some())
        .ok_or("no session: send the session cookie that POST /login set")
}

/// Checks the request's bearer token was issued with `session`, or why not.
fn bearer(state: &mut State, session: Id, headers: &HeaderMap) -> Result<(), &'static str> {
    match bearer_token(headers) {
        Some(token) if state.token_matches(session, token) => Ok(()),
        _ => Err("no token: send Authorization: Bearer with the token login gave with this cookie"),
    }
}

/// `POST /cart`: a new cart.
fn cart(state: &mut State) -> Step {
    let cart = state.carts.issue(());
    let body = format!("{{\"cart_id\":\"{cart}\"}}");
    (json(StatusCode::CREATED, body), Outcome::Served)
}

/// `POST /orders`: an order for a cart issued and not yet ordered.
fn order(state: &mut State, body: &[u8]) -> Step {
    let Some(cart) = cart_of(body) else {
        let why = "the body must be JSON {\"cart\": \"<cart id>\"}";
        return (error(StatusCode::BAD_REQUEST, why), Outcome::Refused);
    };
    if cart.and_then(|cart| state.carts.take(cart)).is_none() {
        return (
            error(StatusCode::NOT_FOUND, "unknown cart"),
            Outcome::Refused,
        );
    }
    let order = state.orders.issue(false);
    let body = format!("{{\"order\":{{\"id\":\"{order}\"}}}}");
    let mut response = json(StatusCode::CREATED, body);
    if let Ok(location) = HeaderValue::from_str(&format!("/orders/{order}")) {
        response.headers_mut().insert(LOCATION, location);
    }
    (response, Outcome::Served)
}

/// `POST /payments/{order}`: settles an order issued and not yet paid,
/// declined as the decline rule says.
fn pay(state: &mut State, order: &str) -> Step {
    let Some(settled) = Id::parse(order).and_then(|id| state.orders.get_mut(id)) else {
        return (
            error(StatusCode::NOT_FOUND, "unknown order"),
            Outcome::Refused,
        );
    };
    if *settled {
        return (
            error(StatusCode::CONFLICT, "already paid"),
            Outcome::Refused,
        );
    }
    *settled = true;
    if state.next_declined() {
        let body = "{\"status\":\"declined\"}".to_owned();
        return (json(StatusCode::OK, body), Outcome::Declined);
    }
    (
        json(StatusCode::OK, "{\"status\":\"paid\"}".to_owned()),
        Outcome::Served,
    )
}

/// The 401 of a step without its session or token, saying which.
fn unauthorized(why: &str) -> Step {
    (error(StatusCode::UNAUTHORIZED, why), Outcome::Unauthorized)
}

/// A shop request's body, at most [`MAX_BODY`]; the refusal to answer
/// instead when it is larger or cannot be read.
pub(crate) async fn read_body(body: Incoming) -> Result<Bytes, TextResponse> {
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the body is over 64 KiB",
        )),
        Err(err) => {
            debug!(%err, "reading a shop request's body failed");
            Err(error(StatusCode::BAD_REQUEST, "bad request body"))
        }
    }
}

/// Every `session` cookie sent that reads as an id, from every `Cookie`
/// header (HTTP/2 clients may send one header per cookie).
fn session_cookie(headers: &HeaderMap) -> impl Iterator<Item = Id> + '_ {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|cookie| cookie.trim().strip_prefix("session="))
        .filter_map(Id::parse)
}

/// The id in `Authorization: Bearer <token>` (the scheme in any case).
fn bearer_token(headers: &HeaderMap) -> Option<Id> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    Id::parse(token.trim())
}

/// The cart of an order's body: `None` when the body is not a JSON object
/// with a string `cart`, `Some(None)` when that string is no id at all.
fn cart_of(body: &[u8]) -> Option<Option<Id>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let cart = value.get("cart")?.as_str()?;
    Some(Id::parse(cart))
}

/// A JSON answer.
fn json(status: StatusCode, body: String) -> TextResponse {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON error, `{"error": why}`.
fn error(status: StatusCode, why: &str) -> TextResponse {
    json(status, serde_json::json!({ "error": why }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_posts_to_shop_paths() {
        let post = Method::POST;
        assert_eq!(Route::of(&post, "/login"), Some(Route::Login));
        assert_eq!(Route::of(&post, "/cart"), Some(Route::Cart));
        assert_eq!(Route::of(&post, "/orders"), Some(Route::Orders));
        assert_eq!(
            Route::of(&post, "/payments/abc"),
            Some(Route::Payment("abc".to_owned()))
        );
        assert_eq!(Route::of(&Method::GET, "/login"), None);
        assert_eq!(Route::of(&post, "/"), None);
        assert_eq!(Route::of(&post, "/orders/x"), None);
    }

    #[test]
    fn cookies_and_tokens_are_read_among_others() {
        let id = "0123456789abcdef0000000000000001";
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, HeaderValue::from_static("theme=dark"));
        headers.append(
            COOKIE,
            HeaderValue::from_str(&format!("a=1; session={id}; b=2")).unwrap(),
        );
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("bearer {id}")).unwrap(),
        );
        let sessions: Vec<String> = session_cookie(&headers).map(|s| s.to_string()).collect();
        assert_eq!(sessions, [id]);
        assert_eq!(
            bearer_token(&headers).map(|t| t.to_string()).as_deref(),
            Some(id)
        );
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic eDp5"));
        assert_eq!(bearer_token(&headers), None);
    }

    #[test]
    fn an_order_body_names_a_cart() {
        let id = "0123456789abcdef0000000000000001";
        assert!(matches!(
            cart_of(format!("{{\"cart\": \"{id}\"}}").as_bytes()),
            Some(Some(_))
        ));
        assert_eq!(cart_of(b"{\"cart\": \"nope\"}"), Some(None));
        assert_eq!(cart_of(b"{\"cart\": 7}"), None);
        assert_eq!(cart_of(b""), None);
        assert_eq!(cart_of(b"not json"), None);
    }
}
