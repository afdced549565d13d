//! The store contract suite, against DynamoDB (the local AWS, or `AWS_ENDPOINT_URL`).

async fn make() -> effectively_once_dynamodb::DynamoDbStore {
    effectively_once_dynamodb::testing::fresh_store().await.0
}

effectively_once::store_contract_tests!(make);
