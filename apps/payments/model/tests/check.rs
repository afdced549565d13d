//! The protocol models checked exhaustively, at the size `make test` affords (`make model` goes
//! larger), and the checker shown to find the hole the payments API had when a claim's answer was
//! lost (the fix reverted in the model: the store forgets what a claim replaced, and the API
//! reads an unknown replaced record as a free key).

use protocol_model::{api::bodies, api::ApiModel, check, email::EmailModel, find, run::RunModel, Report};

fn holds(report: Report) {
    println!("{report}");
    assert!(report.violations.is_empty() && report.unreached.is_empty(), "{report}");
}

#[test]
fn run_once_per_key_holds() {
    holds(check("run", RunModel::new(3), None, 2));
}

#[test]
fn the_api_binds_one_body_per_key() {
    holds(check("api", ApiModel::new(bodies(3)), None, 2));
}

#[test]
fn keyed_email_at_most_once_never_sends_twice() {
    holds(check("email", EmailModel::new(3), None, 2));
}

#[test]
fn with_the_fix_reverted_two_bodies_are_answered_202() {
    let two_202s = "no two bodies answered 202 for one key";
    let report = find("api, fix reverted", ApiModel::new(bodies(3)).reverted(), two_202s, 2);
    println!("{report}");
    let found = report.violations.iter().find(|(name, _)| *name == two_202s);
    let (_, trace) = found.unwrap_or_else(|| panic!("the checker must find the two-202s trace: {report}"));
    assert!(trace.contains("AnswerLost"), "a lost claim answer is in the trace: {trace}");
}

#[test]
fn judging_the_replaced_record_instead_of_its_run_puts_two_bodies_on_the_queue() {
    let two_bodies = "at most one body on the queue";
    let report = find("api, runs ignored", ApiModel::new(bodies(3)).ignoring_runs(), two_bodies, 2);
    println!("{report}");
    assert!(report.violations.iter().any(|(name, _)| *name == two_bodies), "{report}");
}

#[test]
fn rerunning_a_held_body_without_a_claim_is_a_run_without_a_claim() {
    let unclaimed = "a body is sent only under a claim of its own";
    let report = find("api, unclaimed reruns", ApiModel::new(bodies(3)).rerunning_unclaimed(), unclaimed, 2);
    println!("{report}");
    assert!(report.violations.iter().any(|(name, _)| *name == unclaimed), "{report}");
}
