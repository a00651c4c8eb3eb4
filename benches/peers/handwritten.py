"""The hand-written peer: a confluent-kafka consumer that keeps each project's HumanJudge score
in a dict and publishes every update, committing after its outputs are delivered.

usage: handwritten.py BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC GROUP EVENTS
Exits once it has applied EVENTS records."""

import json
import sys
import time

from confluent_kafka import Consumer, Producer

import humanjudge


def main():
    bootstrap, source, sink, group, events = sys.argv[1:6]
    events = int(events)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": "cooperative-sticky",
        "fetch.wait.max.ms": 10,
    })
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True})
    consumer.subscribe([source])
    projects = {}
    done = committed = 0

    def commit():
        # Only what was applied since the last commit (committing nothing new is an error).
        nonlocal committed
        if done > committed:
            producer.flush()
            consumer.commit(asynchronous=False)
            committed = done

    while done < events:
        for msg in consumer.consume(num_messages=512, timeout=0.1):
            if msg.error():
                continue
            try:
                batch = json.loads(msg.value())
                project = batch["project_id"]
                projects[project], record = humanjudge.update(projects.get(project), batch)
            except (ValueError, KeyError, TypeError):
                record = None
            if record is not None:
                while True:
                    try:
                        producer.produce(sink, key=project, value=record)
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.poll(0)
            done += 1
            if done == 1:
                print(f"first {time.monotonic()}", flush=True)
        if done - committed >= 50_000:
            commit()
    print(f"last {time.monotonic()}", flush=True)
    commit()
    consumer.close()


if __name__ == "__main__":
    main()
