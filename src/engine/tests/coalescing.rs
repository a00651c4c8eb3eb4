//! The journal (vote projects, runs of item places) and the coalescing of a project's
//! `jury.scores` updates.

use super::*;

/// A project's batches in one flush share one journal entry, also with other projects' in
/// between; a gap in the evicted ids (a window restored with gaps) starts a new one, which
/// later batches extend; a hint left from an earlier journal is not trusted.
#[test]
fn vote_journal_joins_a_projects_batches() {
    let mut journal = Vec::new();
    let (mut a, mut b) = (JournalHint::default(), JournalHint::default());
    let remembered = |seq: u64, evicted: &[u64]| Remembered {
        fingerprint: u128::from(seq),
        seq,
        evicted: evicted.iter().map(|s| (*s, u128::from(*s))).collect(),
    };
    let note = |journal: &mut Vec<Change>, hint: &mut JournalHint, project, seq, evicted| {
        note_votes(Some(journal), hint, project, &remembered(seq, evicted));
    };
    let votes = |project: &str, seen: Range<u64>, forgot: Range<u64>| Change::Votes {
        project: project.into(),
        seen,
        forgot,
    };
    for (seq, evicted) in [(0, &[][..]), (1, &[]), (2, &[0]), (3, &[1])] {
        note(&mut journal, &mut a, "a", seq, evicted);
    }
    assert_eq!(journal, vec![votes("a", 0..4, 0..2)]);
    note(&mut journal, &mut b, "b", 0, &[]);
    note(&mut journal, &mut a, "a", 4, &[2]);
    note(&mut journal, &mut a, "a", 5, &[4]);
    note(&mut journal, &mut a, "a", 6, &[5, 7]);
    note(&mut journal, &mut b, "b", 1, &[]);
    assert_eq!(
        journal,
        vec![
            votes("a", 0..5, 0..3),
            votes("b", 0..2, 0..0),
            votes("a", 5..7, 4..6),
            votes("a", 0..0, 7..8),
        ]
    );
    // The next flush: a's hint points past the new journal, c's (left from an earlier one) at
    // b's change.
    journal.clear();
    let mut c = JournalHint(Some(0));
    note(&mut journal, &mut b, "b", 2, &[]);
    note(&mut journal, &mut a, "a", 7, &[]);
    note(&mut journal, &mut c, "c", 0, &[]);
    note(&mut journal, &mut a, "a", 8, &[]);
    assert_eq!(
        journal,
        vec![
            votes("b", 2..3, 0..0),
            votes("a", 7..9, 0..0),
            votes("c", 0..1, 0..0)
        ]
    );
    // Without a journal nothing is noted.
    note_votes(None, &mut a, "a", &remembered(9, &[]));
    assert_eq!(journal.len(), 3);
}

/// Consecutive item places share one journal entry, also with other changes in between; a
/// place already in the run adds nothing; any other place starts a run, which later places
/// extend; a hint left from an earlier journal extends only a run its place joins.
#[test]
fn item_places_join_into_runs() {
    let items = |places: Range<u64>| Change::QualityItems { places };
    let mut state = PartitionState::journaled();
    for seq in [10, 11, 12] {
        state.note_item(seq);
    }
    state.note(|| Change::ItemsForgotten);
    for seq in [13, 11, 3, 4, 14] {
        state.note_item(seq);
    }
    assert_eq!(
        state.journal.as_deref(),
        Some(
            &[
                items(10..14),
                Change::ItemsForgotten,
                items(3..5),
                items(14..15)
            ][..]
        )
    );
    // The next flush: the hint points at an entry of the new journal that is no run.
    state.journal = Some(vec![Change::Book, Change::Book, Change::Book]);
    state.note_item(15);
    state.note_item(16);
    assert_eq!(
        state.journal.as_deref(),
        Some(&[Change::Book, Change::Book, Change::Book, items(15..17)][..])
    );
    // Without a journal nothing is noted.
    state.journal = None;
    state.note_item(17);
    assert!(state.journal.is_none());
}

/// A vote batch of one vote for project `p{project}`, its event `n` seconds into the stream.
fn coalesce_vote(n: usize, project: usize, value: f64) -> String {
    format!(
        r#"{{"event_id": "c{n}", "project_id": "p{project}", "occurred_at": {}, "votes": [{{"voter_id": "u", "value": {value}}}]}}"#,
        1_795_168_800_000 + n as i64 * 1000
    )
}

/// Applies `batches` (project, clock ms, value) with the runtime's clock, releasing held scores
/// after the batches at the indexes in `cycles` (as the runtime does when it ends a cycle), and
/// without a clock, as replay does. Returns the rendered scores of both, in order.
fn coalesced_and_plain(
    batches: &[(usize, u64, f64)],
    cycles: &[usize],
) -> (Vec<String>, Vec<String>) {
    let e = engine();
    let mut reps = ReputationTable::default();
    let (mut coalesced, mut plain) = (PartitionState::default(), PartitionState::default());
    let (mut c_out, mut p_out) = (Vec::new(), Vec::new());
    for (n, (project, clock, value)) in batches.iter().enumerate() {
        let payload = coalesce_vote(n, *project, *value);
        let mut r = rec("jury.votes", Some(payload.as_bytes()));
        e.process(&mut plain, &mut reps, &r, &mut p_out);
        r.clock_ms = Some(*clock);
        e.process(&mut coalesced, &mut reps, &r, &mut c_out);
        if cycles.contains(&n) {
            e.release_held(&mut coalesced, &mut c_out);
        }
    }
    e.release_held(&mut coalesced, &mut c_out);
    assert!(coalesced.held.is_empty());
    let render = |o: &[Output]| {
        o.iter()
            .map(|o| o.render().into_owned())
            .collect::<Vec<_>>()
    };
    (render(&c_out), render(&p_out))
}

#[test]
fn scores_within_the_interval_are_held_and_the_latest_released() {
    // Default interval 100 ms. p0 at 0 ms (emitted), 40 and 90 ms (held, latest kept), then
    // p1 at 95 ms (its first: emitted), p0 at 150 ms (interval over: emitted, nothing held).
    let batches = [
        (0, 0, 1.0),
        (0, 40, 0.0),
        (0, 90, 1.0),
        (1, 95, 0.5),
        (0, 150, 0.0),
        (0, 160, 1.0),
    ];
    let (coalesced, plain) = coalesced_and_plain(&batches, &[2]);
    // Emitted: batch 0; at the cycle after batch 2, batch 2's score (40 ms's was superseded);
    // batch 3; batch 4; and the end's release gives batch 5's.
    assert_eq!(
        coalesced,
        vec![
            plain[0].clone(),
            plain[2].clone(),
            plain[3].clone(),
            plain[4].clone(),
            plain[5].clone()
        ]
    );
    let held: Value = serde_json::from_str(&coalesced[1]).unwrap();
    assert_eq!(held["evaluations"], 3);
    // Without a release between them, a score emitted at once supersedes the one held.
    let (coalesced, plain) = coalesced_and_plain(&[(0, 0, 1.0), (0, 50, 0.0), (0, 100, 1.0)], &[]);
    assert_eq!(coalesced, vec![plain[0].clone(), plain[2].clone()]);
}

proptest! {
    /// Coalescing only leaves scores out: what it emits for a project is what replay emits for
    /// it, in the same order (held scores of different projects come out at the end of a cycle,
    /// so the interleaving of projects differs), and every project's latest score is emitted.
    #[test]
    fn coalescing_keeps_each_projects_latest_score(
        steps in prop::collection::vec((0usize..4, 0u64..80, 0.0..=1.0f64), 1..60),
        cycle_every in 1usize..10,
    ) {
        let mut clock = 0;
        let batches: Vec<(usize, u64, f64)> = steps
            .iter()
            .map(|(p, dt, v)| {
                clock += dt;
                (*p, clock, *v)
            })
            .collect();
        let cycles: Vec<usize> = (0..batches.len()).filter(|n| n % cycle_every == 0).collect();
        let (coalesced, plain) = coalesced_and_plain(&batches, &cycles);
        let by_project = |scores: &[String]| {
            let mut by_project = std::collections::BTreeMap::<String, Vec<String>>::new();
            for s in scores {
                let v: Value = serde_json::from_str(s).unwrap();
                let project = v["project_id"].as_str().unwrap_or_default().to_owned();
                by_project.entry(project).or_default().push(s.clone());
            }
            by_project
        };
        let (coalesced, plain) = (by_project(&coalesced), by_project(&plain));
        prop_assert_eq!(coalesced.keys().collect::<Vec<_>>(), plain.keys().collect::<Vec<_>>());
        for (project, scores) in &coalesced {
            let mut rest = plain[project].iter();
            for c in scores {
                prop_assert!(rest.any(|p| p == c), "{} is not in replay's order", c);
            }
            prop_assert_eq!(scores.last(), plain[project].last());
        }
    }
}
