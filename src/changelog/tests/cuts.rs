//! Flushes cut anywhere (a crash inside a changelog write): every record counts once.

use super::*;

#[test]
fn a_flush_cut_short_restores_to_counted_ids() {
    // 3 projects, 40 events each, flushes of 20 events that cross bucket boundaries.
    let payloads: Vec<String> = (0..120).map(|i| vote(i, i % 3, i as i64)).collect();
    for window in [10, 1000] {
        for cut in [0, 20, 40, 80] {
            for keep in 0..6 {
                check_cut_flush(VOTES, &payloads, window, 20, cut, keep);
            }
        }
    }
}

#[test]
fn a_judge_flush_cut_anywhere_counts_every_ballot_once() {
    // Sessions of 3 expected judges over 2 projects: flushes of 9 ballots complete sessions,
    // evict (2 open per project), time them out and turn the completed window over.
    let payloads: Vec<String> = (0..54)
        .map(|i| ballot(i, i / 2 + (i % 5) / 4, i % 4, (i * 3) as i64))
        .collect();
    for cut in [0, 9, 27, 45] {
        let flush_records = {
            let mut log = Vec::new();
            run(
                &engine(5),
                JUDGES,
                &mut PartitionState::journaled(),
                &payloads[..(cut + 9).min(payloads.len())],
                0,
                9,
                &mut log,
            );
            log.iter()
                .rev()
                .skip(1)
                .take_while(|r| !r.key.ends_with("\"offset\"]"))
                .count()
        };
        assert!(flush_records >= 4, "a flush of many keys: {flush_records}");
        for keep in 0..=flush_records {
            check_cut_flush(JUDGES, &payloads, 5, 9, cut, keep);
        }
    }
}

#[test]
fn a_redo_record_cut_between_its_chunks_is_ignored() {
    // Chunks of at most 300 bytes: a flush's redo record takes several, and a cut can fall
    // between them (the flush before is restored) or after them (the flush is redone).
    let payloads: Vec<String> = (0..27)
        .map(|i| ballot(i, i / 3, i % 3, (i * 3) as i64))
        .collect();
    CHUNK_BYTES.set(300);
    let mut log = Vec::new();
    run(
        &engine(5),
        JUDGES,
        &mut PartitionState::journaled(),
        &payloads[..9],
        0,
        9,
        &mut log,
    );
    let chunks = log.iter().filter(|r| r.key.contains("\"redo\"")).count();
    assert!(chunks >= 3, "{chunks} chunks");
    for cut in [0, 9, 18] {
        for keep in 0..=chunks + 2 {
            check_cut_flush(JUDGES, &payloads, 5, 9, cut, keep.min(chunks));
        }
    }
    CHUNK_BYTES.set(DEFAULT_REDO_CHUNK_BYTES);
}

/// A flush that forgets the first item of a bucket and then changes another item of the same
/// bucket writes the bucket, so it must keep the forgotten item's value to the end: cut
/// anywhere, that flush restores as it found the items (the property test below rarely makes
/// this case). Twenty items per task, one project: the first flushes fill places 0–19, the
/// next forgets place 0 for a new item and changes place 1, both in bucket 0.
#[test]
fn a_flush_that_forgets_and_then_changes_items_of_one_bucket_keeps_what_it_forgot() {
    let engine = engine_with_items(1000, 20);
    let mut payloads: Vec<String> = (0..20)
        .map(|i| reviewer_vote(i, (0, i, i % 3), i as i64))
        .collect();
    payloads.push(reviewer_vote(20, (0, 20, 0), 20));
    payloads.push(reviewer_vote(21, (0, 1, 1), 21));
    payloads.push(reviewer_vote(22, (0, 21, 2), 22));
    payloads.push(reviewer_vote(23, (0, 2, 0), 23));
    for keep in 0..12 {
        check_cut_flush_with(&engine, PROJECTS, &payloads, (2, 20, keep));
    }
}

/// The values of the redo chunk records in `log`, parsed.
fn redo_chunks(log: &[StateRecord]) -> Vec<(String, Option<serde_json::Value>)> {
    log.iter()
        .filter(|r| r.key.contains("\"redo\""))
        .map(|r| {
            let v = r
                .value
                .as_deref()
                .map(|v| serde_json::from_slice(v).expect("json"));
            (r.key.clone(), v)
        })
        .collect()
}

/// A judge-scores state after `payloads` at offsets 0, 1, ..., and its journal.
fn judged(payloads: &[String]) -> (PartitionState, Vec<Change>) {
    let engine = engine(5);
    let mut state = PartitionState::journaled();
    for (i, p) in payloads.iter().enumerate() {
        let r = Record::new(
            "jury.judge-scores",
            Some(InputTopic::JudgeScores),
            Some(p.as_bytes()),
        )
        .at(Some(JUDGES.partition), Some(i as i64));
        engine.process(
            &mut state,
            &mut ReputationTable::default(),
            &r,
            &mut Vec::new(),
        );
    }
    let changes = state.journal.replace(Vec::new()).unwrap_or_default();
    (state, changes)
}

#[test]
fn redo_chunks_name_their_write_and_stale_ones_are_deleted() {
    let payloads: Vec<String> = (0..12)
        .map(|i| ballot(i, i / 3, i % 3, (i * 3) as i64))
        .collect();
    let (state, changes) = judged(&payloads);
    let mut renderer = Renderer::new(7, 300);
    let render = |renderer: &mut Renderer, changes: &[Change]| {
        let mut out = Records::default();
        renderer.render(JUDGES, &state, changes, Some(11), &mut out);
        out.iter().map(StateRecord::from).collect::<Vec<_>>()
    };
    let many = redo_chunks(&render(&mut renderer, &changes));
    let n = many.len();
    assert!(n >= 3, "{n} chunks");
    for (i, (key, value)) in many.iter().enumerate() {
        assert_eq!(key, &format!(r#"["j",2,"redo","{i}"]"#));
        let value = value.as_ref().expect("a chunk");
        assert_eq!((&value["run"], &value["offset"]), (&7.into(), &11.into()));
        assert_eq!(value["last"], i + 1 == n);
        assert!(!value["records"].as_array().is_some_and(Vec::is_empty));
    }
    // A smaller flush: one chunk, and the stale ones are deleted.
    let few = redo_chunks(&render(&mut renderer, &changes[..1]));
    assert_eq!(few.len(), n);
    assert_eq!(
        few[0].1.as_ref().map(|v| v["last"].clone()),
        Some(true.into())
    );
    assert!(few[1..].iter().all(|(_, v)| v.is_none()));
}

#[test]
fn chunks_of_two_writes_are_not_one_redo_record() {
    // Run 1 wrote a flush through offset 3 in two chunks and got only its first out; after a
    // restart, run 2 wrote a flush through the same offset and got only its first chunk out.
    // Chunk 0 (run 2) and chunk 1 (run 1) must not be taken for a whole.
    let payloads: Vec<String> = (0..4).map(|i| ballot(i, 0, i, i as i64)).collect();
    let (state, changes) = judged(&payloads);
    let flush = |run: u64| {
        let mut out = Records::default();
        Renderer::new(run, 200).render(JUDGES, &state, &changes, Some(3), &mut out);
        out.iter().map(StateRecord::from).collect::<Vec<_>>()
    };
    let (first, second) = (flush(1), flush(2));
    assert!(redo_chunks(&first).len() >= 2);
    let mut log = vec![first[1].clone(), second[0].clone()];
    let (restored, offset) = restore(JUDGES, &log);
    assert_eq!(offset, None);
    assert_eq!(restored.sessions, PartitionState::journaled().sessions);
    // With all of the second write's chunks, it is whole.
    log.extend(
        second
            .iter()
            .take_while(|r| r.key.contains("\"redo\""))
            .cloned(),
    );
    let (restored, offset) = restore(JUDGES, &log);
    assert_eq!(offset, Some(3));
    assert_eq!(restored.sessions, state.sessions);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// A projects unit's votes count once in its scores and once in its judge quality however
    /// its flush is cut.
    #[test]
    fn any_cut_flush_with_votes_observes_each_vote_once(
        events in prop::collection::vec((0usize..5, 0usize..4, 0i64..60, any::<bool>()), 1..60),
        flush in 1usize..12,
        cut_flushes in 0usize..6,
        keep in 0usize..40,
    ) {
        let payloads = judged_with_votes(&events);
        let cut = (cut_flushes * flush).min(payloads.len());
        check_cut_flush(PROJECTS, &payloads, 5 + flush, flush, cut, keep);
    }

    /// Ticks among the ballots (sessions going idle, and completing as `idle` once ticks pass
    /// the default ten minutes; leaderboard categories whose ratings lack a session refitted):
    /// whatever is cut, the restored sessions and rankings are the clean run's.
    #[test]
    fn any_cut_flush_with_ticks_restores_the_idle_sessions(
        events in prop::collection::vec((0usize..5, 0usize..4, 0i64..60, 0u8..3), 1..60),
        flush in 1usize..12,
        cut_flushes in 0usize..6,
        keep in 0usize..40,
    ) {
        // One event in three is a tick, a minute of wall clock after the one before it (the
        // first is a ballot: the harness expects the unit's origins in every flush).
        let mut ticks = 0i64;
        let payloads: Vec<String> = events
            .iter()
            .enumerate()
            .map(|(i, &(s, j, t, kind))| {
                if kind == 0 && i > 0 {
                    ticks += 1;
                    format!("{TICK}{}", 1_800_000_000_000 + ticks * 60_000)
                } else {
                    ballot(i, s, j, t)
                }
            })
            .collect();
        let cut = (cut_flushes * flush).min(payloads.len());
        check_cut_flush(PROJECTS, &payloads, 5 + flush, flush, cut, keep);
    }

    #[test]
    fn any_cut_flush_restores_votes_exactly_once(
        projects in prop::collection::vec(0usize..3, 1..150),
        flush in 1usize..50,
        spare in 0usize..40,
        cut_flushes in 0usize..10,
        keep in 0usize..8,
    ) {
        let payloads: Vec<String> = projects.iter().enumerate().map(|(i, p)| vote(i, *p, i as i64)).collect();
        let cut = (cut_flushes * flush).min(payloads.len());
        // Replayed events are recognised by id only while the window holds a flush's worth.
        check_cut_flush(VOTES, &payloads, flush + spare, flush, cut, keep);
    }

    #[test]
    fn any_cut_judge_flush_restores_every_ballot_once(
        events in prop::collection::vec((0usize..5, 0usize..4, 0i64..60), 1..60),
        flush in 1usize..12,
        cut_flushes in 0usize..6,
        keep in 0usize..40,
        chunk_bytes in prop_oneof![Just(DEFAULT_REDO_CHUNK_BYTES), 100usize..2000],
    ) {
        let payloads: Vec<String> = events.iter().enumerate().map(|(i, (s, j, t))| ballot(i, *s, *j, *t)).collect();
        let cut = (cut_flushes * flush).min(payloads.len());
        CHUNK_BYTES.set(chunk_bytes);
        check_cut_flush(JUDGES, &payloads, 5, flush, cut, keep);
    }

    #[test]
    fn any_cut_and_flush_size_restores_exactly(
        events in prop::collection::vec((0usize..4, 0usize..6, 0usize..3, 0i64..50), 1..40),
        cut_frac in 0.0..=1.0f64,
        flush in 1usize..6,
    ) {
        let judges: Vec<String> = events.iter().enumerate().map(|(i, (s, j, _, t))| ballot(i, *s, *j, *t)).collect();
        let votes: Vec<String> = events.iter().enumerate().map(|(i, (_, _, p, t))| vote(i % 7, *p, *t)).collect();
        let cut = ((events.len() as f64) * cut_frac) as usize;
        check_round_trip(Unit::input(InputTopic::JudgeScores, 1), &judges, cut, flush);
        check_round_trip(Unit::input(InputTopic::Votes, 1), &votes, cut, flush);
        let mixed: Vec<String> = judges.iter().zip(&votes).flat_map(|(j, v)| [j.clone(), v.clone()]).collect();
        check_round_trip(Unit::projects(1), &mixed, cut, flush);
    }
}

proptest! {
    // Enough cases that some cut falls between a flush's votes and the item buckets that the
    // flush before forgot items of.
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Item buckets are written once, before the redo record: a flush cut after some of them
    /// restores every item as the flush found it (new items dropped, changed and forgotten
    /// ones as they were), and the items its flush before forgot stay forgotten.
    #[test]
    fn any_cut_flush_restores_items_as_the_flush_found_them(
        events in prop::collection::vec((0usize..3, 0usize..30, 0usize..5, 0i64..60), 1..120),
        flush in 1usize..12,
        cut_flushes in 0usize..8,
        keep in 0usize..40,
    ) {
        let payloads: Vec<String> = events
            .iter()
            .enumerate()
            .map(|(i, &(p, item, voter, t))| reviewer_vote(i, (p, item, voter), t))
            .collect();
        let cut = (cut_flushes * flush).min(payloads.len());
        // Twelve items per task: the items forgotten are behind the buckets new ones fill.
        let engine = engine_with_items(5 + flush, 12);
        check_cut_flush_with(&engine, PROJECTS, &payloads, (flush, cut, keep));
    }
}
