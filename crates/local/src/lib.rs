//! The local AWS's resources, created from the same definitions as the deployment:
//! `infra/template.json` is read, and each DynamoDB table in it is created with its key schema,
//! stream and TTL, so local and cloud cannot drift.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, StreamSpecification,
    StreamViewType, TimeToLiveSpecification,
};
use serde_json::Value;

/// The deployment template, compiled in: the definitions the local resources come from.
pub const TEMPLATE: &str = include_str!("../../../infra/template.json");

/// The sender identity verified in the local SES.
pub const RECEIPT_FROM: &str = "receipts@example.com";

/// Local names of the template's tables: the logical id without `Table`, lower-case
/// (`LedgerTable` is `ledger`).
pub fn local_table_name(logical_id: &str) -> String {
    logical_id.trim_end_matches("Table").to_lowercase()
}

/// The tables the template declares, by logical id.
pub fn template_tables() -> Result<BTreeMap<String, Value>, String> {
    let template: Value = serde_json::from_str(TEMPLATE).map_err(|e| format!("infra/template.json: {e}"))?;
    let resources = template["Resources"].as_object().ok_or("template has no Resources")?;
    Ok(resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::DynamoDB::Table")
        .map(|(id, r)| (id.clone(), r["Properties"].clone()))
        .collect())
}

/// The environment the functions read, for the local AWS (`cargo lambda watch --env-file`).
pub fn lambda_env(endpoint: &str) -> String {
    let tables = template_tables().unwrap_or_default();
    let name = |id: &str| if tables.contains_key(id) { local_table_name(id) } else { String::new() };
    format!(
        "IDEMPOTENCY_TABLE={}\nLEDGER_TABLE={}\nOUTBOX_TABLE={}\nRECEIPT_FROM={RECEIPT_FROM}\n\
         AWS_ENDPOINT_URL={endpoint}\nAWS_REGION=us-east-1\nAWS_ACCESS_KEY_ID=test\nAWS_SECRET_ACCESS_KEY=test\n",
        name("IdempotencyTable"),
        name("LedgerTable"),
        name("OutboxTable"),
    )
}

fn text<'a>(v: &'a Value, field: &str) -> Result<&'a str, String> {
    v[field].as_str().ok_or_else(|| format!("template: {field} missing"))
}

/// Creates the template's tables (skipping those that exist) and verifies the SES sender.
pub async fn up(dynamodb: &aws_sdk_dynamodb::Client, ses: &aws_sdk_sesv2::Client) -> Result<Vec<String>, String> {
    let mut created = Vec::new();
    for (id, props) in template_tables()? {
        let name = local_table_name(&id);
        let mut request = dynamodb.create_table().table_name(&name).billing_mode(BillingMode::PayPerRequest);
        for def in props["AttributeDefinitions"].as_array().ok_or("AttributeDefinitions missing")? {
            request = request.attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(text(def, "AttributeName")?)
                    .attribute_type(ScalarAttributeType::from(text(def, "AttributeType")?))
                    .build()
                    .map_err(|e| e.to_string())?,
            );
        }
        for key in props["KeySchema"].as_array().ok_or("KeySchema missing")? {
            request = request.key_schema(
                KeySchemaElement::builder()
                    .attribute_name(text(key, "AttributeName")?)
                    .key_type(KeyType::from(text(key, "KeyType")?))
                    .build()
                    .map_err(|e| e.to_string())?,
            );
        }
        if let Some(view) = props["StreamSpecification"]["StreamViewType"].as_str() {
            request = request.stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::from(view))
                    .build()
                    .map_err(|e| e.to_string())?,
            );
        }
        match request.send().await {
            Ok(_) => created.push(name.clone()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => continue,
            Err(e) => return Err(format!("create table {name}: {}", idempotency_dynamodb::classify("CreateTable", e))),
        }
        if let Some(attribute) = props["TimeToLiveSpecification"]["AttributeName"].as_str() {
            dynamodb
                .update_time_to_live()
                .table_name(&name)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .enabled(true)
                        .attribute_name(attribute)
                        .build()
                        .map_err(|e| e.to_string())?,
                )
                .send()
                .await
                .map_err(|e| format!("TTL on {name}: {}", idempotency_dynamodb::classify("UpdateTimeToLive", e)))?;
        }
    }
    ses.create_email_identity().email_identity(RECEIPT_FROM).send().await.ok();
    Ok(created)
}
