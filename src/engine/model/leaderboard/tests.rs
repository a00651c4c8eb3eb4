use super::*;

fn ranks(list: &[(&str, usize)]) -> Vec<(String, usize)> {
    list.iter().map(|(m, r)| ((*m).to_owned(), *r)).collect()
}

const DAY0: BlockId = BlockId { day: 0, slot: 0 };

#[test]
fn a_block_sums_its_sessions_pairs_with_ties_half() {
    let mut r = Ranking::default();
    r.add(DAY0, &ranks(&[("b", 1), ("a", 2), ("c", 2)]), 10);
    r.add(DAY0, &ranks(&[("a", 1), ("b", 2)]), 10);
    assert_eq!(r.models, ["b", "a", "c"]);
    // b (0) beat a (1) then lost; b beat c (2); a and c tied.
    assert_eq!(
        r.blocks[&DAY0],
        [
            BlockPair(0, 1, 1.0, 2.0),
            BlockPair(0, 2, 1.0, 1.0),
            BlockPair(1, 2, 0.5, 1.0)
        ]
    );
    // Two candidates of one model are no comparison.
    r.add(DAY0, &ranks(&[("a", 1), ("a", 2)]), 10);
    assert_eq!(r.blocks[&DAY0].len(), 3);
}

#[test]
fn a_full_category_leaves_new_models_out() {
    let mut r = Ranking::default();
    r.add(DAY0, &ranks(&[("a", 1), ("b", 2), ("c", 3)]), 2);
    assert_eq!(r.models, ["a", "b"]);
    assert_eq!(r.blocks[&DAY0], [BlockPair(0, 1, 1.0, 1.0)]);
}

#[test]
fn expired_days_drop_their_blocks_and_models_are_renumbered() {
    let mut r = Ranking::default();
    let day = |d| BlockId { day: d, slot: 3 };
    r.add(day(1), &ranks(&[("old", 1), ("a", 2)]), 10);
    r.add(day(2), &ranks(&[("a", 1), ("b", 2)]), 10);
    assert_eq!(r.expire(1), Vec::<BlockId>::new());
    // Day 1 goes; "old" is in no block left, so "a" and "b" become 0 and 1 and day 2's
    // block is rewritten.
    assert_eq!(r.expire(2), [day(1), day(2)]);
    assert_eq!(r.models, ["a", "b"]);
    assert_eq!(r.blocks[&day(2)], [BlockPair(0, 1, 1.0, 1.0)]);
}

#[test]
fn summed_blocks_fit_as_their_sessions_do() {
    // m-a beats m-b in two sessions of three: the same ratings whether the sessions share
    // a block or not, and those of the three comparisons fitted one by one.
    let one = |score| Games {
        a: 0,
        b: 1,
        score,
        games: 1.0,
    };
    let direct = bradley_terry::fit(2, [one(1.0), one(1.0), one(0.0)].iter()).ratings;
    for slots in [[0, 0, 0], [0, 1, 2]] {
        let mut r = Ranking::default();
        for (slot, first) in slots.into_iter().zip(["m-a", "m-a", "m-b"]) {
            let other = if first == "m-a" { "m-b" } else { "m-a" };
            r.add(
                BlockId { day: 0, slot },
                &ranks(&[(first, 1), (other, 2)]),
                10,
            );
        }
        r.fit(EventTime::new(0, 0).unwrap(), 50);
        let a = &r.fitted["m-a"];
        assert!((a.rating.unwrap() - direct[0].unwrap()).abs() < 1e-9);
        assert_eq!((a.rank, a.comparisons), (Some(1), 3.0));
        assert!((r.fitted["m-b"].rating.unwrap() - direct[1].unwrap()).abs() < 1e-9);
        assert!(direct[0].unwrap() > 1000.0 + 50.0);
    }
}

/// The block bootstrap's intervals cover known strengths about 95% of the time: 40
/// tournaments of 600 two-model sessions over ten days (so 160 blocks), six models of known
/// ratings, the default 200 resamples.
#[test]
fn block_intervals_cover_known_strengths_about_95_percent_of_the_time() {
    use rand::{Rng, SeedableRng};
    let truth = [1200.0, 1100.0, 1050.0, 1000.0, 950.0, 700.0];
    let mean = truth.iter().sum::<f64>() / truth.len() as f64;
    let truth: Vec<f64> = truth.iter().map(|r| r - mean + 1000.0).collect();
    let p = |r: f64| 10f64.powf((r - 1000.0) / 400.0);
    let names: Vec<String> = (0..truth.len()).map(|i| format!("m{i}")).collect();
    let (mut inside, mut total) = (0, 0);
    for run in 0..40u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(run);
        let mut r = Ranking::default();
        for s in 0..600u64 {
            let a = rng.random_range(0..truth.len());
            let b = (a + rng.random_range(1..truth.len())) % truth.len();
            let a_wins = rng.random::<f64>() < p(truth[a]) / (p(truth[a]) + p(truth[b]));
            let (first, second) = if a_wins { (a, b) } else { (b, a) };
            let session = format!("r{run}-s{s}");
            let block = BlockId {
                day: (s % 10) as i64,
                slot: (xxhash_rust::xxh3::xxh3_64(session.as_bytes()) % BLOCK_SLOTS) as u8,
            };
            r.add(
                block,
                &ranks(&[(&names[first], 1), (&names[second], 2)]),
                10,
            );
        }
        r.fit(EventTime::new(0, 0).unwrap(), 200);
        for (name, t) in names.iter().zip(&truth) {
            let (low, high) = r.fitted[name].interval.expect("an interval");
            total += 1;
            inside += usize::from(low.is_none_or(|l| l <= *t) && high.is_none_or(|h| *t <= h));
        }
    }
    let coverage = inside as f64 / total as f64;
    println!("coverage of 95% block-bootstrap intervals: {coverage:.3} ({inside} of {total})");
    assert!((0.88..=0.995).contains(&coverage), "coverage {coverage}");
}

#[test]
fn a_row_written_by_entry_reads_back_by_day() {
    let entry = |secs: i64, borda: Option<f64>, win: bool| Entry {
        at: EventTime::new(secs, 0).unwrap(),
        borda,
        mean_z: None,
        mean_score: Some(0.5),
        win,
        votes: 2,
    };
    let old = vec![
        entry(86_400 + 5, Some(1.0), true),
        entry(86_400 + 9, None, false),
        entry(2 * 86_400, Some(0.0), false),
    ];
    let text = serde_json::to_string(&old).unwrap();
    let row = serde_json::from_str::<StoredRow>(&text).unwrap().into_row();
    let days: Vec<(i64, u64, u64, u64, Sum)> = row
        .iter()
        .map(|d| (d.day, d.sessions, d.wins, d.votes, d.borda))
        .collect();
    let sum = |total, n| Sum { total, n };
    assert_eq!(days, [(1, 2, 1, 4, sum(1.0, 1)), (2, 1, 0, 2, sum(0.0, 1))]);
    assert_eq!(row[0].last_at, EventTime::new(86_400 + 9, 0).unwrap());
    // And a row by day reads back as itself.
    let again = serde_json::to_string(&row).unwrap();
    assert_eq!(
        serde_json::from_str::<StoredRow>(&again)
            .unwrap()
            .into_row(),
        row
    );
}

#[test]
fn block_ids_read_back_as_written() {
    for id in [
        DAY0,
        BlockId { day: -3, slot: 15 },
        BlockId {
            day: 20417,
            slot: 7,
        },
    ] {
        assert_eq!(id.to_string().parse(), Ok(id));
    }
    for bad in ["", "1", "1.", "a.1", "1.256"] {
        assert_eq!(bad.parse::<BlockId>(), Err(()), "{bad}");
    }
}
