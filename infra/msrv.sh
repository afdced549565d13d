#!/usr/bin/env bash
# `make msrv` (infra/msrv.sh CRATE..): each published crate builds with the lowest versions of its
# direct dependencies that its Cargo.toml allows, and its `rust-version` is at least the
# `rust-version` of every crate it pulls in (normal and build dependencies, default features).
#
# How, and why this way: this machine has the stable toolchain and a nightly, and no other
# toolchain can be downloaded, so `cargo +MSRV check` cannot run here. Instead, per crate, in a
# scratch workspace under $CARGO_TARGET_DIR/msrv (the real Cargo.lock is untouched):
#   1. nightly cargo resolves with `-Z direct-minimal-versions` (every direct dependency at the
#      lowest version its requirement allows) and the Rust-version-aware resolver
#      (`incompatible-rust-versions = "fallback"`: the other dependencies at their newest version
#      for the crate's rust-version, as a user's cargo 1.84+ resolves them);
#   2. infra/msrv.py reads `cargo metadata` and fails when the crate's rust-version is below that
#      of a crate in its dependency tree, and names the crate that sets the floor;
#   3. nightly `cargo check --all-features` builds the library against that lock file, so a lower
#      bound the code outgrew (an API added in a later version) fails here.
# The crates' own code against their rust-version is checked by clippy's `incompatible_msrv`
# (std APIs newer than the declared rust-version) in `make lint`; language features are not.
# docs/packaging.md has the figures.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
CRATES=("$@")
log() { echo "msrv: $*" >&2; }

if ((${#CRATES[@]} == 0)); then
  echo "usage: $0 CRATE.. (the published crates: make msrv)" >&2
  exit 2
fi
if ! cargo +nightly -V >/dev/null 2>&1; then
  log "needs a nightly toolchain (cargo +nightly) for -Z direct-minimal-versions"
  exit 1
fi

# Each crate alone, in a scratch workspace of its own under $CARGO_TARGET_DIR/msrv/CRATE/ws (the
# real Cargo.lock is untouched). The published crates it depends on sit beside it in another
# workspace (../ext), so only its own direct dependencies are taken at their lowest (as members,
# theirs would be too, and the check would be of the whole family at once).
manifest() { # SOURCE DEST MEMBERS PATH_PREFIX: the root manifest, other members and paths
  python3 - "$@" <<'PY'
import re, sys
src, dst, members, prefix = sys.argv[1:5]
text = open(src).read()
text = re.sub(r'(?m)^members = \[.*\]$', f'members = [{members}]', text, count=1)
# The root's [patch.crates-io] (the examples' library from the checkout) names every published
# crate by path, and cargo loads a patch eagerly: here only the crate and its own are copied.
text = re.sub(r'(?ms)^\[patch\.crates-io\]\n.*?(?=^\[|\Z)', '', text)
text = re.sub(r'path = "crates/(effectively-once[a-z-]*)"',
              lambda m: f'path = "{prefix}crates/{m.group(1)}"', text)
open(dst, "w").write(text)
PY
}
# A user never builds a crate's dev-dependencies (criterion, proptest, tower): without them, the
# lowest versions are the library's own needs.
strip_dev() {
  python3 - "$1" <<'PY'
import re, sys
path = sys.argv[1]
sections = re.split(r'(?m)^(?=\[)', open(path).read())
dropped = ("[dev-dependencies]", "[[bench]]", "[[test]]", "[[example]]")
open(path, "w").write("".join(s for s in sections if not s.startswith(dropped)))
PY
}
# The published crates CRATE depends on (normal dependencies, any feature), by name.
siblings() {
  local crate="$1"
  grep -oE '^effectively-once[a-z-]*' "$ROOT/crates/$crate/Cargo.toml" | grep -vx "$crate" | sort -u || true
}

failed=0
for crate in "${CRATES[@]}"; do
  dir="$TARGET/msrv/$crate"
  rm -rf "$dir"
  mkdir -p "$dir/ws/crates" "$dir/ext/crates"
  cp -r "$ROOT/crates/$crate" "$dir/ws/crates/"
  strip_dev "$dir/ws/crates/$crate/Cargo.toml"
  manifest "$ROOT/Cargo.toml" "$dir/ws/Cargo.toml" "\"crates/$crate\"" "../ext/"
  # The crates it depends on, and theirs, in ../ext.
  todo=($(siblings "$crate")); deps=()
  while ((${#todo[@]})); do
    next="${todo[0]}"; todo=("${todo[@]:1}")
    [[ " ${deps[*]} " == *" $next "* ]] && continue
    deps+=("$next"); todo+=($(siblings "$next"))
  done
  members=""
  for dep in "${deps[@]}"; do
    cp -r "$ROOT/crates/$dep" "$dir/ext/crates/"
    strip_dev "$dir/ext/crates/$dep/Cargo.toml"
    members+="\"crates/$dep\", "
  done
  manifest "$ROOT/Cargo.toml" "$dir/ext/Cargo.toml" "${members%, }" ""

  (
    cd "$dir/ws"
    log "$crate: resolving with -Z direct-minimal-versions and the Rust-version-aware resolver"
    # (errexit is off inside a `( ) ||`: each step says its own failure.)
    CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo +nightly -q generate-lockfile -Z direct-minimal-versions ||
      exit 1
    cargo +nightly metadata -q --format-version 1 --locked >"$dir/metadata.json" || exit 1
    python3 "$ROOT/infra/msrv.py" "$dir/metadata.json" "$crate" || exit 1
    if [[ -z "${MSRV_NO_BUILD:-}" ]]; then
      log "$crate: checking the library against the lowest direct dependency versions"
      CARGO_TARGET_DIR="$TARGET/msrv/target" cargo +nightly check -q --locked --lib --all-features || exit 1
    fi
  ) || failed=1
done
if ((failed)); then
  log "failed (above)"
  exit 1
fi
log "ok"
