"""The leaderboard's Bradley-Terry ratings checked against an independent implementation:
choix's pairwise maximum-likelihood estimator on generated tournaments, unbeaten and winless
models included. jurystream's prior (each model ties a reference rated 1000 once) is the same
estimate as an unregularised fit on the data with one extra model that ties each model once;
with every real comparison counted twice, that tie is one win and one loss against the
reference, which choix takes as plain pairwise data."""
import concurrent.futures
import functools
import json
import math
import os
import pathlib
import random
import subprocess
import tempfile

import choix
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
START_MS = 1_795_168_800_000


@functools.cache
def jurystream():
    """The path of the jurystream binary, built once: `cargo run` would check the build again
    on every replay, which cost more than most of these replays take."""
    out = subprocess.run(["cargo", "build", "-q", "--locked", "--bin", "jurystream",
                          "--message-format=json-render-diagnostics"],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    built = [json.loads(line) for line in out.stdout.splitlines()]
    return next(m["executable"] for m in built
                if m.get("reason") == "compiler-artifact" and m.get("executable"))


def replay(records, config=""):
    """The records jurystream's `replay` publishes for `records`, under `config` (TOML)."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as cfg:
        cfg.write(config)
        cfg.flush()
        lines = "".join(json.dumps(r) + "\n" for r in records)
        out = subprocess.run(
            [jurystream(), "replay", "--config", cfg.name, "--input", "-", "--output", "-"],
            cwd=ROOT, check=True, capture_output=True, text=True, input=lines)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def over_seeds(check, seeds):
    """`[check(seed) for seed in seeds]`, on every core: the comparisons over many generated
    crowds spend their time in replays and crowd-kit's fits, each independent of the others.
    `check` must be a module's function (the workers import it by name)."""
    jurystream()
    with concurrent.futures.ProcessPoolExecutor(os.cpu_count()) as pool:
        return list(pool.map(check, seeds))


def session(i, winner, loser):
    """A one-judge session whose two candidates are by `winner` and `loser`."""
    return {"topic": "jury.judge-scores", "partition": 0, "offset": i, "value": {
        "event_id": f"e{i}", "project_id": "bt", "session_id": f"s{i}",
        "occurred_at": START_MS + i * 1000, "judge": "j", "expected_judges": 1,
        "category": "c", "scores": {"A": 8, "B": 3},
        "candidates": {"A": {"author": winner}, "B": {"author": loser}}}}


def tournament(seed, strengths, games, unbeaten=(), winless=()):
    rng = random.Random(seed)
    names = sorted(strengths)
    outcomes = []
    for _ in range(games):
        a, b = rng.sample(names, 2)
        if a in unbeaten or b in winless:
            winner, loser = a, b
        elif b in unbeaten or a in winless:
            winner, loser = b, a
        else:
            pa = 1 / (1 + 10 ** ((strengths[b] - strengths[a]) / 400))
            winner, loser = (a, b) if rng.random() < pa else (b, a)
        outcomes.append((winner, loser))
    return names, outcomes


def choix_ratings(names, outcomes):
    index = {n: i for i, n in enumerate(names)}
    ref = len(names)
    data = []
    for winner, loser in outcomes:
        data += [(index[winner], index[loser])] * 2
    for i in range(len(names)):
        data += [(i, ref), (ref, i)]
    params = choix.opt_pairwise(len(names) + 1, data, alpha=0.0, method="Newton-CG", tol=1e-12)
    return {n: 1000 + 400 / math.log(10) * (params[i] - params[ref]) for n, i in index.items()}


def board(outputs):
    rows = {}
    for o in outputs:
        if o["topic"] == "jury.leaderboard":
            rows[o["value"]["model"]] = o["value"]
    return rows


CASES = [
    # (seed, strengths, games, unbeaten, winless)
    (1, {"m0": 1200, "m1": 1100, "m2": 1000, "m3": 900, "m4": 800}, 300, (), ()),
    (2, {"m0": 1000, "m1": 1000, "m2": 1000, "m3": 1000}, 21, ("m0",), ()),
    (3, {"m0": 1000, "m1": 1050, "m2": 950, "m3": 1000, "m4": 900, "m5": 1100}, 60, ("m1",), ("m4",)),
    (4, {"m0": 1000, "m1": 1000, "m2": 1000}, 4, (), ()),
]


def test_bradley_terry_matches_choix_on_generated_tournaments():
    for seed, strengths, games, unbeaten, winless in CASES:
        names, outcomes = tournament(seed, strengths, games, unbeaten, winless)
        records = [session(i, w, l) for i, (w, l) in enumerate(outcomes)]
        rows = board(replay(records, "[leaderboard]\nbt_interval_secs = 0\n"))
        expected = choix_ratings(names, outcomes)
        played = {n for pair in outcomes for n in pair}
        assert set(rows) == played
        for name in played:
            row = rows[name]
            assert row["bt_rating"] == row["bt_rating"]  # not NaN
            assert abs(row["bt_rating"] - expected[name]) < 1e-4, (seed, name, row, expected[name])
            assert row["bt_ci_low"] <= row["bt_rating"] <= row["bt_ci_high"], row
            assert row["bt_rank"] is not None
        # Ranks follow ratings; ties are symmetric and mean overlapping intervals.
        by_rating = sorted(played, key=lambda n: (-rows[n]["bt_rating"], n))
        assert [rows[n]["bt_rank"] for n in by_rating] == list(range(1, len(played) + 1))
        for a in played:
            for b in played:
                if a == b:
                    continue
                overlap = rows[a]["bt_ci_low"] <= rows[b]["bt_ci_high"] and rows[b]["bt_ci_low"] <= rows[a]["bt_ci_high"]
                assert (b in rows[a]["bt_tied_with"]) == overlap == (a in rows[b]["bt_tied_with"])
        for name in unbeaten:
            assert rows[name]["bt_rank"] == 1 and "never lost" in rows[name]["bt_note"]
        for name in winless:
            assert rows[name]["bt_rank"] == len(played) and "never won" in rows[name]["bt_note"]


def test_choix_agrees_with_the_reference_trick():
    # The augmented data's estimate is finite where plain maximum likelihood is not: an
    # unbeaten model's rating grows with its wins but stays finite.
    last = 0
    for wins in (1, 5, 25):
        r = choix_ratings(["a", "b"], [("a", "b")] * wins)
        assert np.isfinite(r["a"]) and r["a"] > last
        last = r["a"]


def judge_stream(seed, items, judges):
    """Items each voted once (value v, reputation 1) and judged in a one-candidate session per
    item by every judge, on 0..10: pairs (score / 10, v), one per judge and item."""
    rng = random.Random(seed)
    records, pairs = [], {j: [] for j in judges}
    offset = 0
    for i in range(items):
        truth = rng.random()
        v = round(min(1.0, max(0.0, truth + rng.gauss(0, 0.15))), 2)
        records.append({"topic": "jury.votes", "partition": 0, "offset": offset, "value": {
            "event_id": f"v{i}", "project_id": "jq", "item_id": f"item-{i}",
            "occurred_at": START_MS + offset * 1000,
            "votes": [{"voter_id": "u", "value": v, "reputation": 1}]}})
        offset += 1
        for j, (bias, noise) in judges.items():
            score = round(min(10.0, max(0.0, 10 * (truth + bias + rng.gauss(0, noise)))), 1)
            pairs[j].append((score / 10, v))
            records.append({"topic": "jury.judge-scores", "partition": 1, "offset": offset, "value": {
                "event_id": f"b{i}-{j}", "project_id": "jq", "session_id": f"s{i}",
                "occurred_at": START_MS + offset * 1000, "judge": j, "expected_judges": len(judges),
                "scale": {"min": 0, "max": 10}, "scores": {f"item-{i}": score}}})
            offset += 1
    return records, pairs


def shuffled(records, seed, block=8):
    """`records` with arrivals shuffled within blocks of `block`, each partition's offsets
    renumbered in the new order (as a broker would number them)."""
    rng = random.Random(seed)
    out = []
    for start in range(0, len(records), block):
        chunk = [dict(r) for r in records[start:start + block]]
        rng.shuffle(chunk)
        out.extend(chunk)
    offsets = {}
    for r in out:
        r["offset"] = offsets.get(r["partition"], 0)
        offsets[r["partition"]] = r["offset"] + 1
    return out


def test_judge_quality_matches_scipy_and_krippendorff():
    """Each judge's window holds its last `window` pairs by their own time (the later of its
    vote's and its session's), whatever order they arrived in: with 60 items, a window of 40
    that fills, and arrivals shuffled, every figure equals scipy's and krippendorff's on the
    last 40 pairs."""
    import krippendorff
    from scipy import stats

    judges = {"fair": (0.0, 0.1), "lenient": (0.25, 0.1), "noisy": (0.0, 0.4)}
    records, pairs = judge_stream(7, 60, judges)
    window = 40
    config = f"[judge_quality]\nenabled = true\nmin_human_votes = 1\nwindow = {window}\n"
    table = {}
    for o in replay(shuffled(records, 3), config):
        if o["topic"] == "jury.judge-quality":
            table[o["value"]["judge"]] = o["value"]
    assert set(table) == set(judges)
    # In judge_stream an item's vote and ballots are in time order, one item after another, so
    # the last pairs by time are the last items'.
    pairs = {j: ps[-window:] for j, ps in pairs.items()}
    for j, ps in pairs.items():
        row = table[j]
        s = np.array([p[0] for p in ps])
        h = np.array([p[1] for p in ps])
        assert row["pairs"] == len(ps)
        r, p = stats.pearsonr(s, h)
        assert abs(row["pearson_r"] - r) < 1e-9, (j, row, r)
        assert abs(row["p_value"] - p) < 1e-6 * max(1.0, p), (j, row, p)
        assert abs(row["mean_abs_diff"] - np.mean(np.abs(s - h))) < 1e-9
        assert abs(row["bias"] - np.mean(s - h)) < 1e-9
        alpha = krippendorff.alpha(reliability_data=[s, h], level_of_measurement="interval")
        assert abs(row["krippendorff_alpha"] - alpha) < 1e-9, (j, row, alpha)
        # Cohen's kappa of the >= 0.5 decisions, from scipy's contingency table.
        table2 = stats.contingency.crosstab(s >= 0.5, h >= 0.5).count
        n = table2.sum()
        p_o = np.trace(table2) / n
        p_e = (table2.sum(0) * table2.sum(1)).sum() / n ** 2
        assert abs(row["kappa"] - (p_o - p_e) / (1 - p_e)) < 1e-9, (j, row)
    # The lenient judge is the one with a positive bias.
    assert table["lenient"]["bias"] > 0.15 > abs(table["fair"]["bias"])
