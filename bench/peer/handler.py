"""The Powertools peer of `make bench`: the payments consumer as a Powertools user writes it.

Same SQS trigger, payment event contract and ledger table contract as `payments-consumer`:

- the batch utility (`BatchProcessor(event_type=EventType.SQS)`, `process_partial_response`)
  reports failed records as `batchItemFailures`;
- the idempotency utility (`@idempotent_function` keyed on the business `event_id`, with the
  DynamoDB persistence layer) claims each event with a conditional PutItem, runs the post, and
  completes the record with an UpdateItem; a duplicate is one failed conditional PutItem whose
  ALL_OLD image is the stored answer;
- the ledger post is one boto3 TransactWriteItems: the entry put with `attribute_not_exists(pk)`
  and the balance update with the currency / overdraft condition.

Nothing here is tuned either way: it is the documented pattern, with the defaults, but for the
one option the bench sets per column (`PEER_LOCAL_CACHE`, read once at init):

- `0` (default): `IdempotencyConfig(event_key_jmespath="event_id")`, every other option at
  Powertools' default (`use_local_cache=False`, `expires_after_seconds=3600`, no payload
  validation);
- `1`: the same plus `use_local_cache=True, local_cache_max_items=10_000`: the sandbox remembers
  the answers of the last 10,000 keys it saw (as many as ours remembers), so a duplicate it has
  seen is answered with no request.

It runs under `awslambdaric` (`python -m awslambdaric handler.lambda_handler`), the runtime
interface client of Lambda's Python runtime.
"""

import json
import os
import re
from datetime import datetime, timezone

import boto3
from botocore.exceptions import ClientError

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

LEDGER_TABLE = os.environ["LEDGER_TABLE"]

processor = BatchProcessor(event_type=EventType.SQS)
persistence_layer = DynamoDBPersistenceLayer(table_name=os.environ["IDEMPOTENCY_TABLE"])
LOCAL_CACHE = os.environ.get("PEER_LOCAL_CACHE", "0") == "1"
config = IdempotencyConfig(
    event_key_jmespath="event_id",
    **({"use_local_cache": True, "local_cache_max_items": 10_000} if LOCAL_CACHE else {}),
)
dynamodb = boto3.client("dynamodb")

_ID = re.compile(r"^[A-Za-z0-9._:#-]{1,200}$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")


class InvalidPayment(ValueError):
    """A malformed payment event: the record fails (and reaches the DLQ after its retries)."""


def parse_payment(body: str) -> dict:
    """The payment event contract, checked the way a careful handler would."""
    payment = json.loads(body)
    if not isinstance(payment, dict):
        raise InvalidPayment("body is not a JSON object")
    for field in ("event_id", "account_id"):
        if not isinstance(payment.get(field), str) or not _ID.match(payment[field]):
            raise InvalidPayment(f"{field}: invalid")
    amount = payment.get("amount_cents")
    if type(amount) is not int or amount == 0 or abs(amount) > 10**12:
        raise InvalidPayment("amount_cents: invalid")
    if not isinstance(payment.get("currency"), str) or not _CURRENCY.match(payment["currency"]):
        raise InvalidPayment("currency: invalid")
    email = payment.get("receipt_email")
    if email is not None and (not isinstance(email, str) or "@" not in email):
        raise InvalidPayment("receipt_email: invalid")
    return payment


@idempotent_function(data_keyword_argument="payment", config=config, persistence_store=persistence_layer)
def post_payment(payment: dict) -> dict:
    """Posts the entry and moves the balance in one transaction; a rejection is an answer too."""
    account_pk = f"account#{payment['account_id']}"
    amount = payment["amount_cents"]
    currency = payment["currency"]
    posted_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    values = {
        ":z": {"N": "0"},
        ":a": {"N": str(amount)},
        ":c": {"S": currency},
        ":one": {"N": "1"},
    }
    if amount > 0:
        condition = "attribute_not_exists(pk) OR currency = :c"
    else:
        condition = "currency = :c AND balance_cents >= :needed"
        values[":needed"] = {"N": str(-amount)}
    try:
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": LEDGER_TABLE,
                        "Item": {
                            "pk": {"S": account_pk},
                            "sk": {"S": f"entry#{payment['event_id']}"},
                            "amount_cents": {"N": str(amount)},
                            "currency": {"S": currency},
                            "event_id": {"S": payment["event_id"]},
                            "posted_at": {"S": posted_at},
                        },
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Update": {
                        "TableName": LEDGER_TABLE,
                        "Key": {"pk": {"S": account_pk}, "sk": {"S": "balance"}},
                        "UpdateExpression": "SET balance_cents = if_not_exists(balance_cents, :z) + :a, "
                        "currency = if_not_exists(currency, :c) ADD entry_count :one",
                        "ConditionExpression": condition,
                        "ExpressionAttributeValues": values,
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
            ]
        )
    except ClientError as e:
        if e.response["Error"]["Code"] != "TransactionCanceledException":
            raise
        reasons = [r.get("Code") for r in e.response.get("CancellationReasons", [])]
        if reasons[:1] == ["ConditionalCheckFailed"]:
            # The entry exists: posted by an earlier attempt whose record was lost or expired.
            return {"outcome": "applied"}
        if reasons[1:2] == ["ConditionalCheckFailed"]:
            return {"outcome": "rejected"}
        raise
    return {"outcome": "applied"}


def record_handler(record: SQSRecord) -> dict:
    return post_payment(payment=parse_payment(record.body))


def lambda_handler(event, context):
    config.register_lambda_context(context)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
