#!/usr/bin/env bash
# The server under wrk, an external HTTP load generator written in C, as the issue that asked for
# a faster hot path measured it: one session, every connection posting one call per request.
#
#   apt-get install -y wrk            # not installed by .ci/run: a benchmark, not a test
#   cargo build --release -p toolhost-server   # fat LTO: about 25 minutes on two cores
#   bash apps/server/benches/wrk.sh [SECONDS]   # default 10 s per point
#   TOOLHOST_SERVER_BIN=/path/to/older/toolhost-server bash apps/server/benches/wrk.sh   # another build
#
# Points: `todo_write` of an empty list (noop), `readFile` of a 20-line file (read: journalled
# once, when it ends) and `writeFile` of a 20-line file (write: proposed durably before it runs,
# then settled), at 1 and 64 connections, against a release server with a SQLite journal in a temp
# folder. wrk prints its latency distribution (p50, p90, p99) and requests per second per point.
set -euo pipefail

seconds="${1:-10}"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
server="${TOOLHOST_SERVER_BIN:-$root/target/release/toolhost-server}"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 2; }
[ -x "$server" ] || { echo "build the server first: cargo build --release -p toolhost-server" >&2; exit 2; }

work="$(mktemp -d /tmp/toolhost-wrk.XXXXXX)"
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/workspace"
head -n 20 "$root/apps/server/benches/fixtures/read.txt" > "$work/workspace/notes.txt"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$server" --listen "127.0.0.1:$port" --database-url "sqlite://$work/journal.db" --state-dir "$work/state" \
    > "$work/server.log" 2>&1 &
pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
session="$(curl -sf "$base/v1/sessions" -H 'content-type: application/json' \
    -d "{\"working_directory\": \"$work/workspace\", \"approval_mode\": \"auto_run\"}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')"

# Every request is a new message (the server names it), so one call id serves every request.
cat > "$work/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = os.getenv("BODY")
done = function(summary, latency, requests)
  io.write(string.format("p50 %.0f us, p90 %.0f us, p99 %.0f us, %d non-2xx\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99), summary.errors.status))
end
EOF

noop='{"calls": [{"id": "c1", "name": "todo_write", "arguments": "{\"todos\": []}"}]}'
read='{"calls": [{"id": "c1", "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}]}'
write="{\"calls\": [{\"id\": \"c1\", \"name\": \"writeFile\", \"arguments\": $(python3 -c 'import json, sys; print(json.dumps(json.dumps({"path": "out.txt", "content": sys.stdin.read()})))' < "$work/workspace/notes.txt")}]}"
for workload in noop read write; do
    body="${!workload}"
    # Check once that the call executes.
    curl -sf "$base/v1/sessions/$session/calls" -H 'content-type: application/json' -d "$body" |
        grep -q '"executed"' || { echo "$workload does not execute" >&2; exit 1; }
    for connections in 1 64; do
        threads=$(( connections < 2 ? 1 : 2 ))
        echo "== $workload, $connections connections, ${seconds}s"
        BODY="$body" wrk -t"$threads" -c"$connections" -d"${seconds}s" -s "$work/post.lua" \
            "$base/v1/sessions/$session/calls" | grep -E 'Requests/sec|p50'
    done
done
