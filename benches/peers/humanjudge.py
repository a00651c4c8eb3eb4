"""The HumanJudge update, as a team writing its own consumer would: per project, a vote batch
moves the score by 1 - exp(-lambda * dt) towards its reputation-weighted mean vote.

Shared by both peers of the benchmark, so they do the same work per event as jurystream's core
(parse, check the fields the score needs, update the project, render its score record)."""

import json
import math

LAMBDA = 0.01
INITIAL_SCORE = 0.5


def mean_vote(batch):
    """The reputation-weighted mean of a batch's votes, or None if it carries no weight."""
    num = den = 0.0
    for vote in batch["votes"]:
        verdict = vote.get("verdict")
        value = vote["value"] if verdict is None else (1.0 if verdict == "pass" else 0.0)
        if not 0.0 <= value <= 1.0:
            raise ValueError("value out of range")
        weight = vote.get("reputation", 1.0)
        num += weight * value
        den += weight
    return num / den if den > 0 else None


def update(state, batch):
    """Applies one batch to a project's state (a dict, or None for a new project) and returns
    the new state and the score record to publish (None if the batch carries no weight)."""
    mean = mean_vote(batch)
    if mean is None:
        return state, None
    at = batch["occurred_at"] / 1000.0
    if state is None:
        state = {"score": INITIAL_SCORE, "last": None, "evaluations": 0, "votes": 0}
    alpha = 0.0 if state["last"] is None else math.exp(-LAMBDA * max(0.0, at - state["last"]))
    state["score"] = min(1.0, max(0.0, alpha * state["score"] + (1.0 - alpha) * mean))
    state["last"] = at if state["last"] is None else max(state["last"], at)
    state["evaluations"] += 1
    state["votes"] += len(batch["votes"])
    record = {
        "project_id": batch["project_id"],
        "score": state["score"],
        "freshness": 1.0 - alpha,
        "evaluations": state["evaluations"],
        "votes": state["votes"],
    }
    return state, json.dumps(record)
