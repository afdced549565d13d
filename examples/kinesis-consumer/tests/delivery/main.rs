//! The Kinesis consumer as Lambda delivers to it, on the local AWS: one order item and one
//! confirmation per order id however often it arrives (`duplicates`), what the event source
//! mapping does around the handler (`mapping`), and records that are not orders, parked
//! (`poison`). One test binary, one module per behaviour; `support` holds what they share.

mod duplicates;
mod mapping;
mod poison;
mod support;
