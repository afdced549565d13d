//! On the local AWS (or `AWS_ENDPOINT_URL`): tables with any key schema, a verified SES sender,
//! and the emails the local SES accepted.

use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
use effectively_once::{StoreError, StoreErrorKind};
use effectively_once_dynamodb::testing::{endpoint, sdk_config, unique_name};
use effectively_once_dynamodb::{classify_sdk_error, wait_until_active};

use crate::email::SesSender;

/// A key attribute: its name and scalar type. A `&str` is a string (`S`) attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAttribute {
    name: String,
    kind: ScalarAttributeType,
}

impl KeyAttribute {
    /// A string (`S`) key attribute.
    pub fn string(name: impl Into<String>) -> Self {
        KeyAttribute { name: name.into(), kind: ScalarAttributeType::S }
    }

    /// A number (`N`) key attribute.
    pub fn number(name: impl Into<String>) -> Self {
        KeyAttribute { name: name.into(), kind: ScalarAttributeType::N }
    }

    /// A binary (`B`) key attribute.
    pub fn binary(name: impl Into<String>) -> Self {
        KeyAttribute { name: name.into(), kind: ScalarAttributeType::B }
    }
}

impl From<&str> for KeyAttribute {
    fn from(name: &str) -> Self {
        KeyAttribute::string(name)
    }
}

/// Creates the table `name` (on-demand billing) keyed by `partition_key` and, if given,
/// `sort_key`, and waits until it is active.
///
/// ```no_run
/// use effectively_once_effects::testing::{create_table, KeyAttribute};
/// # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), effectively_once::StoreError> {
/// create_table(&client, "orders", "pk", Some(KeyAttribute::number("version"))).await?;
/// # Ok(())
/// # }
/// ```
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    partition_key: impl Into<KeyAttribute>,
    sort_key: Option<KeyAttribute>,
) -> Result<(), StoreError> {
    let invalid = |e: aws_sdk_dynamodb::error::BuildError| StoreError::new(StoreErrorKind::Other, e.to_string());
    let mut request = client.create_table().table_name(name).billing_mode(BillingMode::PayPerRequest);
    for (key, key_type) in [(Some(partition_key.into()), KeyType::Hash), (sort_key, KeyType::Range)] {
        let Some(key) = key else { continue };
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(&key.name)
                    .attribute_type(key.kind)
                    .build()
                    .map_err(invalid)?,
            )
            .key_schema(
                KeySchemaElement::builder().attribute_name(key.name).key_type(key_type).build().map_err(invalid)?,
            );
    }
    request.send().await.map_err(|e| classify_sdk_error("CreateTable", e))?;
    wait_until_active(client, name).await
}

/// A new table of this test's own (`{prefix}-{pid}-...-{counter}`, [`unique_name`]: tests share
/// one emulator and run in parallel), created as [`create_table`] does; returns its name. Panics
/// with the way out when the endpoint does not answer.
pub async fn fresh_table(
    client: &aws_sdk_dynamodb::Client,
    prefix: &str,
    partition_key: impl Into<KeyAttribute>,
    sort_key: Option<KeyAttribute>,
) -> String {
    let name = unique_name(prefix);
    if let Err(error) = create_table(client, &name, partition_key, sort_key).await {
        panic!(
            "cannot create table {name} at {}: {error} (is the local AWS up? `make local-aws-up`, or set AWS_ENDPOINT_URL)",
            endpoint()
        );
    }
    name
}

/// Verifies `address` as an SES sender identity (SES v2 `CreateEmailIdentity`), which the
/// local SES requires before it accepts a send from it. Panics when SES refuses.
pub async fn verify_sender(client: &aws_sdk_sesv2::Client, address: &str) {
    if let Err(error) = client.create_email_identity().email_identity(address).send().await {
        panic!("cannot verify the sender {address} at {}: {}", endpoint(), effectively_once::ErrorChain(&error));
    }
}

/// A [`SesSender`] on the test endpoint, sending from `from`, verified.
pub async fn ses_sender(from: &str) -> SesSender {
    let client = aws_sdk_sesv2::Client::new(&sdk_config().await);
    verify_sender(&client, from).await;
    SesSender::new(client, from)
}

/// Every email the project's local AWS accepted through SES, oldest first, as
/// `infra/local/serve.py` reports them at `GET /_local-aws/ses/messages` (`id`, `source`,
/// `destinations`, `subject`, `body`). Only the project's local AWS serves this route.
///
/// A plain HTTP/1.0 GET on a socket, hand-written: one loopback request to a test server does
/// not warrant an HTTP client dependency in every test build.
pub fn sent_emails() -> Result<Vec<serde_json::Value>, String> {
    use std::io::{Read, Write};
    let endpoint = endpoint();
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut stream = std::net::TcpStream::connect(&host).map_err(|e| format!("local AWS at {host}: {e}"))?;
    write!(stream, "GET /_local-aws/ses/messages HTTP/1.0\r\nHost: {host}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let data: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("sent emails: {e}"))?;
    Ok(data["messages"].as_array().cloned().unwrap_or_default())
}

/// The emails the local AWS accepted for `recipient`. Panics when it cannot list them.
pub fn emails_to(recipient: &str) -> Vec<serde_json::Value> {
    let sent = sent_emails().expect("the local AWS lists the emails it sent");
    sent.into_iter()
        .filter(|m| m["destinations"]["ToAddresses"].as_array().is_some_and(|to| to.iter().any(|a| a == recipient)))
        .collect()
}
