#!/usr/bin/env bash
# Runs the pinned cargo-lambda (PyPI wheel, installed once into .tools/lambda-venv):
#   infra/cargo-lambda.sh build --release ...   ==   cargo lambda build --release ...
#   infra/cargo-lambda.sh --install             install only; prints the venv's bin directory
#
# The venv also holds the pinned Zig (PyPI `ziglang`), the linker of `--compiler cargo-zigbuild`
# (arm64 builds without a cross gcc, LAMBDA_COMPILER=zig). cargo-lambda finds it as
# `python3 -m ziglang`, so the venv's bin directory goes first on PATH. Only the install touches
# the network (PyPI).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.tools/lambda-venv"
PINS=("cargo-lambda==1.9.2" "ziglang==0.17.1")
STAMP="$ROOT/.tools/cargo-lambda.installed"
PYTHON="${PYTHON:-python3}"
if [[ ! -x "$VENV/bin/cargo-lambda" ]] || [[ "$(cat "$STAMP" 2>/dev/null)" != "${PINS[*]}" ]]; then
  echo "cargo-lambda: installing ${PINS[*]} into $VENV" >&2
  mkdir -p "$ROOT/.tools"
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINS[@]}"
  echo "${PINS[*]}" >"$STAMP"
fi
export PATH="$VENV/bin:$PATH"
if [[ "${1:-}" == "--install" ]]; then
  echo "$VENV/bin"
  exit 0
fi
exec "$VENV/bin/cargo-lambda" lambda "$@"
