//! Which keys of the idempotency, ledger and outbox tables each role may touch: the relay never
//! a payment's record, the consumer never an email marker, each function what it needs on its
//! own keys and nothing else, the Kafka and API roles scoped to their prefixes.

use payments::outbox;

use crate::iam::{allows, Request};
use crate::{api_record, email_marker, payment_record, template, API, CONSUMER, KAFKA, RELAY, WRITES};

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
    // Keys no payments function owns (an order's, as another application's would be).
    let strangers = [email_marker(), "order#ord_1".to_owned(), "order-email#ord_1".to_owned(), api_record()];
    let strangers = strangers.into_iter().chain(["other#pay_0001".to_owned()]).collect::<Vec<_>>();
    for key in strangers.iter().map(String::as_str).chain(["payments", "receipt#pay_0001"]) {
        for action in WRITES {
            let request = Request { action, table: "IdempotencyTable", key };
            assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} {key}");
        }
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
