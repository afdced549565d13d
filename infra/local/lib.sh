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

# `cmdline PID`: the arguments PID runs with (as it was started, or as it retitled itself), joined
# by single spaces, trailing ones dropped; nothing when it does not run. /proc where there is one,
# else ps(1).
cmdline() {
  if [[ -d /proc/self ]]; then
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | sed 's/ *$//'
  else
    ps -o args= -p "$1" 2>/dev/null
  fi
}

# `ours PIDFILE CMDLINE...`: prints the pid in PIDFILE when that process runs with one of the
# CMDLINEs (arguments joined by single spaces: "${ARGS[*]}"), exactly what the script started
# there; a CMDLINE `*REST` matches a command line that ends with REST (an interpreter that a
# wrapper such as pyenv's shim re-executed under another path, with the same arguments). A pid
# file outlives its server (a crash, a reboot) and its number goes to another process, which is
# not ours to kill.
ours() {
  local pidfile="$1" pid actual expected
  shift
  pid="$(cat "$pidfile" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  actual="$(cmdline "$pid")"
  [[ -n "$actual" ]] || return 1
  for expected in "$@"; do
    if [[ "$actual" == "$expected" || ( "$expected" == \** && "$actual" == *"${expected#\*}" ) ]]; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}
