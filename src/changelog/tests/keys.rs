//! How keys and values are spelled, and changelogs written by earlier versions.

use super::*;

#[test]
fn keys_are_json_arrays_that_survive_slashes() {
    let unit = Unit {
        kind: UnitKind::Input(InputTopic::JudgeScores),
        partition: 3,
    };
    let state = PartitionState::default();
    let recs = records(
        unit,
        &state,
        &[Change::Board {
            project: "p/1".into(),
            category: "".into(),
            model: "openai/gpt-4o".into(),
        }],
    );
    assert_eq!(recs[0].key, r#"["j",3,"board","p/1","","openai/gpt-4o"]"#);
    // Keys with characters JSON escapes read back as the same ids.
    let odd = "p\"1\\\u{1}é";
    let key = &records(
        unit,
        &state,
        &[Change::Audit {
            project: odd.into(),
        }],
    )[0]
    .key;
    let parts: Vec<serde_json::Value> = serde_json::from_str(key).expect("json key");
    assert_eq!(parts[3], serde_json::Value::from(odd));
    assert_eq!(recs[0].value, None);
    assert_eq!(
        offset_record(unit, 7).value.as_deref(),
        Some(&br#"{"offset":7}"#[..])
    );
    assert_eq!(
        offset_record(unit, -2).value.as_deref(),
        Some(&br#"{"offset":-2}"#[..])
    );
}

#[test]
fn fingerprints_and_buckets_are_spelled_as_documented() {
    for fp in [
        0u128,
        1,
        0xdead_beef,
        u128::MAX,
        0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
    ] {
        let spelled = serde_json::to_string(&super::Hex(fp)).unwrap();
        assert_eq!(spelled, format!("\"{fp:032x}\""));
        assert_eq!(u128::from_str_radix(spelled.trim_matches('"'), 16), Ok(fp));
    }
    let mut bucket = Vec::new();
    assert!(super::push_bucket(
        &mut bucket,
        [(3, 0xab), (40, u128::MAX)].into_iter()
    ));
    assert_eq!(
        String::from_utf8_lossy(&bucket),
        format!(r#"[[3,"{:032x}"],[40,"{:032x}"]]"#, 0xab, u128::MAX)
    );
    // Consecutive ids are one run, their digits one after the other.
    bucket.clear();
    assert!(super::push_bucket(
        &mut bucket,
        [(5, 1), (6, 2), (7, 3), (9, 4)].into_iter()
    ));
    assert_eq!(
        String::from_utf8_lossy(&bucket),
        format!(r#"[[5,"{:032x}{:032x}{:032x}"],[9,"{:032x}"]]"#, 1, 2, 3, 4)
    );
    // Read back as runs, or as one id per entry (a changelog written before), both alike.
    let read = |first: u64, hex: &str| super::IdRun::ids(first, hex).collect::<Result<Vec<_>, _>>();
    assert_eq!(
        read(5, &format!("{:032x}{:032x}{:032x}", 1, 2, 3)),
        Ok(vec![(5, 1), (6, 2), (7, 3)])
    );
    assert_eq!(
        read(40, &format!("{:032x}", u128::MAX)),
        Ok(vec![(40, u128::MAX)])
    );
    for bad in ["", "ab", &"0".repeat(33), &"g".repeat(32), &"é".repeat(16)] {
        assert!(read(0, bad).is_err(), "{bad:?}");
    }
    let mut empty = Vec::new();
    assert!(!super::push_bucket(&mut empty, std::iter::empty()));
    assert!(empty.is_empty());
    let negative = Unit {
        kind: UnitKind::Input(InputTopic::Votes),
        partition: -1,
    };
    assert_eq!(offset_record(negative, 1).key, r#"["v",-1,"offset"]"#);
}

#[test]
fn a_changelog_written_before_origins_and_project_watermarks_restores() {
    // `jury.state` as earlier versions wrote it: the book with the partition's watermark, no
    // origins, no project watermarks. Read on with `by_key`, the records it holds are skipped by
    // its offset; its sessions time out by their project's next event.
    let unit = Unit {
        kind: UnitKind::Input(InputTopic::JudgeScores),
        partition: 2,
    };
    let mut r = Restorer::new(unit);
    r.accept(
        br#"["j",2,"book"]"#,
        Some(br#"{"watermark":"2026-11-20T10:00:00Z","next_seq":7}"#),
    );
    r.accept(br#"["j",2,"offset"]"#, Some(br#"{"offset":41}"#));
    let (state, offset) = r.finish().expect("an old changelog restores");
    assert_eq!(offset, Some(41));
    assert_eq!(state.sessions.next_seq(), 7);
    assert!(state.origins.is_empty());
}

#[test]
fn every_kind_of_key_is_written_and_read_back() {
    let unit = Unit {
        kind: UnitKind::Input(InputTopic::JudgeScores),
        partition: 3,
    };
    let mut kinds = Vec::new();
    for (slot, text) in [
        (Slot::Offset(()), r#"["j",3,"offset"]"#),
        (Slot::Origins(()), r#"["j",3,"origins"]"#),
        (Slot::Watermark("p"), r#"["j",3,"watermark","p"]"#),
        (Slot::Ranking(("p", "c")), r#"["j",3,"ranking","p","c"]"#),
        (
            Slot::Block(("p", "c", BlockId { day: -2, slot: 15 })),
            r#"["j",3,"block","p","c","-2.15"]"#,
        ),
        (Slot::Project("p/1"), r#"["j",3,"project","p/1"]"#),
        (Slot::Seen(("p", 12)), r#"["j",3,"seen","p","12"]"#),
        (Slot::Ids(("p", 12)), r#"["j",3,"ids","p","12"]"#),
        (
            Slot::Session(("p", "s\"1")),
            r#"["j",3,"session","p","s\"1"]"#,
        ),
        (
            Slot::Completed(("p", 0xab)),
            r#"["j",3,"completed","p","000000000000000000000000000000ab"]"#,
        ),
        (Slot::Audit("p"), r#"["j",3,"audit","p"]"#),
        (
            Slot::Consensus(("p", "s/1")),
            r#"["j",3,"consensus","p","s/1"]"#,
        ),
        (Slot::Board(("p", "", "m")), r#"["j",3,"board","p","","m"]"#),
        (Slot::Items(6), r#"["j",3,"items","6"]"#),
        (Slot::Waits(0), r#"["j",3,"waits","0"]"#),
        (Slot::Ballots(("p", 2)), r#"["j",3,"ballots","p","2"]"#),
        (
            Slot::Judge(("p", "openai/j")),
            r#"["j",3,"judge","p","openai/j"]"#,
        ),
        (Slot::Recent(("p", 17)), r#"["j",3,"recent","p","17"]"#),
        (Slot::Forgotten("p"), r#"["j",3,"forgotten","p"]"#),
        (Slot::LeftOut("p"), r#"["j",3,"left-out","p"]"#),
        (
            Slot::Reviewer(("p", "u-7")),
            r#"["j",3,"reviewer","p","u-7"]"#,
        ),
        (Slot::Unmatched("p"), r#"["j",3,"unmatched","p"]"#),
        (Slot::ItemsForgotten(()), r#"["j",3,"items-forgotten"]"#),
        (Slot::Book(()), r#"["j",3,"book"]"#),
        (Slot::Redo(2), r#"["j",3,"redo","2"]"#),
    ] {
        kinds.push(slot.kind());
        assert_eq!(unit.key(slot), text);
        let parts: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
        // Compared as written out: a slot read borrows from the key it was read from.
        let read = Slot::from_parts(&parts[2..]).map(|s| format!("{s:?}"));
        assert_eq!(read, Ok(format!("{slot:?}")), "{text}");
    }
    // Every registered kind is in the table above, once: no two stores share a name.
    kinds.sort_unstable();
    let mut registered = Slot::KINDS.to_vec();
    registered.sort_unstable();
    assert_eq!(kinds, registered);
    registered.dedup();
    assert_eq!(registered.len(), Slot::KINDS.len());
    let parts: Vec<serde_json::Value> = serde_json::from_str(r#"["j",3,"seen","p","x"]"#).unwrap();
    assert_eq!(
        Slot::from_parts(&parts[2..]),
        Err("an index is not a number")
    );
    let parts: Vec<serde_json::Value> = serde_json::from_str(r#"["j",3,"nope"]"#).unwrap();
    assert_eq!(Slot::from_parts(&parts[2..]), Err("unknown kind of state"));
    for (text, reason) in [
        (
            r#"["j",3,"project"]"#,
            "the wrong number of ids for its kind",
        ),
        (
            r#"["j",3,"audit","p","q"]"#,
            "the wrong number of ids for its kind",
        ),
        (r#"["j",3,"audit",7]"#, "an id is not a string"),
        (r#"["j",3,"completed","p","xyz"]"#, "fingerprint is not hex"),
        (r#"["j",3,"block","p","c","monday"]"#, "a bad block"),
    ] {
        let parts: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
        assert_eq!(Slot::from_parts(&parts[2..]), Err(reason), "{text}");
    }
}

#[test]
fn forgotten_places_are_written_short_and_read_in_both_forms() {
    let places = [7, 8, 9, 3, 10, 11, 4];
    let runs = stores::place_runs(&places);
    assert_eq!(runs, [(7, 9), (3, 3), (10, 11), (4, 4)]);
    assert_eq!(
        serde_json::to_string(&runs).unwrap(),
        "[[7,9],[3,3],[10,11],[4,4]]"
    );
    let read = |text: &str| serde_json::from_str::<stores::StoredPlaces>(text).map(|p| p.places());
    assert_eq!(
        read("[[7,9],[3,3],[10,11],[4,4]]").ok(),
        Some(places.to_vec())
    );
    assert_eq!(read("[7,8,9,3,10,11,4]").ok(), Some(places.to_vec()));
    assert_eq!(
        stores::place_runs(&[u64::MAX, 0]),
        [(u64::MAX, u64::MAX), (0, 0)]
    );
    assert!(read(r#"["7"]"#).is_err());
}

/// A project's record of the layout before (`forgotten`: its counts of items forgotten, verdicts
/// left out and verdicts forgotten, as an array or an object) restores its count of verdicts
/// left out, which the next flush writes as laid out now (`left-out`) and then deletes the old
/// record; the counts of what was forgotten are no longer kept per project.
#[test]
fn a_project_count_of_the_layout_before_is_read_and_laid_out_again() {
    let unit = Unit::projects(1);
    for (old, left_out) in [
        (&br#"[3,1,5]"#[..], 1),
        (br#"{"forgotten":3,"left_out":2,"verdicts":5}"#, 2),
        (br#"{"forgotten":3}"#, 0),
    ] {
        let mut r = Restorer::new(unit);
        r.accept(br#"["p",1,"offset"]"#, Some(br#"{"offset":4}"#));
        r.accept(br#"["p",1,"forgotten","proj-1"]"#, Some(old));
        let (mut state, _) = r.finish().expect("the layout before restores");
        let q = state.quality("proj-1").expect("restored");
        assert_eq!(q.reviewers.left_out, left_out);
        let changes = state.journal.take().unwrap_or_default();
        let written: Vec<(String, Option<Vec<u8>>)> = records(unit, &state, &changes)
            .into_iter()
            .map(|r| (r.key, r.value))
            .filter(|(k, _)| k.contains("proj-1"))
            .collect();
        let laid_out = (left_out > 0).then(|| left_out.to_string().into_bytes());
        assert_eq!(
            written,
            [
                (r#"["p",1,"left-out","proj-1"]"#.to_owned(), laid_out),
                (r#"["p",1,"forgotten","proj-1"]"#.to_owned(), None),
            ]
        );
    }
}

#[test]
fn a_record_this_version_cannot_read_stops_the_restore_saying_why() {
    let unit = Unit::projects(1);
    let unreadable: [(&[u8], &[u8], &str); 5] = [
        // A kind of state a newer version writes.
        (
            br#"["p",1,"sketch","proj-1"]"#,
            b"{}",
            "unknown kind of state",
        ),
        // A known kind with the wrong ids.
        (
            br#"["p",1,"session","proj-1"]"#,
            b"{}",
            "the wrong number of ids",
        ),
        // A known key with a value of another form.
        (
            br#"["p",1,"book"]"#,
            br#"{"next":"seven"}"#,
            "missing field `next_seq`",
        ),
        // An item bucket cut short: a MessagePack array of three holding one nil.
        (
            br#"["p",1,"items","3"]"#,
            b"\x93\xc0",
            r#"changelog value of ["p",1,"items","3"]"#,
        ),
        // A flush's redo record whose first chunk is not one.
        (
            br#"["p",1,"redo","0"]"#,
            b"{}",
            r#"changelog value of ["p",1,"redo","0"]"#,
        ),
    ];
    for (key, value, reason) in unreadable {
        let mut r = Restorer::new(unit);
        r.accept(br#"["p",1,"offset"]"#, Some(br#"{"offset":4}"#));
        r.accept(key, Some(value));
        let error = r
            .finish()
            .expect_err("an unreadable record is refused")
            .to_string();
        assert!(error.contains(reason), "{error}");
    }
}

#[test]
fn item_places_read_alike_from_the_bucket_or_whole() {
    // Bucket 3 holds places 48..64: written now as 0..16 from its first, before as the
    // places themselves; in MessagePack now, in JSON before.
    let restore = |value: &[u8]| {
        let unit = Unit::projects(1);
        let mut r = Restorer::new(unit);
        r.accept(br#"["p",1,"offset"]"#, Some(br#"{"offset":9}"#));
        r.accept(br#"["p",1,"items","3"]"#, Some(value));
        let (state, _) = r.finish().expect("restores");
        let items: Vec<(u64, String, String)> = state
            .quality
            .items_at(0..u64::MAX)
            .map(|(seq, p, i, _)| (seq, p.to_owned(), i.to_owned()))
            .collect();
        items
    };
    let now = restore(br#"{"at":9,"from":48,"items":[[2,"p","i",[0.5,1.0,1,null]],[15,"p","j",[1.0,1.0,1,null]]]}"#);
    // As written now: MessagePack, the bucket an array.
    let item = |n: u64, id| (n, "p", id, (0.5, 1.0, 1u64, None::<i64>));
    let packed = rmp_serde::to_vec(&(Some(9i64), 48u64, [item(2, "i"), item(15, "j")]));
    let packed = restore(&packed.expect("serializes"));
    let before = restore(br#"{"at":9,"from":48,"items":[[50,"p","i",[0.5,1.0,1,null]],[63,"p","j",[1.0,1.0,1,null]]]}"#);
    let expected = vec![
        (50, "p".to_owned(), "i".to_owned()),
        (63, "p".to_owned(), "j".to_owned()),
    ];
    assert_eq!(now, expected);
    assert_eq!(before, expected);
    assert_eq!(packed, expected);
}

proptest! {
    /// Any ids, however they are spelled (quotes, slashes, escapes, any number), make a key
    /// that reads back as the same slot.
    #[test]
    fn any_ids_make_a_key_that_reads_back(
        project in ".{0,12}",
        other in ".{0,12}",
        n in any::<u64>(),
        fingerprint in any::<u128>(),
    ) {
        let unit = Unit::projects(7);
        let slots = [
            Slot::Project(&project),
            Slot::Session((&project, &other)),
            Slot::Ids((&project, n)),
            Slot::Completed((&project, fingerprint)),
            Slot::Board((&project, &other, &project)),
            Slot::Items(n),
        ];
        for slot in slots {
            let key = unit.key(slot);
            let parts: Vec<serde_json::Value> = serde_json::from_str(&key).expect("a JSON array");
            prop_assert_eq!(&parts[..2], &[serde_json::json!("p"), serde_json::json!(7)]);
            let read = Slot::from_parts(&parts[2..]).map(|s| format!("{s:?}"));
            prop_assert_eq!(read, Ok(format!("{slot:?}")));
        }
    }
}
