//! The receipt invariants: each applied body with an address has its row and its one email
//! (none for a refused address, whose row is `FAILED`), a `SENT` row without the address, no
//! email for bodies that did not apply,
//! no recipient twice, `AMBIGUOUS` only as the faults explain, and refusals stored without the
//! address.

use std::collections::BTreeMap;

use effectively_once_effects::SendOutcome;

use super::fates::Fates;
use super::read::{n, s, ReadBack};
use super::Check;
use crate::workload::{Fate, Sent, REFUSED_PREFIX};

/// What the receipts of a run came to.
#[derive(Debug, Default)]
pub(super) struct ReceiptTally {
    /// Rows wrong: missing, another body's, a status its email does not bear out.
    row_bad: usize,
    /// Bodies with wrong emails: for a body not applied, twice, or to a refused address.
    email_bad: usize,
    /// Stored refusal reasons that hold the address.
    reason_leaks: usize,
    /// `AMBIGUOUS` rows.
    ambiguous: usize,
    /// `AMBIGUOUS` rows whose marker does not say so.
    unbacked: usize,
    /// Receipts due: an address the provider does not refuse, on an applied body.
    due: usize,
    /// Recipients with more than one email.
    doubled: usize,
}

impl ReceiptTally {
    /// Counts every body's receipt, and receipt rows by status into `rows`.
    pub fn count(fates: &Fates<'_>, read: &ReadBack, rows: &mut BTreeMap<String, usize>) -> ReceiptTally {
        let mut tally = ReceiptTally::default();
        for (i, sent) in fates.plan.sent.iter().enumerate() {
            let Some(to) = sent.event.receipt_email.as_deref() else { continue };
            let got = read.emails_to.get(to).copied().unwrap_or(0);
            if fates.fate_of[i] != Some(Fate::Applied) {
                tally.email_bad += usize::from(got > 0);
                continue;
            }
            let status = tally.receipt(sent, got, read);
            *rows.entry(status).or_default() += 1;
        }
        // A row for an event whose applied body has no address would be a copy's write.
        for (id, row) in &read.rows {
            let event_id = id.trim_start_matches("receipt#");
            let owner = fates.by_id.get(event_id).into_iter().flatten().find(|i| {
                fates.fate_of[**i] == Some(Fate::Applied) && fates.plan.sent[**i].event.receipt_email.is_some()
            });
            if owner.is_none() {
                tally.row_bad += 1;
                let status = s(row, "status").unwrap_or_default();
                *rows.entry(format!("{status} (no applied body with an address)")).or_default() += 1;
            }
        }
        tally.doubled = read.emails_to.values().filter(|n| **n > 1).count();
        tally
    }

    /// One applied body's receipt, whose address got `got` emails; its row's status.
    fn receipt(&mut self, sent: &Sent, got: usize, read: &ReadBack) -> String {
        let e = &sent.event;
        let to = e.receipt_email.as_deref().unwrap_or_default();
        let row = read.rows.get(&format!("receipt#{}", e.event_id));
        let status = row.and_then(|r| s(r, "status")).unwrap_or_else(|| "missing".into());
        // A SENT row no longer holds the address (the relay removes it as it marks the row);
        // every other row still holds the event's.
        let address_ok = |r: &super::read::Item| match s(r, "status").as_deref() {
            Some("SENT") => s(r, "receipt_email").is_none(),
            _ => s(r, "receipt_email").as_deref() == Some(to),
        };
        let mine = row.is_some_and(|r| {
            s(r, "account_id").as_deref() == Some(e.account_id.as_str())
                && n(r, "amount_cents") == Some(e.amount_cents)
                && address_ok(r)
        });
        let refused = to.starts_with(REFUSED_PREFIX);
        self.due += usize::from(!refused);
        let marker = read
            .markers
            .get(&format!("email#{}", e.event_id))
            .filter(|m| s(m, "status").as_deref() == Some("COMPLETED"))
            .and_then(|m| s(m, "response"))
            .and_then(|r| serde_json::from_str::<SendOutcome>(&r).ok());
        // Under at most once a claim whose answer was lost counts as a possible takeover and is
        // flagged AMBIGUOUS without a send, refused address or not. The relay marks a row
        // AMBIGUOUS only after its marker recorded it so: a row without that marker was not
        // flagged by the at-most-once path, whatever wrote it.
        let status_ok = match status.as_str() {
            "FAILED" => refused,
            "SENT" => !refused && got == 1,
            "AMBIGUOUS" => {
                self.ambiguous += 1;
                let backed = matches!(marker, Some(SendOutcome::Ambiguous));
                self.unbacked += usize::from(!backed);
                backed && got <= usize::from(!refused)
            }
            _ => false,
        };
        self.row_bad += usize::from(!mine || !status_ok);
        self.email_bad += usize::from(got > 1 || (refused && got > 0));
        if status == "FAILED" {
            match &marker {
                Some(SendOutcome::Failed { reason }) => self.reason_leaks += usize::from(reason.contains(to)),
                _ => self.row_bad += 1,
            }
        }
        status
    }

    /// One receipt per applied event with an address, `emails` sent in all; no more `AMBIGUOUS`
    /// rows than the `explained` the faults account for.
    pub fn one_each(&self, emails: usize, explained: usize) -> Check {
        let ReceiptTally { row_bad, email_bad, ambiguous, unbacked, due, doubled, .. } = *self;
        // Faults make a few receipts ambiguous, never all of them: receipts due and none sent is
        // a relay that does not send.
        let none_sent = due > 0 && emails == 0;
        Check::new(
            "one receipt per applied event with an address; none refused (row FAILED), none for bodies not applied, none doubled; AMBIGUOUS only as the faults explain",
            row_bad == 0 && email_bad == 0 && doubled == 0 && ambiguous <= explained && !none_sent,
            format!(
                "{emails} emails for {due} receipts due; {row_bad} rows wrong, {email_bad} bodies with wrong emails, {doubled} recipients twice; {ambiguous} AMBIGUOUS ({unbacked} without their marker) of {explained} the faults explain"
            ),
        )
    }

    /// Refusals are stored without the address.
    pub fn refusals(&self) -> Check {
        Check::new(
            "refusals are stored without the address",
            self.reason_leaks == 0,
            format!("{} stored reasons hold the address", self.reason_leaks),
        )
    }
}
