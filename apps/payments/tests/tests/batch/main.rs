//! The ledger's batch path (`Ledger::post_batch`), one test binary: it answers as posting one by
//! one does (`one_by_one`), keeps each account's order (`order`), decides refusals on the balance
//! a cancelled transaction returned (`refusals`, `rejections_on_a_changed_balance`,
//! `other_writers`), survives injected faults (`faults`), running out of rounds (`rounds`) and
//! sums past `i64` (`sums`).

mod faults;
mod one_by_one;
mod order;
mod other_writers;
mod refusals;
mod rejections_on_a_changed_balance;
mod rounds;
mod sums;
