//! Judge scores: sessions, their consensus and timeouts, the leaderboard and bias alerts.

use super::*;

fn consensus_of(h: &Harness) -> Value {
    let c = h
        .out
        .iter()
        .find(|o| o.topic == OutputTopic::Consensus)
        .expect("a consensus record");
    serde_json::from_str(&c.render()).unwrap()
}

#[test]
fn session_completes_when_all_expected_judges_reported() {
    let mut h = Harness::new();
    let meta = r#", "scores": {"A": 8, "B": 3}, "expected_judges": 3, "candidates": {"A": {"author": "m-a"}, "B": {"author": "m-b"}}, "category": "coding""#;
    assert_eq!(
        h.send("jury.judge-scores", &ballot("e1", "s1", 0, "j1", meta)),
        Outcome::Applied
    );
    assert!(h.out.is_empty());
    h.send(
        "jury.judge-scores",
        &ballot("e2", "s1", 1, "j2", r#", "scores": {"A": 7, "B": 4}"#),
    );
    assert!(h.out.is_empty());
    h.send(
        "jury.judge-scores",
        &ballot("e3", "s1", 2, "j3", r#", "status": "abstained""#),
    );
    assert_eq!(
        topics(&h.out),
        [
            OutputTopic::Consensus,
            OutputTopic::Leaderboard,
            OutputTopic::Leaderboard
        ]
    );
    let c = consensus_of(&h);
    assert_eq!(c["completed_by"], "all_judges");
    assert_eq!(
        c["judges"],
        serde_json::json!({"ok": 2, "failed": 0, "abstained": 1})
    );
    assert_eq!(c["rankings"][0]["candidate"], "A");
    assert_eq!(c["consensus"], Value::Null);
    assert_eq!(c["category"], "coding");
    let board: Value = serde_json::from_str(&h.out[1].render()).unwrap();
    assert_eq!(h.out[1].key.as_deref(), Some("proj-42/coding/m-a"));
    assert_eq!(
        (board["wins"].as_u64(), board["sessions"].as_u64()),
        (Some(1), Some(1))
    );
    // A late ballot for the completed session is dead-lettered and changes nothing.
    let before = h.state.clone();
    assert_eq!(
        h.send(
            "jury.judge-scores",
            &ballot("e4", "s1", 3, "j4", r#", "scores": {"A": 1}"#)
        ),
        Outcome::Rejected(ErrorCode::SessionCompleted)
    );
    assert_eq!(h.state, before);
}

#[test]
fn session_close_and_unknown_session_close() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "s1", 0, "j1", r#", "scores": {"A": 8}"#),
    );
    let close = |id: &str, s: &str| {
        format!(
            r#"{{"type": "session_close", "event_id": "{id}", "project_id": "proj-42", "session_id": "{s}", "occurred_at": 1795168805000}}"#
        )
    };
    h.send("jury.judge-scores", &close("c1", "s1"));
    let c = consensus_of(&h);
    assert_eq!(
        (c["completed_by"].as_str(), c["consensus"]["value"].as_f64()),
        (Some("session_close"), Some(7.0 / 9.0))
    );
    assert_eq!(c["consensus"]["strategy"], "weighted_average");
    h.send("jury.judge-scores", &close("c2", "never-seen"));
    let c = consensus_of(&h);
    assert_eq!(
        (
            c["session_id"].as_str(),
            c["consensus"]["strategy"].as_str()
        ),
        (Some("never-seen"), Some("none"))
    );
    assert_eq!(
        h.send("jury.judge-scores", &close("c3", "s1")),
        Outcome::Rejected(ErrorCode::SessionCompleted)
    );
    assert_eq!(
        h.send("jury.judge-scores", &close("c1", "s9")),
        Outcome::Rejected(ErrorCode::DuplicateEventId)
    );
}

#[test]
fn watermark_times_sessions_out() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "old", 0, "j1", r#", "scores": {"A": 5}"#),
    );
    // 300 s later exactly: not yet past the timeout.
    h.send(
        "jury.judge-scores",
        &ballot("e2", "new", 300, "j1", r#", "scores": {"A": 5}"#),
    );
    assert!(h.out.is_empty());
    h.send(
        "jury.judge-scores",
        &ballot("e3", "new", 301, "j2", r#", "scores": {"A": 6}"#),
    );
    let c = consensus_of(&h);
    assert_eq!(
        (c["session_id"].as_str(), c["completed_by"].as_str()),
        (Some("old"), Some("timeout"))
    );
    assert_eq!(c["last_event_at"], "2026-11-20T10:05:01Z");
    assert_eq!(h.state.sessions.open_sessions(), 1);
}

#[test]
fn a_session_times_out_by_its_own_projects_event_time_only() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "old", 0, "j1", r#", "scores": {"A": 5}"#),
    );
    // Another project's events, however late, are not this project's clock: whichever other
    // projects share its partition, and in whatever order partitions were interleaved, its
    // session completes at the same point of its own records.
    let other =
        ballot("e2", "s", 10_000, "j1", r#", "scores": {"A": 5}"#).replace("proj-42", "proj-7");
    assert_eq!(h.send("jury.judge-scores", &other), Outcome::Applied);
    assert!(h.out.is_empty());
    assert_eq!(h.state.sessions.open_sessions(), 2);
    // Its own next event, past the timeout, completes it.
    h.send(
        "jury.judge-scores",
        &ballot("e3", "new", 301, "j1", r#", "scores": {"A": 6}"#),
    );
    let c = consensus_of(&h);
    assert_eq!(
        (c["session_id"].as_str(), c["completed_by"].as_str()),
        (Some("old"), Some("timeout"))
    );
}

/// A session's candidates: (id, author, score).
type Candidates<'a> = &'a [(&'a str, &'a str, u32)];

/// A single-judge session at `secs` with `candidates` in `category`.
fn board_ballot(i: usize, secs: i64, candidates: Candidates<'_>, category: &str) -> String {
    let scores: Vec<String> = candidates
        .iter()
        .map(|(c, _, s)| format!(r#""{c}": {s}"#))
        .collect();
    let authors: Vec<String> = candidates
        .iter()
        .map(|(c, a, _)| format!(r#""{c}": {{"author": "{a}"}}"#))
        .collect();
    let rest = format!(
        r#", "scores": {{{}}}, "candidates": {{{}}}, "expected_judges": 1, "category": "{category}""#,
        scores.join(", "),
        authors.join(", ")
    );
    ballot(&format!("e{i}"), &format!("s{i}"), secs, "j1", &rest)
}

/// The `jury.leaderboard` records of the last record sent, by model.
fn board_rows(h: &Harness) -> std::collections::BTreeMap<String, Value> {
    h.out
        .iter()
        .filter(|o| o.topic == OutputTopic::Leaderboard)
        .map(|o| serde_json::from_str::<Value>(&o.render()).unwrap())
        .map(|v| (v["model"].as_str().unwrap().to_owned(), v))
        .collect()
}

#[test]
fn leaderboard_rows_count_whole_days_and_an_emptied_row_is_published_then_forgotten() {
    let mut config = Config::default();
    config.leaderboard.window_days = 1;
    config.leaderboard.bt_interval_secs = 0;
    let mut h = Harness::with(&config);
    // Days d, d, d+1 (m-x only on day d), then d+2: the window of one day keeps d+1 and d+2.
    let day = 86_400;
    let sessions: [(i64, Candidates<'_>); 4] = [
        (0, &[("A", "m-a", 9), ("X", "m-x", 2)]),
        (60, &[("A", "m-a", 3), ("X", "m-x", 8)]),
        (day, &[("A", "m-a", 7), ("B", "m-b", 4)]),
        (2 * day, &[("A", "m-a", 2), ("B", "m-b", 6)]),
    ];
    let mut seen = Vec::new();
    for (i, (secs, candidates)) in sessions.into_iter().enumerate() {
        assert_eq!(
            h.send("jury.judge-scores", &board_ballot(i, secs, candidates, "c")),
            Outcome::Applied
        );
        let rows = board_rows(&h);
        let count = |m: &str| {
            rows.get(m)
                .map(|r| (r["sessions"].as_u64(), r["wins"].as_u64()))
        };
        seen.push((count("m-a"), count("m-x")));
    }
    assert_eq!(
        seen,
        [
            (Some((Some(1), Some(1))), Some((Some(1), Some(0)))),
            (Some((Some(2), Some(1))), Some((Some(2), Some(1)))),
            // Day d is still in the window (it starts one day before d+1's session).
            (Some((Some(3), Some(2))), Some((Some(2), Some(1)))),
            // Day d leaves: m-x is published with nothing in the window, then forgotten.
            (Some((Some(2), Some(1))), Some((Some(0), Some(0)))),
        ]
    );
    let board = &h.state.judges("proj-42").unwrap().board;
    let models: Vec<&str> = board.rows.keys().map(|(_, m)| m.as_str()).collect();
    assert_eq!(models, ["m-a", "m-b"]);
    // The means are over the sessions of the days kept: m-a's Borda was 1 then 0.
    assert_eq!(board_rows(&h)["m-a"]["mean_borda"].as_f64(), Some(0.5));
}

#[test]
fn consensus_records_are_kept_unless_too_long_for_the_changelog() {
    let two: Candidates<'_> = &[("A", "m-a", 9), ("B", "m-b", 5)];
    let mut h = Harness::new();
    h.send("jury.judge-scores", &board_ballot(0, 0, two, "c"));
    let consensus = h
        .out
        .iter()
        .find(|o| o.topic == OutputTopic::Consensus)
        .unwrap();
    let kept = &h.state.judges("proj-42").unwrap().kept;
    assert_eq!(
        kept.get("s0").map(|k| &*k.record),
        Some(&*consensus.render())
    );
    // A producer limit four times smaller than the record: not kept.
    let mut config = Config::default();
    let limit = 4 * consensus.render().len() - 4;
    config
        .kafka
        .producer
        .insert("message.max.bytes".into(), limit.to_string());
    let mut h = Harness::with(&config);
    h.send("jury.judge-scores", &board_ballot(0, 0, two, "c"));
    assert!(h.out.iter().any(|o| o.topic == OutputTopic::Consensus));
    assert!(h.state.judges("proj-42").unwrap().kept.records.is_empty());
}

#[test]
fn a_board_holds_at_most_its_categories_and_models() {
    let mut config = Config::default();
    config.leaderboard.max_categories = 1;
    config.leaderboard.max_models = 2;
    let mut h = Harness::with(&config);
    let three: Candidates<'_> = &[("A", "m-a", 9), ("B", "m-b", 5), ("C", "m-c", 1)];
    h.send("jury.judge-scores", &board_ballot(0, 0, three, "c1"));
    let rows = board_rows(&h);
    assert_eq!(
        rows.keys().collect::<Vec<_>>(),
        ["m-a", "m-b"],
        "two models of c1"
    );
    // A second category is left off the board; the session itself is published.
    h.send("jury.judge-scores", &board_ballot(1, 10, three, "c2"));
    assert!(board_rows(&h).is_empty());
    assert!(h.out.iter().any(|o| o.topic == OutputTopic::Consensus));
    assert_eq!(h.state.judges("proj-42").unwrap().board.rows.len(), 2);
}

#[test]
fn the_leaderboard_rates_models_by_bradley_terry_over_its_window() {
    let mut config = Config::default();
    config.leaderboard.bt_interval_secs = 0;
    let mut h = Harness::with(&config);
    // Three single-judge sessions of one category: m-a's candidate ranks first twice, m-b's
    // once. With each model's virtual tie against the reference (1000), by symmetry
    // theta = +-x where 2 - 3 sigma(2x) + 1/2 - sigma(x) = 0 (a little short of the MLE's
    // 400 * log10(sqrt 2) = 60.206 points).
    for (i, (a, b)) in [(8, 3), (8, 3), (3, 8)].into_iter().enumerate() {
        let rest = format!(
            r#", "scores": {{"A": {a}, "B": {b}}}, "candidates": {{"A": {{"author": "m-a"}}, "B": {{"author": "m-b"}}}}, "expected_judges": 1, "category": "c""#
        );
        let e = format!("e{i}");
        let s = format!("s{i}");
        assert_eq!(
            h.send("jury.judge-scores", &ballot(&e, &s, i as i64, "j1", &rest)),
            Outcome::Applied
        );
    }
    let rows: Vec<Value> = h
        .out
        .iter()
        .filter(|o| o.topic == OutputTopic::Leaderboard)
        .map(|o| serde_json::from_str(&o.render()).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "both models' rows after a refit");
    let sigma = |x: f64| 1.0 / (1.0 + (-x).exp());
    let (mut lo, mut hi) = (0.0, 5.0);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if 2.5 - 3.0 * sigma(2.0 * mid) - sigma(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let shift = 400.0 * lo / std::f64::consts::LN_10;
    assert!(shift > 40.0 && shift < 60.206, "{shift}");
    for (row, model, rating, rank) in [
        (&rows[0], "m-a", 1000.0 + shift, 1),
        (&rows[1], "m-b", 1000.0 - shift, 2),
    ] {
        assert_eq!(row["model"], model);
        let got = row["bt_rating"].as_f64().expect("rated");
        assert!((got - rating).abs() < 1e-6, "{row}");
        assert_eq!(row["bt_rank"], rank);
        assert_eq!(row["comparisons"], 3);
        assert!(row["bt_note"].is_null());
        // Three sessions are little evidence: finite intervals around the ratings that overlap.
        let (low, high) = (row["bt_ci_low"].as_f64(), row["bt_ci_high"].as_f64());
        assert!(
            low.zip(high).is_some_and(|(l, h)| l <= got && got <= h),
            "{row}"
        );
        assert_eq!(
            row["bt_tied_with"].as_array().map(Vec::len),
            Some(1),
            "{row}"
        );
    }
}

#[test]
fn rows_between_bradley_terry_refits_carry_the_last_fit() {
    // The default refits a category at most once a minute of event time: sessions at 0, 30 and
    // 61 s refit after the first and the third.
    let mut h = Harness::new();
    let mut fits = Vec::new();
    for (i, at) in [0, 30, 61].into_iter().enumerate() {
        let rest = r#", "scores": {"A": 8, "B": 3}, "candidates": {"A": {"author": "m-a"}, "B": {"author": "m-b"}}, "expected_judges": 1"#;
        let (e, s) = (format!("e{i}"), format!("s{i}"));
        h.out.clear();
        h.send("jury.judge-scores", &ballot(&e, &s, at, "j1", rest));
        let rows: Vec<Value> = h
            .out
            .iter()
            .filter(|o| o.topic == OutputTopic::Leaderboard)
            .map(|o| serde_json::from_str(&o.render()).unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        fits.push((
            rows[0]["bt_fitted_at"].clone(),
            rows[0]["comparisons"].clone(),
        ));
    }
    let at = |s: &str| Value::String(s.to_owned());
    assert_eq!(
        fits,
        [
            (at("2026-11-20T10:00:00Z"), Value::from(1)),
            (at("2026-11-20T10:00:00Z"), Value::from(1)),
            (at("2026-11-20T10:01:01Z"), Value::from(3)),
        ]
    );
}

#[test]
fn open_session_bounds_evict_the_oldest() {
    let mut config = Config::default();
    config.sessions.max_open_per_project = 2;
    let mut h = Harness::with(&config);
    for (i, s) in ["s1", "s2", "s3"].iter().enumerate() {
        h.send(
            "jury.judge-scores",
            &ballot(
                &format!("e{i}"),
                s,
                i as i64,
                "j1",
                r#", "scores": {"A": 5}"#,
            ),
        );
    }
    let c = consensus_of(&h);
    assert_eq!(
        (c["session_id"].as_str(), c["completed_by"].as_str()),
        (Some("s1"), Some("evicted"))
    );
    assert_eq!(h.state.sessions.open_sessions(), 2);
}

#[test]
fn judge_score_rejections_leave_state_unchanged() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "s1", 0, "j1", r#", "scores": {"A": 5}"#),
    );
    let before = h.state.clone();
    for (payload, code) in [
        (
            ballot("e2", "s1", 1, "j2", r#", "scores": {"A": 50}"#),
            ErrorCode::ScoreOutOfScale,
        ),
        (
            ballot("e2", "s1", 1, "j2", r#", "status": "asleep""#),
            ErrorCode::UnknownStatus,
        ),
        (
            ballot("e2", "s1", 1, "j2", r#", "type": "judge_vote""#),
            ErrorCode::UnknownType,
        ),
        (
            ballot(
                "e2",
                "s1",
                1,
                "j2",
                r#", "scores": {"A": 5}, "scale": {"min": 3, "max": 2}"#,
            ),
            ErrorCode::InvalidScale,
        ),
        (
            ballot("e1", "s1", 1, "j2", r#", "scores": {"A": 5}"#),
            ErrorCode::DuplicateEventId,
        ),
    ] {
        assert_eq!(
            h.send("jury.judge-scores", &payload),
            Outcome::Rejected(code),
            "{payload}"
        );
        assert_eq!(h.state, before);
    }
}

#[test]
fn biased_session_emits_alerts_after_consensus() {
    let mut h = Harness::new();
    // Longer answers score higher for every judge; positions favour the first slot.
    let meta = r#", "expected_judges": 3, "candidates": {"A": {"words": 100, "position": 2}, "B": {"words": 200, "position": 1}, "C": {"words": 300, "position": 0}, "D": {"words": 400, "position": 3}}"#;
    h.send(
        "jury.judge-scores",
        &ballot(
            "e1",
            "s",
            0,
            "j1",
            &format!(r#", "scores": {{"A": 1, "B": 4, "C": 7, "D": 10}}{meta}"#),
        ),
    );
    h.send(
        "jury.judge-scores",
        &ballot(
            "e2",
            "s",
            1,
            "j2",
            r#", "scores": {"A": 2, "B": 4, "C": 7, "D": 9}"#,
        ),
    );
    h.send(
        "jury.judge-scores",
        &ballot(
            "e3",
            "s",
            2,
            "j3",
            r#", "scores": {"A": 1, "B": 5, "C": 6, "D": 10}"#,
        ),
    );
    assert_eq!(h.out[0].topic, OutputTopic::Consensus);
    let kinds: Vec<String> = h
        .out
        .iter()
        .filter(|o| o.topic == OutputTopic::BiasAlerts)
        .map(|o| {
            serde_json::from_str::<Value>(&o.render()).unwrap()["kind"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert!(kinds.contains(&"length_bias".to_owned()), "{kinds:?}");
    assert!(kinds.contains(&"position_bias".to_owned()), "{kinds:?}");
    let c = consensus_of(&h);
    assert!(c["bias"]["length_r"].as_f64().unwrap() > 0.95);
    assert_eq!(c["bias"]["risk"], "medium");
}

/// A category's ranking record (its models and last Bradley-Terry fit) is a figure: the
/// journal notes it when a session refits it, adds a model or is the first since the fit to
/// leave the ratings without it (so a restore knows a tick must refit), not with every
/// session.
#[test]
fn the_ranking_is_noted_when_it_is_refitted_or_gains_a_model() {
    let mut config = Config::default();
    config.leaderboard.bt_interval_secs = 100;
    let mut h = Harness::with(&config);
    h.state = PartitionState::journaled();
    let two: Candidates<'_> = &[("A", "m-a", 9), ("B", "m-b", 5)];
    let three: Candidates<'_> = &[("A", "m-a", 9), ("B", "m-b", 5), ("C", "m-c", 1)];
    let mut noted = Vec::new();
    // The first session fits; the next two within the interval neither refit nor add a
    // model (the first of them marks the ratings as lacking it), the third adds m-c, the
    // fourth comes after the interval and refits.
    for (i, (secs, candidates)) in [(0, two), (10, two), (20, two), (30, three), (200, three)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(
            h.send("jury.judge-scores", &board_ballot(i, secs, candidates, "c")),
            Outcome::Applied
        );
        let journal = h.state.journal.replace(Vec::new()).unwrap_or_default();
        let ranked = journal
            .iter()
            .any(|c| matches!(c, Change::Ranking { category, .. } if category == "c"));
        let blocks = journal
            .iter()
            .any(|c| matches!(c, Change::RankingBlock { .. }));
        noted.push((ranked, blocks));
    }
    // Every session's pairs are facts, written with their block each time.
    assert_eq!(
        noted,
        [
            (true, true),
            (true, true),
            (false, true),
            (true, true),
            (true, true)
        ]
    );
}

/// Sessions that stop within `leaderboard.bt_interval_secs` of the last fit are not left out
/// of the ratings until a later session, which may never come: the next tick refits the
/// category as of its latest session, and the ratings then equal those of a fit after every
/// session. The tick after that refits nothing.
#[test]
fn a_tick_refits_a_category_whose_ratings_lack_its_last_sessions() {
    // m-a wins the first session, m-b the next three, all within the default minute.
    let sessions: [(i64, Candidates<'_>); 4] = [
        (0, &[("A", "m-a", 9), ("B", "m-b", 5)]),
        (10, &[("A", "m-a", 2), ("B", "m-b", 5)]),
        (20, &[("A", "m-a", 2), ("B", "m-b", 5)]),
        (30, &[("A", "m-a", 2), ("B", "m-b", 5)]),
    ];
    let run = |config: &Config| {
        let mut h = Harness::with(config);
        h.state = PartitionState::journaled();
        for (i, &(secs, candidates)) in sessions.iter().enumerate() {
            h.send("jury.judge-scores", &board_ballot(i, secs, candidates, "c"));
        }
        h
    };
    let mut h = run(&Config::default());
    let stale = board_rows(&h);
    assert_eq!(stale["m-a"]["bt_fitted_at"], "2026-11-20T10:00:00Z");
    assert!(stale["m-a"]["bt_rating"].as_f64() > stale["m-b"]["bt_rating"].as_f64());
    assert_eq!(stale["m-a"]["sessions"], 4);
    h.state.journal.replace(Vec::new());
    tick_at(&mut h, 1_795_168_800_000 + 3_600_000);
    let refitted = board_rows(&h);
    let journal = h.state.journal.replace(Vec::new()).unwrap_or_default();
    assert!(
        journal
            .iter()
            .any(|c| matches!(c, Change::Ranking { category, .. } if category == "c"))
    );
    let mut every_session = Config::default();
    every_session.leaderboard.bt_interval_secs = 0;
    let oracle = board_rows(&run(&every_session));
    assert_eq!(refitted.len(), 2);
    for model in ["m-a", "m-b"] {
        assert_eq!(refitted[model]["bt_fitted_at"], "2026-11-20T10:00:30Z");
        assert_eq!(refitted[model]["as_of"], "2026-11-20T10:00:30Z");
        assert_eq!(refitted[model], oracle[model], "{model}");
    }
    assert!(refitted["m-b"]["bt_rating"].as_f64() > refitted["m-a"]["bt_rating"].as_f64());
    tick_at(&mut h, 1_795_168_800_000 + 3_660_000);
    assert!(board_rows(&h).is_empty(), "nothing left to refit");
}

/// A tick at `ms` of the service's clock.
fn tick_at(h: &mut Harness, ms: i64) -> Outcome {
    let mut r = rec(crate::engine::TICK_TOPIC, None);
    r.timestamp_ms = Some(ms);
    h.send_record(r)
}

/// A session whose judges never all report, in a project that goes quiet, completes by the
/// service's ticks: idle from the first tick after its last ballot, completed (`idle`, at its
/// last ballot's event time) at the first tick `sessions.idle_timeout_secs` after that. A
/// ballot in between starts it over; a session with ballots since the last tick is not touched.
#[test]
fn a_session_of_a_quiet_project_completes_after_the_idle_timeout_of_ticks() {
    let mut h = Harness::new();
    let idle_ms = 600_000;
    let t0 = 1_800_000_000_000;
    let scores = r#", "scores": {"A": 8, "B": 3}"#;
    h.send("jury.judge-scores", &ballot("e1", "s1", 0, "j1", scores));
    assert_eq!(tick_at(&mut h, t0), Outcome::Applied);
    assert!(h.out.is_empty());
    // A ballot after the first tick: s1 is busy again; s2 opens.
    h.send("jury.judge-scores", &ballot("e2", "s1", 5, "j2", scores));
    h.send("jury.judge-scores", &ballot("e3", "s2", 6, "j1", scores));
    tick_at(&mut h, t0 + 60_000);
    assert!(h.out.is_empty());
    // Idle since the tick at t0 + 60 s: not yet at t0 + 60 s + idle - 1 ms, then both at once.
    tick_at(&mut h, t0 + 60_000 + idle_ms - 1);
    assert!(h.out.is_empty());
    tick_at(&mut h, t0 + 60_000 + idle_ms);
    let completed: Vec<(String, String, String)> = h
        .out
        .iter()
        .filter(|o| o.topic == OutputTopic::Consensus)
        .map(|o| {
            let c: Value = serde_json::from_str(&o.render()).unwrap();
            let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (
                field("session_id"),
                field("completed_by"),
                field("last_event_at"),
            )
        })
        .collect();
    let at = |secs: i64| {
        EventTime::from_epoch_millis(1_795_168_800_000 + secs * 1000)
            .unwrap()
            .to_string()
    };
    assert_eq!(
        completed,
        [
            ("s1".to_owned(), "idle".to_owned(), at(5)),
            ("s2".to_owned(), "idle".to_owned(), at(6)),
        ]
    );
    assert_eq!(h.state.sessions.open_sessions(), 0);
    // A ballot for a session completed so is late, as for any completed session.
    assert_eq!(
        h.send("jury.judge-scores", &ballot("e4", "s1", 7, "j3", scores)),
        Outcome::Rejected(ErrorCode::SessionCompleted)
    );
    // Off, ticks change nothing; a tick needs its time.
    let mut off = Config::default();
    off.sessions.idle_timeout_secs = 0;
    let mut h = Harness::with(&off);
    h.send("jury.judge-scores", &ballot("e1", "s1", 0, "j1", scores));
    for k in 0..3 {
        tick_at(&mut h, t0 + k * 10 * idle_ms);
    }
    assert!(h.out.is_empty());
    assert_eq!(
        h.send_record(rec(crate::engine::TICK_TOPIC, None)),
        Outcome::Rejected(ErrorCode::MissingTimestamp)
    );
}

/// The sessions of `h.out` completed `idle`.
fn idle_completions(h: &Harness) -> usize {
    h.out
        .iter()
        .filter(|o| o.topic == OutputTopic::Consensus)
        .filter(|o| o.render().contains(r#""completed_by":"idle""#))
        .count()
}

/// Ticks from a clock an hour behind the one a session went idle by (its partition moved to
/// an instance whose clock is slow) do not hold the session for that hour: it is idle from
/// the first of them, and completes `idle_timeout_secs` of their clock later.
#[test]
fn ticks_from_a_clock_behind_hold_an_idle_session_no_longer_than_the_timeout() {
    let mut h = Harness::new();
    let idle_ms = 600_000;
    let t0 = 1_800_000_000_000;
    let scores = r#", "scores": {"A": 8, "B": 3}"#;
    h.send("jury.judge-scores", &ballot("e1", "s1", 0, "j1", scores));
    tick_at(&mut h, t0);
    // The slow clock's ticks: an hour behind, then a timeout less a millisecond on.
    let behind = t0 - 3_600_000;
    tick_at(&mut h, behind);
    tick_at(&mut h, behind + idle_ms - 1);
    assert_eq!(idle_completions(&h), 0);
    tick_at(&mut h, behind + idle_ms);
    assert_eq!(idle_completions(&h), 1, "{:?}", topics(&h.out));
}

proptest! {
    /// Whatever times the ticks carry, forward or back: a session completes `idle` only at a
    /// tick `idle_timeout_secs` or more after an earlier tick since its last ballot (never
    /// early by the ticks' clock), and once the ticks run forward it waits no more than that
    /// from the first of them (never held by a clock that went back).
    #[test]
    fn an_idle_session_completes_neither_early_nor_late_by_the_ticks(
        steps in prop::collection::vec(prop_oneof![1 => -3_600_000i64..0, 4 => 0i64..400_000], 1..30),
    ) {
        let mut h = Harness::new();
        let idle_ms = 600_000;
        let scores = r#", "scores": {"A": 8, "B": 3}"#;
        h.send("jury.judge-scores", &ballot("e1", "s1", 0, "j1", scores));
        let mut ticks: Vec<i64> = Vec::new();
        let mut at = 1_800_000_000_000;
        for step in steps {
            at += step;
            tick_at(&mut h, at);
            ticks.push(at);
            if idle_completions(&h) == 1 {
                break;
            }
        }
        let (last, before) = ticks.split_last().expect("a tick");
        if idle_completions(&h) == 1 {
            prop_assert!(before.iter().any(|t| last - t >= idle_ms), "{ticks:?}");
        }
        // The last run of ticks that never went back: its last is under a timeout after its
        // first, or the session completed within it.
        let run_from = ticks.windows(2).rposition(|w| w[1] < w[0]).map_or(0, |i| i + 1);
        let done_in_run = idle_completions(&h) == 1;
        prop_assert!(
            done_in_run || last - ticks[run_from] < idle_ms,
            "open after a run of ticks from {} to {last}: {ticks:?}",
            ticks[run_from]
        );
    }
}
