#!/usr/bin/env bash
# Runs schemathesis (PyPI) against the hub's own OpenAPI document: `silk up` on a loopback port,
# requests with a non-admin token (so generated bodies that carry raw commands are refused,
# as they must be), checks that no answer is a 5xx and that every answer matches the
# document. Bounded: MAX_EXAMPLES per operation (default 20), at most 5 minutes.
#
#   bench/schemathesis.sh [path/to/silk]     (default: target/debug/silk)
set -euo pipefail
cd "$(dirname "$0")/.."
SILK="${1:-target/debug/silk}"
MAX_EXAMPLES="${MAX_EXAMPLES:-20}"
VENV="${SCHEMATHESIS_VENV:-${TMPDIR:-/tmp}/silk-schemathesis-venv}"
if [ ! -x "$VENV/bin/st" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q 'schemathesis==4.32.5'
fi
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$SILK" up --agents 1 --allow-network 127.0.0.0/8 --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/up.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  [ -s "$work/data/hub/admin.token" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
admin="$(cat "$work/data/hub/admin.token")"
member="$(curl -sf -XPOST "http://127.0.0.1:$port/api/v1/tokens" -H "Authorization: Bearer $admin" \
  -H 'content-type: application/json' -d '{"name": "schemathesis"}' | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')"
timeout 300 "$VENV/bin/st" run "http://127.0.0.1:$port/api/v1/openapi.json" \
  -H "Authorization: Bearer $member" \
  --checks not_a_server_error,response_schema_conformance \
  --max-examples "$MAX_EXAMPLES" --request-timeout 10 --seed 1 --no-color \
  | tail -n 25
