//! The library as a user calls it, against the local AWS, one test binary: what Powertools users
//! expect (`powertools`), the idempotency layer with a real side effect (`idempotency`), and keyed
//! email through SES v2 (`keyed_email`).

mod idempotency;
mod keyed_email;
mod powertools;
