"""Runs jurystream and what a user would otherwise write on one broker and one corpus, one after
the other, and reports each one's events/s, CPU per event and peak RSS, and the ratios.

usage: run.py BOOTSTRAP JURYSTREAM_BINARY [EVENTS] [PROJECTS]

The corpus is EVENTS vote events (default 300,000) over PROJECTS projects (default 10,000),
keyed by project id, in a topic of 3 partitions, produced once before the runs. Each contender
is started as a process of its own with its own consumer group and output topic. Two rates:
from its start until it has applied every event (start-up counts for everyone), and from its
first applied event to its last (the steady rate: jurystream's `jurystream_records_total` polled
every 20 ms, the others report the moments themselves). CPU and peak RSS are the process's own
(wait4), start-up included."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

HERE = os.path.dirname(os.path.abspath(__file__))


def event(i, projects):
    return (
        f'{{"event_id":"ev-{i:010}","project_id":"proj-{i % projects:06}",'
        f'"occurred_at":{1_795_168_800_000 + i},"item_id":"trace-{i:08}",'
        f'"votes":[{{"voter_id":"u-{i % 1000:04}","verdict":"pass","reputation":0.9}},'
        f'{{"voter_id":"u-8","value":0.75}}]}}'
    )


def create_topics(bootstrap, names):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(n, num_partitions=3, replication_factor=1, config={"retention.ms": "-1"}) for n in names]
    for name, future in admin.create_topics(new).items():
        try:
            future.result()
        except Exception as e:  # an existing topic is fine
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise


def produce(bootstrap, topic, events, projects):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(events):
        key = f"proj-{i % projects:06}"
        while True:
            try:
                producer.produce(topic, key=key, value=event(i, projects))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush()


def records_handled(port):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return 0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("jurystream_records_total{")
    )


def measure(argv, done=None):
    """Runs argv until it exits (or, with `done`, until done() reports every event applied, then
    SIGTERM) and returns (seconds from start to the last event, seconds from the first event to
    the last, CPU seconds, peak RSS in MiB)."""
    started = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = last = None
    if done is not None:
        while True:
            applied = done()
            now = time.monotonic()
            if applied > 0 and first is None:
                first = now
            if applied >= 1:
                if applied >= done.events:
                    last = now
                    break
            if child.poll() is not None:
                sys.exit(f"{argv[0]} exited early: {child.stderr.read()[-2000:]}")
            time.sleep(0.02)
        child.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        sys.exit(f"{argv[0]} failed ({status}): {child.stderr.read()[-2000:]}")
    if done is None:
        for line in child.stdout.read().splitlines():
            what, _, at = line.partition(" ")
            if what == "first":
                first = float(at)
            elif what == "last":
                last = float(at)
    return last - started, last - first, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main():
    bootstrap, binary = sys.argv[1:3]
    events = int(sys.argv[3]) if len(sys.argv) > 3 else 300_000
    projects = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000
    run = f"peers-{os.getpid()}"
    source = f"{run}.votes"
    outputs = {name: f"{run}.{name}.scores" for name in ("jurystream", "handwritten", "quix")}
    create_topics(bootstrap, [source, *outputs.values()])
    produce(bootstrap, source, events, projects)
    print(f"corpus: {events} vote events over {projects} projects, 3 partitions", flush=True)

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        port = 19000 + os.getpid() % 1000
        config = os.path.join(tmp, "jurystream.toml")
        prefix = f"{run}.jurystream"
        with open(config, "w") as f:
            f.write(
                f'[topics]\nvotes = "{source}"\njudge_scores = "{prefix}.judge-scores"\n'
                f'reputations = "{prefix}.reputations"\nscores = "{outputs["jurystream"]}"\n'
                f'consensus = "{prefix}.consensus"\nbias_alerts = "{prefix}.bias-alerts"\n'
                f'leaderboard = "{prefix}.leaderboard"\ndead_letters = "{prefix}.dead-letters"\n'
                f'state = "{prefix}.state"\n'
                f'[kafka]\nbootstrap_servers = "{bootstrap}"\ngroup_id = "{prefix}"\n'
                f"partitions = 3\nfetch_wait_max_ms = 10\n"
                f'[http]\nbind = "127.0.0.1:{port}"\n'
            )
        def applied():
            return records_handled(port)

        applied.events = events
        results["jurystream"] = measure([binary, "--config", config, "run"], done=applied)
        python = sys.executable
        results["hand-written consumer"] = measure(
            [python, os.path.join(HERE, "handwritten.py"), bootstrap, source,
             outputs["handwritten"], f"{run}.handwritten", str(events)],
        )
        results["Quix Streams"] = measure(
            [python, os.path.join(HERE, "quix_app.py"), bootstrap, source,
             outputs["quix"], f"{run}.quix", str(events), os.path.join(tmp, "quix-state")],
        )

    print(f"{'contender':<24}{'events/s from start':>21}{'steady events/s':>17}"
          f"{'CPU µs/event':>14}{'peak RSS MiB':>14}")
    # A steady time shorter than a few metric polls cannot be measured: more events, then.
    def steady_rate(steady):
        return f"{events / steady:,.0f}" if steady >= 0.1 else "too short"

    for name, (total, steady, cpu, rss) in results.items():
        print(f"{name:<24}{events / total:>21,.0f}{steady_rate(steady):>17}"
              f"{cpu / events * 1e6:>14.1f}{rss:>14.0f}")
    js_total, js_steady, js_cpu, _ = results["jurystream"]
    for name, (total, steady, cpu, _) in results.items():
        if name != "jurystream":
            ratio = f"{steady / js_steady:.1f}x steady" if js_steady >= 0.1 else "steady too short"
            print(f"jurystream vs {name}: {total / js_total:.1f}x the events/s from start, "
                  f"{ratio}, {cpu / js_cpu:.1f}x less CPU per event")


if __name__ == "__main__":
    main()
