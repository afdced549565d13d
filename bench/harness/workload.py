"""The workloads, generated once from a seed: payment events, duplicates of both kinds (a
producer retry, an SQS redelivery) for the sandbox that saw the first copy and for another one,
refusals, SQS batches as Lambda's event source mapping sends them, and the ledger each must leave."""

import hashlib
import json
import random
import time
import uuid

from .common import ACCOUNT, PROBE, REGION
from .triggers import BUILDERS

QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:payments"


class Message:
    """One delivery: the event, its SQS message id and ApproximateReceiveCount. A producer retry
    is a new message (new id, count 1); an SQS redelivery is the same message again (same id,
    count 2)."""

    __slots__ = ("event", "message_id", "receive_count")

    def __init__(self, event, message_id, receive_count=1):
        self.event, self.message_id, self.receive_count = event, message_id, receive_count


def new_id(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def duplicate(first, k, rng):
    """The k-th duplicate of a first delivery: retries and redeliveries alternate."""
    if k % 2 == 0:
        return Message(first.event, new_id(rng), 1)  # producer retry
    return Message(first.event, first.message_id, 2)  # SQS redelivery


def payment(rng, event_id, account, amount=None, currency="USD"):
    return {
        "event_id": event_id,
        "account_id": account,
        "amount_cents": rng.randint(100, 100_000) if amount is None else amount,
        "currency": currency,
    }


def batches_of(messages, size, rng):
    return [sqs_event(messages[k : k + size], rng) for k in range(0, len(messages), size)]


def spread_duplicates(rng, firsts, duplicates, batch_size, pick):
    """The stream of `firsts` with `duplicates` more messages in it, each at a position after
    the batch that held its first copy (a duplicate arrives after the first attempt, not beside
    it), each event at most once, so no batch holds two copies of one event. `pick(eligible)`
    returns the first delivery to duplicate (removing it from `eligible`)."""
    messages = len(firsts) + duplicates
    dup_slots = set(rng.sample(range(batch_size, messages), duplicates))
    order, eligible, this_batch, nxt, k = [], [], [], 0, 0
    for pos in range(messages):
        if pos % batch_size == 0:
            eligible += this_batch
            this_batch = []
        if pos in dup_slots:
            if not eligible:
                raise SystemExit("too many duplicates for this many events")
            order.append(duplicate(pick(eligible), k, rng))
            k += 1
        else:
            order.append(firsts[nxt])
            this_batch.append(firsts[nxt])
            nxt += 1
    return order


class Mix:
    """The bench mix of one round, credits only (so order does not matter) on `accounts`
    accounts, in SQS batches:

    - sandbox A's stream: `events` first deliveries with a `duplicate_pct` share of duplicates
      re-sent to A itself, each in a later batch than its first copy;
    - sandbox B's stream (another process of the same implementation, its own runtime API): the
      other-sandbox mix, `other_events` new first deliveries with the same share of duplicates of
      events A committed and B never saw;
    - probes, each a batch alone: ten first deliveries to A, their ten duplicates to A, and ten
      duplicates of other events of A's to B.

    Duplicates alternate between a producer retry and an SQS redelivery, in both sandboxes."""

    def __init__(self, events, duplicate_pct, accounts, batch_size, seed, other_events=None):
        if not 0 <= duplicate_pct < 50:
            raise SystemExit("--duplicate-pct must be in [0, 50)")
        rng = random.Random(seed)
        self.batch_size = batch_size
        other_events = max(batch_size, events // 4) if other_events is None else other_events
        acct = lambda: f"acct_{rng.randrange(accounts):02d}"
        mk = lambda prefix, n: [Message(payment(rng, f"pay-{seed}-{prefix}{i:06d}", acct()), new_id(rng)) for i in range(n)]
        # Duplicates are the given share of all deliveries: D / (N + D) = pct.
        share = lambda n: round(n * duplicate_pct / (100 - duplicate_pct))
        firsts_a, firsts_b = mk("", events), mk("b", other_events)
        self.probe_first = mk("probe-", PROBE)
        taken = set()

        def pick_a(eligible):
            m = eligible.pop(rng.randrange(len(eligible)))
            taken.add(m.event["event_id"])
            return m

        self.a = spread_duplicates(rng, firsts_a, share(events), batch_size, pick_a)
        # B's duplicates and its probe: events A committed, never re-sent to A, never twice.
        spare = [m for m in firsts_a if m.event["event_id"] not in taken]
        rng.shuffle(spare)
        other_dups = share(other_events)
        if other_dups + PROBE > len(spare):
            raise SystemExit("too few events for the other sandbox's duplicates")
        pool = spare[:other_dups]
        self.b = spread_duplicates(rng, firsts_b, other_dups, 1, lambda eligible: pool.pop())
        self.probe_dup_same = [duplicate(m, k, rng) for k, m in enumerate(self.probe_first)]
        self.probe_dup_other = [duplicate(m, k, rng) for k, m in enumerate(spare[other_dups : other_dups + PROBE])]
        self.a_batches = batches_of(self.a, batch_size, rng)
        self.b_batch_cache = {}
        self.rng = rng
        self.probes = {
            "first": sqs_event(self.probe_first, rng),
            "dup_same": sqs_event(self.probe_dup_same, rng),
            "dup_other": sqs_event(self.probe_dup_other, rng),
        }
        self.events = firsts_a
        self.duplicates, self.other_duplicates = share(events), other_dups

    def b_batches(self, size=None):
        """B's stream in batches of `size` (default the mix's): batch 1 is the one-by-one path."""
        size = size or self.batch_size
        if size not in self.b_batch_cache:
            self.b_batch_cache[size] = batches_of(self.b, size, random.Random(size))
        return self.b_batch_cache[size]

    def deliveries(self):
        """Every delivery in the order the sandboxes get them (A's stream, A's probes, B's)."""
        return [m.event for m in self.a + self.probe_first + self.probe_dup_same + self.b + self.probe_dup_other]

    @property
    def messages(self):
        return len(self.a)

    @property
    def other_messages(self):
        return len(self.b)


def sqs_event(messages, rng):
    """An SQS event as Lambda's event source mapping sends it."""
    now_ms = str(int(time.time() * 1000))
    records = []
    for m in messages:
        body = json.dumps(m.event, separators=(",", ":"))
        records.append(
            {
                "messageId": m.message_id,
                "receiptHandle": f"AQEB{rng.getrandbits(64):016x}",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": str(m.receive_count),
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
    """One row of the batch-size table: first deliveries only, in batches of one size, spread
    over many accounts or hot on a few, on `trigger` (the standard queue, or one of
    `triggers.BUILDERS`: SQS FIFO, Kafka, Kinesis); `refusals`:

    - None: credits only;
    - "currency": every batch holds, for each account, one event in another currency (EUR)
      among its credits (never an account's first event);
    - "mixed": credits with about 5 % debits (large enough that the early ones overdraw) and 2 %
      events in another currency, each account's first event a credit."""

    def __init__(self, label, batch_size, accounts, events, seed, refusals=None, trigger="sqs"):
        self.label, self.batch_size, self.accounts, self.refusals = label, batch_size, accounts, refusals
        self.trigger = trigger
        rng = random.Random(seed)
        names = [f"acct_{a:02d}" for a in range(accounts)]
        firsts, seen = [], set()
        for i in range(events):
            account = rng.choice(names)
            amount, currency = None, "USD"
            if account in seen and refusals == "mixed":
                roll = rng.random()
                if roll < 0.05:
                    amount = -rng.randint(1, 3_000_000)
                elif roll < 0.07:
                    currency = "EUR"
            seen.add(account)
            firsts.append(Message(payment(rng, f"pay-{seed}-{label}-{i:06d}", account, amount, currency), new_id(rng)))
        if refusals == "currency":
            seen = set()
            for k in range(0, events, batch_size):
                by_account = {}
                for m in firsts[k : k + batch_size]:
                    a = m.event["account_id"]
                    if a in seen:
                        by_account.setdefault(a, []).append(m)
                    seen.add(a)
                for ms in by_account.values():
                    rng.choice(ms).event["currency"] = "EUR"
        self.messages = firsts
        if trigger == "sqs":
            self.batches = batches_of(firsts, batch_size, rng)
        else:
            self.batches = BUILDERS[trigger](firsts, batch_size, rng)

    @property
    def key(self):
        base = f"{self.label}-{self.batch_size}"
        return base if self.trigger == "sqs" else f"{self.trigger}-{base}"

    @property
    def title(self):
        what = {None: "", "currency": ", one other-currency event per account a batch",
                "mixed": ", overdrafts and other-currency events"}[self.refusals]
        return f"{self.label} ({self.accounts} accounts{what})"

    def deliveries(self):
        return [m.event for m in self.messages]


def expected_ledger(deliveries, every_delivery):
    """The ledger a run must leave: (entries {event id: (pk, amount, currency)}, balances
    {pk: (balance, entry count, currency)}, refused events).

    every_delivery=False is the contract: the valid events posted one by one in order, each once
    (a duplicate changes nothing); an account's currency is set by its first applied event; an
    event in another currency, or a debit below zero, is refused (nothing posted).
    every_delivery=True is the floor: no idempotency and no condition, so every delivery is
    posted (its entry written again, the balance moved again), nothing refused, the balance's
    currency that of the account's first delivery."""
    entries, balances, seen, refused = {}, {}, set(), 0
    for e in deliveries:
        if not every_delivery:
            if e["event_id"] in seen:
                continue
            seen.add(e["event_id"])
        pk, amount, currency = f"account#{e['account_id']}", e["amount_cents"], e["currency"]
        b = balances.get(pk)
        if not every_delivery and (
            (b is not None and b[2] != currency) or (b[0] if b else 0) + amount < 0
        ):
            refused += 1
            continue
        entries[e["event_id"]] = (pk, amount, currency)
        balances[pk] = (amount, 1, currency) if b is None else (b[0] + amount, b[1] + 1, b[2])
    return entries, balances, refused
