//! Hand-checked consensus tests. Scores are given on 0..10 so normalized values are s/10.

use proptest::prelude::{any, prop, prop_assert, prop_assert_eq, proptest};
use proptest::strategy::Strategy as Gen;

use super::*;
use crate::engine::contract::judge::{BallotEvent, CandidateMeta};
use crate::engine::contract::time::EventTime;

fn t(secs: i64) -> EventTime {
    EventTime::new(1_795_168_800 + secs, 0).unwrap()
}

struct B<'a> {
    judge: &'a str,
    status: Status,
    scores: &'a [(&'a str, f64)],
    ranking: Option<&'a [&'a str]>,
}

fn ok<'a>(judge: &'a str, scores: &'a [(&'a str, f64)]) -> B<'a> {
    B {
        judge,
        status: Status::Ok,
        scores,
        ranking: None,
    }
}

fn session(ballots: &[B<'_>], authors: &[(&str, &str)]) -> Session {
    let mut s = Session {
        seq: 0,
        last_activity: t(0),
        ballots: BTreeMap::new(),
        candidates: BTreeMap::new(),
        expected_judges: None,
        category: None,
        idle_since: None,
    };
    let candidates: BTreeMap<String, CandidateMeta> = authors
        .iter()
        .map(|(c, a)| {
            (
                c.to_string(),
                CandidateMeta {
                    author: Some(a.to_string()),
                    ..Default::default()
                },
            )
        })
        .collect();
    for (i, b) in ballots.iter().enumerate() {
        s.add(
            &BallotEvent {
                judge: b.judge,
                status: b.status,
                scores: b
                    .scores
                    .iter()
                    .map(|(c, v)| (c.to_string(), v / 10.0))
                    .collect(),
                ranking: b.ranking.map(|r| r.iter().map(|x| x.to_string()).collect()),
                candidates: candidates.clone(),
                expected_judges: None,
                category: None,
            },
            t(i as i64),
        );
    }
    s
}

fn cfg() -> Sessions {
    Sessions::default()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn single_candidate_weighted_average_and_agreement() {
    let s = session(&[ok("j1", &[("A", 8.0)]), ok("j2", &[("A", 6.0)])], &[]);
    let a = analyze(&s, &cfg());
    let c = a.consensus.clone().unwrap();
    assert_eq!((c.strategy, c.needs_review), ("weighted_average", false));
    assert!(close(c.value.unwrap(), 0.7));
    // var_sample(0.8, 0.6) = 0.02 -> 1 - 0.02/0.0625 = 0.68
    assert!(close(a.agreement.unwrap(), 0.68));
    assert_eq!(a.rankings.len(), 1);
    assert_eq!(
        interpretation(&a),
        "Consensus on A is 0.70 (weighted_average from 2 judges)."
    );
}

#[test]
fn judge_weights_weight_the_average() {
    let mut c = cfg();
    c.judge_weights.insert("j1".into(), 3.0);
    let s = session(&[ok("j1", &[("A", 8.0)]), ok("j2", &[("A", 4.0)])], &[]);
    // (3*0.8 + 1*0.4) / 4 = 0.7
    assert!(close(
        analyze(&s, &c).consensus.unwrap().value.unwrap(),
        0.7
    ));
}

#[test]
fn a_failed_judge_switches_to_median() {
    let failed = B {
        judge: "j4",
        status: Status::Failed,
        scores: &[],
        ranking: None,
    };
    let s = session(
        &[
            ok("j1", &[("A", 2.0)]),
            ok("j2", &[("A", 6.0)]),
            ok("j3", &[("A", 9.0)]),
            failed,
        ],
        &[],
    );
    let a = analyze(&s, &cfg());
    assert_eq!(
        a.judges,
        JudgeCounts {
            ok: 3,
            failed: 1,
            abstained: 0
        }
    );
    let c = a.consensus.unwrap();
    assert_eq!(c.strategy, "median");
    assert!(close(c.value.unwrap(), 0.6));
}

#[test]
fn abstentions_count_but_do_not_score() {
    let abst = B {
        judge: "j2",
        status: Status::Abstained,
        scores: &[],
        ranking: None,
    };
    let s = session(&[ok("j1", &[("A", 5.0)]), abst], &[]);
    let a = analyze(&s, &cfg());
    assert_eq!(
        a.judges,
        JudgeCounts {
            ok: 1,
            failed: 0,
            abstained: 1
        }
    );
    let c = a.consensus.unwrap();
    assert_eq!((c.strategy, c.value), ("weighted_average", Some(0.5)));
    assert_eq!(a.agreement, Some(1.0));
    assert_eq!(a.rankings[0].confidence, "low"); // a single ok judge
}

#[test]
fn all_failed_gives_no_consensus() {
    let f = |j| B {
        judge: j,
        status: Status::Failed,
        scores: &[],
        ranking: None,
    };
    let s = session(&[f("j1"), f("j2")], &[("A", "m")]);
    let a = analyze(&s, &cfg());
    let c = a.consensus.clone().unwrap();
    assert_eq!((c.strategy, c.value), ("none", None));
    assert_eq!(a.rankings[0].mean_z, None);
    assert_eq!(a.rankings[0].confidence, "low");
    assert_eq!(a.krippendorff_alpha, None);
    assert_eq!(interpretation(&a), "No judge returned a score.");
}

#[test]
fn other_single_candidate_strategies() {
    let scores = [(1.0, 0.2), (1.0, 0.6), (1.0, 0.7)];
    assert_eq!(
        single_consensus(&scores, Strategy::Median, false).value,
        Some(0.6)
    );
    assert_eq!(
        single_consensus(&scores, Strategy::Highest, false).value,
        Some(0.7)
    );
    assert_eq!(
        single_consensus(&scores, Strategy::Lowest, false).value,
        Some(0.2)
    );
    assert_eq!(
        single_consensus(&scores, Strategy::Majority, false).value,
        Some(1.0)
    );
    assert_eq!(
        single_consensus(&[(1.0, 0.5), (1.0, 0.4)], Strategy::Majority, false).value,
        Some(0.0)
    );
    let u = single_consensus(&scores, Strategy::Unanimous, false);
    assert_eq!((u.value, u.needs_review), (None, true));
    let u = single_consensus(&[(1.0, 0.6), (1.0, 0.7)], Strategy::Unanimous, false);
    assert!(close(u.value.unwrap(), 0.65) && !u.needs_review);
    // Only weighted_average falls back to median on a failed judge.
    assert_eq!(
        single_consensus(&scores, Strategy::Highest, true).strategy,
        "highest"
    );
}

#[test]
fn z_scores_standard_errors_and_ties() {
    // j1: A .8 B .6 C .4 -> z = (1.2247, 0, -1.2247); j2: A .9 B .5 C .5 -> z = (1.4142, -.7071, -.7071)
    let s = session(
        &[
            ok("j1", &[("A", 8.0), ("B", 6.0), ("C", 4.0)]),
            ok("j2", &[("A", 9.0), ("B", 5.0), ("C", 5.0)]),
        ],
        &[],
    );
    let a = analyze(&s, &cfg());
    let order: Vec<&str> = a.rankings.iter().map(|r| r.candidate).collect();
    assert_eq!(order, ["A", "B", "C"]);
    let r = &a.rankings;
    let z1 = 1.5f64.sqrt(); // 1.2247...
    assert!(close(r[0].mean_z.unwrap(), (z1 + 2f64.sqrt()) / 2.0));
    assert!(close(
        r[0].std_error,
        (2f64.sqrt() - z1) / 2.0 / 2f64.sqrt()
    ));
    assert!(close(r[1].mean_z.unwrap(), -(0.5f64.sqrt()) / 2.0));
    assert!(close(r[1].std_error, 0.25));
    // A - 1.96se = 1.19 > B + 1.96se = 0.137: not tied; B - .49 = -.84 < C + .359 = -.61: tied
    assert_eq!(
        r.iter().map(|x| x.tied_with_next).collect::<Vec<_>>(),
        [false, true, false]
    );
    assert_eq!(
        interpretation(&a),
        "A is the clear winner; B and C are statistically tied."
    );
    assert_eq!(
        r.iter().map(|x| x.borda).collect::<Vec<_>>(),
        [Some(1.0), Some(0.5), Some(0.0)]
    );
    assert_eq!(r[0].wins, 2);
    // Each candidate's two scores differ by 0.1: var_sample = 0.005 -> agreement 1 - 0.08 = 0.92.
    assert!(
        (a.agreement.unwrap() - 0.92).abs() < 1e-9,
        "{:?}",
        a.agreement
    );
}

#[test]
fn self_votes_are_excluded_everywhere() {
    // j1 wrote A and rates it 10; without it A has only j2's score.
    let s = session(
        &[
            ok("j1", &[("A", 10.0), ("B", 4.0)]),
            ok("j2", &[("A", 5.0), ("B", 7.0)]),
            ok("j3", &[("A", 4.0), ("B", 8.0)]),
        ],
        &[("A", "j1")],
    );
    let a = analyze(&s, &cfg());
    let ra = a.rankings.iter().find(|r| r.candidate == "A").unwrap();
    assert_eq!(ra.votes, 2);
    assert!(close(ra.mean_score.unwrap(), 0.45));
    // possible for A: ok judges other than its author = 2 -> 2/2 = high
    assert_eq!(ra.confidence, "high");
    assert_eq!(a.self_scores, vec![("j1", "A", 1.0)]);
    // j1 ranks A first but that is a self-vote: no win for A from j1.
    assert_eq!(ra.wins, 0);
    // Borda for B: j1 puts B at position 1 of 2 -> 0 points; j2, j3 put B first -> 1 each.
    let rb = a.rankings.iter().find(|r| r.candidate == "B").unwrap();
    assert!(close(rb.borda.unwrap(), 2.0 / 3.0));
    assert_eq!(a.rankings[0].candidate, "B");
    // With exclusion off, j1's 10 counts.
    let mut c = cfg();
    c.exclude_self_votes = false;
    let a = analyze(&s, &c);
    assert_eq!(
        a.rankings
            .iter()
            .find(|r| r.candidate == "A")
            .unwrap()
            .votes,
        3
    );
}

#[test]
fn later_ballot_from_the_same_judge_replaces_the_earlier() {
    let s = session(
        &[
            ok("j1", &[("A", 2.0)]),
            ok("j2", &[("A", 6.0)]),
            ok("j1", &[("A", 8.0)]),
        ],
        &[],
    );
    assert_eq!(s.ballots.len(), 2);
    assert!(close(
        analyze(&s, &cfg()).consensus.unwrap().value.unwrap(),
        0.7
    ));
}

#[test]
fn explicit_rankings_partial_duplicate_and_unknown_labels() {
    // j1 ranks: X (unknown), B, B (duplicate), A; C is not ranked by j1.
    let r1: &[&str] = &["X", "B", "B", "A"];
    let s = session(
        &[
            B {
                judge: "j1",
                status: Status::Ok,
                scores: &[("A", 9.0), ("B", 5.0), ("C", 1.0)],
                ranking: Some(r1),
            },
            ok("j2", &[("A", 6.0), ("B", 7.0), ("C", 8.0)]),
        ],
        &[],
    );
    let a = analyze(&s, &cfg());
    let get = |c: &str| {
        a.rankings
            .iter()
            .find(|r| r.candidate == c)
            .unwrap()
            .clone()
    };
    // N = 3. j1 order B(0) A(1): B 1.0, A 0.5. j2 by score C, B, A: C 1.0, B 0.5, A 0.0.
    assert!(close(get("B").borda.unwrap(), 0.75));
    assert!(close(get("A").borda.unwrap(), 0.25));
    assert!(close(get("C").borda.unwrap(), 1.0));
    assert_eq!((get("B").wins, get("C").wins, get("A").wins), (1, 1, 0));
    // A ranking of only unknown labels falls back to the scores.
    let r2: &[&str] = &["nope"];
    let s = session(
        &[B {
            judge: "j1",
            status: Status::Ok,
            scores: &[("A", 1.0), ("B", 2.0)],
            ranking: Some(r2),
        }],
        &[],
    );
    let a = analyze(&s, &cfg());
    assert_eq!(
        a.rankings.iter().find(|r| r.candidate == "B").unwrap().wins,
        1
    );
}

#[test]
fn flat_judges_fall_back_to_borda_order() {
    // Both judges give every candidate the same score: all z are 0, so Borda decides; with equal
    // scores each judge's order is by id, so A collects the wins.
    let s = session(
        &[
            ok("j1", &[("A", 5.0), ("B", 5.0)]),
            ok("j2", &[("A", 7.0), ("B", 7.0)]),
        ],
        &[],
    );
    let a = analyze(&s, &cfg());
    assert_eq!(
        a.rankings.iter().map(|r| r.mean_z).collect::<Vec<_>>(),
        [Some(0.0), Some(0.0)]
    );
    assert_eq!(a.rankings[0].candidate, "A");
    assert_eq!((a.rankings[0].wins, a.rankings[1].wins), (2, 0));
    assert!(!a.rankings[0].tied_with_next);
}

#[test]
fn borda_method_ranks_by_borda() {
    let mut c = cfg();
    c.method = Method::Borda;
    // j1 loves A (z: A 1.41, B -0.71, C -0.71); j2 and j3 put B just above A.
    // mean_z: A 0.93 > B 0.24, but Borda: A (1 + .5 + .5)/3 = .667 < B (.5 + 1 + 1)/3 = .833.
    let s = session(
        &[
            ok("j1", &[("A", 10.0), ("B", 0.0), ("C", 0.0)]),
            ok("j2", &[("A", 5.9), ("B", 6.0), ("C", 0.0)]),
            ok("j3", &[("A", 5.9), ("B", 6.0), ("C", 0.0)]),
        ],
        &[],
    );
    let by_z = analyze(&s, &cfg());
    assert_eq!(by_z.rankings[0].candidate, "A");
    assert!(close(by_z.rankings[1].borda.unwrap(), 2.5 / 3.0));
    let by_borda = analyze(&s, &c);
    assert_eq!(
        by_borda
            .rankings
            .iter()
            .map(|r| r.candidate)
            .collect::<Vec<_>>(),
        ["B", "A", "C"]
    );
}

#[test]
fn candidates_without_scores_go_last_with_low_confidence() {
    let s = session(
        &[
            ok("j1", &[("B", 5.0), ("C", 6.0)]),
            ok("j2", &[("B", 4.0), ("C", 9.0)]),
        ],
        &[("A", "m")],
    );
    let a = analyze(&s, &cfg());
    let last = a.rankings.last().unwrap();
    assert_eq!(
        (last.candidate, last.mean_z, last.borda, last.confidence),
        ("A", None, None, "low")
    );
    assert_eq!(last.rank, 3);
    assert_eq!(a.rankings[0].candidate, "C");
}

#[test]
fn two_judges_one_candidate_each_and_confidence_levels() {
    assert_eq!(confidence(4, 5, 5), "high");
    assert_eq!(confidence(3, 5, 5), "medium");
    assert_eq!(confidence(2, 5, 5), "low");
    assert_eq!(confidence(1, 1, 1), "low");
    assert_eq!(confidence(0, 3, 3), "low");
}

fn arb_ballots() -> impl Gen<Value = Vec<(String, Vec<(String, f64)>)>> {
    let candidates = prop::sample::subsequence(vec!["A", "B", "C", "D"], 1..=4);
    prop::collection::vec((candidates, prop::collection::vec(0.0..=10.0f64, 4)), 1..6).prop_map(
        |js| {
            js.into_iter()
                .enumerate()
                .map(|(i, (cs, vs))| {
                    (
                        format!("j{i}"),
                        cs.into_iter()
                            .zip(vs)
                            .map(|(c, v)| (c.to_string(), v))
                            .collect(),
                    )
                })
                .collect()
        },
    )
}

fn build(ballots: &[(String, Vec<(String, f64)>)], scale: &[(f64, f64)]) -> Session {
    let mut s = session(&[], &[("A", "j0")]);
    for (i, (judge, scores)) in ballots.iter().enumerate() {
        let (a, b) = scale.get(i).copied().unwrap_or((1.0, 0.0));
        // A judge on the scale [b, 10a + b]: raw score a*v + b normalizes back to v/10.
        let lo = b;
        let hi = 10.0 * a + b;
        s.add(
            &BallotEvent {
                judge,
                status: Status::Ok,
                scores: scores
                    .iter()
                    .map(|(c, v)| (c.clone(), ((a * v + b) - lo) / (hi - lo)))
                    .collect(),
                ranking: None,
                candidates: BTreeMap::new(),
                expected_judges: None,
                category: None,
            },
            t(i as i64),
        );
    }
    s
}

fn summary(a: &Analysis) -> Vec<(String, Option<f64>, f64, Option<f64>)> {
    a.rankings
        .iter()
        .map(|r| (r.candidate.to_string(), r.mean_z, r.std_error, r.borda))
        .collect()
}

/// Same per-candidate numbers (the order of exactly tied candidates may differ by rounding).
fn same(x: &Analysis, y: &Analysis) -> bool {
    let eq = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() < 1e-9,
        (a, b) => a == b,
    };
    let mut sx = summary(x);
    let mut sy = summary(y);
    sx.sort_by(|a, b| a.0.cmp(&b.0));
    sy.sort_by(|a, b| a.0.cmp(&b.0));
    sx.iter()
        .zip(sy.iter())
        .all(|(a, b)| a.0 == b.0 && eq(a.1, b.1) && (a.2 - b.2).abs() < 1e-9 && eq(a.3, b.3))
        && x.rankings.len() == y.rankings.len()
        && eq(x.agreement, y.agreement)
        && eq(x.krippendorff_alpha, y.krippendorff_alpha)
}

proptest! {
    #[test]
    fn consensus_is_independent_of_arrival_order(ballots in arb_ballots(), seed in any::<u64>()) {
        let mut shuffled = ballots.clone();
        let n = shuffled.len();
        for i in (1..n).rev() {
            shuffled.swap(i, (seed as usize).wrapping_add(i * 31) % (i + 1));
        }
        let (sa, sb) = (build(&ballots, &[]), build(&shuffled, &[]));
        let a = analyze(&sa, &cfg());
        let b = analyze(&sb, &cfg());
        prop_assert_eq!(a, b);
    }

    #[test]
    fn normalized_outputs_are_invariant_to_a_judges_affine_scale(
        ballots in arb_ballots(),
        scales in prop::collection::vec((0.1..100.0f64, -50.0..50.0f64), 6),
    ) {
        let (sa, sb) = (build(&ballots, &[]), build(&ballots, &scales));
        let a = analyze(&sa, &cfg());
        let b = analyze(&sb, &cfg());
        prop_assert!(same(&a, &b), "{:?}\n{:?}", summary(&a), summary(&b));
        for r in &a.rankings {
            if let Some(m) = r.mean_score { prop_assert!((0.0..=1.0).contains(&m)); }
            if let Some(z) = r.mean_z { prop_assert!(z.is_finite()); }
        }
        if let Some(g) = a.agreement { prop_assert!((0.0..=1.0).contains(&g)); }
    }
}
