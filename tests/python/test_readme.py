"""The README's producer sends what jurystream accepts: its Python block, run with a stand-in
for the client that records what it would send (the block's records, not Kafka, are under
test here; the Kafka suites cover the client), replayed through `jurystream replay`, gives a
score, a consensus and a judge's agreement with the humans, and no dead letter."""
import importlib.util
import json
import pathlib
import re
import subprocess
import sys
import tomllib
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_producer():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "the README has one Python example"
    return blocks[0]


def test_the_readme_producer_sends_records_jurystream_applies(tmp_path, monkeypatch):
    sent = []

    class Producer:
        def __init__(self, config):
            assert "bootstrap.servers" in config

        def produce(self, topic, key=None, value=None):
            sent.append((topic, key, value))

        def flush(self):
            return 0

    monkeypatch.setitem(sys.modules, "confluent_kafka", types.SimpleNamespace(Producer=Producer))
    exec(readme_producer(), {})
    assert [t for t, _, _ in sent] == ["jury.votes", "jury.judge-scores"]
    lines = [json.dumps({"topic": t, "partition": 0, "offset": i, "key": k,
                         "timestamp_ms": 1795168810000, "value": json.loads(v)})
             for i, (t, k, v) in enumerate(sent)]
    replay = tmp_path / "readme.jsonl"
    replay.write_text("\n".join(lines) + "\n")
    out = subprocess.run(["cargo", "run", "-q", "--", "replay", "--input", str(replay)],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    published = [json.loads(l) for l in out.stdout.splitlines()]
    topics = {r["topic"] for r in published}
    assert "jury.dead-letters" not in topics, out.stdout
    assert {"jury.scores", "jury.consensus", "jury.judge-quality"} <= topics, out.stdout
    score = next(r["value"] for r in published if r["topic"] == "jury.scores")
    assert (score["project_id"], score["votes"]) == ("proj-42", 3)
    assert score["score"] == (1.0 + 1.0 + 0.25) / 3


def test_the_readme_figures_are_measured_with_jurystreams_defaults():
    """The README's performance figures come from `scripts/bench-peers.sh` and say "the
    defaults": the configuration that benchmark gives jurystream names the run (its topics, the
    broker, its group, its HTTP port) and sets nothing else."""
    path = ROOT / "benches" / "peers" / "run.py"
    # As when it runs as a script: its directory (and the corpus beside it) on the path.
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("peers_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    given = tomllib.loads(module.service_config("run.j", "run.votes", "run.scores", "b:1", 9))
    shipped = tomllib.loads((ROOT / "config" / "jurystream.toml").read_text())
    assert set(given) == {"topics", "kafka", "http"}, given
    assert set(given["topics"]) <= set(shipped["topics"]), given["topics"]
    assert set(given["kafka"]) == {"bootstrap_servers", "group_id"}, given["kafka"]
    assert set(given["http"]) == {"bind"}, given["http"]
