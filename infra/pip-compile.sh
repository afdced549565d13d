#!/usr/bin/env bash
# Regenerates hash-pinned requirement files from their `.in` files (the direct pins, by hand):
#
#   infra/pip-compile.sh FILE.in...    writes FILE.txt beside each, with every package of the
#                                      closure pinned and every file's sha256 on PyPI
#
# pip-compile (pip-tools, hash-pinned too in infra/pip-tools-requirements.txt: regenerate it with
# this script, as any other) runs from its venv in the per-user cache (infra/tools.sh), made with
# PYTHON (python3). The closure is resolved for that Python (CPython 3.11 on x86_64 Linux here):
# a dependency behind an environment marker of another platform or Python is not in it. Every
# wheel and sdist of each pinned version gets its hash, so the same file installs on any platform
# whose closure is this one. The scripts install with `pip install --require-hashes --no-deps -r
# FILE.txt`: a file whose hash is not listed, or a package the file does not list, fails the
# install.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

[[ $# -gt 0 ]] || { echo "usage: $0 FILE.in..." >&2; exit 2; }
PIP_COMPILE="$("$ROOT/infra/tools.sh" path pip-tools)"
for in_file in "$@"; do
  [[ "$in_file" == *.in ]] || { echo "$in_file: expected a .in file" >&2; exit 2; }
  rel="$(realpath --relative-to="$ROOT" "$in_file")"
  # Run from the root, so the header names the file as the regenerating command does.
  (cd "$ROOT" && CUSTOM_COMPILE_COMMAND="infra/pip-compile.sh $rel" "$PIP_COMPILE" --quiet \
    --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
    --output-file "${rel%.in}.txt" "$rel")
done
