//! Which keys of the idempotency, ledger and outbox tables each role may touch: the relay never
//! a payment's record, the consumer never an email marker, each function what it needs on its
//! own keys and nothing else, the Kinesis, Kafka and API roles scoped to their prefixes.

use payments::outbox;
use serde_json::json;

use crate::iam::{allows, Request};
use crate::{api_record, email_marker, payment_record, template, API, CONSUMER, KAFKA, KINESIS, RELAY, WRITES};

#[test]
fn the_relay_cannot_touch_payment_records_and_the_consumer_cannot_touch_email_markers() {
    let t = template();
    let (payment, marker) = (payment_record(), email_marker());
    for action in WRITES {
        let (on_payment, on_marker) = (
            Request { action, table: "IdempotencyTable", key: &payment },
            Request { action, table: "IdempotencyTable", key: &marker },
        );
        assert!(
            !allows(&t, RELAY, on_payment),
            "the relay may {action} {payment}: it could erase a recorded rejection"
        );
        assert!(
            !allows(&t, CONSUMER, on_marker),
            "the consumer may {action} {marker}: it could overwrite an email marker"
        );
    }
    // Nor under any other prefix a function does not own: the grants are by prefix, not by
    // "anything but the other's".
    for role in [CONSUMER, RELAY] {
        let stranger = Request { action: "dynamodb:PutItem", table: "IdempotencyTable", key: "other#pay_0001" };
        assert!(!allows(&t, role, stranger), "{role} may write a key no function owns");
    }
}

#[test]
fn each_function_keeps_what_it_needs_on_its_own_keys() {
    let t = template();
    let (payment, marker, row) = (payment_record(), email_marker(), outbox::row_key("pay_0001"));
    // The consumer's transaction: the record, the entry, the balance, the outbox row; and a read
    // of its record when a cancellation carries no item.
    for action in ["dynamodb:PutItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &payment };
        assert!(allows(&t, CONSUMER, request), "the consumer needs {action} on {payment}");
    }
    assert!(allows(&t, CONSUMER, Request { action: "dynamodb:PutItem", table: "OutboxTable", key: &row }));
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem"] {
        let request = Request { action, table: "LedgerTable", key: "account#acct_42" };
        assert!(allows(&t, CONSUMER, request), "the consumer needs {action} on the ledger");
    }
    // The relay: claim, complete, release and read a marker; mark a row.
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &marker };
        assert!(allows(&t, RELAY, request), "the relay needs {action} on {marker}");
    }
    assert!(allows(&t, RELAY, Request { action: "dynamodb:UpdateItem", table: "OutboxTable", key: &row }));
    // And nothing more on the rows: the consumer never rewrites one, the relay never makes one.
    let consumer_update = Request { action: "dynamodb:UpdateItem", table: "OutboxTable", key: &row };
    assert!(!allows(&t, CONSUMER, consumer_update), "the consumer may rewrite a receipt row");
    for action in ["dynamodb:PutItem", "dynamodb:DeleteItem"] {
        assert!(
            !allows(&t, RELAY, Request { action, table: "OutboxTable", key: &row }),
            "the relay may {action} a row"
        );
    }
    for action in WRITES {
        let ledger_write = Request { action, table: "LedgerTable", key: "account#acct_42" };
        assert!(!allows(&t, RELAY, ledger_write), "the relay may {action} on the ledger");
    }
}

/// The Kinesis consumer's keys in the idempotency table: an order's record and its
/// confirmation's marker, under the prefixes the example's code writes.
fn kinesis_keys() -> (String, String) {
    (format!("{}#ord_1", kinesis_consumer::PREFIX), format!("{}#ord_1", kinesis_consumer::EMAIL_PREFIX))
}

/// The Kinesis consumer commits an order once (its record `order#` in the same transaction as
/// the order's item, read back when a cancellation carries none) and claims, completes and
/// releases its confirmation's marker `order-email#`; nothing else in the idempotency table, and
/// only inserts into its orders table. The other functions cannot touch its keys.
#[test]
fn the_kinesis_consumer_is_scoped_to_its_order_and_confirmation_keys() {
    let t = template();
    let (order, marker) = kinesis_keys();
    for action in ["dynamodb:PutItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &order };
        assert!(allows(&t, KINESIS, request), "the Kinesis consumer needs {action} on {order}");
    }
    for action in ["dynamodb:UpdateItem", "dynamodb:DeleteItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &order };
        assert!(
            !allows(&t, KINESIS, request),
            "the Kinesis consumer may {action} {order}: it could erase an order's record"
        );
    }
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &marker };
        assert!(allows(&t, KINESIS, request), "the Kinesis consumer needs {action} on {marker}");
    }
    // No other prefix: not the payments', the relay's, the API's, nor one nobody owns.
    let strangers = [payment_record(), email_marker(), api_record(), "orders#ord_1".to_owned()];
    for key in strangers.iter().map(String::as_str).chain(["other#ord_1", "order"]) {
        for action in WRITES {
            let request = Request { action, table: "IdempotencyTable", key };
            assert!(!allows(&t, KINESIS, request), "the Kinesis consumer may {action} {key}");
        }
    }
    // Its orders table: the order's item inserted, never rewritten or deleted; nothing of the
    // ledger or the outbox.
    let env = &t["Resources"]["KinesisConsumerFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["ORDERS_TABLE"], json!({"Ref": "KinesisOrdersTable"}));
    assert!(allows(&t, KINESIS, Request { action: "dynamodb:PutItem", table: "KinesisOrdersTable", key: &order }));
    for action in ["dynamodb:UpdateItem", "dynamodb:DeleteItem"] {
        let request = Request { action, table: "KinesisOrdersTable", key: &order };
        assert!(!allows(&t, KINESIS, request), "the Kinesis consumer may {action} an order");
    }
    for table in ["LedgerTable", "OutboxTable"] {
        for action in WRITES {
            let request = Request { action, table, key: "receipt#pay_0001" };
            assert!(!allows(&t, KINESIS, request), "the Kinesis consumer may {action} on {table}");
        }
    }
    // And the others cannot touch its keys.
    for role in [CONSUMER, RELAY, API] {
        for key in [&order, &marker] {
            for action in WRITES {
                let request = Request { action, table: "IdempotencyTable", key };
                assert!(!allows(&t, role, request), "{role} may {action} {key}");
            }
        }
    }
}

/// The Kafka consumer posts payments as the SQS consumer does, so it holds the same keys: a
/// payment's record `payments#` (the ledger's prefix: an event id takes effect once whichever
/// way it came), put in the posting transaction and read back when a cancellation carries none;
/// the ledger's entry and balance; the receipt row `receipt#`, inserted only. Nothing else in
/// any table: not an email marker, an order's keys, the API's records.
#[test]
fn the_kafka_consumer_is_scoped_to_the_payment_and_receipt_keys() {
    let t = template();
    let (payment, row) = (payment_record(), outbox::row_key("pay_0001"));
    for action in ["dynamodb:PutItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &payment };
        assert!(allows(&t, KAFKA, request), "the Kafka consumer needs {action} on {payment}");
    }
    for action in ["dynamodb:UpdateItem", "dynamodb:DeleteItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &payment };
        assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} {payment}: it could erase a rejection");
    }
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem"] {
        let request = Request { action, table: "LedgerTable", key: "account#acct_42" };
        assert!(allows(&t, KAFKA, request), "the Kafka consumer needs {action} on the ledger");
    }
    assert!(allows(&t, KAFKA, Request { action: "dynamodb:PutItem", table: "OutboxTable", key: &row }));
    for action in ["dynamodb:UpdateItem", "dynamodb:DeleteItem"] {
        let request = Request { action, table: "OutboxTable", key: &row };
        assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} a receipt row");
    }
    let (order, order_marker) = kinesis_keys();
    let strangers = [email_marker(), order.clone(), order_marker, api_record(), "other#pay_0001".to_owned()];
    for key in strangers.iter().map(String::as_str).chain(["payments", "receipt#pay_0001"]) {
        for action in WRITES {
            let request = Request { action, table: "IdempotencyTable", key };
            assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} {key}");
        }
    }
    for action in WRITES {
        let request = Request { action, table: "KinesisOrdersTable", key: &order };
        assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} an order");
    }
    // Its environment names the tables its role reaches, as the SQS consumer's does.
    let env = |function: &str| t["Resources"][function]["Properties"]["Environment"]["Variables"].clone();
    for variable in ["IDEMPOTENCY_TABLE", "LEDGER_TABLE", "OUTBOX_TABLE"] {
        assert_eq!(env("KafkaConsumerFunction")[variable], env("PaymentsConsumerFunction")[variable], "{variable}");
    }
}

/// The payments API claims, completes, releases and reads its own records (`api#`), and nothing
/// else: not a payment record, an email marker, the ledger or the outbox; nor may the
/// consumer or the relay write an API record.
#[test]
fn the_api_keeps_to_its_own_records() {
    let t = template();
    let (record, payment, marker) = (api_record(), payment_record(), email_marker());
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &record };
        assert!(allows(&t, API, request), "the API needs {action} on {record}");
    }
    for action in WRITES {
        for key in [payment.as_str(), marker.as_str(), "other#pay_0001"] {
            assert!(!allows(&t, API, Request { action, table: "IdempotencyTable", key }), "the API may {action} {key}");
        }
        for table in ["LedgerTable", "OutboxTable"] {
            assert!(
                !allows(&t, API, Request { action, table, key: "account#acct_42" }),
                "the API may {action} on {table}"
            );
        }
        for role in [CONSUMER, RELAY] {
            let request = Request { action, table: "IdempotencyTable", key: &record };
            assert!(!allows(&t, role, request), "{role} may {action} the API's {record}");
        }
    }
}
