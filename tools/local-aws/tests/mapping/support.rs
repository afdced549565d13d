//! What the mapping tests share: a scripted stream function, which records each batch it is
//! handed, as the records' keys, and answers call `n` (from 0) as the test says; and a user's
//! template (a queue with its DLQ, a table with its stream and on-failure queue) created on the
//! local AWS through the tool's template reader.

use std::sync::Mutex;

use local::resources::Clients;

/// (key, sequence number) of each record of a batch.
pub type Batch = [(String, String)];

type Answer<R> = Box<dyn Fn(usize, &Batch) -> local::Result<R> + Send + Sync>;

/// A function answering call `n` on a batch; `R` is the stream's response type.
pub struct Script<R> {
    answer: Answer<R>,
    calls: Mutex<Vec<Vec<String>>>,
}

impl<R> Script<R> {
    pub fn new(answer: impl Fn(usize, &Batch) -> local::Result<R> + Send + Sync + 'static) -> Self {
        Script { answer: Box::new(answer), calls: Mutex::default() }
    }

    /// The keys of every batch so far, in order.
    pub fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }

    /// Records `batch` as a call and answers it.
    pub fn call(&self, batch: Vec<(String, String)>) -> local::Result<R> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(batch.iter().map(|(k, _)| k.clone()).collect());
            calls.len() - 1
        };
        (self.answer)(n, &batch)
    }
}

/// A user's template: a queue whose redrive policy moves a message to its DLQ after 5
/// receives, and a table with a stream whose mapping discards to a failure queue.
const TEMPLATE: &str = r#"{
  "Resources": {
    "OrdersDeadLetterQueue": {"Type": "AWS::SQS::Queue"},
    "OrdersQueue": {"Type": "AWS::SQS::Queue", "Properties": {"RedrivePolicy": {
      "deadLetterTargetArn": {"Fn::GetAtt": ["OrdersDeadLetterQueue", "Arn"]}, "maxReceiveCount": 5}}},
    "OrdersFailureQueue": {"Type": "AWS::SQS::Queue"},
    "OrdersTable": {"Type": "AWS::DynamoDB::Table", "Properties": {
      "BillingMode": "PAY_PER_REQUEST",
      "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
      "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
      "StreamSpecification": {"StreamViewType": "NEW_IMAGE"}}}
  }
}"#;

/// The template's resources under a prefix of their own.
#[derive(Debug, Clone)]
pub struct Resources {
    /// The queue.
    pub queue_url: String,
    /// Its DLQ.
    pub dlq_url: String,
    /// The queue's `maxReceiveCount`.
    pub max_receive_count: u32,
    /// The table with a stream.
    pub table: String,
    /// The stream mapping's on-failure destination.
    pub failures_url: String,
}

/// Creates the template's resources named `prefix-...`.
pub async fn up(clients: &Clients, prefix: &str) -> Resources {
    let own = local::template::up(clients, TEMPLATE, prefix).await.expect("the template's resources");
    Resources {
        queue_url: own.queues["OrdersQueue"].clone(),
        dlq_url: own.queues["OrdersDeadLetterQueue"].clone(),
        max_receive_count: 5,
        table: own.tables["OrdersTable"].clone(),
        failures_url: own.queues["OrdersFailureQueue"].clone(),
    }
}
