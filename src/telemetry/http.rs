//! The HTTP server: `/metrics` (Prometheus text format), `/healthz` (the process serves),
//! `/readyz` (bootstrapped and the broker reachable), and the routes it is given (the
//! interactive queries, [`crate::queries::api`]), each answer counted by route and status.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::telemetry::metrics::Metrics;

/// What the endpoints report.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
}

impl Health {
    pub fn set_ready(&self, ready: bool, metrics: &Metrics) {
        self.ready.store(ready, Ordering::Relaxed);
        metrics.ready.set(i64::from(ready));
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Serves the endpoints and `routes` until `shutdown` resolves.
pub async fn serve(
    bind: SocketAddr,
    (metrics, health): (Arc<Metrics>, Arc<Health>),
    routes: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let counted = routes.layer(middleware::from_fn_with_state(
        Arc::clone(&metrics),
        count_query,
    ));
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health })
        .merge(counted);
    let listener = tokio::net::TcpListener::bind(bind).await?;
    tracing::info!(%bind, "serving /metrics, /healthz, /readyz and /v1");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
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
    if s.health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
