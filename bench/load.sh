#!/usr/bin/env bash
# Load on the hub's API and the router's POST /task/, with wrk (Debian), for a bounded time:
# throughput, errors, p99 latency, and the hub's memory before and after.
#
#   bench/load.sh [path/to/silk]        (default: target/release/silk)
#
# Setup: `silk up` (1 local agent) on a loopback port; 1,000 stored runs (ad-hoc runs of a
# spider whose only URL refuses connections: each ends at once); one long run crawling the
# demo site politely (a page every 200 ms, so that it lasts); 100 SSE followers of that run (`/events?logs=true`, held open with curl).
# Then wrk, DURATION seconds each (default 15), CONNECTIONS connections (default 32): the run
# view, the runs list (100 newest), an items page; and the router (`silk router`, Redis list
# outbound on the Redis of REDIS_URL, default redis://127.0.0.1:6379) with one task per POST.
set -euo pipefail
cd "$(dirname "$0")/.."
SILK="${1:-target/release/silk}"
DURATION="${DURATION:-15}"
CONNECTIONS="${CONNECTIONS:-32}"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 2; }
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
rss_mb() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

hub_port="$(free_port)"; site_port="$(free_port)"; router_port="$(free_port)"
"$SILK" demo-site --port "$site_port" --hosts 1 --pages 100000 --no-timings >/dev/null 2>&1 &
pids+=($!)
"$SILK" up --agents 1 --allow-network 127.0.0.0/8 --listen "127.0.0.1:$hub_port" --data-dir "$work/data" >"$work/up.log" 2>&1 &
hub_pid=$!; pids+=($hub_pid)
wait_port "$hub_port"; wait_port "$site_port"
for _ in $(seq 1 100); do [ -s "$work/data/hub/admin.token" ] && break; sleep 0.05; done
token="$(cat "$work/data/hub/admin.token")"
api="http://127.0.0.1:$hub_port/api/v1"
auth=(-H "Authorization: Bearer $token" -H 'content-type: application/json')

echo "== 1,000 stored runs"
down='{"spider": "name: down\nstart_urls: [\"http://127.0.0.1:9/\"]\nmax_retries: 0\n"}'
for i in $(seq 1 1000); do curl -s -o /dev/null "${auth[@]}" -XPOST "$api/runs" -d "$down"; done
slow="{\"spider\": \"name: slow\\nstart_urls: [\\\"http://127.0.0.1:$site_port/\\\"]\\nper_host_concurrency: 1\\nper_host_delay_ms: 200\\n\"}"
run="$(curl -s "${auth[@]}" -XPOST "$api/runs" -d "$slow" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')"
echo "== 100 SSE followers of run $run"
for i in $(seq 1 100); do
  curl -s -N -o /dev/null -H "Authorization: Bearer $token" "$api/runs/$run/events?logs=true" &
  pids+=($!)
done
sleep 2
rss_before="$(rss_mb "$hub_pid")"

bench() { # name url
  echo "== $1"
  wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency -H "Authorization: Bearer $token" "$2" \
    | grep -E 'Requests/sec|Non-2xx|Socket errors|^ +(50|99)%|Latency  '
}
bench "run view (GET /runs/{id})" "$api/runs/$run"
bench "runs list (GET /runs?limit=100)" "$api/runs?limit=100"
bench "items page (GET /runs/{id}/items?limit=100)" "$api/runs/$run/items?limit=100"
rss_after="$(rss_mb "$hub_pid")"
echo "== hub RSS: ${rss_before} MB before the load, ${rss_after} MB after"

echo "== router POST /task/ (Redis list outbound)"
cat >"$work/router.yaml" <<YAML
project: "load"
server: {bind: '127.0.0.1', port: $router_port}
routing: {limits: 10, failure: {path: '$work/failures.jsonl', compress: false}}
inbound:
  - {name: 'api', class: 'http.HttpInbound'}
outbound:
  - name: 'detail'
    selector: ["data_type == 'detail' and detail_url"]
    class: 'redis_queue.RedisListOutbound'
    init: {url: '$REDIS_URL', key: 'silk-load:$router_port'}
    task_params: [detail_url, data_type]
YAML
"$SILK" router --config "$work/router.yaml" >"$work/router.log" 2>&1 &
pids+=($!)
wait_port "$router_port"
cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"data_type": "detail", "detail_url": "http://127.0.0.1:9/p/1"}'
LUA
wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$work/post.lua" "http://127.0.0.1:$router_port/task/" \
  | grep -E 'Requests/sec|Non-2xx|Socket errors|^ +(50|99)%|Latency  '
python3 - "$REDIS_URL" "$router_port" <<'PY' || true
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); key = f"silk-load:{sys.argv[2]}"
s = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379))
cmd = f"*2\r\n$3\r\nDEL\r\n${len(key)}\r\n{key}\r\n".encode(); s.sendall(cmd); s.recv(64)
PY
