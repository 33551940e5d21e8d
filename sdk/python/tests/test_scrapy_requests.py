"""Scrapy requests on Silk's queue and back: JSON only, callbacks by name, nothing lost."""

import base64
import json
import types

import pytest
import scrapy
from scrapy.settings import Settings

from silk_sdk.client import Lease
from silk_sdk.scrapy import LEASE_KEY, SCRAPY_KEY, URL_KEY, DupeFilter, Scheduler


class Shop(scrapy.Spider):
    name = "shop"

    def parse_item(self, response):  # pragma: no cover - never called here
        pass

    def on_error(self, failure):  # pragma: no cover
        pass


class _Stats:
    def __init__(self):
        self.values = {}

    def inc_value(self, key, n=1):
        self.values[key] = self.values.get(key, 0) + n


def scheduler(monkeypatch):
    for k, v in {"SILK_API_URL": "http://127.0.0.1:9", "SILK_RUN_ID": "r1",
                 "SILK_RUN_TOKEN": "t", "SILK_WORKER": "1", "SILK_WORKERS": "2"}.items():
        monkeypatch.setenv(k, v)
    settings = Settings({"CONCURRENT_REQUESTS": 8})
    crawler = types.SimpleNamespace(settings=settings, stats=_Stats(), engine=None)
    s = Scheduler(crawler)
    s.spider = Shop()
    return s


def test_a_request_round_trips_through_json(monkeypatch):
    s = scheduler(monkeypatch)
    spider = s.spider
    req = scrapy.Request(
        "https://shop.example/p/1?b=2&a=1",
        method="POST",
        body=b"\x00\x01binary",
        headers={"X-Token": "abc", "Accept": ["a/b", "c/d"]},
        priority=5,
        callback=spider.parse_item,
        errback=spider.on_error,
        cb_kwargs={"page": 3},
        meta={"depth": 2, "category": "shoes", "not_json": object()},
        dont_filter=True,
    )
    wire = s._to_silk(req)
    # JSON all the way, nothing pickled.
    text = json.dumps(wire)
    assert "not_json" not in text
    assert base64.b64decode(wire["body"]) == b"\x00\x01binary"
    assert wire["method"] == "POST" and wire["priority"] == 5 and wire["dont_filter"]
    assert wire["depth"] == 2
    assert wire["meta"][SCRAPY_KEY]["callback"] == "parse_item"
    assert wire["meta"][SCRAPY_KEY]["errback"] == "on_error"
    assert wire["meta"][SCRAPY_KEY]["cb_kwargs"] == {"page": 3}

    lease = Lease.from_json({
        "lease_id": "00000000000000a3", "url": wire["url"], "method": "POST",
        "headers": wire["headers"], "body": wire["body"], "priority": 5,
        "meta": wire["meta"], "depth": 2, "retries": 0, "deadline_ms": 1,
    })
    back = s._from_silk(lease)
    assert back.url == req.url and back.method == "POST" and back.body == b"\x00\x01binary"
    assert back.callback == spider.parse_item and back.errback == spider.on_error
    assert back.cb_kwargs == {"page": 3}
    assert back.meta["category"] == "shoes" and back.meta[LEASE_KEY] == "00000000000000a3"
    assert back.meta[URL_KEY] == req.url
    assert back.headers.get("X-Token") == b"abc"
    assert back.dont_filter, "as it was enqueued (what a redirect of it inherits)"


def test_a_redirect_gets_a_key_of_its_own_and_answers_its_parent(monkeypatch):
    s = scheduler(monkeypatch)
    child = scrapy.Request(
        "https://shop.example/p/1",
        meta={LEASE_KEY: "00000000000000a4", URL_KEY: "https://shop.example/p/1",
              "redirect_times": 1, "redirect_urls": ["https://shop.example/p/1"]},
    )
    wire = s._to_silk(child)
    assert wire["redirect_from"] == "https://shop.example/p/1"
    assert LEASE_KEY not in wire["meta"] and URL_KEY not in wire["meta"]
    assert "00000000000000a4" in s._answered
    # A plain request from a callback is not a redirect: Silk's key decides.
    assert "redirect_from" not in s._to_silk(scrapy.Request("https://shop.example/p/2"))


def test_the_dupefilter_leaves_deduplication_to_silk():
    df = DupeFilter()
    r = scrapy.Request("https://shop.example/")
    assert df.request_seen(r) is False
    assert df.request_seen(r) is False
