#!/usr/bin/env bash
# The semver check of `make package`: cargo-semver-checks (pinned, built with --locked into the
# per-user cache, infra/tools.sh) compares each published crate's public API with a baseline, and
# fails on a change that needs a bigger version bump than the one in Cargo.toml.
#
#   infra/semver.sh install        install (once) only
#   infra/semver.sh check CRATE..  check the crates against the baseline
#   infra/semver.sh baseline       print the baseline revision
#
# Baseline, the last released version, as a git revision (cargo-semver-checks' --baseline-rev builds
# it from git, so neither the network nor crates.io is needed): SEMVER_BASELINE_REV if set, else the
# newest release tag `v*`, else the last commit of the previous workspace version (the newest
# commit whose Cargo.toml says another version): changes within an unreleased version break no
# one, and a change since the previous version must fit the bump the current one made. With none
# of them (one version in all of history) there is nothing to compare against, and the check says
# so and passes. A crate the baseline does not have yet (new since then) is skipped, and said so.
# The first use on a machine compiles cargo-semver-checks from source (how long:
# docs/testing.md#a-first-run-on-a-machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { echo "semver: $*" >&2; }

# The pinned cargo-semver-checks, from the per-user cache every checkout shares (built there on
# first use).
install() { BIN="$("$ROOT/infra/tools.sh" path cargo-semver-checks)"; }

# The workspace version in the root Cargo.toml at a revision.
version_at() {
  git -C "$ROOT" show "$1:Cargo.toml" 2>/dev/null \
    | sed -n '/^\[workspace\.package\]/,/^\[/s/^version = "\(.*\)"/\1/p'
}

# The newest commit whose workspace version is not the current one, or nothing.
previous_version() {
  local current commit
  current="$(version_at HEAD)"
  for commit in $(git -C "$ROOT" log --format=%H -- Cargo.toml); do
    if [[ "$(version_at "$commit")" != "$current" ]]; then
      echo "$commit"
      return
    fi
  done
}

# The baseline revision, or nothing (see the top of this file).
baseline() {
  if [[ -n "${SEMVER_BASELINE_REV:-}" ]]; then
    echo "$SEMVER_BASELINE_REV"
  elif git -C "$ROOT" describe --tags --abbrev=0 --match 'v*' >/dev/null 2>&1; then
    git -C "$ROOT" describe --tags --abbrev=0 --match 'v*'
  else
    previous_version
  fi
}

check() {
  install
  local rev
  rev="$(baseline)"
  if [[ -z "$rev" ]]; then
    log "no baseline: no release tag v*, no earlier workspace version; nothing to compare against"
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
}

case "${1:-}" in
  install) install ;;
  baseline) baseline ;;
  check) shift; check "$@" ;;
  *) echo "usage: $0 install|baseline|check CRATE.." >&2; exit 2 ;;
esac
