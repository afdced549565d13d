//! Email sent once per key, and the crate's test helpers: a marker released after a definite
//! send failure (or left held, and said so), and the `testing` helpers on the local AWS. One
//! test binary for the crate, one module per behaviour.

mod local_helpers;
mod released_markers;
