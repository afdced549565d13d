//! Commit once on DynamoDB (the local AWS, or `AWS_ENDPOINT_URL`): what a duplicate gets,
//! records carried on a business item, refusals and the answers they record, and lanes in
//! `commit_batch`. One test binary, one module per behaviour.

mod carried_records;
mod duplicates;
mod lanes;
mod refusals;
