"""Reviewer reliability checked against an independent implementation: crowd-kit's DawidSkene
(batch EM of the same two-coin model: a sensitivity and a specificity per reviewer) fitted on
the same votes, on generated crowds with known accuracies (honest reviewers of different
accuracy, a random clicker, a straight-liner and an adversary), and against the truth (rank
correlation). jurystream fits the model with a Beta(2, 1) prior on each coin, which moves a coin
by at most (2 - 3x) / (n + 3) from the prior-free fit for a reviewer right a share x of the n
items of that class."""
import random

import pandas as pd
from crowdkit.aggregation import DawidSkene, OneCoinDawidSkene
from scipy.stats import spearmanr

from test_statistics import START_MS, replay

# Reviewers and the probability that each gives the true verdict; "yes" always says pass and
# "coin" flips a fair coin whatever the truth.
ACCURACY = {"h95": 0.95, "h90": 0.90, "h85": 0.85, "h80": 0.80, "h70": 0.70, "h60": 0.60,
            "coin": None, "yes": None, "adv": 0.20}


def crowd(seed, items, per_item, pass_share):
    """Vote batches (one per item, `per_item` reviewers chosen at random) and the truth."""
    rng = random.Random(seed)
    names = sorted(ACCURACY)
    batches, truth = [], {}
    for i in range(items):
        item = f"item-{i:04}"
        truth[item] = rng.random() < pass_share
        votes = []
        for r in rng.sample(names, per_item):
            if r == "yes":
                verdict = True
            elif r == "coin":
                verdict = rng.random() < 0.5
            else:
                verdict = truth[item] if rng.random() < ACCURACY[r] else not truth[item]
            votes.append((r, verdict))
        batches.append((item, votes))
    return batches, truth


def records(batches):
    return [{"topic": "jury.votes", "partition": 0, "offset": i, "value": {
        "event_id": f"e{i}", "project_id": "crowd", "item_id": item,
        "occurred_at": START_MS + i * 1000,
        "votes": [{"voter_id": r, "verdict": "pass" if v else "flag"} for r, v in votes]}}
        for i, (item, votes) in enumerate(batches)]


def reviewer_records(outputs):
    last = {}
    for o in outputs:
        if o["topic"] == "jury.reviewer-quality":
            last[o["value"]["voter_id"]] = o["value"]
    return last


def crowdkit_skills(batches):
    rows = [{"task": item, "worker": r, "label": int(v)} for item, votes in batches
            for r, v in votes]
    model = OneCoinDawidSkene(n_iter=1000, tol=1e-10).fit(pd.DataFrame(rows))
    return model.skills_.to_dict()


def crowdkit_coins(batches):
    """crowd-kit's DawidSkene fit: per reviewer its expected share of true verdicts (the mean
    posterior of the verdicts it gave), its sensitivity and its specificity, and the expected
    numbers of its items whose truth is pass and fail."""
    rows = [{"task": item, "worker": r, "label": int(v)} for item, votes in batches
            for r, v in votes]
    model = DawidSkene(n_iter=1000, tol=1e-10).fit(pd.DataFrame(rows))
    probas, errors = model.probas_, model.errors_
    coins = {}
    for r in {row["worker"] for row in rows}:
        mine = [row for row in rows if row["worker"] == r]
        accuracy = sum(probas.loc[row["task"], row["label"]] for row in mine) / len(mine)
        error = lambda said, truth: errors.loc[(r, said), truth] if (r, said) in errors.index else 0.0
        passes = sum(probas.loc[row["task"], 1] for row in mine)
        coins[r] = (accuracy, error(1, 1), error(0, 0), passes, len(mine) - passes)
    return coins


def true_accuracy(batches, truth):
    right, total = {}, {}
    for item, votes in batches:
        for r, v in votes:
            right[r] = right.get(r, 0) + (v == truth[item])
            total[r] = total.get(r, 0) + 1
    return {r: right[r] / total[r] for r in total}


CASES = [
    # (seed, items, reviewers per item, share of pass items)
    (1, 600, 5, 0.5),
    (3, 300, 6, 0.7),
    (4, 500, 4, 0.5),
]


def check_against_truth(seed, ours, accuracy):
    names = sorted(ours)
    rho, _ = spearmanr([ours[r]["reliability"] for r in names], [accuracy[r] for r in names])
    assert rho >= 0.9, (seed, rho)
    # Any two reviewers whose accuracies on these items differ by more than 0.03 are in that
    # order.
    for a in names:
        for b in names:
            if accuracy[a] > accuracy[b] + 0.03 and a != "yes" and b != "yes":
                assert ours[a]["reliability"] > ours[b]["reliability"], (seed, a, b)
    assert "adversarial" in ours["adv"]["findings"], ours["adv"]
    assert "straight_lining" in ours["yes"]["findings"], ours["yes"]
    for r in ("h95", "h90", "h85", "h80"):
        assert ours[r]["findings"] == [], ours[r]
    for record in ours.values():
        assert 0 <= record["interval"][0] <= record["reliability"] <= record["interval"][1] <= 1


def test_reviewer_reliability_matches_crowdkit_on_generated_crowds():
    for seed, items, per_item, pass_share in CASES:
        batches, truth = crowd(seed, items, per_item, pass_share)
        ours = reviewer_records(replay(records(batches)))
        theirs = crowdkit_coins(batches)
        assert set(ours) == set(theirs) == set(ACCURACY)
        for r, record in ours.items():
            assert record["verdicts"] >= 150, (seed, r, record)
            accuracy, sensitivity, specificity, passes, fails = theirs[r]
            # The prior's own pull on a share x of n, (2 - 3x) / (n + 3), is at most 0.013 at
            # 150 verdicts; on a coin, at most 2 / (n + 3) over the n items of its class, and
            # the other reviewers' priors move the items' posteriors a little more.
            assert abs(record["reliability"] - accuracy) <= 0.025, (seed, r, record, accuracy)
            for coin, theirs_, n in (("sensitivity", sensitivity, passes),
                                     ("specificity", specificity, fails)):
                assert abs(record[coin] - theirs_) <= 2 / (n + 3) + 0.015, (seed, r, coin, record, theirs_)
        check_against_truth(seed, ours, true_accuracy(batches, truth))


def test_where_the_batch_fit_collapses_the_online_one_stays_nearer_the_truth():
    """A straight-liner in a crowd whose items mostly fail: crowd-kit's EM drives its skill to
    0 (errors are clipped at 1e-10 only), after which its pass is decisive evidence of a fail,
    and the honest reviewers' skills sink with the items it turns. jurystream clips a
    reliability at 1e-3 in the posterior, so no single reviewer decides an item; its estimates
    stay nearer the true accuracies for every honest reviewer."""
    batches, truth = crowd(2, 400, 4, 0.3)
    ours = reviewer_records(replay(records(batches)))
    skills = crowdkit_skills(batches)
    accuracy = true_accuracy(batches, truth)
    assert skills["yes"] < 0.01, skills
    for r in ("h95", "h90", "h85", "h80"):
        assert abs(ours[r]["reliability"] - accuracy[r]) < abs(skills[r] - accuracy[r]), r
    check_against_truth(2, ours, accuracy)


def test_learned_weights_bring_the_score_nearer_the_truth():
    """A crowd with spammers (two straight-liners, an adversary, a coin) beside three honest
    reviewers, on items that mostly fail. The HumanJudge score is a decayed mean of the batches'
    weighted means; the truth is the same decayed mean (the published steps' alphas) of the
    items' true verdicts. Weighed by a flat table the spammers pull the score up; weighed by
    what jurystream learned of each reviewer (scoring.reputation_source = "learned") it stays
    nearer the truth."""
    rng = random.Random(11)
    accuracy = {"h1": 0.9, "h2": 0.85, "h3": 0.8, "adv": 0.15, "coin": None,
                "yes1": None, "yes2": None}
    batches, truth = [], {}
    for i in range(800):
        item = f"item-{i:04}"
        truth[item] = rng.random() < 0.3
        votes = []
        for r in rng.sample(sorted(accuracy), 5):
            if r.startswith("yes"):
                v = True
            elif r == "coin":
                v = rng.random() < 0.5
            else:
                v = truth[item] if rng.random() < accuracy[r] else not truth[item]
            votes.append((r, v))
        batches.append((item, votes))
    errors = {}
    for source in ("table", "learned"):
        config = f'[scoring]\nlambda = 0.02\nreputation_source = "{source}"\n'
        scores = [o["value"] for o in replay(records(batches), config) if o["topic"] == "jury.scores"]
        assert len(scores) == len(batches)
        expected, gaps = 0.5, []
        for (item, _), s in zip(batches, scores):
            expected = s["alpha"] * expected + (1 - s["alpha"]) * float(truth[item])
            gaps.append(abs(s["score"] - expected))
        errors[source] = sum(gaps[400:]) / 400
    assert errors["learned"] < errors["table"] / 2, errors
