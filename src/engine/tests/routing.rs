//! Which project a record goes to ([`Engine::project_of`], read by the forwarding stage): the
//! project the contract reader reads, whenever that reader accepts the record.

use super::super::contract::fields::Fields;
use super::super::contract::json;
use super::super::contract::vote::VoteBatch;
use super::*;

/// The project of a `jury.votes` payload by the contract reader, or its rejection's code.
fn contract_project(engine: &Engine, payload: &[u8]) -> Result<String, ErrorCode> {
    let doc = json::parse(payload).map_err(|e| parse_rejection(e).code)?;
    let batch = VoteBatch::from_json(&doc, engine.vote_limits()).map_err(|r| r.code)?;
    Ok(batch.project_id.to_owned())
}

/// The project of a payload by the contract's reader of a project alone (every member read,
/// a repeated one rejected), or its rejection's code.
fn contract_id(engine: &Engine, payload: &[u8]) -> Result<ProjectKey, ErrorCode> {
    let max = engine.settings.limits.max_id_bytes;
    let doc = json::parse(payload).map_err(|e| parse_rejection(e).code)?;
    let fields = Fields::of(&doc, "", &[], false).map_err(|r| r.code)?;
    let id = fields.id("project_id", max).map_err(|r| r.code)?;
    Ok(ProjectKey::from(id))
}

fn routed(engine: &Engine, topic: &str, payload: &str) -> Result<ProjectKey, ErrorCode> {
    engine
        .project_of(&rec(topic, Some(payload.as_bytes())))
        .map_err(|r| r.code)
}

#[test]
fn a_record_goes_to_the_project_it_names() {
    let e = engine();
    let batch = votes(
        "e1",
        "2026-11-20T10:00:00Z",
        r#"{"voter_id": "u", "value": 1}"#,
    );
    assert_eq!(routed(&e, "jury.votes", &batch), Ok("proj-42".into()));
    let ballot = ballot("b1", "s1", 0, "judge-a", r#", "scores": {"c": 0.5}"#);
    assert_eq!(
        routed(&e, "jury.judge-scores", &ballot),
        Ok("proj-42".into())
    );
    // Escaped, the same project as spelt plain.
    let escaped = r#"{"event_id": "e1", "project_id": "pr\u006fj-42", "votes": []}"#;
    assert_eq!(routed(&e, "jury.votes", escaped), Ok("proj-42".into()));
}

#[test]
fn a_record_with_a_project_and_faults_elsewhere_goes_to_its_project() {
    // The contract reader rejects each of these, where the project's state is.
    let e = engine();
    for payload in [
        r#"{"project_id": "proj-42", "votes": "none"}"#,
        r#"{"event_id": "e1", "project_id": "proj-42", "votes": [], "votes": []}"#,
        r#"{"event_id": "e1", "project_id": "proj-42", "colour": "red", "votes": [{}]}"#,
    ] {
        assert_eq!(routed(&e, "jury.votes", payload), Ok("proj-42".into()));
        assert!(
            contract_project(&e, payload.as_bytes()).is_err(),
            "{payload}"
        );
    }
}

#[test]
fn a_record_without_a_readable_project_is_rejected_as_the_contract_rejects_it() {
    let e = engine();
    let long = "p".repeat(e.settings.limits.max_id_bytes + 1);
    let too_long = format!(r#"{{"event_id": "e1", "project_id": "{long}", "votes": []}}"#);
    for (payload, code) in [
        (
            r#"{"event_id": "e1", "votes": []}"#,
            ErrorCode::MissingField,
        ),
        (
            r#"{"event_id": "e1", "project_id": 42}"#,
            ErrorCode::WrongType,
        ),
        (
            r#"{"event_id": "e1", "project_id": ""}"#,
            ErrorCode::EmptyField,
        ),
        (too_long.as_str(), ErrorCode::IdTooLong),
        (
            r#"{"event_id": "e1", "project_id": "a", "project_id": "b"}"#,
            ErrorCode::DuplicateField,
        ),
        (r#"{"project_id": "proj-42""#, ErrorCode::InvalidJson),
        (r#"{"project_id": "proj-42"} x"#, ErrorCode::InvalidJson),
        (r#"["proj-42"]"#, ErrorCode::NotObject),
    ] {
        assert_eq!(routed(&e, "jury.votes", payload), Err(code), "{payload}");
        assert_eq!(
            contract_project(&e, payload.as_bytes()),
            Err(code),
            "{payload}"
        );
    }
    let not_utf8 = b"{\"project_id\": \"proj-42\", \"event_id\": \"\xff\"}";
    let record = rec("jury.votes", Some(not_utf8));
    let code = e.project_of(&record).map_err(|r| r.code);
    assert_eq!(code, Err(ErrorCode::InvalidJson));
    assert_eq!(contract_project(&e, not_utf8), code.map(|p| p.to_string()));
}

/// A `jury.votes` payload from members that may be missing, mistyped, escaped, repeated,
/// unknown, in any order, with some bytes after the object or a string that is not UTF-8.
fn arb_any_batch() -> impl Strategy<Value = Vec<u8>> {
    let project = prop_oneof![
        Just(Some(r#""proj-42""#.to_owned())),
        Just(Some(r#""pr\u006fj-7""#.to_owned())),
        Just(Some(r#""""#.to_owned())),
        Just(Some("42".to_owned())),
        Just(Some(format!(r#""{}""#, "p".repeat(300)))),
        Just(None),
    ];
    let vote = prop_oneof![
        Just(r#"{"voter_id": "u", "verdict": "pass"}"#),
        Just(r#"{"voter_id": "u", "value": 7}"#),
        Just(r#"{"voter_id": "u", "value": 1e999}"#),
        Just(r#"{"voter": "u"}"#),
        Just(r#"["u", "pass", null, null]"#),
    ];
    let members = (
        project,
        any::<bool>(),
        prop::option::of(prop::collection::vec(vote, 0..3)),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    );
    (members, any::<u64>(), 0u8..8).prop_map(
        |((project, event, votes, (again, unknown, timed)), shuffle, tail)| {
            let mut m: Vec<String> = Vec::new();
            if let Some(p) = &project {
                m.push(format!(r#""project_id": {p}"#));
            }
            if again {
                m.push(r#""project_id": "proj-9""#.to_owned());
            }
            if event {
                m.push(r#""event_id": "e1""#.to_owned());
            }
            if let Some(v) = votes {
                m.push(format!(r#""votes": [{}]"#, v.join(", ")));
            }
            if unknown {
                m.push(r#""colour": {"deep": [1, "x", null]}"#.to_owned());
            }
            if timed {
                m.push(r#""occurred_at": 1700000000000"#.to_owned());
            }
            let n = m.len().max(1) as u64;
            m.rotate_left((shuffle % n) as usize);
            let mut payload = format!("{{{}}}", m.join(", ")).into_bytes();
            match tail {
                0 => payload.extend_from_slice(b" x"),
                1 => {
                    payload.pop();
                }
                2 => payload
                    .splice(1..1, b"\"bad\": \"\xff\", ".iter().copied())
                    .for_each(drop),
                3 => payload = br#"["e1", "proj-42", null, null, []]"#.to_vec(),
                _ => {}
            }
            payload
        },
    )
}

proptest! {
    /// Whatever the payload, routing reads the project the contract reads: a record whose
    /// project the contract reads goes there, one routing rejects the contract rejects with the
    /// same code, and one routing sends on although the contract cannot read its project (for a
    /// fault of another member) the contract rejects as a whole where it arrives.
    #[test]
    fn routing_reads_the_project_the_contract_reads(payload in arb_any_batch()) {
        let e = engine();
        let routed = e.project_of(&rec("jury.votes", Some(&payload))).map_err(|r| r.code);
        let id = contract_id(&e, &payload);
        match (&routed, &id) {
            (Ok(to), Ok(project)) => prop_assert_eq!(to, project),
            (Err(code), id) => prop_assert_eq!(Err(*code), id.clone()),
            // Only a fault of another member: a repeated one, or a number beyond an `f64`.
            (Ok(_), Err(code)) => {
                prop_assert!(matches!(code, ErrorCode::DuplicateField | ErrorCode::ValueOutOfRange));
                prop_assert!(contract_project(&e, &payload).is_err());
            }
        }
        if let Ok(project) = contract_project(&e, &payload) {
            prop_assert_eq!(routed, Ok(ProjectKey::from(project.as_str())));
        }
    }
}
