"""The demo stack's producer: streams examples/demo.jsonl into the broker in a loop, a record
every PRODUCER_INTERVAL seconds, each round with fresh event and session ids and the current time,
so scores move, sessions complete and the dashboard has something to show. The demo's malformed
records stay as they are: they arrive on jury.dead-letters with their reasons."""

import json
import os
import time
from datetime import datetime, timezone

from confluent_kafka import Producer

BOOTSTRAP = os.environ.get("BOOTSTRAP_SERVERS", "kafka:9092")
DEMO = os.environ.get("DEMO_FILE", "/demo/demo.jsonl")
INTERVAL = float(os.environ.get("PRODUCER_INTERVAL", "0.5"))


def fresh(value, round_no):
    """The demo record `value` as sent in round `round_no`: its ids made unique, its time now."""
    if not isinstance(value, dict):
        return value
    value = dict(value)
    for field in ("event_id", "session_id"):
        if field in value:
            value[field] = f"{value[field]}-r{round_no}"
    if "occurred_at" in value:
        value["occurred_at"] = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return value


def main():
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    with open(DEMO) as f:
        records = [json.loads(line) for line in f if line.strip()]
    round_no = 0
    while True:
        for record in records:
            value = fresh(record["value"], round_no)
            payload = None if value is None else (
                value if isinstance(value, str) else json.dumps(value))
            producer.produce(record["topic"], key=record.get("key"), value=payload)
            producer.poll(0)
            time.sleep(INTERVAL)
        producer.flush()
        print(f"round {round_no}: {len(records)} records sent", flush=True)
        round_no += 1


if __name__ == "__main__":
    main()
