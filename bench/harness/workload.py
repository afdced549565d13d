"""The workload, generated once from a seed: payment events, duplicates re-sent in later batches
under new message ids, SQS batches as Lambda's event source mapping sends them."""

import hashlib
import json
import random
import time
import uuid

from .common import ACCOUNT, PROBE, REGION

QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:payments"


class Workload:
    """Deliveries in SQS batches, generated once from a seed; the same bytes for every run."""

    def __init__(self, events, duplicate_pct, accounts, batch_size, seed):
        rng = random.Random(seed)
        if not 0 <= duplicate_pct < 50:
            raise SystemExit("--duplicate-pct must be in [0, 50)")
        self.batch_size = batch_size
        self.events = [self.event(rng, f"pay-{seed}-{i:06d}", accounts) for i in range(events)]
        # Duplicates are the given share of all deliveries: D / (N + D) = pct.
        duplicates = round(events * duplicate_pct / (100 - duplicate_pct))
        messages = events + duplicates
        # Which positions of the stream carry a duplicate: any but the first batch's. A duplicate
        # re-sends the body of an event whose first delivery was in an earlier batch (a producer
        # retry arrives after the first attempt, not beside it), each event at most once, so no
        # batch holds two copies of one event and every count below is exact.
        dup_slots = set(rng.sample(range(batch_size, messages), duplicates))
        order, eligible, this_batch, next_first = [], [], [], 0
        for pos in range(messages):
            if pos % batch_size == 0:
                eligible += this_batch
                this_batch = []
            if pos in dup_slots:
                if not eligible:
                    raise SystemExit("too many duplicates for this many events")
                order.append((eligible.pop(rng.randrange(len(eligible))), True))
            else:
                order.append((next_first, False))
                this_batch.append(next_first)
                next_first += 1
        self.order = order
        self.first_deliveries = sum(1 for _, dup in order if not dup)
        self.duplicates = sum(1 for _, dup in order if dup)
        self.bodies = [json.dumps(e, separators=(",", ":")) for e in self.events]
        self.batches = [
            sqs_event([self.bodies[i] for i, _ in order[k : k + batch_size]], rng)
            for k in range(0, len(order), batch_size)
        ]
        # The probes: ten more first deliveries alone, then their ten duplicates alone.
        self.probe_events = [self.event(rng, f"pay-{seed}-probe-{k:02d}", accounts) for k in range(PROBE)]
        probe_bodies = [json.dumps(e, separators=(",", ":")) for e in self.probe_events]
        self.probe_first = sqs_event(probe_bodies, rng)
        self.probe_duplicate = sqs_event(probe_bodies, rng)

    @staticmethod
    def event(rng, event_id, accounts):
        return {
            "event_id": event_id,
            "account_id": f"acct_{rng.randrange(accounts):02d}",
            "amount_cents": rng.randint(100, 100_000),
            "currency": "USD",
        }

    @property
    def messages(self):
        return len(self.order)

    def expected(self):
        """Every unique event the ledger must hold after a run, probes included."""
        return self.events + self.probe_events


def sqs_event(bodies, rng):
    """An SQS event as Lambda's event source mapping sends it; new message ids, as retries get."""
    now_ms = str(int(time.time() * 1000))
    records = []
    for body in bodies:
        records.append(
            {
                "messageId": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "receiptHandle": f"AQEB{rng.getrandbits(64):016x}",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now_ms,
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": now_ms,
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": QUEUE_ARN,
                "awsRegion": REGION,
            }
        )
    return json.dumps({"Records": records}).encode()


class Scenario:
    """One row of the batch-size table: first deliveries only (no duplicates), in batches of one
    size, spread over many accounts or hot on a few."""

    def __init__(self, label, batch_size, accounts, events, seed):
        self.label, self.batch_size, self.accounts = label, batch_size, accounts
        self.workload = Workload(events, 0, accounts, batch_size, seed)

    @property
    def key(self):
        return f"{self.label}-{self.batch_size}"
