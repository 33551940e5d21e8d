"""Peer crawler for bench/peers.sh: crawls the Silk demo site with Scrapy.

    HOSTS=20 PORT=18711 CONCURRENCY=64 OUT=bench/out/x \
        scrapy runspider bench/peers/scrapy/peer_spider.py

Environment (all optional): START (default http://127.0.0.1:PORT/), HOSTS (3), PORT (8700),
CONCURRENCY (64), OUT (directory of the items feed, default "."; the feed is OUT/items.jsonl).

A CrawlSpider: allowed_domains are the N host IPs (Scrapy's offsite filter ignores the port),
one rule follows every link except /calendar/ (the demo site's endless trap) and sends every
response to parse_item, which emits an item when the page has a `span.price` (product pages).
robots.txt obeyed (Scrapy fetches it once per host), no delay, CONCURRENT_REQUESTS and
CONCURRENT_REQUESTS_PER_DOMAIN = CONCURRENCY. Scrapy follows /r/{i} redirects itself.

At the end prints one JSON line to stdout: {"pages": n, "elapsed_s": t}, n = responses
received (Scrapy's `response_received_count`, robots.txt and 404s included).
"""

import json
import os
import sys
import time

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

PORT = int(os.environ.get("PORT", "8700"))
HOSTS = int(os.environ.get("HOSTS", "3"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "64"))
START = os.environ.get("START", f"http://127.0.0.1:{PORT}/")
OUT = os.environ.get("OUT", ".")
DOMAINS = [f"127.0.0.{k}" for k in range(1, HOSTS + 1)]


class PeerSpider(CrawlSpider):
    name = "peer"
    allowed_domains = DOMAINS
    start_urls = [START]
    rules = (
        Rule(
            # No allow_domains here: LinkExtractor compares it with host:port and would drop
            # every link; the offsite middleware applies allowed_domains (port-blind).
            LinkExtractor(deny=(r"/calendar/",)),
            callback="parse_item",
            follow=True,
        ),
    )
    custom_settings = {
        "CONCURRENT_REQUESTS": CONCURRENCY,
        "CONCURRENT_REQUESTS_PER_DOMAIN": CONCURRENCY,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "ROBOTSTXT_OBEY": True,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "USER_AGENT": "scrapy-peer",
        "FEEDS": {os.path.join(OUT, "items.jsonl"): {"format": "jsonlines", "overwrite": True}},
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.t0 = time.monotonic()

    def parse_start_url(self, response):
        return self.parse_item(response)

    def parse_item(self, response):
        # Product pages only (the host index also has an h1.title, but no price).
        price = response.css("span.price::text").get()
        if price is not None:
            yield {
                "url": response.url,
                "title": (response.css("h1.title::text").get() or "").strip(),
                "price": price.strip(),
            }

    def closed(self, reason):
        elapsed = time.monotonic() - self.t0
        stats = self.crawler.stats
        pages = stats.get_value("response_received_count", 0)
        print(json.dumps({"pages": pages, "elapsed_s": round(elapsed, 3)}), flush=True)
        print(
            f"scrapy: reason={reason} items={stats.get_value('item_scraped_count', 0)} "
            f"dupes_filtered={stats.get_value('dupefilter/filtered', 0)} "
            f"offsite={stats.get_value('offsite/filtered', 0)} "
            f"robots_forbidden={stats.get_value('robotstxt/forbidden', 0)}",
            file=sys.stderr,
        )
