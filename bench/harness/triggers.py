"""The ordered triggers beside the standard queue (issue 38): the same payments as Lambda's event
source mappings hand them over on an SQS FIFO queue (message group = account), a Kafka topic of
3 partitions (key = account, so each account in one partition and each partition carrying
several accounts) and a Kinesis stream (partition key = account), each served by ours on its
ordered path. The table and issue 38's targets on it are report.py's."""

import base64
import hashlib
import json
import time

from .common import ACCOUNT, REGION

FIFO_QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:payments.fifo"
KAFKA_ARN = f"arn:aws:kafka:{REGION}:{ACCOUNT}:cluster/payments/0b1f4e9c-bench"
KINESIS_ARN = f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/payments"
TOPIC, PARTITIONS = "payments", 3

# The triggers in the table's order; "sqs" is the standard queue of the other tables.
TRIGGERS = ("sqs", "fifo", "kafka", "kinesis")
TITLES = {"sqs": "SQS standard", "fifo": "SQS FIFO, group = account", "kafka": "Kafka, 3 partitions, key = account",
          "kinesis": "Kinesis, partition key = account"}
# Issue 38's targets on the ordered triggers, first deliveries: {batch size: (requests, write units)}
# a message. Its write units are those of its workload, a batch of 10 on 3 accounts (one balance
# update an account a batch); on more accounts the target is the standard queue's own figure.
TARGETS = {10: (0.12, 4.8), 100: (0.06, None)}
# The rows' accounts: (label, accounts or None for --accounts / --hot-accounts).
FEW = 3


def murmur2(data):
    """Kafka's `Utils.murmur2`, the hash of the Java client's default partitioner (written out: no
    maintained package carries Kafka's variant of it)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    whole = len(data) - len(data) % 4
    for k in range(0, whole, 4):
        x = int.from_bytes(data[k : k + 4], "little")
        x = (x * m) & mask
        x ^= x >> 24
        x = (x * m) & mask
        h = ((h * m) & mask) ^ x
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)


def partition_of(account):
    """The account's partition, as a producer keyed by account gets it from Kafka's default
    partitioner: murmur2 of the key, positive, modulo the partitions."""
    return (murmur2(account.encode()) & 0x7FFFFFFF) % PARTITIONS


def body(message):
    return json.dumps(message.event, separators=(",", ":"))


def b64(text):
    return base64.b64encode(text.encode()).decode()


def fifo_batches(messages, size, rng):
    """SQS FIFO batches: each message in its account's message group, sequence numbers rising."""
    now_ms = str(int(time.time() * 1000))
    out = []
    for k in range(0, len(messages), size):
        records = []
        for n, m in enumerate(messages[k : k + size], start=k):
            text = body(m)
            records.append({
                "messageId": m.message_id, "receiptHandle": f"AQEB{rng.getrandbits(64):016x}", "body": text,
                "attributes": {"ApproximateReceiveCount": str(m.receive_count), "SentTimestamp": now_ms,
                               "SenderId": "AIDAEXAMPLE", "ApproximateFirstReceiveTimestamp": now_ms,
                               "SequenceNumber": f"{18_849_496_460_467_696_128 + n}",
                               "MessageGroupId": m.event["account_id"], "MessageDeduplicationId": m.event["event_id"]},
                "messageAttributes": {}, "md5OfBody": hashlib.md5(text.encode()).hexdigest(),
                "eventSource": "aws:sqs", "eventSourceARN": FIFO_QUEUE_ARN, "awsRegion": REGION,
            })
        out.append(json.dumps({"Records": records}).encode())
    return out


def kafka_batches(messages, size, rng):
    """`aws:kafka` events: each batch's records under `topic-partition`, offsets rising per partition."""
    offsets = [0] * PARTITIONS
    now_ms = int(time.time() * 1000)
    out = []
    for k in range(0, len(messages), size):
        records = {}
        for m in messages[k : k + size]:
            account = m.event["account_id"]
            p = partition_of(account)
            records.setdefault(f"{TOPIC}-{p}", []).append({
                "topic": TOPIC, "partition": p, "offset": offsets[p], "timestamp": now_ms,
                "timestampType": "CREATE_TIME", "key": b64(account), "value": b64(body(m)), "headers": [],
            })
            offsets[p] += 1
        out.append(json.dumps({"eventSource": "aws:kafka", "eventSourceArn": KAFKA_ARN,
                               "bootstrapServers": "b-1.payments.kafka.us-east-1.amazonaws.com:9098",
                               "records": records}).encode())
    return out


def kinesis_batches(messages, size, rng):
    """`aws:kinesis` events on one shard: partition key = account, sequence numbers rising."""
    now = round(time.time(), 3)  # milliseconds, as Lambda sends it (aws_lambda_events refuses finer)
    out = []
    for k in range(0, len(messages), size):
        records = []
        for n, m in enumerate(messages[k : k + size], start=k):
            sequence = f"4959{n:052d}"
            records.append({
                "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": m.event["account_id"],
                            "sequenceNumber": sequence, "data": b64(body(m)), "approximateArrivalTimestamp": now},
                "eventSource": "aws:kinesis", "eventVersion": "1.0", "eventID": f"shardId-000000000000:{sequence}",
                "eventName": "aws:kinesis:record", "invokeIdentityArn": f"arn:aws:iam::{ACCOUNT}:role/payments",
                "awsRegion": REGION, "eventSourceARN": KINESIS_ARN,
            })
        out.append(json.dumps({"Records": records}).encode())
    return out


BUILDERS = {"fifo": fifo_batches, "kafka": kafka_batches, "kinesis": kinesis_batches}
