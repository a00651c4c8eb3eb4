//! Every changelog record of judge quality's items, of open sessions and of a project's bias
//! audit fits the largest record the producer sends, however long and hostile the ids: a
//! record the producer refused would stop the service at every restart.

use super::*;
use crate::engine::model::bias::{ProjectAudit, largest_audit_bytes};
use crate::engine::model::leaderboard::{largest_block_bytes, largest_ranking_bytes};

/// An id of `bytes` bytes, `tag` and `n` first, then control characters, which JSON spells in
/// six bytes each (`\u0001`): the longest an id can be written.
fn hostile_id(tag: char, n: usize, bytes: usize) -> String {
    let head = format!("{tag}{n:04}");
    format!("{head}{}", "\\u0001".repeat(bytes - head.len()))
}

/// The most `setting` of `config` accepts, counting up from its value; `config` is left with
/// one more.
fn most_accepted(config: &mut Config, setting: impl Fn(&mut Config) -> &mut usize) -> usize {
    let mut most = *setting(config);
    while {
        *setting(config) = most + 1;
        config.validate().is_ok()
    } {
        most += 1;
    }
    most
}

/// The largest record of `log`, key and value, with its key.
fn largest(log: &[StateRecord]) -> (usize, String) {
    let size = |r: &StateRecord| r.key.len() + r.value.as_ref().map_or(0, Vec::len);
    let sizes = log.iter().map(|r| (size(r), r.key.clone()));
    sizes.max().unwrap_or_default()
}

/// A project's sessions, each scoring the same 16 items (a bucket's places) with one judge:
/// with no votes, every score waits, up to `judge_quality.max_judges` an item.
fn scores_waiting(config: &Config, sessions: usize) -> Vec<String> {
    let ids = config.limits.max_id_bytes;
    let item = |i: usize| hostile_id('i', i, ids);
    let scores: Vec<String> = (0..16).map(|i| format!(r#""{}": 5"#, item(i))).collect();
    let candidates: Vec<String> = (0..16)
        .map(|i| format!(r#""{}": {{"author": "m/a", "position": {i}}}"#, item(i)))
        .collect();
    (0..sessions)
        .map(|s| {
            format!(
                r#"{{"event_id": "{}", "project_id": "{}", "session_id": "{}", "occurred_at": 1795168800000, "judge": "{}", "scores": {{{}}}, "candidates": {{{}}}, "expected_judges": 1, "category": "c"}}"#,
                hostile_id('e', s, ids),
                hostile_id('p', 0, ids),
                hostile_id('s', s, ids),
                hostile_id('j', s, ids),
                scores.join(","),
                candidates.join(",")
            )
        })
        .collect()
}

/// Votes on 16 items of 16 projects (a bucket's places), each item given `verdicts` verdicts in
/// each of two flushes by reviewers of the longest ids: the second flush's buckets hold every
/// item twice, as it found them and as it left them.
fn verdicts_on_items(config: &Config, verdicts: usize) -> Vec<String> {
    let ids = config.limits.max_id_bytes;
    let batch = |round: usize, item: usize| {
        let votes: Vec<String> = (0..verdicts)
            .map(|v| {
                let reviewer = hostile_id('r', round * verdicts + v, ids);
                format!(r#"{{"voter_id": "{reviewer}", "verdict": "pass", "reputation": 0.9}}"#)
            })
            .collect();
        format!(
            r#"{{"event_id": "{}", "project_id": "{}", "item_id": "{}", "occurred_at": {}, "votes": [{}]}}"#,
            hostile_id('e', round * 16 + item, ids),
            hostile_id('p', item, ids),
            hostile_id('i', item, ids),
            1_795_168_800_000 + round * 1_000 + item,
            votes.join(",")
        )
    };
    (0..2)
        .flat_map(|round| (0..16).map(move |item| batch(round, item)))
        .collect()
}

/// The changelog `payloads` write, one flush per 16 records, with `config`'s engine.
fn changelog_of(config: &Config, payloads: &[String]) -> Vec<StateRecord> {
    let engine = Engine::new(config.engine_settings());
    let mut state = PartitionState::journaled();
    let mut log = Vec::new();
    run(
        &engine,
        Unit::projects(0),
        &mut state,
        payloads,
        0,
        16,
        &mut log,
    );
    log
}

/// With the defaults, 16 items each waiting for votes with `judge_quality.max_judges` scores of
/// sessions and judges of the longest ids (the changelog would write 4.9 MB of them in one
/// record): each item keeps the newest scores that fit its share of a record.
#[test]
fn waiting_judge_scores_of_the_longest_ids_fit_a_record() {
    let config = Config::default();
    let payloads = scores_waiting(&config, config.judge_quality.max_judges);
    let limit = config.producer_record_limit();
    assert!(
        payloads
            .iter()
            .all(|p| p.len() <= config.limits.max_message_bytes)
    );
    let log = changelog_of(&config, &payloads);
    let (bytes, key) = largest(&log);
    assert!(bytes <= limit, "{key}: {bytes} bytes, above {limit}");
    // The items do wait: their buckets are most of a record.
    let waits = log.iter().filter(|r| r.key.contains("\"waits\""));
    let (waits_bytes, _) = largest(&waits.cloned().collect::<Vec<_>>());
    assert!(waits_bytes > limit / 4, "{waits_bytes}");
}

/// Items of the longest ids with as many verdicts of the longest reviewer ids as the
/// configuration accepts, in two flushes: every item bucket fits, holding each item twice.
#[test]
fn items_with_the_most_verdicts_the_configuration_accepts_fit_a_record() {
    let mut config = Config::default();
    // The defaults' 32 verdicts, and the most the defaults' record limit accepts.
    let accepted = |config: &Config| config.validate().is_ok();
    let most = most_accepted(&mut config, |c| &mut c.reviewers.max_verdicts);
    // An item's share of the default record limit is (1,114,112 - 512) / 32 = 34,800 bytes;
    // an item of 256-byte ids takes at most 604 of them, and each verdict 291 more: 117.
    assert_eq!(most, 117);
    let limit = config.producer_record_limit();
    for verdicts in [32, most] {
        config.reviewers.max_verdicts = verdicts;
        assert!(accepted(&config));
        let log = changelog_of(&config, &verdicts_on_items(&config, verdicts));
        let (bytes, key) = largest(&log);
        assert!(
            bytes <= limit,
            "{verdicts} verdicts: {key}: {bytes} bytes, above {limit}"
        );
        // The bound is near: the largest bucket takes most of a record.
        if verdicts == most {
            assert!(bytes > limit * 3 / 4, "{bytes}");
        }
    }
}

/// The configuration refuses verdicts and ids its items could not hold, naming the key to
/// change, and accepts them once the record limit is raised.
#[test]
fn settings_whose_items_could_outgrow_a_record_are_refused() {
    let mut config = Config::default();
    assert!(config.validate().is_ok());
    config.reviewers.max_verdicts = 1_000;
    let error = config
        .validate()
        .expect_err("1,000 verdicts of 256 bytes do not fit")
        .to_string();
    assert!(error.contains("reviewers.max_verdicts"), "{error}");
    assert!(error.contains("limits.max_message_bytes"), "{error}");
    config.limits.max_message_bytes = 16 << 20;
    assert!(config.validate().is_ok());
    // Without the reviewers an item keeps no verdicts.
    config.limits.max_message_bytes = Config::default().limits.max_message_bytes;
    config.reviewers.enabled = false;
    assert!(config.validate().is_ok());
    // Ids too long for even one waiting score (a project's audit of five judges and a category
    // of five models hold them).
    config.bias.project_max_judges = 5;
    config.leaderboard.max_models = 5;
    config.limits.max_id_bytes = 4_096;
    let error = config
        .validate()
        .expect_err("ids of 4 kB do not fit")
        .to_string();
    assert!(error.contains("limits.max_id_bytes"), "{error}");
    // Nor are items held where judge scores do not pair with votes.
    config.input.partitioning = crate::config::Partitioning::ByKey;
    assert!(config.validate().is_ok());
    config.input.partitioning = crate::config::Partitioning::Repartition;
    config.judge_quality.enabled = false;
    assert!(config.validate().is_ok());
    // The producer's own limit counts where it is set.
    let mut config = Config::default();
    assert!(config.validate().is_ok());
    let producer = &mut config.kafka.producer;
    producer.insert("message.max.bytes".into(), "150000".into());
    let error = config
        .validate()
        .expect_err("150 kB records are too small")
        .to_string();
    assert!(error.contains("message.max.bytes"), "{error}");
}

/// `largest_item_bytes` bounds an item's bytes in its bucket from above, closely: an item of
/// the longest ids and the most verdicts, timed to the nanosecond, judged.
#[test]
fn the_largest_item_is_bounded_closely() {
    use crate::engine::model::reviewers::{Review, Verdict};
    let ids = 256;
    let long = |c: char| c.to_string().repeat(ids);
    // Times of the year 9999 to the nanosecond, each verdict's unlike the one before it, so
    // that every one is written.
    let at = |secs| EventTime::new(secs, 999_999_999).unwrap();
    let (ready, other) = (at(253_402_300_799), at(253_402_300_798));
    for verdicts in [0, 1, 32, 117] {
        let review = Review {
            verdicts: (0..verdicts)
                .map(|v| Verdict {
                    reviewer: ProjectKey::from(format!("{v:04}{}", "r".repeat(ids - 4))),
                    pass: true,
                    weight: 0.1,
                    at: if v % 2 == 0 { other } else { ready },
                })
                .collect(),
            judged: Some((0.3, u32::MAX)),
        };
        let item = ItemVotes {
            weighted: 0.1,
            weight: 0.3,
            votes: u64::MAX,
            ready_at: Some(ready),
            review,
        };
        let mut bytes = Vec::new();
        assert!(push_packed(
            &mut bytes,
            &(u64::MAX, long('p'), long('i'), &item)
        ));
        let bound = largest_item_bytes(ids, verdicts);
        assert!(
            bytes.len() <= bound,
            "{verdicts}: {} > {bound}",
            bytes.len()
        );
        assert!(
            bytes.len() * 100 >= bound * 95,
            "{verdicts}: {} of {bound}",
            bytes.len()
        );
    }
}

/// With the defaults, an open session of `sessions.max_judges` judges, each ballot scoring 200
/// candidates of the longest ids (its record took 28 MB): the ballots the record cannot hold
/// are refused (`session_limit`), and every record fits.
#[test]
fn an_open_session_of_the_longest_ids_fits_a_record() {
    let config = Config::default();
    let ids = config.limits.max_id_bytes;
    let judges = config.sessions.max_judges;
    let candidate = |i: usize| hostile_id('c', i, ids);
    let scores: Vec<String> = (0..200)
        .map(|i| format!(r#""{}": 5"#, candidate(i)))
        .collect();
    let payloads: Vec<String> = (0..judges)
        .map(|j| {
            format!(
                r#"{{"event_id": "{}", "project_id": "{}", "session_id": "{}", "occurred_at": 1795168800000, "judge": "{}", "scores": {{{}}}, "expected_judges": {judges}}}"#,
                hostile_id('e', j, ids),
                hostile_id('p', 0, ids),
                hostile_id('s', 0, ids),
                hostile_id('j', j, ids),
                scores.join(",")
            )
        })
        .collect();
    assert!(
        payloads
            .iter()
            .all(|p| p.len() <= config.limits.max_message_bytes)
    );
    let log = changelog_of(&config, &payloads);
    let limit = config.producer_record_limit();
    let (bytes, key) = largest(&log);
    assert!(bytes <= limit, "{key}: {bytes} bytes, above {limit}");
    // The session is open with the ballots that fit: some, not all.
    let sessions: Vec<&StateRecord> = log
        .iter()
        .filter(|r| r.key.contains("\"session\""))
        .collect();
    let last = sessions
        .last()
        .and_then(|r| r.value.as_ref())
        .expect("the session was written");
    let session: serde_json::Value = serde_json::from_slice(last).unwrap();
    let ballots = session["ballots"]
        .as_object()
        .map_or(0, serde_json::Map::len);
    assert!((1..judges).contains(&ballots), "{ballots} ballots");
}

/// With the defaults, 800 one-judge sessions of a project, each judge and candidate of the
/// longest ids and shown at a position of its own (the audit's record took 1.26 MB, above the
/// producer's limit): the audit follows the judges it saw last, pools the first positions, and
/// every record fits.
#[test]
fn a_project_audit_of_the_longest_ids_fits_a_record() {
    let config = Config::default();
    let ids = config.limits.max_id_bytes;
    let payloads: Vec<String> = (0..800)
        .map(|s| {
            format!(
                r#"{{"event_id": "{}", "project_id": "{}", "session_id": "{}", "occurred_at": 1795168800000, "judge": "{}", "scores": {{"{}": 5}}, "candidates": {{"{}": {{"position": {}}}}}, "expected_judges": 1}}"#,
                hostile_id('e', s, ids),
                hostile_id('p', 0, ids),
                hostile_id('s', s, ids),
                hostile_id('j', s, ids),
                hostile_id('c', s, ids),
                hostile_id('c', s, ids),
                1_000 * s,
            )
        })
        .collect();
    let log = changelog_of(&config, &payloads);
    let limit = config.producer_record_limit();
    let (bytes, key) = largest(&log);
    assert!(bytes <= limit, "{key}: {bytes} bytes, above {limit}");
    let audit = log
        .iter()
        .rfind(|r| r.key.contains("\"audit\""))
        .and_then(|r| r.value.as_ref())
        .expect("the audit was written");
    let audit: ProjectAudit = serde_json::from_slice(audit).unwrap();
    let followed = config.bias.project_max_judges;
    assert_eq!(audit.judges_followed(), followed);
    assert_eq!(audit.forgotten, 800 - followed as u64);
    assert!(
        audit
            .judges
            .contains_key(&hostile_id('j', 799, ids).replace("\\u0001", "\u{1}"))
    );
    // Positions 0, 1,000, ..., of which the first only is below 1,000.
    assert_eq!(audit.positions.keys().collect::<Vec<_>>(), [&0]);
}

/// The configuration refuses an audit its record could not hold, naming the key to change, and
/// accepts it once the record limit is raised.
#[test]
fn settings_whose_audit_could_outgrow_a_record_are_refused() {
    let mut config = Config::default();
    let accepted = |config: &Config| config.validate().is_ok();
    let most = most_accepted(&mut config, |c| &mut c.bias.project_max_judges);
    // The record holds 1,114,112 - 512 - 1,538 (the key's project id) = 1,112,062 bytes. An
    // audit takes 387 for its own fields, 112 a position (22 + 88 + 2: `"<u64>":<running>,`)
    // and 7,932 a judge: 4,816 for its entries (1,538 + 88 + 2 in `judges` and
    // `self_inflation`, 1,538 + 20 + 2 in `seen`) and 3,116 for two findings. (1,112,062 -
    // 387 - 112,000) / 7,932 = 126.
    assert_eq!(most, 126);
    assert_eq!(largest_audit_bytes(256, 0, 1_000), 387 + 112_000);
    assert_eq!(
        largest_audit_bytes(256, 1, 0) - largest_audit_bytes(256, 0, 0),
        7_932
    );
    config.bias.project_max_judges = 1_000;
    let error = config
        .validate()
        .expect_err("1,000 judges do not fit")
        .to_string();
    assert!(error.contains("bias.project_max_judges"), "{error}");
    assert!(error.contains("limits.max_message_bytes"), "{error}");
    config.limits.max_message_bytes = 16 << 20;
    assert!(accepted(&config));
    config.bias.project_max_positions = 1 << 20;
    let error = config
        .validate()
        .expect_err("a million positions do not fit")
        .to_string();
    assert!(error.contains("bias.project_max_positions"), "{error}");
}

/// The configuration refuses more models than a category's Bradley-Terry records hold: a
/// block grows with the square of the models (1,000, accepted before, could take 30 MB).
#[test]
fn settings_whose_leaderboard_could_outgrow_a_record_are_refused() {
    let mut config = Config::default();
    let accepted = |config: &Config| config.validate().is_ok();
    let most = most_accepted(&mut config, |c| &mut c.leaderboard.max_models);
    // A record holds 1,114,112 - 512 - 2 x 1,538 (the key's project and category ids) =
    // 1,110,524 bytes; a block of m models takes 2 and 60 a pair (`[191,191,f,f],` with
    // floats of 24 bytes): m (m - 1) / 2 x 60 + 2 <= 1,110,524 for m = 192, not 193.
    assert_eq!(most, 192);
    assert_eq!(largest_block_bytes(192), 192 * 191 / 2 * 60 + 2);
    config.leaderboard.max_models = 1_000;
    let error = config
        .validate()
        .expect_err("1,000 models do not fit")
        .to_string();
    assert!(error.contains("leaderboard.max_models"), "{error}");
    assert!(error.contains("a block"), "{error}");
    config.limits.max_message_bytes = 64 << 20;
    assert!(accepted(&config));
}

/// The largest block and ranking are bounded closely: every pair of models compared, ids of
/// control characters, standings with the longest notes and numbers.
#[test]
fn the_largest_leaderboard_records_are_bounded_closely() {
    use crate::engine::model::bradley_terry::Prior;
    use crate::engine::model::leaderboard::{BlockPair, BtStanding, Ranking};
    let longest = crate::engine::model::record_bytes::LONGEST_F64;
    for models in [1usize, 2, 50, 192] {
        let last = u32::try_from(models).unwrap();
        let block: Vec<BlockPair> = (0..last)
            .flat_map(|a| (a + 1..last).map(move |b| BlockPair(a, b, longest, longest)))
            .collect();
        let bytes = serde_json::to_vec(&block).unwrap().len();
        let bound = largest_block_bytes(models);
        assert!(bytes <= bound, "{models}: {bytes} > {bound}");
        assert!(
            models < 50 || bytes * 100 >= bound * 90,
            "{models}: {bytes} of {bound}"
        );
        let id = |m: usize| format!("{m:04}{}", "\u{1}".repeat(252));
        let ranking = Ranking {
            models: (0..models).map(id).collect(),
            fitted_at: Some(EventTime::LONGEST),
            fitted: (0..models)
                .map(|m| {
                    let standing = BtStanding {
                        rating: Some(longest),
                        interval: Some((Some(longest), Some(longest))),
                        rank: Some(usize::MAX),
                        comparisons: longest,
                        note: Some(Prior::Separated.note().to_owned()),
                    };
                    (id(m), standing)
                })
                .collect(),
            unfitted: true,
            ..Ranking::default()
        };
        let bytes = serde_json::to_vec(&ranking).unwrap().len();
        let bound = largest_ranking_bytes(256, models);
        assert!(bytes <= bound, "{models}: {bytes} > {bound}");
        assert!(bytes * 100 >= bound * 98, "{models}: {bytes} of {bound}");
    }
}

/// One session ranking as many models of the longest ids as the configuration accepts, each
/// candidate by a model of its own: every pair of them is compared in one block, and every
/// record fits.
#[test]
fn a_leaderboard_of_the_most_models_fits_a_record() {
    let mut config = Config::default();
    config.leaderboard.max_models = 192;
    config.leaderboard.bootstrap_rounds = 2;
    assert!(config.validate().is_ok());
    let ids = config.limits.max_id_bytes;
    let models = config.leaderboard.max_models;
    let scores: Vec<String> = (0..models)
        .map(|c| format!(r#""{}": {}"#, hostile_id('c', c, ids), 1 + c % 10))
        .collect();
    let candidates: Vec<String> = (0..models)
        .map(|c| {
            format!(
                r#""{}": {{"author": "{}"}}"#,
                hostile_id('c', c, ids),
                hostile_id('m', c, ids)
            )
        })
        .collect();
    let ballot = format!(
        r#"{{"event_id": "e", "project_id": "{}", "session_id": "s", "occurred_at": 1795168800000, "judge": "j", "scores": {{{}}}, "candidates": {{{}}}, "expected_judges": 1, "category": "{}"}}"#,
        hostile_id('p', 0, ids),
        scores.join(","),
        candidates.join(","),
        hostile_id('k', 0, ids),
    );
    assert!(ballot.len() <= config.limits.max_message_bytes);
    let log = changelog_of(&config, &[ballot]);
    let limit = config.producer_record_limit();
    let (bytes, key) = largest(&log);
    assert!(bytes <= limit, "{key}: {bytes} bytes, above {limit}");
    let block = log.iter().find(|r| r.key.contains("\"block\""));
    let block = block
        .and_then(|r| r.value.as_ref())
        .expect("a block was written");
    let pairs: Vec<serde_json::Value> = serde_json::from_slice(block).unwrap();
    assert_eq!(pairs.len(), models * (models - 1) / 2);
}

/// A judge's window is bounded closely, and the configuration refuses a window its record could
/// not hold where records are small.
#[test]
fn a_judges_window_fits_a_record() {
    use crate::engine::model::judge_quality::{JudgeWindow, TimedPair, largest_window_bytes};
    let longest = crate::engine::model::record_bytes::LONGEST_F64;
    for pairs in [0, 1, 500, 10_000] {
        let pair = TimedPair(EventTime::LONGEST, u64::MAX, longest, longest);
        let window = JudgeWindow {
            pairs: std::iter::repeat_n(pair, pairs).collect(),
            disagreeing: false,
            drifting: false,
            last_event_at: Some(EventTime::LONGEST),
        };
        let bytes = serde_json::to_vec(&window).unwrap().len();
        let bound = largest_window_bytes(pairs);
        assert!(
            bytes <= bound && bytes + 1 >= bound,
            "{pairs}: {bytes} of {bound}"
        );
    }
    // 98 bytes a pair: `[[-62167219200,999999999],18446744073709551615,f,f],`, floats of 24.
    assert_eq!(largest_window_bytes(1) - largest_window_bytes(0), 98);
    // The defaults accept the largest window; records of 150,000 bytes hold 1,000 pairs (ids
    // of 128 bytes: room for 150,000 - 512 - 2 x 770 = 147,948 bytes), not 10,000.
    let mut config = Config::default();
    config.judge_quality.window = 10_000;
    assert!(config.validate().is_ok());
    let producer = &mut config.kafka.producer;
    producer.insert("message.max.bytes".into(), "150000".into());
    config.bias.project_max_judges = 16;
    config.bias.project_max_positions = 100;
    config.leaderboard.max_models = 20;
    config.reviewers.max_verdicts = 8;
    config.limits.max_id_bytes = 128;
    let error = config
        .validate()
        .expect_err("10,000 pairs do not fit 150 kB")
        .to_string();
    assert!(error.contains("judge_quality.window"), "{error}");
    config.judge_quality.window = 1_000;
    assert!(config.validate().is_ok());
}
