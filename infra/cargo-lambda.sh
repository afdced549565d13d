#!/usr/bin/env bash
# Runs the pinned cargo-lambda (PyPI wheel, installed once into .tools/lambda-venv):
#   infra/cargo-lambda.sh build --release ...   ==   cargo lambda build --release ...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.tools/lambda-venv"
PIN="cargo-lambda==1.9.2"
STAMP="$ROOT/.tools/cargo-lambda.installed"
if [[ ! -x "$VENV/bin/cargo-lambda" ]] || [[ "$(cat "$STAMP" 2>/dev/null)" != "$PIN" ]]; then
  echo "cargo-lambda: installing $PIN into $VENV" >&2
  mkdir -p "$ROOT/.tools"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$PIN"
  echo "$PIN" >"$STAMP"
fi
exec "$VENV/bin/cargo-lambda" lambda "$@"
