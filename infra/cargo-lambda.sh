#!/usr/bin/env bash
# Runs the pinned cargo-lambda (PyPI wheel, installed once per machine into a venv of the per-user
# cache, infra/tools.sh):
#   infra/cargo-lambda.sh build --release ...   ==   cargo lambda build --release ...
#   infra/cargo-lambda.sh --install             install only; prints the venv's bin directory
#
# The venv also holds the pinned Zig (PyPI `ziglang`), the linker of `--compiler cargo-zigbuild`
# (arm64 builds without a cross gcc, LAMBDA_COMPILER=zig). cargo-lambda finds it as
# `python3 -m ziglang`, so the venv's bin directory goes first on PATH. Only the install touches
# the network (PyPI).
#
# Pins: infra/cargo-lambda-requirements.in; installed from its hash-pinned closure,
# infra/cargo-lambda-requirements.txt (infra/pip-compile.sh, docs/packaging.md). The venv is keyed
# by that file's hash: a changed pin installs anew.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO_LAMBDA="$("$ROOT/infra/tools.sh" path cargo-lambda)"
VENV_BIN="$(dirname "$CARGO_LAMBDA")"
export PATH="$VENV_BIN:$PATH"
if [[ "${1:-}" == "--install" ]]; then
  echo "$VENV_BIN"
  exit 0
fi
exec "$CARGO_LAMBDA" lambda "$@"
