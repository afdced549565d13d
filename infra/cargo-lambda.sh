#!/usr/bin/env bash
# Runs the pinned cargo-lambda (PyPI wheel, installed once into .tools/lambda-venv):
#   infra/cargo-lambda.sh build --release ...   ==   cargo lambda build --release ...
#   infra/cargo-lambda.sh --install             install only; prints the venv's bin directory
#
# The venv also holds the pinned Zig (PyPI `ziglang`), the linker of `--compiler cargo-zigbuild`
# (arm64 builds without a cross gcc, LAMBDA_COMPILER=zig). cargo-lambda finds it as
# `python3 -m ziglang`, so the venv's bin directory goes first on PATH. Only the install touches
# the network (PyPI).
#
# Pins: infra/cargo-lambda-requirements.in; installed from its hash-pinned closure,
# infra/cargo-lambda-requirements.txt (infra/pip-compile.sh, docs/packaging.md). The stamp is a
# copy of that file: a changed pin reinstalls.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.tools/lambda-venv"
REQS="$ROOT/infra/cargo-lambda-requirements.txt"
STAMP="$ROOT/.tools/cargo-lambda.installed"
PYTHON="${PYTHON:-python3}"
if [[ ! -x "$VENV/bin/cargo-lambda" ]] || ! cmp -s "$REQS" "$STAMP"; then
  echo "cargo-lambda: installing ${REQS#"$ROOT/"} into $VENV" >&2
  mkdir -p "$ROOT/.tools"
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$REQS"
  cp "$REQS" "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
if [[ "${1:-}" == "--install" ]]; then
  echo "$VENV/bin"
  exit 0
fi
exec "$VENV/bin/cargo-lambda" lambda "$@"
