//! What an `Idempotency-Key` answers, one test binary: keys scoped by caller (`caller_scopes`),
//! one body per key whatever answer is lost (`lost_answers`), a key after a failed or unknown
//! send (`after_failed_sends`, `takeovers`), and a send counted as one attempt (`send_attempts`).

mod after_failed_sends;
mod caller_scopes;
mod lost_answers;
mod send_attempts;
mod takeovers;
