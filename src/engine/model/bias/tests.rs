//! Hand-checked bias-audit tests.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::engine::contract::judge::CandidateMeta;
use crate::engine::model::consensus::{JudgeCounts, Ranked};

/// An analysis with the given counted scores (candidate -> [(judge, score)]) and metadata.
fn analysis(
    scores: &[(&'static str, &'static [(&'static str, f64)])],
    meta: &[(&str, Option<f64>, Option<u64>)],
) -> Analysis<'static> {
    let scores: BTreeMap<&'static str, Vec<(&'static str, f64)>> =
        scores.iter().map(|(c, v)| (*c, v.to_vec())).collect();
    let rankings = scores
        .iter()
        .map(|(c, v)| Ranked {
            candidate: c,
            rank: 1,
            mean_z: Some(0.0),
            std_error: 0.0,
            votes: v.len(),
            tied_with_next: false,
            borda: None,
            wins: 0,
            mean_score: stats::mean(&v.iter().map(|(_, n)| *n).collect::<Vec<_>>()),
            confidence: "high",
        })
        .collect();
    let candidates: BTreeMap<String, CandidateMeta> = meta
        .iter()
        .map(|(c, w, p)| {
            (
                c.to_string(),
                CandidateMeta {
                    author: None,
                    words: *w,
                    position: *p,
                },
            )
        })
        .collect();
    Analysis {
        judges: JudgeCounts {
            ok: 3,
            failed: 0,
            abstained: 0,
        },
        consensus: None,
        agreement: Some(0.9),
        krippendorff_alpha: None,
        rankings,
        scores,
        self_scores: vec![],
        candidates: Box::leak(Box::new(candidates)),
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn length_bias_uses_pearson_over_candidates() {
    // words 100..500 against mean scores 0.1..0.5 (perfect) plus noise on one.
    let a = analysis(
        &[
            ("A", &[("j", 0.1)]),
            ("B", &[("j", 0.2)]),
            ("C", &[("j", 0.35)]),
            ("D", &[("j", 0.4)]),
            ("E", &[("j", 0.5)]),
        ],
        &[
            ("A", Some(100.0), None),
            ("B", Some(200.0), None),
            ("C", Some(300.0), None),
            ("D", Some(400.0), None),
            ("E", Some(500.0), None),
        ],
    );
    let audit = audit_session(&a, &Bias::default());
    let (r, p) = stats::pearson(
        &[100.0, 200.0, 300.0, 400.0, 500.0],
        &[0.1, 0.2, 0.35, 0.4, 0.5],
    );
    assert_eq!((audit.length_r, audit.length_p, audit.length_n), (r, p, 5));
    assert!(r > 0.98 && p < 0.01);
    assert!(audit.length_bias);
    let alerts = session_alerts("p", "s", &a, &audit, &Bias::default());
    let lb = alerts.iter().find(|x| x.kind == "length_bias").unwrap();
    assert_eq!(
        (lb.value, lb.p_value, lb.sample_size, lb.threshold),
        (r, Some(p), 5, 0.3)
    );
}

#[test]
fn fewer_than_three_or_constant_is_no_length_evidence() {
    let a = analysis(
        &[("A", &[("j", 0.1)]), ("B", &[("j", 0.9)])],
        &[("A", Some(1.0), None), ("B", Some(9.0), None)],
    );
    let audit = audit_session(&a, &Bias::default());
    assert_eq!(
        (audit.length_r, audit.length_p, audit.length_defined),
        (0.0, 1.0, false)
    );
}

#[test]
fn position_variance_and_bias() {
    // position 0: A 0.9, 0.7 -> 0.8; position 1: B 0.5 -> 0.5; var_pop(0.8, 0.5) = 0.0225
    let a = analysis(
        &[("A", &[("j1", 0.9), ("j2", 0.7)]), ("B", &[("j1", 0.5)])],
        &[("A", None, Some(0)), ("B", None, Some(1))],
    );
    let audit = audit_session(&a, &Bias::default());
    assert!(close(audit.position_variance.unwrap(), 0.0225, 1e-15));
    assert!(audit.position_bias);
    let none = audit_session(&analysis(&[("A", &[("j", 0.5)])], &[]), &Bias::default());
    assert_eq!(none.position_variance, None);
}

#[test]
fn calibration_flags_harsh_and_generous_judges() {
    // Judge means: j1 0.2, j2 0.5, j3 0.55, j4 0.9. median 0.525, std_pop = 0.2487...
    // harsh: < 0.2763 -> j1; generous: > 0.7737 -> j4.
    let a = analysis(
        &[
            ("A", &[("j1", 0.1), ("j2", 0.4), ("j3", 0.5), ("j4", 0.8)]),
            ("B", &[("j1", 0.3), ("j2", 0.6), ("j3", 0.6), ("j4", 1.0)]),
        ],
        &[],
    );
    let audit = audit_session(&a, &Bias::default());
    let (med, sd) = audit.calibration_center.unwrap();
    assert!(close(med, 0.525, 1e-12));
    assert!(close(
        sd,
        stats::std_pop(&[0.2, 0.5, 0.55, 0.9]).unwrap(),
        1e-15
    ));
    assert_eq!(
        (audit.harsh.clone(), audit.generous.clone()),
        (vec!["j1"], vec!["j4"])
    );
    // length none, position none, harsh, generous -> 2 findings -> medium
    assert_eq!(audit.risk, "medium");
    let kinds: Vec<&str> = session_alerts("p", "s", &a, &audit, &Bias::default())
        .iter()
        .map(|x| x.kind)
        .collect();
    assert_eq!(kinds, ["harsh_reviewer", "generous_reviewer"]);
}

#[test]
fn single_judge_has_no_calibration() {
    let audit = audit_session(&analysis(&[("A", &[("j1", 0.1)])], &[]), &Bias::default());
    assert_eq!(audit.calibration_center, None);
    assert!(audit.harsh.is_empty() && audit.generous.is_empty());
}

#[test]
fn self_vote_inflation_is_own_minus_others_mean() {
    let mut a = analysis(&[("A", &[("j2", 0.5), ("j3", 0.7)])], &[]);
    a.self_scores = vec![("j1", "A", 0.9)];
    let audit = audit_session(&a, &Bias::default());
    assert_eq!(audit.self_inflation.len(), 1);
    assert!(close(audit.self_inflation[0].2, 0.3, 1e-12));
    let alerts = session_alerts("p", "s", &a, &audit, &Bias::default());
    let x = alerts
        .iter()
        .find(|x| x.kind == "self_vote_inflation")
        .unwrap();
    assert_eq!(x.subject.as_deref(), Some("j1"));
}

#[test]
fn low_agreement_alert_and_risk_levels() {
    let mut a = analysis(&[("A", &[("j1", 0.0), ("j2", 1.0)])], &[]);
    a.agreement = Some(0.0);
    let audit = audit_session(&a, &Bias::default());
    let alerts = session_alerts("p", "s", &a, &audit, &Bias::default());
    assert!(
        alerts
            .iter()
            .any(|x| x.kind == "low_agreement" && x.value == 0.0 && x.threshold == 0.5)
    );
    assert_eq!(
        (
            risk_level(0),
            risk_level(1),
            risk_level(2),
            risk_level(3),
            risk_level(4)
        ),
        ("low", "medium", "medium", "high", "high")
    );
}

#[test]
fn fisher_pooling_by_hand() {
    let mut pool = FisherPool::default();
    pool.add(0.5, 13); // w 10
    pool.add(0.3, 23); // w 20
    pool.add(0.9, 3); // n < 4: ignored
    let z = (10.0 * 0.5f64.atanh() + 20.0 * 0.3f64.atanh()) / 30.0;
    let se = 1.0 / 30f64.sqrt();
    let (r, lo, hi, p) = pool.pooled().unwrap();
    assert!(close(r, z.tanh(), 1e-15));
    assert!(close(lo, (z - 1.96 * se).tanh(), 1e-15) && close(hi, (z + 1.96 * se).tanh(), 1e-15));
    assert!(close(p, stats::normal_two_sided_p(z / se), 1e-15));
    assert_eq!(pool.pairs, 36);
}

#[test]
fn project_alerts_need_evidence_and_fire_on_crossing_only() {
    let cfg = Bias {
        project_min_length_pairs: 30,
        ..Bias::default()
    };
    let mut project = ProjectAudit::default();
    let words: Vec<(&str, Option<f64>, Option<u64>)> = vec![
        ("A", Some(100.0), None),
        ("B", Some(200.0), None),
        ("C", Some(300.0), None),
        ("D", Some(400.0), None),
        ("E", Some(500.0), None),
        ("F", Some(600.0), None),
    ];
    let strong = analysis(
        &[
            ("A", &[("j", 0.1)]),
            ("B", &[("j", 0.25)]),
            ("C", &[("j", 0.3)]),
            ("D", &[("j", 0.5)]),
            ("E", &[("j", 0.55)]),
            ("F", &[("j", 0.7)]),
        ],
        &words,
    );
    let audit = audit_session(&strong, &cfg);
    let mut fired = Vec::new();
    for i in 0..8 {
        let alerts = project.update("p", &format!("s{i}"), &strong, &audit, &cfg);
        fired.push(alerts.iter().filter(|x| x.kind == "length_bias").count());
    }
    // 6 pairs per session: 30 pairs are reached with the 5th session; one alert, then silence.
    assert_eq!(fired, [0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(project.length.pairs, 48);
    // Evidence against the bias brings the finding back to healthy, which re-arms it.
    let flat = analysis(
        &[
            ("A", &[("j", 0.7)]),
            ("B", &[("j", 0.1)]),
            ("C", &[("j", 0.6)]),
            ("D", &[("j", 0.2)]),
            ("E", &[("j", 0.5)]),
            ("F", &[("j", 0.3)]),
        ],
        &words,
    );
    let flat_audit = audit_session(&flat, &cfg);
    for i in 0..40 {
        project.update("p", &format!("f{i}"), &flat, &flat_audit, &cfg);
    }
    assert!(!project.active.contains("length_bias"));
    let alert = project.findings_after(&strong, &audit, &cfg, 200);
    assert_eq!(alert, 1);
}

/// A session in which candidate `A` (shown at `position`) is scored by `judges`, and by each of
/// `authors`, which wrote it, with an excluded self-score.
fn session_of<'s>(
    judges: &[(&'s str, f64)],
    authors: &[(&'s str, f64)],
    candidates: &'s BTreeMap<String, CandidateMeta>,
) -> Analysis<'s> {
    Analysis {
        judges: JudgeCounts {
            ok: judges.len() + authors.len(),
            failed: 0,
            abstained: 0,
        },
        consensus: None,
        agreement: None,
        krippendorff_alpha: None,
        rankings: vec![],
        scores: BTreeMap::from([("A", judges.to_vec())]),
        self_scores: authors.iter().map(|(j, n)| (*j, "A", *n)).collect(),
        candidates,
    }
}

fn shown_at(position: u64) -> BTreeMap<String, CandidateMeta> {
    BTreeMap::from([(
        "A".to_owned(),
        CandidateMeta {
            author: None,
            words: None,
            position: Some(position),
        },
    )])
}

/// Hand-checked: with room for two judges, a third forgets the judge last seen longest ago
/// (ties by id), and its finding with it; the project's mean keeps its reviews; a forgotten
/// judge that comes back starts afresh.
#[test]
fn a_project_follows_the_judges_it_saw_last() {
    let cfg = Bias {
        project_max_judges: 2,
        project_min_judge_reviews: 2,
        ..Bias::default()
    };
    let shown = shown_at(0);
    let mut project = ProjectAudit::default();
    let mut add = |i: usize, judges: &[(&str, f64)]| {
        let a = session_of(judges, &[], &shown);
        let audit = audit_session(&a, &cfg);
        let alerts = project.update("p", &format!("s{i}"), &a, &audit, &cfg);
        let kinds = alerts
            .iter()
            .map(|x| format!("{}/{}", x.kind, x.subject.clone().unwrap_or_default()));
        (kinds.collect::<Vec<_>>(), project.clone())
    };
    // Sessions 1 and 2: `a` scores 0 and `b` 1. Project mean 0.5; with two reviews `a`'s CI
    // [0, 0] lies below 0.5 - 0.1 (harsh) and `b`'s [1, 1] above 0.5 + 0.1 (generous).
    assert!(add(1, &[("a", 0.0), ("b", 1.0)]).0.is_empty());
    let (alerts, after) = add(2, &[("a", 0.0), ("b", 1.0)]);
    assert_eq!(alerts, ["harsh_reviewer/a", "generous_reviewer/b"]);
    assert!(after.active.contains("harsh_reviewer/a"));
    // Session 3: `b` and `c`. Three judges: `a`, last seen in session 2, is forgotten, and its
    // finding with it; `b` (mean 1 against 4/6) stays generous.
    let (alerts, after) = add(3, &[("b", 1.0), ("c", 1.0)]);
    assert!(alerts.is_empty());
    assert_eq!(after.judges.keys().collect::<Vec<_>>(), ["b", "c"]);
    assert_eq!(
        after.seen,
        BTreeMap::from([("b".into(), 3), ("c".into(), 3)])
    );
    assert_eq!(after.active, BTreeSet::from(["generous_reviewer/b".into()]));
    assert_eq!((after.forgotten, after.reviews.n), (1, 6));
    assert!(close(after.reviews.mean, 4.0 / 6.0, 1e-15));
    // Session 4: `a` again. `b` and `c` were both last seen in session 3: `b` goes first by id.
    let (alerts, after) = add(4, &[("a", 0.0)]);
    assert!(alerts.is_empty() && after.active.is_empty());
    assert_eq!(after.judges.keys().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!((after.judges["a"].n, after.forgotten), (1, 2));
    // With a second review `a` is harsh again (mean 4/8 = 0.5; its CI [0, 0]), a new alert.
    assert_eq!(add(5, &[("a", 0.0)]).0, ["harsh_reviewer/a"]);
}

/// A judge seen only through its self-votes is followed too, and a judge restored from a record
/// written before `seen` counts as seen before any other.
#[test]
fn self_voting_judges_and_restored_ones_are_followed() {
    let cfg = Bias {
        project_max_judges: 2,
        ..Bias::default()
    };
    let shown = shown_at(0);
    let mut project: ProjectAudit = serde_json::from_str(
        r#"{"length":{"weight":0.0,"weighted_z":0.0,"pairs":0},"reviews":{"n":1,"mean":0.5,"m2":0.0},
        "judges":{"old":{"n":1,"mean":0.5,"m2":0.0}},"positions":{},"position_sessions":0,
        "self_inflation":{},"active":[]}"#,
    )
    .unwrap();
    assert_eq!((project.judges_followed(), project.sessions), (1, 0));
    let a = session_of(&[("x", 0.5)], &[("author", 0.9)], &shown);
    let audit = audit_session(&a, &cfg);
    project.update("p", "s", &a, &audit, &cfg);
    // `x` and `author` (inflating by 0.4) are followed; `old` is forgotten.
    assert_eq!(project.judges.keys().collect::<Vec<_>>(), ["x"]);
    assert_eq!(
        project.self_inflation.keys().collect::<Vec<_>>(),
        ["author"]
    );
    assert!(close(project.self_inflation["author"].mean, 0.4, 1e-15));
    assert_eq!((project.judges_followed(), project.forgotten), (2, 1));
}

/// Hand-checked: positions at or beyond `project_max_positions` stay in their session's audit
/// and out of the project's; a session with none below counts as no position session.
#[test]
fn a_project_pools_its_first_positions() {
    let cfg = Bias {
        project_max_positions: 2,
        ..Bias::default()
    };
    let mut project = ProjectAudit::default();
    for (i, position) in [1, 2, 7].into_iter().enumerate() {
        let shown = shown_at(position);
        let a = session_of(&[("j", 0.25)], &[], &shown);
        let audit = audit_session(&a, &cfg);
        assert_eq!(
            audit.position_scores.keys().collect::<Vec<_>>(),
            [&position]
        );
        project.update("p", &format!("s{i}"), &a, &audit, &cfg);
    }
    assert_eq!(project.positions.keys().collect::<Vec<_>>(), [&1]);
    assert_eq!((project.positions[&1].n, project.position_sessions), (1, 1));
    // A lower bound (a restart with other settings) drops the positions beyond it.
    let cfg = Bias {
        project_max_positions: 1,
        ..cfg
    };
    let shown = shown_at(0);
    let a = session_of(&[("j", 0.25)], &[], &shown);
    project.update("p", "s3", &a, &audit_session(&a, &cfg), &cfg);
    assert_eq!(project.positions.keys().collect::<Vec<_>>(), [&0]);
    assert_eq!(project.position_sessions, 2);
}

/// `largest_audit_bytes` bounds a project's audit from above, closely: judges of the longest
/// ids in every map and two findings each, numbers at their longest.
#[test]
fn the_largest_audit_is_bounded_closely() {
    let ids = 256;
    let longest = -2.225_073_858_507_201_4e-308;
    let running = Running {
        n: u64::MAX,
        mean: longest,
        m2: longest,
    };
    for (judges, positions) in [(0, 0), (1, 0), (0, 10), (100, 1_000), (140, 10)] {
        let id = |j: usize| format!("{j:04}{}", "\u{1}".repeat(ids - 4));
        let mut audit = ProjectAudit {
            length: FisherPool {
                weight: longest,
                weighted_z: longest,
                pairs: u64::MAX,
            },
            reviews: running,
            position_sessions: u64::MAX,
            sessions: u64::MAX,
            forgotten: u64::MAX,
            ..ProjectAudit::default()
        };
        for j in 0..judges {
            audit.judges.insert(id(j), running);
            audit.self_inflation.insert(id(j), running);
            audit.seen.insert(id(j), u64::MAX);
            audit.active.insert(format!("generous_reviewer/{}", id(j)));
            audit
                .active
                .insert(format!("self_vote_inflation/{}", id(j)));
        }
        for p in 0..positions {
            audit.positions.insert(u64::MAX - p, running);
        }
        let bytes = serde_json::to_vec(&audit).unwrap().len();
        let bound = largest_audit_bytes(ids, judges, positions);
        assert!(bytes <= bound, "{judges}, {positions}: {bytes} > {bound}");
        assert!(
            bytes * 100 >= bound * 98,
            "{judges}, {positions}: {bytes} of {bound}"
        );
    }
}

proptest::proptest! {
    /// However sessions come, a project follows at most `project_max_judges` judges and pools
    /// at most `project_max_positions` positions, and its record stays within
    /// `largest_audit_bytes`: ids of eight bytes with quotes and control characters, every
    /// finding reachable (one review or self-vote is evidence enough).
    #[test]
    fn a_project_audit_stays_within_its_bounds(
        max_judges in 1usize..5,
        max_positions in 1u64..4,
        sessions in proptest::collection::vec(
            (
                proptest::collection::vec((0usize..9, 0.0f64..=1.0), 1..5),
                proptest::collection::vec((0usize..9, 0.0f64..=1.0), 0..3),
                0u64..6,
            ),
            1..40,
        ),
    ) {
        let cfg = Bias {
            project_max_judges: max_judges,
            project_max_positions: max_positions,
            project_min_judge_reviews: 1,
            project_min_self_votes: 1,
            ..Bias::default()
        };
        let ids: Vec<String> = (0..9).map(|i| format!("\u{1}\"{i:06}")).collect();
        let mut project = ProjectAudit::default();
        for (i, (scores, authors, position)) in sessions.iter().enumerate() {
            let shown = shown_at(*position);
            let named = |v: &[(usize, f64)]| -> Vec<(&str, f64)> {
                let mut v: Vec<(&str, f64)> = v.iter().map(|(j, n)| (ids[*j].as_str(), *n)).collect();
                v.sort_by(|a, b| a.0.cmp(b.0));
                v.dedup_by(|a, b| a.0 == b.0);
                v
            };
            let a = session_of(&named(scores), &named(authors), &shown);
            let audit = audit_session(&a, &cfg);
            project.update("p", &format!("s{i}"), &a, &audit, &cfg);
            proptest::prop_assert!(project.judges_followed() <= max_judges);
            proptest::prop_assert!(project.positions.len() as u64 <= max_positions);
            let bytes = serde_json::to_vec(&project).unwrap().len();
            proptest::prop_assert!(bytes <= largest_audit_bytes(8, max_judges, max_positions));
        }
    }
}
