//! Results never depend on how producers key or partition, against a real broker: records keyed
//! by anything (or nothing) and spread over every partition are repartitioned by project, across
//! instances, a `kill -9` and a crash between forwarding and committing, and end in the tables
//! a replay of the repartition topic gives, with every project's votes counted once; with
//! `by_key`, a mis-keyed record is dead-lettered instead of splitting its project.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jurystream::engine::TICK_TOPIC;
use support::published::{Published, assert_same, published, replayed, replayed_lines};
use support::stream::{self, Shape};
use support::{
    Broker, Rec, Service, Setup, free_port, metric_sum, produce, read_log, setup, start_instance,
    write_test_config,
};

fn shape() -> Shape {
    Shape {
        partitions: 3,
        projects: 9,
        batches_per_project: 12,
        sessions_per_project: 6,
    }
}

/// `records` as producers that key by event (or send no key) produce them: every vote and
/// ballot keyed by its `event_id` (every fifth with no key) and sent round-robin over the
/// partitions, the stream's order kept; then three records whose project cannot be read (see
/// [`HOSTILE`]). Offsets are the ones a fresh topic assigns.
fn mis_keyed(records: &[Rec], partitions: i32) -> Vec<Rec> {
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut out = Vec::new();
    let mut place = |out: &mut Vec<Rec>, r: Rec, i: usize| {
        let partition = (i % partitions as usize) as i32;
        let offset = next.entry((r.topic.clone(), partition)).or_default();
        out.push(Rec {
            partition,
            offset: *offset,
            ..r
        });
        *offset += 1;
    };
    for (i, r) in records.iter().enumerate() {
        if r.topic.ends_with(".reputations") {
            out.push(r.clone());
            continue;
        }
        let event_id = r
            .value
            .as_deref()
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
            .and_then(|v| v["event_id"].as_str().map(str::to_owned));
        let key = event_id.filter(|_| i % 5 != 0);
        place(&mut out, Rec { key, ..r.clone() }, i);
    }
    let votes = records
        .iter()
        .find(|r| r.topic.ends_with(".votes"))
        .map(|r| r.topic.clone())
        .expect("a votes topic");
    let n = out.len();
    for (j, (key, value, _)) in HOSTILE.iter().enumerate() {
        let hostile = Rec {
            topic: votes.clone(),
            partition: 0,
            offset: 0,
            key: key.map(|k| k.repeat(if k == "k" { 200_000 } else { 1 })),
            timestamp_ms: 1_795_168_800_000,
            value: value.map(str::to_owned),
        };
        place(&mut out, hostile, n + j);
    }
    out
}

/// Records whose project cannot be read, with the code the first stage dead-letters them by:
/// one not JSON under a 200 kB key, one without `project_id`, a tombstone.
const HOSTILE: [(Option<&str>, Option<&str>, &str); 3] = [
    (Some("k"), Some("{not json"), "invalid_json"),
    (
        None,
        Some(r#"{"event_id": "x", "votes": []}"#),
        "missing_field",
    ),
    (Some("tomb"), None, "empty_payload"),
];

/// The records of each partition of the group's repartition topic as a replay file, in offset
/// order, each as the input record it copies (the coordinates its key names), after the
/// reputation table of `records`; and how many forwards the topic holds. A partition holds all
/// of each of its projects' records, and its state their whole state, so replaying each
/// partition on its own gives each project's outputs. The service's ticks stay in the files,
/// where they fell among the forwards (the replay applies them as the service did), and are
/// neither forwards nor origins.
fn repartition_replays(bootstrap: &str, group: &str, records: &[Rec]) -> Forwarded {
    let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
    let log = read_log(bootstrap, &format!("{group}-repartition"));
    let mut held = 0;
    let mut partitions: BTreeMap<i32, Vec<Rec>> = BTreeMap::new();
    for r in log {
        let reps = records
            .iter()
            .filter(|r| r.topic.ends_with(".reputations"))
            .cloned();
        // The key: `[topic, partition, offset, timestamp, keyed]`, then the record's own key.
        let key = r.key.as_deref().expect("a forward key");
        let mut values =
            serde_json::Deserializer::from_slice(key)
                .into_iter::<(String, i32, i64, Option<i64>, bool)>();
        let (topic, partition, offset, timestamp, keyed) = values
            .next()
            .expect("an origin")
            .expect("[topic, partition, offset, timestamp, keyed]");
        let own_key = keyed.then(|| &key[values.byte_offset()..]);
        assert!(r.headers.is_empty(), "{:?}", r.headers);
        held += usize::from(topic != TICK_TOPIC);
        partitions
            .entry(r.partition)
            .or_insert_with(|| reps.collect())
            .push(Rec {
                topic,
                partition,
                offset,
                key: text(own_key),
                timestamp_ms: timestamp.expect("a timestamp"),
                value: text(r.value.as_deref()),
            });
    }
    let mut origins = BTreeSet::new();
    for r in partitions.values().flatten() {
        if !r.topic.ends_with(".reputations") && r.topic != TICK_TOPIC {
            origins.insert((r.topic.clone(), r.partition, r.offset));
        }
    }
    Forwarded {
        files: partitions
            .values()
            .map(|rs| stream::replay_lines(rs))
            .collect(),
        held,
        origins,
    }
}

/// What the repartition topic holds.
struct Forwarded {
    /// A replay file per partition.
    files: Vec<String>,
    /// Its forwards, copies included.
    held: usize,
    /// The input records they copy, by topic, partition and offset.
    origins: BTreeSet<(String, i32, i64)>,
}

/// What the replays of `files` publish together (their projects are disjoint).
fn replayed_together(config: &std::path::Path, files: &[String]) -> Published {
    let mut all = Published {
        scores: BTreeMap::new(),
        leaderboard: BTreeMap::new(),
        judge_quality: BTreeMap::new(),
        reviewer_quality: BTreeMap::new(),
        consensus: Default::default(),
        review_requests: Default::default(),
        alerts: Default::default(),
        dead_letters: Default::default(),
    };
    for file in files {
        let p = replayed_lines(config, file);
        all.scores.extend(p.scores);
        all.leaderboard.extend(p.leaderboard);
        all.judge_quality.extend(p.judge_quality);
        all.reviewer_quality.extend(p.reviewer_quality);
        all.consensus.extend(p.consensus);
        all.review_requests.extend(p.review_requests);
        all.alerts.extend(p.alerts);
        all.dead_letters.extend(p.dead_letters);
    }
    all
}

/// Each project's evaluations and votes in a final `jury.scores` table.
fn counts(published: &Published) -> BTreeMap<String, (u64, u64)> {
    published
        .scores
        .iter()
        .map(|(project, v)| {
            let v: serde_json::Value = serde_json::from_str(v).expect("json");
            let n = |f: &str| v[f].as_u64().unwrap_or_default();
            (project.clone(), (n("evaluations"), n("votes")))
        })
        .collect()
}

/// Checks a run over the mis-keyed `records` (made from the keyed `keyed`): the records whose
/// project could not be read were dead-lettered by the first stage naming themselves; every
/// other output is what replays of the repartition topic's partitions publish; every project counts the
/// evaluations and votes of the keyed stream. Returns how many records the repartition topic
/// holds.
fn assert_repartitioned(
    bootstrap: &str,
    prefix: &str,
    config: &std::path::Path,
    keyed: &[Rec],
    records: &[Rec],
) -> usize {
    let forwarded = repartition_replays(bootstrap, &format!("{prefix}-group"), records);
    let expect = replayed_together(config, &forwarded.files);
    let mut got = published(bootstrap, prefix, &expect);
    // The first stage's dead letters, of records that were never forwarded: the hostile ones,
    // and the stream's payloads that are not JSON.
    let mut first_stage = Vec::new();
    got.dead_letters.retain(|d| {
        let v: serde_json::Value = serde_json::from_str(d).expect("json");
        let at = (
            v["source_topic"].as_str().unwrap_or_default().to_owned(),
            v["partition"].as_i64().unwrap_or(-1) as i32,
            v["offset"].as_i64().unwrap_or(-1),
        );
        if forwarded.origins.contains(&at) || at.0.ends_with(".reputations") {
            return true;
        }
        first_stage.push((at, v["error"].as_str().unwrap_or_default().to_owned()));
        false
    });
    for (r, (_, _, code)) in records[records.len() - HOSTILE.len()..].iter().zip(HOSTILE) {
        let at = (r.topic.clone(), r.partition, r.offset);
        assert!(
            first_stage.contains(&(at.clone(), code.to_owned())),
            "{at:?} dead-lettered as {code}: {first_stage:?}"
        );
    }
    let events = records
        .iter()
        .filter(|r| !r.topic.ends_with(".reputations"))
        .count();
    assert_eq!(
        first_stage.len() + forwarded.origins.len(),
        events,
        "every record forwarded or dead-lettered once: {first_stage:?}"
    );
    assert!(
        first_stage.iter().all(|(_, code)| [
            "invalid_json",
            "non_finite_number",
            "missing_field",
            "empty_payload"
        ]
        .contains(&code.as_str())),
        "{first_stage:?}"
    );
    assert_same(&got, &expect);
    let keyed = replayed(config, keyed);
    assert_eq!(
        counts(&got),
        counts(&keyed),
        "per project (evaluations, votes)"
    );
    // A record forwarded twice is not taken for a resent event either.
    let duplicates = |p: &Published| {
        p.dead_letters
            .iter()
            .filter(|d| d.contains(r#""error":"duplicate_event_id""#))
            .count()
    };
    assert_eq!(
        duplicates(&got),
        duplicates(&keyed),
        "duplicate_event_id dead letters"
    );
    forwarded.held
}

#[test]
fn mis_keyed_records_over_three_instances_a_kill_9_and_a_fourth_count_every_vote_once() {
    let broker = Broker::shared();
    let prefix = "part";
    let shape = shape();
    let (
        Setup {
            dir,
            config,
            records: keyed,
        },
        records,
    ) = mis_keyed_setup(broker, prefix, &shape);
    let half = records.len() / 2;
    produce(&broker.bootstrap, &records[..half]);
    let mut running: Vec<Service> = ["a", "b", "c"]
        .iter()
        .map(|n| start_instance(dir.path(), n, prefix, &broker.bootstrap, &[]))
        .collect();
    // Mid-stream, one instance dies without a word; its partitions go to the others once the
    // group notices, and a fourth joins.
    std::thread::sleep(Duration::from_secs(3));
    running.remove(1).kill();
    produce(&broker.bootstrap, &records[half..]);
    running.push(start_instance(
        dir.path(),
        "d",
        prefix,
        &broker.bootstrap,
        &[],
    ));
    finish(running, &records);
    assert_repartitioned(&broker.bootstrap, prefix, &config, &keyed, &records);
}

/// [`setup`] of `shape` for `prefix`, and its stream as [`mis_keyed`] producers send it.
fn mis_keyed_setup(broker: &Broker, prefix: &str, shape: &Shape) -> (Setup, Vec<Rec>) {
    let setup = setup(&broker.bootstrap, prefix, shape, free_port(), "");
    let records = mis_keyed(&setup.records, shape.partitions);
    (setup, records)
}

/// Starts instance `name` of `prefix`'s group (`extra` appended to its configuration) without
/// waiting for it: instances started together.
fn start_unready(
    dir: &std::path::Path,
    name: &str,
    prefix: &str,
    bootstrap: &str,
    extra: &str,
) -> Service {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("dir");
    let config = write_test_config(&d, prefix, bootstrap, free_port(), extra);
    Service::start(&config, d.join("service.log"))
}

/// Waits until `running`, between them, have processed everything of `records`, then stops them
/// (each must exit cleanly).
fn finish(running: Vec<Service>, records: &[Rec]) {
    let refs: Vec<&Service> = running.iter().collect();
    support::assert_caught_up(&refs, records, Duration::from_secs(240));
    let logs: Vec<std::path::PathBuf> = running.iter().map(|s| s.log.clone()).collect();
    for s in running {
        s.stop_cleanly();
    }
    // Shown only if the test fails: where each task went and what each restore read.
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!("--- {}:\n{}", log.display(), support::handover_lines(&text));
    }
}

/// The tasks (partitions of the repartition topic) each of `services` owns, as it reports them.
fn tasks_owned(services: &[&Service]) -> Vec<u64> {
    services
        .iter()
        .map(|s| metric_sum(&s.metrics(), "jurystream_partitions_owned"))
        .collect()
}

/// Checks `check` every `every` until it holds; what it last saw otherwise, after `timeout`.
fn wait_for<E>(
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<(), E>,
) -> Result<(), E> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Err(_) if Instant::now() <= deadline => std::thread::sleep(every),
            done => return done,
        }
    }
}

/// Waits until `services` own the `tasks` between them, each ⌊tasks/n⌋ or ⌈tasks/n⌉; the
/// counts last seen otherwise.
fn wait_spread(services: &[&Service], tasks: u64, timeout: Duration) -> Result<(), Vec<u64>> {
    let n = services.len() as u64;
    let (least, most) = (tasks / n, tasks.div_ceil(n));
    wait_for(timeout, Duration::from_millis(200), || {
        let owned = tasks_owned(services);
        let spread =
            owned.iter().sum::<u64>() == tasks && owned.iter().all(|o| (least..=most).contains(o));
        if spread { Ok(()) } else { Err(owned) }
    })
}

/// Every instance of a group takes its share of the stateful tasks, whatever it owns of the
/// inputs: one, then two, then three instances started one after another; a `kill -9` leaves
/// them all to the survivors (within the 6 s session timeout of the tests' configuration); and
/// every record is applied once, as replays of the repartition topic give.
#[test]
fn tasks_spread_over_instances_as_they_come_and_go() {
    let broker = Broker::shared();
    let prefix = "spread";
    let shape = shape();
    let tasks = shape.partitions as u64;
    let (
        Setup {
            dir,
            config,
            records: keyed,
        },
        records,
    ) = mis_keyed_setup(broker, prefix, &shape);
    let third = records.len() / 3;
    produce(&broker.bootstrap, &records[..third]);
    let mut running: Vec<Service> = Vec::new();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        running.push(start_instance(
            dir.path(),
            name,
            prefix,
            &broker.bootstrap,
            &[],
        ));
        let refs: Vec<&Service> = running.iter().collect();
        if let Err(owned) = wait_spread(&refs, tasks, Duration::from_secs(60)) {
            panic!(
                "{} instances own {owned:?} of {tasks} tasks:\n{}",
                refs.len(),
                support::handovers(&refs)
            );
        }
        if i == 1 {
            produce(&broker.bootstrap, &records[third..2 * third]);
        }
    }
    running.remove(0).kill();
    let refs: Vec<&Service> = running.iter().collect();
    if let Err(owned) = wait_spread(&refs, tasks, Duration::from_secs(30)) {
        panic!(
            "the survivors own {owned:?} of {tasks} tasks:\n{}",
            support::handovers(&refs)
        );
    }
    produce(&broker.bootstrap, &records[2 * third..]);
    finish(running, &records);
    assert_repartitioned(&broker.bootstrap, prefix, &config, &keyed, &records);
}

/// Waits until the reviewer table of `prefix` is `expect`'s; the differences last seen
/// otherwise.
fn wait_reviewers(bootstrap: &str, prefix: &str, expect: &Published) -> Result<(), String> {
    wait_for(Duration::from_secs(60), Duration::from_millis(500), || {
        let got = published(bootstrap, prefix, expect).reviewer_quality;
        let diff = support::published::table_diff(&got, &expect.reviewer_quality);
        if diff.is_empty() { Ok(()) } else { Err(diff) }
    })
}

/// A member the group coordinator left out of a generation while it still ran (a zombie) can
/// publish older reviewer records of a task after its owner's newer ones (tansu does that
/// now and then). Once a rebalance ends, every owner publishes its tasks' reviewer records
/// again, so the table ends with the owners' figures, also for the tasks that stay where they
/// are. The zombie is played here by records written to the table directly.
#[test]
fn after_a_rebalance_the_owners_reviewer_records_replace_a_zombies() {
    let broker = Broker::shared();
    let prefix = "zombie";
    let shape = shape();
    let Setup {
        dir,
        config,
        records,
    } = setup(&broker.bootstrap, prefix, &shape, free_port(), "");
    produce(&broker.bootstrap, &records);
    let expect = replayed(&config, &records);
    assert!(!expect.reviewer_quality.is_empty());
    let a = start_instance(dir.path(), "a", prefix, &broker.bootstrap, &[]);
    if let Err(diff) = wait_reviewers(&broker.bootstrap, prefix, &expect) {
        panic!("one instance publishes replay's reviewer table:\n{diff}");
    }
    // The fits that published it are counted, each pass of their release timed.
    let metrics = a.metrics();
    for counted in [
        "jurystream_reviewer_fits_total",
        "jurystream_reviewer_release_seconds_count",
    ] {
        assert!(metric_sum(&metrics, counted) > 0, "{counted}: {metrics}");
    }
    let topic = format!("{prefix}.reviewer-quality");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let zombie: Vec<Rec> = read_log(&broker.bootstrap, &topic)
        .into_iter()
        .filter_map(|r| {
            Some(Rec {
                topic: topic.clone(),
                partition: r.partition,
                offset: 0,
                key: Some(String::from_utf8_lossy(r.key.as_deref()?).into_owned()),
                timestamp_ms: now_ms,
                value: Some(r#"{"verdicts": 0}"#.to_owned()),
            })
        })
        .collect();
    produce(&broker.bootstrap, &zombie);
    let b = start_instance(dir.path(), "b", prefix, &broker.bootstrap, &[]);
    let tasks = shape.partitions as u64;
    if let Err(owned) = wait_spread(&[&a, &b], tasks, Duration::from_secs(60)) {
        panic!("two instances own {owned:?} of {tasks} tasks");
    }
    if let Err(diff) = wait_reviewers(&broker.bootstrap, prefix, &expect) {
        panic!("the zombie's records are still the last:\n{diff}");
    }
    finish(vec![a, b], &records);
}

/// Two instances started at the same moment on a full input share the tasks and leave no
/// record unapplied.
#[test]
fn two_instances_started_together_share_the_tasks_and_apply_every_record() {
    let broker = Broker::shared();
    let prefix = "together";
    let shape = shape();
    let (
        Setup {
            dir,
            config,
            records: keyed,
        },
        records,
    ) = mis_keyed_setup(broker, prefix, &shape);
    produce(&broker.bootstrap, &records);
    let running: Vec<Service> = ["a", "b"]
        .iter()
        .map(|name| start_unready(dir.path(), name, prefix, &broker.bootstrap, ""))
        .collect();
    let refs: Vec<&Service> = running.iter().collect();
    if let Err(owned) = wait_spread(&refs, shape.partitions as u64, Duration::from_secs(60)) {
        panic!(
            "two instances own {owned:?} of {} tasks:\n{}",
            shape.partitions,
            support::handovers(&refs)
        );
    }
    finish(running, &records);
    assert_repartitioned(&broker.bootstrap, prefix, &config, &keyed, &records);
}

/// With `by_key` the tasks are the input partitions (votes' and judge scores'), in one group:
/// two instances started together own half of them each, and publish what replay does.
#[test]
fn by_key_units_spread_over_two_instances() {
    let broker = Broker::shared();
    let prefix = "bykeyspread";
    let shape = shape();
    let by_key = "[input]\npartitioning = \"by_key\"\n";
    let Setup {
        dir,
        config,
        records,
    } = setup(&broker.bootstrap, prefix, &shape, free_port(), by_key);
    produce(&broker.bootstrap, &records);
    let running: Vec<Service> = ["a", "b"]
        .iter()
        .map(|name| start_unready(dir.path(), name, prefix, &broker.bootstrap, by_key))
        .collect();
    let refs: Vec<&Service> = running.iter().collect();
    // Each input topic's partitions: votes and judge scores.
    let units = 2 * shape.partitions as u64;
    if let Err(owned) = wait_spread(&refs, units, Duration::from_secs(60)) {
        panic!("two instances own {owned:?} of {units} units");
    }
    finish(running, &records);
    let expect = replayed(&config, &records);
    assert_same(&published(&broker.bootstrap, prefix, &expect), &expect);
}

/// Static membership: an instance restarted after `kill -9` with the same `kafka.instance_id`
/// gets its tasks back without waiting for the session timeout (30 s here), and its restart
/// applies every record once.
#[test]
fn an_instance_restarted_with_its_identity_resumes_before_the_session_timeout() {
    let broker = Broker::shared();
    let prefix = "static";
    let shape = shape();
    let tasks = shape.partitions as u64;
    let (
        Setup {
            dir,
            config,
            records: keyed,
        },
        records,
    ) = mis_keyed_setup(broker, prefix, &shape);
    let half = records.len() / 2;
    produce(&broker.bootstrap, &records[..half]);
    let identity = [
        ("JURYSTREAM_KAFKA__INSTANCE_ID", "static-0"),
        ("JURYSTREAM_KAFKA__SESSION_TIMEOUT_MS", "30000"),
    ];
    let first = start_instance(dir.path(), "a", prefix, &broker.bootstrap, &identity);
    if let Err(owned) = wait_spread(&[&first], tasks, Duration::from_secs(60)) {
        panic!("one instance owns {owned:?} of {tasks} tasks");
    }
    first.kill();
    produce(&broker.bootstrap, &records[half..]);
    let restarted = std::time::Instant::now();
    let again = start_instance(dir.path(), "b", prefix, &broker.bootstrap, &identity);
    if let Err(owned) = wait_spread(&[&again], tasks, Duration::from_secs(60)) {
        panic!("the restarted instance owns {owned:?} of {tasks} tasks");
    }
    let took = restarted.elapsed();
    eprintln!("restart after kill -9 to every task owned: {took:?}");
    assert!(
        took < Duration::from_secs(20),
        "the restart waited {took:?}, as long as a new member waits for the session timeout"
    );
    again.assert_caught_up(&records, Duration::from_secs(120));
    again.stop_cleanly();
    assert_repartitioned(&broker.bootstrap, prefix, &config, &keyed, &records);
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs --features fault-injection"
)]
fn a_crash_between_forwarding_and_committing_counts_nothing_twice() {
    let broker = Broker::shared();
    let prefix = "fwd";
    let shape = Shape {
        partitions: 3,
        projects: 6,
        batches_per_project: 6,
        sessions_per_project: 3,
    };
    let (
        Setup {
            dir,
            config,
            records: keyed,
        },
        records,
    ) = mis_keyed_setup(broker, prefix, &shape);
    produce(&broker.bootstrap, &records);
    // The first epoch that commits anything forwards records and has them acknowledged, then
    // dies before committing their input offsets: the restart forwards them again.
    let mut crashing = Service::start_with(
        &config,
        dir.path().join("crash.log"),
        &[("JURYSTREAM_CRASH_AFTER_CHANGELOG", "1")],
    );
    assert!(!crashing.wait_exit(Duration::from_secs(120)).success());
    let service = Service::start(&config, dir.path().join("service.log"));
    service.assert_caught_up(&records, Duration::from_secs(120));
    let metrics = service.metrics();
    assert!(service.terminate().success());
    // Records were forwarded again after the crash, and the copies skipped where they arrived.
    let forwardable = records
        .iter()
        .filter(|r| !r.topic.ends_with(".reputations"))
        .count()
        - HOSTILE.len();
    let copies = assert_repartitioned(&broker.bootstrap, prefix, &config, &keyed, &records);
    assert!(
        copies > forwardable,
        "{copies} records forwarded for {forwardable}"
    );
    assert!(
        metrics.contains(r#"jurystream_records_total{result="replayed""#),
        "the copies were skipped as replayed: {metrics}"
    );
}

#[test]
fn by_key_dead_letters_a_mis_keyed_record_and_keeps_its_project_whole() {
    let broker = Broker::shared();
    let prefix = "bykey";
    let shape = Shape {
        partitions: 3,
        projects: 3,
        batches_per_project: 4,
        sessions_per_project: 2,
    };
    let Setup {
        dir,
        config,
        mut records,
    } = setup(
        &broker.bootstrap,
        prefix,
        &shape,
        free_port(),
        "[input]\npartitioning = \"by_key\"\n",
    );
    // Two vote batches of proj-0 keyed by their event, in another partition than proj-0's.
    let votes = format!("{prefix}.votes");
    for (i, event) in ["stray-1", "stray-2"].iter().enumerate() {
        let partition = 1;
        let offset = records
            .iter()
            .filter(|r| r.topic == votes && r.partition == partition)
            .count() as i64;
        records.push(Rec {
            topic: votes.clone(),
            partition,
            offset,
            key: (i == 0).then(|| (*event).to_owned()),
            timestamp_ms: 1_795_168_900_000,
            value: Some(format!(
                r#"{{"event_id": "{event}", "project_id": "proj-0", "votes": [{{"voter_id": "u-1", "value": 1}}]}}"#
            )),
        });
    }
    produce(&broker.bootstrap, &records);
    let expect = replayed(&config, &records);
    let codes: Vec<String> = expect
        .dead_letters
        .iter()
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter(|d| d["error"] == "key_not_project_id")
        .map(|d| d["message"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(codes.len(), 2, "{codes:?}");
    assert!(
        codes[0].contains("stray-1") || codes[1].contains("stray-1"),
        "{codes:?}"
    );
    let service = Service::start(&config, dir.path().join("service.log"));
    service.assert_caught_up(&records, Duration::from_secs(90));
    let metrics = service.metrics();
    assert!(service.terminate().success());
    assert!(
        !metrics.contains("jurystream_records_forwarded_total{"),
        "{metrics}"
    );
    assert_same(&published(&broker.bootstrap, prefix, &expect), &expect);
    // proj-0's votes are all in one state: the keyed ones, not the strays.
    let keyed_only = replayed(&config, &records[..records.len() - 2]);
    assert_eq!(expect.scores.get("proj-0"), keyed_only.scores.get("proj-0"));
}

/// A forwarded record the broker refuses for good (the repartition topic's `max.message.bytes`
/// below the producer's limit) becomes a `forward_refused` dead letter at the input record's own
/// topic, partition and offset, without the payload that was too large; the rest of the stream
/// is processed and committed. A broker that does not enforce `max.message.bytes` (tansu) never
/// refuses: there the refusal is injected where its delivery report would arrive
/// (`JURYSTREAM_REFUSE_FORWARD`, a `fault-injection` build), and all the rest is as real.
#[test]
fn a_forward_the_broker_refuses_is_dead_lettered_at_its_origin() {
    let broker = Broker::shared();
    let prefix = "refused";
    let enforced =
        support::enforces_max_message_bytes(&broker.bootstrap, &format!("{prefix}-probe"));
    if !enforced {
        eprintln!("this broker does not enforce max.message.bytes: the refusal is injected");
    }
    let Setup {
        dir,
        config,
        mut records,
    } = setup(&broker.bootstrap, prefix, &shape(), free_port(), "");
    // The repartition topic exists before the service, with a 20 kB record limit.
    support::create_topic_with(
        &broker.bootstrap,
        &format!("{prefix}-group-repartition"),
        3,
        &[("max.message.bytes", "20000")],
    );
    let votes = format!("{prefix}.votes");
    let big: Vec<String> = (0..400)
        .map(|i| format!(r#"{{"voter_id": "{}{i:03}", "value": 1}}"#, "v".repeat(100)))
        .collect();
    let payload = format!(
        r#"{{"event_id": "big", "project_id": "proj-0", "occurred_at": 1795168800000, "votes": [{}]}}"#,
        big.join(", ")
    );
    let offset = records
        .iter()
        .filter(|r| r.topic == votes && r.partition == 0)
        .count() as i64;
    records.push(Rec {
        topic: votes.clone(),
        partition: 0,
        offset,
        key: Some("proj-0".into()),
        timestamp_ms: 1_795_168_800_000,
        value: Some(payload.clone()),
    });
    produce(&broker.bootstrap, &records);
    let injected = [("JURYSTREAM_REFUSE_FORWARD", r#""event_id": "big""#)];
    let env: &[(&str, &str)] = if enforced { &[] } else { &injected };
    let service = Service::start_ready_with(&config, dir.path().join("service.log"), env);
    service.assert_caught_up(&records, Duration::from_secs(120));
    // The input's position moves past the record when it is read, a little before its dead
    // letter is written: read the letters until it is there.
    let deadline = Instant::now() + Duration::from_secs(30);
    let letters = loop {
        let letters: Vec<serde_json::Value> =
            read_log(&broker.bootstrap, &format!("{prefix}.dead-letters"))
                .iter()
                .filter_map(|r| serde_json::from_slice(r.value.as_deref()?).ok())
                .filter(|d: &serde_json::Value| d["error"] == "forward_refused")
                .collect();
        if !letters.is_empty() || Instant::now() > deadline {
            break letters;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(letters.len(), 1, "{letters:?}\n{}", service.log_text());
    let d = &letters[0];
    assert_eq!(
        (
            d["source_topic"].as_str(),
            d["partition"].as_i64(),
            d["offset"].as_i64()
        ),
        (Some(votes.as_str()), Some(0), Some(offset))
    );
    assert!(d["payload"].is_null(), "{d}");
    assert_eq!(d["payload_bytes"], payload.len());
    let metrics = service.metrics();
    assert!(metrics.contains("forward_refused"), "{metrics}");
    assert!(service.terminate().success());
}
