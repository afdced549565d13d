"""Smoke check of the local Kafka broker (infra/local/kafka.sh smoke) with a standard client.

Creates a fresh topic, produces three records with acks=all, consumes them in a consumer group
with auto-commit off, commits the offsets, and reads the committed offset back twice: from the
group coordinator through the consumer, and through the admin API. A second consumer in the same
group must then start at the committed offset and see nothing. Exits non-zero on any mismatch.
"""

import argparse
import sys
import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic


def fail(message):
    print(f"smoke: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="127.0.0.1:9094")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()

    suffix = uuid.uuid4().hex[:8]
    topic = f"smoke-{suffix}"
    group = f"smoke-group-{suffix}"
    values = [f"record-{i}".encode() for i in range(3)]
    common = {"bootstrap_servers": args.bootstrap, "request_timeout_ms": 10000}

    admin = KafkaAdminClient(client_id="smoke-admin", **common)
    admin.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=1)])
    print(f"smoke: created topic {topic} (1 partition)")

    producer = KafkaProducer(client_id="smoke-producer", acks="all", **common)
    for i, value in enumerate(values):
        meta = producer.send(topic, key=f"key-{i}".encode(), value=value).get(timeout=args.timeout)
        print(f"smoke: produced {value.decode()} at partition {meta.partition} offset {meta.offset}")
    producer.close()

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(
        topic,
        client_id="smoke-consumer",
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **common,
    )
    seen = []
    deadline = time.monotonic() + args.timeout
    while len(seen) < len(values) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            for record in records:
                print(f"smoke: consumed {record.value.decode()} at offset {record.offset} (group {group})")
                seen.append(record.value)
    if seen != values:
        fail(f"consumed {seen!r}, expected {values!r}")
    consumer.commit()
    committed = consumer.committed(tp)
    print(f"smoke: committed offset {committed} for {topic}-0")
    if committed != len(values):
        fail(f"committed offset {committed}, expected {len(values)}")
    consumer.close()

    offsets = admin.list_group_offsets({group: [tp]}).get(group, {})
    admin_offset = offsets.get(tp)
    print(f"smoke: admin API reads group {group} at offset {admin_offset.offset if admin_offset else None}")
    if admin_offset is None or admin_offset.offset != len(values):
        fail(f"admin API reads {offsets!r}")

    again = KafkaConsumer(
        topic,
        client_id="smoke-consumer-2",
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **common,
    )
    replayed = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for records in again.poll(timeout_ms=500).values():
            replayed.extend(record.value for record in records)
        if again.assignment():
            break
    # Poll once more after the assignment so a wrong start offset would show.
    for records in again.poll(timeout_ms=1000).values():
        replayed.extend(record.value for record in records)
    position = again.position(tp) if tp in again.assignment() else None
    again.close()
    print(f"smoke: a second consumer in the group starts at offset {position} and reads {len(replayed)} records")
    if replayed or position != len(values):
        fail(f"second consumer read {replayed!r} from position {position}")

    try:
        admin.delete_topics([topic])
    except Exception as err:  # cleanup only: the in-memory broker forgets it on `down` anyway
        print(f"smoke: could not delete {topic}: {err!r}")
    admin.close()
    print("smoke: OK")


if __name__ == "__main__":
    main()
