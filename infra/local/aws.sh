#!/usr/bin/env bash
# The local AWS: pinned moto, served one request at a time, on 127.0.0.1.
#
#   infra/local/aws.sh up       install (once) and start, or reuse a running one
#   infra/local/aws.sh install  install (once, into the per-user cache: infra/tools.sh) only,
#                               whatever is running
#   infra/local/aws.sh down     stop the one this script started on LOCAL_AWS_PORT
#   infra/local/aws.sh status   exit 0 when the endpoint answers
#   infra/local/aws.sh ensure   `up` for the default endpoint; for a custom
#                               AWS_ENDPOINT_URL (DynamoDB Local, say) only probe it
#
# `up` holds a lock per port (flock(1), where installed) and the install one per machine
# (infra/tools.sh), so test binaries, checkouts and `make` targets started at once start one
# server and one venv: the others wait, then reuse them. The pid file is written as the server
# is spawned: an `up` that finds its server still starting (its starter was killed) waits for
# that one, and a start that does not answer within LOCAL_AWS_START_TIMEOUT seconds (30) is
# stopped and its pid file removed, so no port ever gets a second server the pid file does not
# name.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=infra/local/lib.sh
. "$ROOT/infra/local/lib.sh"
STATE="$ROOT/.local-aws"
# The pinned moto's venv, in the per-user cache every checkout shares (keyed by the requirements'
# hash): infra/tools.sh.
VENV="$("$ROOT/infra/tools.sh" dir moto)"
PORT="${LOCAL_AWS_PORT:-4566}"
HOST=127.0.0.1
URL="http://$HOST:$PORT"
# The server's own state is keyed by its port, so two local AWS instances (two ports, from one
# checkout or two) never share a pid file: stopping one leaves the other serving.
RUN="$STATE/aws-$PORT"
PIDFILE="$RUN/moto.pid"
LOG="$RUN/moto.log"
START_TIMEOUT="${LOCAL_AWS_START_TIMEOUT:-30}"
# Per port, outside the checkout: two checkouts starting the same port take turns.
PORT_LOCK="${TMPDIR:-/tmp}/effectively-once-local-aws-$PORT.lock"

log() { echo "local-aws: $*" >&2; }


# Readiness: the route serve.py adds answers only when the server is ours and is up.
is_moto_up() { curl -fsS -o /dev/null --max-time 2 "$URL/_local-aws/health" 2>/dev/null; }

# Any HTTP answer at all means some server holds the endpoint.
answers() { curl -sS -o /dev/null --max-time 2 "$1" 2>/dev/null; }

# The server, as `up` starts it and as `server_pid` recognises it.
SERVER=("$VENV/bin/python" "$ROOT/infra/local/serve.py" --host "$HOST" --port "$PORT")

# The pid in the pid file, when that process runs with the command line `up` started: this
# checkout's serve.py on this port (not a process that took a stale pid's number). The
# interpreter may show under another path (a pyenv shim re-executes the real one).
server_pid() { ours "$PIDFILE" "${SERVER[*]}" "* ${SERVER[*]:1}"; }


install() { "$ROOT/infra/tools.sh" path moto >/dev/null; }

up() {
  lock 9 "$PORT_LOCK"
  # The venv, even when another checkout's server is reused: the tests run its Python too.
  install
  if is_moto_up; then
    log "reusing the local AWS already up at $URL"
    return
  fi
  local pid
  if pid="$(server_pid)"; then
    # An `up` killed while its server started: that server will take the port, so wait for it.
    log "waiting for the local AWS already starting at $URL (pid $pid)"
  else
    if answers "$URL"; then
      log "something other than moto answers at $URL; set LOCAL_AWS_PORT to another port"
      exit 1
    fi
    mkdir -p "$RUN"
    log "starting moto at $URL (log: $LOG)"
    nohup "${SERVER[@]}" >"$LOG" 2>&1 8>&- 9>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
  fi
  local deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if is_moto_up; then
      log "up"
      return
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "moto exited; last lines of $LOG:"
      tail -20 "$LOG" >&2
      rm -f "$PIDFILE"
      exit 1
    fi
    sleep 0.2
  done
  # Left starting, it would bind the port after the next `up` (waiting on the lock) found it
  # free and started its own: stop it, so the next `up` starts the only one.
  stop "$pid"
  rm -f "$PIDFILE"
  log "moto did not answer within $START_TIMEOUT s; stopped it; see $LOG"
  exit 1
}

down() {
  local pid
  if pid="$(server_pid)"; then
    stop "$pid"
    log "stopped"
  else
    log "not running (from this checkout)"
  fi
  rm -f "$PIDFILE"
}

ensure() {
  local endpoint="${AWS_ENDPOINT_URL:-$URL}"
  if [[ "$endpoint" == "$URL" ]]; then
    up
  elif answers "$endpoint"; then
    log "using $endpoint"
  else
    log "AWS_ENDPOINT_URL=$endpoint does not answer"
    exit 1
  fi
}

case "${1:-}" in
  up) up ;;
  install) install ;;
  down) down ;;
  status) is_moto_up && log "up at $URL" ;;
  ensure) ensure ;;
  *) echo "usage: $0 up|down|status|ensure|install" >&2; exit 2 ;;
esac
