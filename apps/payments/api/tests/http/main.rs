//! The payments API as callers reach it, one test binary: served over real HTTP with the consumer
//! draining its queue (`served`), requests as API Gateway and Function URLs shape them
//! (`request_shapes`), on a FIFO queue (`fifo_queue`), and under `cargo lambda watch` (`watch`).

mod fifo_queue;
mod request_shapes;
mod served;
mod watch;
