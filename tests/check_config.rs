//! `jurystream check-config` end to end: the effective configuration with each value's source,
//! and a start that fails, naming what to fix, on a variable that names no setting or a log
//! filter that would log nothing meant.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_jurystream");

/// `check-config` with only `vars` of jurystream's own (the rest of the environment kept).
fn check(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command.arg("check-config").args(args);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if name.starts_with("JURYSTREAM_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    command
        .envs(vars.iter().copied())
        .output()
        .expect("run jurystream")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `check-config --config FILE` where FILE holds `toml`, in a directory of the test's own
/// (`name`: tests run in parallel), with `vars`; the output and the file's path.
fn check_file(name: &str, toml: &str, vars: &[(&str, &str)]) -> (Output, String) {
    let dir = std::env::temp_dir().join(format!("check-config-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join("jurystream.toml");
    std::fs::write(&file, toml).expect("write the file");
    let path = file.to_string_lossy().into_owned();
    let out = check(&["--config", &path], vars);
    std::fs::remove_dir_all(&dir).ok();
    (out, path)
}

#[test]
fn every_value_is_shown_with_where_it_came_from() {
    let (out, path) = check_file(
        "shown",
        "[kafka]\nbootstrap_servers = \"broker:9092\"\n[kafka.producer]\n\"sasl.password\" = \"hunter2\"\n",
        &[("JURYSTREAM_SCORING__LAMBDA", "0.02")],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_owned()
    };
    assert_eq!(
        line("scoring.lambda"),
        "scoring.lambda = 0.02  # JURYSTREAM_SCORING__LAMBDA"
    );
    assert_eq!(
        line("kafka.bootstrap_servers"),
        format!("kafka.bootstrap_servers = \"broker:9092\"  # file {path}")
    );
    assert_eq!(
        line("sessions.timeout_secs"),
        "sessions.timeout_secs = 300  # default"
    );
    assert!(line("kafka.producer.sasl.password").contains("\"<redacted>\""));
    assert!(!stdout.contains("hunter2"), "{stdout}");
}

#[test]
fn mistakes_fail_naming_what_to_fix() {
    for (vars, said) in [
        (
            [("JURYSTREAM_SCORING_LAMBDA", "0.02")],
            "JURYSTREAM_SCORING_LAMBDA names no setting",
        ),
        (
            [("JURYSTREAM_HTTP_BIND", "0.0.0.0:9464")],
            "the nearest is JURYSTREAM_HTTP__BIND (http.bind)",
        ),
        (
            [("JURYSTREAM_LOG__LEVEL", "verbose")],
            "configuration key `log.level`: \"verbose\" is neither a level",
        ),
        (
            [("RUST_LOG", "verbose")],
            "environment variable RUST_LOG: \"verbose\" is neither a level",
        ),
        (
            [("JURYSTREAM_SCORING__LAMBDA", "fast")],
            "configuration key `scoring.lambda` (from environment variable \
             JURYSTREAM_SCORING__LAMBDA): invalid type: found string \"fast\", expected f64",
        ),
    ] {
        let out = check(&[], &vars);
        assert!(!out.status.success(), "{vars:?}");
        assert!(
            text(&out.stderr).contains(said),
            "{vars:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{vars:?}");
    }
}

/// Keys of the file that name no setting are refused, each with the nearest one, before any
/// value is read: a mistyped key must never leave a default in force.
#[test]
fn a_mistyped_file_key_is_refused_naming_the_nearest() {
    let (out, path) = check_file(
        "keys",
        "[kafka]\npartitons = 3\n[judge_qualty]\nenabled = false\n[kafka.consumer]\n\"fetch.max.bytes\" = \"1\"\n",
        &[],
    );
    let said = text(&out.stderr);
    assert!(!out.status.success());
    assert!(said.contains("the configuration has 2 problems"), "{said}");
    for (key, nearest) in [
        ("kafka.partitons", "kafka.partitions"),
        ("judge_qualty.enabled", "judge_quality.enabled"),
    ] {
        assert!(
            said.contains(&format!(
                "configuration file {path}: `{key}` names no setting; the nearest is `{nearest}`"
            )),
            "{said}"
        );
    }
    assert!(out.stdout.is_empty());
}

/// What check-config says on its error stream refusing the file `toml` with the variables
/// `vars` (it must refuse, and print nothing else).
fn refusal(name: &str, toml: &str, vars: &[(&str, &str)]) -> String {
    let (out, _) = check_file(name, toml, vars);
    let said = text(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(out.stdout.is_empty(), "{said}");
    said
}

/// A librdkafka property that librdkafka refuses, named in `kafka.consumer` or
/// `kafka.producer` or set from a setting of jurystream's, is refused by check-config (and the
/// start) without a broker, naming the key that set it; every such key at once.
#[test]
fn a_property_librdkafka_refuses_is_named_by_its_key() {
    let said = refusal(
        "librdkafka",
        "[kafka]\nfetch_wait_max_ms = 999999\n[kafka.consumer]\n\"fetch.max.byts\" = \"1000\"\n\
         [kafka.producer]\n\"linger.ms\" = \"soon\"\n",
        &[],
    );
    for line in [
        "the configuration has 3 problems",
        "configuration key `kafka.consumer.fetch.max.byts`: librdkafka refuses it: No such \
         configuration property: \"fetch.max.byts\"",
        "configuration key `kafka.fetch_wait_max_ms`: librdkafka refuses it:",
        "configuration key `kafka.producer.linger.ms`: librdkafka refuses it:",
    ] {
        assert!(said.contains(line), "{said}");
    }
}

/// An advertised URL that other instances could not put a request's path after, and a tokens
/// file that cannot be read, are refused by check-config, as by the start.
#[test]
fn an_advertised_url_or_tokens_file_the_start_would_refuse_is_refused() {
    let vars = [("JURYSTREAM_HTTP__ADVERTISED_URL", "pod-1:9464")];
    let said = refusal("advertised", "", &vars);
    let url = "http.advertised_url = \"pod-1:9464\" is not an absolute http or https URL";
    assert!(said.contains(url), "{said}");
    let said = refusal(
        "tokens",
        "[http]\ntokens_file = \"/nonexistent/tokens\"\n",
        &[],
    );
    let tokens = "http.tokens_file = \"/nonexistent/tokens\": No such file";
    assert!(said.contains(tokens), "{said}");
}

/// An empty file is the defaults: it names nothing, so nothing is refused, and every setting
/// takes effect, so nothing is warned of.
#[test]
fn an_empty_file_is_the_defaults() {
    let (out, _) = check_file("empty", "", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("kafka.partitions = 6  # default"));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

/// With `by_key`, the statistics and idle ticks the defaults ask for cannot run: the
/// configuration is valid, and check-config says so beside it, naming each setting, where
/// nothing said it before.
#[test]
fn settings_by_key_leaves_without_effect_are_warned_of() {
    let (out, _) = check_file("by-key", "[input]\npartitioning = \"by_key\"\n", &[]);
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(text(&out.stdout).contains("input.partitioning = \"by_key\"  # file"));
    for key in [
        "judge_quality.enabled = true has no effect",
        "reviewers.enabled = true has no effect",
        "sessions.idle_timeout_secs has no effect",
    ] {
        assert!(said.contains(&format!("warning: {key}")), "{said}");
    }
}

/// A refusal is its message alone, even where `RUST_BACKTRACE` asks panics for a backtrace: no
/// stack trace of the binary under a mistyped setting.
#[test]
fn a_refusal_carries_no_stack_backtrace() {
    let out = check(
        &[],
        &[
            ("JURYSTREAM_SCORING_LAMBDA", "0.02"),
            ("RUST_BACKTRACE", "1"),
        ],
    );
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.starts_with("Error: ") && said.contains("JURYSTREAM_SCORING_LAMBDA names no setting"),
        "{said}"
    );
    assert!(!said.contains("backtrace"), "{said}");
}

#[test]
fn every_mistake_is_named_in_one_refusal() {
    // Two variables that name nothing: both, in one refusal.
    let out = check(
        &[],
        &[
            ("JURYSTREAM_SCORING_LAMBDA", "0.02"),
            ("JURYSTREAM_HTTP_BIND", "0.0.0.0:9464"),
        ],
    );
    let said = text(&out.stderr);
    assert!(!out.status.success());
    assert!(said.contains("the configuration has 2 problems"), "{said}");
    for name in ["JURYSTREAM_SCORING_LAMBDA", "JURYSTREAM_HTTP_BIND"] {
        assert!(
            said.contains(&format!("- environment variable {name}")),
            "{said}"
        );
    }
    // Bad values, from the file and the environment: every one.
    let (out, _) = check_file(
        "refused",
        "[scoring]\nlambda = -1\n[sessions]\nmax_judges = 0\n[kafka]\npartitions = \"six\"\n",
        &[
            ("JURYSTREAM_HTTP__BIND", "nowhere"),
            ("JURYSTREAM_KAFKA__COMMIT_INTERVAL_MS", "soon"),
        ],
    );
    let said = text(&out.stderr);
    assert!(!out.status.success());
    // Two values of the wrong type, from the file and the environment, with the three out of
    // range: all five.
    assert!(said.contains("the configuration has 5 problems"), "{said}");
    for key in [
        "http.bind",
        "scoring.lambda",
        "sessions.max_judges",
        "kafka.partitions",
        "kafka.commit_interval_ms",
    ] {
        assert!(
            said.contains(&format!("- configuration key `{key}`")),
            "{said}"
        );
    }
    assert!(out.stdout.is_empty());
}
