//! The `replay` command end to end: the bundled example against its golden output, determinism,
//! and standard input/output.

use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_jurystream");

fn replay_file(input: &str) -> (String, String) {
    let out = Command::new(BIN)
        .args(["replay", "--input", input, "--output", "-"])
        .env_remove("JURYSTREAM_CONFIG")
        .output()
        .expect("run jurystream");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn bundled_example_matches_its_golden_output() {
    let (stdout, stderr) = replay_file("examples/demo.jsonl");
    let expected = std::fs::read_to_string("examples/demo.expected.jsonl").unwrap();
    assert_eq!(
        stdout, expected,
        "regenerate with: cargo run -- replay --input examples/demo.jsonl --output examples/demo.expected.jsonl"
    );
    assert!(stderr.starts_with("replay: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1);
}

#[test]
fn judge_quality_example_matches_its_golden_output() {
    let out = Command::new(BIN)
        .args([
            "replay",
            "--config",
            "examples/judge-quality.toml",
            "--input",
            "examples/judge-quality.jsonl",
        ])
        .env_remove("JURYSTREAM_CONFIG")
        .output()
        .expect("run jurystream");
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let expected = std::fs::read_to_string("examples/judge-quality.expected.jsonl").unwrap();
    assert_eq!(
        stdout, expected,
        "regenerate with: cargo run -- replay --config examples/judge-quality.toml --input \
         examples/judge-quality.jsonl --output examples/judge-quality.expected.jsonl"
    );
    // What the example is there to show: the lenient judge is flagged against the humans, the
    // agreeing one is not, and items it scored far from the humans go to review.
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |topic: &'static str| records.iter().filter(move |r| r["topic"] == topic);
    let last = |judge: &str| {
        of("jury.judge-quality")
            .rfind(|r| r["value"]["judge"] == judge)
            .map(|r| r["value"].clone())
            .unwrap()
    };
    assert_eq!(
        (
            last("gpt-judge")["kappa"].as_f64(),
            last("gpt-judge")["pairs"].as_u64()
        ),
        (Some(1.0), Some(8))
    );
    assert_eq!(last("lenient-judge")["kappa"].as_f64(), Some(0.0));
    assert!(last("lenient-judge")["bias"].as_f64().unwrap() > 0.4);
    let flagged: Vec<&serde_json::Value> = of("jury.bias-alerts")
        .filter(|r| r["value"]["kind"] == "judge_human_disagreement")
        .collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0]["value"]["subject"], "lenient-judge");
    assert_eq!(
        of("jury.review-requests")
            .filter(|r| r["value"]["reason"] == "judge_human_gap")
            .count(),
        4
    );
}

#[test]
fn reviewer_example_matches_its_golden_output() {
    let out = Command::new(BIN)
        .args([
            "replay",
            "--config",
            "examples/reviewers.toml",
            "--input",
            "examples/reviewers.jsonl",
        ])
        .env_remove("JURYSTREAM_CONFIG")
        .output()
        .expect("run jurystream");
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let expected = std::fs::read_to_string("examples/reviewers.expected.jsonl").unwrap();
    assert_eq!(
        stdout, expected,
        "regenerate with: cargo run -- replay --config examples/reviewers.toml --input \
         examples/reviewers.jsonl --output examples/reviewers.expected.jsonl"
    );
    // What the example is there to show: each kind of bad reviewer gets its alert once, the
    // careful ones none, and they rank as careful, slipping, coin, always-wrong. eve, who
    // passes everything, is right on the items that are passes: 6 of her first 10, and 0.585
    // at the checkpoint of item 11 (the items' posteriors are not yet certain), below 0.6, so
    // she is also found unreliable;
    // her coins tell her apart from a careful reviewer (sensitivity ~0.95, specificity ~0.16).
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut alerts: Vec<(String, String)> = records
        .iter()
        .filter(|r| r["topic"] == "jury.bias-alerts")
        .map(|r| {
            let s = |k: &str| r["value"][k].as_str().unwrap().to_owned();
            (s("kind"), s("subject"))
        })
        .collect();
    alerts.sort();
    let pairs: Vec<(&str, &str)> = alerts
        .iter()
        .map(|(k, s)| (k.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("reviewer_adversarial", "dee"),
            ("reviewer_straight_lining", "eve"),
            ("reviewer_unreliable", "dee"),
            ("reviewer_unreliable", "eve"),
            ("reviewer_unreliable", "fay"),
        ]
    );
    let reliability = |voter: &str| {
        records
            .iter()
            .rfind(|r| r["topic"] == "jury.reviewer-quality" && r["value"]["voter_id"] == voter)
            .and_then(|r| r["value"]["reliability"].as_f64())
            .unwrap()
    };
    let order = ["ann", "bo", "cy", "fay", "dee"].map(reliability);
    assert!(order.windows(2).all(|w| w[0] > w[1]), "{order:?}");
    let coin = |voter: &str, name: &str| {
        records
            .iter()
            .rfind(|r| r["topic"] == "jury.reviewer-quality" && r["value"]["voter_id"] == voter)
            .and_then(|r| r["value"][name].as_f64())
            .unwrap()
    };
    assert!(coin("eve", "sensitivity") > 0.9 && coin("eve", "specificity") < 0.2);
    assert!(coin("ann", "sensitivity") > 0.9 && coin("ann", "specificity") > 0.75);
}

#[test]
fn golden_output_holds_the_contract_hand_check() {
    let (stdout, _) = replay_file("examples/demo.jsonl");
    let second: serde_json::Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["topic"] == "jury.scores")
        .nth(1)
        .unwrap();
    assert_eq!(second["value"]["score"], 0.5 * (-0.07f64).exp());
    assert_eq!(second["value"]["score"], 0.46619690995297414);
}

#[test]
fn replay_is_byte_deterministic_and_stdin_equals_file() {
    let (a, _) = replay_file("examples/demo.jsonl");
    let (b, _) = replay_file("examples/demo.jsonl");
    assert_eq!(a, b);
    let mut child = Command::new(BIN)
        .args(["replay"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = std::fs::read("examples/demo.jsonl").unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), a);
}

#[test]
fn bad_config_fails_at_start_naming_the_key() {
    let out = Command::new(BIN)
        .args(["replay", "--input", "examples/demo.jsonl"])
        .env("JURYSTREAM_SCORING__LAMBDA", "-3")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("scoring.lambda"), "{stderr}");
}

#[test]
fn environment_overrides_the_config_file() {
    let out = Command::new(BIN)
        .args([
            "--config",
            "config/jurystream.toml",
            "replay",
            "--input",
            "examples/demo.jsonl",
        ])
        .env("JURYSTREAM_TOPICS__SCORES", "other.scores")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with(r#"{"topic":"other.scores""#), "{stdout}");
}

/// A replay with `by_key` says that judge quality and reviewer reliability, on by default, have
/// no effect there, and runs; its ticks come from its file, so the idle timeout still holds.
#[test]
fn settings_without_effect_are_said_beside_the_replay() {
    let out = Command::new(BIN)
        .args(["replay", "--input", "examples/demo.jsonl", "--output", "-"])
        .env_remove("JURYSTREAM_CONFIG")
        .env("JURYSTREAM_INPUT__PARTITIONING", "by_key")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: judge_quality.enabled = true has no effect")
            && stderr.contains("warning: reviewers.enabled = true has no effect"),
        "{stderr}"
    );
    assert!(!stderr.contains("idle_timeout_secs"), "{stderr}");
    let (_, defaults) = replay_file("examples/demo.jsonl");
    assert!(!defaults.contains("warning"), "{defaults}");
}

#[test]
fn missing_input_file_is_a_clear_error() {
    let out = Command::new(BIN)
        .args(["replay", "--input", "no/such/file.jsonl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/file.jsonl"));
}

#[test]
fn an_endless_line_stops_the_replay_at_once_naming_the_line() {
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(["replay", "--input", "/dev/full", "--output", "-"])
        .output()
        .expect("run jurystream");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 1 is longer than"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn run_without_a_broker_fails_fast_naming_the_setting_and_the_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    // Nothing listens there once the listener above is dropped.
    let address = format!("127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .arg("run")
        .env("JURYSTREAM_KAFKA__BOOTSTRAP_SERVERS", &address)
        .env("JURYSTREAM_KAFKA__CONNECT_TIMEOUT_SECS", "2")
        .env("JURYSTREAM_HTTP__BIND", "127.0.0.1:0")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run jurystream");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The error the command ends with: one line naming the setting and the address.
    let error = stderr.lines().find(|l| l.starts_with("Error: "));
    assert!(
        error.is_some_and(|l| l.contains("kafka.bootstrap_servers") && l.contains(&address)),
        "{stderr}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}
