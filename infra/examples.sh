#!/usr/bin/env bash
# The examples' copy-out check (`make examples`, run by `make test`): each crate under examples/
# is copied to a temporary directory outside the checkout, as a user copies one, and built there
# (all targets, tests included) with only what stands for crates.io: a `[patch.crates-io]` that
# points the published library crates (crates/*) at this checkout, and the workspace's
# Cargo.lock, so the copy resolves offline to the versions the workspace tested.
#
#   infra/examples.sh [EXAMPLE..]   check these examples (default: every one)
#   infra/examples.sh self-test     show that the check refuses an example that depends on a path
#                                   outside itself or on an unpublished crate
#   infra/examples.sh target        the target directory of the crates built outside the workspace
#   infra/examples.sh cargo ARGS..  cargo ARGS on a crate outside the workspace, as this check runs
#                                   it (the shared target, the workspace's debug settings and [env])
#
# An example fails the check when it does not build alone (a `workspace = true` key, a crate it
# only had through the workspace's feature unification), when it depends on a crate crates.io
# will not have (`payments`, `local`: not in the patch, so not found offline), when it names a
# path outside its own directory (a relative one breaks in the copy; an absolute one is refused
# by the check of `cargo metadata` below), or when it resolves any crate to another version than
# the workspace's lock holds.
#
# The copied lock holds the whole workspace; the graph check below (`cargo metadata`) prunes it to
# what the example uses and refuses any version the workspace's lock does not hold, so the build
# after it runs `--locked`.
#
# Builds share one target directory per user, in the tool cache (`infra/tools.sh cache`), with
# the workspace's debug settings (line tables only, none for dependencies) to keep it small: the
# registry crates, with the features the examples pick, are compiled once per machine and reused
# by every clone; each clone adds only its own library crates (other paths, so other artifact
# names). The examples' own crates keep one name in every clone (cargo names a workspace's root
# package by its path inside the workspace), so a check after another clone's rebuilds them, a
# few seconds each. Two clones checking at once wait for each other on cargo's lock. Its size only
# grows: `rm -rf "$(infra/examples.sh target)"` gives the space back (the next run rebuilds).
# How long a cold and a warm run take: docs/testing.md#how-long-the-suites-take.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local/lib.sh
. "$ROOT/infra/local/lib.sh"
TARGET="${EXAMPLES_TARGET_DIR:-$("$ROOT/infra/tools.sh" cache)/outside-target}"
# The copies stay between runs, in one place per checkout outside it: a second run finds each
# copy unchanged (same path, files and times), so cargo rebuilds nothing of it. Beside the shared
# target in the user's own cache, not in a shared /tmp, where another user could make the
# directory first and plant a build script in it. Resolved, so the paths cargo metadata reports
# (canonical) compare with it.
WORK="$(dirname "$TARGET")/outside-crates/examples-$(printf %s "$ROOT" | sha256sum | cut -c1-12)"
mkdir -p "$WORK"
WORK="$(realpath "$WORK")"

log() { echo "examples: $*" >&2; }

# The published library crates: crates/* without `publish = false`, as `name path` lines.
library() {
  local manifest
  for manifest in "$ROOT"/crates/*/Cargo.toml; do
    grep -q '^publish = false' "$manifest" && continue
    printf '%s %s\n' "$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -1)" "$(dirname "$manifest")"
  done
}

# Copies the example at $1 to $WORK/$2, with the patch and the workspace's lock; prints the copy.
# Staged beside it and swapped in only when it differs from the last run's copy.
copy_out() {
  local from="$1" copy="$WORK/$2" stage="$WORK/$2.new"
  rm -rf "$stage"
  mkdir -p "$stage"
  (cd "$from" && tar --exclude=./target -cf - .) | (cd "$stage" && tar -xf -)
  {
    printf '\n# Added by infra/examples.sh: the library from the checkout, as if published.\n[patch.crates-io]\n'
    # Only the crates the example names: the library's own dependencies on each other are paths
    # in the checkout, and a patch nothing uses is a warning on every build.
    library | while read -r name path; do
      if grep -Eq "^$name( *=|\.)|^\[(dev-|build-)?dependencies\.$name\]" "$stage/Cargo.toml"; then
        printf '%s = { path = "%s" }\n' "$name" "$path"
      fi
    done
  } >>"$stage/Cargo.toml"
  cp "$ROOT/Cargo.lock" "$stage/Cargo.lock"
  if [[ -d "$copy" ]] && diff -rq "$stage" "$copy" >/dev/null 2>&1; then
    rm -rf "$stage"
  else
    rm -rf "$copy"
    mv "$stage" "$copy"
  fi
  printf '%s\n' "$copy"
}

# Resolves the copy offline (an unpublished crate is not found), then refuses a graph that holds
# a path crate other than the copy and the patched library, or a crate at a version the
# workspace's lock does not hold.
check_graph() {
  local copy="$1"
  (cd "$copy" && cargo metadata --offline --format-version 1 >"$copy.metadata.json") || return 1
  COPY="$copy" LIBRARY="$(library | cut -d' ' -f2 | tr '\n' ' ')" LOCK="$ROOT/Cargo.lock" \
    python3 - "$copy.metadata.json" <<'PYTHON'
import json, os, sys, tomllib
meta = json.load(open(sys.argv[1]))
copy, library = os.environ["COPY"], os.environ["LIBRARY"].split()
locked = {(p["name"], p["version"]) for p in tomllib.load(open(os.environ["LOCK"], "rb"))["package"]}
bad = []
for p in meta["packages"]:
    where = os.path.dirname(p["manifest_path"])
    if p["source"] is None and where != copy and not where.startswith(copy + "/") and where not in library:
        bad.append(f"{p['name']} from the path {where}, outside the example and the library")
    if p["source"] is not None and (p["name"], p["version"]) not in locked:
        bad.append(f"{p['name']} {p['version']}, a version the workspace does not lock")
for line in bad:
    print(f"error: {line}", file=sys.stderr)
sys.exit(1 if bad else 0)
PYTHON
}

# Checks one example directory; the name it is reported under is $2.
check() {
  local copy
  copy="$(copy_out "$1" "$2")"
  check_graph "$copy" || return 1
  (cd "$copy" && outside_cargo build --offline --locked -q --all-targets)
}

# cargo "$@" on a crate outside the workspace, as every such build here runs (the examples' copies,
# the own-consumer guide's crate in tools/local-aws/tests/own_function.rs): into the shared target,
# with the workspace's debug settings, and with the workspace's [env] (build_env) and nothing else
# of its config. The [env] reaches build scripts (aws-lc-sys reruns when
# AWS_LC_SYS_NO_JITTER_ENTROPY changes): a seeded artifact built under another environment than
# the workspace's would be rebuilt here and then again by the workspace.
outside_cargo() {
  local lines vars=()
  lines="$(build_env)" || return 1
  [[ -n "$lines" ]] && mapfile -t vars <<<"$lines"
  env "${vars[@]}" CARGO_TARGET_DIR="$TARGET" CARGO_PROFILE_DEV_DEBUG=line-tables-only \
    cargo "$@" --config 'profile.dev.package."*".debug=false'
}

# The workspace's `[env]` (.cargo/config.toml) as KEY=VALUE lines: the build environment every
# build of the workspace's crates has. Refuses a value
# with a line break or a table (`{ value = .., relative = .. }`), which these lines cannot carry.
build_env() {
  python3 - "$ROOT/.cargo/config.toml" <<'PYTHON'
import sys, tomllib
for key, value in tomllib.load(open(sys.argv[1], "rb")).get("env", {}).items():
    if not isinstance(value, str) or "\n" in value:
        sys.exit(f"error: [env] {key} in .cargo/config.toml is not a one-line string")
    print(f"{key}={value}")
PYTHON
}

# A first run on a machine starts from what the workspace's own builds compiled: the same crate,
# version, features, settings and build environment give the same artifact names and
# fingerprints in any target dir. Hard links: a copy would double the disk. The library's own
# crates are left out: built from outside their workspace they get the same names but other
# fingerprints, so two builds sharing their files would each find the other's and rebuild them,
# every run.
seed() {
  # One seed at a time: two clones' first runs on a machine would copy onto each other.
  lock 8 "$TARGET.seed.lock"
  [[ -e "$TARGET/debug" || ! -d "$ROOT/target/debug/deps" ]] && return 0
  mkdir -p "$TARGET/debug"
  local dir
  for dir in deps build .fingerprint; do
    [[ -d "$ROOT/target/debug/$dir" ]] || continue
    # Hard links stay within one file system, and the cache may be on another than the checkout:
    # then no seed, and the first run compiles what it needs.
    if ! cp -al "$ROOT/target/debug/$dir" "$TARGET/debug/$dir" 2>/dev/null; then
      log "not seeded from the workspace's target: $TARGET is on another file system"
      rm -rf "$TARGET/debug"
      return 0
    fi
  done
  unshare_library
}

# Unlinks the library crates' artifacts from a seeded target (see `seed`).
unshare_library() {
  find "$TARGET/debug/deps" "$TARGET/debug/.fingerprint" "$TARGET/debug/build" -maxdepth 1 \
    \( -name 'libeffectively_once*' -o -name 'effectively_once*' -o -name 'effectively-once*' \) \
    -exec rm -rf {} + 2>/dev/null
  return 0
}

run() {
  local failed=() name started
  seed
  for name in "$@"; do
    started=$SECONDS
    if check "$ROOT/examples/$name" "$name"; then
      log "$name builds alone ($((SECONDS - started)) s)"
    else
      log "$name does NOT build alone"
      failed+=("$name")
    fi
  done
  if ((${#failed[@]})); then
    log "failed: ${failed[*]}"
    return 1
  fi
}

# Two broken copies of an example, each of which the check must refuse.
self_test() {
  local base="$ROOT/examples/orders-consumer" broken="$WORK/broken"
  rm -rf "$broken"
  mkdir -p "$broken"
  cp -r "$base" "$broken/by-path"
  printf '\n[dev-dependencies.local]\npath = "%s/tools/local-aws"\n' "$ROOT" >>"$broken/by-path/Cargo.toml"
  cp -r "$base" "$broken/unpublished"
  sed -i 's/^\[dependencies\]$/[dependencies]\npayments = "0.2"/' "$broken/unpublished/Cargo.toml"
  local case ok=1
  for case in by-path unpublished; do
    if check "$broken/$case" "self-test-$case" 2>"$WORK/$case.log"; then
      log "self-test: a copy with $case passed the check; it must not"
      ok=0
    else
      log "self-test: refused $case: $(grep -m1 -E '^error: (local from the path|no matching package)' "$WORK/$case.log")"
    fi
  done
  ((ok))
}

cd "$ROOT"
if [[ "${1:-}" == self-test ]]; then
  self_test
elif [[ "${1:-}" == target ]]; then
  echo "$TARGET"
elif [[ "${1:-}" == cargo ]]; then
  shift
  outside_cargo "$@"
elif (($#)); then
  run "$@"
else
  mapfile -t all < <(find examples -mindepth 2 -maxdepth 2 -name Cargo.toml -printf '%h\n' | xargs -n1 basename | sort)
  run "${all[@]}"
fi
