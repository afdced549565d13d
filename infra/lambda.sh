#!/usr/bin/env bash
# The four functions' artifacts (payments-consumer, receipts-relay, outbox-sweeper, payments-api)
# and their deployment (docs/deploy.md). The checks and lookups are in infra/lambda.py.
#
#   infra/lambda.sh build [--local] [BINARY...]
#                                       release bootstraps with cargo lambda (default: the four
#                                       functions), the deploy metadata check, the glibc floor check,
#                                       the sizes; --local: no glibc floor check, for a bootstrap that
#                                       runs here only (make bench)
#   infra/lambda.sh check [FILE...]     the glibc floor check alone (default: the built bootstraps)
#   infra/lambda.sh metadata [TEMPLATE] [package.metadata.lambda.deploy] of each function agrees with
#                                       apps/payments/template.json (memory, timeout, tracing, alias, env; no
#                                       variable the stack sets from a parameter or a resource)
#   infra/lambda.sh sam-build           `sam build` (rust-cargolambda) of apps/payments/template.json into
#                                       .aws-sam/build, offline, then the glibc floor check
#   infra/lambda.sh deploy              sam-build, then `sam deploy` (guided the first time)
#   infra/lambda.sh deploy-function BIN build BIN, then `cargo lambda deploy` onto $STACK-BIN
#                                       (function-only update; the stack must exist; keeps what the
#                                       stack's parameters set: architecture, timeout, metrics namespace)
#   infra/lambda.sh deploy-params       the template parameters deploy would pass
#   infra/lambda.sh deploy-args         the extra arguments deploy would pass (DEPLOY_ARGS), one a line
#   infra/lambda.sh function-settings NAME <configuration.json
#                                       the `cargo lambda deploy` arguments deploy-function derives
#                                       from the function's configuration (get-function-configuration
#                                       JSON): --timeout N; refuses an ARCH other than the function's
#
# Environment:
#   ARCH=x86_64|arm64           instruction set (default x86_64); for deploy also the template's
#                               Architecture parameter
#   LAMBDA_COMPILER=cargo|zig   cargo: the workspace's [workspace.metadata.lambda.build] compiler,
#                               linked by this machine's cc (default for x86_64, and for arm64 when
#                               aarch64-linux-gnu-gcc is on PATH); zig: cargo-zigbuild with the pinned
#                               Zig from PyPI in cargo-lambda's cached venv (no cross gcc needed)
#   STACK=NAME                  stack name (default effectively-once)
#   DEPLOY_PARAMS="K=V ..."     template parameters for deploy, over those saved in samconfig.toml
#                               (e.g. "ReceiptFrom=receipts@example.com AlarmTopicArn=arn:...")
#   DEPLOY_ARGS="..."           more `sam deploy` (deploy-function: `cargo lambda deploy`) arguments,
#                               e.g. --region eu-west-1; choose the account with AWS_PROFILE. Split
#                               as a shell splits words (quotes group), with no glob or $ expanded
#   CARGO_TARGET_DIR            honoured: bootstraps are found under cargo metadata's target_directory
#   DEPLOY_ALLOW_LOCAL=1        deploy and deploy-function go ahead with an AWS_ENDPOINT_URL* on this
#                               machine (loopback, localhost) or the dummy `test` keys; refused
#                               otherwise (a shell that exported the local AWS's settings)
#
# Only the tool installs touch the network (PyPI): SAM CLI, cargo-lambda and Zig, each into a venv
# of the per-user cache (infra/tools.sh), once per machine. `sam build` and every check run
# offline; `sam deploy` needs AWS credentials.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CALLER_DIR="$PWD" # `check FILE`, `metadata FILE`: relative to where it was called
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
ARCH="${ARCH:-x86_64}"
STACK="${STACK:-effectively-once}"
export -n ARCH STACK # ours, not the compilers' or build scripts'
# Binary names (outbox-sweeper is the receipts-relay package's second binary).
FUNCTIONS=(payments-consumer receipts-relay outbox-sweeper payments-api)
# SAM CLI's pin: infra/sam-requirements.in; installed from its hash-pinned closure
# (docs/packaging.md) into the per-user cache (infra/tools.sh).
SAM_VENV="$(infra/tools.sh dir sam)"
SAM_BUILD_DIR="$ROOT/.aws-sam/build"
SAM_CONFIG="$ROOT/samconfig.toml"
TEMPLATE="apps/payments/template.json"

log() { echo "lambda: $*" >&2; }
die() { log "$*"; exit 1; }
py() { "$PYTHON" infra/lambda.py "$@"; }

rust_target() {
  case "$ARCH" in
    x86_64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) die "ARCH=$ARCH: expected x86_64 or arm64" ;;
  esac
}

# The linker for $ARCH, chosen before a long compile. (cargo lambda itself checks the Rust target
# and adds it with rustup when it is missing.)
preflight() {
  local triple compiler="${LAMBDA_COMPILER:-cargo}"
  triple="$(rust_target)"
  if [[ -z "${LAMBDA_COMPILER:-}" && "$ARCH" == arm64 ]] && ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    compiler=zig
  fi
  case "$compiler" in
    zig) export CARGO_LAMBDA_COMPILER=cargo-zigbuild ;; # overrides [workspace.metadata.lambda.build]
    cargo)
      if [[ "$ARCH" == arm64 ]]; then
        command -v aarch64-linux-gnu-gcc >/dev/null ||
          die "ARCH=arm64 LAMBDA_COMPILER=cargo needs a cross gcc (apt-get install gcc-aarch64-linux-gnu), or use LAMBDA_COMPILER=zig"
        export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER="${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc}"
      fi
      ;;
    *) die "LAMBDA_COMPILER=$compiler: expected cargo or zig" ;;
  esac
  log "ARCH=$ARCH ($triple), compiler: $compiler"
}

built_bootstraps() {
  local dir pkg
  dir="$(py target-dir)/lambda"
  for pkg in "${@:-${FUNCTIONS[@]}}"; do echo "$dir/$pkg/bootstrap"; done
}

build() {
  local local_flag=()
  if [[ "${1:-}" == --local ]]; then local_flag=(--local) && shift; fi
  local pkgs=("${@:-${FUNCTIONS[@]}}") pkg flags=(--release --locked)
  py metadata
  preflight
  [[ "$ARCH" == arm64 ]] && flags+=(--arm64)
  for pkg in "${pkgs[@]}"; do
    # One binary per call, as SAM's rust-cargolambda builder calls it: `make build` and
    # `make sam-build` share the compiled dependencies in the target directory.
    log "cargo lambda build ${flags[*]} --bin $pkg"
    infra/cargo-lambda.sh build "${flags[@]}" --bin "$pkg"
  done
  mapfile -t files < <(built_bootstraps "${pkgs[@]}")
  py check "${local_flag[@]}" --arch "$ARCH" "${files[@]}"
}

install_sam() { infra/tools.sh path sam >/dev/null; }

sam() { SAM_CLI_TELEMETRY=0 "$SAM_VENV/bin/sam" "$@"; }

sam_build() {
  py metadata
  preflight
  install_sam
  # SAM runs `cargo lambda build` without --locked and takes no flags for it: a Cargo.lock that
  # is not current fails here, before it (a current lock is one no build changes).
  cargo metadata --locked --format-version 1 >/dev/null
  # SAM runs `cargo lambda build --release [--arm64] --bin NAME` per function: the pinned
  # cargo-lambda (and the python3 holding Zig) first on PATH.
  PATH="$(infra/cargo-lambda.sh --install):$PATH"
  export PATH
  log "sam build --template-file $TEMPLATE (Architecture=$ARCH)"
  sam build --template-file "$TEMPLATE" --build-dir "$SAM_BUILD_DIR" --parameter-overrides "Architecture=$ARCH"
  local files=()
  mapfile -t files < <(find "$SAM_BUILD_DIR" -mindepth 2 -maxdepth 2 -name bootstrap | sort)
  [[ ${#files[@]} -gt 0 ]] || die "sam build produced no bootstrap under $SAM_BUILD_DIR"
  py check --arch "$ARCH" "${files[@]}"
  log "built template: ${SAM_BUILD_DIR#"$ROOT/"}/template.yaml"
}

# SAM and boto3 read AWS_DEFAULT_REGION (or --region), the Rust SDK of cargo lambda AWS_REGION:
# one set, both set.
region_env() {
  if [[ -n "${AWS_REGION:-}" && -z "${AWS_DEFAULT_REGION:-}" ]]; then
    export AWS_DEFAULT_REGION="$AWS_REGION"
  elif [[ -n "${AWS_DEFAULT_REGION:-}" && -z "${AWS_REGION:-}" ]]; then
    export AWS_REGION="$AWS_DEFAULT_REGION"
  fi
}

# Deploys go to Amazon's AWS. A shell that exported the local AWS's settings for the tests (an
# endpoint on this machine, the dummy `test` keys) would otherwise send `sam deploy` and
# `cargo lambda deploy`, which read them too, to the emulator: refused before anything runs,
# unless DEPLOY_ALLOW_LOCAL=1 asks for exactly that.
refuse_local() {
  local verb="$1" var url host found=() unset=""
  for var in $(compgen -e | grep -E '^AWS_ENDPOINT_URL(_[A-Z0-9_]+)?$' || true); do
    url="${!var}"
    host="${url#*://}"
    host="${host%%/*}"
    host="${host##*@}"
    if [[ "$host" == \[* ]]; then host="${host%%]*}" host="${host#[}"; else host="${host%%:*}"; fi
    case "${host,,}" in
      localhost | *.localhost | localhost.localdomain | 127.* | ::1 | 0:0:0:0:0:0:0:1 | ::ffff:127.* | 0.0.0.0 | ::)
        found+=("$var=$url (this machine)") unset+=" -u $var" ;;
    esac
  done
  if [[ "${AWS_ACCESS_KEY_ID:-}" == test || "${AWS_SECRET_ACCESS_KEY:-}" == test ]]; then
    found+=("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: the local AWS's dummy \`test\` keys")
    unset+=" -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY"
  fi
  [[ ${#found[@]} -gt 0 ]] || return 0
  if [[ "${DEPLOY_ALLOW_LOCAL:-}" == 1 ]]; then
    log "$verb: DEPLOY_ALLOW_LOCAL=1: going ahead with ${found[*]}"
    return 0
  fi
  {
    echo "lambda: $verb: refusing: this environment points at a local AWS, not at Amazon's:"
    printf '          %s\n' "${found[@]}"
    cat <<EOT
        (exported in this shell for the tests, say; the Makefile drops only the values it sets
        itself). Deploy to AWS without them, with your usual credentials:

            env$unset make $verb ...

        or set DEPLOY_ALLOW_LOCAL=1 to deploy to a local emulator on purpose.
EOT
  } >&2
  exit 1
}

# `deploy_args ARRAY`: DEPLOY_ARGS split into ARRAY as a shell splits words, quotes included
# (DEPLOY_ARGS='--tags "team=pay ments"' is two arguments), and nothing else: no glob is
# expanded (a `*` stays a `*`), no variable, no command. Python's shlex does the splitting.
deploy_args() {
  local -n into="$1"
  local split='import shlex, sys; sys.stdout.write("".join(a + "\0" for a in shlex.split(sys.argv[1])))'
  into=()
  [[ -n "${DEPLOY_ARGS:-}" ]] || return 0
  "$PYTHON" -c "$split" "$DEPLOY_ARGS" >/dev/null 2>&1 ||
    die "DEPLOY_ARGS: cannot split it into arguments (an unclosed quote?): $DEPLOY_ARGS"
  mapfile -d '' -t into < <("$PYTHON" -c "$split" "$DEPLOY_ARGS")
}

deploy() {
  refuse_local deploy
  sam_build
  region_env
  local params
  params="$(py deploy-params "$SAM_CONFIG" "$ARCH" "${DEPLOY_PARAMS:-}")"
  local extra=()
  deploy_args extra
  # No --template-file: from the workspace root SAM deploys .aws-sam/build/template.yaml and
  # reads (and, guided, writes) ./samconfig.toml; with the built template named, it would keep
  # samconfig.toml in .aws-sam/build.
  local args=(--stack-name "$STACK" --capabilities CAPABILITY_IAM --parameter-overrides "$params")
  if [[ ! -f "$SAM_CONFIG" && -t 0 ]]; then
    log "first deploy of $STACK: guided (answers are saved to samconfig.toml)"
    sam deploy --guided "${args[@]}" "${extra[@]}"
  elif [[ ! -f "$SAM_CONFIG" ]]; then
    log "deploy of $STACK without samconfig.toml and without a terminal: no prompts"
    sam deploy "${args[@]}" --resolve-s3 --no-fail-on-empty-changeset "${extra[@]}"
  else
    log "deploy of $STACK with samconfig.toml ($params)"
    sam deploy "${args[@]}" --no-fail-on-empty-changeset "${extra[@]}"
  fi
}

# A function-only update of a stack that `make deploy` created: build, then `cargo lambda deploy`
# with the binary's deploy metadata ([package.metadata.lambda.deploy], or the binary's own
# [package.metadata.lambda.bin.NAME.deploy]) onto the stack's function and its alias.
# The function must exist: cargo lambda would otherwise create a new one, with a new role that
# has none of the stack's permissions. What the stack's parameters set (architecture, timeout,
# metrics namespace) comes from the deployed function, not from the metadata (function-settings).
deploy_function() {
  refuse_local deploy-function
  local pkg="${1:-}" name conf settings_text settings=()
  [[ " ${FUNCTIONS[*]} " == *" $pkg "* ]] || die "deploy-function: expected one of ${FUNCTIONS[*]}, got '$pkg'"
  name="$STACK-$pkg"
  rust_target >/dev/null
  region_env
  install_sam # its boto3 looks the function up
  log "looking up $name"
  conf="$("$SAM_VENV/bin/python" infra/lambda.py function-configuration "$name" "$STACK")"
  settings_text="$(py function-settings "$name" "$ARCH" <<<"$conf")"
  mapfile -t settings <<<"$settings_text"
  local extra=()
  deploy_args extra
  if [[ " ${extra[*]} " == *" --timeout"* ]]; then
    log "DEPLOY_ARGS sets --timeout: the function's ${settings[1]} s is not kept"
    settings=()
  fi
  build "$pkg"
  infra/cargo-lambda.sh deploy --binary-name "$pkg" "${settings[@]}" "${extra[@]}" "$name"
}

# A relative FILE argument is the caller's, not the workspace root's.
caller_paths() { for a in "$@"; do if [[ "$a" == /* ]]; then echo "$a"; else echo "$CALLER_DIR/$a"; fi; done; }

cmd="${1:-}"
shift || true
case "$cmd" in
  build) build "$@" ;;
  check)
    mapfile -t f < <(if [[ $# -gt 0 ]]; then caller_paths "$@"; else built_bootstraps; fi)
    py check "${f[@]}"
    ;;
  metadata)
    mapfile -t f < <(caller_paths "$@")
    py metadata "${f[@]}"
    ;;
  sam-build) sam_build ;;
  deploy) deploy ;;
  deploy-function) deploy_function "$@" ;;
  function-settings)
    [[ $# -eq 1 ]] || die "usage: $0 function-settings FUNCTION-NAME <configuration.json"
    py function-settings "$1" "$ARCH"
    ;;
  deploy-params) py deploy-params "$SAM_CONFIG" "$ARCH" "${DEPLOY_PARAMS:-}" ;;
  deploy-args)
    deploy_args args
    [[ ${#args[@]} -eq 0 ]] || printf '%s\n' "${args[@]}"
    ;;
  *)
    echo "usage: $0 build [--local] [BINARY...] | check [FILE...] | metadata [TEMPLATE] | sam-build | deploy | deploy-function BINARY | deploy-params | deploy-args | function-settings NAME <configuration.json" >&2
    exit 2
    ;;
esac
