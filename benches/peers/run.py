"""Runs jurystream and what a user would otherwise write on one broker and one corpus, one after
the other, and reports each one's events/s, CPU per event and peak RSS, and the ratios.

usage: run.py BOOTSTRAP JURYSTREAM_BINARY [EVENTS] [PROJECTS]
(PEERS_SERVICE_CONFIG: TOML appended to jurystream's configuration, e.g.
'[kafka]\ninstance_id = "peers-0"\n' for static membership. PEERS_ONLY=jurystream: jurystream
alone, without the restarts and the other contenders, as pairs of builds or configurations are
compared.)

The corpus (corpus.py) is EVENTS vote events (default 300,000) over PROJECTS projects (default
10,000), keyed by project id, in a topic of 3 partitions, produced once before the runs. Each
contender is started as a process of its own with its own consumer group and output topic; jurystream
with its defaults (its configuration names only its topics, the broker, its group and its HTTP
port, plus PEERS_SERVICE_CONFIG), so it keeps its state in `kafka.partitions` tasks. Two rates:
from its start until it has applied every event (start-up counts for everyone), and from its
first applied event to its last (the steady rate: jurystream's `jurystream_records_total` polled
every 20 ms, the others report the moments themselves). CPU and peak RSS are the process's own
(wait4), start-up included; jurystream's is also given by thread (from /proc, just before it
is stopped): its applying thread, which holds the state, is the process's main thread."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from corpus import event, key

HERE = os.path.dirname(os.path.abspath(__file__))


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
        while True:
            try:
                producer.produce(topic, key=key(i, projects), value=event(i, projects))
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


def metric(port, name):
    """The sum of a jurystream metric's samples, or None while it does not answer."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


# The allocator settings the deploy files give the service (docs/architecture.md).
SERVICE_ENV = dict(
    os.environ,
    MIMALLOC_ALLOW_THP="0",
    GLIBC_TUNABLES="glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=131072",
)


def owning(argv, port, owned):
    """Starts jurystream and waits until it owns the `owned` partitions of its project log,
    restored; returns (the process, seconds from its start until then, or None after 300 s)."""
    started = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=SERVICE_ENV)
    while time.monotonic() - started < 300:
        if (metric(port, "jurystream_partitions_owned") or 0) >= owned:
            return child, time.monotonic() - started
        time.sleep(0.02)
    return child, None


def partitions_of(bootstrap, topic):
    """The partitions of `topic`, or None if it does not exist."""
    # All topics: a metadata request naming a missing topic may create it.
    found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics.get(topic)
    return len(found.partitions) if found is not None and found.error is None else None


def restore(argv, port, owned):
    """Starts jurystream again on the state the measured run left and returns (seconds from its
    start until it owns the `owned` partitions of its project log, restored; seconds its
    restores took; changelog records and bytes it restored; seconds from a start after a
    `kill -9` of that instance until the same, and seconds its restores took then: the rest is
    the group handing it the partitions)."""
    child, ready = owning(argv, port, owned)
    seconds = metric(port, "jurystream_state_restore_seconds_sum")
    records = metric(port, "jurystream_state_restore_records_total")
    restored = metric(port, "jurystream_state_restore_bytes_total")
    child.kill()
    child.wait()
    child, after_kill = owning(argv, port, owned)
    restoring_after_kill = metric(port, "jurystream_state_restore_seconds_sum")
    child.send_signal(signal.SIGTERM)
    child.wait()
    return ready, seconds, records, restored, (after_kill, restoring_after_kill)


def changelog_kinds(bootstrap, topic):
    """Bytes and records of the changelog `topic` by kind of state (a key's third element)."""
    from confluent_kafka import Consumer
    import json as _json
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-breakdown",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    partitions = partitions_of(bootstrap, topic)
    consumer.subscribe([topic])
    kinds, eof = {}, set()
    while len(eof) < partitions:
        m = consumer.poll(1.0)
        if m is None:
            continue
        if m.error():
            eof.add(m.partition())
            continue
        try:
            kind = str(_json.loads(m.key())[2])
        except (ValueError, IndexError, TypeError):
            kind = "?"
        n, b = kinds.get(kind, (0, 0))
        kinds[kind] = (n + 1, b + len(m.key() or b"") + len(m.value() or b""))
    consumer.close()
    return kinds


def cpu_by_thread(pid):
    """CPU seconds of process `pid` by thread name (librdkafka's threads, `rdk:*`, as one)."""
    tick = os.sysconf("SC_CLK_TCK")
    threads = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        name = "librdkafka" if name.startswith("rdk:") else name
        threads[name] = threads.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return threads


def measure(argv, done=None):
    """Runs argv until it exits (or, with `done`, until done() reports every event applied, then
    SIGTERM) and returns (seconds from start to the last event, seconds from the first event to
    the last, CPU seconds, peak RSS in MiB). With `done`, `done.threads` is then the CPU
    seconds by thread name, read just before the SIGTERM."""
    started = time.monotonic()
    env = SERVICE_ENV if done is not None else None
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
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
        done.threads = cpu_by_thread(child.pid)
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


def service_config(prefix, source, scores, bootstrap, port, extra=""):
    """jurystream's configuration for a run: its defaults, with only what names the run (its
    topics, the broker, its group and its HTTP port), plus `extra` (PEERS_SERVICE_CONFIG)."""
    return (
        f'[topics]\nvotes = "{source}"\njudge_scores = "{prefix}.judge-scores"\n'
        f'reputations = "{prefix}.reputations"\nscores = "{scores}"\n'
        f'consensus = "{prefix}.consensus"\nbias_alerts = "{prefix}.bias-alerts"\n'
        f'leaderboard = "{prefix}.leaderboard"\ndead_letters = "{prefix}.dead-letters"\n'
        f'state = "{prefix}.state"\n'
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\ngroup_id = "{prefix}"\n'
        f'[http]\nbind = "127.0.0.1:{port}"\n'
        + extra
    )


def main():
    bootstrap, binary = sys.argv[1:3]
    events = int(sys.argv[3]) if len(sys.argv) > 3 else 300_000
    projects = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000
    run = f"peers-{os.getpid()}"
    source = f"{run}.votes"
    alone = os.environ.get("PEERS_ONLY") == "jurystream"
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
            # More settings for jurystream, e.g. "[reviewers]\nenabled = false\n".
            extra = os.environ.get("PEERS_SERVICE_CONFIG", "")
            f.write(service_config(prefix, source, outputs["jurystream"], bootstrap, port, extra))
        def applied():
            return records_handled(port)

        applied.events = events
        results["jurystream"] = measure([binary, "--config", config, "run"], done=applied)
        restored = ready = after_kill = None
        if not alone:
            # Its stateful tasks: the project log's partitions (`kafka.partitions`, created by
            # the run), or with `by_key` the input's.
            owned = (partitions_of(bootstrap, f"{prefix}-repartition")
                     or partitions_of(bootstrap, source))
            ready, restoring, records, restored, after_kill = restore(
                [binary, "--config", config, "run"], port, owned)
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
    binary_name = os.path.basename(binary)[:15]  # a thread's name is at most 15 bytes
    roles = {binary_name: "applying", "jurystream-poll": "polling", "jurystream-forw": "forwarding"}
    threads = sorted(applied.threads.items(), key=lambda kv: -kv[1])
    print("jurystream CPU by thread: " + ", ".join(
        f"{roles.get(name, name)} {seconds:.2f} s" for name, seconds in threads if seconds >= 0.01))
    input_bytes = sum(len(event(i, projects)) for i in range(events))
    if restored is not None and ready is not None:
        print(f"jurystream changelog: {records:,.0f} records, {restored:,.0f} bytes restored "
              f"({restored / input_bytes:.2f}x the input's {input_bytes:,} bytes); restart to "
              f"every partition restored {ready:.2f} s, of which restoring {restoring:.2f} s")
    after_kill, restoring_after_kill = after_kill or (None, None)
    if after_kill is not None:
        print(f"jurystream restart after kill -9 to every partition restored: {after_kill:.2f} s"
              + (f", of which restoring {restoring_after_kill:.2f} s"
                 if restoring_after_kill is not None else ""))
    if os.environ.get("PEERS_CHANGELOG_KINDS"):
        for kind, (n, b) in sorted(changelog_kinds(bootstrap, f"{prefix}.state").items(),
                                   key=lambda kv: -kv[1][1]):
            print(f"  changelog {kind:<12}{n:>10,} records {b:>14,} bytes "
                  f"({b / input_bytes:.2f}x the input)")
    js_total, js_steady, js_cpu, _ = results["jurystream"]
    for name, (total, steady, cpu, _) in results.items():
        if name != "jurystream":
            ratio = f"{steady / js_steady:.1f}x steady" if js_steady >= 0.1 else "steady too short"
            print(f"jurystream vs {name}: {total / js_total:.1f}x the events/s from start, "
                  f"{ratio}, {cpu / js_cpu:.1f}x less CPU per event")


if __name__ == "__main__":
    main()
