#!/usr/bin/env bash
# The dependency policy of `make test`: cargo-deny (pinned, built with --locked into the per-user
# cache, infra/tools.sh) checks the workspace's dependency graph against deny.toml, offline.
#
#   infra/deny.sh install   install (once) only
#   infra/deny.sh check     `cargo deny check bans licenses sources`, offline: licences on the
#                           allow-list, crates.io the only source, duplicate versions reported
#   infra/deny.sh ARGS...   any other cargo-deny command line, e.g. the advisory check against a
#                           mirrored database (docs/packaging.md)
#
# The check reads Cargo.lock and the registry's cached manifests (`--offline`): it needs no
# network once `cargo fetch` (or any build) has run. The advisory database is not fetched here:
# the advisories check needs a copy of it, see docs/packaging.md. The first use on a machine
# compiles cargo-deny from source (how long: docs/testing.md#a-first-run-on-a-machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { echo "deny: $*" >&2; }

# The pinned cargo-deny, from the per-user cache every checkout shares (built there on first use).
install() { BIN="$("$ROOT/infra/tools.sh" path cargo-deny)"; }

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
