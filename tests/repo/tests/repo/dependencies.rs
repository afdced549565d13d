//! Dependencies point one way (CONTRIBUTING.md, "Where code goes"): apps and tools -> library
//! crates -> core. Read from `cargo metadata`: no library crate (a package under `crates/`)
//! depends on a package under `apps/`, `tools/` or `examples/`, in any of its dependency kinds
//! (normal, dev, build); nothing under `tools/` depends on `apps/` or `examples/`; nothing
//! depends on an example, as examples are copy-me crates, never imported.

use std::path::Path;
use std::process::Command;

use repo_checks::root;
use serde_json::Value;

/// The top-level folder a workspace package lives in: what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Area {
    Library,
    App,
    Tool,
    Example,
    /// `bench/`, `tests/`: neither published nor imported.
    Other,
}

impl Area {
    /// The area of the package in `dir`, relative to the workspace's `root`.
    fn of(root: &Path, dir: &Path) -> Area {
        let top = dir.strip_prefix(root).ok().and_then(|p| p.components().next());
        match top.and_then(|c| c.as_os_str().to_str()) {
            Some("crates") => Area::Library,
            Some("apps") => Area::App,
            Some("tools") => Area::Tool,
            Some("examples") => Area::Example,
            _ => Area::Other,
        }
    }
}

/// One dependency of a workspace package on another: who, on whom, and of which kind.
#[derive(Debug)]
struct Edge {
    from: String,
    from_area: Area,
    to: String,
    to_area: Area,
    /// `normal`, `dev` or `build`.
    kind: String,
}

/// Every dependency between the workspace's packages (path dependencies), as `cargo metadata`
/// states them: the manifests as cargo reads them, `workspace = true` resolved.
fn edges() -> Vec<Edge> {
    let root = root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut edges = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let manifest = Path::new(package["manifest_path"].as_str().expect("manifest_path"));
        let from_area = Area::of(&root, manifest.parent().expect("the package's folder"));
        for dependency in package["dependencies"].as_array().expect("dependencies") {
            // Registry dependencies carry no path: only the workspace's own packages do.
            let Some(path) = dependency["path"].as_str() else { continue };
            edges.push(Edge {
                from: package["name"].as_str().unwrap_or_default().to_owned(),
                from_area,
                to: dependency["name"].as_str().unwrap_or_default().to_owned(),
                to_area: Area::of(&root, Path::new(path)),
                kind: dependency["kind"].as_str().unwrap_or("normal").to_owned(),
            });
        }
    }
    edges
}

/// The edges `forbidden` picks out, one line each, for the failure message.
fn offending(forbidden: impl Fn(&Edge) -> bool) -> Vec<String> {
    edges()
        .iter()
        .filter(|e| forbidden(e))
        .map(|e| format!("{} ({:?}) -> {} ({:?}), {}", e.from, e.from_area, e.to, e.to_area, e.kind))
        .collect()
}

#[test]
fn the_metadata_names_the_workspace_s_own_dependencies() {
    // The rules below hold vacuously if no path dependency were read: the library's own edges
    // (every other library crate depends on the core) must be there.
    let edges = edges();
    assert!(
        edges.iter().any(|e| e.from_area == Area::Library && e.to == "effectively-once"),
        "no library crate depends on the core: {edges:?}"
    );
    assert!(edges.iter().any(|e| e.from_area == Area::App), "no app depends on anything: {edges:?}");
}

#[test]
fn no_library_crate_depends_on_an_app_a_tool_or_an_example() {
    let found =
        offending(|e| e.from_area == Area::Library && matches!(e.to_area, Area::App | Area::Tool | Area::Example));
    assert!(found.is_empty(), "library crates importing what is built on them:\n{}", found.join("\n"));
}

#[test]
fn no_tool_depends_on_an_app_or_an_example() {
    let found = offending(|e| e.from_area == Area::Tool && matches!(e.to_area, Area::App | Area::Example));
    assert!(found.is_empty(), "tools importing an app or an example:\n{}", found.join("\n"));
}

#[test]
fn nothing_depends_on_an_example() {
    let found = offending(|e| e.to_area == Area::Example);
    assert!(found.is_empty(), "examples are never imported:\n{}", found.join("\n"));
}
