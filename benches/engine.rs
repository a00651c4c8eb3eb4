//! Core benchmarks: the HumanJudge update on pre-parsed batches, and the whole
//! parse + validate + apply path on ~200-byte events. Run: `cargo bench --bench engine`.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

use jurystream::config::Config;
use jurystream::engine::output::Output;
use jurystream::engine::reputation::ReputationTable;
use jurystream::engine::time::EventTime;
use jurystream::engine::vote::{Vote, VoteBatch};
use jurystream::engine::{Engine, PartitionState, Record};

const EVENTS: usize = 10_000;
const PROJECTS: usize = 100;

fn payloads() -> Vec<String> {
    (0..EVENTS)
        .map(|i| {
            format!(
                r#"{{"event_id":"ev-{i:08}","project_id":"proj-{:04}","occurred_at":"2026-11-20T10:{:02}:{:02}.250Z","item_id":"trace-{i}","votes":[{{"voter_id":"u-{}","verdict":"pass","reputation":0.9}},{{"voter_id":"u-8","value":0.75}}]}}"#,
                i % PROJECTS,
                (i / 60) % 60,
                i % 60,
                i % 1000
            )
        })
        .collect()
}

fn bench_apply_prepared(c: &mut Criterion) {
    let engine = Engine::new(Config::default());
    let reps = ReputationTable::default();
    let ids: Vec<(String, String)> = (0..EVENTS)
        .map(|i| (format!("ev-{i:08}"), format!("proj-{:04}", i % PROJECTS)))
        .collect();
    let batches: Vec<(VoteBatch, EventTime)> = ids
        .iter()
        .enumerate()
        .map(|(i, (event_id, project_id))| {
            let batch = VoteBatch {
                event_id,
                project_id,
                occurred_at: None,
                item_id: None,
                votes: vec![Vote {
                    voter_id: "u-7",
                    value: (i % 2) as f64,
                    reputation: Some(0.9),
                }],
            };
            (
                batch,
                EventTime::from_epoch_millis(1_795_168_807_250 + i as i64 * 250).unwrap(),
            )
        })
        .collect();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function("apply_prepared_single_vote_batches", |b| {
        b.iter_batched_ref(
            || (PartitionState::default(), Vec::<Output>::with_capacity(4)),
            |(state, out)| {
                for (batch, at) in &batches {
                    out.clear();
                    black_box(engine.apply_batch(state, &reps, batch, *at, out).ok());
                }
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn bench_parse_validate_apply(c: &mut Criterion) {
    let engine = Engine::new(Config::default());
    let reps = ReputationTable::default();
    let payloads = payloads();
    let mean_len = payloads.iter().map(String::len).sum::<usize>() / payloads.len();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function(
        format!("parse_validate_apply_{mean_len}_byte_events"),
        |b| {
            b.iter_batched_ref(
                || (PartitionState::default(), Vec::<Output>::with_capacity(4)),
                |(state, out)| {
                    for (i, p) in payloads.iter().enumerate() {
                        out.clear();
                        let record = Record {
                            topic: "jury.votes",
                            partition: Some(0),
                            offset: Some(i as i64),
                            key: None,
                            timestamp_ms: None,
                            payload: Some(p.as_bytes()),
                        };
                        black_box(engine.process(state, &reps, &record, out));
                    }
                },
                BatchSize::LargeInput,
            )
        },
    );
    group.finish();
}

criterion_group!(benches, bench_apply_prepared, bench_parse_validate_apply);
criterion_main!(benches);
