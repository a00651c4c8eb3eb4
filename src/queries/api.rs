//! The query endpoints (Kafka Streams' interactive queries, over HTTP): JSON answers read from
//! the [`View`], a `307` to the instance that owns a project held elsewhere, `400` for a
//! malformed id and `404` for an unknown one. docs/queries.openapi.yaml describes them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use self::list::{DEFAULT_LIMIT, Elsewhere, ListAnswer, ListQuery, Listed, MAX_LIMIT, merge};
use super::view::{Owned, ProjectView, ScoreView, SessionView, View};
use crate::config::Config;
use crate::engine::contract::time::{EventTime, rfc3339};
use crate::topics::partition_of;

/// The client a proxying instance asks owners with: one for every request, so connections to
/// the owners are reused.
type Proxy = Client<HttpConnector, Empty<Bytes>>;

/// What the endpoints need besides the view.
#[derive(Debug, Clone)]
pub struct Queries {
    pub view: Arc<View>,
    /// The repartition topic's partitions, when the service repartitions (`None` with
    /// `by_key`: a project's partition is then its producers' choice, and an instance answers
    /// only for the projects it holds).
    pub partitions: Option<i32>,
    /// This instance's advertised URL.
    pub advertised: String,
    /// `limits.max_id_bytes`.
    pub max_id_bytes: usize,
    /// `http.proxy_queries`: fetch a project owned elsewhere rather than redirect.
    pub proxy: bool,
    /// `http.proxy_timeout_ms`.
    pub proxy_timeout: Duration,
    pub client: Proxy,
    /// The bearer tokens `/v1` accepts; empty: `/v1` is open.
    pub tokens: Arc<Vec<String>>,
}

impl Queries {
    /// What the endpoints of a service running `config` need, reading `view`, requiring one
    /// of `tokens` if there are any.
    pub fn of(config: &Config, view: Arc<View>, tokens: Vec<String>) -> Queries {
        Queries {
            view,
            partitions: config
                .input
                .repartitions()
                .then_some(config.kafka.partitions),
            advertised: config.http.advertised(),
            max_id_bytes: config.limits.max_id_bytes,
            proxy: config.http.proxy_queries,
            proxy_timeout: Duration::from_millis(config.http.proxy_timeout_ms),
            client: Client::builder(TokioExecutor::new()).build_http(),
            tokens: Arc::new(tokens),
        }
    }
}

/// The bearer tokens of `file` (one per line; empty: none) and of `variable` (comma-separated).
pub fn tokens(file: &str, variable: Option<&str>) -> std::io::Result<Vec<String>> {
    let from_file = if file.is_empty() {
        String::new()
    } else {
        std::fs::read_to_string(file)?
    };
    Ok(from_file
        .lines()
        .chain(variable.unwrap_or_default().split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Whether `a` equals `b`, in a time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Answers `401` to a request under `/v1` without one of the configured bearer tokens.
async fn authorize(State(q): State<Arc<Queries>>, request: Request, next: Next) -> Response {
    if q.tokens.is_empty() {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let known = given.is_some_and(|g| {
        q.tokens
            .iter()
            .fold(false, |ok, t| ok | same_secret(t.as_bytes(), g.as_bytes()))
    });
    if known {
        return next.run(request).await;
    }
    let mut answer = error(
        StatusCode::UNAUTHORIZED,
        "a bearer token is required (Authorization: Bearer <token>)",
    );
    answer.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    answer
}

/// The routes under `/v1`.
pub fn routes(queries: Queries) -> Router {
    let queries = Arc::new(queries);
    Router::new()
        .route("/v1/projects", get(projects))
        .route("/v1/projects/{project_id}", get(project))
        .route(
            "/v1/projects/{project_id}/sessions/{session_id}",
            get(session),
        )
        .route("/v1/projects/{project_id}/judges", get(judges))
        .route("/v1/projects/{project_id}/reviewers", get(reviewers))
        .route("/v1/leaderboard", get(leaderboard))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&queries),
            authorize,
        ))
        .with_state(queries)
}

/// A project's snapshot here, if any, with its partition and whether that is still restoring;
/// or the answer to give instead: `400` for a malformed id, another instance's answer, `404` for
/// a project this instance does not hold.
type Held<'q> = (
    i32,
    Owned,
    Option<dashmap::mapref::one::Ref<'q, Arc<str>, ProjectView>>,
);

impl Queries {
    async fn held(
        &self,
        project_id: &str,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Held<'_>, Response> {
        self.check_id("project_id", project_id)
            .map_err(|e| error(StatusCode::BAD_REQUEST, e))?;
        let (partition, owned) = match self.locate(project_id, uri, headers).await {
            Located::Here(partition, owned) => (partition, owned),
            Located::Away(response) => return Err(response),
        };
        let view = self.view.projects.get(project_id);
        if view.is_none() && !owned.restoring {
            return Err(unknown(project_id));
        }
        Ok((partition, owned, view))
    }
}

/// An error answer: its status and `{"error": message}`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    #[derive(Serialize)]
    struct Error {
        error: String,
    }
    (
        status,
        Json(Error {
            error: message.into(),
        }),
    )
        .into_response()
}

/// Where a project's state is.
enum Located {
    /// Here, in this partition.
    Here(i32, Owned),
    /// Answered elsewhere: a redirect, a proxied answer or an error.
    Away(Response),
}

/// The header a proxied request carries, so that it is proxied at most once.
const PROXIED: &str = "x-jurystream-proxied";

impl Queries {
    /// Checks an id from the path or the query string: why it is malformed, if it is (the
    /// answer is a `400` saying so).
    fn check_id(&self, name: &str, id: &str) -> Result<(), String> {
        if id.is_empty() {
            return Err(format!("{name} is empty"));
        }
        if id.len() > self.max_id_bytes {
            return Err(format!(
                "{name} is {} bytes, longer than limits.max_id_bytes ({})",
                id.len(),
                self.max_id_bytes
            ));
        }
        Ok(())
    }

    /// Finds the instance that owns `project` and answers for it if it is not this one: a
    /// `307` to the owner (or, with `http.proxy_queries`, the owner's answer, fetched once),
    /// a `503` if no owner has announced itself yet, a `404` with `by_key` for a project this
    /// instance does not hold.
    async fn locate(&self, project: &str, uri: &Uri, headers: &HeaderMap) -> Located {
        let Some(partitions) = self.partitions else {
            let held = self.view.projects.get(project).map(|p| p.partition);
            return match held.and_then(|p| Some((p, *self.view.owned.get(&p)?))) {
                Some((partition, owned)) => Located::Here(partition, owned),
                None => Located::Away(error(
                    StatusCode::NOT_FOUND,
                    format!(
                        "project {project:?} is not held by this instance (with \
                         input.partitioning = \"by_key\" an instance answers for the projects \
                         it holds)"
                    ),
                )),
            };
        };
        let partition = partition_of(project, partitions);
        if let Some(owned) = self.view.owned.get(&partition) {
            return Located::Here(partition, *owned);
        }
        let owner = self.view.directory.get(&partition).map(|u| u.clone());
        let Some(url) = owner.filter(|u| *u != self.advertised) else {
            return Located::Away(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "1")],
                    Json(serde_json::json!({
                        "error": format!("no instance owns partition {partition} of project {project:?} yet"),
                        "partition": partition,
                    })),
                )
                    .into_response(),
            );
        };
        let target = format!("{url}{}", uri.path_and_query().map_or("", |p| p.as_str()));
        if self.proxy && !headers.contains_key(PROXIED) {
            return Located::Away(self.ask(&target, headers).await);
        }
        Located::Away(
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, target)],
                Json(serde_json::json!({"owner": url, "partition": partition})),
            )
                .into_response(),
        )
    }
}

/// Why another instance's answer is missing.
enum Unanswered {
    /// It could not be asked, or its answer not read.
    Failed(String),
    /// It did not answer within `http.proxy_timeout_ms`.
    TimedOut,
}

impl Queries {
    /// `target`'s answer, asked once on a client's behalf (with its bearer token `token`, and
    /// marked proxied so that it is not proxied again), within `http.proxy_timeout_ms`.
    async fn fetch(
        &self,
        target: &str,
        token: Option<&HeaderValue>,
    ) -> Result<(axum::http::response::Parts, Bytes), Unanswered> {
        let mut request = axum::http::Request::get(target).header(PROXIED, "1");
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, token);
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| Unanswered::Failed(e.to_string()))?;
        let asked = async {
            let answer = self
                .client
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let (parts, body) = answer.into_parts();
            let body = body.collect().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((parts, body.to_bytes()))
        };
        match tokio::time::timeout(self.proxy_timeout, asked).await {
            Ok(answer) => answer.map_err(Unanswered::Failed),
            Err(_) => Err(Unanswered::TimedOut),
        }
    }

    /// The answer of `target` for the client: `502` if the owner cannot be asked, `504` if it
    /// does not answer in time.
    async fn ask(&self, target: &str, headers: &HeaderMap) -> Response {
        match self.fetch(target, headers.get(header::AUTHORIZATION)).await {
            Ok((parts, body)) => Response::from_parts(parts, axum::body::Body::from(body)),
            Err(Unanswered::Failed(e)) => {
                error(StatusCode::BAD_GATEWAY, format!("asking {target}: {e}"))
            }
            Err(Unanswered::TimedOut) => error(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "{target} did not answer within http.proxy_timeout_ms ({} ms)",
                    self.proxy_timeout.as_millis()
                ),
            ),
        }
    }
}

impl Queries {
    /// This instance's page: the projects of the partitions it owns, and whether it has more.
    fn local_page(&self, after: Option<&str>, limit: usize) -> (Vec<Listed>, bool) {
        // The partitions owned, read once: a lookup in the concurrent map per project would
        // take a shard lock each.
        let owned: BTreeSet<i32> = self.view.owned.iter().map(|o| *o.key()).collect();
        self.view.page(after, limit, |id, p| {
            owned.contains(&p.partition).then(|| Listed {
                project_id: id.to_owned(),
                partition: p.partition,
                score: p.score.as_ref().map(|s| s.score),
                votes: p.score.as_ref().map_or(0, |s| s.votes),
                open_sessions: p.open.len(),
                updated_at: wall_clock(p.updated_ms),
            })
        })
    }

    /// The other instances of the directory, each with the partitions it announced that this
    /// one does not own; and the partitions nobody announced.
    fn others(&self) -> (Vec<Elsewhere>, Vec<i32>) {
        let mut by_url: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for entry in self.view.directory.iter() {
            let partition = *entry.key();
            if *entry.value() != self.advertised && !self.view.owned.contains_key(&partition) {
                by_url
                    .entry(entry.value().clone())
                    .or_default()
                    .insert(partition);
            }
        }
        let unannounced = self.partitions.map_or_else(Vec::new, |n| {
            (0..n)
                .filter(|p| {
                    !self.view.owned.contains_key(p)
                        && self
                            .view
                            .directory
                            .get(p)
                            .is_none_or(|u| *u == self.advertised)
                })
                .collect()
        });
        let elsewhere = by_url
            .into_iter()
            .map(|(url, partitions)| Elsewhere {
                url,
                partitions: partitions.into_iter().collect(),
                error: None,
            })
            .collect();
        (elsewhere, unannounced)
    }

    /// `url`'s own page of the listing, asked once with the client's bearer token `token`,
    /// within `http.proxy_timeout_ms`.
    async fn page_of(
        &self,
        url: &str,
        (after, limit): (Option<&str>, usize),
        token: Option<&HeaderValue>,
    ) -> Result<ListAnswer, String> {
        let query = serde_urlencoded::to_string(ListQuery {
            after: after.map(str::to_owned),
            limit: Some(limit),
        })
        .map_err(|e| e.to_string())?;
        let target = format!("{url}/v1/projects?{query}");
        match self.fetch(&target, token).await {
            Ok((parts, body)) if parts.status == StatusCode::OK => {
                serde_json::from_slice::<ListAnswer>(&body).map_err(|e| e.to_string())
            }
            Ok((parts, _)) => Err(format!("answered {}", parts.status)),
            Err(Unanswered::Failed(e)) => Err(e),
            Err(Unanswered::TimedOut) => Err(format!(
                "no answer within http.proxy_timeout_ms ({} ms)",
                self.proxy_timeout.as_millis()
            )),
        }
    }
}

/// `GET /v1/projects`: each instance lists the projects of the partitions it owns; with
/// `http.proxy_queries` it asks every other instance of the directory for the same page and
/// merges the answers, without it the answer names the instances that hold the rest, to be
/// asked the same way.
async fn projects(
    State(q): State<Arc<Queries>>,
    query: Result<Query<ListQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("limit is {limit}: a page holds 1 to {MAX_LIMIT} projects"),
        );
    }
    let after = query.after.as_deref();
    let restoring = q.view.owned.iter().any(|o| o.restoring);
    let (mut elsewhere, unannounced) = q.others();
    let mut pages = vec![q.local_page(after, limit)];
    // A request that is itself a gathering instance's question is answered from here only.
    if q.proxy && !headers.contains_key(PROXIED) {
        // The instances are asked at once: a page takes as long as the slowest of them.
        let mut asked = tokio::task::JoinSet::new();
        for (i, other) in elsewhere.iter().enumerate() {
            let (q, url) = (Arc::clone(&q), other.url.clone());
            let (after, token) = (
                query.after.clone(),
                headers.get(header::AUTHORIZATION).cloned(),
            );
            asked.spawn(async move {
                let answer = q.page_of(&url, (after.as_deref(), limit), token.as_ref());
                (i, answer.await)
            });
        }
        // Each instance is missing until its answer arrives.
        let mut errors: BTreeMap<usize, String> = (0..elsewhere.len())
            .map(|i| (i, "the question failed".to_owned()))
            .collect();
        while let Some(joined) = asked.join_next().await {
            match joined {
                Ok((i, Ok(answer))) => {
                    errors.remove(&i);
                    pages.push((answer.projects, answer.next.is_some()));
                }
                Ok((i, Err(e))) => {
                    errors.insert(i, e);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a listing's question to another instance failed")
                }
            }
        }
        elsewhere = elsewhere
            .into_iter()
            .enumerate()
            .filter_map(|(i, other)| {
                let error = errors.remove(&i)?;
                Some(Elsewhere {
                    error: Some(error),
                    ..other
                })
            })
            .collect();
    }
    let (projects, next) = merge(pages, limit);
    Json(ListAnswer {
        projects,
        next,
        complete: elsewhere.is_empty() && unannounced.is_empty() && !restoring,
        restoring,
        elsewhere,
        unannounced,
    })
    .into_response()
}

fn unknown(project: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("unknown project {project:?}"),
    )
}

/// Milliseconds since the epoch as RFC 3339.
fn wall_clock(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// An open session in a project's answer: who has reported so far.
#[derive(Serialize)]
struct OpenSession<'a> {
    session_id: &'a str,
    category: Option<&'a str>,
    expected_judges: Option<u32>,
    judges: Vec<&'a str>,
    #[serde(serialize_with = "rfc3339")]
    last_activity: EventTime,
}

/// `GET /v1/projects/{project_id}`.
#[derive(Serialize)]
struct ProjectAnswer<'a> {
    project_id: &'a str,
    partition: i32,
    /// The partition's state is still being read: what follows may be missing or stale.
    restoring: bool,
    /// When this instance last changed the project (wall clock): the answer is that fresh.
    updated_at: Option<String>,
    score: Option<&'a ScoreView>,
    open_sessions: Vec<OpenSession<'a>>,
}

async fn project(
    State(q): State<Arc<Queries>>,
    Path(project_id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (partition, owned, view) = match q.held(&project_id, &uri, &headers).await {
        Ok(held) => held,
        Err(response) => return response,
    };
    let p: Option<&ProjectView> = view.as_deref();
    let answer = ProjectAnswer {
        project_id: &project_id,
        partition,
        restoring: owned.restoring,
        updated_at: p.and_then(|p| wall_clock(p.updated_ms)),
        score: p.and_then(|p| p.score.as_ref()),
        open_sessions: p
            .map(|p| {
                p.open
                    .values()
                    .map(|s| OpenSession {
                        session_id: &s.session_id,
                        category: s.category.as_deref(),
                        expected_judges: s.expected_judges,
                        judges: s.ballots.keys().map(String::as_str).collect(),
                        last_activity: s.last_activity,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };
    Json(answer).into_response()
}

/// `GET /v1/projects/{project_id}/sessions/{session_id}`.
#[derive(Serialize)]
struct SessionAnswer<'a> {
    project_id: &'a str,
    session_id: &'a str,
    /// `open`, `completed`, or `unknown` while the partition is restoring and the session
    /// not read yet.
    state: &'static str,
    restoring: bool,
    /// The open session's ballots so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    open: Option<&'a SessionView>,
    /// The completed session's `jury.consensus` record.
    #[serde(skip_serializing_if = "Option::is_none")]
    consensus: Option<&'a RawValue>,
}

async fn session(
    State(q): State<Arc<Queries>>,
    Path((project_id, session_id)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = q
        .check_id("project_id", &project_id)
        .and_then(|()| q.check_id("session_id", &session_id))
    {
        return error(StatusCode::BAD_REQUEST, e);
    }
    let owned = match q.locate(&project_id, &uri, &headers).await {
        Located::Here(_, owned) => owned,
        Located::Away(response) => return response,
    };
    let view = q.view.projects.get(project_id.as_str());
    let p: Option<&ProjectView> = view.as_deref();
    let open = p.and_then(|p| p.open.get(&session_id));
    let completed = p
        .and_then(|p| p.completed.get(&session_id))
        .and_then(|record| serde_json::from_str::<&RawValue>(record).ok());
    if open.is_none() && completed.is_none() && owned.restoring {
        return Json(SessionAnswer {
            project_id: &project_id,
            session_id: &session_id,
            state: "unknown",
            restoring: true,
            open: None,
            consensus: None,
        })
        .into_response();
    }
    if open.is_none() && completed.is_none() {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "session {session_id:?} of project {project_id:?} is neither open nor among its \
                 last completed ones"
            ),
        );
    }
    Json(SessionAnswer {
        project_id: &project_id,
        session_id: &session_id,
        state: if open.is_some() { "open" } else { "completed" },
        restoring: owned.restoring,
        open,
        consensus: if open.is_some() { None } else { completed },
    })
    .into_response()
}

/// `GET /v1/projects/{project_id}/judges`: the project's `jury.judge-quality` records, by judge.
#[derive(Serialize)]
struct JudgesAnswer<'a> {
    project_id: &'a str,
    restoring: bool,
    judges: Vec<&'a RawValue>,
}

async fn judges(
    State(q): State<Arc<Queries>>,
    Path(project_id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (_, owned, view) = match q.held(&project_id, &uri, &headers).await {
        Ok(held) => held,
        Err(response) => return response,
    };
    let judges = view
        .as_deref()
        .map(|p| {
            p.judges
                .values()
                .filter_map(|r| serde_json::from_str::<&RawValue>(r).ok())
                .collect()
        })
        .unwrap_or_default();
    Json(JudgesAnswer {
        project_id: &project_id,
        restoring: owned.restoring,
        judges,
    })
    .into_response()
}

/// `GET /v1/projects/{project_id}/reviewers`: the project's `jury.reviewer-quality` records,
/// least reliable first (ties by voter id): the reviewers to look at first lead.
#[derive(Serialize)]
struct ReviewersAnswer<'a> {
    project_id: &'a str,
    restoring: bool,
    reviewers: Vec<&'a RawValue>,
}

async fn reviewers(
    State(q): State<Arc<Queries>>,
    Path(project_id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    #[derive(Deserialize)]
    struct Reliability {
        reliability: f64,
    }
    let (_, owned, view) = match q.held(&project_id, &uri, &headers).await {
        Ok(held) => held,
        Err(response) => return response,
    };
    let mut ranked: Vec<(f64, &RawValue)> = view
        .as_deref()
        .map(|p| {
            p.reviewers
                .values()
                .filter_map(|r| {
                    let reliability = serde_json::from_str::<Reliability>(r).ok()?.reliability;
                    Some((reliability, serde_json::from_str::<&RawValue>(r).ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    // Stable: equal reliabilities stay in voter order.
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    Json(ReviewersAnswer {
        project_id: &project_id,
        restoring: owned.restoring,
        reviewers: ranked.into_iter().map(|(_, r)| r).collect(),
    })
    .into_response()
}

#[derive(Deserialize)]
struct LeaderboardQuery {
    project_id: Option<String>,
    category: Option<String>,
}

/// `GET /v1/leaderboard?project_id=...&category=...`: the project's rows (of one category if
/// given; `category=` with no value for sessions without one), in (category, model) order.
#[derive(Serialize)]
struct LeaderboardAnswer<'a> {
    project_id: &'a str,
    restoring: bool,
    rows: Vec<&'a RawValue>,
}

async fn leaderboard(
    State(q): State<Arc<Queries>>,
    Query(query): Query<LeaderboardQuery>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let Some(project_id) = query.project_id else {
        return error(
            StatusCode::BAD_REQUEST,
            "project_id is required: leaderboards are per project",
        );
    };
    if let Err(e) = q.check_id("project_id", &project_id) {
        return error(StatusCode::BAD_REQUEST, e);
    }
    let owned = match q.locate(&project_id, &uri, &headers).await {
        Located::Here(_, owned) => owned,
        Located::Away(response) => return response,
    };
    let view = q.view.projects.get(project_id.as_str());
    let rows: Vec<&RawValue> = view
        .as_deref()
        .map(|p| {
            p.leaderboard
                .iter()
                .filter(|((category, _), _)| query.category.as_ref().is_none_or(|c| c == category))
                .filter_map(|(_, record)| serde_json::from_str::<&RawValue>(record).ok())
                .collect()
        })
        .unwrap_or_default();
    if view.is_none() && !owned.restoring {
        return unknown(&project_id);
    }
    Json(LeaderboardAnswer {
        project_id: &project_id,
        restoring: owned.restoring,
        rows,
    })
    .into_response()
}

mod list;

#[cfg(test)]
mod tests;
