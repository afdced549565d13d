//! The one `From<payments::Error> for RecordError` mapping keeps what the payments consumer did
//! before it: an answer no retry can change stays permanent.

use effectively_once::{Config, ErrorKind, Record, Status};
use effectively_once_lambda::{RecordError, Retry};
use payments::{Error, Posting};

/// A payment's once-only record completed without its response (`ResponseTooLarge`, which its
/// own docs class [`Retry::Never`]: "duplicates get this error too"). At 0582c91 the payments
/// consumer mapped every non-retryable effect error to permanent (`Err(e) if e.is_retryable()`
/// else permanent); a mapping that kept it would make a duplicate whose answer no retry, moment
/// or deploy can change hold its FIFO group's later messages back (the SQS driver's
/// `held_back_by`) for every receive up to maxReceiveCount (5 in apps/payments/template.json), where it
/// used to let them through at once.
#[test]

fn a_completed_record_without_its_response_stays_permanent_for_payments() {
    let config = Config::default();
    let hash = config.payload_hash(&serde_json::json!({"event_id": "pay_1"})).unwrap();
    let record = Record {
        id: "payment#pay_1".into(),
        status: Status::Completed,
        lease_expires_at_ms: 0,
        expiration_s: u64::MAX,
        payload_hash: hash.to_string(),
        owner: String::new(),
        response: None,
    };
    let err = record.replay::<Posting>(&hash).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResponseTooLarge);
    assert_eq!(err.retry(), Retry::Never, "the kind itself gives the message up");
    // 0582c91's payments consumer: `Err(e) if e.is_retryable()` => retryable, else permanent.
    let effect = Error::from(err);
    assert_eq!(effect.retry(), Retry::Never);
    assert_eq!(RecordError::from(effect).retry, Retry::Never, "as the payments consumer answered at 0582c91");
}
