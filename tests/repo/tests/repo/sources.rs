//! The library's sources stay where a reader can hold them (issue 39, item 5): no source file
//! under `crates/*/src` over 500 lines, and one module-file convention in every workspace
//! package's `src/` (a module with children is either `foo/mod.rs` everywhere or `foo.rs` beside
//! `foo/` everywhere). `tests/*/` folders are test binaries' modules and not counted.

use std::path::{Path, PathBuf};

use repo_checks::root;

/// The most lines a library source file holds.
const MAX_LINES: usize = 500;

/// Every `.rs` file under `dir` (recursively), sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The `src/` folders of the packages in `parents` (each `parent/*/src`), relative to the root.
fn source_dirs(parents: &[&str]) -> Vec<PathBuf> {
    let root = root();
    let mut dirs = Vec::new();
    for parent in parents {
        for entry in std::fs::read_dir(root.join(parent)).unwrap() {
            let src = entry.unwrap().path().join("src");
            if src.is_dir() {
                dirs.push(src);
            }
        }
    }
    dirs.sort();
    dirs
}

/// The library's source files over `MAX_LINES`, with their length.
fn long_library_files() -> Vec<String> {
    let root = root();
    let mut long = Vec::new();
    for file in source_dirs(&["crates"]).iter().flat_map(|d| rust_files(d)) {
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        if lines > MAX_LINES {
            long.push(format!("{} ({lines} lines)", file.strip_prefix(&root).unwrap().display()));
        }
    }
    long
}

/// The two ways to file a module with children, and the files that take each.
#[derive(Debug, Default)]
struct ModuleFiles {
    /// `foo/mod.rs`.
    mod_rs: Vec<String>,
    /// `foo.rs` beside a folder `foo/`.
    named: Vec<String>,
}

/// How every workspace package's `src/` files its modules with children.
fn module_files() -> ModuleFiles {
    let root = root();
    let mut found = ModuleFiles::default();
    for file in
        source_dirs(&["crates", "apps/payments", "tools", "examples", "bench"]).iter().flat_map(|d| rust_files(d))
    {
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        if file.file_name().is_some_and(|n| n == "mod.rs") {
            found.mod_rs.push(shown);
        } else if file.with_extension("").is_dir() {
            found.named.push(shown);
        }
    }
    found
}

#[test]
#[ignore = "library files over 500 lines remain while they are split (issue 39, item 5)"]
fn no_library_source_file_is_over_500_lines() {
    let long = long_library_files();
    assert!(long.is_empty(), "split these by concept:\n{}", long.join("\n"));
}

#[test]
fn the_line_count_sees_the_library() {
    // The rule above holds vacuously if no file were read: the core's lib.rs is there.
    let files: Vec<PathBuf> = source_dirs(&["crates"]).iter().flat_map(|d| rust_files(d)).collect();
    assert!(files.iter().any(|f| f.ends_with("effectively-once/src/lib.rs")), "{files:?}");
}

#[test]
fn one_module_file_convention() {
    let found = module_files();
    assert!(
        found.mod_rs.is_empty() || found.named.is_empty(),
        "modules filed both ways:\nfoo/mod.rs: {:#?}\nfoo.rs + foo/: {:#?}",
        found.mod_rs,
        found.named
    );
}
