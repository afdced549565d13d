#!/usr/bin/env bash
# The dependency policy of `make test`: cargo-deny (pinned, built with --locked into
# ~/.cache/effectively-once/cargo-deny-VERSION) checks the workspace's dependency graph against deny.toml, offline.
#
#   infra/deny.sh install   install (once) only
#   infra/deny.sh check     `cargo deny check bans licenses sources`, offline: licences on the
#                           allow-list, crates.io the only source, duplicate versions reported
#   infra/deny.sh ARGS...   any other cargo-deny command line, e.g. the advisory check against a
#                           mirrored database (docs/packaging.md)
#
# The check reads Cargo.lock and the registry's cached manifests (`--offline`): it needs no
# network once `cargo fetch` (or any build) has run. The advisory database is not fetched here:
# the advisories check needs a copy of it, see docs/packaging.md. The first install compiles
# cargo-deny from source (release): 17 minutes on 2 cores here, at low priority beside other builds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO_DENY_VERSION="${CARGO_DENY_VERSION:-0.20.2}"
# Tools built from source live in a per-user cache outside the checkout, so a second clone or CI reuses them.
CACHE="${EFFECTIVELY_ONCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/effectively-once}"
TOOLS="$CACHE/cargo-deny-$CARGO_DENY_VERSION"
BIN="$TOOLS/bin/cargo-deny"

log() { echo "deny: $*" >&2; }

# `cargo-deny --version` prints "cargo-deny X.Y.Z".
installed() { [[ -x "$BIN" ]] && [[ "$("$BIN" --version 2>/dev/null)" == "cargo-deny $CARGO_DENY_VERSION" ]]; }

install() {
  if installed; then
    return
  fi
  log "building cargo-deny $CARGO_DENY_VERSION into $TOOLS; several minutes on 2 cores"
  mkdir -p "$TOOLS"
  # --locked: the tool's own Cargo.lock, so every machine builds the same dependency versions.
  # Without CARGO_TARGET_DIR cargo builds in a temporary directory it removes.
  env -u CARGO_TARGET_DIR cargo install cargo-deny --version "=$CARGO_DENY_VERSION" --locked \
    --root "$TOOLS" >&2
  if ! installed; then
    log "no cargo-deny $CARGO_DENY_VERSION at $BIN after cargo install"
    exit 1
  fi
}

case "${1:-}" in
  install) install ;;
  check)
    install
    cd "$ROOT"
    # cargo-deny reads the graph for every platform, so every platform's crates must be in the
    # local registry cache: a build fetches only this host's (windows-sys, say, is missing on a
    # fresh machine). `cargo fetch --locked` downloads exactly Cargo.lock's, no index update.
    cargo fetch --locked >&2
    # --locked: the graph is Cargo.lock's, as every build's is; --offline: no index update.
    "$BIN" --locked --offline check bans licenses sources
    ;;
  "") echo "usage: $0 install|check|ARGS..." >&2; exit 2 ;;
  *)
    install
    cd "$ROOT"
    "$BIN" "$@"
    ;;
esac
