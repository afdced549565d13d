#!/usr/bin/env bash
# Offline lint of the deployment template with pinned cfn-lint.
#
#   infra/lint.sh            lint apps/payments/template.json (exit non-zero on errors or warnings)
#   infra/lint.sh ARGS...    extra arguments passed to cfn-lint (e.g. --format json)
#
# cfn-lint is installed once per machine, into a venv of the per-user cache (infra/tools.sh) keyed
# by the hash-pinned infra/cfn-lint-requirements.txt (its pin: infra/cfn-lint-requirements.in;
# docs/packaging.md), so a changed pin installs anew. Only that install touches the network
# (PyPI); the lint itself runs offline.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CFN_LINT="$("$ROOT/infra/tools.sh" path cfn-lint)"

log() { echo "lint-infra: $*" >&2; }

cd "$ROOT"
# cfn-lint exits non-zero on errors (2), warnings (4) and, with --include-checks I,
# informational findings (8): all three fail the lint.
"$CFN_LINT" --include-checks I "$@" -- apps/payments/template.json
log "apps/payments/template.json: no findings"
