//! The peers corpus's vote event, as `benches/peers/corpus.py` writes it: shared by the Rust
//! benchmarks that run the corpus through the core.

/// Vote event `i` of a corpus over `projects` projects: a new item with two reviewers, about
/// 210 bytes.
pub fn event(i: usize, projects: usize) -> String {
    format!(
        r#"{{"event_id":"ev-{i:010}","project_id":"proj-{:06}","occurred_at":{},"item_id":"trace-{i:08}","votes":[{{"voter_id":"u-{:04}","verdict":"pass","reputation":0.9}},{{"voter_id":"u-8","value":0.75}}]}}"#,
        i % projects,
        1_795_168_800_000 + i as i64,
        i % 1000
    )
}
