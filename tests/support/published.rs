//! What a run published, read back from the broker, and what replay publishes for the same
//! records: the comparison every Kafka test ends with.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jurystream::config::Config;
use jurystream::engine::Engine;
use jurystream::topics::TopicTable;

use super::stream;
use super::{Rec, read_all, topics};

/// A record's key and value as text.
pub type KeyValue = (Option<String>, Option<String>);

/// What a run published: tables (latest value per key) and event topics (distinct records).
#[derive(Debug, PartialEq)]
pub struct Published {
    pub scores: BTreeMap<String, String>,
    pub leaderboard: BTreeMap<String, String>,
    pub judge_quality: BTreeMap<String, String>,
    pub reviewer_quality: BTreeMap<String, String>,
    pub consensus: BTreeSet<String>,
    pub review_requests: BTreeSet<String>,
    pub alerts: BTreeSet<String>,
    pub dead_letters: BTreeSet<String>,
}

pub fn table(records: &[KeyValue]) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    for (k, v) in records {
        if let (Some(k), Some(v)) = (k, v) {
            t.insert(k.clone(), v.clone());
        }
    }
    t
}

pub fn set(records: &[KeyValue]) -> BTreeSet<String> {
    records.iter().filter_map(|(_, v)| v.clone()).collect()
}

/// What replay publishes for the same records and configuration.
pub fn replayed(config_path: &std::path::Path, records: &[Rec]) -> Published {
    replayed_lines(config_path, &stream::replay_lines(records))
}

/// What replay publishes for the replay file `lines` and the configuration at `config_path`.
pub fn replayed_lines(config_path: &std::path::Path, lines: &str) -> Published {
    let text = std::fs::read_to_string(config_path).expect("config");
    let config = Config::from_toml(&text).expect("valid config");
    let (engine, topics) = (
        Engine::new(config.engine_settings()),
        TopicTable::new(&config.topics, &config.kafka.group_id),
    );
    let mut out = Vec::new();
    jurystream::replay::replay(&engine, &topics, lines.as_bytes(), &mut out).expect("replay");
    let mut by_topic: BTreeMap<String, Vec<KeyValue>> = BTreeMap::new();
    for line in String::from_utf8(out).expect("utf8").lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        let topic = v["topic"].as_str().unwrap_or_default().to_owned();
        let key = v["key"].as_str().map(str::to_owned);
        by_topic
            .entry(topic)
            .or_default()
            .push((key, Some(v["value"].to_string())));
    }
    let get = |suffix: &str| {
        by_topic
            .iter()
            .find(|(t, _)| t.ends_with(suffix))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    Published {
        scores: table(&get(".scores")),
        leaderboard: table(&get(".leaderboard")),
        judge_quality: table(&get(".judge-quality")),
        reviewer_quality: table(&get(".reviewer-quality")),
        consensus: set(&get(".consensus")),
        review_requests: set(&get(".review-requests")),
        alerts: set(&get(".bias-alerts")),
        dead_letters: set(&get(".dead-letters")),
    }
}

/// Reads what the service published (JSON re-rendered like replay's, so bytes compare).
pub fn published(bootstrap: &str, prefix: &str, expect: &Published) -> Published {
    let t = topics(prefix);
    let normalize =
        |rs: Vec<(Option<String>, Option<String>)>| -> Vec<(Option<String>, Option<String>)> {
            rs.into_iter()
                .map(|(k, v)| {
                    (
                        k,
                        v.map(|v| {
                            serde_json::from_str::<serde_json::Value>(&v)
                                .map(|j| j.to_string())
                                .unwrap_or(v)
                        }),
                    )
                })
                .collect()
        };
    let read = |key: &str, min: usize| {
        normalize(read_all(bootstrap, &t[key], min, Duration::from_secs(30)))
    };
    Published {
        scores: table(&read("scores", expect.scores.len())),
        leaderboard: table(&read("leaderboard", expect.leaderboard.len())),
        judge_quality: table(&read("judge_quality", expect.judge_quality.len())),
        reviewer_quality: table(&read("reviewer_quality", expect.reviewer_quality.len())),
        consensus: set(&read("consensus", expect.consensus.len())),
        review_requests: set(&read("review_requests", expect.review_requests.len())),
        alerts: set(&read("bias_alerts", expect.alerts.len())),
        dead_letters: set(&read("dead_letters", expect.dead_letters.len())),
    }
}

/// The keys of two tables whose values differ, with both values: a readable failure.
pub fn table_diff(actual: &BTreeMap<String, String>, expect: &BTreeMap<String, String>) -> String {
    let keys: BTreeSet<&String> = actual.keys().chain(expect.keys()).collect();
    keys.into_iter()
        .filter(|k| actual.get(*k) != expect.get(*k))
        .map(|k| {
            format!(
                "{k}:\n  got      {:?}\n  expected {:?}\n",
                actual.get(k),
                expect.get(k)
            )
        })
        .collect()
}

pub fn assert_same(actual: &Published, expect: &Published) {
    for (name, a, e) in [
        ("jury.scores", &actual.scores, &expect.scores),
        ("jury.leaderboard", &actual.leaderboard, &expect.leaderboard),
        (
            "jury.judge-quality",
            &actual.judge_quality,
            &expect.judge_quality,
        ),
        (
            "jury.reviewer-quality",
            &actual.reviewer_quality,
            &expect.reviewer_quality,
        ),
    ] {
        assert!(a == e, "final {name} table differs:\n{}", table_diff(a, e));
    }
    for (name, a, e) in [
        ("jury.consensus", &actual.consensus, &expect.consensus),
        ("jury.bias-alerts", &actual.alerts, &expect.alerts),
        (
            "jury.review-requests",
            &actual.review_requests,
            &expect.review_requests,
        ),
        (
            "jury.dead-letters",
            &actual.dead_letters,
            &expect.dead_letters,
        ),
    ] {
        assert!(
            a == e,
            "{name} records differ:\nonly published: {:#?}\nonly replayed: {:#?}",
            a.difference(e).collect::<Vec<_>>(),
            e.difference(a).collect::<Vec<_>>()
        );
    }
    assert_eq!(actual.scores, expect.scores, "final jury.scores table");
    assert_eq!(
        actual.leaderboard, expect.leaderboard,
        "final jury.leaderboard table"
    );
    assert_eq!(actual.consensus, expect.consensus, "jury.consensus records");
    assert_eq!(actual.alerts, expect.alerts, "jury.bias-alerts records");
    assert_eq!(
        actual.dead_letters, expect.dead_letters,
        "jury.dead-letters records"
    );
}
