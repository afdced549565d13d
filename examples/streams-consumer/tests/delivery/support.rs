//! What the projector's tests share: a fault that loses a transaction's answer, reads, and a
//! park queue ([`park`]).
#![allow(dead_code)]

pub mod park;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::{fresh_store, sdk_config};
use effectively_once_dynamodb::{DynamoDbStore, RequestCounter, Table};
use effectively_once_effects::testing::{fresh_table, KeyAttribute};
use streams_consumer::Projector;

/// Loses the answer of the `nth` TransactWriteItems (from 1; 0: none): DynamoDB applies it, the
/// client sees an error. The worst transient failure: the effect may or may not have happened.
#[derive(Debug, Clone, Default)]
pub struct LoseAnswer {
    nth: usize,
    seen: Arc<AtomicUsize>,
    losing: Arc<AtomicBool>,
}

impl LoseAnswer {
    /// Loses the `nth` answer.
    pub fn nth(nth: usize) -> Self {
        LoseAnswer { nth, ..LoseAnswer::default() }
    }
}

impl Intercept for LoseAnswer {
    fn name(&self) -> &'static str {
        "LoseAnswer"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let target = context.request().headers().get("x-amz-target").unwrap_or_default();
        if target.ends_with(".TransactWriteItems") && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
            self.losing.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn read_after_transmit(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match self.losing.swap(false, Ordering::SeqCst) {
            true => Err("the answer was lost".into()),
            false => Ok(()),
        }
    }
}

pub async fn item(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
) -> Option<aws_sdk_dynamodb::types::AttributeValue> {
    let out = client.get_item().table_name(table).key("pk", AttributeValue::S(pk.into())).consistent_read(true);
    let out = out.send().await.unwrap();
    out.item().map(|item| AttributeValue::M(item.clone()))
}

pub fn number(item: &Option<AttributeValue>, attribute: &str) -> Option<i64> {
    let AttributeValue::M(item) = item.as_ref()? else { return None };
    item.get(attribute)?.as_n().ok()?.parse().ok()
}

/// A projector on a fresh projections table whose DynamoDB client goes through `fault`; the
/// client, for reads, and the count of the requests it sent.
pub async fn projector(fault: LoseAnswer) -> (Projector, aws_sdk_dynamodb::Client, RequestCounter) {
    let (store, _) = fresh_store().await;
    let requests = RequestCounter::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
        .interceptor(fault)
        .interceptor(requests.clone())
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let projections = fresh_table(&client, "projections", KeyAttribute::string("pk"), None).await;
    let handler = Projector {
        idempotency: Idempotency::new(DynamoDbStore::new(client.clone(), store.table()), Config::default()),
        projections: Table::new(projections.as_str(), "pk"),
    };
    (handler, client, requests)
}
