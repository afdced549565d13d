//! Errors: one boxed type ([`Error`]), and context that chains to its cause instead of
//! repeating it: a [`Context`] displays what was being done and returns the cause from
//! `source()`, so [`report`] prints each link once.

use std::fmt;

/// Any error of the local pipeline.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What was being done when `source` failed.
#[derive(Debug)]
pub struct Context {
    what: String,
    source: Error,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Adds what was being done to an error (an SDK call's, an I/O error, any other).
pub trait ResultExt<T> {
    /// The error, as the cause of `what`.
    fn context(self, what: impl Into<String>) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::from(Context { what: what.into(), source: e.into() }))
    }
}

/// An error and its causes on one line, `what: cause: its cause`.
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        line.push_str(": ");
        line.push_str(&e.to_string());
        cause = e.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_reported_once() {
        let io: Result<()> = Err(std::io::Error::other("connection reset").into());
        let e = io.context("receive").context("drain").unwrap_err();
        assert_eq!(e.to_string(), "drain");
        assert_eq!(report(&*e), "drain: receive: connection reset");
    }
}
