"""The run API of a Silk program: items, frontier (enqueue, lease, ack), fetch through the
download center, and the run's state.

A program run's workers find their run in the environment Silk sets (``SILK_API_URL``,
``SILK_RUN_ID``, ``SILK_RUN_TOKEN``, ``SILK_WORKER``, ``SILK_WORKERS``, ``SILK_AGENT_ID``);
:meth:`Run.from_env` reads it. Every call is one HTTP request with the run token; connection
failures and ``503`` answers are retried with back-off, other errors raise :class:`SilkError`
with the hub's ``code`` and ``message``.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence
from urllib.parse import quote

import httpx

__all__ = ["Hub", "Run", "Lease", "Leases", "Response", "SilkError", "new_request"]

#: Acks and their meaning on the frontier.
OUTCOMES = ("done", "retry", "failed", "dropped", "release")


class SilkError(Exception):
    """An answer of the hub that is not a success (or no answer at all)."""

    def __init__(self, message: str, *, code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message


@dataclass
class Lease:
    """A request leased to this worker: ack it (``done``, ``retry``, ``failed``, ``dropped``,
    ``release``) before ``deadline_ms``, or it is leased again."""

    lease_id: str
    url: str
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    body: Optional[bytes] = None
    priority: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    depth: int = 0
    retries: int = 0
    deadline_ms: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Lease":
        body = d.get("body")
        return cls(
            lease_id=d["lease_id"],
            url=d["url"],
            method=d.get("method", "GET"),
            headers=dict(d.get("headers") or {}),
            body=base64.b64decode(body) if body is not None else None,
            priority=int(d.get("priority", 0)),
            meta=dict(d.get("meta") or {}),
            depth=int(d.get("depth", 0)),
            retries=int(d.get("retries", 0)),
            deadline_ms=int(d.get("deadline_ms", 0)),
        )


@dataclass
class Leases:
    """The answer to a lease call."""

    leases: list[Lease]
    #: The run is paused: lease nothing until it is resumed.
    paused: bool = False
    #: The run is ending: finish what you hold and exit.
    ending: bool = False
    #: Requests of the run not finished yet, all workers together (pending + leased).
    left: int = 0


@dataclass
class Response:
    """A response fetched through Silk's download center (:meth:`Run.fetch`), as it is."""

    #: The URL of this response (the last hop when redirects were followed).
    url: str
    #: HTTP status; ``None`` when no response arrived (see ``error``).
    status: Optional[int]
    #: Headers as received, in order (``Content-Encoding`` describes the wire: ``body`` is
    #: decoded).
    headers: list[tuple[str, str]]
    #: The body (the run's trimmed text, UTF-8, when ``trimmed``).
    body: bytes
    #: The body was cut to the run's ``max_return_body_bytes``.
    truncated: bool = False
    trimmed: bool = False
    #: The proxy it went through (no credentials); ``None``: direct.
    proxy: Optional[str] = None
    #: The agent that fetched it.
    agent: str = ""
    elapsed_ms: int = 0
    #: The URLs redirected from, when redirects were followed.
    redirects: list[str] = field(default_factory=list)
    #: ``{"code", "message", "retryable"}`` when the fetch failed (``timeout``, ``dns``,
    #: ``proxy_banned``, ``robots_disallowed``, …).
    error: Optional[dict[str, Any]] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Response":
        body = d.get("body")
        return cls(
            url=d["url"],
            status=d.get("status"),
            headers=[(str(k), str(v)) for k, v in d.get("headers") or []],
            body=base64.b64decode(body) if body is not None else b"",
            truncated=bool(d.get("truncated")),
            trimmed=bool(d.get("trimmed")),
            proxy=d.get("proxy"),
            agent=str(d.get("agent", "")),
            elapsed_ms=int(d.get("elapsed_ms", 0)),
            redirects=list(d.get("redirects") or []),
            error=d.get("error"),
        )

    def header(self, name: str) -> Optional[str]:
        """The first header ``name`` (case-insensitive), if any."""
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def ok(self) -> bool:
        """A response arrived and it is not an error status (< 400)."""
        return self.error is None and self.status is not None and self.status < 400

    @property
    def text(self) -> str:
        """The body as text: UTF-8 when trimmed, else the charset of ``Content-Type``
        (UTF-8 when it names none)."""
        charset = "utf-8"
        if not self.trimmed:
            for part in (self.header("content-type") or "").split(";")[1:]:
                k, _, v = part.strip().partition("=")
                if k.lower() == "charset" and v:
                    charset = v.strip('"')
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def new_request(
    url: str,
    *,
    method: str = "GET",
    headers: Optional[Mapping[str, str]] = None,
    body: Optional[bytes] = None,
    priority: int = 0,
    meta: Optional[Mapping[str, Any]] = None,
    dont_filter: bool = False,
    depth: int = 0,
    redirect_from: Optional[str] = None,
) -> dict[str, Any]:
    """The JSON form of a request to enqueue (``meta`` must be JSON-serialisable).
    ``redirect_from``: the URL of the request this one is the redirect of (when both have the
    same Silk key, this one gets a key of its own instead of being dropped as a duplicate)."""
    r: dict[str, Any] = {"url": url}
    if method.upper() != "GET":
        r["method"] = method.upper()
    if headers:
        r["headers"] = dict(headers)
    if body is not None:
        r["body"] = base64.b64encode(body).decode("ascii")
    if priority:
        r["priority"] = priority
    if meta:
        r["meta"] = dict(meta)
    if dont_filter:
        r["dont_filter"] = True
    if depth:
        r["depth"] = depth
    if redirect_from:
        r["redirect_from"] = redirect_from
    return r


class Run:
    """One program run, as its workers reach it."""

    def __init__(
        self,
        api_url: str,
        run_id: str,
        token: str,
        *,
        worker: int = 0,
        workers: int = 1,
        agent_id: str = "",
        timeout: float = 40.0,
        retries: int = 5,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.run_id = run_id
        self.worker = worker
        self.workers = workers
        self.agent_id = agent_id
        self._retries = retries
        self._http = httpx.Client(
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}"},
        )

    def __repr__(self) -> str:  # the token stays out of it
        return f"Run({self.run_id!r}, worker={self.worker}/{self.workers})"

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Run":
        """The run of this worker, from the environment Silk gives it."""
        env = os.environ if env is None else env
        missing = [
            k for k in ("SILK_API_URL", "SILK_RUN_ID", "SILK_RUN_TOKEN") if not env.get(k)
        ]
        if missing:
            raise SilkError(
                "not running as a Silk program: "
                + ", ".join(missing)
                + " not set (Silk sets them for the workers of a program run)"
            )
        return cls(
            env["SILK_API_URL"],
            env["SILK_RUN_ID"],
            env["SILK_RUN_TOKEN"],
            worker=int(env.get("SILK_WORKER", "0")),
            workers=int(env.get("SILK_WORKERS", "1")),
            agent_id=env.get("SILK_AGENT_ID", ""),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the run --------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The run as the hub shows it (``state``, ``stats``, ``program``, …)."""
        return self._call("GET", "")

    def push_items(self, items: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Writes items to the run's item log (idempotent on the run's item key, default
        ``url``): ``{"added": n, "duplicates": n}``."""
        batch = [dict(i) for i in items]
        if not batch:
            return {"added": 0, "duplicates": 0}
        return self._call("POST", "/items", {"items": batch})

    def log(self, message: str, level: str = "info") -> None:
        """A line in the run's log (through the worker's output)."""
        sys.stdout.write(json.dumps({"level": level, "msg": message}) + "\n")
        sys.stdout.flush()

    # -- the frontier ---------------------------------------------------------------------

    def enqueue(self, requests: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Puts requests (see :func:`new_request`) in the run's frontier, deduplicated on
        Silk's key: ``{"added": n, "duplicates": n}``."""
        if not requests:
            return {"added": 0, "duplicates": 0}
        return self._call("POST", "/requests", {"requests": list(requests)})

    def lease(self, max: int = 1, wait_ms: int = 0) -> Leases:
        """Up to ``max`` requests that may start now, waiting up to ``wait_ms`` for one."""
        a = self._call("POST", "/lease", {"max": max, "wait_ms": wait_ms})
        return Leases(
            leases=[Lease.from_json(x) for x in a.get("leases", [])],
            paused=bool(a.get("paused")),
            ending=bool(a.get("ending")),
            left=int(a.get("left", 0)),
        )

    def ack(self, acks: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Acks leases: each ``{"lease_id", "outcome", "reason"?, "requests"?}``; the new
        requests of an ack are enqueued with it in one atomic write."""
        if not acks:
            return {"acked": 0, "late": 0, "added": 0, "duplicates": 0}
        return self._call("POST", "/ack", {"acks": list(acks)})

    def ack_one(
        self,
        lease: "Lease | str",
        outcome: str = "done",
        *,
        reason: Optional[str] = None,
        requests: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, int]:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r} is not one of {OUTCOMES}")
        lease_id = lease.lease_id if isinstance(lease, Lease) else lease
        a: dict[str, Any] = {"lease_id": lease_id, "outcome": outcome}
        if reason:
            a["reason"] = reason
        if requests:
            a["requests"] = list(requests)
        return self.ack([a])

    # -- the download center --------------------------------------------------------------

    def fetch(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: Optional[Mapping[str, str]] = None,
        body: Optional[bytes] = None,
        trim: bool = False,
        follow_redirects: bool = False,
        agent: Optional[str] = None,
        timeout: float = 120.0,
    ) -> Response:
        """Fetches ``url`` through Silk's download center: by an agent of the run (this
        worker's own, ``SILK_AGENT_ID``, unless ``agent`` names another) with its downloader
        for the run — the run's proxies and their switching, cookies, rate limit,
        robots.txt and ban rules. ``trim``: the run's trimmed text instead of the body.
        A failed fetch is a :class:`Response` with ``error`` set; no answer from any agent
        raises :class:`SilkError`."""
        # url, method, headers and body as for a request to enqueue.
        ask = new_request(url, method=method, headers=headers, body=body)
        if trim:
            ask["trim"] = True
        if follow_redirects:
            ask["follow_redirects"] = True
        agent = self.agent_id if agent is None else agent
        if agent:
            ask["agent"] = agent
        return Response.from_json(self._call("POST", "/fetch", ask, timeout=timeout))

    # -- transport ------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, body: Any = None, *, timeout: Optional[float] = None
    ) -> Any:
        url = f"{self.api_url}/api/v1/runs/{self.run_id}{path}"
        return _send(self._http, self._retries, method, url, path or "/", body, timeout)


def _send(
    http: httpx.Client,
    retries: int,
    method: str,
    url: str,
    what: str,
    body: Any = None,
    timeout: Optional[float] = None,
    idempotent: bool = True,
) -> Any:
    """One API call: connection failures and ``503`` are retried with back-off (a call that
    is not ``idempotent`` only when the request cannot have reached the hub: no connection,
    or ``503``); another error answer raises :class:`SilkError` with the hub's code and
    message."""
    delay = 0.2
    for attempt in range(retries + 1):
        try:
            extra: dict[str, Any] = {}
            if timeout is not None:
                extra["timeout"] = timeout
            if body is None:
                r = http.request(method, url, **extra)
            else:
                r = http.request(
                    method,
                    url,
                    content=json.dumps(body, separators=(",", ":")),
                    headers={"Content-Type": "application/json"},
                    **extra,
                )
        except httpx.TransportError as e:
            # Sent, perhaps done, its answer lost: a call that is not idempotent is not sent again.
            sent = not isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
            if attempt == retries or (sent and not idempotent):
                raise SilkError(f"{method} {what}: {e}") from e
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if r.status_code == 503 and attempt < retries:
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if r.is_success:
            return r.json() if r.content else None
        try:
            err = r.json()
            code, message = err.get("code", ""), err.get("message", r.text)
        except ValueError:
            code, message = "", r.text
        raise SilkError(
            f"{method} {what}: {r.status_code} {code}: {message}",
            code=code,
            status=r.status_code,
        )
    raise SilkError(f"{method} {what}: no answer")


#: Run states after which a run changes no more.
TERMINAL = ("succeeded", "failed", "cancelled")


class Hub:
    """A hub's API with a user's token (``silk tokens create``): start runs, run jobs with
    arguments (a job whose spider expands ``{arg: NAME}`` parameters takes its values so),
    and follow them.

        hub = silk_sdk.Hub("http://hub:7700", token)
        run = hub.run_job("search", args={"kw": "shoes,red hats"})
        done = hub.wait_run(run["id"])
    """

    def __init__(self, api_url: str, token: str, *, timeout: float = 40.0, retries: int = 5):
        self.api_url = api_url.rstrip("/")
        self._retries = retries
        self._http = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {token}"})

    def __repr__(self) -> str:  # the token stays out of it
        return f"Hub({self.api_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Hub":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_job(self, job: str, args: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
        """A run of job ``job`` (its id or name) now, with ``args`` over the job's: the run
        as the hub shows it."""
        body = {"args": {str(k): str(v) for k, v in (args or {}).items()}}
        return self._call("POST", f"/jobs/{_segment(job)}/runs", body, idempotent=False)

    def start_run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """An ad-hoc run (the body of ``POST /api/v1/runs``: ``spider``, ``program``, …)."""
        return self._call("POST", "/runs", dict(request), idempotent=False)

    def run(self, run_id: str) -> dict[str, Any]:
        """The run as the hub shows it (``state``, ``stats``, ``expand``, …)."""
        return self._call("GET", f"/runs/{_segment(run_id)}")

    def wait_run(self, run_id: str, timeout: float = 3600.0, every: float = 0.5) -> dict[str, Any]:
        """Polls the run until it has ended (or ``timeout`` seconds passed: SilkError)."""
        until = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if run.get("state") in TERMINAL:
                return run
            if time.monotonic() >= until:
                raise SilkError(f"run {run_id} has not ended after {timeout} s", code="timeout")
            time.sleep(every)

    def _call(self, method: str, path: str, body: Any = None, idempotent: bool = True) -> Any:
        url = f"{self.api_url}/api/v1{path}"
        return _send(self._http, self._retries, method, url, path, body, idempotent=idempotent)


def _segment(s: str) -> str:
    """``s`` as one path segment."""
    return quote(s, safe="")
