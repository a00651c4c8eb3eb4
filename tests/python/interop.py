"""An independent Kafka client (confluent-kafka) for the interop test.

produce BOOTSTRAP FILE   -- produces the replay-format records in FILE to their partitions
consume BOOTSTRAP PREFIX -- reads PREFIX.scores / .consensus / .dead-letters and prints a summary
"""
import json
import sys

from confluent_kafka import Consumer, Producer, TopicPartition


def produce(bootstrap, path):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for line in open(path):
        r = json.loads(line)
        value = r.get("value")
        p.produce(r["topic"], value=value.encode() if value is not None else None,
                  key=r["key"].encode() if r.get("key") else None,
                  partition=r["partition"], timestamp=r["timestamp_ms"])
        p.poll(0)
    assert p.flush(60) == 0


def read(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-" + topic,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 10, "enable.auto.commit": False})
    md = c.list_topics(topic, timeout=10)
    parts = list(md.topics[topic].partitions)
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    eof, out = set(), []
    while len(eof) < len(parts):
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                eof.add(m.partition())
            continue
        out.append((m.key().decode() if m.key() else None, m.value()))
    c.close()
    return out


def consume(bootstrap, prefix):
    scores = {}
    for k, v in read(bootstrap, prefix + ".scores"):
        scores[k] = json.loads(v)
    consensus = {v for _, v in read(bootstrap, prefix + ".consensus")}
    dead = {v for _, v in read(bootstrap, prefix + ".dead-letters")}
    print(json.dumps({"scores": scores, "consensus": len(consensus), "dead_letters": len(dead)}))


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]](sys.argv[2], sys.argv[3])
