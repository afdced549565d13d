//! The store contract suite, against DynamoDB (the local AWS, or `AWS_ENDPOINT_URL`).

async fn make() -> idempotency_dynamodb::DynamoDbStore {
    idempotency_dynamodb::testing::fresh_store().await.0
}

idempotency::store_contract_tests!(make);
