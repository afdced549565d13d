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
    """Exactly one entry per unique event; each balance the sum of its events. Else: fail."""
    items = aws.scan(ledger)
    entries = {i["sk"][len("entry#") :]: i for i in items if i["sk"].startswith("entry#")}
    balances = {i["pk"]: i for i in items if i["sk"] == "balance"}
    n_entries = sum(1 for i in items if i["sk"].startswith("entry#"))
    problems = []
    if n_entries != len(expected):
        problems.append(f"{n_entries} ledger entries, {len(expected)} unique events")
    sums, counts = {}, {}
    for e in expected:
        pk = f"account#{e['account_id']}"
        sums[pk] = sums.get(pk, 0) + e["amount_cents"]
        counts[pk] = counts.get(pk, 0) + 1
        entry = entries.get(e["event_id"])
        if entry is None:
            problems.append(f"no entry for {e['event_id']}")
        elif entry["pk"] != pk or int(entry["amount_cents"]) != e["amount_cents"] or entry["currency"] != "USD":
            problems.append(f"entry of {e['event_id']} is wrong: {entry}")
    if set(balances) != set(sums):
        problems.append(f"balance items for {len(balances)} accounts, {len(sums)} expected")
    wrong = 0
    for pk, total in sums.items():
        b = balances.get(pk)
        if b is None or int(b["balance_cents"]) != total or int(b["entry_count"]) != counts[pk] or b["currency"] != "USD":
            wrong += 1
            if wrong <= 5:
                problems.append(f"{pk}: balance {b and b.get('balance_cents')} count {b and b.get('entry_count')}, "
                                f"expected {total} over {counts[pk]}")
    if problems:
        raise BenchError(f"{name}: the ledger is wrong:\n  " + "\n  ".join(problems[:20]))
    return {"entries": n_entries, "accounts": len(balances), "wrong_balances": wrong}
