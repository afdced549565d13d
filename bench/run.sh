#!/usr/bin/env bash
# `make bench`: our payments-consumer against the floor (bench/floor) and the Powertools pattern,
# one workload, one local AWS.
#
#   bench/run.sh [harness options]      e.g. bench/run.sh --rounds 7 --events 2000
#
# 1. installs the pinned moto (once per machine, into the per-user cache: infra/tools.sh) and
#    serves it for the bench alone;
# 2. installs the bench venv from bench/peer/requirements.txt (Powertools, awslambdaric, boto3),
#    once per machine into the same cache;
# 3. builds the release bootstraps of payments-consumer, of the floor, payments-floor, and of ours
#    on the ordered triggers, kafka-consumer and payments-kinesis-consumer
#    (infra/lambda.sh build --local, for this machine's architecture, without the glibc floor
#    check: they run here, not on Lambda), each only if it is missing, older than its sources or of
#    another architecture (a cold build takes several minutes);
# 4. runs the in-process criterion benchmark (crates/effectively-once/benches/overhead.rs);
# 5. runs the harness (bench/harness/, `python -m bench.harness`): ours, the floor and the peer
#    (cache off and on) under the same Lambda Runtime API, the same workload and the same local AWS,
#    instruction counts under valgrind (callgrind) when it is installed; the table is printed and written to $TARGET/bench/report.md, the
#    chart to $TARGET/bench/chart.svg ($TARGET: cargo's target directory, CARGO_TARGET_DIR if set).
#
# The local AWS counts requests server-wide, so by default the bench gets a server of its own
# (the same pinned moto and infra/local/serve.py, on a free port, stopped at exit): tests running
# meanwhile against the shared one would otherwise be counted as ours. BENCH_AWS_ENDPOINT=URL uses
# an already running local AWS instead (it must have the /_local-aws/requests route, and nothing
# else should use it during the run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
# Cargo's target directory: CARGO_TARGET_DIR, a .cargo/config.toml build.target-dir, or target/.
TARGET="$(cargo metadata --format-version 1 --no-deps |
  "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
OUT="$TARGET/bench"
BOOTSTRAP="$TARGET/lambda/payments-consumer/bootstrap"
FLOOR="$TARGET/lambda/payments-floor/bootstrap"
KAFKA="$TARGET/lambda/kafka-consumer/bootstrap"
KINESIS="$TARGET/lambda/payments-kinesis-consumer/bootstrap"

log() { echo "bench: $*" >&2; }

mkdir -p "$OUT"

# 1. The local AWS: pinned moto's Python, from the per-user cache (installed there first if
#    missing). Not `aws.sh up`: that reuses a local AWS already serving the port, while the bench
#    serves its own.
if [[ -z "${BENCH_AWS_ENDPOINT:-}" ]]; then
  MOTO_PYTHON="$(infra/tools.sh path moto)"
fi
MOTO_PID=""
stop_moto() {
  if [[ -n "$MOTO_PID" ]] && kill -0 "$MOTO_PID" 2>/dev/null; then
    kill "$MOTO_PID" 2>/dev/null || true
    wait "$MOTO_PID" 2>/dev/null || true
  fi
}
trap stop_moto EXIT
if [[ -n "${BENCH_AWS_ENDPOINT:-}" ]]; then
  ENDPOINT="$BENCH_AWS_ENDPOINT"
  log "using the local AWS at $ENDPOINT"
else
  PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  ENDPOINT="http://127.0.0.1:$PORT"
  log "starting a local AWS for the bench alone at $ENDPOINT (log: $OUT/moto.log)"
  "$MOTO_PYTHON" "$ROOT/infra/local/serve.py" --host 127.0.0.1 --port "$PORT" \
    >"$OUT/moto.log" 2>&1 &
  MOTO_PID=$!
  for _ in $(seq 1 150); do
    curl -fsS -o /dev/null --max-time 2 "$ENDPOINT/_local-aws/health" 2>/dev/null && break
    kill -0 "$MOTO_PID" 2>/dev/null || { tail -20 "$OUT/moto.log" >&2; exit 1; }
    sleep 0.2
  done
  curl -fsS -o /dev/null --max-time 2 "$ENDPOINT/_local-aws/health" || { log "the local AWS did not start"; exit 1; }
fi

# 2. The bench venv: Powertools and boto3 for the peer, boto3 for the harness. A changed pin
#    installs a new venv. (pip compiles the bytecode at install, as a Lambda layer ships it.)
BENCH_PYTHON="$(infra/tools.sh path bench)"

# 3. Our function and the floor, release builds, each only when missing, older than what it is
#    built from, or built for another architecture (`make build ARCH=arm64` writes the same path):
#    they run here.
COMMON=(Cargo.toml Cargo.lock .cargo/config.toml)
OURS_SOURCES=(apps/payments/consumer crates/effectively-once-lambda crates/effectively-once-effects
  apps/payments/domain crates/effectively-once/src crates/effectively-once/Cargo.toml crates/effectively-once-dynamodb/src
  crates/effectively-once-dynamodb/Cargo.toml)
FLOOR_SOURCES=(bench/floor/src bench/floor/Cargo.toml)
KAFKA_SOURCES=("${OURS_SOURCES[@]}" apps/payments/kafka-consumer/src apps/payments/kafka-consumer/Cargo.toml)
elf_arch() {
  case "$(readelf -h "$1" 2>/dev/null | sed -n 's/^ *Machine: *//p')" in
    *X86-64*) echo x86_64 ;;
    *AArch64*) echo aarch64 ;;
  esac
}
build_if_stale() { # PACKAGE BOOTSTRAP SOURCE...
  local pkg="$1" bin="$2"
  shift 2
  if [[ ! -x "$bin" ]] || [[ "$(elf_arch "$bin")" != "$(uname -m)" ]] ||
    [[ -n "$(find "$@" -type f -newer "$bin" -print -quit 2>/dev/null)" ]]; then
    log "building $pkg (release; several minutes when cold)"
    ARCH="$(uname -m | sed 's/aarch64/arm64/')" infra/lambda.sh build --local "$pkg"
    touch "$bin" # built from the sources as they are now
  else
    log "$pkg bootstrap is up to date"
  fi
}
build_if_stale payments-consumer "$BOOTSTRAP" "${COMMON[@]}" "${OURS_SOURCES[@]}"
build_if_stale payments-floor "$FLOOR" "${COMMON[@]}" "${FLOOR_SOURCES[@]}"
# Ours on the ordered triggers (the harness's trigger rows): Kafka and Kinesis.
build_if_stale kafka-consumer "$KAFKA" "${COMMON[@]}" "${KAFKA_SOURCES[@]}"
build_if_stale payments-kinesis-consumer "$KINESIS" "${COMMON[@]}" "${OURS_SOURCES[@]}"

# 4. In-process overhead of the library (criterion; short measurement).
log "criterion: Idempotency::run with InMemoryStore against a bare handler"
cargo bench --locked -q -p effectively-once --bench overhead

# 5. Both functions, the same workload, the same local AWS.
log "harness: payments-consumer against the floor and the Powertools peer"
"$BENCH_PYTHON" -m bench.harness --endpoint "$ENDPOINT" --ours "$BOOTSTRAP" --floor "$FLOOR" \
  --ours-kafka "$KAFKA" --ours-kinesis "$KINESIS" --out "$OUT" "$@"
