//! [`RecordingSender`], the fake sender tests script (the `test-util` feature).

use std::collections::VecDeque;
use std::sync::Mutex;

use super::{EmailMessage, EmailSender, SendError, SendErrorKind};

/// A fake for tests (the `test-util` feature): records what it sends, and fails as scripted.
#[derive(Debug, Default)]
pub struct RecordingSender {
    sent: Mutex<Vec<EmailMessage>>,
    failures: Mutex<VecDeque<SendError>>,
}

impl RecordingSender {
    /// A sender that accepts everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next send fails with `error` (queued: one scripted failure per send).
    pub fn fail_next(&self, error: SendError) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).push_back(error);
    }

    /// The messages sent so far.
    pub fn sent(&self) -> Vec<EmailMessage> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl EmailSender for RecordingSender {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        if let Some(error) = self.failures.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
            if error.kind == SendErrorKind::Ambiguous {
                // Ambiguous means it may have gone out: the fake says it did.
                self.sent.lock().unwrap_or_else(|p| p.into_inner()).push(message.clone());
            }
            return Err(error);
        }
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.push(message.clone());
        Ok(format!("fake-{}", sent.len()))
    }
}
