//! Soak: jurystream under a steady offered load with poison in it, watched over time. One
//! producer thread offers `SOAK_RATE` (default 10,000) vote batches a second over `SOAK_PROJECTS`
//! (default 100) projects for `SOAK_SECS` (default 1800), one in every 1,000 a hostile record (cycling through invalid
//! JSON, NaN, a far-future occurred_at, duplicate members, 1,000-deep nesting, a 20 kB verdict of
//! control characters, a 20 kB key of control characters); a reader thread follows `jury.scores`
//! live. Every `SOAK_SAMPLE_SECS` (default 60) a row gives the service's RSS, its consumer lag,
//! records handled and dead-lettered, and the p50/p99 of event-to-publish latency of the scores
//! published in that window. Flat is the goal. With 10,000 projects nearly every event makes a
//! score and a changelog record, and over a run this long tansu's in-memory log, never compacted,
//! slowed the broker itself (docs/performance.md); 100 projects keep its load to the input. Each project remembers its last 500 event ids
//! (`limits.dedupe_window`), so its memory stops growing once they are full.
//!
//! Run: `scripts/bench-soak.sh` (a release broker), or `cargo bench --bench soak` with
//! `KAFKA_BOOTSTRAP_SERVERS`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{Message, Timestamp};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use support::{Broker, Service, create_topics, free_port, write_config};

const PARTITIONS: i32 = 3;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Event `i` at `at` ms: (key, payload), every 1,000th a hostile one.
fn event(i: u64, projects: u64, at: i64) -> (String, String) {
    let project = format!("proj-{:05}", i % projects);
    let plain = |rest: &str, occurred: String| {
        format!(
            r#"{{"event_id":"ev-{i:010}","project_id":"{project}","occurred_at":{occurred},"votes":[{{"voter_id":"u-{:03}","value":0.75{rest}}}]}}"#,
            i % 1000
        )
    };
    if i % 1000 != 999 {
        let payload = plain("", at.to_string());
        return (project, payload);
    }
    let payload = match (i / 1000) % 7 {
        0 => "{not json".to_owned(),
        1 => plain(r#","x":NaN"#, at.to_string()),
        2 => plain("", r#""2099-01-01T00:00:00Z""#.to_owned()),
        3 => plain(r#","x":1,"x":2"#, at.to_string()),
        4 => plain(
            &format!(r#","x":{}{}"#, "[".repeat(1000), "]".repeat(1000)),
            at.to_string(),
        ),
        5 => plain(
            &format!(r#","verdict":"{}""#, "\\u0001".repeat(20_000)),
            at.to_string(),
        ),
        _ => return ("\u{1}".repeat(20_000), "{}".to_owned()),
    };
    (project, payload)
}

/// Offers `rate` events/s until `stop`.
fn offer(bootstrap: &str, topic: &str, (rate, projects): (u64, u64), stop: &AtomicBool) -> u64 {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let started = Instant::now();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        let (key, payload) = event(i, projects, now_ms());
        let partition = ((i % projects) % PARTITIONS as u64) as i32;
        let rec = BaseRecord::<str, str>::to(topic)
            .key(&key)
            .payload(&payload)
            .partition(partition);
        support::send_waiting(&p, rec, Duration::from_millis(5));
        p.poll(Duration::ZERO);
        i += 1;
    }
    p.flush(Duration::from_secs(60)).expect("flush");
    i
}

/// Follows `topic` from the beginning until `stop`, pushing each record's latency (publish time
/// minus its `last_event_at`) into `latencies`.
fn follow(bootstrap: &str, topic: &str, latencies: &Mutex<Vec<i64>>, stop: &AtomicBool) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("soak-reader-{}", free_port()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .expect("consumer");
    jurystream::kafka::clients::assign_from_beginning(
        &c,
        (
            topic,
            jurystream::kafka::clients::partition_count(&c, topic).expect("metadata"),
        ),
    )
    .expect("assign");
    while !stop.load(Ordering::Relaxed) {
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let published = match m.timestamp() {
            Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) => t,
            Timestamp::NotAvailable => continue,
        };
        let v: serde_json::Value =
            serde_json::from_slice(m.payload().unwrap_or_default()).unwrap_or_default();
        let at = v["last_event_at"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.timestamp_millis());
        if let (Some(at), Ok(mut l)) = (at, latencies.lock()) {
            l.push(published - at);
        }
    }
}

fn rss_mb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("soak benchmark: run with `cargo bench --bench soak`");
        return;
    }
    let (rate, projects, secs, every) = (
        env("SOAK_RATE", 10_000),
        env("SOAK_PROJECTS", 100),
        env("SOAK_SECS", 1800),
        env("SOAK_SAMPLE_SECS", 60),
    );
    let broker = Broker::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = format!("soak-{}", std::process::id());
    create_topics(&broker.bootstrap, &prefix, PARTITIONS);
    let config = write_config(
        dir.path(),
        &prefix,
        &broker.bootstrap,
        free_port(),
        // Each project's window of 500 ids fills within seconds: memory should then stay flat.
        "[log]\nlevel = \"warn\"\n\n[limits]\ndedupe_window = 500\n",
    );
    let service = Service::start_ready(&config, dir.path().join("soak.log"));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let votes = format!("{prefix}.votes");
    let producer = {
        let (bootstrap, stop) = (broker.bootstrap.clone(), Arc::clone(&stop));
        std::thread::spawn(move || offer(&bootstrap, &votes, (rate, projects), &stop))
    };
    let reader = {
        let (bootstrap, stop, latencies) = (
            broker.bootstrap.clone(),
            Arc::clone(&stop),
            Arc::clone(&latencies),
        );
        let topic = format!("{prefix}.scores");
        std::thread::spawn(move || follow(&bootstrap, &topic, &latencies, &stop))
    };
    println!(
        "soak: {rate} events/s offered over {projects} projects for {secs} s, one poison record per 1,000, broker {}",
        broker.bootstrap
    );
    println!(
        "| minute | service RSS (MB) | consumer lag (records) | handled | dead-lettered | scores published | latency p50 (ms) | p99 (ms) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let started = Instant::now();
    let pid = service.child.id();
    let mut next = every;
    while next <= secs {
        let wait = Duration::from_secs(next).saturating_sub(started.elapsed());
        std::thread::sleep(wait);
        let mut window = latencies
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        window.sort_unstable();
        let m = service.metrics();
        let sum = |name: &str| support::metric_sum(&m, name);
        let dead = m
            .lines()
            .filter(|l| l.starts_with("jurystream_records_total") && l.contains("dead_lettered"))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum::<f64>();
        println!(
            "| {:.1} | {} | {} | {} | {dead} | {} | {} | {} |",
            next as f64 / 60.0,
            rss_mb(pid),
            sum("jurystream_consumer_lag_records"),
            sum("jurystream_records_total"),
            window.len(),
            percentile(&window, 0.5),
            percentile(&window, 0.99),
        );
        next += every;
    }
    stop.store(true, Ordering::Relaxed);
    let offered = producer.join().unwrap_or(0);
    let _ = reader.join();
    let handled = service.wait_handled(offered, Duration::from_secs(120));
    println!("offered {offered}, handled {handled}");
    let _ = service.terminate();
}
