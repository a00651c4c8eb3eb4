"""Independent check of the JSON Schemas: the bundled example's inputs and jurystream's actual
outputs validate against them (and malformed inputs do not)."""
import json
import pathlib
import subprocess

import jsonschema

ROOT = pathlib.Path(__file__).resolve().parents[2]


def schema(topic):
    return json.loads((ROOT / "schemas" / f"{topic}.schema.json").read_text())


def replay_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_example_inputs_match_or_are_dead_lettered():
    outputs = replay_lines(ROOT / "examples" / "demo.expected.jsonl")
    rejected = {(o["value"]["source_topic"], o["value"]["partition"], o["value"]["offset"])
                for o in outputs if o["topic"] == "jury.dead-letters"}
    checked = 0
    for rec in replay_lines(ROOT / "examples" / "demo.jsonl"):
        if rec["topic"] not in ("jury.votes", "jury.reputations", "jury.judge-scores") or rec.get("value") is None:
            continue
        value = rec["value"]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                continue
        valid = jsonschema.Draft202012Validator(schema(rec["topic"])).is_valid(value)
        was_rejected = (rec["topic"], rec.get("partition"), rec.get("offset")) in rejected
        # Schema-invalid records are always rejected; schema-valid ones may still be rejected
        # for what a schema cannot express (duplicates, zero total reputation).
        if not valid:
            assert was_rejected, rec
        checked += 1
    assert checked >= 20


def test_outputs_match_output_schemas():
    outputs = replay_lines(ROOT / "examples" / "demo.expected.jsonl")
    for out in outputs:
        jsonschema.validate(out["value"], schema(out["topic"]))
    assert {o["topic"] for o in outputs} >= {"jury.scores", "jury.dead-letters", "jury.consensus", "jury.bias-alerts", "jury.leaderboard"}


def test_judge_quality_outputs_match_output_schemas():
    outputs = replay_lines(ROOT / "examples" / "judge-quality.expected.jsonl")
    for out in outputs:
        jsonschema.validate(out["value"], schema(out["topic"]))
    assert {o["topic"] for o in outputs} >= {"jury.judge-quality", "jury.review-requests", "jury.bias-alerts", "jury.reviewer-quality"}


def test_reviewer_outputs_match_output_schemas():
    outputs = replay_lines(ROOT / "examples" / "reviewers.expected.jsonl")
    for out in outputs:
        jsonschema.validate(out["value"], schema(out["topic"]))
    kinds = {o["value"]["kind"] for o in outputs if o["topic"] == "jury.bias-alerts"}
    assert kinds >= {"reviewer_unreliable", "reviewer_adversarial", "reviewer_straight_lining"}


def unpaired_stream(votes_per_item, same_ids):
    """A project whose judges score 40 items, each also voted on by `votes_per_item` reviewers,
    under the same ids or another scheme."""
    records = []
    for i in range(40):
        item = f"it-{i}" if same_ids else f"it_{i}"
        votes = [{"voter_id": f"u-{v}", "verdict": "pass"} for v in range(votes_per_item)]
        records.append({"topic": "jury.votes", "partition": 0, "offset": i, "key": "p", "value": {
            "event_id": f"v{i}", "project_id": "p", "item_id": item,
            "occurred_at": 1795168800000 + i * 1000, "votes": votes}})
        records.append({"topic": "jury.judge-scores", "partition": 0, "offset": i, "key": "p",
                        "value": {"event_id": f"j{i}", "project_id": "p", "session_id": f"s{i}",
                                  "judge": "gpt", "occurred_at": 1795168800500 + i * 1000,
                                  "scale": {"min": 0, "max": 1}, "scores": {f"it-{i}": 0.8},
                                  "expected_judges": 1}})
    return "".join(json.dumps(r) + "\n" for r in records)


def replay_text(text):
    out = subprocess.run(["cargo", "run", "-q", "--", "replay", "--input", "-", "--output", "-"],
                         cwd=ROOT, check=True, capture_output=True, text=True, input=text)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_unpaired_alerts_match_the_schema_and_name_their_cause():
    cases = [((2, True), "judge_items_short_of_votes"), ((3, False), "judge_items_unmatched")]
    for (votes_per_item, same_ids), kind in cases:
        outputs = replay_text(unpaired_stream(votes_per_item, same_ids))
        alerts = [o["value"] for o in outputs if o["topic"] == "jury.bias-alerts"
                  and o["value"]["kind"].startswith("judge_items_")]
        assert [a["kind"] for a in alerts] == [kind]
        jsonschema.validate(alerts[0], schema("jury.bias-alerts"))
        assert not any(o["topic"] == "jury.judge-quality" for o in outputs)
    # Three votes an item under the same ids: pairs, and no such alert.
    outputs = replay_text(unpaired_stream(3, True))
    kinds = [o["value"]["kind"] for o in outputs if o["topic"] == "jury.bias-alerts"]
    assert not any(kind.startswith("judge_items_") for kind in kinds)
    assert any(o["topic"] == "jury.judge-quality" for o in outputs)


def stamped_stream(batches, stamp):
    """A project's vote batches, batch i stamped `stamp(i)` (epoch milliseconds)."""
    return "".join(json.dumps({"topic": "jury.votes", "partition": 0, "offset": i, "key": "p",
                               "value": {"event_id": f"v{i}", "project_id": "p",
                                         "occurred_at": stamp(i),
                                         "votes": [{"voter_id": "u-1", "value": i % 2}]}}) + "\n"
                   for i in range(batches))


def test_a_clock_that_stands_still_is_said_once_with_the_default_setting():
    # A producer stamping every event with one time: with the defaults, the 1000th batch after
    # the first is said, once, and valid against the schema.
    outputs = replay_text(stamped_stream(1500, lambda i: 1795168800000))
    alerts = [o["value"] for o in outputs if o["topic"] == "jury.bias-alerts"]
    assert [(a["kind"], a["session_id"], a["value"]) for a in alerts] == [
        ("score_stalled", "v1000", 1000)]
    jsonschema.validate(alerts[0], schema("jury.bias-alerts"))
    assert "2026-11-20T10:00:00Z" in alerts[0]["detail"]
    # Batches a millisecond apart move time: nothing said.
    outputs = replay_text(stamped_stream(1500, lambda i: 1795168800000 + i))
    assert not any(o["topic"] == "jury.bias-alerts" for o in outputs)


def test_binary_output_equals_golden():
    out = subprocess.run(
        ["cargo", "run", "-q", "--", "replay", "--input", "examples/demo.jsonl"],
        cwd=ROOT, check=True, capture_output=True, text=True)
    assert out.stdout == (ROOT / "examples" / "demo.expected.jsonl").read_text()
