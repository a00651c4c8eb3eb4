//! The checks of the engine's sections of the configuration (their types, defaults and meaning
//! are [`crate::engine::settings`]'s): every value a type cannot express, each error naming its
//! key.

use super::{
    Config, ConfigError, MAX_DEDUPE_WINDOW, Problems, ReputationSource, at_most, decay_rate,
    each_at_most, invalid, positive, unit_interval,
};
use crate::changelog::largest_item_bytes;
use crate::engine::model::bias::largest_audit_bytes;
use crate::engine::model::judge_quality::{
    item_share, largest_waiting_bytes, largest_window_bytes,
};
use crate::engine::model::leaderboard::{largest_block_bytes, largest_ranking_bytes};
use crate::engine::model::record_bytes::{ENVELOPE, json_str_at_most};

/// The longest a session may wait for its judges, by either timeout (see `validate`).
const MAX_SESSION_WAIT_SECS: usize = 7 * 24 * 3600;

/// The most an event time may lie ahead of its record's timestamp and of the service's clock
/// (see `validate`).
const MAX_FUTURE_SKEW_SECS: usize = 3600;

/// Checks the engine's sections, noting every problem in `p`.
pub(super) fn validate(c: &Config, p: &mut Problems) {
    let before = p.len();
    let l = &c.limits;
    for (key, value) in [
        ("limits.max_message_bytes", l.max_message_bytes),
        ("limits.max_votes_per_event", l.max_votes_per_event),
        ("limits.max_id_bytes", l.max_id_bytes),
        (
            "limits.dead_letter_payload_bytes",
            l.dead_letter_payload_bytes,
        ),
        ("limits.dedupe_window", l.dedupe_window),
        ("limits.max_projects", l.max_projects),
    ] {
        p.check(positive(key, value));
    }
    p.check(at_most(
        "limits.dedupe_window",
        l.dedupe_window,
        MAX_DEDUPE_WINDOW,
        "ids per project (the window's index limit)",
    ));
    p.check(at_most(
        "limits.max_message_bytes",
        l.max_message_bytes,
        1_000_000_000,
        "(librdkafka's limit)",
    ));
    // An event time accepted this far ahead keeps its project's honest batches `late` (their
    // votes counted, the score unmoved) until their time passes it: a bound of hours or years
    // (a unit mistyped) would let one producer's wrong clock freeze a score that long.
    p.check(at_most(
        "limits.max_future_skew_secs",
        usize::try_from(l.max_future_skew_secs).unwrap_or(usize::MAX),
        MAX_FUTURE_SKEW_SECS,
        "s (an hour; a batch accepted this far ahead keeps its project's score from moving \
         as long)",
    ));
    p.check(decay_rate("scoring.lambda", c.scoring.lambda));
    for (project, lambda) in &c.scoring.project_lambda {
        p.check(decay_rate(
            &format!("scoring.project_lambda.{project}"),
            *lambda,
        ));
    }
    p.check(unit_interval(
        "scoring.initial_score",
        c.scoring.initial_score,
    ));
    if c.scoring.reputation_source != ReputationSource::Table && !c.learns_reviewers() {
        p.push(invalid(
            "scoring.reputation_source",
            "learned weights need reviewer reliability: reviewers.enabled and \
             judge_quality.enabled, with input.partitioning = \"repartition\"",
        ));
    }
    let se = &c.sessions;
    if !se.default_scale_min.is_finite()
        || !se.default_scale_max.is_finite()
        || se.default_scale_min >= se.default_scale_max
    {
        p.push(invalid(
            "sessions.default_scale_min",
            "must be finite and below sessions.default_scale_max",
        ));
    }
    p.check(positive("sessions.timeout_secs", se.timeout_secs as usize));
    // A wait of more than a week is a typo (milliseconds given for seconds), and would hold a
    // session whose last judge never comes, and its consensus, that long.
    let waits = [
        ("sessions.timeout_secs", se.timeout_secs),
        ("sessions.idle_timeout_secs", se.idle_timeout_secs),
    ];
    each_at_most(p, waits, MAX_SESSION_WAIT_SECS, "s (a week)");
    p.check(positive(
        "sessions.max_open_per_project",
        se.max_open_per_project,
    ));
    p.check(positive("sessions.max_open_total", se.max_open_total));
    p.check(positive("sessions.completed_window", se.completed_window));
    p.check(positive("sessions.max_candidates", se.max_candidates));
    p.check(positive("sessions.max_judges", se.max_judges));
    for (judge, w) in &se.judge_weights {
        if !w.is_finite() || *w <= 0.0 {
            p.push(invalid(
                &format!("sessions.judge_weights.{judge}"),
                format!("must be a finite number > 0, got {w}"),
            ));
        }
    }
    let b = &c.bias;
    for (key, v) in [
        ("bias.length_r", b.length_r),
        ("bias.length_p", b.length_p),
        ("bias.position_variance", b.position_variance),
        ("bias.low_agreement", b.low_agreement),
        (
            "bias.project_calibration_margin",
            b.project_calibration_margin,
        ),
    ] {
        p.check(unit_interval(key, v));
    }
    if !b.self_vote_inflation.is_finite() {
        p.push(invalid("bias.self_vote_inflation", "must be finite"));
    }
    p.check(positive("bias.project_max_judges", b.project_max_judges));
    p.check(positive(
        "leaderboard.window_days",
        c.leaderboard.window_days as usize,
    ));
    p.check(at_most(
        "leaderboard.window_days",
        c.leaderboard.window_days as usize,
        366,
        "days (a category keeps resampling blocks for each)",
    ));
    p.check(at_most(
        "leaderboard.bootstrap_rounds",
        c.leaderboard.bootstrap_rounds,
        10_000,
        "resamples (each refits the window)",
    ));
    p.check(positive("leaderboard.max_models", c.leaderboard.max_models));
    p.check(positive(
        "leaderboard.max_categories",
        c.leaderboard.max_categories,
    ));
    p.check(at_most(
        "leaderboard.max_models",
        c.leaderboard.max_models,
        1_000,
        "models per category (a refit costs their square)",
    ));
    let q = &c.judge_quality;
    for (key, value) in [
        ("judge_quality.min_human_votes", q.min_human_votes as usize),
        ("judge_quality.max_pending_items", q.max_pending_items),
        ("judge_quality.max_items", q.max_items),
        ("judge_quality.window", q.window),
    ] {
        p.check(positive(key, value));
    }
    p.check(at_most(
        "judge_quality.window",
        q.window,
        10_000,
        "pairs (each pair recomputes the window's statistics)",
    ));
    p.check(positive("judge_quality.max_judges", q.max_judges));
    for (key, v) in [
        ("judge_quality.max_kappa_drop", q.max_kappa_drop),
        ("judge_quality.review_gap", q.review_gap),
    ] {
        p.check(unit_interval(key, v));
    }
    if !(-1.0..=1.0).contains(&q.min_kappa) {
        p.push(invalid("judge_quality.min_kappa", "must be in [-1, 1]"));
    }
    // A minimum its bound can never reach would leave an alert, a learned weight or a
    // correlation out for good, without a word: refused, naming both.
    let window = format!("judge_quality.window ({})", q.window);
    p.check(at_most(
        "judge_quality.min_pairs",
        q.min_pairs,
        q.window,
        &format!(
            "= {window}: a judge's window holds that many pairs, so its disagreement alert and \
             learned weight would never come"
        ),
    ));
    p.check(at_most(
        "judge_quality.min_shared",
        q.min_shared,
        q.window,
        &format!(
            "= {window}: two judges share at most that many candidates, so no correlation \
             would count in effective_judges"
        ),
    ));
    let r = &c.reviewers;
    if c.learns_reviewers() {
        let held = c.quality_task_items();
        p.check(at_most(
            "reviewers.min_items",
            usize::try_from(r.min_items).unwrap_or(usize::MAX),
            held,
            &format!(
                "= judge_quality.max_items ({}) over kafka.partitions ({}), the items a task \
                 holds: no reviewer would ever have more shared items, so none would be \
                 alerted on or weighed by its learned reliability",
                q.max_items, c.kafka.partitions
            ),
        ));
    }
    p.check(positive("reviewers.max_reviewers", r.max_reviewers));
    p.check(positive("reviewers.max_verdicts", r.max_verdicts));
    p.check(at_most(
        "reviewers.max_verdicts",
        r.max_verdicts,
        1_000,
        "verdicts per item (an item's changelog record carries them)",
    ));
    for (key, v) in [
        ("reviewers.min_reliability", r.min_reliability),
        ("reviewers.max_same_verdict", r.max_same_verdict),
    ] {
        p.check(unit_interval(key, v));
    }
    if r.max_same_verdict <= 0.5 {
        p.push(invalid(
            "reviewers.max_same_verdict",
            "must be above 0.5 (a share of the same verdict)",
        ));
    }
    p.check(at_most(
        "sessions.completed_records",
        c.sessions.completed_records,
        1_000,
        "per project",
    ));
    // The records' bounds are counted from the values above: only once those are valid, so
    // that one mistyped limit is one problem, not one per record it would size.
    if p.len() == before {
        p.check(audit_record_fits(c));
        p.check(leaderboard_records_fit(c));
        quality_records_fit(c, p);
    }
}

/// Room for state in a changelog record: the bytes the bounds may fill, and of what.
struct Room {
    bytes: usize,
    /// Whose room, before "changelog record holds": "a", or "an item's share of a".
    whose: &'static str,
    /// The largest record the producer sends.
    limit: usize,
}

impl Room {
    /// A record keyed by `key_ids` ids of `limits.max_id_bytes`: the producer's largest record
    /// less them and [`ENVELOPE`].
    fn of_record(c: &Config, key_ids: usize) -> Room {
        let limit = c.producer_record_limit();
        let key = json_str_at_most(c.limits.max_id_bytes).saturating_mul(key_ids);
        Room {
            bytes: limit.saturating_sub(ENVELOPE.saturating_add(key)),
            whose: "a",
            limit,
        }
    }

    /// Refuses settings under which `what` could take `bytes` bytes, more than this room,
    /// naming `key` and the settings to `lower`. A record the producer refused would stop the
    /// service, and stop it again at every restart as the same records came back.
    fn exceeded(&self, key: &str, what: &str, bytes: usize, lower: &str) -> ConfigError {
        let Room {
            bytes: room,
            whose,
            limit,
        } = self;
        invalid(
            key,
            format!(
                "{what} could take {bytes} bytes, above the {room} {whose} changelog record \
                 holds (records of at most {limit} bytes): lower {lower}, or raise \
                 limits.max_message_bytes (and kafka.producer's message.max.bytes, if set)"
            ),
        )
    }
}

/// Whether a project's bias audit, at `bias.project_max_judges` judges and
/// `bias.project_max_positions` positions with ids of `limits.max_id_bytes`, fits its changelog
/// record.
fn audit_record_fits(c: &Config) -> Result<(), ConfigError> {
    let (b, ids) = (&c.bias, c.limits.max_id_bytes);
    let room = Room::of_record(c, 1);
    let bytes = largest_audit_bytes(ids, b.project_max_judges, b.project_max_positions);
    if bytes <= room.bytes {
        return Ok(());
    }
    let key = if largest_audit_bytes(ids, 0, b.project_max_positions) > room.bytes {
        "bias.project_max_positions"
    } else {
        "bias.project_max_judges"
    };
    let what = format!(
        "a project's bias audit of {} judges with ids of {ids} bytes and {} positions",
        b.project_max_judges, b.project_max_positions
    );
    let lower = "bias.project_max_judges, bias.project_max_positions or limits.max_id_bytes";
    Err(room.exceeded(key, &what, bytes, lower))
}

/// Whether a category's Bradley-Terry records fit theirs at `leaderboard.max_models` models of
/// ids of `limits.max_id_bytes`: a block holds a total for every pair of models compared in it
/// (their square), the ranking each model's id and standing.
fn leaderboard_records_fit(c: &Config) -> Result<(), ConfigError> {
    let (models, ids) = (c.leaderboard.max_models, c.limits.max_id_bytes);
    let room = Room::of_record(c, 2);
    let (block, ranking) = (
        largest_block_bytes(models),
        largest_ranking_bytes(ids, models),
    );
    let (what, bytes) = if block >= ranking {
        ("a block (a total for every pair of them)".to_owned(), block)
    } else {
        (format!("its ranking (with ids of {ids} bytes)"), ranking)
    };
    if bytes <= room.bytes {
        return Ok(());
    }
    let what = format!("a category of {models} models, in {what},");
    let lower = "leaderboard.max_models or limits.max_id_bytes";
    Err(room.exceeded("leaderboard.max_models", &what, bytes, lower))
}

/// Whether every changelog record of judge quality fits, however long the ids: each of a task's
/// items must fit its share of one ([`item_share`]), and a judge's window a record. Its
/// verdicts (`reviewers.max_verdicts`) and ids (`limits.max_id_bytes`) bound an item with votes;
/// an item's waiting judge scores are kept within the share as they come, so one of them, on
/// its own, must fit; `judge_quality.window` bounds a window. Each that does not is a problem
/// in `p`.
fn quality_records_fit(c: &Config, p: &mut Problems) {
    // Items are held only where judge scores pair with votes (see `Settings::pairs_judges`).
    if !c.pairs_judges() {
        return;
    }
    let limit = c.producer_record_limit();
    let share = Room {
        bytes: item_share(limit),
        whose: "an item's share of a",
        limit,
    };
    let ids = c.limits.max_id_bytes;
    let verdicts = if c.reviewers.enabled {
        c.reviewers.max_verdicts
    } else {
        0
    };
    let lower = "reviewers.max_verdicts or limits.max_id_bytes";
    let waiting = largest_waiting_bytes(ids);
    if waiting > share.bytes {
        let what = format!("an item with one waiting judge score and ids of {ids} bytes");
        let lower = "limits.max_id_bytes";
        p.push(share.exceeded("limits.max_id_bytes", &what, waiting, lower));
    }
    let item = largest_item_bytes(ids, verdicts);
    // One problem of `limits.max_id_bytes`, not two: an item too large for its waiting score
    // is too large with its verdicts.
    if item > share.bytes && waiting <= share.bytes {
        let key = if largest_item_bytes(ids, 0) > share.bytes {
            "limits.max_id_bytes"
        } else {
            "reviewers.max_verdicts"
        };
        let what = format!("an item with {verdicts} verdicts and ids of {ids} bytes");
        p.push(share.exceeded(key, &what, item, lower));
    }
    // A judge's window is a record of its own, keyed by its project and judge.
    let room = Room::of_record(c, 2);
    let window = largest_window_bytes(c.judge_quality.window);
    if window > room.bytes {
        let what = format!("a judge's window of {} pairs", c.judge_quality.window);
        let lower = "judge_quality.window or limits.max_id_bytes";
        p.push(room.exceeded("judge_quality.window", &what, window, lower));
    }
}
