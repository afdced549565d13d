//! Reading a cancelled transaction: what each reason code means for each member (a duplicate,
//! sent again, sent alone, or failed).

use super::*;

/// A member whose record's condition failed is a duplicate, answered from that action's item;
/// the others were cancelled by it and are sent again.
#[test]
fn a_record_that_blocks_is_a_duplicate_and_the_rest_go_again() {
    let verdicts = read_codes(&["None", "ConditionalCheckFailed", "None", "None", "None", "None", "None"]);
    assert_eq!(verdicts.duplicates, vec![(0, 1)]);
    assert_eq!((verdicts.again, verdicts.alone, verdicts.failed), (vec![1, 2], vec![], vec![]));
    assert!(!verdicts.conflicted && verdicts.failure.is_none());
}

/// A member's own write refused: it goes alone, where its own answer applies.
#[test]
fn a_members_own_refused_write_sends_it_alone() {
    let verdicts = read_codes(&["None", "None", "None", "None", "None", "ConditionalCheckFailed", "None"]);
    assert_eq!((verdicts.alone, verdicts.again), (vec![2], vec![0, 1]));
}

/// A group's shared write refused: every member of the group goes alone, in order.
#[test]
fn a_refused_shared_write_sends_its_group_alone() {
    let verdicts = read_codes(&["None", "None", "None", "None", "ConditionalCheckFailed", "None", "None"]);
    assert_eq!((verdicts.alone, verdicts.again), (vec![0, 1], vec![2]));
}

/// A duplicate is answered as one even when its own write failed too.
#[test]
fn a_duplicate_is_not_also_sent_alone() {
    let verdicts = read_codes(&["ConditionalCheckFailed", "ConditionalCheckFailed", "None"]);
    assert_eq!(verdicts.duplicates, vec![(0, 1)]);
    assert_eq!((verdicts.alone, verdicts.again), (vec![], vec![1, 2]));
}

/// A conflict is sent again (and backed off); throttling and a full item collection fail every
/// member not otherwise answered, retryable; a refused request sends each alone.
#[test]
fn failures_fail_the_rest_or_send_them_alone() {
    let conflict = read_codes(&["None", "None", "TransactionConflict"]);
    assert!(conflict.conflicted);
    assert_eq!((conflict.again, conflict.failed), (vec![0, 1, 2], vec![]));
    let full =
        read_codes(&["ItemCollectionSizeLimitExceeded", "None", "None", "None", "None", "ConditionalCheckFailed"]);
    assert_eq!(full.failure, Some(StoreErrorKind::Misconfigured));
    assert_eq!((full.failed, full.alone), (vec![0, 1], vec![2]));
    let throttled = read_codes(&["TransactionConflict", "ThrottlingError"]);
    assert!(throttled.conflicted);
    assert_eq!((throttled.failure, throttled.failed), (Some(StoreErrorKind::Throttled), vec![0, 1, 2]));
    let refused = read_codes(&["ValidationError"]);
    assert_eq!((refused.alone, refused.failed, refused.again), (vec![0, 1, 2], vec![], vec![]));
    let unknown = read_codes(&["Mystery"]);
    assert_eq!((unknown.failure, unknown.failed), (Some(StoreErrorKind::Unavailable), vec![0, 1, 2]));
}
