//! Test helpers in one place (feature `test-util`): Lambda events built in code, tables and an
//! SES sender on the local AWS, and the emails it recorded.
//!
//! - [`sqs::Batch`]: an `SqsEvent` from message bodies, with ids, receive counts, FIFO groups
//!   and trace headers as SQS sets them;
//! - [`streams::Batch`]: a DynamoDB Streams event of `INSERT`, `MODIFY` and `REMOVE` records
//!   whose images are serde values;
//! - on the local AWS ([`local`]): [`fresh_table`] with any key schema, [`verify_sender`] and
//!   [`ses_sender`], and the emails SES accepted ([`sent_emails`], [`emails_to`]);
//! - [`RecordingSender`], a fake [`EmailSender`](crate::EmailSender) that records and fails as
//!   scripted.
//!
//! ```
//! use effectively_once_effects::testing::{sqs, streams};
//!
//! let batch = sqs::Batch::new()
//!     .message(r#"{"order_id": "ord_1"}"#)
//!     .message(sqs::Message::new(r#"{"order_id": "ord_1"}"#).receive_count(3));
//! let event = batch.build();
//! assert_eq!(event.records[1].message_id.as_deref(), Some("m-2"));
//! assert_eq!(event.records[1].attributes["ApproximateReceiveCount"], "3");
//!
//! let changes = streams::Batch::new("orders", &["pk"])
//!     .insert(serde_json::json!({"pk": "order#ord_1", "total_cents": 4200}))
//!     .build();
//! assert_eq!(changes.records[0].event_name, "INSERT");
//! ```
//!
//! The local AWS helpers reach `AWS_ENDPOINT_URL` (default `http://127.0.0.1:4566`, the
//! project's local AWS), as `effectively_once_dynamodb::testing` does; its [`sdk_config`],
//! [`endpoint`] and [`unique_name`] are re-exported here.

pub mod local;
pub mod sqs;
pub mod streams;

pub use crate::email::RecordingSender;
pub use effectively_once_dynamodb::testing::{endpoint, sdk_config, unique_name};
pub use local::{create_table, emails_to, fresh_table, sent_emails, ses_sender, verify_sender, KeyAttribute};
