#!/usr/bin/env bash
# Regenerates hash-pinned requirement files from their `.in` files (the direct pins, by hand):
#
#   infra/pip-compile.sh FILE.in...    writes FILE.txt beside each, with every package of the
#                                      closure pinned and every file's sha256 on PyPI
#
# pip-compile (pip-tools, pinned below) runs in a throwaway venv. The closure is resolved for the
# Python that runs this script (CPython 3.11 on x86_64 Linux here): a dependency behind an
# environment marker of another platform or Python is not in it. Every wheel and sdist of each
# pinned version gets its hash, so the same file installs on any platform whose closure is this
# one. The scripts install with `pip install --require-hashes --no-deps -r FILE.txt`: a file
# whose hash is not listed, or a package the file does not list, fails the install.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# pip-tools itself, hash-pinned too (regenerate it with this script, as any other).
PIP_TOOLS_REQS="$ROOT/infra/pip-tools-requirements.txt"
PYTHON="${PYTHON:-python3}"

[[ $# -gt 0 ]] || { echo "usage: $0 FILE.in..." >&2; exit 2; }
venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
"$PYTHON" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$PIP_TOOLS_REQS"
for in_file in "$@"; do
  [[ "$in_file" == *.in ]] || { echo "$in_file: expected a .in file" >&2; exit 2; }
  rel="$(realpath --relative-to="$ROOT" "$in_file")"
  # Run from the root, so the header names the file as the regenerating command does.
  (cd "$ROOT" && CUSTOM_COMPILE_COMMAND="infra/pip-compile.sh $rel" "$venv/bin/pip-compile" --quiet \
    --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
    --output-file "${rel%.in}.txt" "$rel")
done
