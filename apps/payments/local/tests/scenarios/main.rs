//! The payments scenarios and what they check: the demo (directly and through the API), the
//! chaos scenario, the audit that reads outcomes back from the tables, and the effects under the
//! fault proxy's faults and refusals.

mod audit;
mod audit_ambiguous;
mod audit_rejected_credit;
mod chaos;
mod demo;
mod demo_via_api;
mod faults;
mod refusal;
