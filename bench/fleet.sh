#!/usr/bin/env bash
# Download-center benchmark (issue 3): one run on the demo site (20 hosts x 1,000 pages,
# politeness off) through
#   crawl   `silk crawl` (the baseline: one process, no bus)
#   up1     `silk up --agents 1` (hub + 1 agent in one process, in-process bus)
#   up2     `silk up --agents 2`
#   nats2   nats-server + `silk hub --bus nats://…` + 2 `silk agent` processes
#   shared2 as nats2, with the cluster mode's shared state: `--store postgres://…` (a fresh
#           schema on SILK_TEST_POSTGRES) and `--frontier redis://…` (SILK_TEST_REDIS), so
#           the run's frontier is in Redis and its items go to PostgreSQL before each ack
#   natsN, sharedN   the same with N agent processes (`nats4`, `shared4`: how pages/s grows)
# and print, per mode, unique content pages/s (run start to end, hub clock), and whether every
# page was fetched exactly once (server-side hit counts) and written once (item file).
#
#   bench/fleet.sh                   # all modes
#   MODES="crawl nats2" bench/fleet.sh
#   HUB_ARGS="--set runs.archive_retention=0s" bench/fleet.sh   # extra hub (`up`/`hub`) flags
#   BIN=/tmp/silk-old MODES=shared2 bench/fleet.sh   # another silk binary, not built here
#
# The hubs serve their API without tokens (`--no-auth`, loopback only).
# Needs: cargo, python3, nats-server (Debian package `nats-server`); shared2 also psql and
# the PostgreSQL and Redis of SILK_TEST_POSTGRES / SILK_TEST_REDIS.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-20}
PAGES=${PAGES:-1000}
SITE_PORT=${SITE_PORT:-18731}
API_PORT=${API_PORT:-18732}
NATS_PORT=${NATS_PORT:-18733}
MAX_PENDING=${MAX_PENDING:-512}
CAPACITY=${CAPACITY:-256}
MODES=${MODES:-"crawl up1 up2 nats2"}
HUB_ARGS=${HUB_ARGS:-}
OUT=bench/out/fleet-$$
mkdir -p "$OUT"

# BIN=path runs another build of silk (e.g. an older commit's, side by side).
if [ -z "${BIN:-}" ]; then
  cargo build --release -p silk >/dev/null
  BIN=target/release/silk
fi
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_for() { # file pattern
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1
}

wait_agents() { # n
  for _ in $(seq 1 300); do
    n=$("$BIN" agents --server "http://127.0.0.1:$API_PORT" --json 2>/dev/null |
      python3 -c 'import json,sys; print(sum(1 for a in json.load(sys.stdin) if a["state"]=="alive"))' 2>/dev/null || echo 0)
    [ "$n" -ge "$1" ] && return 0; sleep 0.1
  done
  echo "agents did not come up" >&2; exit 1
}

spider() { # path
  ALLOWED=$(seq -s, -f "127.0.0.%g" 1 "$HOSTS")
  cat >"$1" <<YAML
name: bench
start_urls: ['http://127.0.0.1:$SITE_PORT/']
allowed_domains: [$ALLOWED]
follow: [{deny: ['/calendar/']}]
item_when: '/p/\d+$'
extract:
  title: { css: 'h1.title' }
  price: { css: 'span.price' }
concurrency: 64
per_host_concurrency: 64
per_host_delay_ms: 0
recrawl_segment: none
YAML
}

start_site() { # dir
  "$BIN" demo-site --port "$SITE_PORT" --hosts "$HOSTS" --pages "$PAGES" --no-timings \
    --hits-json "$1/hits.json" >"$1/site.log" 2>&1 &
  SITE=$!; PIDS+=("$SITE")
  wait_for "$1/site.log" "start url"
}

stop_site() { kill -INT "$SITE" 2>/dev/null || true; wait "$SITE" 2>/dev/null || true; }

submit() { # dir
  "$BIN" run "$1/spider.yaml" --server "http://127.0.0.1:$API_PORT" --max-pending "$MAX_PENDING" \
    --wait --json >"$1/run.json" 2>"$1/run.log"
}

for mode in $MODES; do
  D="$OUT/$mode"; mkdir -p "$D"; spider "$D/spider.yaml"; start_site "$D"
  case $mode in
    crawl)
      start=$(date +%s.%N)
      "$BIN" crawl "$D/spider.yaml" --out "$D/items.jsonl" --data-dir "$D/data" \
        --stats-json "$D/stats.json" 2>"$D/crawl.log"
      end=$(date +%s.%N)
      python3 -c "import json; print(json.dumps({'wall_s': $end - $start}))" >"$D/run.json"
      ;;
    up1|up2)
      n=${mode#up}
      # shellcheck disable=SC2086 # HUB_ARGS is a list of flags
      "$BIN" up --agents "$n" --allow-network 127.0.0.0/8 --capacity "$CAPACITY" --data-dir "$D/data" --no-auth $HUB_ARGS \
        --listen "127.0.0.1:$API_PORT" >"$D/up.log" 2>&1 &
      UP=$!; PIDS+=("$UP")
      wait_for "$D/up.log" "silk is up"; wait_agents "$n"
      submit "$D"
      kill -INT "$UP"; wait "$UP" 2>/dev/null || true
      ;;
    nats[0-9]*|shared[0-9]*)
      n=${mode//[!0-9]/}
      SHARED=()
      if [ "${mode#shared}" != "$mode" ]; then
        : "${SILK_TEST_POSTGRES:?shared2 needs SILK_TEST_POSTGRES}" "${SILK_TEST_REDIS:?shared2 needs SILK_TEST_REDIS}"
        SCHEMA="bench_fleet_$$"
        psql "$SILK_TEST_POSTGRES" -qc "CREATE SCHEMA $SCHEMA" >/dev/null
        SEP='?'; case $SILK_TEST_POSTGRES in *\?*) SEP='&' ;; esac
        SHARED=(--store "${SILK_TEST_POSTGRES}${SEP}options=-c%20search_path%3D$SCHEMA"
                --frontier "$SILK_TEST_REDIS" --namespace "bench$$")
      fi
      nats-server -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$D/nats" >"$D/nats.log" 2>&1 &
      NATS=$!; PIDS+=("$NATS")
      wait_for "$D/nats.log" "Server is ready"
      # shellcheck disable=SC2086 # HUB_ARGS is a list of flags
      "$BIN" hub --bus "nats://127.0.0.1:$NATS_PORT" --data-dir "$D/hub" $HUB_ARGS \
        --listen "127.0.0.1:$API_PORT" --no-auth "${SHARED[@]}" >"$D/hub.log" 2>&1 &
      HUB=$!; PIDS+=("$HUB")
      wait_for "$D/hub.log" "silk hub: API on"
      for k in $(seq 1 "$n"); do
        "$BIN" agent --bus "nats://127.0.0.1:$NATS_PORT" --allow-network 127.0.0.0/8 --id "bench-$k" --capacity "$CAPACITY" \
          ${SHARED:+--namespace "bench$$"} \
          --data-dir "$D/agent-$k" >"$D/agent-$k.log" 2>&1 &
        PIDS+=("$!")
      done
      wait_agents "$n"
      submit "$D"
      kill -INT "$HUB" 2>/dev/null || true; wait "$HUB" 2>/dev/null || true
      for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
      if [ "${mode#shared}" != "$mode" ]; then
        psql "$SILK_TEST_POSTGRES" -qc "DROP SCHEMA $SCHEMA CASCADE" >/dev/null
      fi
      ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  stop_site
done

python3 - "$OUT" "$HOSTS" "$PAGES" $MODES <<'PY'
import json, sys, collections, os
out, hosts, pages, modes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
print(f"{'mode':6} {'pages':>6} {'twice':>5} {'items':>6} {'dup':>4} {'seconds':>8} {'pages/s':>8}  state")
for mode in modes:
    d = f"{out}/{mode}"
    hits = json.load(open(f"{d}/hits.json"))
    per_page = collections.Counter()
    for url, n in hits.items():
        if "/p/" in url:
            per_page[url.split("?")[0].split("#")[0]] += n
    twice = sum(1 for n in per_page.values() if n > 1)
    run = json.load(open(f"{d}/run.json"))
    if mode == "crawl":
        items_path, seconds, state = f"{d}/items.jsonl", run["wall_s"], "succeeded"
    else:
        items_path = run.get("items_path")
        seconds = (run["finished_ms"] - run["started_ms"]) / 1000
        state = run["state"]
    if items_path:
        lines = [json.loads(l)["url"] for l in open(items_path)]
        items, dup = len(set(lines)), len(lines) - len(set(lines))
    else:
        # The shared modes keep items in the store's table (one row per item key): what
        # the run counted as new and as duplicates of a stored key.
        items, dup = run["stats"]["items"], run["stats"]["duplicate_items"]
    print(f"{mode:6} {len(per_page):6} {twice:5} {items:6} {dup:4} {seconds:8.2f} {len(per_page) / seconds:8.0f}  {state}")
print(f"(expected {hosts * pages} pages; raw output in {out})")
PY
