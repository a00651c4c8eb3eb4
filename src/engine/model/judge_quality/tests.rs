use proptest::prelude::*;

use super::*;
use crate::engine::model::reviewers::{ReviewerLimits, Verdict};

const LIMITS: QualityLimits = QualityLimits {
    min_human_votes: 3,
    max_pending_items: 3,
    window: 4,
    max_judges: 3,
    max_task_items: 100,
    max_waiting_bytes: usize::MAX,
    reviewers: None,
};

/// A task's judge quality with its projects' beside it, as a state holds them.
#[derive(Default)]
struct Task {
    quality: TaskQuality,
    projects: Projects<ProjectQuality>,
}

impl Task {
    fn votes(
        &mut self,
        at_item: (&str, &str),
        votes: (&[(f64, f64)], &[Verdict]),
        at: EventTime,
        limits: &QualityLimits,
    ) -> Observed {
        let projects = &mut self.projects;
        let (votes, verdicts) = votes;
        let verdicts = verdicts.iter().cloned().collect();
        self.quality
            .votes(projects, at_item, (votes, verdicts), at, limits)
    }

    fn completed(
        &mut self,
        session: (&str, &str),
        scores: &[(&str, &str, f64)],
        at: EventTime,
        limits: &QualityLimits,
    ) -> Observed {
        let projects = &mut self.projects;
        self.quality
            .completed(projects, session, scores, at, limits)
    }

    fn get(&self, project: &str) -> Option<&ProjectQuality> {
        self.projects.get(project)
    }

    fn project(&mut self, project: &str) -> &mut ProjectQuality {
        self.projects.entry(ProjectKey::from(project)).or_default()
    }

    fn iter(&self) -> impl Iterator<Item = (&ProjectKey, &ProjectQuality)> {
        self.projects.iter()
    }

    fn held(&self) -> (usize, usize) {
        self.quality.held()
    }

    fn items_at(&self, places: Range<u64>) -> impl Iterator<Item = (u64, &str, &str, &ItemVotes)> {
        self.quality.items_at(places)
    }

    fn consistent(&self) -> bool {
        self.quality.consistent(&self.projects)
    }
}

fn at() -> EventTime {
    EventTime::from_epoch_millis(1_795_168_800_000).unwrap()
}

fn item<'q>(q: &'q Task, item: &str) -> Option<&'q ItemVotes> {
    q.quality.item(("p", item))
}

fn pairs(o: &Observed) -> Vec<(&str, &str, f64, f64)> {
    o.pairs
        .iter()
        .map(|p| (p.judge.as_str(), p.item.as_str(), p.s, p.h))
        .collect()
}

#[test]
fn a_pair_forms_when_both_sides_exist_and_later_votes_leave_it() {
    let mut q = Task::default();
    // Votes first: two are not enough; the session waits, and the third vote pairs it with
    // the reputation-weighted mean of the three: (2*1 + 1*0 + 1*0.5) / 4 = 0.625.
    assert!(
        q.votes(("p", "i1"), (&[(2.0, 1.0), (1.0, 0.0)], &[]), at(), &LIMITS)
            .pairs
            .is_empty()
    );
    assert!(
        q.completed(
            ("p", "s"),
            &[("i1", "j1", 0.8), ("i1", "j2", 0.3)],
            at(),
            &LIMITS
        )
        .pairs
        .is_empty()
    );
    let third = q.votes(("p", "i1"), (&[(1.0, 0.5)], &[]), at(), &LIMITS);
    assert_eq!(
        pairs(&third),
        [("j1", "i1", 0.8, 0.625), ("j2", "i1", 0.3, 0.625)]
    );
    // A later vote forms nothing and changes nothing: a later session pairs at once with
    // the same score.
    assert!(
        q.votes(("p", "i1"), (&[(4.0, 0.0)], &[]), at(), &LIMITS)
            .pairs
            .is_empty()
    );
    let later = q.completed(("p", "s"), &[("i1", "j3", 0.1)], at(), &LIMITS);
    assert_eq!(pairs(&later), [("j3", "i1", 0.1, 0.625)]);
    assert_eq!(item(&q, "i1").map(|v| v.votes), Some(3));
}

#[test]
fn votes_without_weight_do_not_count_towards_the_score() {
    let mut q = Task::default();
    q.completed(("p", "s"), &[("i", "j", 0.4)], at(), &LIMITS);
    assert!(
        q.votes(("p", "i"), (&[(0.0, 1.0); 3], &[]), at(), &LIMITS)
            .pairs
            .is_empty()
    );
    assert!(
        q.votes(("p", "i"), (&[(1.0, 0.25); 2], &[]), at(), &LIMITS)
            .pairs
            .is_empty()
    );
    let third = q.votes(("p", "i"), (&[(1.0, 0.25), (9.0, 1.0)], &[]), at(), &LIMITS);
    assert_eq!(pairs(&third), [("j", "i", 0.4, 0.25)]);
}

#[test]
fn a_pair_is_the_same_whether_the_session_or_the_votes_come_last() {
    let t = |secs: i64| EventTime::from_epoch_millis(1_795_168_800_000 + secs * 1000).unwrap();
    let votes = [(1.0, 1.0), (1.0, 0.0), (2.0, 1.0), (5.0, 0.0)];
    // Session at 10 s, votes at 20 s and 30 s (the last batch after the score is complete).
    let mut first = Task::default();
    first.completed(("p", "s"), &[("i", "j", 0.7)], t(10), &LIMITS);
    assert!(
        first
            .votes(("p", "i"), (&votes[..2], &[]), t(20), &LIMITS)
            .pairs
            .is_empty()
    );
    let a = first
        .votes(("p", "i"), (&votes[2..], &[]), t(30), &LIMITS)
        .pairs;
    // The votes first, then the session.
    let mut second = Task::default();
    second.votes(("p", "i"), (&votes[..2], &[]), t(20), &LIMITS);
    second.votes(("p", "i"), (&votes[2..], &[]), t(30), &LIMITS);
    let b = second
        .completed(("p", "s"), &[("i", "j", 0.7)], t(10), &LIMITS)
        .pairs;
    // h = (1 + 0 + 2) / 4 over the first three votes; the fourth does not count.
    assert_eq!(a, b);
    assert_eq!((a[0].h, a[0].at), (0.75, t(30)));
}

/// Hand-checked: `[7,"p","i",[{"session":"s1","judge":"j","s":0.5,"at":1795168800000}]]` is 69
/// bytes (12 before the score, 55 of it, 2 after), and each score after the first adds its 55
/// and a comma.
#[test]
fn waiting_bytes_count_the_entry_as_written() {
    let waiting = |session: &str| Waiting {
        session: session.to_owned(),
        judge: "j".to_owned(),
        s: 0.5,
        at: at(),
    };
    let one = [waiting("s1")];
    assert_eq!(waiting_bytes((7, "p", "i"), &one), 69);
    let two = [waiting("s1"), waiting("s2")];
    assert_eq!(waiting_bytes((7, "p", "i"), &two), 69 + 55 + 1);
    // A control character is spelled in six bytes.
    let hostile = [waiting("\u{1}1")];
    assert_eq!(waiting_bytes((7, "p", "i"), &hostile), 69 + 5);
    // Counted from the ids' lengths alone, never fewer.
    for scores in [&one[..], &two, &hostile] {
        let at = (u64::MAX, "\u{1}", "i\"");
        assert!(waiting_bytes_at_most(at, scores) >= waiting_bytes(at, scores));
    }
}

/// `largest_waiting_bytes` bounds an item with one waiting score from above, closely: every id
/// of 256 control characters, the longest place, score and time.
#[test]
fn the_largest_waiting_score_is_bounded_closely() {
    let id = "\u{1}".repeat(256);
    let score = Waiting {
        session: id.clone(),
        judge: id.clone(),
        s: -1.234_567_890_123_456_7e-300,
        at: EventTime::new(253_402_300_799, 999_999_999).unwrap(),
    };
    let bytes = waiting_bytes((u64::MAX, &id, &id), &[score]);
    let bound = largest_waiting_bytes(256);
    assert!(
        bytes <= bound && bytes * 100 >= bound * 95,
        "{bytes} of {bound}"
    );
}

/// Beyond the bytes an item's record has room for, an item's oldest waiting scores are
/// forgotten, as beyond `max_judges`; the newest stays.
#[test]
fn waiting_scores_beyond_their_bytes_are_forgotten_oldest_first() {
    let limits = QualityLimits {
        max_judges: 100,
        max_waiting_bytes: 69 + 2 * 56,
        ..LIMITS
    };
    let mut q = Task::default();
    for session in ["s1", "s2", "s3", "s4"] {
        q.completed(("p", session), &[("i", "j", 0.5)], at(), &limits);
    }
    // Three scores take 69 + 2 · 56 bytes: the first went when the fourth came.
    assert_eq!(q.quality.forgotten(), 1);
    let sessions = |q: &Task| -> Vec<String> {
        let quality = q.get("p").expect("the project is held");
        let waiting = quality.waiting.get("i").expect("the item waits");
        waiting.iter().map(|w| w.session.clone()).collect()
    };
    assert_eq!(sessions(&q), ["s2", "s3", "s4"]);
    // One score longer than the room on its own takes the others' place, and stays.
    let long = "s".repeat(200);
    q.completed(("p", &long), &[("i", "j", 0.5)], at(), &limits);
    assert_eq!(sessions(&q), [long]);
    assert_eq!(q.quality.forgotten(), 4);
}

#[test]
fn items_and_waiting_scores_are_bounded_oldest_first() {
    let mut q = Task::default();
    for item in ["a", "b", "c"] {
        q.votes(("p", item), (&[(1.0, 1.0)], &[]), at(), &LIMITS);
    }
    assert_eq!(q.quality.forgotten(), 0);
    // A fourth item forgets "a"'s votes: its count starts again.
    let fourth = q.votes(("p", "d"), (&[(1.0, 1.0)], &[]), at(), &LIMITS);
    // (By their places: "a" was the first, "d" the fourth.)
    assert_eq!(
        (q.quality.forgotten(), fourth.items.as_slice()),
        (1, [0, 3].as_slice())
    );
    assert!(item(&q, "a").is_none());
    q.votes(("p", "a"), (&[(1.0, 1.0)], &[]), at(), &LIMITS);
    assert_eq!(item(&q, "a").map(|v| v.votes), Some(1));
    // Waiting judge scores are bounded the same way.
    for item in ["x", "y", "z"] {
        q.completed(("p", "s"), &[(item, "j", 0.5)], at(), &LIMITS);
    }
    assert_eq!(q.quality.forgotten(), 2);
    q.completed(("p", "s"), &[("w", "j", 0.5)], at(), &LIMITS);
    // "a", then "b" (when "a" came back), then "x".
    assert_eq!(q.quality.forgotten(), 3);
    // "x" no longer waits: its votes reaching three pair nothing.
    let votes = [(1.0, 1.0); 3];
    assert!(
        q.votes(("p", "x"), (&votes, &[]), at(), &LIMITS)
            .pairs
            .is_empty()
    );
    assert_eq!(
        q.votes(("p", "y"), (&votes, &[]), at(), &LIMITS)
            .pairs
            .len(),
        1
    );
}

#[test]
fn a_task_forgets_its_oldest_item_whatever_its_project() {
    let limits = QualityLimits {
        max_task_items: 3,
        ..LIMITS
    };
    let mut q = Task::default();
    for (project, item) in [("p1", "a"), ("p2", "b"), ("p1", "c")] {
        q.votes((project, item), (&[(1.0, 1.0)], &[]), at(), &limits);
    }
    assert_eq!(q.quality.forgotten(), 0);
    // A vote on a held item takes no place.
    assert_eq!(
        q.votes(("p2", "b"), (&[(1.0, 1.0)], &[]), at(), &limits)
            .items
            .as_slice(),
        [1]
    );
    // p2's new item forgets p1's "a", the task's oldest (place 0), and takes place 3.
    let fourth = q.votes(("p2", "d"), (&[(1.0, 1.0)], &[]), at(), &limits);
    assert_eq!(fourth.items.as_slice(), [0, 3]);
    assert_eq!(q.quality.forgotten(), 1);
    assert_eq!(q.held(), (3, 0));
    assert!(q.quality.item(("p1", "a")).is_none());
    // p1 was not touched: its index keeps the place until its own next change drops it.
    let p1 = &q.get("p1").unwrap().items;
    assert_eq!((p1.len(), p1.held(q.quality.items())), (2, 1));
    let bucket: Vec<(u64, &str, &str)> = q.items_at(0..16).map(|(s, p, i, _)| (s, p, i)).collect();
    assert_eq!(bucket, [(1, "p2", "b"), (2, "p1", "c"), (3, "p2", "d")]);
    assert!(q.consistent());
    q.votes(("p1", "c"), (&[(1.0, 1.0)], &[]), at(), &limits);
    let p1 = &q.get("p1").unwrap().items;
    assert_eq!((p1.len(), p1.held(q.quality.items())), (1, 1));
    assert!(q.consistent());
}

/// An item as a flush's undo finds it, told apart by its count of `votes`.
fn found(votes: u64) -> Found {
    let value = ItemVotes {
        votes,
        ..ItemVotes::default()
    };
    let id = ProjectKey::from(format!("i{votes}"));
    (ProjectKey::from("p"), id, value)
}

#[test]
fn an_undo_finds_the_items_a_flush_changed_or_forgot_as_it_found_them_in_place_order() {
    let mut undo = ItemUndo {
        from: 1_000,
        ..ItemUndo::default()
    };
    // Changed, then forgotten: what the flush found is the value before the change.
    undo.changed(5, || found(5));
    undo.forgot(5, found(55), false);
    // Forgotten oldest first, over several chunks; one out of order; one the flush took.
    let oldest = 10..10 + 2 * GONE_CHUNK as u64 + 7;
    for seq in oldest.clone() {
        undo.forgot(seq, found(seq), false);
    }
    undo.forgot(7, found(7), false);
    undo.forgot(1_000, found(1_000), false);
    let kept = |places: Range<u64>| -> Vec<(u64, u64)> {
        let found = undo.found(places).into_iter();
        found.map(|(seq, (_, _, v))| (seq, v.votes)).collect()
    };
    let mut expected = vec![(5, 5), (7, 7)];
    expected.extend(oldest.clone().map(|seq| (seq, seq)));
    assert_eq!(kept(0..2_000), expected);
    // A bucket across a chunk's end, and one before the first forgotten.
    let across = 10 + GONE_CHUNK as u64 - 3..10 + GONE_CHUNK as u64 + 5;
    assert_eq!(
        kept(across.clone()),
        across.map(|s| (s, s)).collect::<Vec<_>>()
    );
    assert_eq!(kept(0..7), [(5, 5)]);
    assert_eq!(kept(1_000..1_016), []);
    let mut forgotten = vec![5];
    forgotten.extend(oldest);
    forgotten.extend([7, 1_000]);
    assert_eq!(undo.forgotten, forgotten);
}

#[test]
fn an_undo_keeps_the_items_forgotten_from_the_buckets_the_flush_writes_and_drops_the_rest() {
    let mut undo = ItemUndo {
        from: 1_000,
        ..ItemUndo::default()
    };
    // The flush begins writing bucket 3 (the flush before forgot some of it).
    undo.note_written([3 * ITEM_BUCKET + 2]);
    let kept = |undo: &ItemUndo, bucket: u64| -> Vec<u64> {
        let found = undo.found(bucket_places(bucket)).into_iter();
        found
            .map(|(seq, (_, _, v))| v.votes * 1_000 + seq)
            .collect()
    };
    let forget = |undo: &mut ItemUndo, places: Range<u64>| {
        let last = places.end - 1;
        for seq in places {
            undo.forgot(seq, found(seq), seq == last);
        }
    };
    // Bucket 0: an item changed (its bucket is written), then the whole bucket forgotten.
    undo.changed(3, || found(7));
    forget(&mut undo, 0..16);
    // Bucket 1: nothing changed; once it holds no item no restore reads what it held.
    forget(&mut undo, 16..32);
    // Bucket 2: half forgotten, the rest held, which a vote may still change.
    for seq in 32..40 {
        undo.forgot(seq, found(seq), false);
    }
    // Bucket 3: written from the flush's start.
    forget(&mut undo, 48..64);
    let whole = |places: Range<u64>| places.map(|s| s * 1_000 + s).collect::<Vec<_>>();
    let mut bucket_0 = whole(0..16);
    bucket_0[3] = 7_003;
    assert_eq!(kept(&undo, 0), bucket_0);
    assert!(kept(&undo, 1).is_empty());
    assert_eq!(kept(&undo, 2), whole(32..40));
    assert_eq!(kept(&undo, 3), whole(48..64));
    // An item of bucket 2 changes: what it forgot so far stays, and so does the rest.
    undo.changed(40, || found(40));
    forget(&mut undo, 40..48);
    assert_eq!(kept(&undo, 2), whole(32..48));
    let in_order: Vec<u64> = (0..40).chain(48..64).chain(40..48).collect();
    assert_eq!(undo.forgotten, in_order);
}

#[test]
fn a_window_written_before_pairs_had_times_reads_back_oldest_first() {
    let old = r#"{"pairs":[[0.9,0.8],[0.1,0.2]],"kappas":[null,1.0],"disagreeing":true,"drifting":false,"last_event_at":null}"#;
    let w: JudgeWindow = serde_json::from_str(old).unwrap();
    assert_eq!(
        w.pairs,
        [
            TimedPair(EventTime::MIN, 0, 0.9, 0.8),
            TimedPair(EventTime::MIN, 1, 0.1, 0.2)
        ]
    );
    assert!(w.disagreeing);
    let again: JudgeWindow = serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
    assert_eq!(again, w);
}

#[test]
fn a_judge_window_keeps_its_last_pairs_by_time_and_kappa_change_compares_its_halves() {
    let pair = |n: i64, s: f64, h: f64| Pair {
        judge: "j".into(),
        item: format!("i{n}"),
        session: "s".into(),
        s,
        h,
        at: EventTime::new(1_000 + n, 0).unwrap(),
    };
    // At times 0..4 four agreeing pairs (kappa 1), at 4..6 two inverted ones.
    let agreeing = [(0.9, 0.8), (0.1, 0.2), (0.8, 0.9), (0.2, 0.1)];
    let mut pairs: Vec<Pair> = agreeing
        .iter()
        .enumerate()
        .map(|(n, &(s, h))| pair(n as i64, s, h))
        .collect();
    pairs.push(pair(4, 0.9, 0.2));
    pairs.push(pair(5, 0.1, 0.8));
    let mut q = ProjectQuality::default();
    let mut last = None;
    for (n, p) in pairs.iter().take(4).enumerate() {
        last = Some(q.add(p, &LIMITS, &mut Vec::new()));
        if n < 3 {
            assert_eq!(last.as_ref().unwrap().kappa_change, None, "window not full");
        }
    }
    let last = last.unwrap();
    assert_eq!((last.agreement.pairs, last.agreement.kappa), (4, Some(1.0)));
    assert_eq!(last.kappa_change, Some(0.0));
    // The window of 4 is now times 2..6: the older half agrees (kappa 1), the newer half
    // inverts (kappa -1): a change of -2.
    let mut last = None;
    for p in &pairs[4..] {
        last = Some(q.add(p, &LIMITS, &mut Vec::new()));
    }
    let last = last.unwrap();
    assert_eq!(last.agreement.pairs, 4);
    assert_eq!(last.kappa_change, Some(-2.0));
    let window = &q.judges.get("j").unwrap().pairs;
    let times: Vec<i64> = window.iter().map(|p| p.0.parts().0 - 1_000).collect();
    assert_eq!(times, [2, 3, 4, 5]);
    // Every order of the six pairs leaves the same window and figures; a pair older than a
    // full window never enters it.
    for rotation in 0..pairs.len() {
        let mut order = pairs.clone();
        order.rotate_left(rotation);
        order.reverse();
        let mut other = ProjectQuality::default();
        let mut standing = None;
        for p in &order {
            standing = Some(other.add(p, &LIMITS, &mut Vec::new()));
        }
        let w = other.judges.get("j").unwrap();
        assert_eq!(&w.pairs, window);
        assert_eq!(w.kappa_change(LIMITS.window), Some(-2.0));
        assert_eq!(standing.unwrap().agreement.pairs, 4);
    }
}

proptest! {
    /// Whatever arrives in whatever order, in whichever projects: every pair is in [0, 1]
    /// and forms once, each project and the task stay within their bounds, and the task's
    /// places agree with its projects'.
    #[test]
    fn pairs_form_once_and_the_state_stays_bounded(
        steps in prop::collection::vec(
            (any::<bool>(), 0..3usize, 0..6usize, 0.0..=1.0f64, 0.0..=5.0f64), 0..80),
    ) {
        let limits = QualityLimits { max_task_items: 5, ..LIMITS };
        let mut q = Task::default();
        let mut scored = 0;
        let mut formed = 0;
        for (i, (is_vote, project, item, value, reputation)) in steps.into_iter().enumerate() {
            let (project, item) = (format!("p{project}"), format!("i{item}"));
            let observed = if is_vote {
                q.votes((&project, &item), (&[(reputation, value)], &[]), at(), &limits)
            } else {
                scored += 1;
                let judge = format!("j{i}");
                let scores = [(item.as_str(), judge.as_str(), value)];
                q.completed((&project, "s"), &scores, at(), &limits)
            };
            for p in &observed.pairs {
                prop_assert!((0.0..=1.0).contains(&p.s) && (0.0..=1.0).contains(&p.h));
                let standing = q.project(&project).add(p, &limits, &mut Vec::new());
                prop_assert!(standing.agreement.pairs <= limits.window);
            }
            formed += observed.pairs.len();
            for (_, p) in q.iter() {
                prop_assert!(p.items.len() <= limits.max_pending_items);
                prop_assert!(p.waiting.len() <= limits.max_pending_items);
                prop_assert!(p.judges.len() <= limits.max_judges);
            }
            let (items, waits) = q.held();
            prop_assert!(items <= limits.max_task_items && waits <= limits.max_task_items);
            prop_assert!(q.consistent());
        }
        // Each judge score pairs at most once (every judge here scores once).
        prop_assert!(formed <= scored);
    }
}

proptest! {
    /// Whatever votes, verdicts and judge scores come, with bounds they reach, a checkpoint's
    /// fit of a project's tags is the fit of its held items (without the latest times) every
    /// time: a review that changes drops its place's tag, a forgotten item's tag goes with its
    /// place, and every place still tagged is tagged with its item's pattern.
    #[test]
    fn a_checkpoints_fit_of_the_tags_is_the_fit_of_the_held_items(
        steps in prop::collection::vec(
            (any::<bool>(), 0..3usize, 0..6usize, prop::collection::vec((0..4u8, any::<bool>(), 1..3u8), 0..3), 0.0..=1.0f64, any::<bool>()),
            0..80),
    ) {
        let limits = QualityLimits {
            max_task_items: 5,
            reviewers: Some(ReviewerLimits { max_verdicts: 2, min_items: 1 }),
            ..LIMITS
        };
        let mut q = Task::default();
        for (i, (is_vote, project, item, verdicts, value, fit)) in steps.into_iter().enumerate() {
            let (project, item) = (format!("p{project}"), format!("i{item}"));
            if is_vote {
                let verdicts: Vec<Verdict> = verdicts
                    .iter()
                    .map(|&(who, pass, w)| Verdict {
                        reviewer: format!("r{who}").into(),
                        pass,
                        weight: f64::from(w),
                        at: at(),
                    })
                    .collect();
                q.votes((&project, &item), (&[(1.0, value)], &verdicts), at(), &limits);
            } else {
                let judge = format!("j{i}");
                let scores = [(item.as_str(), judge.as_str(), value)];
                q.completed((&project, "s"), &scores, at(), &limits);
            }
            prop_assert!(q.consistent());
            if fit {
                let task = &q.quality;
                for p in q.projects.values_mut() {
                    let mut expected = p.fit_reviewers(task, 3);
                    for f in expected.reviewers.values_mut() {
                        f.last_event_at = None;
                    }
                    prop_assert_eq!(p.checkpoint_fit(task, 3), expected);
                    let book = p.reviewers.book().map_or(0, |b| b.len());
                    prop_assert!(book <= 2 * p.items.len() + 16);
                }
                prop_assert!(q.consistent());
            }
        }
    }
}

/// Projects that stop changing keep the places the task forgot only until the task's sweep:
/// however many projects vote once and go quiet, their indexes hold at most twice the task's
/// bound.
#[test]
fn quiet_projects_hold_at_most_twice_the_task_bound_of_places() {
    let limits = QualityLimits {
        max_task_items: 8,
        ..LIMITS
    };
    let mut q = Task::default();
    let mut most = 0;
    for i in 0..500 {
        let project = format!("p{i}");
        q.votes((&project, "a"), (&[(1.0, 1.0)], &[]), at(), &limits);
        let places: usize = q.projects.values().map(|p| p.items.len()).sum();
        most = most.max(places);
        assert!(q.consistent());
    }
    assert_eq!(q.held(), (8, 0));
    assert!(most <= 16, "{most} places held");
    assert!(most > 8, "the task's forgetting is lazy: {most}");
}

/// An item's mark is XXH3 of its project and id joined by `0xFF`, as the streaming hasher made
/// it before: the checkpoints a restored or replayed project draws stay where they were, for ids
/// of usual length (hashed on the stack) and long ones.
#[test]
fn an_items_mark_is_xxh3_of_its_joined_ids() {
    let long = "x".repeat(200);
    // Joined, 96 bytes fit on the stack and 97 do not.
    let (fits, spills) = ("x".repeat(95), "x".repeat(96));
    for (project, item) in [
        ("p", "i"),
        ("proj-000123", "trace-00000123"),
        (&long, "y"),
        (&fits, ""),
        ("", &spills),
        ("", ""),
    ] {
        let mut streaming = xxhash_rust::xxh3::Xxh3::new();
        streaming.update(project.as_bytes());
        streaming.update(&[0xFF]);
        streaming.update(item.as_bytes());
        assert_eq!(
            item_mark((project, item)),
            streaming.digest(),
            "{project:?}, {item:?}"
        );
    }
    assert_ne!(item_mark(("ab", "c")), item_mark(("a", "bc")));
}
