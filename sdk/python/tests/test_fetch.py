"""Fetches through the download center: the hub's answer as a Response, and as the Scrapy
response (or error) the download handler makes of it."""

import base64
import types

import pytest
import scrapy
from scrapy.settings import Settings

from silk_sdk.client import Response
from silk_sdk.scrapy import DownloadHandler, SilkFetchError


class _Stats:
    def __init__(self):
        self.values = {}

    def inc_value(self, key, n=1):
        self.values[key] = self.values.get(key, 0) + n


def answer(**over):
    a = {
        "url": "http://shop.example/p/1",
        "status": 200,
        "headers": [["content-type", "text/html; charset=gbk"], ["set-cookie", "a=1"],
                    ["set-cookie", "b=2"], ["content-encoding", "gzip"]],
        "body": base64.b64encode("价格".encode("gbk")).decode(),
        "truncated": False,
        "trimmed": False,
        "bytes": 4,
        "proxy": "http://127.0.0.1:3128/",
        "agent": "a1",
        "elapsed_ms": 12,
    }
    a.update(over)
    return a


def test_an_answer_becomes_a_response_with_its_bytes_and_charset():
    r = Response.from_json(answer())
    assert r.body == "价格".encode("gbk")
    assert r.text == "价格"
    assert r.header("Content-Type") == "text/html; charset=gbk"
    assert r.ok and r.agent == "a1" and r.proxy == "http://127.0.0.1:3128/"
    failed = Response.from_json(
        {"url": "http://x/", "headers": [], "agent": "a1", "bytes": 0, "elapsed_ms": 1,
         "error": {"code": "timeout", "message": "slow", "retryable": True}})
    assert not failed.ok and failed.status is None and failed.body == b""
    trimmed = Response.from_json(answer(trimmed=True, body=base64.b64encode("价格".encode()).decode()))
    assert trimmed.text == "价格"


def handler(monkeypatch):
    for k, v in {"SILK_API_URL": "http://127.0.0.1:9", "SILK_RUN_ID": "r1",
                 "SILK_RUN_TOKEN": "t"}.items():
        monkeypatch.setenv(k, v)
    crawler = types.SimpleNamespace(settings=Settings(), stats=_Stats(), engine=None)
    return DownloadHandler(crawler)


def test_the_handler_makes_scrapys_response_without_the_wire_encoding(monkeypatch):
    h = handler(monkeypatch)
    req = scrapy.Request("http://shop.example/p/1")
    resp = h._response(req, Response.from_json(answer(truncated=True)))
    assert isinstance(resp, scrapy.http.HtmlResponse)
    assert resp.status == 200 and resp.request is req
    assert resp.headers.getlist("Set-Cookie") == [b"a=1", b"b=2"]
    # The body is decoded already: Scrapy must not decompress it again.
    assert b"Content-Encoding" not in resp.headers
    assert resp.text == "价格"
    assert resp.flags == ["silk", "silk_truncated"]
    assert h.ctx.stats.values["silk/fetched_via_proxy"] == 1


def test_failed_fetches_raise_what_scrapys_retry_middleware_knows(monkeypatch):
    h = handler(monkeypatch)
    req = scrapy.Request("http://shop.example/p/1")
    retried = tuple(h.errors.values())

    def fails(code, retryable):
        err = {"code": code, "message": "m", "retryable": retryable}
        with pytest.raises(Exception) as e:
            h._response(req, Response.from_json(answer(status=None, body=None, error=err)))
        return e.value

    assert isinstance(fails("timeout", True), h.errors["timeout"])
    assert isinstance(fails("proxy_banned", True), retried)
    permanent = fails("robots_disallowed", False)
    assert isinstance(permanent, SilkFetchError) and permanent.code == "robots_disallowed"
    assert not isinstance(permanent, retried)
    assert h.ctx.stats.values["silk/fetch_errors/timeout"] == 1
