"""Scrapy on Silk: a Scrapy project becomes a distributed, kill-safe crawl with three settings::

    SCHEDULER = "silk_sdk.scrapy.Scheduler"
    DUPEFILTER_CLASS = "silk_sdk.scrapy.DupeFilter"
    ITEM_PIPELINES = {"silk_sdk.scrapy.ItemPipeline": 300}

Every worker of the program run shares the run's Silk frontier: requests are deduplicated on
Silk's canonical key across all workers, leased under Silk's per-host politeness and priority
aging, and a lease is acked only once Scrapy is done with its request — its download *and* its
scraping (callback, item pipelines, the new requests it yielded) — so a worker killed with
SIGKILL loses nothing: its leases expire and another worker takes them.

What travels on Silk's queue is JSON, never pickle: URL, method, headers, body (base64),
priority, ``dont_filter``, the JSON-serialisable part of ``meta`` (other values are dropped
with a warning), and the callback and errback by name (methods of the spider), with
``cb_kwargs``.

Downloads may go through Silk's download center too — the run's proxies and their switching,
cookies, rate limit, robots.txt and ban rules, on the agent the worker runs on — with::

    DOWNLOAD_HANDLERS = {"http": "silk_sdk.scrapy.DownloadHandler",
                         "https": "silk_sdk.scrapy.DownloadHandler"}

(Scrapy 2.15 or later). Responses come back as received, redirects not followed (Scrapy's
redirect middleware follows them), bodies cut to the run's ``max_return_body_bytes``
(flagged ``silk_truncated``); a failed fetch raises an error Scrapy's retry middleware knows.
Each fetch holds a thread of Scrapy's pool while it waits (``REACTOR_THREADPOOL_MAXSIZE``).

Settings (all optional): ``SILK_PREFETCH`` (leases held ahead, default
``CONCURRENT_REQUESTS``), ``SILK_ITEM_KEY`` (the run's item key field, default ``url``: an item
without it is dropped with an error), ``SILK_FLUSH_ITEMS`` (items per push, default 100),
``SILK_IDLE_WAIT_MS`` (how long an idle worker waits in a lease call, default 500).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Optional

from scrapy import Request, signals
from scrapy.exceptions import DropItem
from scrapy.utils.request import request_from_dict

from .client import Lease, Run, new_request

logger = logging.getLogger("silk_sdk.scrapy")

#: Meta keys the SDK sets on leased requests.
LEASE_KEY = "_silk_lease"
URL_KEY = "_silk_url"
#: Where Scrapy's own request fields travel inside Silk's meta.
SCRAPY_KEY = "_scrapy"

__all__ = ["Scheduler", "DupeFilter", "ItemPipeline", "DownloadHandler", "SilkFetchError"]


class _Context:
    """What the scheduler and the item pipeline of one crawler share: the run, and what waits
    to be sent to it (items and requests go out before any ack that depends on them)."""

    def __init__(self, crawler: Any) -> None:
        self.run = Run.from_env()
        self.items: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.flush_items_at = crawler.settings.getint("SILK_FLUSH_ITEMS", 100)
        self.item_key = crawler.settings.get("SILK_ITEM_KEY", "url")
        self.stats = crawler.stats

    def flush(self) -> None:
        if self.items:
            items, self.items = self.items, []
            done = self.run.push_items(items)
            self.stats.inc_value("silk/items_added", done.get("added", 0))
            self.stats.inc_value("silk/items_duplicate", done.get("duplicates", 0))
        if self.requests:
            requests, self.requests = self.requests, []
            done = self.run.enqueue(requests)
            self.stats.inc_value("silk/requests_added", done.get("added", 0))
            self.stats.inc_value("silk/requests_duplicate", done.get("duplicates", 0))


def _context(crawler: Any) -> _Context:
    ctx = getattr(crawler, "_silk_context", None)
    if ctx is None:
        ctx = _Context(crawler)
        crawler._silk_context = ctx
    return ctx


def _json_safe(values: dict[str, Any], what: str, warned: set[str]) -> dict[str, Any]:
    out = {}
    for k, v in values.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            if k not in warned:
                warned.add(k)
                logger.warning("%s key %r is not JSON-serialisable: not sent to Silk", what, k)
            continue
        out[k] = v
    return out


class Scheduler:
    """Scrapy's scheduler on the run's Silk frontier (see the module documentation)."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.ctx = _context(crawler)
        settings = crawler.settings
        self.prefetch = max(
            1, settings.getint("SILK_PREFETCH", settings.getint("CONCURRENT_REQUESTS", 16))
        )
        self.idle_wait_ms = settings.getint("SILK_IDLE_WAIT_MS", 500)
        self.spider: Any = None
        # Leased, not yet handed to Scrapy.
        self._ready: list[tuple[Lease, Request]] = []
        # Handed to Scrapy, not yet acked: id(request) → (lease, request).
        self._handed: dict[int, tuple[Lease, Request]] = {}
        # Requests that got a response, or that a redirect followed.
        self._answered: set[str] = set()
        self._left = 1
        self._ending = False
        self._last_lease = 0.0
        self._settler: Any = None
        self._warned: set[str] = set()
        self.dupefilter: Any = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> "Scheduler":
        s = cls(crawler)
        crawler.signals.connect(s._on_response, signal=signals.response_received)
        return s

    # -- Scrapy's scheduler interface -------------------------------------------------------

    def open(self, spider: Any) -> None:
        from scrapy.utils.misc import build_from_crawler, load_object

        self.spider = spider
        df_cls = load_object(self.crawler.settings["DUPEFILTER_CLASS"])
        self.dupefilter = build_from_crawler(df_cls, self.crawler)
        from twisted.internet import task

        self._settler = task.LoopingCall(self._settle)
        self._settler.start(0.1, now=False)
        logger.info(
            "on Silk run %s as worker %d of %d (prefetch %d)",
            self.ctx.run.run_id,
            self.ctx.run.worker,
            self.ctx.run.workers,
            self.prefetch,
        )

    def close(self, reason: str) -> None:
        if self._settler is not None and self._settler.running:
            self._settler.stop()
        self._settle(closing=True)
        # Leased but never started: back to the frontier at once, no retry used.
        back = [{"lease_id": lease.lease_id, "outcome": "release", "reason": "worker closed"}
                for lease, _ in self._ready]
        self._ready = []
        try:
            self.ctx.flush()
            if back:
                self.ctx.run.ack(back)
        finally:
            self.ctx.run.close()

    def has_pending_requests(self) -> bool:
        if self._ready or self.ctx.requests:
            return True
        if self._ending:
            return False
        if time.monotonic() - self._last_lease > 0.5:
            self._fill(wait_ms=0)
        return bool(self._ready) or self._left > 0

    def enqueue_request(self, request: Request) -> bool:
        if self.dupefilter is not None and not request.dont_filter:
            self.dupefilter.request_seen(request)
        self.ctx.requests.append(self._to_silk(request))
        if len(self.ctx.requests) >= 100:
            self.ctx.flush()
        return True

    def next_request(self) -> Optional[Request]:
        if not self._ready and not self._ending:
            busy = bool(self._handed)
            self._fill(wait_ms=0 if busy else self.idle_wait_ms)
        if not self._ready:
            return None
        lease, request = self._ready.pop(0)
        self._handed[id(request)] = (lease, request)
        return request

    def __len__(self) -> int:
        return len(self._ready)

    # -- leases -----------------------------------------------------------------------------

    def _fill(self, wait_ms: int) -> None:
        # This worker's new requests first, so that they can be leased (by anyone).
        self.ctx.flush()
        self._last_lease = time.monotonic()
        got = self.ctx.run.lease(max=self.prefetch, wait_ms=wait_ms)
        self._left = got.left
        self._ending = got.ending
        for lease in got.leases:
            self._ready.append((lease, self._from_silk(lease)))

    def _on_response(self, response: Any, request: Any, spider: Any = None) -> None:
        lease = request.meta.get(LEASE_KEY)
        if lease:
            self._answered.add(lease)

    def _in_progress(self) -> Optional[set]:
        engine = getattr(self.crawler, "engine", None)
        slot = getattr(engine, "_slot", None)
        return getattr(slot, "inprogress", None)

    def _settle(self, closing: bool = False) -> None:
        """Acks the handed requests Scrapy is done with: no longer in the engine's slot,
        which holds a request from its download until its scraping (callback, pipelines,
        the requests it yielded) is over."""
        if not self._handed:
            self._kick(closing)
            return
        busy = self._in_progress()
        done = []
        for key, (lease, request) in list(self._handed.items()):
            if not closing and busy is not None and request in busy:
                continue
            del self._handed[key]
            done.append((lease, request))
        if not done:
            return
        acks = []
        for lease, request in done:
            if lease.lease_id in self._answered:
                self._answered.discard(lease.lease_id)
                acks.append({"lease_id": lease.lease_id, "outcome": "done"})
            else:
                acks.append({"lease_id": lease.lease_id, "outcome": "failed",
                             "reason": "no response (download failed, or the request was ignored)"})
        # Items and requests that came from these pages go out before the acks.
        self.ctx.flush()
        answer = self.ctx.run.ack(acks)
        self.ctx.stats.inc_value("silk/acked", answer.get("acked", 0))
        if answer.get("late"):
            self.ctx.stats.inc_value("silk/acks_late", answer["late"])
        self._kick(closing)

    def _kick(self, closing: bool) -> None:
        """Asks the engine for its next requests: after acks (room was made), and while this
        worker is idle but the run has requests left (other workers' links, leases of a dead
        worker coming back), instead of the engine's 5 s heartbeat."""
        if closing or self._ending:
            return
        engine = getattr(self.crawler, "engine", None)
        slot = getattr(engine, "_slot", None)
        if slot is not None and (self._handed or self._ready or self._left > 0):
            slot.nextcall.schedule()

    # -- requests on Silk's queue -------------------------------------------------------------

    def _to_silk(self, request: Request) -> dict[str, Any]:
        try:
            d = request.to_dict(spider=self.spider)
        except ValueError as e:
            logger.warning("request %s: %s; its callback is not sent to Silk", request.url, e)
            d = request.to_dict()
            d["callback"] = d["errback"] = None
        meta = dict(d.get("meta") or {})
        parent = meta.pop(LEASE_KEY, None)
        parent_url = meta.pop(URL_KEY, None)
        scrapy_fields = {
            k: d.get(k)
            for k in ("callback", "errback", "cb_kwargs", "flags", "encoding", "_class",
                      "dont_filter")
            if d.get(k)
        }
        meta = _json_safe(meta, "meta", self._warned)
        scrapy_fields = _json_safe(scrapy_fields, "request", self._warned)
        if scrapy_fields:
            meta[SCRAPY_KEY] = scrapy_fields
        headers = {
            k.decode("latin-1") if isinstance(k, bytes) else str(k): b", ".join(
                v if isinstance(v, bytes) else str(v).encode("latin-1") for v in vs
            ).decode("latin-1")
            for k, vs in (d.get("headers") or {}).items()
        }
        if parent:
            # A request that carries a leased request's meta came from it (a redirect, a
            # retry): that request was answered by handing over to it.
            self._answered.add(parent)
        # A redirect's follow-up: Silk keys it apart from the request it came from when both
        # have the same key (else it would be dropped as its duplicate).
        redirect_from = parent_url if parent and "redirect_times" in meta else None
        return new_request(
            d["url"],
            method=d.get("method", "GET"),
            headers=headers,
            body=d.get("body") or None,
            priority=int(d.get("priority") or 0),
            meta=meta,
            dont_filter=bool(d.get("dont_filter")),
            depth=int(meta.get("depth", 0) or 0),
            redirect_from=redirect_from,
        )

    def _from_silk(self, lease: Lease) -> Request:
        meta = dict(lease.meta)
        fields = meta.pop(SCRAPY_KEY, {}) or {}
        meta[LEASE_KEY] = lease.lease_id
        meta[URL_KEY] = lease.url
        d: dict[str, Any] = {
            "url": lease.url,
            "method": lease.method,
            "headers": lease.headers,
            "body": lease.body or b"",
            "meta": meta,
            "priority": lease.priority,
            # As enqueued (below, from the Scrapy fields): what a redirect or a retry made
            # from it inherits; Silk has deduplicated the request itself already.
            "dont_filter": False,
        }
        d.update(fields)
        try:
            return request_from_dict(d, spider=self.spider)
        except (ValueError, AttributeError) as e:
            logger.warning("leased %s: %s; using the spider's default callback", lease.url, e)
            d.pop("callback", None)
            d.pop("errback", None)
            return request_from_dict(d, spider=self.spider)


class DupeFilter:
    """Deduplication is the Silk frontier's, across every worker of the run (on Silk's
    canonical key): this filter lets every request through to it and only counts them."""

    def __init__(self, stats: Any = None) -> None:
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Any) -> "DupeFilter":
        return cls(crawler.stats)

    @classmethod
    def from_settings(cls, settings: Any) -> "DupeFilter":
        return cls()

    def request_seen(self, request: Any) -> bool:
        if self.stats is not None:
            self.stats.inc_value("silk/dupefilter_passed")
        return False

    def open(self) -> None:
        return None

    def close(self, reason: str) -> None:
        return None

    def log(self, request: Any, spider: Any) -> None:
        return None


class ItemPipeline:
    """Items into the run's item log (idempotent on the run's item key), pushed in batches
    and always before the acks of the pages they came from."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.ctx: Optional[_Context] = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> "ItemPipeline":
        return cls(crawler)

    def open_spider(self, spider: Any = None) -> None:
        self.ctx = _context(self.crawler)

    def close_spider(self, spider: Any = None) -> None:
        if self.ctx is not None:
            self.ctx.flush()

    def process_item(self, item: Any, spider: Any = None) -> Any:
        from itemadapter import ItemAdapter

        ctx = self.ctx or _context(self.crawler)
        self.ctx = ctx
        data = json.loads(json.dumps(ItemAdapter(item).asdict(), default=str))
        if data.get(ctx.item_key) in (None, ""):
            raise DropItem(
                f"no {ctx.item_key!r} field: the run's item key (set SILK_ITEM_KEY and the "
                "run's spider item_key to a field your items have)"
            )
        ctx.items.append(data)
        if len(ctx.items) >= ctx.flush_items_at:
            ctx.flush()
        return item


def _fetch_errors() -> dict[str, type[Exception]]:
    """Scrapy's download errors, by the codes of Silk's fetch errors that match."""
    from scrapy import exceptions as ex

    timeout = getattr(ex, "DownloadTimeoutError", TimeoutError)
    failed = getattr(ex, "DownloadFailedError", IOError)
    return {
        "timeout": timeout,
        "dns": getattr(ex, "CannotResolveHostError", failed),
        "connect": getattr(ex, "DownloadConnectionRefusedError", failed),
        "": failed,
    }


class SilkFetchError(Exception):
    """A fetch through Silk's download center failed for good (``code``: Silk's error code,
    such as ``robots_disallowed``, ``tls``, ``invalid_url``): not one Scrapy's retry
    middleware retries. Retryable failures (``timeout``, ``proxy_banned``, …) raise Scrapy's
    own download errors, which it retries."""

    def __init__(self, code: str, message: str, retryable: bool) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.retryable = retryable


class DownloadHandler:
    """Scrapy's downloads through Silk's download center (see the module documentation)."""

    lazy = False

    def __init__(self, crawler: Any) -> None:
        try:
            from scrapy.utils.asyncio import run_in_thread  # noqa: F401
        except ImportError as e:
            from scrapy.exceptions import NotConfigured

            raise NotConfigured(
                "silk_sdk.scrapy.DownloadHandler needs Scrapy 2.15 or later"
            ) from e
        self.crawler = crawler
        self.ctx = _context(crawler)
        self.errors = _fetch_errors()

    @classmethod
    def from_crawler(cls, crawler: Any) -> "DownloadHandler":
        return cls(crawler)

    async def download_request(self, request: Request, spider: Any = None) -> Any:
        from scrapy.utils.asyncio import run_in_thread

        return self._response(request, await run_in_thread(self._fetch, request))

    async def close(self) -> None:
        return None

    def _fetch(self, request: Request) -> Any:
        headers = {
            k.decode("latin-1"): b", ".join(vs).decode("latin-1")
            for k, vs in request.headers.items()
        }
        return self.ctx.run.fetch(
            request.url,
            method=request.method,
            headers=headers,
            body=request.body or None,
        )

    def _response(self, request: Request, got: Any) -> Any:
        from scrapy.http import Headers
        from scrapy.responsetypes import responsetypes

        stats = self.ctx.stats
        if got.error is not None or got.status is None:
            err = got.error or {}
            code = str(err.get("code", ""))
            stats.inc_value(f"silk/fetch_errors/{code or 'unknown'}")
            message = f"{request.url}: {code}: {err.get('message', 'no response')}"
            retryable = bool(err.get("retryable"))
            if not retryable:
                raise SilkFetchError(code, message, retryable)
            raise self.errors.get(code, self.errors[""])(message)
        stats.inc_value("silk/fetched")
        if got.proxy:
            stats.inc_value("silk/fetched_via_proxy")
        values: dict[str, list[bytes]] = {}
        for k, v in got.headers:
            # The body is decoded already: its wire encoding does not apply any more.
            if k.lower() in ("content-encoding", "transfer-encoding", "content-length"):
                continue
            values.setdefault(k, []).append(v.encode("latin-1", errors="replace"))
        headers = Headers(values)
        cls = responsetypes.from_args(headers=headers, url=got.url, body=got.body)
        flags = ["silk"] + (["silk_truncated"] if got.truncated else [])
        return cls(
            url=got.url,
            status=got.status,
            headers=headers,
            body=got.body,
            request=request,
            flags=flags,
        )
