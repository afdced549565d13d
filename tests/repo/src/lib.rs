//! Checks of the repository itself, not of any crate's behaviour: the tests in `tests/repo/`
//! read the checkout's files and run its scripts. This library holds only what they share.

use std::path::{Path, PathBuf};

/// The workspace's root: this crate lives in `tests/repo/`.
#[must_use]
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root")
}
