//! The pinned toolchain (docs/packaging.md): every cargo command of the verbs builds `--locked`,
//! every pip install of the scripts installs a hash-pinned closure, every requirements file is
//! one, and `make test` runs the dependency policy. Read from the files; nothing is installed.

use repo_checks::root;
use std::path::{Path, PathBuf};

/// Every file with this extension under `dir` (recursively), sorted.
fn files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files(&path, extension));
        } else if path.extension().is_some_and(|e| e == extension) {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The scripts `make` and CI run: the Makefile, .ci/run and every shell script under infra/.
fn scripts() -> Vec<PathBuf> {
    let root = root();
    let mut scripts = vec![root.join("Makefile"), root.join(".ci/run"), root.join("bench/run.sh")];
    scripts.extend(files(&root.join("infra"), "sh"));
    scripts
}

/// The lines of `path` that are not comments (a Makefile's `##` help included), with their
/// numbers.
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with('#'))
        .map(|(i, line)| (i + 1, line.to_owned()))
        .collect()
}

/// The cargo subcommand a line runs, when it runs one that resolves and builds the workspace or
/// a tool: `cargo [+toolchain] SUBCOMMAND`.
fn cargo_build_command(line: &str) -> Option<&'static str> {
    const BUILDING: [&str; 10] =
        ["build", "check", "test", "run", "clippy", "doc", "nextest", "install", "tree", "bench"];
    let words: Vec<&str> = line.split_whitespace().collect();
    words.iter().enumerate().filter(|(_, w)| **w == "cargo").find_map(|(i, _)| {
        let mut rest = words[i + 1..].iter().skip_while(|w| w.starts_with('+'));
        let sub = rest.next()?;
        BUILDING.into_iter().find(|b| b == sub)
    })
}

/// A Cargo.lock the build would change fails it instead of picking new versions quietly.
#[test]
fn every_cargo_build_test_or_run_of_the_verbs_is_locked() {
    let lock = root().join("Cargo.lock");
    assert!(lock.is_file(), "Cargo.lock is committed");
    let mut unlocked = Vec::new();
    let mut seen = 0;
    for script in scripts() {
        for (number, line) in code_lines(&script) {
            if let Some(sub) = cargo_build_command(&line) {
                seen += 1;
                if !line.contains("--locked") {
                    unlocked.push(format!("{}:{number}: cargo {sub}: {}", script.display(), line.trim()));
                }
            }
        }
    }
    assert!(seen >= 20, "the scan found only {seen} cargo commands: it reads the wrong files");
    assert!(unlocked.is_empty(), "without --locked:\n{}", unlocked.join("\n"));
    // cargo lambda builds through infra/lambda.sh and `make watch`: both pass --locked on.
    let lambda_sh = std::fs::read_to_string(root().join("infra/lambda.sh")).unwrap();
    assert!(lambda_sh.contains("flags=(--release --locked)"), "infra/lambda.sh builds without --locked");
    assert!(lambda_sh.contains("cargo metadata --locked"), "sam-build does not check the lock file");
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    assert!(makefile.contains("infra/cargo-lambda.sh watch --locked"), "make watch builds without --locked");
}

/// A pip install that resolves or downloads anything its file does not pin by hash fails.
#[test]
fn every_pip_install_of_the_scripts_installs_a_hash_pinned_file() {
    let mut installs = 0;
    for script in scripts() {
        for (number, line) in code_lines(&script) {
            if !(line.contains("pip install") || line.contains("pip\" install")) {
                continue;
            }
            installs += 1;
            let at = format!("{}:{number}: {}", script.display(), line.trim());
            assert!(line.contains("--require-hashes"), "without --require-hashes: {at}");
            assert!(line.contains("--no-deps"), "without --no-deps: {at}");
            assert!(line.contains(" -r "), "not from a requirements file: {at}");
        }
    }
    // One install for every venv (infra/tools.sh), and every requirements file goes through it.
    assert!(installs >= 1, "the scan found no pip install: it reads the wrong files");
    let tools_sh = std::fs::read_to_string(root().join("infra/tools.sh")).unwrap();
    let mut requirements = files(&root().join("infra"), "in");
    requirements.push(root().join("bench/peer/requirements.in"));
    for source in requirements {
        let pinned = source.with_extension("txt");
        let relative = pinned.strip_prefix(root()).unwrap().display().to_string();
        assert!(tools_sh.contains(&relative), "infra/tools.sh installs nothing from {relative}");
    }
}

/// Each `.in` file's `.txt` pins every package `==` with at least one sha256, holds each pin of
/// the `.in`, and names the command that regenerates it.
#[test]
fn every_requirements_file_is_a_hash_pinned_closure_of_its_pins() {
    let root = root();
    let sources = files(&root.join("infra"), "in");
    assert!(sources.len() >= 7, "{sources:?}");
    for source in sources {
        let relative = source.strip_prefix(&root).unwrap().display().to_string();
        let pinned = source.with_extension("txt");
        let text = std::fs::read_to_string(&pinned).unwrap_or_else(|e| panic!("{}: {e}", pinned.display()));
        assert!(text.contains(&format!("#    infra/pip-compile.sh {relative}\n")), "{}: no command", pinned.display());
        // Requirements: a line that starts a package (not a comment, an option or a hash).
        let mut packages = Vec::new();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if line.is_empty() || line.starts_with('#') || line.starts_with(' ') {
                continue;
            }
            assert!(!line.starts_with('-'), "{}: an option line: {line}", pinned.display());
            let name = line.trim_end_matches(" \\");
            assert!(name.contains("=="), "{}: not pinned: {line}", pinned.display());
            let hashed = lines.peek().is_some_and(|next| next.trim_start().starts_with("--hash=sha256:"));
            assert!(hashed, "{}: no hash for {name}", pinned.display());
            packages.push(name.to_lowercase());
        }
        for pin in std::fs::read_to_string(&source).unwrap().lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (name, version) = pin.split_once("==").unwrap_or_else(|| panic!("{relative}: not an exact pin: {pin}"));
            let name = name.split('[').next().unwrap().to_lowercase().replace('_', "-");
            assert!(packages.contains(&format!("{name}=={version}")), "{}: has no {name}=={version}", pinned.display());
        }
    }
}

/// `make test` runs `cargo deny check bans licenses sources`, offline, with the workspace's policy.
#[test]
fn make_test_runs_the_dependency_policy_offline() {
    let root = root();
    let dry = std::process::Command::new("make").current_dir(&root).args(["-n", "test"]).output().unwrap();
    let recipe = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert!(
        recipe.lines().any(|l| l.trim() == "infra/deny.sh check"),
        "make test does not run infra/deny.sh:\n{recipe}"
    );
    let deny_sh = std::fs::read_to_string(root.join("infra/deny.sh")).unwrap();
    assert!(deny_sh.contains("--locked --offline check bans licenses sources"), "infra/deny.sh check");
    let policy = std::fs::read_to_string(root.join("deny.toml")).unwrap();
    assert!(policy.contains("unknown-git = \"deny\"") && policy.contains("unknown-registry = \"deny\""), "{policy}");
}
