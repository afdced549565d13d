//! `DynamoDbStore`: the store contract suite and what DynamoDB adds to it (a claim over an
//! unreadable item, a takeover's two writes, a late copy of a released claim), reading keys
//! one at a time and a hundred at a time, and how a failed call is classed. Against the local
//! AWS (or `AWS_ENDPOINT_URL`) with `test-util`; the error classes need no service.

#[cfg(feature = "test-util")]
mod beyond_contract;
#[cfg(feature = "test-util")]
mod contract;
mod error_classes;
#[cfg(feature = "test-util")]
mod get;
#[cfg(feature = "test-util")]
mod get_records;
#[cfg(feature = "test-util")]
mod late_claims;
#[cfg(feature = "test-util")]
mod takeover;
