#!/usr/bin/env bash
# Peer benchmark: Silk vs the `spider` crate (bench/peers/spider-rs) vs Scrapy
# (bench/peers/scrapy) crawling the same local demo site, each against a FRESH site.
# The site is pinned to core 0 and the crawler to core 1; all traffic stays on 127.0.0.0/8.
# Every number in the table is counted by the SERVER (its hits JSON), not by the crawler,
# except wall/CPU/RSS which come from /usr/bin/time around the crawler.
#
#   bench/peers.sh                                # 20 hosts x 1,000 pages, concurrency 64
#   HOSTS=3 PAGES=200 bench/peers.sh              # quick run
#   CRAWLERS="spider-rs scrapy" bench/peers.sh    # a subset
#
# Env: HOSTS (20), PAGES (1000), PORT (18731; crawler i uses PORT+i), CONCURRENCY (64),
# CRAWLERS ("silk spider-rs scrapy"), CRAWL_TIMEOUT seconds per crawl (3600; Scrapy needs ~20 min at full scale), SEED (1).
# Needs: cargo, python3 (+ venv/pip for Scrapy, installed into bench/out/venv on first use),
# /usr/bin/time (Debian package `time`), taskset (util-linux), 2 cores.
# The demo site is `target/release/silk demo-site`.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HOSTS=${HOSTS:-20}
PAGES=${PAGES:-1000}
PORT=${PORT:-18731}
CONCURRENCY=${CONCURRENCY:-64}
CRAWLERS=${CRAWLERS:-silk spider-rs scrapy}
CRAWL_TIMEOUT=${CRAWL_TIMEOUT:-3600}
SEED=${SEED:-1}
OUT=$ROOT/bench/out/peers-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$OUT"
log() { echo "peers: $*" >&2; }

[ -x /usr/bin/time ] || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
command -v taskset >/dev/null || { echo "taskset missing (util-linux)" >&2; exit 1; }
if [ "$(nproc)" -lt 2 ]; then log "warning: fewer than 2 cores; pinning site and crawler to core 0"; fi
CORE_SITE=0
CORE_CRAWL=$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)

# ---- build -----------------------------------------------------------------------------
declare -A BUILD_OK
SILK=$ROOT/target/release/silk
SITE=()
log "building silk (release)…"
if ! cargo build --release -p silk >"$OUT/build-silk.log" 2>&1 || [ ! -x "$SILK" ]; then
  echo "silk does not build (see $OUT/build-silk.log): no demo site, no benchmark" >&2
  exit 1
fi
BUILD_OK[silk]=1
SITE=("$SILK" demo-site --no-timings --seed "$SEED")

SPIDER_BIN=$ROOT/bench/peers/spider-rs/target/release/spider-peer
log "building the spider-rs peer (release)…"
if cargo build --release --manifest-path bench/peers/spider-rs/Cargo.toml >"$OUT/build-spider-rs.log" 2>&1; then
  BUILD_OK[spider-rs]=1
else
  BUILD_OK[spider-rs]=0
  log "spider-rs peer does not build (see $OUT/build-spider-rs.log)"
fi

VENV=$ROOT/bench/out/venv
if [[ " $CRAWLERS " == *" scrapy "* ]]; then
  if [ ! -x "$VENV/bin/scrapy" ]; then
    log "installing Scrapy into $VENV…"
    { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q scrapy; } >"$OUT/build-scrapy.log" 2>&1
  fi
  if [ -x "$VENV/bin/scrapy" ]; then BUILD_OK[scrapy]=1; else BUILD_OK[scrapy]=0; log "Scrapy install failed"; fi
fi

# ---- one crawl ---------------------------------------------------------------------------
ALLOWED=$(seq -s, -f "127.0.0.%g" 1 "$HOSTS")

# run_one NAME PORT: fresh site on core 0, crawler on core 1, stop site, keep raw files.
run_one() {
  local name=$1 port=$2 dir=$OUT/$1
  mkdir -p "$dir"
  echo "not run" >"$dir/status"
  if [ "${BUILD_OK[$name]:-0}" != 1 ]; then echo "FAILED (build)" >"$dir/status"; return; fi

  taskset -c $CORE_SITE "${SITE[@]}" --port "$port" --hosts "$HOSTS" --pages "$PAGES" \
    --hits-json "$dir/hits.json" >"$dir/site.log" 2>&1 &
  local site=$!
  local up=0
  for _ in $(seq 1 200); do
    if grep -q "start url" "$dir/site.log" 2>/dev/null; then up=1; break; fi
    kill -0 $site 2>/dev/null || break
    sleep 0.05
  done
  if [ $up != 1 ]; then
    echo "FAILED (site did not start)" >"$dir/status"
    kill -INT $site 2>/dev/null; wait $site 2>/dev/null
    return
  fi

  local cmd=()
  case $name in
    silk)
      cat >"$dir/spider.yaml" <<YAML
name: bench
start_urls: ['http://127.0.0.1:$port/']
allowed_domains: [$ALLOWED]
follow: [{deny: ['/calendar/']}]
item_when: '/p/\d+$'
extract: { title: { css: 'h1.title' }, price: { css: 'span.price' } }
concurrency: $CONCURRENCY
per_host_concurrency: $CONCURRENCY
per_host_delay_ms: 0
recrawl_segment: none
YAML
      cmd=("$SILK" crawl "$dir/spider.yaml" --out "$dir/items.jsonl" --data-dir "$dir/data"
           --stats-json "$dir/stats.json")
      ;;
    spider-rs)
      cmd=("$SPIDER_BIN" --start "http://127.0.0.1:$port/" --hosts "$HOSTS" --port "$port"
           --concurrency "$CONCURRENCY")
      ;;
    scrapy)
      cmd=(env OUT="$dir" HOSTS="$HOSTS" PORT="$port" CONCURRENCY="$CONCURRENCY"
           "$VENV/bin/scrapy" runspider "$ROOT/bench/peers/scrapy/peer_spider.py")
      ;;
  esac

  log "$name: crawling $HOSTS hosts x $PAGES pages on port $port…"
  /usr/bin/time -f "%e %U %S %M" -o "$dir/time.txt" \
    taskset -c $CORE_CRAWL timeout -s INT "$CRAWL_TIMEOUT" "${cmd[@]}" >"$dir/stdout.txt" 2>"$dir/stderr.txt"
  local rc=$?
  if [ $rc = 0 ]; then echo ok >"$dir/status"
  elif [ $rc = 124 ]; then echo "FAILED (timeout ${CRAWL_TIMEOUT}s)" >"$dir/status"
  else echo "FAILED (exit $rc)" >"$dir/status"; fi

  kill -INT $site 2>/dev/null
  wait $site 2>/dev/null
  [ -s "$dir/hits.json" ] || log "$name: the site wrote no hits JSON"
}

i=0
for name in $CRAWLERS; do
  run_one "$name" $((PORT + i))
  i=$((i + 1))
done

# ---- report ------------------------------------------------------------------------------
python3 - "$OUT" "$HOSTS" "$PAGES" "$CONCURRENCY" $CRAWLERS <<'PY'
import collections, json, os, posixpath, re, sys
from urllib.parse import unquote, urlsplit

out, hosts, pages, conc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
crawlers = sys.argv[5:]
expected = hosts * pages
PAGE = re.compile(r"^/p/(\d+)$")

def page_key(url):
    """(host, i) of a content page /p/{i}, however it was spelled; None for anything else.
    Query dropped, ';params' dropped from every segment, %XX decoded, dot segments resolved."""
    u = urlsplit(url)
    segs = [s.split(";", 1)[0] for s in u.path.split("/")]
    path = unquote("/".join(segs))
    path = posixpath.normpath(path) if path else "/"
    m = PAGE.match(path)
    return (u.hostname, int(m.group(1))) if m else None

def path_of(url):
    return unquote(urlsplit(url).path)

rows, notes = [], []
for name in crawlers:
    d = os.path.join(out, name)
    status = open(os.path.join(d, "status")).read().strip() if os.path.exists(os.path.join(d, "status")) else "not run"
    hits_file = os.path.join(d, "hits.json")
    if not os.path.exists(hits_file) or os.path.getsize(hits_file) == 0:
        rows.append([name, status] + ["-"] * 7)
        continue
    hits = json.load(open(hits_file))
    per_page = collections.Counter()
    kinds = collections.Counter()
    for url, n in hits.items():
        k = page_key(url)
        if k is not None:
            per_page[k] += n
            kinds["content"] += n
            continue
        p = path_of(url)
        kind = ("robots" if p == "/robots.txt" else "index" if p == "/" else
                "search" if p == "/s" else "redirect" if p.startswith("/r/") else
                "private" if p.startswith("/private/") else "calendar" if p.startswith("/calendar/") else
                "missing" if p.startswith("/missing/") else "other")
        kinds[kind] += n
    unique = len(per_page)
    dup_pages = sum(1 for n in per_page.values() if n > 1)
    extra = sum(n - 1 for n in per_page.values())
    total = sum(hits.values())
    wall = user = sys_ = rss = None
    tf = os.path.join(d, "time.txt")
    if os.path.exists(tf):
        f = open(tf).read().split()
        if len(f) >= 4:
            try:
                wall, user, sys_, rss = float(f[-4]), float(f[-3]), float(f[-2]), int(f[-1])
            except ValueError:
                pass
    reported = "-"
    so = os.path.join(d, "stdout.txt")
    if name == "silk" and os.path.exists(os.path.join(d, "stats.json")):
        try:
            reported = json.load(open(os.path.join(d, "stats.json"))).get("fetched", "-")
        except Exception:
            pass
    elif os.path.exists(so):
        for line in open(so):
            line = line.strip()
            if line.startswith("{") and '"pages"' in line:
                try:
                    reported = json.loads(line)["pages"]
                except Exception:
                    pass
    items_file = os.path.join(d, "items.jsonl")
    items = sum(1 for _ in open(items_file)) if os.path.exists(items_file) else "-"
    rows.append([
        name, status,
        f"{unique} ({100 * unique / expected:.1f}%)",
        f"{dup_pages} (+{extra})",
        str(total),
        f"{wall:.2f}" if wall is not None else "-",
        f"{unique / wall:.0f}" if wall else "-",
        f"{(user + sys_) * 1000 / unique:.3f}" if wall is not None and unique else "-",
        f"{rss / 1024:.1f}" if rss is not None else "-",
    ])
    kinds_s = " ".join(f"{k}={v}" for k, v in sorted(kinds.items()))
    notes.append(f"{name}: crawler-reported pages={reported} items={items}; server hits by kind: {kinds_s}")

head = ["crawler", "status", "unique pages", "dup fetches", "total requests", "wall s",
        "unique pages/s", "CPU ms/page", "peak RSS MB"]
widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
fmt = lambda r: "  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
print(f"\n{hosts} hosts x {pages} pages = {expected} content pages; concurrency {conc}; "
      f"site on core 0, crawler on core 1")
print(fmt(head))
print(fmt(["-" * w for w in widths]))
for r in rows:
    print(fmt(r))
print()
print("unique pages: distinct (host, /p/{i}) the server served, after dropping query and ;params,")
print("  decoding %XX and resolving dot segments (% of all content pages).")
print("dup fetches: content pages fetched more than once (+ extra fetches of them in total).")
print("total requests: every request the server saw (robots.txt, 404s, redirects, search pages…).")
print("CPU ms/page: crawler user+sys CPU per unique content page; peak RSS of the crawler process.")
for n in notes:
    print(n)
PY
echo "(raw output in $OUT)"
