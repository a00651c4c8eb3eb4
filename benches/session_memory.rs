//! Memory of the state that grows with traffic: per open judge session (3 ballots of 5 scored
//! candidates each, with metadata), and per event id a vote project's dedupe window remembers
//! (`limits.dedupe_window`, the default 100,000 per project, which dominates a busy deployment's
//! memory), and per project in the interactive queries' view. They go through the engine and
//! report the heap bytes held. Run:
//! `cargo bench --bench session_memory`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use jurystream::changelog::Unit;
use jurystream::config::Config;
use jurystream::engine::model::record_bytes::json_bytes;
use jurystream::engine::output::Output;
use jurystream::engine::reputation::ReputationTable;
use jurystream::engine::{Engine, PartitionState, Record, Settings};
use jurystream::queries::view::View;
use jurystream::topics::TopicTable;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    projects();
    sessions();
    largest_session();
    dedupe_window();
    query_view();
    judge_quality();
    reviewers();
    bias_audit();
}

/// One project's sessions, each of one judge new to it (ids of 11 bytes), three times as many
/// as its audit follows (`bias.project_max_judges`): the heap bytes of the audit, measured by
/// cloning it.
fn bias_audit() {
    let followed = Config::default().bias.project_max_judges;
    let payloads = (0..3 * followed).map(|s| {
        format!(
            r#"{{"event_id":"e-{s}","project_id":"proj-1","session_id":"sess-{s}","occurred_at":{},"judge":"judge-{s:05}","scores":{{"a":7}},"candidates":{{"a":{{"author":"m-a","position":0}}}},"expected_judges":1}}"#,
            1_795_168_800_000 + s as i64
        )
    });
    let (state, _) = held_by("jury.judge-scores", payloads);
    let audit = &state.projects["proj-1"]
        .judges
        .as_ref()
        .expect("judged")
        .audit;
    assert_eq!(audit.judges_followed(), followed);
    let before = LIVE.load(Ordering::Relaxed);
    let copy = audit.clone();
    let held = LIVE.load(Ordering::Relaxed) - before;
    drop(copy);
    println!(
        "bias/project_audit_memory: a project's audit following {followed} judges (of {} seen) holds {held} bytes = {} bytes per judge",
        3 * followed,
        held / followed as isize
    );
}

/// Items' votes through the engine, one project, `items` batches each of one new item and
/// `voters(i)`'s pass votes, with reviewer reliability on or off: the heap bytes held.
fn held_by_items(items: usize, reviewers_on: bool, voters: impl Fn(usize) -> Vec<String>) -> isize {
    let mut settings = Settings {
        pairs_judges: true,
        ..Settings::default()
    };
    settings.limits.dedupe_window = 1;
    settings.reviewers.enabled = reviewers_on;
    let engine = Engine::new(settings);
    let mut reps = ReputationTable::default();
    let mut state = PartitionState::default();
    let mut out: Vec<Output> = Vec::new();
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..items {
        let votes: Vec<String> = voters(i)
            .iter()
            .map(|v| format!(r#"{{"voter_id":"{v}","verdict":"pass"}}"#))
            .collect();
        let payload = format!(
            r#"{{"event_id":"ev-{i:010}","project_id":"proj-1","item_id":"trace-{i:08}","occurred_at":{},"votes":[{}]}}"#,
            1_795_168_800_000 + i as i64,
            votes.join(",")
        );
        let r = record("jury.votes", i, &payload);
        out.clear();
        engine.process(&mut state, &mut reps, &r, &mut out);
    }
    // The reviewers' records are published once, as replay does at the end of its input: each
    // release fits the project again.
    out.clear();
    engine.release_reviewers(&mut state, &mut out);
    drop(out);
    let held = LIVE.load(Ordering::Relaxed) - before;
    drop(state);
    held
}

/// Reviewer reliability: what an item's verdicts add to its entry in judge quality's item
/// store (three reviewers of a fixed crowd on each item, on against off), and what a reviewer
/// costs (each item voted on by one fixed reviewer and one new one, against a crowd of two).
fn reviewers() {
    const ITEMS: usize = 10_000;
    let crowd = |n: usize| move |_: usize| (0..n).map(|k| format!("reviewer-{k:04}")).collect();
    let on = held_by_items(ITEMS, true, crowd(3));
    let off = held_by_items(ITEMS, false, crowd(3));
    println!(
        "reviewers/item_memory: an item with 3 verdicts holds {} bytes with reviewer reliability on, {} off: {} for its review",
        on / ITEMS as isize,
        off / ITEMS as isize,
        (on - off) / ITEMS as isize
    );
    let two = held_by_items(ITEMS, true, crowd(2));
    let new_each = held_by_items(ITEMS, true, |i| {
        vec!["reviewer-0000".to_owned(), format!("reviewer-{:06}", i + 1)]
    });
    println!(
        "reviewers/reviewer_memory: {ITEMS} reviewers hold {} bytes = {} bytes per reviewer",
        new_each - two,
        (new_each - two) / ITEMS as isize
    );
}

/// Judge quality in one project: items with votes (through the engine, as the project's state
/// applies them), judge scores waiting for votes, pairs in judges' windows and recent
/// candidates' scores (through the project's state, each kind on its own).
fn judge_quality() {
    use jurystream::engine::ids::Projects;
    use jurystream::engine::model::judge_quality::{
        Pair, ProjectQuality, QualityLimits, TaskQuality,
    };
    const ITEMS: usize = 10_000;
    // A dedupe window of one id, so the project's own state stays the size of one batch's.
    let mut settings = Settings {
        pairs_judges: true,
        ..Settings::default()
    };
    settings.limits.dedupe_window = 1;
    // The item alone: what reviewer reliability adds is measured by `reviewers`.
    settings.reviewers.enabled = false;
    let engine = Engine::new(settings);
    let mut reps = ReputationTable::default();
    let mut state = PartitionState::default();
    let mut out: Vec<Output> = Vec::new();
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..ITEMS {
        let payload = format!(
            r#"{{"event_id":"ev-{i:010}","project_id":"proj-1","item_id":"trace-{i:08}","occurred_at":{},"votes":[{{"voter_id":"u-1","value":0.75}}]}}"#,
            1_795_168_800_000 + i as i64
        );
        let r = record("jury.votes", i, &payload);
        out.clear();
        engine.process(&mut state, &mut reps, &r, &mut out);
    }
    drop(out);
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(state.quality.held(), (ITEMS, 0));
    println!(
        "judge_quality/item_memory: {ITEMS} items with votes hold {held} bytes = {} bytes per item",
        held / ITEMS as isize
    );
    let limits = QualityLimits {
        min_human_votes: 3,
        max_pending_items: ITEMS,
        window: ITEMS,
        max_judges: 100,
        max_task_items: ITEMS,
        max_waiting_bytes: usize::MAX,
        reviewers: None,
    };
    let at = jurystream::engine::contract::time::EventTime::from_epoch_millis(1_795_168_800_000)
        .expect("a valid time");
    let mut q = TaskQuality::default();
    let mut projects: Projects<ProjectQuality> = Projects::default();
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..ITEMS {
        let item = format!("trace-{i:08}");
        q.completed(
            &mut projects,
            ("proj-1", "sess-00001"),
            &[(item.as_str(), "judge-a", 0.5)],
            at,
            &limits,
        );
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(q.held(), (0, ITEMS));
    println!(
        "judge_quality/waiting_memory: {ITEMS} items with a judge score waiting hold {held} bytes = {} bytes per item",
        held / ITEMS as isize
    );
    let mut q = ProjectQuality::default();
    let pair = |i: usize| Pair {
        judge: "judge-a".into(),
        item: format!("trace-{i:08}"),
        session: "sess-00001".into(),
        s: 0.25,
        h: (i % 4) as f64 / 4.0,
        at,
    };
    // A window needs a first pair to exist; what grows with pairs is measured past it.
    q.add(&pair(0), &limits, &mut Vec::new());
    const PAIRS: usize = 500;
    let limits = QualityLimits {
        window: PAIRS,
        ..limits
    };
    let before = LIVE.load(Ordering::Relaxed);
    for i in 1..=PAIRS {
        q.add(&pair(i), &limits, &mut Vec::new());
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "judge_quality/pair_memory: a window of {PAIRS} pairs holds {held} bytes = {} bytes per pair",
        held / PAIRS as isize
    );
    let before = LIVE.load(Ordering::Relaxed);
    let candidates = (0..PAIRS)
        .map(|_| (0..3).map(|j| (format!("judge-{j}"), 0.5)).collect())
        .collect();
    q.remember(candidates, PAIRS);
    let held = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "judge_quality/recent_memory: {PAIRS} recent candidates of 3 judges hold {held} bytes = {} bytes per candidate",
        held / PAIRS as isize
    );
}

/// The interactive queries' view of 100,000 projects, each with the score its one vote batch
/// published: the bytes the view adds per project (on top of the state's).
fn query_view() {
    const PROJECTS: usize = 100_000;
    let engine = Engine::new(Settings::default());
    let mut reps = ReputationTable::default();
    let mut state = PartitionState::default();
    let mut scores: Vec<Output> = Vec::with_capacity(PROJECTS);
    for (i, payload) in one_batch_each(PROJECTS).enumerate() {
        let r = record("jury.votes", i, &payload);
        engine.process(&mut state, &mut reps, &r, &mut scores);
    }
    let before = LIVE.load(Ordering::Relaxed);
    let view = View::default();
    for score in &scores {
        view.published(Unit::projects(0), &state, std::slice::from_ref(score));
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(view.projects.len(), PROJECTS);
    println!(
        "queries/view_memory: {PROJECTS} projects with a score hold {held} bytes = {} bytes per project",
        held / PROJECTS as isize
    );
}

/// One vote batch to each of `projects` projects.
fn one_batch_each(projects: usize) -> impl Iterator<Item = String> {
    (0..projects).map(|i| {
        format!(
            r#"{{"event_id":"ev-{i:010}","project_id":"proj-{i:08}","occurred_at":{},"votes":[{{"voter_id":"u-1","value":0.75}}]}}"#,
            1_795_168_800_000 + i as i64
        )
    })
}

/// Record `i` of `topic`'s partition 0 carrying `payload`.
fn record<'a>(topic: &'a str, i: usize, payload: &'a str) -> Record<'a> {
    Record::new(
        topic,
        TopicTable::default().input(topic),
        Some(payload.as_bytes()),
    )
    .at(Some(0), Some(i as i64))
}

/// One vote batch to each of 100,000 projects: the bytes a project costs before its dedupe
/// window fills (its one remembered id included).
fn projects() {
    const PROJECTS: usize = 100_000;
    let (state, held) = held_by("jury.votes", one_batch_each(PROJECTS));
    assert_eq!(state.project_count(), PROJECTS);
    println!(
        "votes/project_memory: {PROJECTS} projects of one batch hold {held} bytes = {} bytes per project",
        held / PROJECTS as isize
    );
}

/// One session at the default limits (`sessions.max_judges` ballots, each scoring
/// `sessions.max_candidates` candidates, all with metadata), held open: the ballots its
/// changelog record holds (the largest record the producer sends), the rest dead-lettered.
fn largest_session() {
    let s = Config::default().sessions;
    let (judges, candidates) = (s.max_judges, s.max_candidates);
    let scores: Vec<String> = (0..candidates)
        .map(|c| format!(r#""cand-{c:06}":{}"#, c % 10 + 1))
        .collect();
    let meta: Vec<String> = (0..candidates)
        .map(|c| {
            format!(
                r#""cand-{c:06}":{{"author":"m-{}","position":{c}}}"#,
                c % 20
            )
        })
        .collect();
    let payloads = (0..judges).map(move |j| {
        format!(
            r#"{{"event_id":"e-{j}","project_id":"proj-1","session_id":"sess-1","occurred_at":{},"judge":"judge-{j:03}","scores":{{{}}},"candidates":{{{}}}}}"#,
            1_795_168_800_000 + j as i64,
            scores.join(","),
            meta.join(",")
        )
    });
    let (state, held) = held_by("jury.judge-scores", payloads);
    let open = &state.projects["proj-1"].sessions.open["sess-1"];
    let held_judges = open.ballots.len();
    assert!((1..=judges).contains(&held_judges), "{held_judges} judges");
    assert_eq!(open.candidates.len(), candidates);
    let record = json_bytes(open);
    assert!(record <= Settings::default().record_bytes, "{record} bytes");
    println!(
        "sessions/largest_session_memory: one session of {held_judges} judges (of {judges}: its changelog record, {record} bytes, holds no more) x {candidates} candidates holds {held} bytes = {} bytes per score",
        held / (held_judges * candidates) as isize
    );
}

/// Applies `payloads` as consecutive records of `topic`'s partition 0 to a fresh partition state
/// (default configuration) and returns the state with the heap bytes it was left holding.
fn held_by(topic: &str, payloads: impl Iterator<Item = String>) -> (PartitionState, isize) {
    let engine = Engine::new(Settings::default());
    let mut reps = ReputationTable::default();
    let mut state = PartitionState::default();
    let mut out: Vec<Output> = Vec::new();
    let before = LIVE.load(Ordering::Relaxed);
    for (i, payload) in payloads.enumerate() {
        out.clear();
        engine.process(&mut state, &mut reps, &record(topic, i, &payload), &mut out);
    }
    drop(out);
    let held = LIVE.load(Ordering::Relaxed) - before;
    (state, held)
}

/// Vote batches to one project until its window (the default 100,000 ids) is full and has turned
/// over once, then the bytes the partition state holds per remembered id.
fn dedupe_window() {
    let window = Config::default().limits.dedupe_window;
    let payloads = (0..2 * window).map(|i| {
        format!(
            r#"{{"event_id":"ev-{i:010}","project_id":"proj-1","occurred_at":{},"votes":[{{"voter_id":"u-1","value":0.75}}]}}"#,
            1_795_168_800_000 + i as i64
        )
    });
    let (state, held) = held_by("jury.votes", payloads);
    let remembered: usize = state
        .projects
        .values()
        .filter_map(|p| Some(p.votes.as_ref()?.seen.len()))
        .sum();
    assert_eq!(remembered, window);
    println!(
        "votes/dedupe_window_memory: a full window of {window} ids holds {held} bytes = {} bytes per remembered id",
        held / window as isize
    );
}

fn sessions() {
    const SESSIONS: usize = 10_000;
    let payloads = (0..SESSIONS).flat_map(|s| {
        (0..3).map(move |j| {
            format!(
                r#"{{"event_id":"e-{s}-{j}","project_id":"proj-{}","session_id":"sess-{s}","occurred_at":{},"judge":"judge-{j}","scores":{{"a":7,"b":5,"c":8,"d":3,"e":6}},"candidates":{{"a":{{"author":"m-a","words":120,"position":0}},"b":{{"author":"m-b","words":300,"position":1}}}},"category":"coding"}}"#,
                s % 100,
                1_795_168_800_000 + s as i64
            )
        })
    });
    let (state, held) = held_by("jury.judge-scores", payloads);
    assert_eq!(state.sessions.open_sessions(), SESSIONS);
    println!(
        "sessions/open_session_memory: {} open sessions (3 judges x 5 candidates) hold {} bytes = {} bytes per session (incl. dedupe ids)",
        SESSIONS,
        held,
        held / SESSIONS as isize
    );
}
