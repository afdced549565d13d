//! The receipts relay on the local AWS, one test binary over one shared setup (`support`): who
//! gets an email (`recipients`, `recipient_changes`, `erased_rows`), one email per receipt
//! (`marker_leases`, `wording`, `marks_after_a_send`), failures the relay records or retries
//! (`permanent_failures`, `store_faults`, `provider_faults`), stream images of every type
//! (`stream_images`), the sample event (`sample_event`) and the outbox sweeper (`sweep`).

mod support;

mod erased_rows;
mod marker_leases;
mod marks_after_a_send;
mod permanent_failures;
mod provider_faults;
mod recipient_changes;
mod recipients;
mod sample_event;
mod store_faults;
mod stream_images;
mod sweep;
mod wording;
