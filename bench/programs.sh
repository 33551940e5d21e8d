#!/usr/bin/env bash
# The same Scrapy spider on the same local demo site four ways, every page counted by the
# SERVER (the demo site's hits JSON):
#   (a) plain Scrapy, one process;
#   (b) scrapy-redis (PyPI), 2 worker processes sharing a Redis queue and dupefilter;
#   (c) Silk's Scrapy integration (silk_sdk.scrapy), a program run with 2 workers on 2 agents
#       (`silk up --agents 2`);
#   (d) the same with Silk's DownloadHandler: every download made by the worker's agent
#       through the run API (the download center), not by Scrapy.
# With KILL=1, (b) and (c) run again and one worker is SIGKILLed once the site has served
# KILL_AFTER requests: what it loses shows as pages never fetched.
#
#   bench/programs.sh                        # 3 hosts x 300 pages
#   SILK=target/debug/silk KILL=1 bench/programs.sh
#
# Env: SILK (target/release/silk), HOSTS (3), PAGES (300), PORT (18831), REDIS
# (redis://127.0.0.1:6379/15; flushed), KILL (0), KILL_AFTER (300), CONCURRENCY (16, Scrapy's
# CONCURRENT_REQUESTS per worker), PY (a Python with scrapy, scrapy-redis and silk-sdk; made in
# bench/out/venv-programs on first use), ROWS ("a b c d": which of them run). Needs
# redis-server on REDIS, git, python3.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SILK=${SILK:-$ROOT/target/release/silk}
HOSTS=${HOSTS:-3}
PAGES=${PAGES:-300}
PORT=${PORT:-18831}
REDIS=${REDIS:-redis://127.0.0.1:6379/15}
KILL=${KILL:-0}
KILL_AFTER=${KILL_AFTER:-300}
CONCURRENCY=${CONCURRENCY:-16}
ROWS=${ROWS:-a b c d}
OUT=$ROOT/bench/out/programs-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$OUT"
log() { echo "programs: $*" >&2; }
[ -x "$SILK" ] || { log "no $SILK (cargo build --release -p silk, or SILK=target/debug/silk)"; exit 1; }

if [ -z "${PY:-}" ]; then
  VENV=$ROOT/bench/out/venv-programs
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" && "$VENV/bin/pip" install -q scrapy scrapy-redis
  fi
  "$VENV/bin/pip" install -q --force-reinstall --no-deps ./sdk/python
  "$VENV/bin/pip" install -q ./sdk/python
  PY=$VENV/bin/python
fi

# ---- the Scrapy project ------------------------------------------------------------------
PROJECT=$OUT/shop
mkdir -p "$PROJECT/shop/spiders"
printf '[settings]\ndefault = shop.settings\n' > "$PROJECT/scrapy.cfg"
: > "$PROJECT/shop/__init__.py"
: > "$PROJECT/shop/spiders/__init__.py"
cat > "$PROJECT/shop/settings.py" <<EOF
import os
BOT_NAME = "shop"
SPIDER_MODULES = ["shop.spiders"]
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
CONCURRENT_REQUESTS = $CONCURRENCY
CONCURRENT_REQUESTS_PER_DOMAIN = $CONCURRENCY
MODE = os.environ.get("BENCH_MODE", "plain")
if MODE == "redis":
    SCHEDULER = "scrapy_redis.scheduler.Scheduler"
    DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
    REDIS_URL = "$REDIS"
    SCHEDULER_IDLE_BEFORE_CLOSE = 5
elif MODE in ("silk", "silk-dc"):
    SCHEDULER = "silk_sdk.scrapy.Scheduler"
    DUPEFILTER_CLASS = "silk_sdk.scrapy.DupeFilter"
    ITEM_PIPELINES = {"silk_sdk.scrapy.ItemPipeline": 300}
if MODE == "silk-dc":
    DOWNLOAD_HANDLERS = {"http": "silk_sdk.scrapy.DownloadHandler",
                         "https": "silk_sdk.scrapy.DownloadHandler"}
    REACTOR_THREADPOOL_MAXSIZE = $CONCURRENCY
EOF
cp "$ROOT/examples/scrapy/demo_spider.py" "$PROJECT/shop/spiders/demo.py"
( cd "$PROJECT" && git init -q -b main && git add -A &&
  git -c user.name=bench -c user.email=bench@silk.invalid commit -qm spider )

# ---- helpers -----------------------------------------------------------------------------
SITE_PID=
start_site() { # $1: name
  "$SILK" demo-site --port "$PORT" --hosts "$HOSTS" --pages "$PAGES" --no-timings \
    --hits-json "$OUT/$1.hits.json" > "$OUT/$1.site.log" 2>&1 &
  SITE_PID=$!
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0; sleep 0.1; done
  log "demo site did not start"; exit 1
}
stop_site() { kill -TERM "$SITE_PID"; wait "$SITE_PID" 2>/dev/null; }
START_URL=http://127.0.0.1:$PORT/
kill_one_worker_when() { # $1: a command printing a progress count; kills the newest worker at KILL_AFTER
  local count=$1
  ( while [ "$(eval "$count" 2>/dev/null || echo 0)" -lt "$KILL_AFTER" ]; do sleep 0.2; done
    pkill -KILL -n -f "scrapy crawl demo" && log "killed one worker" ) &
}
report() { # $1: name, $2: seconds
  python3 - "$OUT/$1.hits.json" "$1" "$2" "$HOSTS" "$PAGES" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
hits = json.load(open(sys.argv[1])); name, secs = sys.argv[2], float(sys.argv[3])
hosts, pages = int(sys.argv[4]), int(sys.argv[5])
import posixpath, re
from urllib.parse import unquote, urlsplit
# A product page however it was asked for: /p/5, /p/%35, /p/x/../5, /p/5;x, /p/5?utm_source=…
canon = {}
for u, n in hits.items():
    parts = urlsplit(u)
    path = posixpath.normpath(unquote(parts.path.split(";")[0]))
    m = re.fullmatch(r"/p/(\d+)", path)
    if m:
        key = (parts.hostname, int(m[1]))
        canon[key] = canon.get(key, 0) + n
expected = hosts * pages
fetched = len(canon)
dups = sum(n - 1 for n in canon.values() if n > 1)
print(f"{name:24s} {secs:7.1f} s  product pages {fetched:5d}/{expected}  missing {expected - fetched:4d}"
      f"  duplicate fetches {dups:4d}  {fetched / secs:7.1f} unique pages/s  requests {sum(hits.values())}")
EOF
}

# ---- (a) plain Scrapy --------------------------------------------------------------------
run_plain() {
  start_site "a plain scrapy"
  local t0; t0=$(date +%s.%N)
  ( cd "$PROJECT" && BENCH_MODE=plain "$PY" -m scrapy crawl demo -a start_url="$START_URL" ) > "$OUT/a plain scrapy.log" 2>&1
  local t1; t1=$(date +%s.%N)
  stop_site
  report "a plain scrapy" "$(echo "$t1 - $t0" | bc)"
}

# ---- (b) scrapy-redis, 2 workers -----------------------------------------------------------
run_redis() { # $1: name, $2: kill (0/1)
  redis-cli -u "$REDIS" flushdb > /dev/null
  start_site "$1"
  local t0; t0=$(date +%s.%N)
  ( cd "$PROJECT" && BENCH_MODE=redis "$PY" -m scrapy crawl demo -a start_url="$START_URL" ) > "$OUT/$1.w0.log" 2>&1 &
  local w0=$!
  ( cd "$PROJECT" && BENCH_MODE=redis "$PY" -m scrapy crawl demo -a start_url="$START_URL" ) > "$OUT/$1.w1.log" 2>&1 &
  local w1=$!
  # Progress: requests the shared dupefilter has seen.
  [ "$2" = 1 ] && kill_one_worker_when "redis-cli -u '$REDIS' scard demo:dupefilter"
  wait "$w0" "$w1" 2>/dev/null
  local t1; t1=$(date +%s.%N)
  stop_site
  report "$1" "$(echo "$t1 - $t0" | bc)"
}

# ---- (c) Silk, 2 workers on 2 agents -------------------------------------------------------
run_silk() { # $1: name, $2: kill (0/1), $3: BENCH_MODE (silk; silk-dc: downloads by the agents)
  local dir=$OUT/$1.silk api_port=$((PORT + 50))
  mkdir -p "$dir"
  start_site "$1"
  "$SILK" up --agents 2 --allow-network 127.0.0.0/8 --listen "127.0.0.1:$api_port" --data-dir "$dir" > "$dir/up.log" 2>&1 &
  local up=$!
  for _ in $(seq 1 100); do [ -s "$dir/hub/admin.token" ] && break; sleep 0.1; done
  export SILK_SERVER=http://127.0.0.1:$api_port SILK_TOKEN; SILK_TOKEN=$(cat "$dir/hub/admin.token")
  cat > "$dir/project.yaml" <<EOF
name: shop
git_url: file://$PROJECT
branch: main
build: {kind: command}
EOF
  "$SILK" projects create -f "$dir/project.yaml" > /dev/null
  "$SILK" projects build shop --ref main --version 1.0 --wait > /dev/null
  # Leases of a killed worker come back after max(lease_timeout_ms, 2 x timeout_ms): 10 s.
  printf 'name: shop\nstart_urls: []\nper_host_concurrency: %s\nper_host_delay_ms: 0\ntimeout_ms: 5000\nlease_timeout_ms: 10000\n' \
    "$CONCURRENCY" > "$dir/settings.yaml"
  local t0; t0=$(date +%s.%N)
  local id
  id=$("$SILK" run "$dir/settings.yaml" --program shop --workers 2 --strategy fixed:2 \
        --env "BENCH_MODE=${3:-silk}" -- "$PY" -m scrapy crawl demo -a start_url="$START_URL")
  # Progress: the run's requests done.
  [ "$2" = 1 ] && kill_one_worker_when "curl -s -H 'Authorization: Bearer $SILK_TOKEN' $SILK_SERVER/api/v1/runs/$id | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"stats\"][\"total\"])'"
  "$SILK" runs wait "$id" > "$dir/run.txt" 2>&1
  local t1; t1=$(date +%s.%N)
  kill -TERM "$up"; wait "$up" 2>/dev/null
  stop_site
  report "$1" "$(echo "$t1 - $t0" | bc)"
}

log "results in $OUT"
echo "Scrapy on $HOSTS hosts x $PAGES pages, CONCURRENT_REQUESTS $CONCURRENCY per worker ($("$PY" -m scrapy version))" | tee "$OUT/summary.txt"
row() { case " $ROWS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
row a && run_plain
row b && run_redis "b scrapy-redis x2" 0
row c && run_silk "c silk x2 on 2 agents" 0
row d && run_silk "d silk x2, downloads by the agents" 0 silk-dc
if [ "$KILL" = 1 ]; then
  row b && run_redis "b scrapy-redis x2, kill" 1
  row c && run_silk "c silk x2, kill" 1
fi
cat "$OUT/summary.txt"
