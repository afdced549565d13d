#!/usr/bin/env bash
# The local Kafka: a tansu broker (a Kafka-protocol broker written in Rust) with in-memory storage
# on 127.0.0.1, its state under .local-aws/. Nothing survives a restart.
#
#   infra/local/kafka.sh ensure   install (once) and start, or reuse the broker already answering
#   infra/local/kafka.sh install  install (once) only: tansu into the per-user cache (infra/tools.sh)
#   infra/local/kafka.sh down     stop the one this script started
#   infra/local/kafka.sh status   exit 0 when a Kafka broker answers ApiVersions on the port
#   infra/local/kafka.sh smoke    ensure, then create a topic, produce three records, consume them
#                                 in a consumer group and commit (infra/local/kafka_smoke.py)
#
# Port: LOCAL_KAFKA_PORT (default 9094, off Kafka's usual 9092). Pins: TANSU_VERSION (an exact
# crates.io version, built with --locked; infra/tools.sh) and kafka-python in
# infra/local/kafka-requirements.txt. The first install on a machine compiles tansu from source
# (how long: docs/testing.md#a-first-run-on-a-machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=infra/local/lib.sh
. "$ROOT/infra/local/lib.sh"
PORT="${LOCAL_KAFKA_PORT:-9094}"
HOST=127.0.0.1
STATE="$ROOT/.local-aws/kafka-$PORT"
PIDFILE="$STATE/tansu.pid"
LOG="$STATE/tansu.log"
# The pinned tansu (built with the `dynostore` feature: the `memory://` storage engine), in the
# per-user cache every checkout shares: infra/tools.sh.
BIN="$("$ROOT/infra/tools.sh" dir tansu)/bin/tansu"
START_TIMEOUT="${LOCAL_KAFKA_START_TIMEOUT:-30}"

PORT_LOCK="${TMPDIR:-/tmp}/effectively-once-local-kafka-$PORT.lock"

log() { echo "local-kafka: $*" >&2; }

# The broker, as `up` starts it and `down` recognises it. Loopback only, and advertised as such so
# clients reconnect to the same address; flags win over any STORAGE_ENGINE / LISTENER_URL in the
# environment.
BROKER=("$BIN" broker --cluster-id effectively-once-local --listener-url "tcp://$HOST:$PORT"
  --advertised-listener-url "tcp://$HOST:$PORT" --storage-engine memory://tansu/)


# A Kafka ApiVersions v0 request over bash's /dev/tcp: size 10, api key 18, version 0,
# correlation id 0x4b414641 ("KAFA"), null client id. A Kafka broker answers with a size and
# the same correlation id; anything else (or nothing within 2 s) is not one.
answers_kafka() {
  local reply=""
  { exec 3<>"/dev/tcp/$HOST/$PORT"; } 2>/dev/null || return 1
  printf '\x00\x00\x00\x0a\x00\x12\x00\x00\x4b\x41\x46\x41\xff\xff' >&3
  reply="$(timeout 2 head -c 8 <&3 | od -An -tx1 | tr -d ' \n' || true)"
  exec 3<&- 3>&-
  [[ "${reply:8:8}" == 4b414641 ]]
}

# Something listens on the port, whatever it speaks.
port_taken() { { exec 3<>"/dev/tcp/$HOST/$PORT"; } 2>/dev/null && { exec 3<&- 3>&-; return 0; }; return 1; }

install() { "$ROOT/infra/tools.sh" path tansu >/dev/null; }

up() {
  lock 9 "$PORT_LOCK"
  if answers_kafka; then
    log "reusing the Kafka broker already up at $HOST:$PORT"
    return
  fi
  if port_taken; then
    log "something other than a Kafka broker listens on $HOST:$PORT; set LOCAL_KAFKA_PORT to another port"
    exit 1
  fi
  install
  mkdir -p "$STATE"
  log "starting $("$BIN" --version) at $HOST:$PORT, in-memory storage (log: $LOG)"
  # The working directory is the state dir: tansu reads a `.env` from its working directory, and
  # none should come from the work tree.
  (
    cd "$STATE"
    # The broker must not hold the port lock for its whole life.
    exec 9>&-
    exec nohup "${BROKER[@]}" >"$LOG" 2>&1
  ) &
  echo $! >"$PIDFILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if answers_kafka; then
      log "up"
      return
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      log "tansu exited; last lines of $LOG:"
      tail -20 "$LOG" >&2
      exit 1
    fi
    sleep 0.2
  done
  # Left starting, it would bind the port after the next caller (waiting on the lock) found it
  # free and started its own: stop it first.
  stop "$(cat "$PIDFILE")"
  rm -f "$PIDFILE"
  log "tansu did not answer within $START_TIMEOUT s; stopped it; last lines of $LOG:"
  tail -20 "$LOG" >&2
  exit 1
}

down() {
  local pid
  if pid="$(ours "$PIDFILE" "${BROKER[*]}")"; then
    kill "$pid"
    for _ in $(seq 1 50); do
      port_taken || break
      sleep 0.1
    done
    log "stopped"
  else
    log "not running (from this checkout)"
  fi
  rm -f "$PIDFILE"
}

smoke() {
  up
  # The client: pinned kafka-python (pure Python, nothing to compile) in its own cached venv.
  local python
  python="$("$ROOT/infra/tools.sh" path kafka-python)"
  "$python" "$ROOT/infra/local/kafka_smoke.py" --bootstrap "$HOST:$PORT"
}

case "${1:-}" in
  ensure | up) up ;;
  install) install ;;
  down) down ;;
  status) answers_kafka && log "up at $HOST:$PORT" ;;
  smoke) smoke ;;
  *) echo "usage: $0 ensure|down|status|install|smoke" >&2; exit 2 ;;
esac
