//! The Kafka service against a real broker (see tests/support): its outputs equal replay's,
//! a kill -9 at any point ends in the same tables, a second instance taking partitions over
//! mid-stream loses and doubles nothing, SIGTERM is clean, a refused commit is made again, a
//! missing topic is a clear error, an outage is reported by /readyz, and an independent client
//! interoperates.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use support::published::{Published, assert_same, published, replayed};
use support::stream::{self, Shape};
use support::{Broker, Proxy, Rec, Service, Setup, free_port, produce, setup, write_test_config};

fn sample_shape() -> Shape {
    Shape {
        partitions: 3,
        projects: 9,
        batches_per_project: 12,
        sessions_per_project: 6,
    }
}

/// A test's working directory, configuration and generated input stream, with its topics
/// created: `prefix` names the topics, the service reaches the broker at `bootstrap` and serves
/// HTTP on `http_port`, and `extra` is appended to its configuration.
fn inputs(records: &[Rec]) -> u64 {
    records.len() as u64
}

#[test]
fn end_to_end_outputs_equal_replay() {
    let broker = Broker::shared();
    let prefix = "e2e";
    let Setup {
        dir,
        config,
        records,
    } = setup(&broker.bootstrap, prefix, &sample_shape(), free_port(), "");
    produce(&broker.bootstrap, &records);
    let expect = replayed(&config, &records);
    assert!(
        expect.consensus.len() >= 40
            && expect.dead_letters.len() >= 10
            && !expect.alerts.is_empty()
    );

    let service = Service::start_ready(&config, dir.path().join("service.log"));
    let handled = service.wait_handled(inputs(&records), Duration::from_secs(120));
    assert_eq!(handled, inputs(&records), "{}", service.metrics());
    // The records are dated days ago (their timestamps and event times): the publication
    // latency runs from their arrival and stays within the run, the event-time lag says their
    // age. Both are observed when the broker acknowledges a score, which can come after the
    // last record was handled.
    let metrics = service.wait_metric(
        "jurystream_event_time_lag_seconds_count",
        1,
        Duration::from_secs(60),
    );
    let mean = |name: &str| {
        let sum = support::metric_sum(&metrics, &format!("{name}_sum"));
        let count = support::metric_sum(&metrics, &format!("{name}_count"));
        assert!(count > 0, "{name}: {metrics}");
        sum as f64 / count as f64
    };
    assert!(
        mean("jurystream_publish_latency_seconds") < 60.0,
        "{metrics}"
    );
    assert!(
        mean("jurystream_event_time_lag_seconds") > 86_400.0,
        "{metrics}"
    );
    // The gauges of the partitions' state are the applying stage's alone: once they are set
    // after the last record (at most a second later), they hold, and the forwarding stage,
    // which holds no state, never sets them to 0.
    std::thread::sleep(Duration::from_millis(1500));
    let held: Vec<u64> = (0..30)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            support::metric_sum(&service.metrics(), "jurystream_projects")
        })
        .collect();
    assert!(
        held[0] > 0 && held.iter().all(|h| *h == held[0]),
        "projects held, read every 100 ms: {held:?}"
    );
    let log = service.log.clone();
    let status = service.terminate();
    assert!(
        status.success(),
        "exit {status:?}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert_same(&published(&broker.bootstrap, prefix, &expect), &expect);
}

#[test]
fn kill_9_at_any_point_ends_in_the_clean_run_tables() {
    let broker = Broker::shared();
    let prefix = "crash";
    let Setup {
        dir,
        config,
        records,
    } = setup(
        &broker.bootstrap,
        prefix,
        &sample_shape(),
        free_port(),
        "[output]\nscores_coalesce_ms = 0\n",
    );
    let expect = replayed(&config, &records);
    // The stream arrives in four parts; an incarnation is killed (-9) in each of the first three:
    // after its work was committed, in the middle of processing, and right after start-up.
    let cut = |f: f64| (records.len() as f64 * f) as usize;
    let parts = [
        &records[..cut(0.3)],
        &records[cut(0.3)..cut(0.6)],
        &records[cut(0.6)..cut(0.85)],
        &records[cut(0.85)..],
    ];
    let log = dir.path().join("service.log");
    let mut produced = 0;
    for (i, part) in parts.iter().take(3).enumerate() {
        produce(&broker.bootstrap, part);
        produced += part.len();
        let service = Service::start_ready(&config, log.clone());
        match i {
            0 => {
                service.wait_handled(produced as u64, Duration::from_secs(60));
                // Committed through the whole topology: the inputs' offsets (their records
                // forwarded) and the repartition topic's (their state in the changelog), so the
                // next incarnations restore state. A first commit alone could cover only the
                // forwards.
                let group =
                    support::GroupOffsets::new(&broker.bootstrap, &format!("{prefix}-group"));
                assert!(
                    group.wait_committed(&records[..produced], Duration::from_secs(30)),
                    "{}",
                    service.metrics()
                );
            }
            1 => {
                service.wait_handled(20, Duration::from_secs(60));
            }
            _ => std::thread::sleep(Duration::from_millis(300)),
        }
        service.kill();
        // The next incarnation starts once this one's group sessions have expired.
        support::after_a_kill();
    }
    produce(&broker.bootstrap, parts[3]);
    let service = Service::start_ready(&config, log.clone());
    // The last incarnation owns all six input partitions; it skips what the changelog holds
    // and processes the rest.
    service.assert_caught_up(&records, Duration::from_secs(180));
    let metrics = service.metrics();
    service.stop_cleanly();
    assert!(
        support::metric_sum(&metrics, "jurystream_state_restore_records_total") > 0,
        "{metrics}"
    );
    assert_same(&published(&broker.bootstrap, prefix, &expect), &expect);
}

/// `records` in another order that the service must treat the same: reputations first, then
/// every input partition's records spread evenly over the whole stream (each partition keeps its
/// own order), so that any part of the stream holds votes and ballots of every partition.
fn interleaved(records: &[Rec]) -> Vec<Rec> {
    let mut lengths: BTreeMap<(&str, i32), i64> = BTreeMap::new();
    for r in records {
        *lengths.entry((&r.topic, r.partition)).or_default() += 1;
    }
    let position = |r: &Rec| {
        let reputation = r.topic.ends_with(".reputations");
        let along = r.offset as f64 / lengths[&(r.topic.as_str(), r.partition)] as f64;
        (!reputation, along)
    };
    let mut out = records.to_vec();
    out.sort_by(|a, b| {
        position(a)
            .partial_cmp(&position(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    out
}

#[test]
fn a_second_instance_takes_partitions_over_mid_stream_and_hands_them_back_with_nothing_lost_or_doubled()
 {
    let broker = Broker::shared();
    let prefix = "scale";
    let extra = "[output]\nscores_coalesce_ms = 0\n";
    let Setup {
        dir,
        config,
        records,
    } = setup(
        &broker.bootstrap,
        prefix,
        &sample_shape(),
        free_port(),
        extra,
    );
    let expect = replayed(&config, &records);
    let records = interleaved(&records);
    let cut = |f: f64| (records.len() as f64 * f) as usize;
    let (first_part, second_part) = (&records[..cut(0.4)], &records[..cut(0.75)]);
    produce(&broker.bootstrap, first_part);
    let start = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let config = write_test_config(&d, prefix, &broker.bootstrap, free_port(), extra);
        Service::start_ready(&config, d.join("service.log"))
    };
    let first = start("first");
    first.wait_handled(20, Duration::from_secs(60));
    // The same group from a second instance: the cooperative rebalance revokes some of the first
    // instance's partitions (it finishes and commits them in the revoke callback) and hands them
    // over while more of the stream arrives.
    let second = start("second");
    produce(&broker.bootstrap, &second_part[first_part.len()..]);
    support::assert_caught_up(&[&first, &second], second_part, Duration::from_secs(120));
    let took_over = support::metric_sum(&second.metrics(), "jurystream_records_total") > 0;
    let second_log = second.log_text();
    assert!(second.terminate().success(), "{second_log}");
    // The first instance gets those partitions back and reads on. librdkafka stopped fetching
    // them when they were revoked, which undoes their forwarding to the service's batch queue,
    // so this checks they are forwarded again when they are assigned again.
    let third_part = &records[..cut(0.9)];
    produce(&broker.bootstrap, &third_part[second_part.len()..]);
    first.assert_caught_up(third_part, Duration::from_secs(120));
    let first_log = first.log_text();
    assert!(first.terminate().success(), "{first_log}");
    let revoked = first_log.contains("partitions revoked");
    let assigned_again = first_log.matches("partitions assigned").count() >= 2;
    assert!(
        revoked && took_over && assigned_again,
        "{first_log}\n{second_log}"
    );
    // A third instance restores what both left in the changelog and goes on with the rest: its
    // scores build on the restored ones, so state handed over wrongly shows in the tables.
    produce(&broker.bootstrap, &records[third_part.len()..]);
    let third = start("third");
    third.assert_caught_up(&records, Duration::from_secs(120));
    let third_log = third.log_text();
    assert!(third.terminate().success(), "{third_log}");
    assert_same(&published(&broker.bootstrap, prefix, &expect), &expect);
}

/// A stream of `shape` on `prefix`'s topics, produced, and what replaying it publishes; then one
/// incarnation of the service per crash in `crashes`, each run until it dies of that crash.
/// A crash is an environment variable of the `fault-injection` feature, its value, and the
/// line its abort logs.
struct Crashed {
    setup: Setup,
    expect: Published,
    log: std::path::PathBuf,
}

fn crash_each(bootstrap: &str, prefix: &str, shape: &Shape, crashes: &[[&str; 3]]) -> Crashed {
    let setup = setup(bootstrap, prefix, shape, free_port(), "");
    produce(bootstrap, &setup.records);
    let expect = replayed(&setup.config, &setup.records);
    let log = setup.dir.path().join("service.log");
    for (n, [var, value, line]) in crashes.iter().enumerate() {
        if n > 0 {
            support::after_a_kill();
        }
        let mut crashing = Service::start_with(&setup.config, log.clone(), &[(*var, *value)]);
        // It dies at its first epoch with such a flush; one that never comes would hang here.
        let status = crashing.wait_exit(Duration::from_secs(120));
        let text = crashing.log_text();
        assert!(!status.success(), "{var}={value}: {text}");
        let earlier = crashes[..n].iter().filter(|c| c[2] == *line).count();
        assert_eq!(
            text.matches(line).count(),
            earlier + 1,
            "{var}={value}: the crash came from elsewhere: {text}"
        );
    }
    Crashed { setup, expect, log }
}

impl Crashed {
    /// The incarnation after the crashes.
    fn restart(&self) -> Service {
        support::after_a_kill();
        Service::start(&self.setup.config, self.log.clone())
    }
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs --features fault-injection"
)]
fn a_crash_between_changelog_and_commit_is_not_counted_twice() {
    let broker = Broker::shared();
    let shape = Shape {
        partitions: 3,
        projects: 6,
        batches_per_project: 6,
        sessions_per_project: 3,
    };
    // This incarnation aborts right after its first changelog write, before committing offsets:
    // the restart re-reads those records and must skip them (not re-apply, not dead-letter them
    // as duplicates).
    let crashed = crash_each(
        &broker.bootstrap,
        "window",
        &shape,
        &[[
            "JURYSTREAM_CRASH_AFTER_CHANGELOG",
            "1",
            "aborting before the commit",
        ]],
    );
    let records = &crashed.setup.records;
    let service = crashed.restart();
    service.assert_caught_up(records, Duration::from_secs(120));
    let metrics = service.metrics();
    assert!(service.terminate().success());
    assert!(
        metrics.contains("jurystream_records_total{result=\"replayed\""),
        "{metrics}"
    );
    assert_same(
        &published(&broker.bootstrap, "window", &crashed.expect),
        &crashed.expect,
    );
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs --features fault-injection"
)]
fn a_crash_inside_a_changelog_write_counts_everything_once() {
    let broker = Broker::shared();
    let shape = Shape {
        partitions: 3,
        projects: 9,
        batches_per_project: 8,
        sessions_per_project: 4,
    };
    // Two incarnations each die with a flush of a partition of the project log written in part
    // (its first half acknowledged, its offset record not). The restarts must count each record
    // once: no vote or ballot twice (nor dead-lettered as a duplicate), none lost.
    let torn = "aborting inside a changelog write";
    let crashed = crash_each(
        &broker.bootstrap,
        "torn",
        &shape,
        &[
            ["JURYSTREAM_CRASH_MID_CHANGELOG", "p", torn],
            ["JURYSTREAM_CRASH_MID_CHANGELOG", "p", torn],
        ],
    );
    let service = crashed.restart();
    service.assert_caught_up(&crashed.setup.records, Duration::from_secs(120));
    assert!(service.terminate().success());
    assert_same(
        &published(&broker.bootstrap, "torn", &crashed.expect),
        &crashed.expect,
    );
}

/// A broker can report a changelog partition's end below records it has acknowledged (tansu's
/// high watermark lags its last batch): a state restored from there would lack the last flushes
/// that its group's commit says were applied. An instance whose restores take every end as reached before reading a
/// record (a fault injected) reads on to the commit: after a first instance processed half the
/// stream and stopped, it finishes the stream with the tables of a clean run.
#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs --features fault-injection"
)]
fn a_restore_told_the_changelog_ends_early_reads_on_to_the_commit() {
    let broker = Broker::shared();
    let prefix = "short";
    let shape = Shape {
        partitions: 3,
        projects: 6,
        batches_per_project: 6,
        sessions_per_project: 3,
    };
    let setup = setup(&broker.bootstrap, prefix, &shape, free_port(), "");
    let records = &setup.records;
    let expect = replayed(&setup.config, records);
    let half = records.len() / 2;
    produce(&broker.bootstrap, &records[..half]);
    let first = Service::start(&setup.config, setup.dir.path().join("a.log"));
    first.assert_caught_up(&records[..half], Duration::from_secs(120));
    assert!(first.terminate().success());
    produce(&broker.bootstrap, &records[half..]);
    let short = [("JURYSTREAM_RESTORE_STOPS_SHORT", "1")];
    let second = Service::start_with(&setup.config, setup.dir.path().join("b.log"), &short);
    second.assert_caught_up(records, Duration::from_secs(120));
    let log = second.log_text();
    assert!(second.terminate().success(), "{log}");
    assert!(
        log.contains("below the group's commit: reading on"),
        "{log}"
    );
    assert_same(&published(&broker.bootstrap, prefix, &expect), &expect);
}

/// A stop does not wait for a restore: with its changelog gone (the topic deleted), an instance
/// reads on toward its group's commit, which it would give up on only after 30 s, with an
/// error; told to stop meanwhile, it leaves the restore unfinished and exits cleanly at once.
#[test]
fn a_stop_during_a_restore_exits_cleanly_without_waiting_for_it() {
    let broker = Broker::shared();
    let prefix = "stoprestore";
    let Setup {
        dir,
        config,
        records,
    } = small_stream_produced(&broker.bootstrap, prefix);
    let first = Service::start(&config, dir.path().join("a.log"));
    first.assert_caught_up(&records, Duration::from_secs(90));
    first.stop_cleanly();
    support::delete_topic(&broker.bootstrap, &format!("{prefix}.state"));
    std::thread::sleep(Duration::from_secs(1));
    let second = Service::start(&config, dir.path().join("b.log"));
    let reading_on = "below the group's commit: reading on";
    let deadline = Instant::now() + Duration::from_secs(60);
    while !second.log_text().contains(reading_on) {
        assert!(Instant::now() < deadline, "{}", second.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let signalled = Instant::now();
    let log = second.log.clone();
    second.stop_cleanly();
    let took = signalled.elapsed();
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        took < Duration::from_secs(10),
        "stopped after {took:?}: {log}"
    );
    assert!(
        log.contains("stopping: a restore under way left unfinished"),
        "{log}"
    );
}

/// A small stream on `prefix`'s topics, produced: three projects of four vote batches and two
/// sessions each, over three partitions.
fn small_stream_produced(bootstrap: &str, prefix: &str) -> Setup {
    let shape = Shape {
        partitions: 3,
        projects: 3,
        batches_per_project: 4,
        sessions_per_project: 2,
    };
    let setup = setup(bootstrap, prefix, &shape, free_port(), "");
    produce(bootstrap, &setup.records);
    setup
}

/// With everything committed, a restarted instance (`again`, ready) re-reads only the
/// reputation table, which it always reads whole.
fn assert_nothing_reread(again: Service, records: &[Rec]) {
    // Only an instance that owns the partitions could re-read them: its tasks (all three) and
    // the inputs it forwards.
    let deadline = Instant::now() + Duration::from_secs(60);
    let owns = || {
        support::metric_sum(&again.metrics(), "jurystream_partitions_owned") == 3
            && again
                .log_text()
                .lines()
                .any(|l| l.contains("partitions assigned") && l.contains(".votes\""))
    };
    while !owns() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(owns(), "{}", support::handovers(&[&again]));
    std::thread::sleep(Duration::from_secs(3));
    let m = again.metrics();
    let reps = records
        .iter()
        .filter(|r| r.topic.ends_with(".reputations"))
        .count() as u64;
    assert_eq!(
        support::metric_sum(&m, "jurystream_records_total"),
        reps,
        "{m}"
    );
    assert!(again.terminate().success());
}

#[test]
fn sigterm_finishes_commits_and_a_restart_redoes_nothing() {
    let broker = Broker::shared();
    let prefix = "term";
    let Setup {
        dir,
        config,
        records,
    } = small_stream_produced(&broker.bootstrap, prefix);
    let service = Service::start(&config, dir.path().join("a.log"));
    assert_eq!(
        service.wait_handled(inputs(&records), Duration::from_secs(90)),
        inputs(&records)
    );
    let started = Instant::now();
    assert!(service.terminate().success());
    assert!(started.elapsed() < Duration::from_secs(20));
    // Everything was committed: a restart only re-reads the reputation table.
    let again = Service::start_ready(&config, dir.path().join("b.log"));
    assert_nothing_reread(again, &records);
}

/// Slow or many HTTP clients never starve the service: while it consumes a stream, a client
/// holds more half-sent requests than `http.max_connections` and its reserve for the
/// operational endpoints; the stream is fully processed, `/readyz` and `/metrics` answer within
/// about one header timeout throughout, and the half-sent requests are closed by the timeout.
#[test]
fn half_sent_requests_beyond_the_connection_limit_never_starve_the_service() {
    use std::io::{Read, Write};
    let broker = Broker::shared();
    let prefix = "slowloris";
    let port = free_port();
    let Setup {
        dir,
        config,
        records,
    } = setup(&broker.bootstrap, prefix, &sample_shape(), port, "");
    let service = Service::start_with(
        &config,
        dir.path().join("service.log"),
        &[
            ("JURYSTREAM_HTTP__MAX_CONNECTIONS", "8"),
            ("JURYSTREAM_HTTP__HEADER_TIMEOUT_MS", "1000"),
        ],
    );
    assert!(
        service.wait_ready(Duration::from_secs(60)),
        "{}",
        service.log_text()
    );
    // 8 regular connections, the 16 reserved ones and 6 more, each with half a request.
    let mut held: Vec<std::net::TcpStream> = (0..30)
        .filter_map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").ok()?;
            Some(s)
        })
        .collect();
    assert_eq!(held.len(), 30);
    produce(&broker.bootstrap, &records);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut slowest = Duration::ZERO;
    while service.records_handled() < inputs(&records) && Instant::now() < deadline {
        for path in ["/readyz", "/metrics"] {
            let asked = Instant::now();
            while support::http_answer(port, path).is_none_or(|a| a.status != 200)
                && asked.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            slowest = slowest.max(asked.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        service.records_handled(),
        inputs(&records),
        "{}",
        service.log_text()
    );
    service.assert_caught_up(&records, Duration::from_secs(60));
    eprintln!("slowest probe answer under the flood: {slowest:?}");
    assert!(
        slowest < Duration::from_secs(3),
        "a probe waited {slowest:?}"
    );
    // The half-sent requests were closed by the server.
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 16];
        let read = s.read(&mut buf);
        assert!(
            matches!(&read, Ok(0))
                || read
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "still open: {read:?}"
        );
    }
    let metrics = service.metrics();
    assert!(
        support::metric_sum(&metrics, "jurystream_http_connections_refused_total") > 0,
        "{metrics}"
    );
    assert!(service.log_text().contains("file descriptor limit"));
    assert!(service.terminate().success());
}

/// With `http.admin_bind`, the probes and the metrics have a listener of their own: while a
/// client keeps 3,000 half-sent requests going at the `/v1` port and the service consumes a
/// stream, `/readyz` on the admin listener answers within a second every time, `/metrics` too,
/// and each listener serves its own endpoints only.
#[test]
fn probes_on_the_admin_listener_answer_through_a_flood_of_half_sent_requests() {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    let broker = Broker::shared();
    let prefix = "admin";
    let port = free_port();
    let admin = free_port();
    let Setup {
        dir,
        config,
        records,
    } = setup(&broker.bootstrap, prefix, &sample_shape(), port, "");
    let admin_bind = format!("127.0.0.1:{admin}");
    let mut service = Service::start_with(
        &config,
        dir.path().join("service.log"),
        &[("JURYSTREAM_HTTP__ADMIN_BIND", &admin_bind)],
    );
    // The test's helpers read the operational endpoints, which are on the admin port now.
    service.http_port = admin;
    assert!(
        service.wait_ready(Duration::from_secs(60)),
        "{}",
        service.log_text()
    );
    let flooding = AtomicBool::new(true);
    let slowest = std::thread::scope(|s| {
        let flood = s.spawn(|| {
            let mut held = std::collections::VecDeque::new();
            let mut opened = 0u64;
            let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let mut failed = 0u64;
            while flooding.load(Ordering::Relaxed) {
                // A connection the listener's full queue drops would hold the flood for a
                // second until its SYN is sent again: try the next one instead.
                match std::net::TcpStream::connect_timeout(&to, Duration::from_millis(100)) {
                    Ok(mut c) => {
                        let _ = c.write_all(b"GET /v1/projects/p HTTP/1.1\r\nHost: x\r\n");
                        held.push_back(c);
                        opened += 1;
                    }
                    Err(_) => failed += 1,
                }
                // 3,000 at once, then the oldest replaced every few milliseconds.
                if held.len() > 3000 {
                    held.pop_front();
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            eprintln!("flood: {opened} opened, {failed} failed");
            opened
        });
        // The flood stops however this closure ends: a failed probe must fail the test, not
        // leave the scope waiting for a flood that never ends.
        let stop = support::StopOnDrop(&flooding);
        std::thread::sleep(Duration::from_millis(500));
        produce(&broker.bootstrap, &records);
        let mut slowest = Duration::ZERO;
        let until = Instant::now() + Duration::from_secs(8);
        while Instant::now() < until {
            for path in ["/readyz", "/metrics"] {
                let asked = Instant::now();
                let answer = support::http_answer(admin, path);
                assert_eq!(answer.map(|a| a.status), Some(200), "{path}");
                slowest = slowest.max(asked.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(stop);
        let opened = flood.join().expect("flood");
        assert!(opened >= 3000, "only {opened} half-sent requests");
        slowest
    });
    eprintln!("slowest admin answer under the flood: {slowest:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "a probe waited {slowest:?}"
    );
    service.assert_caught_up(&records, Duration::from_secs(60));
    assert_eq!(
        support::http_answer(admin, "/v1/projects/p").map(|a| a.status),
        Some(404)
    );
    assert_eq!(
        support::http_answer(port, "/readyz").map(|a| a.status),
        Some(404)
    );
    assert!(service.terminate().success());
}

/// An input topic deleted and recreated (its offsets start again below what the group
/// committed) stops the service with an error that names the partition and how to start over,
/// instead of skipping every record as already seen. Apache Kafka answers a fetch beyond the
/// recreated log's end with OFFSET_OUT_OF_RANGE and the consumer resets to its start, where
/// the service sees the first record below the committed offset; tansu answers such a fetch
/// with nothing, so there the consumer waits at the committed offset and nothing goes back.
#[test]
fn a_topic_recreated_below_the_committed_offsets_stops_the_service_with_advice() {
    let broker = Broker::shared();
    if broker.is_tansu() {
        eprintln!("SKIPPED: tansu never reports an out-of-range fetch offset (needs Apache Kafka)");
        return;
    }
    let prefix = "recreated";
    let Setup {
        dir,
        config,
        records,
    } = small_stream_produced(&broker.bootstrap, prefix);
    let service = Service::start_ready(&config, dir.path().join("a.log"));
    service.assert_caught_up(&records, Duration::from_secs(90));
    assert!(service.terminate().success());
    let votes = format!("{prefix}.votes");
    let busiest = (0..3)
        .max_by_key(|p| {
            records
                .iter()
                .filter(|r| r.topic == votes && r.partition == *p)
                .count()
        })
        .unwrap_or(0);
    support::delete_topic(&broker.bootstrap, &votes);
    std::thread::sleep(Duration::from_secs(1));
    support::create_topic_with(&broker.bootstrap, &votes, 3, &[]);
    let mut again = records
        .iter()
        .find(|r| r.topic == votes && r.partition == busiest)
        .cloned()
        .expect("a vote");
    again.offset = 0;
    produce(&broker.bootstrap, &[again]);
    let mut service = Service::start(&config, dir.path().join("b.log"));
    let status = service.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "{}", service.log_text());
    let log = service.log_text();
    assert!(
        log.contains(&format!("partition {busiest} of {votes} went back"))
            && log.contains("delete the consumer group"),
        "{log}"
    );
}

/// An epoch ends once the input is quiet, long before `kafka.commit_interval_ms`: with a ten-minute
/// interval, everything is committed within seconds of the last record, so a `kill -9` then loses
/// nothing and a restart re-reads nothing.
#[test]
fn a_quiet_input_is_committed_before_the_epoch_is_over() {
    let broker = Broker::shared();
    let prefix = "quiet";
    let Setup {
        dir,
        config,
        records,
    } = small_stream_produced(&broker.bootstrap, prefix);
    let long = [("JURYSTREAM_KAFKA__COMMIT_INTERVAL_MS", "600000")];
    let service = Service::start_with(&config, dir.path().join("a.log"), &long);
    service.assert_caught_up(&records, Duration::from_secs(60));
    let group = support::GroupOffsets::new(&broker.bootstrap, &format!("{prefix}-group"));
    assert!(
        group.wait_committed(&records, Duration::from_secs(30)),
        "{}",
        service.metrics()
    );
    service.kill();
    support::after_a_kill();
    let again = Service::start_ready_with(&config, dir.path().join("b.log"), &long);
    assert_nothing_reread(again, &records);
}

/// A commit the group refuses, as a broker does in the middle of a rebalance, is made again
/// while the partition is owned: with each stage's first 40 commits refused (10 s of refusals,
/// one a 250 ms cycle), `/readyz` says not ready once they have gone on for 5 s, the input's
/// last records are still committed once it has gone quiet, the service is ready again, and a
/// restart re-reads nothing.
#[test]
fn refused_commits_are_made_again_until_the_group_has_them() {
    let broker = Broker::shared();
    let prefix = "refused";
    let Setup {
        dir,
        config,
        records,
    } = small_stream_produced(&broker.bootstrap, prefix);
    let refused = [
        ("JURYSTREAM_FAIL_COMMITS", "40"),
        ("JURYSTREAM_KAFKA__COMMIT_INTERVAL_MS", "250"),
    ];
    let service = Service::start_with(&config, dir.path().join("a.log"), &refused);
    assert_eq!(
        service.wait_handled(inputs(&records), Duration::from_secs(90)),
        inputs(&records)
    );
    let ready = || support::http_get(service.http_port, "/readyz").is_some_and(|b| b == "ready\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !ready(),
        "ready throughout the refusals: {}",
        service
            .log_text()
            .lines()
            .filter(|l| l.contains("commit"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let group = support::GroupOffsets::new(&broker.bootstrap, &format!("{prefix}-group"));
    assert!(
        group.wait_committed(&records, Duration::from_secs(60)),
        "{}",
        service.metrics()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ready(), "not ready again: {}", service.metrics());
    // Both stages' refusals were counted as what they were.
    let m = service.metrics();
    assert_eq!(
        support::metric_sum(&m, r#"jurystream_commits_total{result="error"}"#),
        80,
        "{m}"
    );
    service.kill();
    support::after_a_kill();
    let again = Service::start_ready(&config, dir.path().join("b.log"));
    assert_nothing_reread(again, &records);
}

#[test]
fn a_missing_topic_is_a_clear_error_when_creation_is_off() {
    let broker = Broker::shared();
    let dir = tempfile::tempdir().unwrap();
    let config = write_test_config(dir.path(), "missing", &broker.bootstrap, free_port(), "");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("[kafka]\n", "[kafka]\ncreate_topics = false\n");
    std::fs::write(&config, text).unwrap();
    let out = std::process::Command::new(support::BIN)
        .args(["--config", &config.to_string_lossy(), "run"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("missing.votes") && stderr.contains("create_topics"),
        "{stderr}"
    );
}

/// With everything before it committed, an outage is reported by `/readyz` as the broker lost
/// (not only as an epoch waiting), and once the broker is back the idle service says ready
/// again without a record to show it; nothing is lost.
#[test]
fn broker_outage_is_reported_by_readyz_and_loses_nothing() {
    // The service reaches the broker only through a proxy; stopping the proxy is the outage.
    let (broker_port, proxy_port) = (free_port(), free_port());
    let broker = Broker::tansu_advertising(broker_port, proxy_port).expect("tansu");
    let proxy = Proxy::start(proxy_port, broker_port);
    let bootstrap = format!("127.0.0.1:{proxy_port}");
    let prefix = "outage";
    let Setup {
        dir,
        config,
        records,
    } = setup(
        &bootstrap,
        prefix,
        &Shape {
            partitions: 3,
            projects: 3,
            batches_per_project: 6,
            sessions_per_project: 2,
        },
        free_port(),
        "",
    );
    let expect = replayed(&config, &records);
    let half = records.len() / 2;
    produce(&bootstrap, &records[..half]);
    let service = Service::start_ready(&config, dir.path().join("s.log"));
    assert_eq!(
        service.wait_handled(half as u64, Duration::from_secs(60)),
        half as u64
    );
    let group = support::GroupOffsets::new(&bootstrap, &format!("{prefix}-group"));
    assert!(group.wait_committed(&records[..half], Duration::from_secs(60)));
    proxy.stop();
    let mut said = None;
    for _ in 0..150 {
        std::thread::sleep(Duration::from_millis(200));
        said = support::http_answer(service.http_port, "/readyz").map(|a| (a.status, a.body));
        if said
            .as_ref()
            .is_some_and(|(_, b)| b.contains("lost the broker"))
        {
            break;
        }
    }
    assert!(
        said.as_ref().is_some_and(|(status, body)| *status == 503
            && body.starts_with("not ready: ")
            && body.contains("lost the broker")),
        "/readyz did not report the outage (last said {said:?}): {}",
        service.log_text()
    );
    let proxy = Proxy::start(proxy_port, broker_port);
    assert!(
        service.wait_ready(Duration::from_secs(60)),
        "not ready after the broker came back: {}",
        service.log_text()
    );
    produce(&bootstrap, &records[half..]);
    service.assert_caught_up(&records, Duration::from_secs(120));
    assert!(service.terminate().success());
    assert_same(&published(&bootstrap, prefix, &expect), &expect);
    proxy.stop();
    broker.stop();
}

#[test]
fn an_independent_python_client_produces_inputs_and_reads_outputs() {
    let python = std::path::Path::new(".venv/bin/python");
    if !python.exists() {
        panic!(".venv is missing: run scripts/install-python.sh (scripts/test.sh does)");
    }
    let broker = Broker::shared();
    let prefix = "interop";
    let Setup {
        dir,
        config,
        records,
    } = setup(
        &broker.bootstrap,
        prefix,
        &Shape {
            partitions: 3,
            projects: 4,
            batches_per_project: 5,
            sessions_per_project: 3,
        },
        free_port(),
        "",
    );
    let input = dir.path().join("input.jsonl");
    std::fs::write(&input, stream::replay_lines(&records)).unwrap();
    let status = std::process::Command::new(python)
        .args([
            "tests/python/interop.py",
            "produce",
            &broker.bootstrap,
            &input.to_string_lossy(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let expect = replayed(&config, &records);
    let service = Service::start(&config, dir.path().join("s.log"));
    assert_eq!(
        service.wait_handled(inputs(&records), Duration::from_secs(90)),
        inputs(&records)
    );
    assert!(service.terminate().success());
    let out = std::process::Command::new(python)
        .args([
            "tests/python/interop.py",
            "consume",
            &broker.bootstrap,
            prefix,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let scores: BTreeMap<String, String> = got["scores"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    assert_eq!(scores, expect.scores);
    assert_eq!(
        got["consensus"].as_u64(),
        Some(expect.consensus.len() as u64)
    );
    assert_eq!(
        got["dead_letters"].as_u64(),
        Some(expect.dead_letters.len() as u64)
    );
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_real_prometheus_scrapes_the_service_and_every_dashboard_query_works() {
    let promtool = std::process::Command::new("promtool")
        .args(["check", "rules", "deploy/jurystream.rules.yml"])
        .output()
        .expect("promtool (scripts/test.sh installs Debian's prometheus)");
    assert!(
        promtool.status.success(),
        "{}",
        String::from_utf8_lossy(&promtool.stdout)
    );
    let broker = Broker::shared();
    let prefix = "dash";
    let http_port = free_port();
    let Setup {
        dir,
        config,
        records,
    } = setup(
        &broker.bootstrap,
        prefix,
        &Shape {
            partitions: 3,
            projects: 4,
            batches_per_project: 5,
            sessions_per_project: 3,
        },
        http_port,
        "",
    );
    let service = Service::start_ready(&config, dir.path().join("s.log"));
    let prom_port = free_port();
    let prom_cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &prom_cfg,
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: jurystream\n    static_configs:\n      - targets: [\"127.0.0.1:{http_port}\"]\n"),
    )
    .unwrap();
    let mut prometheus = std::process::Command::new("prometheus")
        .arg(format!("--config.file={}", prom_cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("prometheus");
    // Traffic in two waves, so rates over the scrapes are non-zero.
    let half = records.len() / 2;
    produce(&broker.bootstrap, &records[..half]);
    std::thread::sleep(Duration::from_secs(3));
    produce(&broker.bootstrap, &records[half..]);
    service.wait_handled(records.len() as u64, Duration::from_secs(60));
    // Queries, so their panel has a rate to show.
    for _ in 0..5 {
        support::http_get(http_port, "/v1/projects/dash-nobody");
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(2));
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("grafana/jurystream.json").unwrap()).unwrap();
    // The dashboard's job and instance variables, as Grafana fills them (label_values of
    // jurystream_build_info) when this service is the one chosen.
    let instance = format!("127.0.0.1:{http_port}");
    let body = support::http_get(prom_port, "/api/v1/series?match[]=jurystream_build_info")
        .unwrap_or_default();
    let series: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(series["data"][0]["job"], "jurystream", "{body}");
    assert_eq!(series["data"][0]["instance"], instance.as_str(), "{body}");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "job", "instance"]);
    let mut checked = 0;
    let mut empty = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            // Every query is of the chosen job and instances.
            assert!(
                expr.matches("jurystream_").count()
                    == expr
                        .matches("job=~\"$job\", instance=~\"$instance\"")
                        .count(),
                "{expr}"
            );
            let expr = &expr
                .replace("$job", "jurystream")
                .replace("$instance", &instance);
            let body =
                support::http_get(prom_port, &format!("/api/v1/query?query={}", encode(expr)))
                    .unwrap_or_default();
            let v: serde_json::Value =
                serde_json::from_str(&body).unwrap_or_else(|_| panic!("{expr}: {body}"));
            assert_eq!(v["status"], "success", "{expr}: {body}");
            if v["data"]["result"].as_array().is_none_or(|r| r.is_empty()) {
                empty.push(expr.to_owned());
            }
            checked += 1;
        }
    }
    let _ = prometheus.kill();
    let _ = prometheus.wait();
    assert!(service.terminate().success());
    assert!(checked >= 22);
    // Every series the dashboard plots exists once the service has seen traffic; the lag and
    // the latency histograms need librdkafka statistics and score deliveries, which a short run
    // may not have yet, so at most a few panels may still be empty.
    for must in [
        "jurystream_records_total",
        "jurystream_output_records_total",
        "jurystream_projects",
        "jurystream_ready",
        "jurystream_bias_alerts_total",
        "jurystream_project_score",
        "jurystream_queries_total",
        "jurystream_query_view_projects",
        "jurystream_judge_kappa",
        "jurystream_judge_items",
        "jurystream_reviewers",
        "jurystream_reviewer_fits",
    ] {
        assert!(
            !empty.iter().any(|e| e.contains(must)),
            "no data for {must}; empty: {empty:?}"
        );
    }
}

/// Appends `value` to `records` as the next record of `topic`'s `partition`.
fn append(records: &mut Vec<Rec>, topic: &str, partition: i32, key: Option<String>, value: &str) {
    let offset = records
        .iter()
        .filter(|r| r.topic == topic && r.partition == partition)
        .map(|r| r.offset + 1)
        .max()
        .unwrap_or(0);
    records.push(Rec {
        topic: topic.to_owned(),
        partition,
        offset,
        key,
        timestamp_ms: 1_795_168_800_000,
        value: Some(value.to_owned()),
    });
}

/// One hostile record of each kind in a live stream: every other record is published as replay
/// publishes it, the one output the producer refuses (a consensus larger than its configured
/// `message.max.bytes`) is counted and dropped without holding anything up, and the service is
/// ready throughout.
#[test]
fn poison_records_never_wedge_the_service() {
    let broker = Broker::shared();
    let prefix = "poison";
    let port = free_port();
    // Applied where produced (`by_key`: every record here is keyed by its project): a
    // producer limit this low would also refuse to forward the 900 kB verdict below, which
    // `repartition_hostile_records_are_dead_lettered_where_they_are_read` covers. A project's
    // bias audit and a category's ranking that such records hold are refused at start unless
    // bounded to fit.
    let extra = "[input]\npartitioning = \"by_key\"\n\n[limits]\ndead_letter_payload_bytes = 4096\n\n[kafka.producer]\n\"message.max.bytes\" = \"150000\"\n\n[bias]\nproject_max_judges = 16\nproject_max_positions = 100\n\n[leaderboard]\nmax_models = 20\n";
    let Setup {
        dir,
        config,
        mut records,
    } = setup(&broker.bootstrap, prefix, &sample_shape(), port, extra);
    let (votes, judges) = (format!("{prefix}.votes"), format!("{prefix}.judge-scores"));
    let vote = |event: &str, at: &str, rest: &str| {
        format!(
            r#"{{"event_id": "{event}", "project_id": "proj-0", "occurred_at": {at}, "votes": [{{"voter_id": "u-1", "value": 1{rest}}}]}}"#
        )
    };
    let ballot = |event: &str, session: &str, rest: &str| {
        format!(
            r#"{{"event_id": "{event}", "project_id": "proj-1", "session_id": "{session}", "occurred_at": 1795168800000, "judge": "judge-0", "expected_judges": 1{rest}}}"#
        )
    };
    let key = |p: &str| Some(p.to_owned());
    // A verdict of 150,000 control characters (a dead letter that echoed it was 977 kB).
    let verdict = format!(
        r#"{{"event_id": "x-1", "project_id": "proj-0", "votes": [{{"voter_id": "u-1", "verdict": "{}"}}]}}"#,
        "\\u0001".repeat(150_000)
    );
    append(&mut records, &votes, 0, key("proj-0"), &verdict);
    // A 200 kB key of control characters on a record that is not an event.
    append(
        &mut records,
        &votes,
        0,
        Some("\u{1}".repeat(200_000)),
        "{not json",
    );
    // A leap second (applied), a far-future occurred_at, a lone surrogate, duplicate members,
    // an unset occurred_at, nesting 100,000 deep.
    append(
        &mut records,
        &votes,
        0,
        key("proj-0"),
        &vote("x-2", r#""2026-11-20T10:59:60Z""#, ""),
    );
    append(
        &mut records,
        &votes,
        0,
        key("proj-0"),
        &vote("x-3", r#""2099-01-01T00:00:00Z""#, ""),
    );
    append(
        &mut records,
        &votes,
        0,
        key("proj-0"),
        &vote("x-4", "1795168800000", r#", "x": "\ud800""#),
    );
    append(
        &mut records,
        &votes,
        0,
        key("proj-0"),
        &vote("x-5", "1795168800000", r#", "x": 1, "x": 2"#),
    );
    // An occurred_at left unset (0) on a record stamped in 2026.
    append(
        &mut records,
        &votes,
        0,
        key("proj-0"),
        &vote("x-7", "0", ""),
    );
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    append(
        &mut records,
        &votes,
        0,
        key("proj-0"),
        &vote("x-6", "1795168800000", &format!(r#", "x": {deep}"#)),
    );
    // A scale whose width overflows (applied: a 5 is 0.5), a session beyond
    // sessions.max_candidates, and a valid session whose consensus (~270 kB) the producer
    // refuses.
    append(
        &mut records,
        &judges,
        1,
        key("proj-1"),
        &ballot(
            "y-1",
            "wide",
            r#", "scale": {"min": -1e308, "max": 1e308}, "scores": {"A": 5}"#,
        ),
    );
    let many: Vec<String> = (0..1001).map(|c| format!(r#""c{c}": 5"#)).collect();
    append(
        &mut records,
        &judges,
        1,
        key("proj-1"),
        &ballot(
            "y-2",
            "many",
            &format!(r#", "scores": {{{}}}"#, many.join(", ")),
        ),
    );
    let long: Vec<String> = (0..400)
        .map(|c| format!(r#""{}{c:04}": {}"#, "c".repeat(226), c % 10 + 1))
        .collect();
    append(
        &mut records,
        &judges,
        1,
        key("proj-1"),
        &ballot(
            "y-3",
            "long",
            &format!(r#", "scores": {{{}}}"#, long.join(", ")),
        ),
    );
    produce(&broker.bootstrap, &records);
    let mut expect = replayed(&config, &records);
    let refused: Vec<String> = expect
        .consensus
        .iter()
        .filter(|c| c.len() > 150_000)
        .cloned()
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one consensus record is beyond the producer's limit"
    );
    expect.consensus.remove(&refused[0]);
    let codes: BTreeSet<String> = expect
        .dead_letters
        .iter()
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|d| d["error"].as_str().map(str::to_owned))
        .collect();
    for code in [
        "unknown_verdict",
        "invalid_json",
        "occurred_at_in_future",
        "invalid_timestamp",
        "duplicate_field",
        "session_limit",
    ] {
        assert!(codes.contains(code), "{code} in {codes:?}");
    }
    assert!(expect.dead_letters.iter().all(|d| d.len() < 100_000));

    let service = Service::start_ready(&config, dir.path().join("service.log"));
    // Ready throughout: /readyz polled every 50 ms until every record is handled.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut not_ready = 0;
    while service.records_handled() < inputs(&records) && Instant::now() < deadline {
        if !support::http_get(port, "/readyz").is_some_and(|b| b.starts_with("ready")) {
            not_ready += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        service.records_handled(),
        inputs(&records),
        "{}",
        service.log_text()
    );
    assert_eq!(
        not_ready,
        0,
        "not ready {not_ready} times: {}",
        service.log_text()
    );
    service.assert_caught_up(&records, Duration::from_secs(30));
    let metrics = service.metrics();
    assert_eq!(
        support::metric_sum(&metrics, "jurystream_outputs_refused_total"),
        1,
        "{metrics}"
    );
    // A clean stop publishes and commits everything before the outputs are read.
    let status = service.terminate();
    assert!(status.success(), "exit {status:?}");
    assert_same(&published(&broker.bootstrap, prefix, &expect), &expect);
}

/// The topics of a test of one project's few records: three partitions, the stream generated
/// for them not produced.
const ONE_PROJECT: Shape = Shape {
    partitions: 3,
    projects: 1,
    batches_per_project: 1,
    sessions_per_project: 1,
};

/// The shared broker and a setup of one project for a service with `sessions.idle_timeout_secs
/// = 2`, whose ticks come every second.
fn ticking(prefix: &str) -> (&'static Broker, Setup) {
    let broker = Broker::shared();
    let settings = "[sessions]\nidle_timeout_secs = 2\n";
    let setup = setup(
        &broker.bootstrap,
        prefix,
        &ONE_PROJECT,
        free_port(),
        settings,
    );
    (broker, setup)
}

/// A quiet project's one session (a ballot of one judge, who is never joined), produced for a
/// service with `sessions.idle_timeout_secs = 2` started with `env`: its directory, the service
/// once ready, and the session's consensus record, read within 30 s, asserted one, `idle`.
fn quiet_session(prefix: &str, env: &[(&str, &str)]) -> (tempfile::TempDir, Service) {
    let (broker, Setup { dir, config, .. }) = ticking(prefix);
    let mut records = Vec::new();
    append(
        &mut records,
        &format!("{prefix}.judge-scores"),
        0,
        Some("p-idle".into()),
        r#"{"event_id": "b1", "project_id": "p-idle", "session_id": "s-idle", "occurred_at": 1795168800000, "judge": "j", "scores": {"A": 8, "B": 3}}"#,
    );
    produce(&broker.bootstrap, &records);
    let service = Service::start_ready_with(&config, dir.path().join("service.log"), env);
    let consensus = support::read_all(
        &broker.bootstrap,
        &format!("{prefix}.consensus"),
        1,
        Duration::from_secs(30),
    );
    let values: Vec<serde_json::Value> = consensus
        .iter()
        .filter_map(|(_, v)| serde_json::from_str(v.as_deref()?).ok())
        .collect();
    assert_eq!(values.len(), 1, "{consensus:?}\n{}", service.metrics());
    assert_eq!(values[0]["session_id"], "s-idle");
    assert_eq!(values[0]["completed_by"], "idle");
    (dir, service)
}

/// A session whose judges never all report, in a project that then receives nothing, completes
/// by the service's ticks (`idle`) once `sessions.idle_timeout_secs` of wall clock passed,
/// where before it stayed open for as long as its project was quiet.
#[test]
fn a_session_in_a_quiet_project_completes_by_the_idle_timeout() {
    let started = Instant::now();
    let (_dir, service) = quiet_session("idle", &[]);
    // Ready, then the ballot, then two seconds of ticks a second apart.
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    // Ticks are the service's own records: no input is counted for them.
    assert_eq!(service.records_handled(), 1, "{}", service.metrics());
}

/// Sessions that complete within `leaderboard.bt_interval_secs` of their category's last fit
/// and are followed by nothing are in its Bradley-Terry ratings a tick later, where before the
/// ratings waited for a later session, which a quiet project never sends: here m-a wins the
/// first of four sessions and m-b the other three, and the ratings said m-a led.
#[test]
fn a_quiet_categorys_ratings_take_in_its_last_sessions_by_the_ticks() {
    let prefix = "bt-quiet";
    let (broker, Setup { dir, config, .. }) = ticking(prefix);
    let mut records = Vec::new();
    for (i, (a, b)) in [(9, 5), (2, 5), (2, 5), (2, 5)].into_iter().enumerate() {
        let at = 1_795_168_800_000_i64 + 10_000 * i as i64;
        append(
            &mut records,
            &format!("{prefix}.judge-scores"),
            0,
            Some("p-bt".into()),
            &format!(
                r#"{{"event_id": "b{i}", "project_id": "p-bt", "session_id": "s{i}", "occurred_at": {at}, "judge": "j", "scores": {{"A{i}": {a}, "B{i}": {b}}}, "candidates": {{"A{i}": {{"author": "m-a"}}, "B{i}": {{"author": "m-b"}}}}, "expected_judges": 1}}"#
            ),
        );
    }
    produce(&broker.bootstrap, &records);
    let service = Service::start_ready(&config, dir.path().join("service.log"));
    // Two rows a session, then both again when a tick refits the category.
    let rows = support::read_all(
        &broker.bootstrap,
        &format!("{prefix}.leaderboard"),
        10,
        Duration::from_secs(30),
    );
    assert!(service.terminate().success());
    let last: BTreeMap<String, serde_json::Value> = rows
        .iter()
        .filter_map(|(_, v)| serde_json::from_str::<serde_json::Value>(v.as_deref()?).ok())
        .map(|v| (v["model"].as_str().unwrap_or("").to_owned(), v))
        .collect();
    assert_eq!(rows.len(), 10, "{rows:?}");
    for model in ["m-a", "m-b"] {
        assert_eq!(
            last[model]["bt_fitted_at"], "2026-11-20T10:00:30Z",
            "{model}"
        );
    }
    let rating = |model: &str| last[model]["bt_rating"].as_f64().unwrap_or(f64::NAN);
    assert!(rating("m-b") > rating("m-a"), "{last:?}");
}

/// A producer whose host clock is a day ahead stamps its records and its `occurred_at` alike:
/// the service bounds both by its own clock when it first read the record, so the vote is
/// dead-lettered `event_time_in_future` instead of freezing its project's score for a day (every
/// honest vote `late` until then), and the honest vote after it moves the score. Whether the
/// service repartitions (the forward's timestamp is when it read the record) or not.
#[test]
fn a_producer_clock_a_day_ahead_is_dead_lettered_by_the_services_clock() {
    producer_clock_a_day_ahead("clock-ahead", "");
    producer_clock_a_day_ahead("clock-ahead-by-key", "[input]\npartitioning = \"by_key\"\n");
}

fn producer_clock_a_day_ahead(prefix: &str, settings: &str) {
    let broker = Broker::shared();
    let Setup { dir, config, .. } = setup(
        &broker.bootstrap,
        prefix,
        &ONE_PROJECT,
        free_port(),
        settings,
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let day = 86_400_000;
    let vote = |event: &str, ms: i64| {
        format!(
            r#"{{"event_id": "{event}", "project_id": "p-clock", "occurred_at": {ms}, "votes": [{{"voter_id": "u", "value": 1}}]}}"#
        )
    };
    let topic = format!("{prefix}.votes");
    let record = |offset: i64, event: &str, ms: i64| Rec {
        topic: topic.clone(),
        partition: 0,
        offset,
        key: Some("p-clock".into()),
        timestamp_ms: ms,
        value: Some(vote(event, ms)),
    };
    let records = [record(0, "ahead", now + day), record(1, "honest", now)];
    produce(&broker.bootstrap, &records);
    let service = Service::start_ready(&config, dir.path().join("service.log"));
    let letters = support::read_all(
        &broker.bootstrap,
        &format!("{prefix}.dead-letters"),
        1,
        Duration::from_secs(30),
    );
    let letter: serde_json::Value = letters
        .iter()
        .find_map(|(_, v)| serde_json::from_str(v.as_deref()?).ok())
        .expect("a dead letter");
    assert_eq!(letter["error"], "event_time_in_future", "{letter}");
    assert!(
        letter["message"]
            .as_str()
            .is_some_and(|m| m.contains("after the service first read the record")),
        "{letter}"
    );
    let scores = support::read_all(
        &broker.bootstrap,
        &format!("{prefix}.scores"),
        1,
        Duration::from_secs(30),
    );
    assert_eq!(scores.len(), 1, "{scores:?}\n{}", service.metrics());
    let score: serde_json::Value =
        serde_json::from_str(scores[0].1.as_deref().unwrap_or_default()).expect("a score");
    assert_eq!(score["evaluations"], 1, "{score}");
}

/// The records an instance applies were forwarded by an instance whose clock is an hour ahead
/// (the fault sets the clock the processors read an hour behind the one librdkafka stamps
/// forwards with): the service says so, as idle sessions would complete early or late when a
/// partition moves between the two, and applies the records as ever.
#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs --features fault-injection"
)]
fn a_forward_from_a_clock_ahead_is_said() {
    let broker = Broker::shared();
    let prefix = "clock-disagree";
    let Setup { dir, config, .. } = setup(&broker.bootstrap, prefix, &ONE_PROJECT, free_port(), "");
    let mut records = Vec::new();
    append(
        &mut records,
        &format!("{prefix}.votes"),
        0,
        Some("p-clock".into()),
        r#"{"event_id": "v1", "project_id": "p-clock", "occurred_at": 1795168800000, "votes": [{"voter_id": "u", "value": 1}]}"#,
    );
    produce(&broker.bootstrap, &records);
    let service = Service::start_ready_with(
        &config,
        dir.path().join("service.log"),
        &[("JURYSTREAM_CLOCK_BEHIND_MS", "3600000")],
    );
    assert_eq!(service.wait_handled(1, Duration::from_secs(30)), 1);
    let said = said_once(
        &service,
        "jurystream_clock_disagreements_total",
        "forwarded by an instance whose clock is ",
    );
    assert!((said - 3600.0).abs() < 5.0, "{said}");
}

/// Waits until the counter `metric` is 1 (and no more), and returns the seconds the service's
/// log says after `words`, where it said why.
fn said_once(service: &Service, metric: &str, words: &str) -> f64 {
    let metrics = service.wait_metric(metric, 1, Duration::from_secs(10));
    assert!(metrics.contains(&format!("{metric} 1\n")), "{metrics}");
    let log = service.log_text();
    log.split(words)
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|secs| secs.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {words:?} in the log: {log}"))
}

/// A host clock stepped back an hour while the service runs (the fault steps the wall clock the
/// ticks read from the third tick on, after the session went idle by the true clock) neither
/// holds the quiet project's session for that hour nor passes unsaid: it completes `idle` as
/// with a steady clock, and the step is counted.
#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs --features fault-injection"
)]
fn a_wall_clock_stepped_back_holds_no_idle_session() {
    let (_dir, service) = quiet_session("clock-step", &[("JURYSTREAM_STEP_CLOCK_MS", "-3600000")]);
    let said = said_once(
        &service,
        "jurystream_clock_steps_total",
        "the wall clock stepped ",
    );
    // An hour back, give or take the milliseconds between reading the two clocks.
    assert!((said + 3600.0).abs() < 1.0, "{said}");
}
