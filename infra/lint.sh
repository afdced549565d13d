#!/usr/bin/env bash
# Offline lint of the deployment template with pinned cfn-lint.
#
#   infra/lint.sh            lint apps/payments/template.json (exit non-zero on errors or warnings)
#   infra/lint.sh ARGS...    extra arguments passed to cfn-lint (e.g. --format json)
#
# cfn-lint is installed once into the project-local venv .tools/venv from the hash-pinned
# infra/cfn-lint-requirements.txt (its pin: infra/cfn-lint-requirements.in; docs/packaging.md);
# the stamp .tools/cfn-lint.installed is a copy of that file, so a changed pin reinstalls.
# Only that install touches the network (PyPI); the lint itself runs offline.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
VENV="$TOOLS/venv"
STAMP="$TOOLS/cfn-lint.installed"
PYTHON="${PYTHON:-python3}"
REQS="$ROOT/infra/cfn-lint-requirements.txt"

log() { echo "lint-infra: $*" >&2; }

install() {
  if [[ -x "$VENV/bin/cfn-lint" ]] && cmp -s "$REQS" "$STAMP"; then
    return
  fi
  log "installing ${REQS#"$ROOT/"} into $VENV"
  mkdir -p "$TOOLS"
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
  fi
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$REQS"
  cp "$REQS" "$STAMP"
}

install
cd "$ROOT"
# cfn-lint exits non-zero on errors (2), warnings (4) and, with --include-checks I,
# informational findings (8): all three fail the lint.
"$VENV/bin/cfn-lint" --include-checks I "$@" -- apps/payments/template.json
log "apps/payments/template.json: no findings"
