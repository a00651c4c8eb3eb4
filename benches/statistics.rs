//! What judge quality and reviewer reliability cost the core, without Kafka: the projects of one
//! of the service's six tasks over the peers corpus (`benches/peers/corpus.py`: 1,000,000 vote
//! events over 10,000 projects, each a new item with two reviewers), through the engine as the
//! service drives it. The task holds what the default configuration gives it
//! (`judge_quality.max_items` over `kafka.partitions`), its state is journaled, its changelog
//! rendered and its flush ended every 11,000 votes (so the next flush deletes what this one
//! forgot, as in the runtime), and its reviewers are released twice. Each pass of 512 records is
//! read before it is applied, as the service's polling thread reads ahead of its processing
//! thread. The votes of each third of its projects come in turn, as the service's forwarding
//! drains the input topic's three partitions in turns: so a project holds about 30 items, as in
//! the service, and reaches the reviewers' checkpoints (fed round robin, each would hold one or
//! two and reach none).
//!
//! Run: `cargo bench --bench statistics -- [defaults] [judge-quality] [off]` (all three when none
//! is named): the loop's time for each, and the records and bytes its changelog took. With
//! `STATISTICS_PROJECTS=n` the corpus's events go to `n` projects instead of 10,000: fewer,
//! larger projects, whose reviewers' checkpoints read more items. Its
//! instructions, which unlike its time do not depend on the host's hour: `valgrind
//! --tool=cachegrind --cache-sim=no target/release/deps/statistics-<hash> --bench defaults` (and
//! `off`): the statistics' cost per vote is the difference over the votes (docs/performance.md,
//! "Where it goes").

#[path = "peers/event.rs"]
mod peers;

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Instant;

use jurystream::changelog::{self, Unit};
use jurystream::config::Config;
use jurystream::engine::output::Output;
use jurystream::engine::reputation::ReputationTable;
use jurystream::engine::{Engine, InputTopic, PartitionState, Record};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EVENTS: usize = 1_000_000;
/// The corpus's projects, unless `STATISTICS_PROJECTS` says otherwise.
const PROJECTS: usize = 10_000;
/// The service's tasks (`kafka.partitions`) and the input topic's partitions in the peers
/// benchmark.
const TASKS: usize = 6;
const INPUT_PARTITIONS: usize = 3;
/// Votes between two renders of the changelog (a flush).
const FLUSH: usize = 11_000;
/// Records the service's polling thread reads ahead of its processing thread at a time.
const PASS: usize = 512;

/// The events of the task's projects (every sixth of `projects`), each third of its projects'
/// in turn.
fn task_events(projects: usize) -> Vec<String> {
    let mut thirds: Vec<VecDeque<usize>> = vec![VecDeque::new(); INPUT_PARTITIONS];
    for i in (0..EVENTS).filter(|i| (i % projects).is_multiple_of(TASKS)) {
        thirds[(i % projects / TASKS) % INPUT_PARTITIONS].push_back(i);
    }
    thirds
        .into_iter()
        .flatten()
        .map(|i| peers::event(i, projects))
        .collect()
}

/// What the changelog took: records, and bytes (keys and values), in all and of item buckets.
#[derive(Default)]
struct Written {
    records: usize,
    bytes: usize,
    item_bytes: usize,
}

/// The `i`th record of flush `flush`, whose vote batch is `payload`.
fn record_of(flush: usize, i: usize, payload: &str) -> Record<'_> {
    let offset = (flush * FLUSH + i) as i64;
    Record::new(
        "jury.votes",
        Some(InputTopic::Votes),
        Some(payload.as_bytes()),
    )
    .at(Some(0), Some(offset))
    .received(Some((flush * 250 + i * 250 / FLUSH) as u64), 0)
}

/// Runs the task's events through the engine with `config`; returns the loop's seconds and
/// what its changelog took.
fn run(config: &Config, events: &[String]) -> (f64, Written) {
    let engine = Engine::new(config.engine_settings());
    let mut reputations = ReputationTable::default();
    let mut state = PartitionState::journaled();
    let (mut renderer, mut records) = (
        changelog::Renderer::default(),
        changelog::Records::default(),
    );
    let mut out = Vec::<Output>::new();
    let mut written = Written::default();
    let flushes = events.len().div_ceil(FLUSH);
    let started = Instant::now();
    for (flush, chunk) in events.chunks(FLUSH).enumerate() {
        // As the service's polling thread does, each pass's vote batches are read before the
        // processing thread applies them: reading and applying in turn would keep neither's
        // code in the instruction cache, which the service does not pay.
        for (pass, batches) in chunk.chunks(PASS).enumerate() {
            let record = |i: usize| record_of(flush, pass * PASS + i, &batches[i]);
            let prepared: Vec<_> = (0..batches.len())
                .map(|i| engine.prepare_votes(&record(i)))
                .collect();
            for (i, prepared) in prepared.iter().enumerate() {
                out.clear();
                let record = record(i).read_ahead(prepared.as_ref());
                black_box(engine.process(&mut state, &mut reputations, &record, &mut out));
                for o in &out {
                    black_box(o.render());
                }
            }
        }
        out.clear();
        engine.release_held(&mut state, &mut out);
        if flush == flushes * 3 / 4 || flush == flushes - 1 {
            engine.release_reviewers(&mut state, &mut out);
        }
        for o in &out {
            black_box(o.render());
        }
        let changes = state.journal.as_mut().map(std::mem::take);
        records.clear();
        let through = Some(((flush + 1) * FLUSH - 1) as i64);
        renderer.render(
            Unit::projects(0),
            &state,
            &changes.unwrap_or_default(),
            through,
            &mut records,
        );
        // As the runtime does once a flush's records are written: what it forgot is deleted by
        // the next.
        state.end_flush();
        for r in black_box(&records).iter() {
            let bytes = r.key.len() + r.value.map_or(0, <[u8]>::len);
            written.records += 1;
            written.bytes += bytes;
            if r.key.windows(9).any(|w| w == b"\"items\",\"") {
                written.item_bytes += bytes;
            }
        }
    }
    (started.elapsed().as_secs_f64(), written)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("statistics benchmark: run with `cargo bench --bench statistics`");
        return;
    }
    let named: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let all = ["defaults", "judge-quality", "off"];
    let projects = match std::env::var("STATISTICS_PROJECTS") {
        Ok(n) => match n.parse::<usize>() {
            Ok(n) if n >= TASKS => n,
            _ => {
                eprintln!("STATISTICS_PROJECTS must be a whole number of at least {TASKS}: {n:?}");
                std::process::exit(2);
            }
        },
        Err(_) => PROJECTS,
    };
    let events = task_events(projects);
    for mode in all
        .into_iter()
        .filter(|m| named.is_empty() || named.contains(m))
    {
        let mut config = Config::default();
        config.judge_quality.enabled = mode != "off";
        config.reviewers.enabled = mode == "defaults";
        let (seconds, written) = run(&config, &events);
        let mb = |bytes: usize| bytes as f64 / 1e6;
        println!(
            "{mode:>14}: {} votes in {seconds:.3} s, {:.0} votes/s; changelog {} records, \
             {:.1} MB ({:.1} MB of item buckets)",
            events.len(),
            events.len() as f64 / seconds,
            written.records,
            mb(written.bytes),
            mb(written.item_bytes)
        );
    }
}
