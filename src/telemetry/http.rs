//! The HTTP server: `/metrics` (Prometheus text format), `/healthz` (the process serves),
//! `/readyz` (consuming, each stage keeping up and reaching the broker), and the routes it is
//! given (the interactive queries, [`crate::queries::api`]), each answer counted by route and
//! status. The first three can have a listener of their own (`http.admin_bind`, see
//! [`Listeners`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

use crate::telemetry::metrics::Metrics;

/// What `/readyz` reports: ready while the service consumes and neither of its stages reports
/// a [`Trouble`]; if not, why. Each stage reports only its own, so a stage that moves never
/// hides another that is stuck.
#[derive(Default)]
pub struct Health {
    consuming: AtomicBool,
    /// A bit for each (stage, trouble) (see [`Health::bit`]).
    troubles: AtomicU8,
}

/// A stage of the service, as its health knows it (see `crate::kafka::stage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Forwarding,
    Applying,
}

/// Why a stage is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// Its oldest epoch, or a commit the group refuses, has waited too long.
    Behind,
    /// Its consumer reported an error and has not reached the broker since.
    BrokerLost,
}

impl Health {
    const PARTS: [Part; 2] = [Part::Forwarding, Part::Applying];
    const TROUBLES: [Trouble; 2] = [Trouble::Behind, Trouble::BrokerLost];

    fn bit(part: Part, trouble: Trouble) -> u8 {
        1 << (part as u8 * 2 + trouble as u8)
    }

    /// Whether `/readyz` answers ready. Read at every report, so it only loads the flags; the
    /// words are made where they are read ([`Health::why_not`]).
    pub fn ready(&self) -> bool {
        self.consuming.load(Ordering::Relaxed) && self.troubles.load(Ordering::Relaxed) == 0
    }

    /// Why the service is not ready, in words; `None` when it is.
    pub fn why_not(&self) -> Option<String> {
        if !self.consuming.load(Ordering::Relaxed) {
            return Some("not consuming".to_owned());
        }
        let troubles = self.troubles.load(Ordering::Relaxed);
        let reasons: Vec<String> = Self::PARTS
            .iter()
            .flat_map(|&p| Self::TROUBLES.iter().map(move |&t| (p, t)))
            .filter(|&(p, t)| troubles & Self::bit(p, t) != 0)
            .map(|(part, trouble)| {
                let stage = match part {
                    Part::Forwarding => "the forwarding stage",
                    Part::Applying => "the applying stage",
                };
                match trouble {
                    Trouble::Behind => {
                        format!("{stage} is behind (an epoch or a refused commit has waited)")
                    }
                    Trouble::BrokerLost => format!("{stage} has lost the broker"),
                }
            })
            .collect();
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// The service has started consuming (`true`), or is stopping (`false`).
    pub fn set_consuming(&self, consuming: bool, metrics: &Metrics) {
        self.consuming.store(consuming, Ordering::Relaxed);
        metrics.ready.set(i64::from(self.ready()));
    }

    /// Stage `part` has `trouble`, or no longer has it.
    pub fn report(&self, part: Part, trouble: Trouble, present: bool, metrics: &Metrics) {
        let bit = Self::bit(part, trouble);
        if present {
            self.troubles.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.troubles.fetch_and(!bit, Ordering::Relaxed);
        }
        metrics.ready.set(i64::from(self.ready()));
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Connections beyond `http.max_connections` that are still served, for `/metrics`, `/healthz`
/// and `/readyz` only (a `/v1` request on one is answered `503`): a scrape or a probe gets
/// through while the queries take every regular connection.
pub const OPS_RESERVE: usize = 16;

/// The longest request URI `/v1` reads; a longer one is answered `414` (as JSON).
pub const MAX_URI_BYTES: usize = 8192;

/// How the server bounds its clients (`http.max_connections`, `http.header_timeout_ms`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    /// How long a request's headers may take to arrive, and an idle keep-alive connection may
    /// wait for its next request, before the connection is closed.
    pub header_timeout: Duration,
}

/// Connections served at once by the admin listener (`http.admin_bind`), which serves only
/// `/metrics`, `/healthz` and `/readyz`: enough for scrapers and probes, never shared with `/v1`.
pub const ADMIN_CONNECTIONS: usize = 64;

/// Where the server listens: `main` for `/v1` (and, without `admin`, the operational endpoints
/// too), and `admin` for `/metrics`, `/healthz` and `/readyz` alone when `http.admin_bind` is
/// set.
pub struct Listeners {
    pub main: tokio::net::TcpListener,
    pub admin: Option<tokio::net::TcpListener>,
}

/// Serves the endpoints and `routes` until `shutdown` resolves, within `limits`.
///
/// With one listener: at most `max_connections` connections at once plus [`OPS_RESERVE`] for
/// the operational endpoints; a connection beyond both is closed at once and counted. A flood
/// of slow clients can take the reserve too. With an admin listener the operational endpoints
/// are served there only, on [`ADMIN_CONNECTIONS`] of its own, so no client of `/v1` can delay
/// a probe. Every connection's headers must arrive within `header_timeout`, which also closes
/// idle keep-alive connections.
pub async fn serve(
    listeners: Listeners,
    (metrics, health): (Arc<Metrics>, Arc<Health>),
    routes: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ops = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            metrics: Arc::clone(&metrics),
            health,
        });
    let counted =
        routes
            .layer(middleware::from_fn(json_rejections))
            .layer(middleware::from_fn_with_state(
                Arc::clone(&metrics),
                count_query,
            ));
    let not_found = || async { json_error(StatusCode::NOT_FOUND, "no such endpoint") };
    let bind = listeners.main.local_addr()?;
    let timeout_ms = limits.header_timeout.as_millis() as u64;
    let Some(admin) = listeners.admin else {
        let full = ops.clone().merge(counted).fallback(not_found);
        let reserved = ops.fallback(|| async {
            json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many connections: this one is reserved for /metrics, /healthz and /readyz",
            )
        });
        tracing::info!(
            %bind,
            max_connections = limits.max_connections,
            reserved = OPS_RESERVE,
            header_timeout_ms = timeout_ms,
            "serving /metrics, /healthz, /readyz and /v1"
        );
        let regular = (full, limits.max_connections);
        let main = accept(
            listeners.main,
            regular,
            Some((reserved, OPS_RESERVE)),
            &metrics,
            limits,
        );
        tokio::pin!(shutdown);
        return tokio::select! {
            served = main => served,
            () = &mut shutdown => Ok(()),
        };
    };
    let admin_bind = admin.local_addr()?;
    tracing::info!(
        %bind,
        %admin_bind,
        max_connections = limits.max_connections,
        admin_connections = ADMIN_CONNECTIONS,
        header_timeout_ms = timeout_ms,
        "serving /v1, and /metrics, /healthz, /readyz on the admin listener"
    );
    let main = accept(
        listeners.main,
        (counted.fallback(not_found), limits.max_connections),
        None,
        &metrics,
        limits,
    );
    let admin = accept(
        admin,
        (ops.fallback(not_found), ADMIN_CONNECTIONS),
        None,
        &metrics,
        limits,
    );
    tokio::pin!(shutdown);
    tokio::select! {
        served = main => served,
        served = admin => served,
        () = &mut shutdown => Ok(()),
    }
}

/// Accepts `listener`'s connections for ever, serving each with the app of `regular` while
/// fewer than its count are open, else with the app of `reserve` while fewer than its count are
/// open there; a connection beyond both is closed at once and counted.
async fn accept(
    listener: tokio::net::TcpListener,
    regular: (Router, usize),
    reserve: Option<(Router, usize)>,
    metrics: &Metrics,
    limits: Limits,
) -> std::io::Result<()> {
    let (full, regular) = (regular.0, Arc::new(Semaphore::new(regular.1)));
    let reserve = reserve.map(|(app, n)| (app, Arc::new(Semaphore::new(n))));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or the like: wait rather than spin.
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let reserved = || {
            let (app, permits) = reserve.as_ref()?;
            Some((Arc::clone(permits).try_acquire_owned().ok()?, app.clone()))
        };
        let (permit, app) = match Arc::clone(&regular).try_acquire_owned() {
            Ok(p) => (p, full.clone()),
            Err(_) => match reserved() {
                Some(served) => served,
                None => {
                    metrics.http_connections_refused.inc();
                    drop(stream);
                    continue;
                }
            },
        };
        let gauge = metrics.http_connections.clone();
        gauge.inc();
        tokio::spawn(async move {
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection closed");
            }
            gauge.dec();
            drop(permit);
        });
    }
}

/// An error answer: its status and `{"error": message}`.
fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Makes every rejection of the routes given JSON: an over-long URI is `414`, and an error
/// answer the framework made as text (a path that does not match, bad percent-encoding, a
/// malformed query string) becomes `{"error": its text}` with its status.
async fn json_rejections(request: Request, next: Next) -> Response {
    let uri_bytes = request.uri().to_string().len();
    if uri_bytes > MAX_URI_BYTES {
        return json_error(
            StatusCode::URI_TOO_LONG,
            format!("the request URI is {uri_bytes} bytes, above {MAX_URI_BYTES}"),
        );
    }
    let response = next.run(request).await;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if json || !(response.status().is_client_error() || response.status().is_server_error()) {
        return response;
    }
    let status = response.status();
    let text = match axum::body::to_bytes(response.into_body(), 64 << 10).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    };
    let message = if text.trim().is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text.trim().to_owned()
    };
    json_error(status, message)
}

/// Counts an answer of the given routes by its route pattern and status.
async fn count_query(
    State(metrics): State<Arc<Metrics>>,
    path: Option<MatchedPath>,
    request: Request,
    next: Next,
) -> Response {
    let route = path.map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    metrics
        .queries
        .with_label_values(&[route.as_str(), response.status().as_str()])
        .inc();
    response
}

async fn render_metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    match s.health.why_not() {
        None => (StatusCode::OK, "ready\n".to_owned()),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use axum::extract::Path;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// Ready only while consuming with no stage in trouble, whatever order the stages report
    /// in: a stage that moves never hides one that is stuck, and one trouble's end never hides
    /// another's; the reasons name the stage and the trouble.
    #[test]
    fn one_stage_recovering_never_hides_another_in_trouble() {
        let (metrics, health) = (Metrics::new(), Health::default());
        assert_eq!(health.why_not().as_deref(), Some("not consuming"));
        health.set_consuming(true, &metrics);
        assert!(health.ready());
        health.report(Part::Applying, Trouble::Behind, true, &metrics);
        health.report(Part::Forwarding, Trouble::Behind, false, &metrics);
        health.report(Part::Forwarding, Trouble::BrokerLost, false, &metrics);
        assert!(
            !health.ready(),
            "the forwarding stage moving hid the applying stage"
        );
        assert!(metrics.render().contains("jurystream_ready 0"));
        health.report(Part::Applying, Trouble::BrokerLost, true, &metrics);
        health.report(Part::Forwarding, Trouble::BrokerLost, true, &metrics);
        assert_eq!(
            health.why_not().as_deref(),
            Some(
                "the forwarding stage has lost the broker; the applying stage is behind (an \
                 epoch or a refused commit has waited); the applying stage has lost the broker"
            )
        );
        health.report(Part::Applying, Trouble::Behind, false, &metrics);
        health.report(Part::Forwarding, Trouble::BrokerLost, false, &metrics);
        assert_eq!(
            health.why_not().as_deref(),
            Some("the applying stage has lost the broker"),
            "catching up hid its lost broker"
        );
        health.report(Part::Applying, Trouble::BrokerLost, false, &metrics);
        assert!(health.ready());
        assert!(metrics.render().contains("jurystream_ready 1"));
        health.set_consuming(false, &metrics);
        assert!(!health.ready(), "not once it stops");
    }

    /// A server with `max` connections and a 300 ms header timeout, serving one `/v1` route
    /// that takes a path id; its address and metrics.
    async fn server(max: usize) -> (SocketAddr, Arc<Metrics>) {
        let (addr, _, metrics) = server_with(max, false).await;
        (addr, metrics)
    }

    /// [`server`], with an admin listener if `admin`; its addresses and metrics.
    async fn server_with(
        max: usize,
        admin: bool,
    ) -> (SocketAddr, Option<SocketAddr>, Arc<Metrics>) {
        let bind = || tokio::net::TcpListener::bind("127.0.0.1:0");
        let listener = bind().await.unwrap();
        let addr = listener.local_addr().unwrap();
        let admin = match admin {
            true => Some(bind().await.unwrap()),
            false => None,
        };
        let admin_addr = admin.as_ref().map(|a| a.local_addr().unwrap());
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::default());
        health.set_consuming(true, &metrics);
        let routes = Router::new().route(
            "/v1/projects/{id}",
            get(|Path(id): Path<String>| async move { id }),
        );
        let limits = Limits {
            max_connections: max,
            header_timeout: Duration::from_millis(300),
        };
        let m = Arc::clone(&metrics);
        tokio::spawn(async move {
            serve(
                Listeners {
                    main: listener,
                    admin,
                },
                (m, health),
                routes,
                limits,
                std::future::pending(),
            )
            .await
        });
        (addr, admin_addr, metrics)
    }

    /// Sends `request` whole and reads the answer until the server closes (HTTP/1.0).
    async fn ask(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        (status, head.to_lowercase(), body.to_owned())
    }

    /// Opens a connection that sends half a request and then nothing.
    async fn half(addr: SocketAddr) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        s
    }

    /// Whether the server closes `s` within `within`.
    async fn closed(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(within, s.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    /// With an admin listener, a flood of half-sent requests that takes every connection of the
    /// main listener (reserve and all) never delays the probes, which are served there only.
    #[tokio::test]
    async fn the_admin_listener_answers_probes_while_a_flood_holds_the_main_one() {
        let (addr, admin, metrics) = server_with(4, true).await;
        let admin = admin.unwrap();
        let mut flood = Vec::new();
        for _ in 0..4 + OPS_RESERVE + 8 {
            flood.push(half(addr).await);
        }
        // The main listener is full: a whole request there is refused.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(metrics.http_connections_refused.get() >= 1);
        for path in ["/readyz", "/healthz", "/metrics"] {
            let started = Instant::now();
            let (status, _, _) = tokio::time::timeout(Duration::from_secs(1), ask(admin, path))
                .await
                .unwrap();
            assert_eq!(status, 200, "{path}");
            assert!(started.elapsed() < Duration::from_millis(250), "{path}");
        }
        // Each listener serves its own endpoints only.
        assert_eq!(ask(admin, "/v1/projects/p").await.0, 404);
        drop(flood);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(ask(addr, "/v1/projects/p").await.0, 200);
        assert_eq!(ask(addr, "/readyz").await.0, 404);
    }

    #[tokio::test]
    async fn half_sent_requests_and_idle_connections_are_closed_after_the_header_timeout() {
        let (addr, _) = server(4).await;
        let mut s = half(addr).await;
        let started = Instant::now();
        assert!(closed(&mut s, Duration::from_secs(3)).await);
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
        // A keep-alive connection that answered one request and then idles is closed too.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        assert!(s.read(&mut buf).await.unwrap() > 0);
        assert!(closed(&mut s, Duration::from_secs(3)).await);
    }

    #[tokio::test]
    async fn beyond_the_limit_only_the_operational_endpoints_answer_then_nothing() {
        let (addr, metrics) = server(2).await;
        let mut held = vec![half(addr).await, half(addr).await];
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The regular connections are taken: a reserved one answers the probes, not /v1.
        let (status, _, body) = ask(addr, "/readyz").await;
        assert_eq!((status, body.as_str()), (200, "ready\n"));
        let (status, head, body) = ask(addr, "/v1/projects/p").await;
        assert_eq!(status, 503);
        assert!(
            head.contains("application/json") && body.contains("reserved"),
            "{body}"
        );
        // Every reserved connection taken too: the next is closed at once, and counted.
        for _ in 0..OPS_RESERVE {
            held.push(half(addr).await);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut refused = TcpStream::connect(addr).await.unwrap();
        assert!(closed(&mut refused, Duration::from_millis(200)).await);
        assert_eq!(metrics.http_connections_refused.get(), 1);
        assert_eq!(metrics.http_connections.get(), (2 + OPS_RESERVE) as i64);
        // The header timeout frees them all.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(metrics.http_connections.get(), 0);
        let (status, _, body) = ask(addr, "/v1/projects/p").await;
        assert_eq!((status, body.as_str()), (200, "p"));
    }

    #[tokio::test]
    async fn every_rejection_under_v1_is_json() {
        let (addr, _) = server(8).await;
        let long = format!("/v1/projects/{}", "x".repeat(MAX_URI_BYTES));
        for (path, status) in [
            ("/v1/projects/%FF%FE", 400),
            ("/v1/nope", 404),
            ("/v1/projects/a/b/c", 404),
            (long.as_str(), 414),
        ] {
            let (got, head, body) = ask(addr, path).await;
            assert_eq!(got, status, "{path}: {body}");
            assert!(
                head.contains("content-type: application/json"),
                "{path}: {head}"
            );
            let json: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert!(json["error"].is_string(), "{path}: {body}");
        }
        // /metrics keeps Prometheus' text format.
        let (status, head, _) = ask(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(head.contains("text/plain"), "{head}");
    }
}
