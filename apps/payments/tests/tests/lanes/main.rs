//! An ordered batch in lanes (`Ledger::post_batch_in_lanes`, the Kafka, Kinesis and FIFO
//! consumers' path), one test binary: answers as posting one by one in batch order does
//! (`differential`), keeps each lane's order under faults and converges once the failures come
//! again (`faults`), and never sends a transaction past DynamoDB's limits (`limits`).

mod differential;
mod faults;
mod limits;
