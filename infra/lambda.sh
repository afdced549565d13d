#!/usr/bin/env bash
# The three functions' artifacts (payments-consumer, receipts-relay, payments-api) and their deployment (docs/deploy.md).
#
#   infra/lambda.sh build [--local] [PACKAGE...]
#                                       release bootstraps with cargo lambda (default: all three functions),
#                                       the deploy metadata check, the glibc floor check, the sizes;
#                                       --local: no glibc floor check, for a bootstrap that runs here
#                                       only (make bench)
#   infra/lambda.sh check [FILE...]     the glibc floor check alone (default: the built bootstraps)
#   infra/lambda.sh metadata [TEMPLATE] [package.metadata.lambda.deploy] of each function agrees with
#                                       infra/template.json (memory, timeout, tracing, alias, env; no
#                                       variable the stack sets from a parameter or a resource)
#   infra/lambda.sh sam-build           `sam build` (rust-cargolambda) of infra/template.json into
#                                       .aws-sam/build, offline, then the glibc floor check
#   infra/lambda.sh deploy              sam-build, then `sam deploy` (guided the first time)
#   infra/lambda.sh deploy-function PKG build PKG, then `cargo lambda deploy` onto $STACK-PKG
#                                       (function-only update; the stack must exist; keeps what the
#                                       stack's parameters set: architecture, timeout, metrics namespace)
#   infra/lambda.sh deploy-params       the template parameters deploy would pass
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
#                               Zig from PyPI in .tools/lambda-venv (no cross gcc needed)
#   STACK=NAME                  stack name (default effectively-once)
#   DEPLOY_PARAMS="K=V ..."     template parameters for deploy, over those saved in samconfig.toml
#                               (e.g. "ReceiptFrom=receipts@example.com AlarmTopicArn=arn:...")
#   DEPLOY_ARGS="..."           more `sam deploy` (deploy-function: `cargo lambda deploy`) arguments,
#                               e.g. --region eu-west-1; choose the account with AWS_PROFILE
#   CARGO_TARGET_DIR            honoured: bootstraps are found under cargo metadata's target_directory
#   DEPLOY_ALLOW_LOCAL=1        deploy and deploy-function go ahead with an AWS_ENDPOINT_URL* on this
#                               machine (loopback, localhost) or the dummy `test` keys; refused
#                               otherwise (a shell that exported the local AWS's settings)
#
# Only the tool installs touch the network (PyPI): SAM CLI into .tools/sam-venv, cargo-lambda and
# Zig into .tools/lambda-venv. `sam build` and every check run offline; `sam deploy` needs AWS
# credentials.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CALLER_DIR="$PWD" # `check FILE`: relative to where it was called
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
ARCH="${ARCH:-x86_64}"
STACK="${STACK:-effectively-once}"
export -n ARCH STACK # ours, not the compilers' or build scripts'
FUNCTIONS=(payments-consumer receipts-relay payments-api)
# The newest glibc of the provided.al2023 runtime (Amazon Linux 2023 ships glibc 2.34).
GLIBC_FLOOR=2.34
SAM_PIN="aws-sam-cli==1.170.0"
SAM_VENV="$ROOT/.tools/sam-venv"
SAM_STAMP="$ROOT/.tools/sam.installed"
SAM_BUILD_DIR="$ROOT/.aws-sam/build"
SAM_CONFIG="$ROOT/samconfig.toml"
TEMPLATE="infra/template.json"

log() { echo "lambda: $*" >&2; }
die() {
  echo "lambda: $*" >&2
  exit 1
}

target_dir() {
  cargo metadata --format-version 1 --no-deps --manifest-path "$ROOT/Cargo.toml" |
    "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

rust_target() {
  case "$ARCH" in
    x86_64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) die "ARCH=$ARCH: expected x86_64 or arm64" ;;
  esac
}

# What the build needs for $ARCH, before a long compile: the Rust target and a linker.
preflight() {
  local triple sysroot
  triple="$(rust_target)"
  sysroot="$(rustc --print sysroot)"
  if [[ ! -d "$sysroot/lib/rustlib/$triple/lib" ]]; then
    cat >&2 <<EOF
lambda: ARCH=$ARCH needs the Rust standard library for $triple, which this toolchain lacks
        ($sysroot). Install it with:

            rustup target add $triple

        and a linker for it, either
          - Zig (nothing to install: the pinned Zig from PyPI comes with cargo-lambda in
            .tools/lambda-venv; used when aarch64-linux-gnu-gcc is not on PATH, or with
            LAMBDA_COMPILER=zig), or
          - a cross gcc: apt-get install gcc-aarch64-linux-gnu (used when on PATH).
EOF
    exit 1
  fi
  local compiler="${LAMBDA_COMPILER:-}"
  if [[ -z "$compiler" ]]; then
    compiler=cargo
    if [[ "$ARCH" == arm64 ]] && ! command -v aarch64-linux-gnu-gcc >/dev/null; then
      compiler=zig
    fi
  fi
  case "$compiler" in
    zig)
      # Overrides [workspace.metadata.lambda.build] (a flag's environment variable).
      export CARGO_LAMBDA_COMPILER=cargo-zigbuild
      ;;
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

elf_arch() {
  case "$(readelf -h "$1" 2>/dev/null | sed -n 's/^ *Machine: *//p')" in
    *X86-64*) echo x86_64 ;;
    *AArch64*) echo arm64 ;;
    "") echo "not-elf" ;;
    *) echo other ;;
  esac
}

# Version needs whose name is not GLIBC_x.y: "the glibc release that added it, then what it is".
# Any other name fails the check with its name: find out what it asks of the runtime (and the
# glibc that added it) before adding it here.
declare -A GLIBC_NAMED=(
  [GLIBC_ABI_DT_RELR]="2.36 packed relative relocations (DT_RELR), from linking with -z pack-relative-relocs"
)

# Every GLIBC_* version a file needs, one a line: the names in its .gnu.version_r section.
# (readelf reads an ELF file of any architecture.)
glibc_needs() {
  readelf -V -W "$1" | awk '
    /^Version needs section/ { on = 1; next }
    /^Version / { on = 0 }
    on && match($0, /Name: GLIBC_[^ ]+/) { print substr($0, RSTART + 6, RLENGTH - 6) }' | sort -u
}

# Newer than the floor: sort -V puts it last and it differs.
newer_than_floor() { [[ "$1" != "$GLIBC_FLOOR" && "$(printf '%s\n%s\n' "$1" "$GLIBC_FLOOR" | sort -V | tail -1)" == "$1" ]]; }

# The glibc floor: every GLIBC_* version a bootstrap needs must be at most $GLIBC_FLOOR. A
# GLIBC_x.y need is glibc x.y, a named one (GLIBC_NAMED) the glibc that added it; an unknown name
# fails whatever its version.
check() {
  local failed=0 why=() file arch size line need version max symbols named unknown
  [[ $# -gt 0 ]] || die "check: no bootstrap given"
  for file in "$@"; do
    [[ -f "$file" ]] || die "$file: no such bootstrap (make build first)"
    arch="$(elf_arch "$file")"
    size="$(stat -c %s "$file")"
    printf -v line '%-52s %-7s %s' "${file#"$ROOT/"}" "$arch" "$(mib "$size")"
    local versions=() named=() unknown=()
    while read -r need; do
      if [[ "$need" =~ ^GLIBC_([0-9]+(\.[0-9]+)*)$ ]]; then
        versions+=("${BASH_REMATCH[1]}")
      elif [[ -n "${GLIBC_NAMED[$need]:-}" ]]; then
        version="${GLIBC_NAMED[$need]%% *}"
        versions+=("$version")
        if newer_than_floor "$version"; then
          named+=("$need: glibc $version, ${GLIBC_NAMED[$need]#* }")
        fi
      elif [[ -n "$need" ]]; then
        unknown+=("$need")
      fi
    done < <(glibc_needs "$file")
    max="$(printf '%s\n' "${versions[@]}" | sort -V | tail -1)"
    if [[ -z "$max" && ${#unknown[@]} -eq 0 ]]; then
      echo "$line  no glibc version needs (static?)"
      continue
    elif [[ ${#unknown[@]} -gt 0 ]]; then
      failed=1 why+=(unknown)
      echo "$line  needs ${unknown[*]}: unknown to this check: FAIL"
    elif newer_than_floor "$max"; then
      failed=1
      echo "$line  needs GLIBC_$max > $GLIBC_FLOOR: FAIL"
    else
      echo "$line  needs GLIBC_$max <= $GLIBC_FLOOR: ok"
      continue
    fi
    if [[ ${#unknown[@]} -gt 0 ]]; then
      echo "    version needs the check does not know (a glibc release it cannot place): ${unknown[*]}"
    fi
    if [[ ${#named[@]} -gt 0 ]]; then
      why+=(named)
      printf '    %s\n' "${named[@]}"
    fi
    symbols="$(readelf --dyn-syms -W "$file" | grep -oE '[A-Za-z0-9_]+@GLIBC_[0-9.]+' | sort -u |
      while IFS=@ read -r sym ver; do if newer_than_floor "${ver#GLIBC_}"; then echo "$sym@$ver"; fi; done |
      paste -sd ' ' || true)"
    if [[ -n "$symbols" ]]; then
      why+=(symbols)
      echo "    symbols newer than GLIBC_$GLIBC_FLOOR: $symbols"
    fi
  done
  [[ $failed -eq 0 ]] && return
  cat >&2 <<EOF
lambda: a bootstrap needs a glibc version newer than $GLIBC_FLOOR, the newest the provided.al2023
        runtime has, or one this check cannot place: it would fail at its first start on Lambda
        ("version \`GLIBC_...' not found").
EOF
  if [[ " ${why[*]} " == *" symbols "* ]]; then
    cat >&2 <<EOF
        Symbols: it was linked against this machine's glibc ($(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$' || echo "?")).
        Build it with Zig, which links against an older glibc whatever the machine has:

            LAMBDA_COMPILER=zig make build      (or make sam-build / make deploy)

        or build on a distribution whose glibc is at most $GLIBC_FLOOR (Amazon Linux 2023 itself).
EOF
  fi
  if [[ " ${why[*]} " == *" unknown "* ]]; then
    cat >&2 <<EOF
        Unknown version needs: find out what the name asks of the runtime and whether the glibc of
        provided.al2023 defines it (objdump -T /lib64/libc.so.6 on Amazon Linux 2023), then add it
        to GLIBC_NAMED in infra/lambda.sh with the glibc release that added it.
EOF
  fi
  if [[ " ${why[*]} " == *" named "* ]]; then
    cat >&2 <<EOF
        GLIBC_ABI_DT_RELR: link without packed relative relocations: drop -z pack-relative-relocs
        from RUSTFLAGS or the link arguments, or, if the linker packs them by default, add
        -C link-arg=-Wl,-z,nopack-relative-relocs.
EOF
  fi
  exit 1
}

mib() { awk -v b="$1" 'BEGIN { printf "%5.1f MiB", b / 1048576 }'; }

built_bootstraps() {
  local dir pkg
  dir="$(target_dir)/lambda"
  for pkg in "${@:-${FUNCTIONS[@]}}"; do echo "$dir/$pkg/bootstrap"; done
}

# [package.metadata.lambda.deploy] (what `cargo lambda deploy` applies) against the template (what
# `sam deploy` applies; another template as the argument): a function-only update must not undo
# the stack's configuration. A variable the stack sets from a parameter or a resource stays out of
# the metadata's env (merge_env keeps the function's); the timeout is FunctionTimeoutSeconds'
# default, which deploy-function replaces with the function's own (function_settings).
metadata() {
  # The metadata goes through a file: as one variable it outgrows a single argument's 128 KiB.
  "$PYTHON" - "${1:-$TEMPLATE}" \
    <(cargo metadata --format-version 1 --no-deps --manifest-path "$ROOT/Cargo.toml") <<'PY'
import json, os, sys

template = json.load(open(sys.argv[1]))
meta = json.load(open(sys.argv[2]))
params = template.get("Parameters", {})
STACK_SPECIFIC = object()

def resolve(value):
    """A template value with a parameter's default, or STACK_SPECIFIC."""
    if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in params:
        default = params[value["Ref"]].get("Default")
        return STACK_SPECIFIC if default is None else default
    if isinstance(value, (dict, list)):
        return STACK_SPECIFIC  # a resource of the stack (a table name, ...)
    return value

def stack_source(value):
    """What a value the stack sets comes from (a parameter, a resource), or None for a literal."""
    if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in params:
        return f"the parameter {value['Ref']}"
    if isinstance(value, (dict, list)):
        return "a resource or an expression of the stack"
    return None

packages = {p["name"]: p for p in meta["packages"]}
problems, checked = [], []
for logical_id, res in template["Resources"].items():
    if res.get("Type") != "AWS::Serverless::Function":
        continue
    binary = res.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
    props = res["Properties"]
    pkg = packages.get(binary)
    if pkg is None:
        problems.append(f"{logical_id}: Binary {binary!r} is no workspace package")
        continue
    deploy = ((pkg.get("metadata") or {}).get("lambda") or {}).get("deploy")
    where = f"{binary} [package.metadata.lambda.deploy]"
    if deploy is None:
        problems.append(f"{where}: missing")
        continue
    def same(key, want):
        if str(deploy.get(key)).lower() != str(want).lower():
            problems.append(f"{where}: {key} = {deploy.get(key)!r}, the template's {logical_id} has {want!r}")
    same("memory", props.get("MemorySize", 128))
    # FunctionTimeoutSeconds' default; deploy-function passes the function's own (--timeout).
    same("timeout", resolve(props.get("Timeout", 3)))
    same("tracing", props.get("Tracing", "PassThrough"))
    same("alias", props.get("AutoPublishAlias"))
    same("runtime", props.get("Runtime"))
    if deploy.get("merge_env") is not True:
        problems.append(f"{where}: merge_env must be true (the stack's table names and sender stay)")
    env = deploy.get("env") or {}
    tpl_env = props.get("Environment", {}).get("Variables", {})
    for key, value in tpl_env.items():
        source = stack_source(value)
        want = value
        if source is not None:
            if key in env:
                problems.append(f"{where}: env.{key} comes from {source}, which differs from stack to"
                                " stack: leave it to merge_env, which keeps the function's")
        elif key not in env:
            problems.append(f"{where}: env.{key} missing (the template sets {want!r})")
        elif str(env[key]) != str(want):
            problems.append(f"{where}: env.{key} = {env[key]!r}, the template sets {want!r}")
    for key in env:
        if key not in tpl_env:
            problems.append(f"{where}: env.{key} is not in the template's {logical_id}")
    checked.append(binary)

for p in problems:
    print(f"lambda: metadata: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"lambda: deploy metadata of {', '.join(checked)} agrees with {sys.argv[1]}", file=sys.stderr)
PY
}

build() {
  local floor=1
  if [[ "${1:-}" == --local ]]; then
    floor=0
    shift
  fi
  local pkgs=("${@:-${FUNCTIONS[@]}}") pkg file
  metadata
  preflight
  local flags=(--release)
  [[ "$ARCH" == arm64 ]] && flags+=(--arm64)
  for pkg in "${pkgs[@]}"; do
    # One binary per call, as SAM's rust-cargolambda builder calls it: the two paths share the
    # compiled dependencies in the target directory.
    log "cargo lambda build ${flags[*]} --bin $pkg"
    infra/cargo-lambda.sh build "${flags[@]}" --bin "$pkg"
  done
  mapfile -t files < <(built_bootstraps "${pkgs[@]}")
  for file in "${files[@]}"; do
    [[ "$(elf_arch "$file")" == "$ARCH" ]] || die "$file is $(elf_arch "$file"), not $ARCH"
  done
  if [[ $floor -eq 1 ]]; then
    check "${files[@]}"
  else
    for file in "${files[@]}"; do
      printf '%-52s %-7s %s  glibc floor not checked (--local: runs on this machine only)\n' \
        "${file#"$ROOT/"}" "$(elf_arch "$file")" "$(mib "$(stat -c %s "$file")")"
    done
  fi
}

install_sam() {
  if [[ -x "$SAM_VENV/bin/sam" && "$(cat "$SAM_STAMP" 2>/dev/null)" == "$SAM_PIN" ]]; then
    return
  fi
  log "installing $SAM_PIN into $SAM_VENV"
  mkdir -p "$ROOT/.tools"
  [[ -x "$SAM_VENV/bin/python" ]] || "$PYTHON" -m venv "$SAM_VENV"
  "$SAM_VENV/bin/pip" install --quiet --disable-pip-version-check "$SAM_PIN"
  echo "$SAM_PIN" >"$SAM_STAMP"
}

sam() { SAM_CLI_TELEMETRY=0 "$SAM_VENV/bin/sam" "$@"; }

sam_build() {
  metadata
  preflight
  install_sam
  # SAM runs `cargo lambda build --release [--arm64] --bin NAME` per function: the pinned
  # cargo-lambda (and the python3 holding Zig) first on PATH.
  PATH="$(infra/cargo-lambda.sh --install):$PATH"
  export PATH
  log "sam build --template-file $TEMPLATE (Architecture=$ARCH)"
  sam build --template-file "$TEMPLATE" --build-dir "$SAM_BUILD_DIR" \
    --parameter-overrides "Architecture=$ARCH"
  local files=() file
  mapfile -t files < <(find "$SAM_BUILD_DIR" -mindepth 2 -maxdepth 2 -name bootstrap | sort)
  [[ ${#files[@]} -gt 0 ]] || die "sam build produced no bootstrap under $SAM_BUILD_DIR"
  for file in "${files[@]}"; do
    [[ "$(elf_arch "$file")" == "$ARCH" ]] || die "$file is $(elf_arch "$file"), not $ARCH"
  done
  check "${files[@]}"
  log "built template: ${SAM_BUILD_DIR#"$ROOT/"}/template.yaml"
}

# The parameters for `sam deploy`: those saved in samconfig.toml by the first (guided) deploy,
# then Architecture=$ARCH, then DEPLOY_PARAMS. (On the command line, --parameter-overrides replaces
# the saved ones as a whole, so they are merged here.)
deploy_params() {
  "$PYTHON" - "$SAM_CONFIG" "$ARCH" "${DEPLOY_PARAMS:-}" <<'PY'
import os, shlex, sys
config, arch, extra = sys.argv[1:4]
params = {}
def add(text):
    for item in shlex.split(text):
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"lambda: parameter {item!r}: expected Key=Value")
        params[key] = value
if os.path.exists(config):
    import tomllib
    with open(config, "rb") as f:
        saved = tomllib.load(f).get("default", {}).get("deploy", {}).get("parameters", {})
    overrides = saved.get("parameter_overrides", "")
    add(" ".join(overrides) if isinstance(overrides, list) else overrides)
params["Architecture"] = arch
add(extra)
print(" ".join(f'{k}="{v}"' for k, v in params.items()))
PY
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
    host="${host,,}"
    case "$host" in
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
    cat <<EOF
        (exported in this shell for the tests, say; the Makefile drops only the values it sets
        itself). Deploy to AWS without them, with your usual credentials:

            env$unset make $verb ...

        or set DEPLOY_ALLOW_LOCAL=1 to deploy to a local emulator on purpose.
EOF
  } >&2
  exit 1
}

deploy() {
  refuse_local deploy
  sam_build
  region_env
  local params
  params="$(deploy_params)"
  # shellcheck disable=SC2206
  local extra=(${DEPLOY_ARGS:-})
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

# The deployed function's configuration (GetFunctionConfiguration, JSON on stdout), with the SAM
# venv's boto3. A missing function is refused: cargo lambda would create a stray one.
function_configuration() {
  "$SAM_VENV/bin/python" - "$1" "$STACK" <<'PY'
import json, sys
import boto3
import botocore.exceptions
name, stack = sys.argv[1:3]
try:
    conf = boto3.client("lambda").get_function_configuration(FunctionName=name)
except botocore.exceptions.ClientError as e:
    if e.response["Error"]["Code"] == "ResourceNotFoundException":
        sys.exit(f"lambda: no function {name}: create the stack first (make deploy STACK={stack});"
                 " cargo lambda would create a stray function with a role of its own")
    sys.exit(f"lambda: looking up {name}: {e}")
except botocore.exceptions.BotoCoreError as e:
    sys.exit(f"lambda: looking up {name}: {e}")
conf.pop("ResponseMetadata", None)
json.dump(conf, sys.stdout, default=str)
PY
}

# What the stack's parameters set on the function, which a function-only update must keep, from
# its configuration (GetFunctionConfiguration JSON on stdin, as `aws lambda
# get-function-configuration` prints it). Prints the `cargo lambda deploy` arguments that keep
# them, one a line; refuses what no argument can keep.
#   Architecture         cargo lambda sets the binary's: ARCH must be the function's
#   FunctionTimeoutSeconds  [package.metadata.lambda.deploy] has the default: --timeout <the function's>
#   MetricsNamespace (and every parameter- or resource-derived variable): not in the metadata's
#                        env (infra/lambda.sh metadata), so merge_env keeps the function's
function_settings() {
  FUNCTION_CONFIGURATION="$(cat)" "$PYTHON" - "$1" "$ARCH" <<'PY'
import json, os, sys
name, arch = sys.argv[1:3]
try:
    conf = json.loads(os.environ["FUNCTION_CONFIGURATION"])
except ValueError as e:
    sys.exit(f"lambda: {name}: the function configuration is no JSON: {e}")
deployed = (conf.get("Architectures") or ["x86_64"])[0]
if deployed != arch:
    sys.exit(
        f"lambda: {name} runs on {deployed}, the stack's Architecture, and ARCH={arch}: the update would"
        f" switch the function to {arch} behind the stack's back. Build for the function:\n\n"
        f"            make deploy-function ARCH={deployed} ...\n\n"
        f"        or change the stack's architecture with make deploy ARCH={arch}."
    )
timeout = conf.get("Timeout")
if not isinstance(timeout, int) or timeout <= 0:
    sys.exit(f"lambda: {name}: the function configuration has no Timeout ({timeout!r})")
env = (conf.get("Environment") or {}).get("Variables") or {}
namespace = env.get("POWERTOOLS_METRICS_NAMESPACE", "(unset)")
print(f"lambda: {name}: {deployed}, timeout {timeout} s, metrics namespace {namespace} (kept);"
      f" role {conf.get('Role')}, last modified {conf.get('LastModified')}", file=sys.stderr)
print("--timeout")
print(timeout)
PY
}

# A function-only update of a stack that `make deploy` created: build, then `cargo lambda deploy`
# with the package's [package.metadata.lambda.deploy] onto the stack's function and its alias.
# The function must exist: cargo lambda would otherwise create a new one, with a new role that
# has none of the stack's permissions. What the stack's parameters set (architecture, timeout,
# metrics namespace) comes from the deployed function, not from the metadata (function_settings).
deploy_function() {
  refuse_local deploy-function
  local pkg="${1:-}" name conf settings_text settings=()
  [[ " ${FUNCTIONS[*]} " == *" $pkg "* ]] || die "deploy-function: expected one of ${FUNCTIONS[*]}, got '$pkg'"
  name="$STACK-$pkg"
  rust_target >/dev/null
  region_env
  install_sam # its boto3 looks the function up
  log "looking up $name"
  conf="$(function_configuration "$name")"
  settings_text="$(function_settings "$name" <<<"$conf")"
  mapfile -t settings <<<"$settings_text"
  # shellcheck disable=SC2206
  local extra=(${DEPLOY_ARGS:-})
  if [[ " ${extra[*]} " == *" --timeout"* ]]; then
    log "DEPLOY_ARGS sets --timeout: the function's ${settings[1]} s is not kept"
    settings=()
  fi
  build "$pkg"
  infra/cargo-lambda.sh deploy --binary-name "$pkg" "${settings[@]}" "${extra[@]}" "$name"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  build) build "$@" ;;
  check)
    f=()
    for a in "$@"; do if [[ "$a" == /* ]]; then f+=("$a"); else f+=("$CALLER_DIR/$a"); fi; done
    [[ ${#f[@]} -gt 0 ]] || mapfile -t f < <(built_bootstraps)
    check "${f[@]}"
    ;;
  metadata)
    if [[ $# -gt 0 && "$1" != /* ]]; then set -- "$CALLER_DIR/$1"; fi
    metadata "$@"
    ;;
  sam-build) sam_build ;;
  deploy) deploy ;;
  deploy-function) deploy_function "$@" ;;
  function-settings)
    [[ $# -eq 1 ]] || die "usage: $0 function-settings FUNCTION-NAME <configuration.json"
    function_settings "$1"
    ;;
  deploy-params) deploy_params ;;
  *)
    echo "usage: $0 build [--local] [PACKAGE...] | check [FILE...] | metadata [TEMPLATE] | sam-build | deploy | deploy-function PACKAGE | deploy-params | function-settings NAME <configuration.json" >&2
    exit 2
    ;;
esac
