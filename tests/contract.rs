//! The written contract (schemas, docs) and the code agree.

use jurystream::engine::contract::rejection::ErrorCode;

fn schema(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(format!("schemas/{name}.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("schemas/{name}: {e}"))
}

#[test]
fn dead_letter_schema_lists_exactly_the_error_codes() {
    let s = schema("jury.dead-letters");
    let listed: Vec<&str> = s["properties"]["error"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(listed, codes);
}

#[test]
fn every_error_code_is_documented() {
    let doc = std::fs::read_to_string("docs/events.md").unwrap();
    for code in ErrorCode::ALL {
        assert!(
            doc.contains(&format!("| `{}` |", code.as_str())),
            "docs/events.md lacks {code}"
        );
    }
}

#[test]
fn every_schema_is_json_with_a_title() {
    let mut n = 0;
    for entry in std::fs::read_dir("schemas").unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(v["title"].is_string(), "{}", path.display());
        assert_eq!(v["type"], "object", "{}", path.display());
        n += 1;
    }
    assert!(n >= 4);
}
