#!/usr/bin/env bash
# The semver check of `make package`: cargo-semver-checks (pinned, built with --locked into
# .tools/semver-checks) compares each published crate's public API with a baseline, and fails on
# a change that needs a bigger version bump than the one in Cargo.toml.
#
#   infra/semver.sh install        install (once) only
#   infra/semver.sh check CRATE..  check the crates against the baseline
#
# Baseline, the last packaged version, as a git revision (cargo-semver-checks' --baseline-rev builds
# it from git, so neither the network nor crates.io is needed): SEMVER_BASELINE_REV if set, else the
# newest release tag `v*`, else the commit the last successful `make package` ran on (recorded in
# $CARGO_TARGET_DIR/package/semver-baseline). With none of them (a fresh clone before its first
# release) there is nothing to compare against, and the check says so and passes. A crate the
# baseline does not have yet (new since then) is skipped, and said so.
# The first install compiles cargo-semver-checks from source: about 12 minutes on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RECORD="${CARGO_TARGET_DIR:-$ROOT/target}/package/semver-baseline"
SEMVER_CHECKS_VERSION="${SEMVER_CHECKS_VERSION:-0.51.0}"
TOOLS="$ROOT/.tools/semver-checks"
BIN="$TOOLS/bin/cargo-semver-checks"

log() { echo "semver: $*" >&2; }

# `cargo-semver-checks --version` prints "cargo-semver-checks X.Y.Z".
installed() {
  [[ -x "$BIN" ]] && [[ "$("$BIN" semver-checks --version 2>/dev/null)" == "cargo-semver-checks $SEMVER_CHECKS_VERSION" ]]
}

install() {
  if installed; then
    return
  fi
  log "building cargo-semver-checks $SEMVER_CHECKS_VERSION into $TOOLS; about 10 minutes on 2 cores"
  mkdir -p "$TOOLS"
  # --locked: the tool's own Cargo.lock, so every machine builds the same dependency versions.
  # Without CARGO_TARGET_DIR cargo builds in a temporary directory it removes.
  env -u CARGO_TARGET_DIR cargo install cargo-semver-checks --version "=$SEMVER_CHECKS_VERSION" --locked \
    --root "$TOOLS" >&2
  if ! installed; then
    log "no cargo-semver-checks $SEMVER_CHECKS_VERSION at $BIN after cargo install"
    exit 1
  fi
}

# The baseline revision, or nothing (see the top of this file).
baseline() {
  if [[ -n "${SEMVER_BASELINE_REV:-}" ]]; then
    echo "$SEMVER_BASELINE_REV"
  elif git -C "$ROOT" describe --tags --abbrev=0 --match 'v*' >/dev/null 2>&1; then
    git -C "$ROOT" describe --tags --abbrev=0 --match 'v*'
  elif [[ -s "$RECORD" ]] && git -C "$ROOT" cat-file -e "$(cat "$RECORD")^{commit}" 2>/dev/null; then
    cat "$RECORD"
  fi
}

check() {
  install
  local rev
  rev="$(baseline)"
  if [[ -z "$rev" ]]; then
    log "no baseline: no release tag v*, no earlier \`make package\` recorded; nothing to compare against"
    record
    return
  fi
  log "baseline: $rev ($(git -C "$ROOT" log -1 --format='%h %s' "$rev"))"
  local args=()
  for crate in "$@"; do
    if git -C "$ROOT" cat-file -e "$rev:crates/$crate/Cargo.toml" 2>/dev/null; then
      args+=(-p "$crate")
    else
      log "$crate: not in the baseline (new since $rev), nothing to compare"
    fi
  done
  if [[ ${#args[@]} -gt 0 ]]; then
    # --all-features: every public item, as docs.rs shows them.
    (cd "$ROOT" && "$BIN" semver-checks check-release --baseline-rev "$rev" --all-features "${args[@]}")
  fi
  record
}

# This commit becomes the next baseline (when no SEMVER_BASELINE_REV or tag says otherwise).
record() {
  mkdir -p "$(dirname "$RECORD")"
  git -C "$ROOT" rev-parse HEAD >"$RECORD"
}

case "${1:-}" in
  install) install ;;
  check) shift; check "$@" ;;
  *) echo "usage: $0 install|check CRATE.." >&2; exit 2 ;;
esac
