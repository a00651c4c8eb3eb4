use crate::changelog::Unit;
use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use super::*;
use crate::engine::InputTopic;

const PARTITIONS: i32 = 4;

/// A project of each partition.
fn project_in(partition: i32) -> String {
    (0..)
        .map(|i| format!("proj-{i}"))
        .find(|p| partition_of(p, PARTITIONS) == partition)
        .expect("a project")
}

/// This instance owns partition 0 (restored) and 1 (restoring); partition 2 is another's;
/// nobody has announced partition 3.
fn queries(proxy: bool) -> Queries {
    let view = View::default();
    view.assigned(Unit::input(InputTopic::JudgeScores, 0));
    view.owned.insert(0, Owned { restoring: false });
    view.assigned(Unit::input(InputTopic::JudgeScores, 1));
    view.directory.insert(2, "http://other:9464".into());
    view.directory.insert(0, "http://me:9464".into());
    let here = project_in(0);
    view.hold(
        &here,
        ProjectView {
            partition: 0,
            completed: [("s1".to_owned(), Arc::from(r#"{"session_id":"s1"}"#))].into(),
            leaderboard: [
                (("c".into(), "m".into()), Arc::from(r#"{"model":"m"}"#)),
                (("".into(), "n".into()), Arc::from(r#"{"model":"n"}"#)),
            ]
            .into(),
            judges: [("j1".to_owned(), Arc::from(r#"{"judge":"j1","kappa":0.5}"#))].into(),
            reviewers: [
                ("ann", r#"{"voter_id":"ann","reliability":0.9}"#),
                ("bo", r#"{"voter_id":"bo","reliability":0.2}"#),
                ("cy", r#"{"voter_id":"cy","reliability":0.9}"#),
            ]
            .map(|(k, v)| (k.to_owned(), Arc::from(v)))
            .into(),
            ..ProjectView::default()
        },
    );
    Queries {
        view: Arc::new(view),
        partitions: Some(PARTITIONS),
        advertised: "http://me:9464".into(),
        max_id_bytes: 16,
        proxy,
        proxy_timeout: Duration::from_millis(300),
        client: Client::builder(TokioExecutor::new()).build_http(),
        tokens: Arc::new(Vec::new()),
    }
}

/// `field` of each object of the JSON array `array`, where it is a string.
fn fields<'v>(array: &'v serde_json::Value, field: &str) -> Vec<&'v str> {
    let objects = array.as_array().into_iter().flatten();
    objects.filter_map(|o| o[field].as_str()).collect()
}

async fn get(q: Queries, path: &str) -> (StatusCode, HeaderMap, serde_json::Value) {
    let answer = routes(q)
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = answer.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or_default();
    (parts.status, parts.headers, json)
}

/// docs/queries.openapi.yaml describes every route served, and no other.
#[test]
fn the_openapi_description_names_the_routes() {
    let doc = include_str!("../../../docs/queries.openapi.yaml");
    let described: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("  /")?.strip_suffix(':'))
        .collect();
    assert_eq!(
        described,
        [
            "v1/projects",
            "v1/projects/{project_id}",
            "v1/projects/{project_id}/sessions/{session_id}",
            "v1/projects/{project_id}/judges",
            "v1/projects/{project_id}/reviewers",
            "v1/leaderboard"
        ]
    );
    let served = include_str!("../api.rs");
    for route in described {
        assert!(served.contains(&format!("\"/{route}\"")), "{route}");
    }
}

#[tokio::test]
async fn a_project_held_here_is_answered_as_json() {
    let here = project_in(0);
    let (status, headers, body) = get(queries(false), &format!("/v1/projects/{here}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(body["project_id"], here.as_str());
    assert_eq!(
        (body["partition"].as_i64(), body["restoring"].as_bool()),
        (Some(0), Some(false))
    );
    let path = format!("/v1/projects/{here}/sessions/s1");
    let (status, _, body) = get(queries(false), &path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["state"].as_str(), &body["consensus"]["session_id"]),
        (Some("completed"), &"s1".into())
    );
    let path = format!("/v1/leaderboard?project_id={here}&category=c");
    let (_, _, body) = get(queries(false), &path).await;
    assert_eq!(body["rows"], serde_json::json!([{"model": "m"}]));
    let path = format!("/v1/leaderboard?project_id={here}&category=");
    let (_, _, body) = get(queries(false), &path).await;
    assert_eq!(body["rows"], serde_json::json!([{"model": "n"}]));
    let (status, _, body) = get(queries(false), &format!("/v1/projects/{here}/judges")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["judges"],
        serde_json::json!([{"judge": "j1", "kappa": 0.5}])
    );
    // Least reliable first, equal ones by voter id.
    let (status, _, body) = get(queries(false), &format!("/v1/projects/{here}/reviewers")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fields(&body["reviewers"], "voter_id"), ["bo", "ann", "cy"]);
}

#[tokio::test]
async fn unknown_ids_are_404_and_malformed_ones_400() {
    let q = || queries(false);
    let unknown = (0..)
        .map(|i| format!("x{i}"))
        .find(|p| partition_of(p, PARTITIONS) == 0)
        .unwrap();
    for (path, status, says) in [
        (format!("/v1/projects/{unknown}"), 404, "unknown project"),
        (
            format!("/v1/projects/{unknown}/judges"),
            404,
            "unknown project",
        ),
        (
            format!("/v1/projects/{}/sessions/s9", project_in(0)),
            404,
            "neither open",
        ),
        (
            "/v1/projects/aaaaaaaaaaaaaaaaa".to_owned(),
            400,
            "longer than limits.max_id_bytes (16)",
        ),
        (
            format!("/v1/projects/{}/sessions/{}", project_in(0), "s".repeat(17)),
            400,
            "session_id is 17 bytes",
        ),
        ("/v1/leaderboard".to_owned(), 400, "project_id is required"),
        (
            "/v1/leaderboard?project_id=".to_owned(),
            400,
            "project_id is empty",
        ),
    ] {
        let (got, headers, body) = get(q(), &path).await;
        assert_eq!(got.as_u16(), status, "{path}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{path}: {error}");
    }
}

#[tokio::test]
async fn a_restoring_partition_says_so_and_others_are_redirected_or_unavailable() {
    let (status, _, body) = get(queries(false), &format!("/v1/projects/{}", project_in(1))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["restoring"].as_bool(), body["score"].is_null()),
        (Some(true), true)
    );
    let path = format!("/v1/projects/{}/sessions/s1?x=1", project_in(2));
    let (status, headers, body) = get(queries(false), &path).await;
    assert_eq!(status, StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(
        headers[header::LOCATION],
        format!("http://other:9464{path}")
    );
    assert_eq!(body["partition"], 2);
    let (status, headers, _) =
        get(queries(false), &format!("/v1/projects/{}", project_in(3))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers[header::RETRY_AFTER], "1");
    // A session of a restoring partition: not a false 404, but restoring, like the project.
    let path = format!("/v1/projects/{}/sessions/s1", project_in(1));
    let (status, _, body) = get(queries(false), &path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["state"].as_str(), body["restoring"].as_bool()),
        (Some("unknown"), Some(true))
    );
}

#[tokio::test]
async fn v1_needs_a_known_bearer_token_when_tokens_are_configured() {
    let with_tokens = || Queries {
        tokens: Arc::new(vec!["s3cret".into(), "rotated".into()]),
        ..queries(false)
    };
    let here = format!("/v1/projects/{}", project_in(0));
    let ask = |token: Option<&str>| {
        let mut r = Request::get(here.as_str());
        if let Some(t) = token {
            r = r.header(header::AUTHORIZATION, t);
        }
        routes(with_tokens()).oneshot(r.body(Body::empty()).unwrap())
    };
    for bad in [
        None,
        Some("Bearer nope"),
        Some("s3cret"),
        Some("Bearer s3cre"),
    ] {
        let answer = ask(bad).await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{bad:?}");
        assert_eq!(answer.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(json["error"].as_str().unwrap().contains("bearer token"));
    }
    for good in ["Bearer s3cret", "Bearer rotated"] {
        assert_eq!(ask(Some(good)).await.unwrap().status(), StatusCode::OK);
    }
    // Tokens from a file (one per line) and the variable (comma-separated).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, "a\n\n  b  \n").unwrap();
    let file = file.to_str().unwrap();
    assert_eq!(tokens(file, Some("c, d,")).unwrap(), ["a", "b", "c", "d"]);
    assert_eq!(tokens("", None).unwrap(), Vec::<String>::new());
    assert!(tokens("/no/such/file", None).is_err());
}

/// The URL of an owner that accepts connections and never answers.
async fn silent_owner() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

#[tokio::test]
async fn a_proxy_gives_up_after_its_timeout() {
    let proxying = queries(true);
    proxying.view.directory.insert(2, silent_owner().await);
    let started = std::time::Instant::now();
    let (status, _, body) = get(proxying, &format!("/v1/projects/{}", project_in(2))).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_proxy_asks_the_owner_once() {
    // The owner's answer, served by a second router on a real socket.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let owner_url = format!("http://{}", listener.local_addr().unwrap());
    let owner = queries(false);
    let away = project_in(2);
    owner.view.owned.insert(2, Owned { restoring: false });
    owner.view.hold(
        &away,
        ProjectView {
            partition: 2,
            ..ProjectView::default()
        },
    );
    tokio::spawn(axum::serve(listener, routes(owner)).into_future());
    let proxying = queries(true);
    proxying.view.directory.insert(2, owner_url);
    let (status, _, body) = get(proxying, &format!("/v1/projects/{away}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["project_id"], away.as_str());
    // A request proxied already is not proxied again: it is redirected.
    let proxied = queries(true);
    let answer = routes(proxied)
        .oneshot(
            Request::get(format!("/v1/projects/{away}"))
                .header(PROXIED, "1")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::TEMPORARY_REDIRECT);
}

#[tokio::test]
async fn a_listing_gives_the_projects_held_here_and_names_who_holds_the_rest() {
    let (status, _, body) = get(queries(false), "/v1/projects").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        fields(&body["projects"], "project_id"),
        [project_in(0).as_str()]
    );
    assert_eq!(body["projects"][0]["partition"], 0);
    assert_eq!(body["next"], serde_json::Value::Null);
    // Partition 1 is restoring, 2 is another's, 3 nobody's: the listing is not complete.
    assert_eq!(
        (&body["restoring"], &body["complete"]),
        (&true.into(), &false.into())
    );
    assert_eq!(
        body["elsewhere"],
        serde_json::json!([{"url": "http://other:9464", "partitions": [2]}])
    );
    assert_eq!(body["unannounced"], serde_json::json!([3]));
    for (bad, says) in [
        ("/v1/projects?limit=0", "a page holds 1 to 1000"),
        ("/v1/projects?limit=1001", "a page holds 1 to 1000"),
        ("/v1/projects?limit=x", "limit"),
    ] {
        let (status, _, body) = get(queries(false), bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{bad}: {body}");
    }
}

/// Every page of the listing of the instance `q` makes, `limit` a page, following `next`: the
/// ids of each, and the last page.
async fn pages(q: impl Fn() -> Queries, limit: usize) -> (Vec<Vec<String>>, serde_json::Value) {
    let mut pages = Vec::new();
    let mut after = String::new();
    loop {
        let path = format!("/v1/projects?limit={limit}{after}");
        let (status, _, body) = get(q(), &path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        pages.push(
            fields(&body["projects"], "project_id")
                .into_iter()
                .map(str::to_owned)
                .collect(),
        );
        match body["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return (pages, body),
        }
        assert!(pages.len() < 20, "{pages:?}");
    }
}

#[tokio::test]
async fn with_proxy_queries_a_listing_gathers_every_instance_a_page_at_a_time() {
    // The owner of partition 2, on a real socket, holding three projects there.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let owner_url = format!("http://{}", listener.local_addr().unwrap());
    let owner = queries(false);
    owner.view.owned.insert(2, Owned { restoring: false });
    let away: Vec<String> = (0..)
        .map(|i| format!("q{i}"))
        .filter(|p| partition_of(p, PARTITIONS) == 2)
        .take(3)
        .collect();
    for p in &away {
        owner.view.hold(
            p,
            ProjectView {
                partition: 2,
                ..ProjectView::default()
            },
        );
    }
    tokio::spawn(axum::serve(listener, routes(owner)).into_future());
    let proxying = || {
        let q = queries(true);
        q.view.owned.insert(1, Owned { restoring: false });
        q.view.owned.insert(3, Owned { restoring: false });
        q.view.directory.insert(2, owner_url.clone());
        q
    };
    let mut every: Vec<String> = away.clone();
    every.push(project_in(0));
    every.sort();
    let (pages, last) = pages(proxying, 2).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
    assert_eq!(pages.concat(), every);
    assert_eq!(
        (&last["complete"], &last["elsewhere"]),
        (&true.into(), &serde_json::json!([]))
    );
    // An instance that does not answer is named, with why, and the listing is not complete.
    let silent_url = silent_owner().await;
    let q = proxying();
    q.view.directory.insert(2, silent_url.clone());
    let (status, _, body) = get(q, "/v1/projects").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["complete"], false);
    assert_eq!(body["elsewhere"][0]["url"], silent_url.as_str());
    let why = body["elsewhere"][0]["error"].as_str().unwrap_or_default();
    assert!(why.contains("http.proxy_timeout_ms"), "{body}");
}
