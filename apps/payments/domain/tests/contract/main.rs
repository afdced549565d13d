//! The payment contract as the domain crate states it, one test binary: amounts judged on their
//! text (`amounts`), addresses the contract accepts redacted whole from SES's echoed refusals
//! (`redaction`), and the payments errors mapped to the drivers' record errors (`record_errors`).

mod amounts;
mod record_errors;
mod redaction;
