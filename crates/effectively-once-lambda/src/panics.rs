//! A record whose handler panics fails alone: the drivers catch the panic at the record, report
//! that record failed and go on with the batch.
//!
//! Without the catch, a panic ends the invocation (or, built with `panic = "abort"`, the
//! sandbox): the whole batch is redelivered, every message's receive count rises, and innocent
//! messages drift to the dead-letter queue behind one bad record. The catch needs the unwinding
//! panic strategy; the workspace's release profile keeps it.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Once;

use futures_util::FutureExt;

use crate::redact_emails;

/// The longest panic message kept, in bytes: a message may carry a whole message body (up to
/// 256 KB on SQS), which belongs in no log line.
const MAX_MESSAGE: usize = 1024;

/// Makes a record's handler future with `make` and runs it; `Err` holds the panic's message,
/// redacted, when either panicked.
///
/// It takes the call that makes the future, not the future: `Handler::handle` is a plain `fn`
/// returning `impl Future`, so an implementation may do work (parse, look up) before it returns
/// its future and panic there. Evaluated as an argument, that panic would escape the catch and
/// fail the whole batch.
///
/// `AssertUnwindSafe`: after a panic the driver drops the future and reads nothing it touched.
/// What the handler shares across records (`&self`) must stay consistent if a record's future
/// stops at any point, which it must anyway: Lambda can end an invocation at any await.
pub(crate) async fn catch<M, F, T>(make: M) -> Result<T, String>
where
    M: FnOnce() -> F,
    F: Future<Output = T>,
{
    let future = std::panic::catch_unwind(AssertUnwindSafe(make)).map_err(|payload| message(&*payload))?;
    // Boxed: the handler's future is laid out on its own, not inside the driver's, so a deep
    // handler does not take the caller's `main` past rustc's default `recursion_limit`.
    AssertUnwindSafe(Box::pin(future)).catch_unwind().await.map_err(|payload| message(&*payload))
}

/// A panic payload as text: redacted (it may quote the record, and so an email address) and
/// bounded.
fn message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic payload that is not a string");
    bounded(redact_emails(text))
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("… (truncated)");
    }
    text
}

static HOOK: Once = Once::new();

/// Replaces the process's panic hook, once, with one that writes what the default hook writes
/// (thread, location, message, and a backtrace when `RUST_BACKTRACE` asks for one) with email
/// addresses redacted. The default hook prints the message verbatim to standard error, which
/// Lambda ships to CloudWatch Logs, and a handler's panic message may quote the record's body.
///
/// The drivers call this before their first batch, so a binary need not; a binary that wants
/// the redaction for panics outside the drivers too (in its start-up) calls it first thing.
/// A hook set earlier is replaced, not chained: chaining would print the unredacted message.
pub fn install_hook() {
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            // `payload_as_str` does this from Rust 1.91 on; the crate supports 1.85.
            let payload = info.payload();
            let text = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            let message = bounded(redact_emails(text.unwrap_or("Box<dyn Any>")));
            let thread = std::thread::current();
            let location = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
            eprintln!("thread '{}' panicked{location}:\n{message}", thread.name().unwrap_or("<unnamed>"));
            let backtrace = std::backtrace::Backtrace::capture();
            if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
                eprintln!("stack backtrace:\n{backtrace}");
            }
        }));
    });
}

/// Warns once when panics cannot be caught: built with `panic = "abort"`, a panicking record
/// still ends the sandbox and fails the whole batch.
pub(crate) fn warn_if_aborting() {
    if cfg!(panic = "abort") {
        static WARNED: Once = Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                "built with panic = \"abort\": a panicking record ends the sandbox and fails its whole batch"
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_its_redacted_message() {
        let caught: Result<crate::RecordResult, String> =
            catch(|| async { panic!("cannot post for alice@example.com") }).await;
        assert_eq!(caught, Err("cannot post for a***@example.com".to_owned()));
        let caught: Result<crate::RecordResult, String> = catch(|| async { std::panic::panic_any(42_u8) }).await;
        assert_eq!(caught, Err("a panic payload that is not a string".to_owned()));
        let caught: Result<crate::RecordResult, String> = catch(|| async { Ok(crate::Handled::Applied) }).await;
        assert_eq!(caught, Ok(Ok(crate::Handled::Applied)));
    }

    /// A panic while the future is made, before there is a future to poll, is caught too.
    #[tokio::test]
    async fn a_panic_while_making_the_future_is_caught() {
        fn make() -> std::future::Ready<crate::RecordResult> {
            panic!("cannot parse the body for alice@example.com")
        }
        assert_eq!(catch(make).await, Err("cannot parse the body for a***@example.com".to_owned()));
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let text = bounded("é".repeat(MAX_MESSAGE));
        assert!(text.len() <= MAX_MESSAGE + "… (truncated)".len());
        assert!(text.ends_with("… (truncated)"));
    }
}
