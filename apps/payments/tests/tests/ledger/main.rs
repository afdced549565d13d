//! The payments ledger on the local AWS, one test binary: exactly-once posts (`posts`), the
//! pre-read and its measured costs (`preread`, `preread_costs`), delivery order on a FIFO queue
//! and its failures (`fifo_order`, `fifo_failures`), a full item collection
//! (`full_item_collections`) and the migration from 0.1.0's layout (`migration`).

mod fifo_failures;
mod fifo_order;
mod full_item_collections;
mod migration;
mod posts;
mod preread;
mod preread_costs;
