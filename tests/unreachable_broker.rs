//! A wrong broker address is told at once and then rarely: the service names the address
//! within a second or two, says so again every few seconds, and gives up at
//! `kafka.connect_timeout_secs` with an error naming the setting, in a handful of lines.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_jurystream");

#[test]
fn an_unreachable_broker_is_named_at_once_then_rarely() {
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let http = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .arg("run")
        .env_remove("JURYSTREAM_CONFIG")
        .env_remove("RUST_LOG")
        .env("JURYSTREAM_KAFKA__BOOTSTRAP_SERVERS", &address)
        .env("JURYSTREAM_KAFKA__CONNECT_TIMEOUT_SECS", "8")
        // A host name and port: resolved when the listener binds.
        .env("JURYSTREAM_HTTP__BIND", format!("localhost:{http}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run jurystream");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let lines: Vec<(Duration, String)> = stderr
        .lines()
        .map_while(Result::ok)
        .map(|l| (started.elapsed(), l))
        .collect();
    let status = child.wait().unwrap();
    assert!(!status.success());
    let naming: Vec<Duration> = lines
        .iter()
        .filter(|(_, l)| l.contains("no answer yet from Kafka") && l.contains(&address))
        .map(|(t, _)| *t)
        .collect();
    let shown = || {
        lines
            .iter()
            .map(|(t, l)| format!("{t:?} {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        naming.first().is_some_and(|t| *t < Duration::from_secs(4)),
        "the address is named at once:\n{}",
        shown()
    );
    assert!(
        (1..=3).contains(&naming.len()),
        "then every few seconds:\n{}",
        shown()
    );
    assert!(
        lines
            .iter()
            .any(|(_, l)| l.contains("cannot reach Kafka at kafka.bootstrap_servers")),
        "{}",
        shown()
    );
    assert!(
        lines
            .iter()
            .any(|(_, l)| l.contains("serving /metrics") && l.contains(&format!(":{http}"))),
        "http.bind by host name:\n{}",
        shown()
    );
    // No colours where no one reads them at a terminal.
    assert!(
        lines.iter().all(|(_, l)| !l.contains('\u{1b}')),
        "{}",
        shown()
    );
    // The log lines (not a backtrace's) are few: librdkafka's own repeats are held back.
    let logged = lines
        .iter()
        .filter(|(_, l)| l.contains(" WARN ") || l.contains(" ERROR "))
        .count();
    assert!(logged <= 10, "{logged} lines:\n{}", shown());
}
