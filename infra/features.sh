#!/usr/bin/env bash
# The published crates leave the program's choices to the program: a crate alone (its default
# features, no dev-dependencies) must not turn on the AWS SDK's `behavior-version-latest`,
# `default-https-client` or `rt-tokio`, nor tokio's multi-threaded runtime. Binaries, examples
# and tests turn those on themselves (docs/packaging.md).
#
#   infra/features.sh CRATE..   read from `cargo tree -e features`; exit 1 naming what a crate pulls
#
# One exception, said where it is: lambda_runtime itself asks for tokio's `rt-multi-thread`, so
# effectively-once-lambda (and what depends on it) cannot drop it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
failed=0
for crate in "$@"; do
  tree="$(cd "$ROOT" && cargo tree --locked -q -e features,no-dev -p "$crate" --prefix none)"
  pulled="$(grep -oE '^aws-[a-z0-9-]+ feature "(behavior-version-latest|default-https-client|rt-tokio)"' <<<"$tree" | sort -u || true)"
  multi="$(grep -E '^tokio feature "rt-multi-thread"' <<<"$tree" | head -1 || true)"
  if [[ -n "$multi" ]]; then
    if grep -q '^lambda_runtime v' <<<"$tree"; then
      echo "$crate: tokio rt-multi-thread comes with lambda_runtime (its own dependency), not from this crate"
    else
      pulled+="${pulled:+$'\n'}tokio feature \"rt-multi-thread\""
    fi
  fi
  if [[ -n "$pulled" ]]; then
    echo "$crate: turns on what the program should choose:"
    sed 's/^/  /' <<<"$pulled"
    failed=1
  else
    echo "$crate: lean (no behaviour version, HTTP client or runtime chosen)"
  fi
done
exit "$failed"
