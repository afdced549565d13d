//! The email itself: plain text, its address kept out of `Debug` output.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{redact_email, redact_emails};

/// A plain-text email.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailMessage {
    /// The recipient.
    pub to: String,
    /// The subject.
    pub subject: String,
    /// The body, plain text.
    pub text: String,
}

// By hand, so that `{:?}` in a log line or a panic message never shows the address.
impl fmt::Debug for EmailMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmailMessage")
            .field("to", &redact_email(&self.to))
            .field("subject", &redact_emails(&self.subject))
            .field("text", &redact_emails(&self.text))
            .finish()
    }
}
