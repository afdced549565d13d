//! Test helpers for keyed email (feature `test-util`): tables and an SES sender on the local AWS,
//! the emails it recorded, and a fake sender.
//!
//! - on the local AWS ([`local`]): [`fresh_table`] with any key schema, [`verify_sender`] and
//!   [`ses_sender`], and the emails SES accepted ([`sent_emails`], [`emails_to`]);
//! - [`RecordingSender`], a fake [`EmailSender`](crate::EmailSender) that records and fails as
//!   scripted.
//!
//! The Lambda events a handler's test feeds it are built by `effectively_once_lambda::testing`
//! (its `test-util` feature), one builder per trigger.
//!
//! The local AWS helpers reach `AWS_ENDPOINT_URL` (default `http://127.0.0.1:4566`, the
//! project's local AWS), as `effectively_once_dynamodb::testing` does; its [`sdk_config`],
//! [`endpoint`] and [`unique_name`] are re-exported here.

pub mod local;

pub use crate::email::RecordingSender;
pub use effectively_once_dynamodb::testing::{endpoint, sdk_config, unique_name};
pub use local::{create_table, emails_to, fresh_table, sent_emails, ses_sender, verify_sender, KeyAttribute};
