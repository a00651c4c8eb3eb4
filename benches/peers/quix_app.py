"""The Quix Streams peer: the same HumanJudge update in a Quix Streams application, with its
stateful per-key store (RocksDB, backed by a changelog topic) keyed by the record key, the
project id; every update is published to the output topic.

usage: quix_app.py BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC GROUP EVENTS STATE_DIR
Exits once it has applied EVENTS records."""

import sys
import time

from quixstreams import Application
from quixstreams.models import TopicConfig

import humanjudge


def main():
    bootstrap, source, sink, group, events, state_dir = sys.argv[1:7]
    events = int(events)
    # tansu rejects topics created without retention.ms; the changelog topics Quix creates for
    # its state follow the input topic's configuration.
    config = TopicConfig(num_partitions=3, replication_factor=1, extra_config={"retention.ms": "-1"})
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        loglevel="WARNING",
        consumer_extra_config={"fetch.wait.max.ms": 10},
    )
    topic = app.topic(source, value_deserializer="json", config=config)
    out = app.topic(sink, value_serializer="str", config=config)
    seen = {"n": 0}

    def apply(batch, state):
        new, record = humanjudge.update(state.get("project"), batch)
        state.set("project", new)
        return record

    def count(_):
        seen["n"] += 1
        if seen["n"] == 1:
            print(f"first {time.monotonic()}", flush=True)
        if seen["n"] >= events:
            print(f"last {time.monotonic()}", flush=True)
            app.stop()

    sdf = app.dataframe(topic)
    sdf = sdf.apply(apply, stateful=True)
    sdf = sdf.update(count)
    sdf = sdf.filter(lambda record: record is not None)
    sdf.to_topic(out)
    app.run()


if __name__ == "__main__":
    main()
