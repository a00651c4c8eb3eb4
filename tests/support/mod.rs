//! Shared harness for the Kafka tests: a real broker, the jurystream binary, and helpers to
//! produce inputs and read outputs. Never a mocked Kafka.
//!
//! The broker is, in order of preference: `KAFKA_BOOTSTRAP_SERVERS` if set; an Apache Kafka
//! container via testcontainers when a Docker engine is reachable; else a local `tansu` broker
//! (memory storage) on a free port, stopped when the test process exits.

#![allow(dead_code)]

pub mod published;
pub mod stream;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use jurystream::kafka::clients;

pub const BIN: &str = env!("CARGO_BIN_EXE_jurystream");

/// The counter of input records handled (every result), summed over its labels.
const HANDLED: &str = "jurystream_records_total";

/// A running broker.
pub struct Broker {
    pub bootstrap: String,
    _guard: Guard,
}

enum Guard {
    External,
    /// `read` in this shell returns when our end of its stdin closes (the test process exits),
    /// and then it kills tansu.
    Tansu(Child, tempfile::TempDir),
    Container(Box<dyn std::any::Any + Send + Sync>),
}

impl Broker {
    /// Whether this is a tansu broker the tests started (not Apache Kafka).
    pub fn is_tansu(&self) -> bool {
        matches!(self._guard, Guard::Tansu(..))
    }

    /// The broker shared by all tests of one test binary.
    pub fn shared() -> &'static Broker {
        static BROKER: OnceLock<Broker> = OnceLock::new();
        BROKER.get_or_init(|| {
            Broker::start().unwrap_or_else(|e| panic!("no Kafka broker for the tests: {e}"))
        })
    }

    fn start() -> Result<Broker, String> {
        if let Ok(b) = std::env::var("KAFKA_BOOTSTRAP_SERVERS")
            && !b.is_empty()
        {
            return Ok(Broker {
                bootstrap: b,
                _guard: Guard::External,
            });
        }
        if docker_reachable() {
            match container() {
                Ok(b) => return Ok(b),
                Err(e) => eprintln!("Kafka container unavailable ({e}); falling back to tansu"),
            }
        }
        Broker::tansu()
    }

    /// A broker of its own (tansu), for tests that stop and restart it.
    pub fn tansu() -> Result<Broker, String> {
        let port = free_port();
        Broker::tansu_on(port)
    }

    pub fn tansu_on(port: u16) -> Result<Broker, String> {
        Broker::tansu_advertising(port, port)
    }

    /// A tansu broker listening on `port` that tells clients to connect to `advertised` (a proxy).
    pub fn tansu_advertising(port: u16, advertised: u16) -> Result<Broker, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let url = format!("tcp://127.0.0.1:{port}");
        let adv = format!("tcp://127.0.0.1:{advertised}");
        let script = format!(
            "tansu broker --listener-url {url} --advertised-listener-url {adv} --storage-engine memory://tansu/ >tansu.log 2>&1 & t=$!; read _; kill $t"
        );
        let child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting tansu: {e}"))?;
        let bootstrap = format!("127.0.0.1:{port}");
        wait_for_port(port, Duration::from_secs(20))?;
        Ok(Broker {
            bootstrap,
            _guard: Guard::Tansu(child, dir),
        })
    }

    /// Stops a dedicated tansu broker.
    pub fn stop(self) {
        if let Guard::Tansu(mut child, _dir) = self._guard {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

/// A TCP proxy in front of a broker: stopping it is a broker outage that keeps the broker's data.
pub struct Proxy {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    pub fn start(port: u16, upstream: u16) -> Proxy {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::<std::net::TcpStream>::new()));
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("proxy port");
        listener.set_nonblocking(true).expect("nonblocking");
        let (s, c) = (stop.clone(), conns.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream))
                        else {
                            continue;
                        };
                        let _ = client.set_nonblocking(false);
                        for (mut from, mut to) in [
                            (
                                client.try_clone().expect("clone"),
                                server.try_clone().expect("clone"),
                            ),
                            (
                                server.try_clone().expect("clone"),
                                client.try_clone().expect("clone"),
                            ),
                        ] {
                            std::thread::spawn(move || {
                                let _ = std::io::copy(&mut from, &mut to);
                                let _ = to.shutdown(std::net::Shutdown::Both);
                            });
                        }
                        if let Ok(mut list) = c.lock() {
                            list.push(client);
                            list.push(server);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            port,
            stop,
            conns,
            thread: Some(thread),
        }
    }

    /// Closes the listener and every connection.
    pub fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Ok(list) = self.conns.lock() {
            for s in list.iter() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

fn docker_reachable() -> bool {
    std::env::var("DOCKER_HOST").is_ok_and(|h| !h.is_empty())
        || Path::new("/var/run/docker.sock").exists()
}

/// An Apache Kafka container; errors (no engine, no image) are returned, never a panic.
fn container() -> Result<Broker, String> {
    use testcontainers_modules::kafka::apache;
    use testcontainers_modules::testcontainers::runners::AsyncRunner;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let node = apache::Kafka::default()
            .start()
            .await
            .map_err(|e| e.to_string())?;
        let port = node
            .get_host_port_ipv4(apache::KAFKA_PORT)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Broker {
            bootstrap: format!("127.0.0.1:{port}"),
            _guard: Guard::Container(Box::new(node)),
        })
    })
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(19_092)
}

fn wait_for_port(port: u16, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("nothing listens on port {port}"))
}

/// One Kafka record, as in a replay file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rec {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub timestamp_ms: i64,
    /// The payload bytes as text; `None` is a tombstone.
    pub value: Option<String>,
}

/// Topic names unique to one test, so tests can share a broker.
pub fn topics(prefix: &str) -> BTreeMap<&'static str, String> {
    [
        ("votes", "votes"),
        ("judge_scores", "judge-scores"),
        ("reputations", "reputations"),
        ("scores", "scores"),
        ("consensus", "consensus"),
        ("bias_alerts", "bias-alerts"),
        ("leaderboard", "leaderboard"),
        ("dead_letters", "dead-letters"),
        ("judge_quality", "judge-quality"),
        ("review_requests", "review-requests"),
        ("reviewer_quality", "reviewer-quality"),
        ("state", "state"),
    ]
    .into_iter()
    .map(|(k, v)| (k, format!("{prefix}.{v}")))
    .collect()
}

/// The group session timeout of a test service ([`write_config`]): a killed instance stays a
/// member of its groups this long.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// Waits until a test service killed just now has left its groups, its session expired, before
/// a test starts the next instance of the group. When a killed leader's session expires between
/// a new member's join and its sync, tansu drops the leader at the sync and takes the new
/// member's empty assignment for the group's: the new member then waits with no partitions
/// until the group changes again (seen in CI: 180 s with nothing forwarded). Apache Kafka
/// answers such a sync with a new rebalance. These restarts test what state and offsets
/// survive, not the broker's rebalances.
pub fn after_a_kill() {
    std::thread::sleep(SESSION_TIMEOUT + Duration::from_secs(1));
}

/// Writes a configuration for a test service.
pub fn write_config(
    dir: &Path,
    prefix: &str,
    bootstrap: &str,
    http_port: u16,
    extra: &str,
) -> PathBuf {
    let t = topics(prefix);
    let mut text = String::from("[topics]\n");
    for (k, v) in &t {
        text.push_str(&format!("{k} = \"{v}\"\n"));
    }
    text.push_str(&format!(
        "\n[kafka]\nbootstrap_servers = \"{bootstrap}\"\ngroup_id = \"{prefix}-group\"\npartitions = 3\nfetch_wait_max_ms = 10\ncommit_interval_ms = 50\nshutdown_timeout_secs = 20\nsession_timeout_ms = {session_ms}\n\n[kafka.consumer]\n\"heartbeat.interval.ms\" = \"500\"\n\n[http]\nbind = \"127.0.0.1:{http_port}\"\n\n{extra}\n",
        session_ms = SESSION_TIMEOUT.as_millis()
    ));
    let path = dir.join(format!("{prefix}.toml"));
    std::fs::write(&path, text).expect("write config");
    path
}

/// [`write_config`] with judge quality on, as the Kafka tests run: every one of them compares
/// its judge-quality records with replay's too.
pub fn write_test_config(
    dir: &Path,
    prefix: &str,
    bootstrap: &str,
    http_port: u16,
    extra: &str,
) -> PathBuf {
    let extra = format!("[judge_quality]\nenabled = true\n\n{extra}");
    write_config(dir, prefix, bootstrap, http_port, &extra)
}

/// A test's inputs: its directory, its service configuration and the generated stream, whose
/// topics exist.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub records: Vec<Rec>,
}

/// Creates `prefix`'s topics with `shape`'s partitions, writes a configuration (`extra`
/// appended) serving HTTP on `http_port`, and generates `shape`'s stream.
pub fn setup(
    bootstrap: &str,
    prefix: &str,
    shape: &stream::Shape,
    http_port: u16,
    extra: &str,
) -> Setup {
    let dir = tempfile::tempdir().expect("dir");
    let config = write_test_config(dir.path(), prefix, bootstrap, http_port, extra);
    create_topics(bootstrap, prefix, shape.partitions);
    let records = stream::generate(prefix, shape);
    Setup {
        dir,
        config,
        records,
    }
}

/// Starts instance `name` of `prefix`'s group, with a configuration and log of its own under
/// `dir/name` and `env` set, and waits until it is ready.
pub fn start_instance(
    dir: &Path,
    name: &str,
    prefix: &str,
    bootstrap: &str,
    env: &[(&str, &str)],
) -> Service {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("dir");
    let config = write_test_config(&d, prefix, bootstrap, free_port(), "");
    Service::start_ready_with(&config, d.join("service.log"), env)
}

/// A running `jurystream run`.
pub struct Service {
    pub child: Child,
    pub http_port: u16,
    pub log: PathBuf,
    /// The broker and consumer group of its configuration.
    pub bootstrap: String,
    pub group: String,
}

impl Service {
    pub fn start(config: &Path, log: PathBuf) -> Service {
        Service::start_with(config, log, &[])
    }

    pub fn start_with(config: &Path, log: PathBuf, env: &[(&str, &str)]) -> Service {
        let text = std::fs::read_to_string(config).unwrap_or_default();
        let http_port = text
            .lines()
            .find_map(|l| l.strip_prefix("bind = \"127.0.0.1:"))
            .and_then(|p| p.trim_end_matches('"').parse().ok())
            .unwrap_or(9464);
        let setting = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} = \"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let (bootstrap, group) = (setting("bootstrap_servers"), setting("group_id"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = Command::new(BIN)
            .args(["--config", &config.to_string_lossy(), "run"])
            .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("start jurystream");
        Service {
            child,
            http_port,
            log,
            bootstrap,
            group,
        }
    }

    /// Starts the service and waits (up to a minute) until `/readyz` says ready; panics with
    /// its log otherwise.
    pub fn start_ready(config: &Path, log: PathBuf) -> Service {
        Service::start_ready_with(config, log, &[])
    }

    /// [`Service::start_ready`] with `env` set.
    pub fn start_ready_with(config: &Path, log: PathBuf, env: &[(&str, &str)]) -> Service {
        let service = Service::start_with(config, log, env);
        assert!(
            service.wait_ready(Duration::from_secs(60)),
            "not ready within 60 s: {}",
            service.log_text()
        );
        service
    }

    pub fn metrics(&self) -> String {
        http_get(self.http_port, "/metrics").unwrap_or_default()
    }

    /// Sum of `jurystream_records_total` (every result), i.e. input records handled.
    pub fn records_handled(&self) -> u64 {
        metric_sum(&self.metrics(), HANDLED)
    }

    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if http_get(self.http_port, "/readyz").is_some_and(|b| b.starts_with("ready")) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Waits until at least `n` input records were handled; returns how many were.
    pub fn wait_handled(&self, n: u64, timeout: Duration) -> u64 {
        metric_sum(&self.wait_metric(HANDLED, n, timeout), HANDLED)
    }

    /// Waits until the metric `name` (summed over its labels) reaches `n`, returning the
    /// metrics text last scraped. Handling a record and the broker acknowledging its outputs are
    /// separate moments: a metric observed on acknowledgement lags `wait_handled`.
    pub fn wait_metric(&self, name: &str, n: u64, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let metrics = self.metrics();
            if metric_sum(&metrics, name) >= n || Instant::now() > deadline {
                return metrics;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then wait for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().expect("wait for jurystream")
    }

    /// SIGTERM, failing the test unless the process then exits cleanly, with its exit status and
    /// its whole log (what it did after the signal included).
    pub fn stop_cleanly(self) {
        let log = self.log.clone();
        let status = self.terminate();
        assert!(
            status.success(),
            "it stopped with {status}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Waits for the process to exit by itself (a crash the test injected), failing the test
    /// with its log if it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for jurystream") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "it did not exit within {timeout:?}: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// kill -9.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until `jurystream_input_position` reached, for every (topic, partition) of
    /// `records`, the offset after its last record: everything was processed or skipped.
    pub fn wait_caught_up(&self, records: &[Rec], timeout: Duration) -> bool {
        wait_caught_up(&[self], records, timeout)
    }

    /// [`assert_caught_up`] for this service alone.
    #[track_caller]
    pub fn assert_caught_up(&self, records: &[Rec], timeout: Duration) {
        assert_caught_up(&[self], records, timeout);
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Service {
    /// A failing test must not leave a service running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// For every (topic, partition) of `records` but the reputation table's (which the service
/// reads whole at every start, never through the group), the offset after its last record.
fn next_offsets(records: &[Rec]) -> BTreeMap<(&str, i32), i64> {
    let mut next: BTreeMap<(&str, i32), i64> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| !r.topic.ends_with(".reputations"))
    {
        let e = next.entry((r.topic.as_str(), r.partition)).or_insert(0);
        *e = (*e).max(r.offset + 1);
    }
    next
}

/// Waits until every (topic, partition) of `records` is committed past its last record (for
/// the inputs' forwarding stage a commit means its forwards are written; a reported position
/// would not, as it moves before they are acknowledged), and, when they repartition (the
/// default), every record of the group's repartition topic is processed: one of `services`
/// reports a `jurystream_input_position` at or past its end, or the tasks group committed it.
pub fn wait_caught_up(services: &[&Service], records: &[Rec], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let inputs: BTreeMap<(String, i32), i64> = next_offsets(records)
        .into_iter()
        .map(|((t, p), o)| ((t.to_owned(), p), o))
        .collect();
    if !wait_positions(services, &inputs, deadline, true) {
        return false;
    }
    let Some(first) = services.first() else {
        return true;
    };
    // Every forward is written now, but tansu's high watermarks can lag the records readable:
    // read the repartition topic's end until it holds still.
    let topic = format!("{}-repartition", first.group);
    let mut ends = BTreeMap::new();
    loop {
        let now: BTreeMap<(String, i32), i64> = log_ends(&first.bootstrap, &topic)
            .into_iter()
            .map(|(p, o)| ((topic.clone(), p), o))
            .collect();
        if now == ends {
            return true;
        }
        if !wait_positions(services, &now, deadline, false) {
            return false;
        }
        ends = now;
    }
}

/// For a failure message: each (topic, partition) `wait_caught_up` waits on that is not yet
/// done, with the offset it waits for, the group's committed offset and each of `services`'
/// reported position.
pub fn shortfall(services: &[&Service], records: &[Rec]) -> String {
    let Some(first) = services.first() else {
        return String::new();
    };
    let want = catch_up_points(&first.bootstrap, &first.group, records);
    let partitions: Vec<(&str, i32)> = want.keys().map(|(t, p)| (t.as_str(), *p)).collect();
    let committed = GroupOffsets::new(&first.bootstrap, &first.group).committed(&partitions);
    let metrics: Vec<String> = services.iter().map(|s| s.metrics()).collect();
    let mut out = String::new();
    for (i, ((topic, partition), next)) in want.iter().enumerate() {
        let positions: Vec<Option<i64>> = metrics
            .iter()
            .map(|m| position(m, topic, *partition))
            .collect();
        let committed = committed.get(i).copied().flatten();
        if committed < Some(*next) {
            out.push_str(&format!(
                "{topic}/{partition}: waits for {next}, committed {committed:?}, positions {positions:?}\n"
            ));
        }
    }
    out
}

/// What each of `services` logged of its partitions coming and going, for a failure message.
pub fn handovers(services: &[&Service]) -> String {
    services
        .iter()
        .map(|s| handover_lines(&s.log_text()))
        .collect::<Vec<_>>()
        .join("\n--- the next instance:\n")
}

/// The lines of a service log that say where partitions went and what restores read.
pub fn handover_lines(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("partitions") || l.contains("restore") || l.contains("reading on"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Clears its flag when dropped, also when a panic unwinds: a thread that runs while the flag
/// is set then ends, so a scope that waits for it ends too.
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Waits as [`wait_caught_up`] does, and fails the test where it gives up, with what each
/// service had done ([`not_caught_up`]).
#[track_caller]
pub fn assert_caught_up(services: &[&Service], records: &[Rec], timeout: Duration) {
    assert!(
        wait_caught_up(services, records, timeout),
        "{}",
        not_caught_up(services, records)
    );
}

/// Why `services` are not caught up with `records`, for a failure message: what is not yet
/// done ([`shortfall`]), where each service's partitions went, the counters that say which
/// stage stalled, and the last warnings and errors each logged.
pub fn not_caught_up(services: &[&Service], records: &[Rec]) -> String {
    let counters: Vec<String> = services
        .iter()
        .map(|s| {
            s.metrics()
                .lines()
                .filter(|l| {
                    !l.starts_with('#')
                        && [
                            "jurystream_partitions_owned",
                            "jurystream_records_forwarded_total",
                            "jurystream_commits_total",
                            "jurystream_input_position",
                            "jurystream_consumer_lag_records",
                            "jurystream_ready",
                        ]
                        .iter()
                        .any(|m| l.starts_with(m))
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let troubles: Vec<String> = services
        .iter()
        .map(|s| {
            let log = s.log_text();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        })
        .collect();
    format!(
        "not caught up:\n{}\n{}\n--- counters:\n{}\n--- the last warnings and errors:\n{}",
        shortfall(services, records),
        handovers(services),
        counters.join("\n--- the next instance:\n"),
        troubles.join("\n--- the next instance:\n")
    )
}

/// Where everything of `records` is caught up, by (topic, partition): the offset after each
/// input partition's last record ([`next_offsets`]), and the end of `group`'s repartition topic
/// on `bootstrap` (none if it does not repartition).
fn catch_up_points(bootstrap: &str, group: &str, records: &[Rec]) -> BTreeMap<(String, i32), i64> {
    let mut want: BTreeMap<(String, i32), i64> = next_offsets(records)
        .into_iter()
        .map(|((t, p), o)| ((t.to_owned(), p), o))
        .collect();
    let topic = format!("{group}-repartition");
    for (p, o) in log_ends(bootstrap, &topic) {
        want.insert((topic.clone(), p), o);
    }
    want
}

/// The `jurystream_input_position` a service's `metrics` report for `topic`'s `partition`.
fn position(metrics: &str, topic: &str, partition: i32) -> Option<i64> {
    let prefix =
        format!("jurystream_input_position{{partition=\"{partition}\",topic=\"{topic}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until, for each (topic, partition) of `want`, the group has committed its offset, or
/// (unless `committed_only`) one of `services` reports a `jurystream_input_position` at or past
/// it.
fn wait_positions(
    services: &[&Service],
    want: &BTreeMap<(String, i32), i64>,
    deadline: Instant,
    committed_only: bool,
) -> bool {
    let group = services
        .first()
        .map(|s| GroupOffsets::new(&s.bootstrap, &s.group));
    let partitions: Vec<(&str, i32)> = want.keys().map(|(t, p)| (t.as_str(), *p)).collect();
    while Instant::now() < deadline {
        let committed = group
            .as_ref()
            .map_or_else(Vec::new, |g| g.committed(&partitions));
        let metrics: Vec<String> = services.iter().map(|s| s.metrics()).collect();
        let done = want
            .iter()
            .enumerate()
            .all(|(i, ((topic, partition), next))| {
                if committed.get(i).copied().flatten() >= Some(*next) {
                    return true;
                }
                if committed_only {
                    return false;
                }
                metrics
                    .iter()
                    .any(|m| position(m, topic, *partition).is_some_and(|v| v >= *next))
            });
        if done {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// One record of a topic as read back, with where it is and its headers.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl LogRecord {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// Every record of `topic` (none if it does not exist), partition by partition in offset order.
pub fn read_log(bootstrap: &str, topic: &str) -> Vec<LogRecord> {
    use rdkafka::message::Headers;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("log-{topic}-{}", free_port()))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    let partitions = clients::partition_count(&consumer, topic).unwrap_or(0);
    if partitions == 0 {
        return Vec::new();
    }
    clients::assign_from_beginning(&consumer, (topic, partitions)).expect("assign");
    let mut out = Vec::new();
    let mut eof: HashMap<i32, bool> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline
        && !(0..partitions as i32).all(|p| eof.get(&p).copied().unwrap_or(false))
    {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                eof.insert(m.partition(), false);
                let headers = m.headers().map_or_else(Vec::new, |h| {
                    h.iter()
                        .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                });
                out.push(LogRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers,
                });
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p, true);
            }
            _ => {}
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// The offset after the last record of each partition of `topic` (none if it does not exist).
pub fn log_ends(bootstrap: &str, topic: &str) -> BTreeMap<i32, i64> {
    let mut ends = BTreeMap::new();
    for r in read_log(bootstrap, topic) {
        let e = ends.entry(r.partition).or_insert(0);
        *e = (*e).max(r.offset + 1);
    }
    ends
}

/// Reads a service's committed offsets from the broker, through consumers that never join its
/// groups: what a restart would resume from. The inputs' offsets are the group's own; the
/// repartition topic's are its tasks group's (`<group>-tasks`).
pub struct GroupOffsets(BaseConsumer, BaseConsumer, String, String);

impl GroupOffsets {
    pub fn new(bootstrap: &str, group: &str) -> GroupOffsets {
        let reader = |group: &str| {
            ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("group.id", group)
                .set("enable.auto.commit", "false")
                .create()
                .expect("consumer")
        };
        GroupOffsets(
            reader(group),
            reader(&format!("{group}-tasks")),
            group.to_owned(),
            bootstrap.to_owned(),
        )
    }

    /// The committed offset of each (topic, partition), `None` where nothing is committed (or
    /// the broker did not answer).
    pub fn committed(&self, partitions: &[(&str, i32)]) -> Vec<Option<i64>> {
        let tasks_topic = format!("{}-repartition", self.2);
        let ask = |consumer: &BaseConsumer, tasks: bool| {
            let mut tpl = TopicPartitionList::new();
            for (topic, p) in partitions {
                if (*topic == tasks_topic) == tasks {
                    tpl.add_partition(topic, *p);
                }
            }
            if tpl.count() == 0 {
                return Some(tpl);
            }
            consumer
                .committed_offsets(tpl, Duration::from_secs(10))
                .ok()
        };
        let (Some(inputs), Some(tasks)) = (ask(&self.0, false), ask(&self.1, true)) else {
            return vec![None; partitions.len()];
        };
        partitions
            .iter()
            .map(|(topic, p)| {
                let done = if *topic == tasks_topic {
                    &tasks
                } else {
                    &inputs
                };
                done.find_partition(topic, *p)
                    .and_then(|e| e.offset().to_raw())
                    .filter(|o| *o >= 0)
            })
            .collect()
    }

    /// Waits until everything of `records` is committed, and, when the group repartitions,
    /// everything in its repartition topic (on broker `bootstrap`).
    pub fn wait_committed(&self, records: &[Rec], timeout: Duration) -> bool {
        let want = catch_up_points(&self.3, &self.2, records);
        let partitions: Vec<(&str, i32)> = want.keys().map(|(t, p)| (t.as_str(), *p)).collect();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let done = self.committed(&partitions);
            if want.values().zip(&done).all(|(w, d)| *d >= Some(*w)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

pub fn metric_sum(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.starts_with(name)
                && (l.as_bytes().get(name.len()) == Some(&b'{')
                    || l.as_bytes().get(name.len()) == Some(&b' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A minimal HTTP/1.0 GET on localhost; the body, or None if nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let answer = http_answer(port, path)?;
    if answer.status == 200 {
        Some(answer.body)
    } else {
        Some(format!("status: {}", answer.status))
    }
}

/// An HTTP answer: status, `Location` and `Content-Type` headers, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub location: Option<String>,
    pub content_type: Option<String>,
    pub body: String,
}

/// A minimal HTTP/1.0 GET on localhost, redirects not followed; None if nothing answers.
pub fn http_answer(port: u16, path: &str) -> Option<Answer> {
    http_answer_with(port, path, "")
}

/// [`http_answer`] with `headers` (each line ending in `\r\n`) added to the request.
pub fn http_answer_with(port: u16, path: &str, headers: &str) -> Option<Answer> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n{headers}\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    Some(Answer {
        status,
        location: header("location"),
        content_type: header("content-type"),
        body: body.to_owned(),
    })
}

/// Creates topics with `partitions` partitions through jurystream's own start-up path is not
/// needed: the service creates them. Producers here write to explicit partitions, so topics must
/// exist first: this creates them with the admin API.
pub fn create_topics(bootstrap: &str, prefix: &str, partitions: i32) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let names = topics(prefix);
    let compact = [
        "reputations",
        "scores",
        "leaderboard",
        "judge_quality",
        "reviewer_quality",
        "state",
    ];
    let new: Vec<NewTopic> = names
        .iter()
        .map(|(k, v)| {
            let t = NewTopic::new(v, partitions, TopicReplication::Fixed(1));
            if compact.contains(k) {
                t.set("cleanup.policy", "compact")
            } else {
                t
            }
        })
        .collect();
    let admin = admin(bootstrap);
    let _ = block_on(admin.create_topics(&new, &AdminOptions::new()));
}

/// Creates `topic` with `partitions` partitions and the topic `configs`.
pub fn create_topic_with(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let mut t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        t = t.set(k, v);
    }
    let _ = block_on(admin(bootstrap).create_topics(&[t], &AdminOptions::new()));
}

/// Whether the broker refuses a record larger than a topic's `max.message.bytes` (Apache
/// Kafka does; some compatible brokers do not enforce it): produces 5,000 bytes to a probe
/// topic limited to 1,000.
pub fn enforces_max_message_bytes(bootstrap: &str, probe: &str) -> bool {
    create_topic_with(bootstrap, probe, 1, &[("max.message.bytes", "1000")]);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    let payload = vec![b'x'; 5000];
    let record = BaseRecord::<(), [u8]>::to(probe).payload(&payload);
    let sent = producer.send(record).map_err(|(e, _)| e);
    let flushed = producer.flush(Duration::from_secs(30));
    sent.is_err() || flushed.is_err() || read_log(bootstrap, probe).is_empty()
}

/// Deletes `topic` if it exists, reporting on stderr if the broker refused.
pub fn delete_topic(bootstrap: &str, topic: &str) {
    let admin = admin(bootstrap);
    if let Ok(results) =
        block_on(admin.delete_topics(&[topic], &rdkafka::admin::AdminOptions::new()))
    {
        for (topic, code) in results.into_iter().filter_map(Result::err) {
            if code != rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition {
                eprintln!("deleting {topic}: {code}");
            }
        }
    }
}

/// Deletes `prefix`'s topics (see [`topics`]), reporting on stderr any the broker refused.
pub fn delete_topics(bootstrap: &str, prefix: &str) {
    let names = topics(prefix);
    let names: Vec<&str> = names.values().map(String::as_str).collect();
    let admin = admin(bootstrap);
    match block_on(admin.delete_topics(&names, &rdkafka::admin::AdminOptions::new())) {
        Ok(results) => {
            for (topic, code) in results.into_iter().filter_map(Result::err) {
                eprintln!("deleting {topic}: {code}");
            }
        }
        Err(e) => eprintln!("deleting {prefix}'s topics: {e}"),
    }
}

/// An admin client of `bootstrap`.
fn admin(bootstrap: &str) -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client")
}

/// Runs an admin request to completion.
fn block_on<F: std::future::Future>(request: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(request)
}

/// Produces records to their explicit partitions, in order, and waits for every acknowledgement.
pub fn produce(bootstrap: &str, records: &[Rec]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for r in records {
        let mut rec: BaseRecord<'_, str, str> = BaseRecord::to(&r.topic)
            .partition(r.partition)
            .timestamp(r.timestamp_ms);
        if let Some(k) = &r.key {
            rec = rec.key(k.as_str());
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v.as_str());
        }
        send_waiting(&producer, rec, Duration::from_millis(20));
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// Sends `rec`, serving delivery reports for `wait` at a time while the producer refuses it (its
/// queue is full).
pub fn send_waiting<K, P>(producer: &BaseProducer, mut rec: BaseRecord<'_, K, P>, wait: Duration)
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    while let Err((_, back)) = producer.send(rec) {
        producer.poll(wait);
        rec = back;
    }
}

/// Reads every record of `topic` (all partitions) from the beginning until at least `min`
/// records arrived and the partitions are at their end, or `timeout` passed.
pub fn read_all(
    bootstrap: &str,
    topic: &str,
    min: usize,
    timeout: Duration,
) -> Vec<(Option<String>, Option<String>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{topic}-{}", free_port()))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    let count = clients::partition_count(&consumer, topic).expect("metadata");
    clients::assign_from_beginning(&consumer, (topic, count)).expect("assign");
    let partitions = count as i32;
    let mut out = Vec::new();
    let mut eof: HashMap<i32, bool> = HashMap::new();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                eof.insert(m.partition(), false);
                out.push((
                    m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
                ));
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p, true);
            }
            _ => {}
        }
        let all_eof = (0..partitions).all(|p| eof.get(&p).copied().unwrap_or(false));
        if all_eof && out.len() >= min {
            break;
        }
    }
    out
}
