"""Start-up latency: how long after `jurystream run` is launched on an empty broker the first
score is written. One vote is produced before the launch; the time is the score record's
timestamp (set by the service's producer) minus the launch time. The service's log lines, with
their times since launch, break the wait down.

usage: probe.py BOOTSTRAP BINARY [RUNS]
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def probe(bootstrap, binary, run):
    prefix = f"startup-{os.getpid()}-{run}"
    votes, scores = f"{prefix}.votes", f"{prefix}.scores"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in (votes, scores)]).values():
        f.result()
    producer = Producer({"bootstrap.servers": bootstrap})
    vote = {"event_id": "e1", "project_id": "p", "occurred_at": 1795168800000,
            "votes": [{"voter_id": "u", "value": 1}]}
    producer.produce(votes, json.dumps(vote).encode(), key=b"p")
    producer.flush()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}.probe",
                         "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(scores, p, 0) for p in range(3)])
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "jurystream.toml")
        with open(config, "w") as f:
            f.write(f'[topics]\nvotes = "{votes}"\nscores = "{scores}"\n'
                    f'judge_scores = "{prefix}.judge-scores"\nreputations = "{prefix}.reputations"\n'
                    f'consensus = "{prefix}.consensus"\nbias_alerts = "{prefix}.bias-alerts"\n'
                    f'leaderboard = "{prefix}.leaderboard"\ndead_letters = "{prefix}.dead-letters"\n'
                    f'judge_quality = "{prefix}.judge-quality"\n'
                    f'review_requests = "{prefix}.review-requests"\nstate = "{prefix}.state"\n'
                    f'[kafka]\nbootstrap_servers = "{bootstrap}"\ngroup_id = "{prefix}"\n'
                    f'[http]\nbind = "127.0.0.1:0"\n')
        env = dict(os.environ, RUST_LOG="info", NO_COLOR="1")
        log = open(os.path.join(tmp, "log"), "w+")
        launched = time.time()
        child = subprocess.Popen([binary, "--config", config, "run"], stdout=log, stderr=log,
                                 env=env)
        try:
            first = None
            while first is None and time.time() - launched < 30:
                msg = consumer.poll(0.05)
                if msg is not None and msg.error() is None:
                    first = msg.timestamp()[1] / 1000 - launched
        finally:
            child.terminate()
            child.wait()
            consumer.close()
        log.seek(0)
        lines = log.read().splitlines()
    return first, lines, launched


def since(line, launched):
    """A log line's time since launch, from its leading RFC 3339 timestamp."""
    try:
        stamp = datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
    except (ValueError, IndexError):
        return ""
    return f"{(stamp.timestamp() - launched) * 1000:.0f} ms"


def main():
    bootstrap, binary = sys.argv[1:3]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    for run in range(runs):
        first, lines, launched = probe(bootstrap, binary, run)
        shown = "none within 30 s" if first is None else f"{first * 1000:.0f} ms"
        print(f"run {run + 1}: first score {shown} after launch", flush=True)
        if run == 0:
            for line in lines:
                print(f"  {since(line, launched):>8} {line.split('Z', 1)[-1].strip()}")


if __name__ == "__main__":
    main()
