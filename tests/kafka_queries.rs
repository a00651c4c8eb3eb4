//! Interactive queries against a real broker: two instances share the partitions, each answers
//! for the projects it owns and redirects (307) to the other for the rest, and every answer
//! equals what the output topics say (the final `jury.scores` and `jury.leaderboard` records,
//! the sessions' `jury.consensus` records), which for this stream are what a replay publishes
//! (`kafka_service` checks that). When one instance
//! stops, the other restores its partitions and answers for them from the restored state, the
//! same.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::published::{Published, replayed};
use support::stream::Shape;
use support::{
    Answer, Broker, Service, Setup, free_port, http_answer, http_answer_with, produce, setup,
    start_instance,
};

/// `path` asked of `service`, following one redirect to another of `services`; the answer and
/// whether it was redirected.
fn ask(services: &[&Service], service: &Service, path: &str) -> (Answer, bool) {
    let first = http_answer(service.http_port, path).expect("an answer");
    if first.status != 307 {
        return (first, false);
    }
    let location = first.location.clone().expect("a Location");
    let port: u16 = location
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a local owner: {location}"));
    assert!(services.iter().any(|s| s.http_port == port), "{location}");
    let path_there = location.splitn(4, '/').nth(3).map(|p| format!("/{p}"));
    assert_eq!(
        path_there.as_deref(),
        Some(path),
        "the redirect keeps the path"
    );
    (http_answer(port, path).expect("an answer"), true)
}

/// Asks until the answer is not 503 (an owner not announced yet) and not `restoring`.
fn ask_settled(services: &[&Service], service: &Service, path: &str) -> (Answer, bool) {
    ask_until(services, service, path, |_| true)
}

/// Asks until the answer is settled and `done` (the view is updated when an epoch's outputs
/// are published, a little after the inputs' positions moved), or a minute has passed.
fn ask_until(
    services: &[&Service],
    service: &Service,
    path: &str,
    done: impl Fn(&Answer) -> bool,
) -> (Answer, bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (answer, redirected) = ask(services, service, path);
        let restoring = serde_json::from_str::<Value>(&answer.body)
            .is_ok_and(|v| v["restoring"] == Value::Bool(true));
        let settled = answer.status != 503 && !restoring && done(&answer);
        if settled || Instant::now() > deadline {
            return (answer, redirected);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The fields of a project's answer that its published `jury.scores` record gives.
const SCORE_FIELDS: [&str; 7] = [
    "score",
    "freshness",
    "alpha",
    "lambda",
    "evaluations",
    "votes",
    "last_event_at",
];

/// Whether `answer` is a project's answer whose score is `published`.
fn answers_score(answer: &Answer, published: &Value) -> bool {
    let Ok(got) = serde_json::from_str::<Value>(&answer.body) else {
        return false;
    };
    answer.status == 200 && SCORE_FIELDS.iter().all(|f| got["score"][f] == published[f])
}

fn json(answer: &Answer) -> Value {
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/json"),
        "{answer:?}"
    );
    serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{e}: {}", answer.body))
}

/// Every answer of `services` about `projects` equals what `expect` holds.
fn assert_answers(services: &[&Service], projects: &[String], expect: &Published) -> usize {
    let mut redirects = 0;
    let consensus: Vec<Value> = expect
        .consensus
        .iter()
        .map(|c| serde_json::from_str(c).expect("json"))
        .collect();
    for (i, project) in projects.iter().enumerate() {
        // Ask a different instance each time: some questions are redirected.
        let service = services[i % services.len()];
        let published: Value =
            serde_json::from_str(&expect.scores[project.as_str()]).expect("json");
        let path = format!("/v1/projects/{project}");
        let (answer, redirected) =
            ask_until(services, service, &path, |a| answers_score(a, &published));
        redirects += usize::from(redirected);
        assert_eq!(answer.status, 200, "{answer:?}");
        let got = json(&answer);
        for field in SCORE_FIELDS {
            assert_eq!(
                got["score"][field], published[field],
                "{project} {field}: {got}"
            );
        }
        assert_eq!(got["restoring"], false);
        // Every session of the stream completed; each one's answer is its consensus record.
        for c in consensus
            .iter()
            .filter(|c| c["project_id"] == *project.as_str())
        {
            let session = c["session_id"].as_str().expect("a session id");
            let path = format!("/v1/projects/{project}/sessions/{session}");
            let (answer, _) = ask_until(services, service, &path, |a| {
                serde_json::from_str::<Value>(&a.body).is_ok_and(|v| v["consensus"] == *c)
            });
            assert_eq!(answer.status, 200, "{path}: {answer:?}");
            let got = json(&answer);
            assert_eq!(got["state"], "completed");
            assert_eq!(&got["consensus"], c, "{path}");
        }
        let expected: BTreeSet<String> = expect
            .leaderboard
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{project}/")))
            .map(|(_, v)| serde_json::from_str::<Value>(v).expect("json").to_string())
            .collect();
        let rows_of = |a: &Answer| -> Option<BTreeSet<String>> {
            let v: Value = serde_json::from_str(&a.body).ok()?;
            Some(v["rows"].as_array()?.iter().map(Value::to_string).collect())
        };
        let path = format!("/v1/leaderboard?project_id={project}");
        let (answer, _) = ask_until(services, service, &path, |a| {
            rows_of(a).is_some_and(|rows| rows == expected)
        });
        assert_eq!(answer.status, 200, "{answer:?}");
        let rows = rows_of(&answer).expect("rows");
        assert_eq!(rows, expected, "{project}");
    }
    redirects
}

/// Every page of `GET /v1/projects?limit=<limit>` asked of the instance on `port` (with the
/// header lines `extra`), following `next`: the ids listed, in order, and the last page.
fn list(port: u16, limit: usize, extra: &str) -> (Vec<String>, Value) {
    let mut ids = Vec::new();
    let mut after = String::new();
    for _ in 0..100 {
        let path = format!("/v1/projects?limit={limit}{after}");
        let answer = http_answer_with(port, &path, extra).expect("an answer");
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
        let page = json(&answer);
        let listed = page["projects"].as_array().expect("projects");
        assert!(listed.len() <= limit, "{page}");
        ids.extend(
            listed
                .iter()
                .map(|p| p["project_id"].as_str().expect("an id").to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return (ids, page),
        }
    }
    panic!("no last page");
}

#[test]
fn two_instances_answer_for_every_project_as_the_topics_say_and_after_a_handover() {
    let broker = Broker::shared();
    let prefix = "query";
    let shape = Shape {
        partitions: 3,
        projects: 8,
        batches_per_project: 6,
        sessions_per_project: 4,
    };
    let Setup {
        dir,
        config,
        records,
    } = setup(&broker.bootstrap, prefix, &shape, free_port(), "");
    produce(&broker.bootstrap, &records);
    let a = start_instance(dir.path(), "a", prefix, &broker.bootstrap, &[]);
    let b = start_instance(dir.path(), "b", prefix, &broker.bootstrap, &[]);
    support::assert_caught_up(&[&a, &b], &records, Duration::from_secs(180));
    let expect = replayed(&config, &records);
    let projects: Vec<String> = expect.scores.keys().cloned().collect();
    assert_eq!(projects.len(), shape.projects);
    let redirects = assert_answers(&[&a, &b], &projects, &expect);
    assert!(redirects > 0, "both instances own projects");

    // Each instance lists its own projects and names the other for the rest: together, every
    // project once, each listing in order.
    let (listed_a, last_a) = list(a.http_port, 3, "");
    let (listed_b, last_b) = list(b.http_port, 3, "");
    for (listed, last, other) in [(&listed_a, &last_a, &b), (&listed_b, &last_b, &a)] {
        assert!(listed.is_sorted(), "{listed:?}");
        assert_eq!(last["complete"], false, "{last}");
        let url = format!("http://127.0.0.1:{}", other.http_port);
        assert_eq!(last["elsewhere"][0]["url"], url.as_str(), "{last}");
    }
    let mut together: Vec<String> = listed_a.iter().chain(&listed_b).cloned().collect();
    together.sort();
    assert_eq!(together, projects);

    // Malformed and unknown ids.
    let long = "p".repeat(300);
    for (path, status) in [
        (format!("/v1/projects/{long}"), 400),
        ("/v1/leaderboard".to_owned(), 400),
        (format!("/v1/projects/{}/sessions/none", projects[0]), 404),
    ] {
        let (answer, _) = ask_settled(&[&a, &b], &a, &path);
        assert_eq!(answer.status, status, "{path}: {answer:?}");
        assert!(json(&answer)["error"].is_string(), "{answer:?}");
    }
    let unknown = (0..).map(|i| format!("nobody-{i}")).find(|p| {
        ask_settled(&[&a, &b], &a, &format!("/v1/projects/{p}"))
            .0
            .status
            == 404
    });
    assert!(unknown.is_some());
    // Every answer is counted by route and status, on the instance that gave it.
    let counted = |status: &str| {
        [&a, &b]
            .iter()
            .map(|s| {
                support::metric_sum(
                    &s.metrics(),
                    &format!(
                        "jurystream_queries_total{{endpoint=\"/v1/projects/{{project_id}}\",status=\"{status}\"}}"
                    ),
                )
            })
            .sum::<u64>()
    };
    assert!(counted("200") >= projects.len() as u64);
    assert!(counted("307") >= redirects as u64);

    // b stops; a takes its partitions, restores their state and answers for all of them.
    assert!(b.terminate().success());
    for p in &projects {
        let path = format!("/v1/projects/{p}");
        let deadline = Instant::now() + Duration::from_secs(90);
        // Until a owns the partition (b's announcement is stale until then: a 307 to an
        // instance that is gone) and has restored it.
        while Instant::now() < deadline {
            let answer = http_answer(a.http_port, &path).expect("an answer");
            let restoring = serde_json::from_str::<Value>(&answer.body)
                .is_ok_and(|v| v["restoring"] == Value::Bool(true));
            if answer.status == 200 && !restoring {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // The state a restored: the same scores (with the last step's alpha), completed sessions
    // and leaderboard rows.
    assert_eq!(assert_answers(&[&a], &projects, &expect), 0);
    assert!(a.terminate().success());
}

/// As deployed in containers: both instances listen on every interface (`0.0.0.0`) without
/// `http.advertised_url`, so each advertises its host name's address; with
/// `http.proxy_queries` and a bearer token each answers for the other's projects itself, through
/// the URL the other advertised. Without the token, `401`.
#[test]
fn instances_bound_to_every_interface_answer_for_each_other_through_their_advertised_urls() {
    let broker = Broker::shared();
    let prefix = "query-any";
    let shape = Shape {
        partitions: 3,
        projects: 6,
        batches_per_project: 3,
        sessions_per_project: 1,
    };
    let Setup {
        dir,
        config,
        records,
    } = setup(&broker.bootstrap, prefix, &shape, free_port(), "");
    produce(&broker.bootstrap, &records);
    let start = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).expect("dir");
        let port = free_port();
        let config = support::write_test_config(&d, prefix, &broker.bootstrap, port, "");
        let bind = format!("0.0.0.0:{port}");
        let service = Service::start_with(
            &config,
            d.join("service.log"),
            &[
                ("JURYSTREAM_HTTP__BIND", bind.as_str()),
                ("JURYSTREAM_HTTP__PROXY_QUERIES", "true"),
                ("JURYSTREAM_API_TOKENS", "t0ken"),
            ],
        );
        assert!(
            service.wait_ready(Duration::from_secs(60)),
            "{}",
            service.log_text()
        );
        service
    };
    let (a, b) = (start("a"), start("b"));
    support::assert_caught_up(&[&a, &b], &records, Duration::from_secs(180));
    let expect = replayed(&config, &records);
    let token = "Authorization: Bearer t0ken\r\n";
    for project in expect.scores.keys() {
        let path = format!("/v1/projects/{project}");
        for service in [&a, &b] {
            let published: Value =
                serde_json::from_str(&expect.scores[project.as_str()]).expect("json");
            let deadline = Instant::now() + Duration::from_secs(60);
            let answer = loop {
                let answer = http_answer_with(service.http_port, &path, token).expect("an answer");
                if answers_score(&answer, &published) || Instant::now() > deadline {
                    break answer;
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            assert_eq!(answer.status, 200, "{path}: {answer:?}");
            let got = json(&answer);
            assert_eq!(got["score"]["score"], published["score"], "{path}");
            let denied = http_answer(service.http_port, &path).expect("an answer");
            assert_eq!(denied.status, 401, "{denied:?}");
            assert!(json(&denied)["error"].is_string());
        }
    }
    // Each gathers the other's pages: the whole group's projects, in order, a page at a time.
    for service in [&a, &b] {
        let (listed, last) = list(service.http_port, 4, token);
        assert_eq!(listed, expect.scores.keys().cloned().collect::<Vec<_>>());
        assert_eq!(last["complete"], true, "{last}");
    }
    // Every instance advertised a distinct, reachable URL: no conflict was seen.
    for service in [&a, &b] {
        assert_eq!(
            support::metric_sum(
                &service.metrics(),
                "jurystream_advertised_url_conflicts_total"
            ),
            0
        );
        assert!(service.log_text().contains("advertising queries"));
    }
    // The metrics and probes stay open.
    assert!(support::http_get(a.http_port, "/readyz").is_some_and(|b| b.starts_with("ready")));
    // b leaves and c, misconfigured with a's URL, takes its partition and announces it: a
    // reports the conflict.
    assert!(b.terminate().success());
    let d = dir.path().join("c");
    std::fs::create_dir_all(&d).expect("dir");
    let c_config = support::write_test_config(&d, prefix, &broker.bootstrap, free_port(), "");
    let a_url = format!("http://127.0.0.1:{}", a.http_port);
    let c = Service::start_with(
        &c_config,
        d.join("service.log"),
        &[("JURYSTREAM_HTTP__ADVERTISED_URL", a_url.as_str())],
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    let conflicts =
        || support::metric_sum(&a.metrics(), "jurystream_advertised_url_conflicts_total");
    while conflicts() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(conflicts() > 0, "{}\n{}", a.log_text(), c.log_text());
    assert!(
        a.log_text()
            .contains("another instance advertises this instance's URL")
    );
    assert!(c.terminate().success());
    assert!(a.terminate().success());
}

/// The demo stack's producer (`deploy/compose/producer.py`, as `deploy/compose.yaml` runs it)
/// feeds a service reading the default topics: a few rounds of the demo later, the listing
/// names both of the demo's projects with a score counting votes of more than one round, and
/// the demo's malformed records are dead letters.
#[test]
fn the_demo_stacks_producer_feeds_a_service_whose_listing_shows_its_projects() {
    let broker = Broker::shared();
    let dir = tempfile::tempdir().expect("dir");
    let port = free_port();
    // The prefix "jury" gives the default topic names, which the demo's records name.
    let config = support::write_test_config(dir.path(), "jury", &broker.bootstrap, port, "");
    let service = Service::start_ready(&config, dir.path().join("s.log"));
    let mut producer = std::process::Command::new(".venv/bin/python")
        .args(["-u", "deploy/compose/producer.py"])
        .env("BOOTSTRAP_SERVERS", &broker.bootstrap)
        .env("DEMO_FILE", "examples/demo.jsonl")
        .env("PRODUCER_INTERVAL", "0.02")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect(".venv/bin/python (scripts/install-python.sh)");
    // One round of the demo gives proj-42 seven votes and proj-7 four (examples/demo.expected.jsonl):
    // more means a later round counted too.
    let shows_rounds = |page: &Value| {
        let listed = page["projects"].as_array().cloned().unwrap_or_default();
        let votes = |id: &str| {
            listed
                .iter()
                .find(|p| p["project_id"] == id && p["score"].is_number())
                .and_then(|p| p["votes"].as_u64())
                .unwrap_or(0)
        };
        votes("proj-42") > 7 && votes("proj-7") > 4
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut page = Value::Null;
    while Instant::now() < deadline && !shows_rounds(&page) {
        std::thread::sleep(Duration::from_millis(500));
        page = support::http_get(port, "/v1/projects")
            .and_then(|body| serde_json::from_str(&body).ok())
            .unwrap_or(Value::Null);
    }
    let _ = producer.kill();
    let _ = producer.wait();
    assert!(shows_rounds(&page), "{page}\n{}", service.log_text());
    assert_eq!(page["complete"], true, "{page}");
    let metrics = service.metrics();
    assert!(
        support::metric_sum(
            &metrics,
            "jurystream_dead_letters_total{error=\"invalid_json\",topic=\"jury.votes\"}"
        ) > 0,
        "{metrics}"
    );
    assert!(service.terminate().success());
}
