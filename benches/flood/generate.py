"""A hostile flood as replay lines on stdout: PROJECTS vote batches, each to a project never seen
before, interleaved with SESSIONS judge ballots that each name 10,000 candidates and, on one
session, ballots from 200 judges. Used by scripts/bench-flood.sh."""
import json
import sys

projects, sessions = int(sys.argv[1]), int(sys.argv[2])
T0 = 1_795_168_800_000
out = sys.stdout
candidates = json.dumps({f"cand-{c:05}": c % 10 + 1 for c in range(10_000)})
every = max(1, projects // max(1, sessions))
# The judged project exists before the flood, so its ballots meet the session limits.
first = f'{{"event_id":"b-first","project_id":"judged","session_id":"first","occurred_at":{T0},"judge":"j","scores":{{"A":5}}}}'
out.write(json.dumps({"topic": "jury.judge-scores", "partition": 0, "offset": 0,
                      "timestamp_ms": T0, "value": first}) + "\n")
for i in range(projects):
    value = (
        f'{{"event_id":"e{i}","project_id":"flood-{i:09}","occurred_at":{T0 + i},'
        f'"votes":[{{"voter_id":"u","value":1}}]}}'
    )
    out.write(json.dumps({"topic": "jury.votes", "partition": i % 6, "offset": i // 6,
                          "timestamp_ms": T0 + i, "value": value}) + "\n")
    if i % every == 0 and i // every < sessions:
        s = i // every
        value = (f'{{"event_id":"b{s}","project_id":"judged","session_id":"s{s}","occurred_at":{T0 + i},'
                 f'"judge":"j","scores":{candidates}}}')
        out.write(json.dumps({"topic": "jury.judge-scores", "partition": 0, "offset": 1 + s,
                              "timestamp_ms": T0 + i, "value": value}) + "\n")
for j in range(200):
    value = (f'{{"event_id":"w{j}","project_id":"judged","session_id":"wide","occurred_at":{T0},'
             f'"judge":"judge-{j:03}","scores":{{"A":5,"B":6}}}}')
    out.write(json.dumps({"topic": "jury.judge-scores", "partition": 0, "offset": 1 + sessions + j,
                          "timestamp_ms": T0, "value": value}) + "\n")
