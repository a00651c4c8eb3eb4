//! The peers corpus's vote event, as `benches/peers/corpus.py` writes it: shared by the Rust
//! benchmarks, through the core or the service.

/// Vote event `i` of a corpus over `projects` projects: a new item with two reviewers, about
/// 210 bytes, at the corpus's time for it.
pub fn event(i: usize, projects: usize) -> String {
    event_at(i, projects, 1_795_168_800_000 + i as i64)
}

/// [`event`] at `at_ms` (epoch milliseconds) instead: what the load benchmark sends at a fixed
/// rate, timed as it is sent.
pub fn event_at(i: usize, projects: usize, at_ms: i64) -> String {
    format!(
        r#"{{"event_id":"ev-{i:010}","project_id":"{}","occurred_at":{at_ms},"item_id":"trace-{i:08}","votes":[{{"voter_id":"u-{:04}","verdict":"pass","reputation":0.9}},{{"voter_id":"u-8","value":0.75}}]}}"#,
        project(i, projects),
        i % 1000
    )
}

/// The project of event `i` of a corpus over `projects` projects: its key on the input topic.
pub fn project(i: usize, projects: usize) -> String {
    format!("proj-{:06}", i % projects)
}
