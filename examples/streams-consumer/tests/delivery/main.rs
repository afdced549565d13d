//! The projector as DynamoDB Streams delivers to it, on the local AWS: the batch path
//! (`batch`), the checkpoint at a transient failure (`checkpoint`), and a business condition
//! held as the checkpoint until it passes (`held_conditions`). One test binary, one module per
//! behaviour; `support` holds what they share.

mod batch;
mod checkpoint;
mod held_conditions;
mod support;
