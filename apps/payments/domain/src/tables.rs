//! Table definitions for tests and the local AWS; production tables come from `infra/`.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType,
};
use aws_sdk_dynamodb::Client;
use effectively_once::{StoreError, StoreErrorKind};
use effectively_once_dynamodb::{classify_sdk_error, wait_until_active};

fn built(error: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::new(StoreErrorKind::Other, error.to_string())
}

fn key(name: &str, key_type: KeyType) -> Result<(AttributeDefinition, KeySchemaElement), StoreError> {
    Ok((
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(built)?,
        KeySchemaElement::builder().attribute_name(name).key_type(key_type).build().map_err(built)?,
    ))
}

/// The ledger table: `pk` (S) and `sk` (S), on-demand; returns once it is active.
pub async fn create_ledger_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let (pk, pk_schema) = key("pk", KeyType::Hash)?;
    let (sk, sk_schema) = key("sk", KeyType::Range)?;
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(pk)
        .attribute_definitions(sk)
        .key_schema(pk_schema)
        .key_schema(sk_schema)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| classify_sdk_error("CreateTable", e))?;
    wait_until_active(client, table).await
}

/// The outbox table: `pk` (S), on-demand, with a stream of new images for the relay and the
/// sparse index of pending rows for the sweeper (as `apps/payments/template.json`'s `OutboxTable`);
/// returns once it is active.
pub async fn create_outbox_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let (pk, pk_schema) = key("pk", KeyType::Hash)?;
    let (shard, shard_schema) = key(crate::outbox::PENDING_SHARD, KeyType::Hash)?;
    let (created, created_schema) = key("created_at", KeyType::Range)?;
    let mut projection = Projection::builder().projection_type(ProjectionType::Include);
    for attribute in crate::outbox::PENDING_PROJECTION {
        projection = projection.non_key_attributes(attribute);
    }
    let pending = GlobalSecondaryIndex::builder()
        .index_name(crate::outbox::PENDING_INDEX)
        .key_schema(shard_schema)
        .key_schema(created_schema)
        .projection(projection.build())
        .build()
        .map_err(built)?;
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(pk)
        .attribute_definitions(shard)
        .attribute_definitions(created)
        .key_schema(pk_schema)
        .global_secondary_indexes(pending)
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .map_err(built)?,
        )
        .send()
        .await
        .map_err(|e| classify_sdk_error("CreateTable", e))?;
    wait_until_active(client, table).await
}
