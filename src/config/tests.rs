use super::*;

#[test]
fn empty_file_is_the_defaults() {
    assert_eq!(Config::from_toml("").unwrap(), Config::default());
}

#[test]
fn shipped_file_is_valid_and_equals_defaults() {
    let text = include_str!("../../config/jurystream.toml");
    assert_eq!(Config::from_toml(text).unwrap(), Config::default());
}

#[test]
fn errors_name_the_key() {
    let e = Config::from_toml("[scoring]\nlambda = -1.0")
        .unwrap_err()
        .to_string();
    assert!(e.contains("scoring.lambda"), "{e}");
    let e = Config::from_toml("[scoring]\nlambdaa = 1.0")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lambdaa"), "{e}");
    let e = Config::from_toml("[limits]\nmax_votes_per_event = \"many\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_votes_per_event"), "{e}");
    let e = Config::from_toml("[scoring.project_lambda]\n\"p-1\" = -2")
        .unwrap_err()
        .to_string();
    assert!(e.contains("scoring.project_lambda.p-1"), "{e}");
    // Upper bounds: the largest value is accepted, one more is refused by name. The
    // window's index holds positions in 24 bits; librdkafka limits message sizes.
    let bounded = |key: &str, max: u64, message: &str| {
        let toml = |v: u64| format!("[limits]\n{key} = {v}");
        assert!(Config::from_toml(&toml(max)).is_ok(), "{key} = {max}");
        let e = Config::from_toml(&toml(max + 1)).unwrap_err().to_string();
        assert!(e.contains(&format!("limits.{key}")), "{e}");
        assert!(e.contains(message), "{e}");
    };
    bounded(
        "dedupe_window",
        16777215,
        "at most 16777215 ids per project",
    );
    bounded(
        "max_message_bytes",
        1000000000,
        "at most 1000000000 (librdkafka's limit)",
    );
}

/// A wait that would hold a figure, a start, a stop or a query for hours, a session for weeks,
/// or a future skew that would let one wrong clock hold a score for hours, is a mistyped unit,
/// not a choice: refused by name at start, the largest allowed value still accepted.
#[test]
fn durations_of_a_mistyped_unit_are_refused() {
    for (section, key, max, unit) in [
        (
            "kafka",
            "commit_interval_ms",
            600_000_u64,
            "ms (ten minutes",
        ),
        ("output", "scores_coalesce_ms", 600_000, "ms (ten minutes"),
        (
            "output",
            "reviewers_coalesce_ms",
            600_000,
            "ms (ten minutes",
        ),
        ("sessions", "timeout_secs", 604_800, "s (a week)"),
        ("sessions", "idle_timeout_secs", 604_800, "s (a week)"),
        ("kafka", "connect_timeout_secs", 600, "s (ten minutes"),
        ("kafka", "shutdown_timeout_secs", 600, "s (ten minutes"),
        ("http", "proxy_timeout_ms", 600_000, "ms (ten minutes"),
        ("http", "header_timeout_ms", 600_000, "ms (ten minutes"),
        ("limits", "max_future_skew_secs", 3600, "s (an hour"),
    ] {
        let toml = |v: u64| format!("[{section}]\n{key} = {v}");
        assert!(Config::from_toml(&toml(max)).is_ok(), "{key} = {max}");
        assert_eq!(refused_keys(&toml(max + 1)), [format!("{section}.{key}")]);
        let e = Config::from_toml(&toml(max * 1000))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("at most {max} {unit}")), "{e}");
    }
}

/// A minimum its own bound never reaches would leave an alert, a learned weight or a
/// correlation out for good: refused by name, naming the bound; the bound itself is accepted.
#[test]
fn a_minimum_its_bound_never_reaches_is_refused() {
    let window = "[judge_quality]\nwindow = 40\n";
    for key in ["min_pairs", "min_shared"] {
        let with = |v: u64| format!("{window}{key} = {v}");
        assert!(Config::from_toml(&with(40)).is_ok(), "{key} = 40");
        assert_eq!(refused_keys(&with(41)), [format!("judge_quality.{key}")]);
        let e = Config::from_toml(&with(41)).unwrap_err().to_string();
        assert!(e.contains("at most 40 = judge_quality.window (40)"), "{e}");
    }
    // A reviewer's shared items are its project's, at most its task's share of the items.
    let items = |partitions: u32, min_items: u64| {
        format!(
            "[kafka]\npartitions = {partitions}\n[judge_quality]\nmax_items = 1000\n\
             [reviewers]\nmin_items = {min_items}\n"
        )
    };
    assert!(Config::from_toml(&items(4, 250)).is_ok());
    assert_eq!(refused_keys(&items(4, 251)), ["reviewers.min_items"]);
    let e = Config::from_toml(&items(4, 251)).unwrap_err().to_string();
    assert!(
        e.contains("at most 250 = judge_quality.max_items (1000)"),
        "{e}"
    );
    assert!(Config::from_toml(&items(1, 1000)).is_ok());
    // Where reviewers learn nothing, their minimum binds nothing.
    let off = format!("{}enabled = false\n", items(4, 251));
    assert!(Config::from_toml(&off).is_ok());
}

/// A decay of 0 would leave every score where its project's first batch put it: refused, for
/// the whole and for one project, with why; the smallest positive rate is accepted.
#[test]
fn a_decay_rate_of_zero_that_would_freeze_every_score_is_refused() {
    for (text, key) in [
        ("[scoring]\nlambda = 0.0", "scoring.lambda"),
        (
            "[scoring.project_lambda]\n\"p-1\" = 0",
            "scoring.project_lambda.p-1",
        ),
    ] {
        assert_eq!(refused_keys(text), [key]);
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(e.contains("> 0") && e.contains("move its score"), "{e}");
    }
    let tiny = Config::from_toml("[scoring]\nlambda = 1e-300").unwrap();
    assert_eq!(tiny.scoring.lambda, 1e-300);
}

#[test]
fn producer_overrides_cannot_turn_idempotence_off() {
    for (text, key) in [
        (
            "[kafka.producer]\n\"enable.idempotence\" = \"false\"\n",
            "kafka.producer.enable.idempotence",
        ),
        ("[kafka.producer]\nacks = \"1\"\n", "kafka.producer.acks"),
    ] {
        match Config::from_toml(text) {
            Err(ConfigError::Invalid { key: k, message }) => {
                assert_eq!(k, key);
                assert!(message.contains("idempotent"), "{message}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    for ok in [
        "[kafka.producer]\n\"enable.idempotence\" = \"true\"\nacks = \"all\"\n",
        "[kafka.producer]\nacks = \"-1\"\n\"linger.ms\" = \"5\"\n",
    ] {
        assert!(Config::from_toml(ok).is_ok(), "{ok}");
    }
}

/// A consumer override that would commit or store offsets before their results are
/// acknowledged, skip records of a new group, or hide a partition's end from a restore is
/// refused, each naming why; the values jurystream sets itself may be repeated.
#[test]
fn consumer_overrides_cannot_change_what_the_guarantees_rest_on() {
    let text = "[kafka.consumer]\n\"enable.auto.commit\" = \"true\"\n\
                \"enable.auto.offset.store\" = \"true\"\n\"auto.offset.reset\" = \"latest\"\n\
                \"enable.partition.eof\" = \"false\"\n\"group.id\" = \"other\"\n";
    let mut refused = refused_keys(text);
    refused.sort();
    assert_eq!(
        refused,
        [
            "kafka.consumer.auto.offset.reset",
            "kafka.consumer.enable.auto.commit",
            "kafka.consumer.enable.auto.offset.store",
            "kafka.consumer.enable.partition.eof",
            "kafka.consumer.group.id",
        ]
    );
    let message = Config::from_toml(text).unwrap_err().to_string();
    for said in [
        "`kafka.consumer.enable.auto.commit`: jurystream commits offsets itself, each once the \
         results it covers are acknowledged, not on a timer: enable.auto.commit = \"true\" cannot \
         be set",
        "`kafka.consumer.group.id`: is set by kafka.group_id; set that instead",
    ] {
        assert!(message.contains(said), "{message}");
    }
    for ok in [
        "[kafka.consumer]\n\"enable.auto.commit\" = \"false\"\n\"auto.offset.reset\" = \"earliest\"\n",
        "[kafka.consumer]\n\"enable.auto.offset.store\" = \"false\"\n\"fetch.max.bytes\" = \"1048576\"\n",
    ] {
        assert!(Config::from_toml(ok).is_ok(), "{ok}");
    }
}

/// Each topic has one role: an output named as an input (read back, its dead letters read back
/// again), two outputs on one topic, or the changelog or an internal topic named as another is
/// refused, each second use naming the first.
#[test]
fn each_topic_has_one_role() {
    let text = "[topics]\nscores = \"jury.votes\"\nconsensus = \"jury.leaderboard\"\n\
                state = \"jury.reputations\"\ndead_letters = \"app-repartition\"\n\
                [kafka]\ngroup_id = \"app\"\n";
    let mut refused = refused_keys(text);
    refused.sort();
    assert_eq!(
        refused,
        [
            "kafka.group_id",
            "topics.leaderboard",
            "topics.scores",
            "topics.state"
        ]
    );
    let message = Config::from_toml(text).unwrap_err().to_string();
    for said in [
        "`topics.scores`: names the topic \"jury.votes\", which topics.votes names too: each \
         topic has one role",
        "`kafka.group_id`: names the topic \"app-repartition\", which topics.dead_letters names \
         too",
    ] {
        assert!(message.contains(said), "{message}");
    }
    // The changelog named after the group, and named by `topics.state`.
    let text = "[topics]\nleaderboard = \"g-state\"\n[kafka]\ngroup_id = \"g\"\n";
    assert_eq!(refused_keys(text), ["topics.state"]);
    let text = "[topics]\nvotes = \"jury.judge-scores\"\n";
    assert_eq!(refused_keys(text), ["topics.judge_scores"]);
    let text = "[topics]\nstate = \"mine\"\nleaderboard = \"jurystream-state\"\n";
    assert!(Config::from_toml(text).is_ok());
}

/// A SASL mechanism librdkafka does not have is refused with the ones it has and the nearest
/// (librdkafka itself would refuse it only once a client is created).
#[test]
fn a_sasl_mechanism_must_be_one_librdkafka_has() {
    let e = Config::from_toml("[kafka]\nsasl_mechanism = \"SCRAM-SHA256\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "`kafka.sasl_mechanism`: `SCRAM-SHA256` is not one of `PLAIN`, `SCRAM-SHA-256`, \
             `SCRAM-SHA-512`, `GSSAPI`, `OAUTHBEARER`; the nearest is `SCRAM-SHA-256`"
        ),
        "{e}"
    );
    assert!(Config::from_toml("[kafka]\nsasl_mechanism = \"SCRAM-SHA-512\"\n").is_ok());
}

#[test]
fn session_settings_are_validated() {
    let e = Config::from_toml("[sessions]\nstrategy = \"loudest\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("strategy"), "{e}");
    let e = Config::from_toml("[sessions.judge_weights]\n\"openai/gpt-4o\" = 0")
        .unwrap_err()
        .to_string();
    assert!(e.contains("sessions.judge_weights.openai/gpt-4o"), "{e}");
    let c = Config::from_toml("[sessions]\nstrategy = \"median\"\nmethod = \"borda\"").unwrap();
    assert_eq!(
        (c.sessions.strategy, c.sessions.method),
        (Strategy::Median, Method::Borda)
    );
    let e = Config::from_toml("[sessions]\ndefault_scale_min = 10")
        .unwrap_err()
        .to_string();
    assert!(e.contains("sessions.default_scale_min"), "{e}");
    for (toml, key) in [
        ("[sessions]\nmax_candidates = 0", "sessions.max_candidates"),
        ("[sessions]\nmax_judges = 0", "sessions.max_judges"),
        ("[limits]\nmax_projects = 0", "limits.max_projects"),
    ] {
        let e = Config::from_toml(toml).unwrap_err().to_string();
        assert!(e.contains(key), "{e}");
    }
}

#[test]
fn project_lambda_overrides() {
    let c = Config::from_toml("[scoring.project_lambda]\n\"p-1\" = 0.5").unwrap();
    assert_eq!(c.scoring.lambda_for("p-1"), 0.5);
    assert_eq!(c.scoring.lambda_for("p-2"), 0.01);
}

#[test]
fn a_log_filter_that_would_log_nothing_meant_is_refused() {
    for good in [
        "info",
        "WARN",
        "info,librdkafka=warn,rdkafka=warn",
        "jurystream=debug",
        "off",
        "",
    ] {
        let toml = format!("[log]\nlevel = {good:?}");
        assert!(Config::from_toml(&toml).is_ok(), "{good}");
    }
    for (bad, why) in [
        ("verbose", "\"verbose\" is neither a level"),
        ("info,jurystream", "\"jurystream\" is neither a level"),
        ("jurystream=loud", "\"loud\" is not a level"),
    ] {
        let e = Config::from_toml(&format!("[log]\nlevel = {bad:?}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("log.level") && e.contains(why), "{e}");
    }
}

#[test]
fn http_bind_takes_an_address_or_a_host_name_with_a_port() {
    for good in [
        "127.0.0.1:9464",
        "[::]:9464",
        "localhost:9464",
        "jurystream-0.jurystream:80",
    ] {
        let toml = format!("[http]\nbind = {good:?}");
        assert!(Config::from_toml(&toml).is_ok(), "{good}");
    }
    for bad in [
        "localhost",
        "localhost:99999",
        ":9464",
        "bad host:9464",
        "-a:1",
    ] {
        let e = Config::from_toml(&format!("[http]\nbind = {bad:?}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("http.bind") && e.contains("localhost:9464"),
            "{e}"
        );
    }
}

/// The keys a refusal names, in order: one for a single problem, each of several.
fn refused_keys(text: &str) -> Vec<String> {
    let key = |p: ConfigError| match p {
        ConfigError::Invalid { key, .. } => key,
        ConfigError::Load(e) => e.path.join("."),
        other => panic!("{text}: {other:?}"),
    };
    match Config::from_toml(text) {
        Err(ConfigError::Several(problems)) => problems.into_iter().map(key).collect(),
        Err(problem) => vec![key(problem)],
        other => panic!("{text}: {other:?}"),
    }
}

/// Values of the wrong type are refused together, each put back to its default so that the
/// rest is read, and with the values out of range; a map's entry of the wrong type, which has
/// no default, ends the refusal with what was found.
#[test]
fn values_of_the_wrong_type_are_named_with_the_others() {
    let text = "[kafka]\npartitions = \"six\"\ncommit_interval_ms = \"soon\"\n\
                [scoring]\nlambda = -1\n";
    assert_eq!(
        refused_keys(text),
        [
            "kafka.commit_interval_ms",
            "kafka.partitions",
            "scoring.lambda"
        ]
    );
    let message = Config::from_toml(text).unwrap_err().to_string();
    assert!(
        message.contains(
            "- configuration key `kafka.partitions` (from TOML source string): invalid type: \
             found string \"six\", expected i32"
        ),
        "{message}"
    );
    // Read in the order of the keys: `bootstrap_servers`, then the map `consumer`, whose
    // refusal ends the reading before `partitions`.
    let text = "[kafka]\nbootstrap_servers = 9092\npartitions = \"six\"\n\
                [kafka.consumer]\n\"fetch.max.bytes\" = 5\n";
    assert_eq!(
        refused_keys(text),
        ["kafka.bootstrap_servers", "kafka.consumer.fetch.max.bytes"]
    );
}

/// A name that is not one of its setting's choices is refused with the choices, each quoted
/// once, and the nearest (figment's own words quoted the list twice).
#[test]
fn a_value_not_among_the_choices_names_them_and_the_nearest() {
    let text = "[input]\npartitioning = \"bykey\"\n[scoring]\nreputation_source = \"learnt\"\n";
    assert_eq!(
        refused_keys(text),
        ["input.partitioning", "scoring.reputation_source"]
    );
    let message = Config::from_toml(text).unwrap_err().to_string();
    for line in [
        "configuration key `input.partitioning` (from TOML source string): `bykey` is not one of \
         `repartition`, `by_key`; the nearest is `by_key`",
        "configuration key `scoring.reputation_source` (from TOML source string): `learnt` is not \
         one of `table`, `learned`, `both`; the nearest is `learned`",
    ] {
        assert!(message.contains(line), "{message}");
    }
    assert!(!message.contains("``"), "{message}");
}

#[test]
fn every_mistake_is_named_at_once() {
    let text = "[http]\nbind = \"nowhere\"\n[scoring]\nlambda = -1\n\
                [sessions]\nmax_judges = 0\n[sessions.judge_weights]\na = 0\nb = -1\n";
    assert_eq!(
        refused_keys(text),
        [
            "http.bind",
            "scoring.lambda",
            "sessions.max_judges",
            "sessions.judge_weights.a",
            "sessions.judge_weights.b",
        ]
    );
    let message = Config::from_toml(text).unwrap_err().to_string();
    assert!(
        message.starts_with("the configuration has 5 problems:\n- configuration key `http.bind`"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 6, "{message}");
    // One mistake reads as before.
    assert_eq!(refused_keys("[scoring]\nlambda = -1"), ["scoring.lambda"]);
}

#[test]
fn every_record_a_lower_limit_cannot_hold_is_named_at_once() {
    // Under a producer limit of 150,000 bytes the defaults' audit, leaderboard and items are
    // all too large: each is named, not one per attempt, and an item too long for its waiting
    // score is one problem of the ids, not also one of its verdicts.
    let text = "[kafka.producer]\n\"message.max.bytes\" = \"150000\"\n";
    assert_eq!(
        refused_keys(text),
        [
            "bias.project_max_judges",
            "leaderboard.max_models",
            "limits.max_id_bytes",
        ]
    );
    // The records are sized from the limits only once those are valid: a limit of 0 is one
    // problem, not one for every record it would size.
    assert_eq!(
        refused_keys("[limits]\nmax_message_bytes = 0"),
        ["limits.max_message_bytes"]
    );
}

/// What another setting leaves out is named with why and what to set instead, and nothing
/// is named where every setting takes effect: the defaults, or `by_key` with the statistics
/// and ticks turned off.
#[test]
fn a_setting_another_leaves_without_effect_is_named() {
    let named = |text: &str| -> Vec<&'static str> {
        let config = Config::from_toml(text).unwrap();
        config
            .without_effect(true)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    assert!(named("").is_empty());
    let by_key = "[input]\npartitioning = \"by_key\"\n";
    assert_eq!(
        named(by_key),
        [
            "judge_quality.enabled",
            "reviewers.enabled",
            "sessions.idle_timeout_secs"
        ]
    );
    let off = "[judge_quality]\nenabled = false\n[reviewers]\nenabled = false\n\
               [sessions]\nidle_timeout_secs = 0\n";
    assert!(named(&format!("{by_key}{off}")).is_empty());
    assert_eq!(
        named("[judge_quality]\nenabled = false\n"),
        ["reviewers.enabled"]
    );
    let config = Config::from_toml("[judge_quality]\nenabled = false\n").unwrap();
    let (_, said) = &config.without_effect(true)[0];
    assert!(
        said.contains("with judge_quality.enabled = false")
            && said.contains("jury.reviewer-quality")
            && said.contains("set it to false, or judge_quality.enabled to true"),
        "{said}"
    );
    let config = Config::from_toml(by_key).unwrap();
    // Replay reads its ticks from its file, so only the statistics are without effect there.
    let in_replay: Vec<_> = config
        .without_effect(false)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(in_replay, ["judge_quality.enabled", "reviewers.enabled"]);
    let said: Vec<_> = config
        .without_effect(true)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert!(
        said[0].contains("jury.judge-quality") && said[0].contains("use \"repartition\""),
        "{said:?}"
    );
    assert!(said[2].contains("set it to 0"), "{said:?}");
}
