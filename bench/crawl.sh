#!/usr/bin/env bash
# Crawl benchmark (issue 2): serve the demo site (20 hosts x 1,000 pages) and crawl it with
# politeness off and concurrency 64; print pages/s, CPU ms per page, peak RSS, and whether every
# page was fetched exactly once (counted by the server).
#
#   bench/crawl.sh                 # both cores: server and crawler share the machine
#   PIN=1 bench/crawl.sh           # crawler pinned to core 1, server to core 0
#   PIN=1 HOSTS=200 PAGES=250 CONCURRENCY=128 PER_HOST=8 BIN=/tmp/silk-old bench/crawl.sh
#   SPIDER_EXTRA=$'exact_dedup: false\nbloom_fp_rate: 0.001' bench/crawl.sh   # more spider keys
#
# Needs: cargo, python3, /usr/bin/time (Debian package `time`), taskset (util-linux).
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-20}
PAGES=${PAGES:-1000}
PORT=${PORT:-18711}
CONCURRENCY=${CONCURRENCY:-64}
PER_HOST=${PER_HOST:-$CONCURRENCY}
OUT=bench/out/crawl-$$
mkdir -p "$OUT"
[ -x /usr/bin/time ] || { apt-get update -qq && apt-get install -y -qq time; }

# BIN=path crawls with another build of silk (e.g. an older commit's, side by side).
if [ -z "${BIN:-}" ]; then
  cargo build --release -p silk >/dev/null
  BIN=target/release/silk
fi
SERVER_PIN=() CRAWL_PIN=()
if [ "${PIN:-0}" = 1 ]; then SERVER_PIN=(taskset -c 0); CRAWL_PIN=(taskset -c 1); fi

"${SERVER_PIN[@]}" "$BIN" demo-site --port "$PORT" --hosts "$HOSTS" --pages "$PAGES" --no-timings \
  --hits-json "$OUT/hits.json" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do grep -q "start url" "$OUT/server.log" && break; sleep 0.1; done

ALLOWED=$(seq -s, -f "127.0.0.%g" 1 "$HOSTS")
cat >"$OUT/spider.yaml" <<YAML
name: bench
start_urls: ['http://127.0.0.1:$PORT/']
allowed_domains: [$ALLOWED]
follow: [{deny: ['/calendar/']}]
item_when: '/p/\d+$'
extract:
  title: { css: 'h1.title' }
  price: { css: 'span.price' }
concurrency: $CONCURRENCY
per_host_concurrency: $PER_HOST
per_host_delay_ms: 0
recrawl_segment: none
${SPIDER_EXTRA:-}
YAML

/usr/bin/time -f "%e %U %S %M" -o "$OUT/time.txt" "${CRAWL_PIN[@]}" "$BIN" crawl "$OUT/spider.yaml" \
  --out "$OUT/items.jsonl" --data-dir "$OUT/data" --stats-json "$OUT/stats.json" 2>"$OUT/crawl.log"
kill -INT $SERVER; wait $SERVER 2>/dev/null || true
trap - EXIT

python3 - "$OUT" "$HOSTS" "$PAGES" <<'PY'
import json, sys, collections
out, hosts, pages = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
wall, user, sys_, rss_kb = open(f"{out}/time.txt").read().split()[-4:]
stats = json.load(open(f"{out}/stats.json"))
hits = json.load(open(f"{out}/hits.json"))
per_page = collections.Counter()
for url, n in hits.items():
    if "/p/" in url:
        per_page[url.split("?")[0].split("#")[0]] += n
twice = sum(1 for n in per_page.values() if n > 1)
items = sum(1 for _ in open(f"{out}/items.jsonl"))
fetched = stats["fetched"]
print(f"pages expected        {hosts * pages}")
print(f"content pages fetched {len(per_page)} (fetched more than once: {twice})")
print(f"items                 {items}")
print(f"requests fetched      {fetched} (all kinds: pages, robots.txt, 404s, redirects)")
print(f"wall                  {float(wall):.2f} s")
print(f"requests/s            {fetched / float(stats['elapsed_s']):.0f} (all requests, crawler's own clock)")
print(f"unique pages/s        {len(per_page) / float(wall):.0f} (content pages, wall clock with start-up)")
print(f"CPU ms per page       {(float(user) + float(sys_)) * 1000 / fetched:.3f}")
print(f"peak RSS              {int(rss_kb) / 1024:.1f} MB")
fr = stats["frontier"]
print(f"frontier              {fr['seen_urls']} URLs seen; Bloom {fr['bloom_bytes'] / 1e6:.2f} MB (sized for expected_urls), store {fr['store_bytes'] / 1e6:.1f} MB")
PY
echo "(raw output in $OUT)"
