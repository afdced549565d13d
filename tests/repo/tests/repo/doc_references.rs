//! The docs name only what exists: every relative link in the repository's Markdown files names a
//! file or folder that is there, and so does every path from the repository's root in their code
//! spans (`` `apps/payments/tests/tests/batch/order.rs` ``); every `crate::` path in a doc comment of a crate's
//! sources names a module or item of that crate. rustdoc checks intra-doc *links* (`make doc` denies
//! broken ones); a path in backticks (`` `crate::audit` ``) is no link, and only this reads it.
//!
//! `make doc` runs this test; so do `make unit` and `make test`.

use repo_checks::root;
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, Parser, Tag};

/// The tracked files matching `pattern`, relative to the root: what a checkout holds, without
/// build output or installed tools.
fn tracked(pattern: &str) -> Vec<PathBuf> {
    let out = Command::new("git").arg("-C").arg(root()).args(["ls-files", "-z", "--", pattern]).output().unwrap();
    assert!(out.status.success(), "git ls-files: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).as_ref()))
        .collect()
}

/// Where a link of `file` points on disk, when it is relative: `None` for URLs, mail addresses
/// and anchors within the page.
fn relative_target(file: &Path, link: &str) -> Option<PathBuf> {
    let path = link.split('#').next().unwrap_or_default();
    if path.is_empty() || link.contains("://") || link.starts_with("mailto:") {
        return None;
    }
    let base = if path.starts_with('/') { root() } else { root().join(file).parent().unwrap().to_owned() };
    Some(base.join(path.trim_start_matches('/')))
}

/// `(line, link)` of every link and image in `markdown`, code blocks and spans left out.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let line_of = |offset: usize| markdown[..offset].matches('\n').count() + 1;
    Parser::new(markdown)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some((line_of(range.start), dest_url.to_string()))
            }
            _ => None,
        })
        .collect()
}

/// Broken relative links of the Markdown files in `files`, one line each.
fn broken_links(files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for (line, link) in links(&text) {
            if let Some(target) = relative_target(file, &link) {
                if !target.exists() {
                    broken.push(format!("{}:{line}: {link}", file.display()));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_markdown_link_names_a_file_that_exists() {
    let broken = broken_links(&tracked("*.md"));
    assert!(broken.is_empty(), "relative links to nothing:\n{}", broken.join("\n"));
}

/// The folders a path from the repository's root starts with, in a code span. Paths relative to
/// a crate (`tests/answers.rs` in a crate's guide) start otherwise and are not checked.
const ROOTED: [&str; 10] =
    ["crates/", "apps/", "tools/", "examples/", "infra/", "docs/", "bench/", "events/", ".config/", ".ci/"];

/// `(line, path)` of every code span of `markdown` that is a path from the repository's root: no
/// spaces, patterns or placeholders; a `:line` or `#anchor` after it is dropped.
fn rooted_paths(markdown: &str) -> Vec<(usize, String)> {
    let line_of = |offset: usize| markdown[..offset].matches('\n').count() + 1;
    Parser::new(markdown)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Code(code) if ROOTED.iter().any(|root| code.starts_with(root)) => {
                let placeholder = code.contains(|c: char| c.is_whitespace() || "*<>{}$…".contains(c));
                let path = code.split([':', '#']).next().unwrap_or_default();
                (!placeholder && !code.contains("...")).then(|| (line_of(range.start), path.to_owned()))
            }
            _ => None,
        })
        .collect()
}

/// The changelog names files as they were when each entry was written.
#[test]
fn every_path_in_a_markdown_code_span_names_a_file_that_exists() {
    let mut missing = Vec::new();
    for file in tracked("*.md").into_iter().filter(|f| f != Path::new("CHANGELOG.md")) {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        for (line, path) in rooted_paths(&text) {
            if !root().join(&path).exists() {
                missing.push(format!("{}:{line}: {path}", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "paths to nothing:\n{}", missing.join("\n"));
}

#[test]
fn a_link_to_a_missing_file_is_reported() {
    let page = "see [the guide](docs/nowhere.md), [deploy](docs/deploy.md#make-build), \
                [site](https://example.com) and `[code](not/a/link.md)`\n\n```\n[block](nor/this.md)\n```\n";
    let found = links(page);
    assert_eq!(found.len(), 3, "{found:?}");
    let targets: Vec<bool> = found
        .iter()
        .map(|(_, link)| relative_target(Path::new("README.md"), link).is_some_and(|t| !t.exists()))
        .collect();
    assert_eq!(targets, [true, false, false], "{found:?}");
    let paths =
        rooted_paths("`apps/payments/tests/tests/batch_hold_back.rs`, `tools/local-aws/src/lib.rs:12`, `tests/answers.rs`, `docs/*.md`");
    assert_eq!(
        paths,
        [(1, "apps/payments/tests/tests/batch_hold_back.rs".to_owned()), (1, "tools/local-aws/src/lib.rs".to_owned())]
    );
    assert!(!root().join(&paths[0].1).exists() && root().join(&paths[1].1).exists());
}

/// A crate's sources: the folder holding `src/`, and the root file of the crate a source file
/// belongs to (`lib.rs`, else `main.rs`). `None` for files outside `src/` (tests, examples,
/// benches: `crate::` there is the test binary) and for extra binaries under `src/bin/`.
fn crate_root(file: &Path) -> Option<PathBuf> {
    let text = file.to_str()?;
    let (dir, inner) = text.split_once("src/").map(|(dir, inner)| (root().join(dir), inner))?;
    if inner.starts_with("bin/") || !dir.join("Cargo.toml").is_file() {
        return None;
    }
    let lib = dir.join("src/lib.rs");
    Some(if inner == "main.rs" || !lib.is_file() { dir.join("src/main.rs") } else { lib })
}

/// The file of module `name` declared in `file` (`mod name;`), following Rust's layout.
fn module_file(file: &Path, name: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let declared = text.lines().map(str::trim_start).any(|line| {
        let line = line.strip_prefix("pub ").or_else(|| line.strip_prefix("pub(crate) ")).unwrap_or(line);
        line == format!("mod {name};")
    });
    if !declared {
        return None;
    }
    let stem = file.file_stem()?.to_str()?;
    let dir =
        if matches!(stem, "lib" | "main" | "mod") { file.parent()?.to_owned() } else { file.parent()?.join(stem) };
    [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")].into_iter().find(|f| f.is_file())
}

/// Whether `text` holds `word` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        !text[..at].ends_with(ident) && !text[at + word.len()..].starts_with(ident)
    })
}

/// Whether the code of `text` (its lines that are not comments) names `name`: where an item
/// is declared, brought in with `use` (one line or many), or made by a macro (`process;`).
fn names_in_code(text: &str, name: &str) -> bool {
    text.lines().filter(|line| !line.trim_start().starts_with("//")).any(|line| has_word(line, name))
}

/// Whether `crate::path` names something in the crate whose root file is `root_file`: modules
/// are followed file by file; the first item after them must be named in its module's code,
/// and what follows it (a method, a variant) somewhere in the crate's.
/// Written by hand: no crate resolves paths short of compiling; this catches a module or item
/// renamed or removed, which is what goes stale.
fn resolves(root_file: &Path, path: &str) -> bool {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut module = root_file.to_owned();
    let mut rest = segments.as_slice();
    while let Some((first, tail)) = rest.split_first() {
        match module_file(&module, first) {
            Some(file) => {
                module = file;
                rest = tail;
            }
            None => break,
        }
    }
    let Some((item, members)) = rest.split_first() else { return true };
    let text = std::fs::read_to_string(&module).unwrap_or_default();
    if !names_in_code(&text, item) {
        return false;
    }
    let sources = tracked_sources(root_file.parent().unwrap());
    members.iter().all(|member| sources.iter().any(|source| names_in_code(source, member)))
}

/// The text of every `.rs` file under `src`.
fn tracked_sources(src: &Path) -> Vec<String> {
    let mut texts = Vec::new();
    let mut dirs = vec![src.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap_or_default());
            }
        }
    }
    texts
}

/// Every `crate::` path in the doc comments (`///`, `//!`) of `text`, with its line.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut paths = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if !(trimmed.starts_with("///") || trimmed.starts_with("//!")) {
            continue;
        }
        for (at, _) in trimmed.match_indices("crate::") {
            if trimmed[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue; // `effectively_once_dynamodb::crate::` never occurs; `mycrate::` is another crate
            }
            let path: String = trimmed[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let path = path.trim_end_matches(':').to_owned();
            if !path.is_empty() {
                paths.push((n + 1, path));
            }
        }
    }
    paths
}

#[test]
fn every_crate_path_in_a_doc_comment_names_a_module_or_item() {
    let mut broken = Vec::new();
    for file in tracked("*.rs") {
        let Some(root_file) = crate_root(&file) else { continue };
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        for (line, path) in crate_paths(&text) {
            if !resolves(&root_file, &path) {
                broken.push(format!("{}:{line}: crate::{path}", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "doc comments name what the crate does not hold:\n{}", broken.join("\n"));
}

#[test]
fn a_crate_path_to_a_missing_module_is_reported() {
    let core = root().join("crates/effectively-once/src/lib.rs");
    assert!(resolves(&core, "Idempotency::run"), "a re-exported item and its method");
    assert!(resolves(&core, "outbound::disposition"), "a module's function");
    assert!(!resolves(&core, "audit"), "no such module");
    assert!(!resolves(&core, "outbound::nowhere"), "no such function");
    let paths = crate_paths("//! see `crate::audit` and [x](crate::outbound::key).\n// crate::not_a_doc\n");
    assert_eq!(paths, [(1, "audit".to_owned()), (1, "outbound::key".to_owned())]);
}
