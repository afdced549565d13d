# What the local servers' scripts (aws.sh, redis.sh, kafka.sh) share; sourced, never run.

# `lock FD FILE`: holds an exclusive lock on FILE through descriptor FD until the script exits, so
# two callers on one port (two test binaries, two checkouts) start one server. Without flock(1)
# (macOS has none by default) it goes on unlocked.
lock() {
  command -v flock >/dev/null 2>&1 || return 0
  mkdir -p "$(dirname "$2")"
  eval "exec $1>>\"\$2\""
  flock "$1"
}

# `stop PID`: TERM, KILL after 5 s; returns once it is gone.
stop() {
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null || true
}
