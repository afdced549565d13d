//! `DynamoDbStore`: the store contract suite and what DynamoDB adds to it (a claim over an
//! unreadable item, a takeover's two writes, a late copy of a released claim), reading keys
//! one at a time and a hundred at a time, and how a failed call is classed. Against the local
//! AWS (or `AWS_ENDPOINT_URL`); the error classes need no service.

mod beyond_contract;
mod contract;
mod error_classes;
mod get;
mod get_records;
mod late_claims;
mod takeover;
