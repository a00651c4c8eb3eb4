//! Hand-checked bias-audit tests.

use std::collections::BTreeMap;

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
