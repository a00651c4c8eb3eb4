//! Core benchmarks: the HumanJudge update on pre-parsed batches, the whole
//! parse + validate + apply path on ~200-byte events, and the service's per-epoch core work
//! (journaled state, full dedupe windows, changelog rendering). Run: `cargo bench --bench engine`.

#[path = "peers/event.rs"]
mod peers;

use criterion::measurement::WallTime;
use criterion::{
    BatchSize, BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main,
};
use std::hint::black_box;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jurystream::changelog::{self, Unit};

use jurystream::config::Config;
use jurystream::engine::contract::judge::{BallotEvent, CandidateMeta, Status};
use jurystream::engine::contract::time::EventTime;
use jurystream::engine::ids::ProjectKey;
use jurystream::engine::ids::Projects;
use jurystream::engine::model::bias::{audit_session, session_alerts};
use jurystream::engine::model::consensus::{analyze, interpretation};
use jurystream::engine::model::effective_judges::{CandidateScores, effective_judges};
use jurystream::engine::model::judge_quality::{ItemVotes, ProjectQuality, TaskQuality};
use jurystream::engine::model::leaderboard::{BlockId, Ranking};
use jurystream::engine::model::reviewers::{Review, Verdict};
use jurystream::engine::model::session::Session;
use jurystream::engine::output::Output;
use jurystream::engine::reputation::ReputationTable;
use jurystream::engine::{Engine, InputTopic, PartitionState, Record, Settings};
use jurystream::queries::view::View;

/// The service's allocator, so the benchmarks allocate as the service does (with glibc's, its
/// bookkeeping was a tenth of the `epoch` benchmarks' time).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// The HumanJudge update of single-vote batches read ahead ([`Engine::prepare_votes`], outside
/// the timing): what the service's processing thread does per vote record while its queue is
/// deep.
fn bench_process_read_ahead(c: &mut Criterion) {
    let engine = Engine::new(Settings::default());
    let mut reps = ReputationTable::default();
    let payloads: Vec<String> = (0..EVENTS)
        .map(|i| {
            format!(
                r#"{{"event_id":"ev-{i:08}","project_id":"proj-{:04}","occurred_at":{},"votes":[{{"voter_id":"u-7","value":{},"reputation":0.9}}]}}"#,
                i % PROJECTS,
                1_795_168_807_250 + i as i64 * 250,
                i % 2
            )
        })
        .collect();
    let prepared: Vec<_> = payloads
        .iter()
        .map(|p| {
            let record = vote_record(p);
            let votes = engine.prepare_votes(&record).expect("a valid batch");
            (record, votes)
        })
        .collect();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function("process_read_ahead_single_vote_batches", |b| {
        b.iter_batched_ref(
            || (PartitionState::default(), Vec::<Output>::with_capacity(4)),
            |(state, out)| {
                for (record, votes) in &prepared {
                    out.clear();
                    let record = record.read_ahead(Some(votes));
                    black_box(engine.process(state, &mut reps, &record, out));
                }
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn bench_parse_validate_apply(c: &mut Criterion) {
    let engine = Engine::new(Settings::default());
    let mut reps = ReputationTable::default();
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
                        let record = vote_record(p).at(None, Some(i as i64));
                        black_box(engine.process(state, &mut reps, &record, out));
                    }
                },
                BatchSize::LargeInput,
            )
        },
    );
    group.finish();
}

/// Events per epoch in [`bench_journaled_epoch`]: 100 ms (the default cycle) at 500,000
/// events/s, about what the load benchmark's service reaches with 10,000 projects, so a busy
/// project changes several times per epoch, as it does there.
const EPOCH: usize = 50_000;

/// The states the per-epoch benchmarks run on, as (projects, dedupe window): one project with
/// the default window of 100,000 ids, and 10,000 projects with windows of 100 (what the load
/// benchmark's million events leave each of its projects).
/// Projects, their dedupe window, whether judge quality is on, and whether reviewer
/// reliability is: the load benchmark's stream names a new item with every vote, judge
/// quality's and reviewer reliability's worst case.
const FULL_WINDOWS: [(usize, usize, bool, bool); 6] = [
    (1, 100_000, false, false),
    (10_000, 100, false, false),
    (1, 100_000, true, false),
    (1, 100_000, true, true),
    (10_000, 100, true, false),
    (10_000, 100, true, true),
];

/// An engine whose dedupe windows hold `window` ids, with judge quality and reviewer
/// reliability on or off.
fn engine_with_window(window: usize, judged: bool, reviewers: bool) -> Engine {
    let mut config = Config::default();
    config.limits.dedupe_window = window;
    config.judge_quality.enabled = judged;
    config.reviewers.enabled = reviewers;
    Engine::new(config.engine_settings())
}

/// A benchmark group whose samples are each [`EPOCH`] events, 20 of them (an epoch is tens of
/// milliseconds).
fn epoch_group<'c>(c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(EPOCH as u64));
    group.sample_size(20);
    group
}

/// What the service's processing thread does per epoch, minus Kafka: parse, validate and apply
/// [`EPOCH`] events to a journaled partition state over 100 ms of its clock (so scores are
/// coalesced as the service's default does), render the scores it emits, then release the held
/// scores and render the epoch's changelog records.
/// The state is warmed first with 20 epochs (a million events), so every dedupe window is full
/// and every event also evicts an id: one project's default window of 100,000 ids, and with
/// 10,000 projects windows of 100 (what the load benchmark's million events leave each of its
/// 10,000 projects). Full windows keep the state the same size from one sample to the next;
/// growing windows made the samples slower as the run went on, and too noisy to rank changes.
fn bench_journaled_epoch(c: &mut Criterion) {
    let mut reps = ReputationTable::default();
    let unit = Unit::projects(0);
    let mut group = epoch_group(c, "epoch");
    for (projects, window, judged, reviewers) in FULL_WINDOWS {
        let engine = engine_with_window(window, judged, reviewers);
        let mut state = PartitionState::journaled();
        let mut out = Vec::<Output>::with_capacity(4);
        let mut next = 0;
        // One renderer and one buffer for every epoch, as in the service.
        let (mut renderer, mut records) = (
            changelog::Renderer::default(),
            changelog::Records::default(),
        );
        let mut epochs = 0;
        let mut apply = |state: &mut PartitionState, payloads: &[String]| {
            // An epoch is 100 ms of the service's clock, its events spread evenly over it.
            let clock_at = |i: usize| epochs * 100 + (i * 100 / payloads.len()) as u64;
            for (i, p) in payloads.iter().enumerate() {
                out.clear();
                let record = vote_record(p)
                    .at(None, Some(next))
                    .received(Some(clock_at(i)), 0);
                next += 1;
                black_box(engine.process(state, &mut reps, &record, &mut out));
                for o in &out {
                    black_box(o.render());
                }
            }
            epochs += 1;
            out.clear();
            engine.release_held(state, &mut out);
            // Every epoch, as `output.reviewers_coalesce_ms = 0` would: the most it costs.
            engine.release_reviewers(state, &mut out);
            for o in &out {
                black_box(o.render());
            }
            let changes = state.journal.as_mut().map(std::mem::take);
            records.clear();
            renderer.render(
                unit,
                state,
                &changes.unwrap_or_default(),
                Some(next - 1),
                &mut records,
            );
            black_box(records.len());
        };
        let mut made = 0;
        let mut make = |n: usize| -> Vec<String> {
            made += n;
            (made - n..made)
                .map(|i| peers::event(i, projects))
                .collect()
        };
        for _ in 0..20 {
            apply(&mut state, &make(EPOCH));
        }
        let name = match (judged, reviewers) {
            (false, _) => format!("journaled_{projects}_projects"),
            (true, false) => format!("journaled_{projects}_projects_judged"),
            (true, true) => format!("journaled_{projects}_projects_judged_reviewed"),
        };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let payloads = make(EPOCH);
                    let started = Instant::now();
                    apply(&mut state, &payloads);
                    took += started.elapsed();
                }
                took
            })
        });
    }
    group.finish();
}

/// A 5-judge x 5-candidate session with metadata, as `Session::add` builds it.
pub fn five_by_five() -> Session {
    let mut s = Session {
        seq: 0,
        last_activity: EventTime::from_epoch_millis(0).unwrap(),
        ballots: BTreeMap::new(),
        candidates: BTreeMap::new(),
        expected_judges: Some(5),
        category: Some("coding".into()),
        idle_since: None,
    };
    let candidates: BTreeMap<String, CandidateMeta> = (0..5)
        .map(|c| {
            let meta = CandidateMeta {
                author: Some(format!("model-{c}")),
                words: Some(100.0 + 50.0 * c as f64),
                position: Some(c as u64),
            };
            (format!("resp-{c}"), meta)
        })
        .collect();
    for j in 0..5 {
        let scores = (0..5)
            .map(|c| (format!("resp-{c}"), ((j * 7 + c * 3) % 10) as f64 / 10.0))
            .collect();
        let ballot = BallotEvent {
            judge: &format!("model-{j}"),
            status: Status::Ok,
            scores,
            ranking: None,
            candidates: candidates.clone(),
            expected_judges: Some(5),
            category: Some("coding"),
        };
        s.add(
            &ballot,
            EventTime::from_epoch_millis(j as i64 * 1000).unwrap(),
        );
    }
    s
}

fn bench_complete_session(c: &mut Criterion) {
    let config = Config::default();
    let session = five_by_five();
    let mut group = c.benchmark_group("sessions");
    group.throughput(Throughput::Elements(1));
    group.bench_function("complete_5_judges_x_5_candidates_with_bias_audit", |b| {
        b.iter(|| {
            let a = analyze(black_box(&session), &config.sessions);
            let audit = audit_session(&a, &config.bias);
            let alerts = session_alerts("proj", "sess", &a, &audit, &config.bias);
            black_box((interpretation(&a), alerts.len()))
        })
    });
    group.finish();
}

/// A Bradley-Terry refit of a full 30-day window (31 days of 16 blocks, 200 sessions a day
/// of four candidates): what a category costs each time it is due. `random` draws the
/// candidates' models and ranks; `chain` has each model beat the next 20 times and lose to it
/// once, ratings spread over thousands of points, where minorisation-maximisation crawled.
fn bench_bradley_terry(c: &mut Criterion) {
    let mut group = c.benchmark_group("bradley_terry");
    group.sample_size(10);
    let at = EventTime::from_epoch_millis(0).unwrap();
    for models in [10usize, 50] {
        let names: Vec<String> = (0..models).map(|i| format!("model-{i}")).collect();
        let mut random = Ranking::default();
        let mut x = 1u64;
        for day in 0..31 {
            for s in 0..200u64 {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let ranks: Vec<(String, usize)> = (0..4)
                    .map(|j| {
                        let model = ((x >> (8 * j)) as usize) % models;
                        (names[model].clone(), ((x >> (3 + 8 * j)) % 4) as usize)
                    })
                    .collect();
                let block = BlockId {
                    day,
                    slot: (s % 16) as u8,
                };
                random.add(block, &ranks, models);
            }
        }
        let mut chain = Ranking::default();
        for i in 0..models - 1 {
            let (a, b) = (names[i].clone(), names[i + 1].clone());
            for s in 0..20u8 {
                let block = BlockId {
                    day: 0,
                    slot: s % 16,
                };
                chain.add(block, &[(a.clone(), 1), (b.clone(), 2)], models);
            }
            chain.add(BlockId { day: 1, slot: 0 }, &[(b, 1), (a, 2)], models);
        }
        for (name, ranking) in [("random", random), ("chain", chain)] {
            group.bench_function(format!("refit_{models}_models_{name}_200_rounds"), |b| {
                let mut r = ranking.clone();
                b.iter(|| r.fit(at, 200))
            });
        }
    }
    group.finish();
}

/// A `jury.votes` record of partition 0 carrying `payload`, with no offset (nothing is
/// skipped) and no clock (nothing is coalesced); benchmarks that need them set them.
fn vote_record(payload: &str) -> Record<'_> {
    Record::new(
        "jury.votes",
        Some(InputTopic::Votes),
        Some(payload.as_bytes()),
    )
    .at(Some(0), None)
}

/// What the service's polling thread does per vote record: read, validate and locate the
/// batch in the payload ([`Engine::prepare_votes`]), on the load benchmark's events.
fn bench_prepare_votes(c: &mut Criterion) {
    let engine = Engine::new(Settings::default());
    let payloads: Vec<String> = (0..EVENTS).map(|i| peers::event(i, 10_000)).collect();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function("prepare_votes", |b| {
        b.iter(|| {
            for p in &payloads {
                black_box(engine.prepare_votes(&vote_record(p)));
            }
        })
    });
    group.finish();
}

/// The effective number of judges of a completed session at `sessions.max_judges` (100
/// judges scoring each candidate) over a full `judge_quality.window` (500 candidates): one
/// candidate joins the window, the oldest leaves, and the number is evaluated. `direct`
/// recomputes every judge pair over the window, as the service did before the running sums.
fn bench_effective_judges(c: &mut Criterion) {
    let mut group = c.benchmark_group("effective_judges");
    group.sample_size(10);
    let judges: Vec<String> = (0..100).map(|j| format!("judge-{j}")).collect();
    let names: Vec<&str> = judges.iter().map(String::as_str).collect();
    let mut x = 7u64;
    let mut candidate = || -> CandidateScores {
        judges
            .iter()
            .map(|j| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (j.clone(), (x >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect()
    };
    let mut quality = ProjectQuality::default();
    for _ in 0..500 {
        quality.remember(vec![candidate()], 500);
    }
    let next = candidate();
    group.bench_function("session_100_judges_window_500_running", |b| {
        b.iter_batched(
            || (quality.clone(), next.clone()),
            |(mut q, c)| {
                q.remember(vec![c], 500);
                black_box(q.effective_judges(&names, 10))
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("session_100_judges_window_500_direct", |b| {
        b.iter(|| {
            let scores: Vec<Vec<Option<f64>>> = names
                .iter()
                .map(|j| {
                    quality
                        .recent
                        .values()
                        .map(|c| c.iter().find(|(x, _)| x == j).map(|(_, s)| *s))
                        .collect()
                })
                .collect();
            black_box(effective_judges(&scores, 10))
        })
    });
    group.finish();
}

/// A task holding one project `p` with `items` items, each with verdicts of `per_item` of
/// `reviewers` reviewers: all passes when `agreeing`, else a deterministic mix of passes and
/// fails.
fn reviewed_project(
    items: usize,
    per_item: usize,
    reviewers: usize,
    agreeing: bool,
) -> (Projects<ProjectQuality>, TaskQuality) {
    let mut projects: Projects<ProjectQuality> = Projects::default();
    let mut task = TaskQuality::default();
    let at = EventTime::from_epoch_millis(1_795_168_800_000).expect("a valid time");
    for i in 0..items {
        let mut review = Review::default();
        for k in 0..per_item {
            let j = (i * 7 + k * 3) % reviewers;
            let reviewer = ProjectKey::from(format!("u-{j:04}"));
            if review.verdicts.iter().any(|v| v.reviewer == reviewer) {
                continue;
            }
            review.verdicts.push(Verdict {
                reviewer,
                pass: agreeing || (i * 31 + j * 17) % 10 < 7,
                weight: 1.0,
                at,
            });
        }
        review.verdicts.sort_by(|a, b| a.reviewer.cmp(&b.reviewer));
        let votes = ItemVotes {
            review,
            ..ItemVotes::default()
        };
        let item = format!("item-{i}");
        task.restore_item(&mut projects, ("p", &item), i as u64, votes);
    }
    // As a restore does.
    if let Some(q) = projects.get_mut("p") {
        q.rebuild();
    }
    (projects, task)
}

/// The reviewer model's fit of one project's held verdicts, read from its items, as a
/// checkpoint and a release run it. A project of the peers benchmark (30 items, the same two
/// reviewers passing each), two reviewers who disagree on some items (the EM then runs to its
/// iteration bound), a crowd (500 items, three verdicts each of 20 reviewers), and one project
/// holding a whole task's items at the default bound (16,666 items, two reviewers each), whose
/// checkpoints come every 8,192 verdicts.
fn bench_reviewer_fit(c: &mut Criterion) {
    let mut group = c.benchmark_group("reviewers");
    let projects = [
        ("30_items_2_reviewers_agreeing", 30, 2, 2, true),
        ("30_items_2_reviewers", 30, 2, 2, false),
        ("500_items_20_reviewers", 500, 3, 20, false),
        ("16666_items_2_reviewers", 16_666, 2, 2, false),
    ];
    for (name, items, per_item, reviewers, agreeing) in projects {
        let (projects, task) = reviewed_project(items, per_item, reviewers, agreeing);
        let q = &projects["p"];
        group.bench_function(format!("fit_{name}"), |b| {
            b.iter(|| black_box(q.fit_reviewers(&task, 10_000)))
        });
    }
    group.finish();
}

/// A page of `GET /v1/projects` on an instance holding a million projects (the default
/// `limits.max_projects`): a range of the view's ordered index, whatever the cursor.
fn bench_list_page(c: &mut Criterion) {
    const HELD: usize = 1_000_000;
    let engine = engine_with_window(10, false, false);
    let (mut state, mut reps, mut out) = (
        PartitionState::default(),
        ReputationTable::default(),
        Vec::new(),
    );
    for i in 0..HELD {
        let payload = peers::event(i, HELD);
        let record = vote_record(&payload).at(None, Some(i as i64));
        engine.process(&mut state, &mut reps, &record, &mut out);
        out.clear();
    }
    let view = View::default();
    view.restored(Unit::projects(0), &state, engine.settings());
    drop(state);
    let mut group = c.benchmark_group("queries");
    for (name, after) in [("first", None), ("middle", Some("proj-500000"))] {
        group.bench_function(format!("list_page_1000_of_a_million_{name}"), |b| {
            b.iter(|| view.page(after, 1000, |id, p| Some((id.len(), p.partition))))
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_list_page,
    bench_reviewer_fit,
    bench_prepare_votes,
    bench_process_read_ahead,
    bench_parse_validate_apply,
    bench_journaled_epoch,
    bench_complete_session,
    bench_bradley_terry,
    bench_effective_judges
);
criterion_main!(benches);
