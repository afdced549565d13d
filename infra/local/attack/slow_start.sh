#!/usr/bin/env bash
# Attack demo (branch attack24): infra/local/aws.sh `up` gives up after 30 s but leaves its
# slow-starting server running; the next test binary waiting on the port lock then starts a
# second server on the same port and overwrites the pid file, so `down` can no longer stop the
# server that serves. Runs a copy of aws.sh in a throwaway checkout whose "moto" (a stand-in
# serve.py) takes 35 s to bind, as moto's import can on a loaded 2-core machine.
# Exit 1 (FAIL) when two servers were started for one port or `down` leaves a server serving.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CO="$(mktemp -d /tmp/attack24-co.XXXX)"
PORT="${PORT:-46$((RANDOM % 90 + 10))}"
mkdir -p "$CO/infra/local" "$CO/.local-aws/venv/bin"
cp "$HERE/../aws.sh" "$HERE/../requirements.txt" "$CO/infra/local/"
cp "$CO/infra/local/requirements.txt" "$CO/.local-aws/installed"
ln -s "$(command -v python3)" "$CO/.local-aws/venv/bin/python"
cat >"$CO/infra/local/serve.py" <<'PY'
import http.server, sys, time, os
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(os.environ["STARTS"], "a") as f:
    f.write(f"{os.getpid()}\n")
time.sleep(35)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
export STARTS="$CO/starts" LOCAL_AWS_PORT="$PORT" TMPDIR="$CO/tmp"
mkdir -p "$TMPDIR"
"$CO/infra/local/aws.sh" up 2>"$CO/first.err" &
FIRST=$!
sleep 1
"$CO/infra/local/aws.sh" up 2>"$CO/second.err" &
SECOND=$!
wait $FIRST; echo "first test binary's up: exit $?"
wait $SECOND; echo "second test binary's up: exit $?"
sleep 36   # the second server's bind, after its own 35 s
echo "servers started for port $PORT: $(wc -l <"$STARTS")"
"$CO/infra/local/aws.sh" down
sleep 1
if curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/_local-aws/health"; then
  SERVING=1; echo "after down, a server still serves on $PORT (orphaned)"
else
  SERVING=0
fi
# Clean up the servers this demo started, by their own pids.
while read -r pid; do kill "$pid" 2>/dev/null; done <"$STARTS"
STARTED=$(wc -l <"$STARTS")
rm -rf "$CO"
if [[ "$STARTED" -gt 1 || "$SERVING" -eq 1 ]]; then echo "FAIL"; exit 1; fi
echo "ok"
