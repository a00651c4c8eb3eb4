"""Writes examples/reviewers.jsonl: thirty items of the "support-bot" project, two thirds of them
passes (items 1, 2, 4, 5, ...), each voted on by five of six reviewers (item i leaves out reviewer
i mod 6), and one judge session scoring the first six items. Regenerate with
`python3 examples/reviewers.py > examples/reviewers.jsonl`.

- ann gives the true verdict on every item;
- bo and cy are careful but slip: bo on items 4, 14, 24, cy on items 7, 17, 27;
- dee gives the wrong verdict except on items 0, 5, 10, ... (right one time in five);
- eve passes everything;
- fay passes items 0, 1, 4, 5, 8, 9, ... whatever they are (a coin, right about half the time).
"""
import json

REVIEWERS = ["ann", "bo", "cy", "dee", "eve", "fay"]


def verdict(reviewer, i):
    truth = i % 3 != 0
    if reviewer == "ann":
        return truth
    if reviewer == "bo":
        return truth != (i % 10 == 4)
    if reviewer == "cy":
        return truth != (i % 10 == 7)
    if reviewer == "dee":
        return truth if i % 5 == 0 else not truth
    if reviewer == "eve":
        return True
    return i % 4 < 2


def main():
    for i in range(30):
        votes = [{"voter_id": r, "verdict": "pass" if verdict(r, i) else "flag"}
                 for k, r in enumerate(REVIEWERS) if k != i % 6]
        print(json.dumps({"topic": "jury.votes", "partition": 0, "offset": i, "key": "support-bot",
                          "value": {"event_id": f"vote-{i:03}", "project_id": "support-bot",
                                    "item_id": f"trace-{i}",
                                    "occurred_at": f"2026-11-20T11:{i // 6:02}:{i % 6 * 10:02}Z",
                                    "votes": votes}}))
    scores = {f"trace-{i}": 8 if i % 3 != 0 else 2 for i in range(6)}
    print(json.dumps({"topic": "jury.judge-scores", "partition": 0, "offset": 0, "key": "support-bot",
                      "value": {"event_id": "ballot-001", "project_id": "support-bot",
                                "session_id": "review-1", "occurred_at": "2026-11-20T11:06:00Z",
                                "judge": "gpt-judge", "scale": {"min": 1, "max": 10},
                                "scores": scores, "expected_judges": 1}}))


if __name__ == "__main__":
    main()
