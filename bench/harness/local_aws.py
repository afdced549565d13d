"""The local AWS the bench runs against: its request and write-unit counters
(`/_local-aws/requests`), the tables of a run, and the ledger check after it."""

import json
import urllib.request

import boto3
from boto3.dynamodb.types import TypeDeserializer
from botocore.config import Config as BotoConfig

from .common import REGION, BenchError


class LocalAws:
    def __init__(self, endpoint):
        self.endpoint = endpoint.rstrip("/")
        self.dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=BotoConfig(retries={"max_attempts": 2, "mode": "standard"}),
        )

        self.sqs = boto3.client("sqs", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="test",
                                aws_secret_access_key="test")

    def create_queue(self, name):
        """A queue's URL (the stream functions' park queue), created if missing."""
        return self.sqs.create_queue(QueueName=name)["QueueUrl"]

    def queue_depth(self, url):
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])

    def route(self, path, method="GET"):
        req = urllib.request.Request(self.endpoint + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def check(self):
        try:
            self.route("/_local-aws/health")
            self.route("/_local-aws/requests")
        except Exception as e:
            raise BenchError(
                f"the local AWS at {self.endpoint} has no /_local-aws/requests route ({e}); "
                "start it with infra/local/aws.sh up"
            )

    def reset(self):
        self.route("/_local-aws/requests/reset", "POST")

    def set_latency(self, ms):
        """Every DynamoDB request from now on waits `ms` before it is served (0: none)."""
        try:
            self.route(f"/_local-aws/latency?ms={int(ms)}", "POST")
        except Exception as e:
            raise BenchError(f"the local AWS at {self.endpoint} cannot hold requests ({e}): restart it") from e

    def requests(self):
        """DynamoDB requests served since the last reset, by operation."""
        counts = self.route("/_local-aws/requests")["requests"]
        return {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("dynamodb:")}

    def write_units(self):
        """Modelled DynamoDB write units of the requests served since the last reset (serve.py:
        a put its item's size in 1 KB units, an update or check 1, twice inside a transaction)."""
        units = self.route("/_local-aws/requests").get("write_units")
        if units is None:
            raise BenchError(f"the local AWS at {self.endpoint} does not model write units: restart it")
        return sum(v for k, v in units.items() if k.startswith("dynamodb:"))

    def counts(self):
        """(requests, write units) served since the last reset, DynamoDB's only, in one read."""
        body = self.route("/_local-aws/requests")
        if body.get("write_units") is None:
            raise BenchError(f"the local AWS at {self.endpoint} does not model write units: restart it")
        requests = sum(v for k, v in body["requests"].items() if k.startswith("dynamodb:"))
        return requests, sum(v for k, v in body["write_units"].items() if k.startswith("dynamodb:"))

    def create_tables(self, prefix):
        idem, ledger = f"{prefix}-idempotency", f"{prefix}-ledger"
        self.dynamodb.create_table(
            TableName=idem,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.dynamodb.create_table(
            TableName=ledger,
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            BillingMode="PAY_PER_REQUEST",
        )
        return idem, ledger

    def delete_tables(self, *names):
        for name in names:
            try:
                self.dynamodb.delete_table(TableName=name)
            except self.dynamodb.exceptions.ResourceNotFoundException:
                pass

    def scan(self, table):
        deserialize = TypeDeserializer().deserialize
        items, start = [], None
        while True:
            kwargs = {"TableName": table, "ConsistentRead": True}
            if start:
                kwargs["ExclusiveStartKey"] = start
            out = self.dynamodb.scan(**kwargs)
            items += [{k: deserialize(v) for k, v in item.items()} for item in out.get("Items", [])]
            start = out.get("LastEvaluatedKey")
            if not start:
                return items


def verify_ledger(aws, ledger, expected, name):
    """The ledger holds exactly `expected` (workload.expected_ledger): one entry per posted event
    with its account, amount and currency, and per account its balance, entry count and currency.
    Else: fail."""
    want_entries, want_balances, refused = expected
    items = aws.scan(ledger)
    entries = {i["sk"][len("entry#") :]: i for i in items if i["sk"].startswith("entry#")}
    balances = {i["pk"]: i for i in items if i["sk"] == "balance"}
    n_entries = sum(1 for i in items if i["sk"].startswith("entry#"))
    problems = []
    if n_entries != len(want_entries):
        problems.append(f"{n_entries} ledger entries, {len(want_entries)} expected")
    for event_id, (pk, amount, currency) in want_entries.items():
        entry = entries.get(event_id)
        if entry is None:
            problems.append(f"no entry for {event_id}")
        elif entry["pk"] != pk or int(entry["amount_cents"]) != amount or entry["currency"] != currency:
            problems.append(f"entry of {event_id} is wrong: {entry}")
    if set(balances) != set(want_balances):
        problems.append(f"balance items for {len(balances)} accounts, {len(want_balances)} expected")
    wrong = 0
    for pk, (total, count, currency) in want_balances.items():
        b = balances.get(pk)
        if b is None or int(b["balance_cents"]) != total or int(b["entry_count"]) != count or b["currency"] != currency:
            wrong += 1
            if wrong <= 5:
                problems.append(f"{pk}: balance {b and b.get('balance_cents')} count {b and b.get('entry_count')} "
                                f"currency {b and b.get('currency')}, expected {total} over {count} in {currency}")
    if problems:
        raise BenchError(f"{name}: the ledger is wrong:\n  " + "\n  ".join(problems[:20]))
    return {"entries": n_entries, "accounts": len(balances), "refused": refused}
